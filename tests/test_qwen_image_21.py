"""Qwen-Image-2.1 through the family contract, on a tiny real-architecture pipeline (CPU).

- recognised from its model id and from its files (``QwenImage21Pipeline`` /
  ``QwenImage21Transformer2DModel``), never as Qwen-Image, with the pipeline's defaults;
- the published transformer is diffusers' class defaults and holds the default targets, and
  the estimator reads the published sizes before anything is downloaded;
- stage 1 encodes exactly as ``QwenImage21Pipeline`` does (prompt embeddings, the mask,
  latents of the RGBA image the VAE reads), and the loss calls the transformer as the
  pipeline does.
Training under ZeRO-3 offload, the exports, samples and resume are checked for every family
in tests/test_every_family.py. The reference trainer has no Qwen-Image-2.1 scripts, so no
import test.
"""
from __future__ import annotations

import pytest

from backend.families.qwen_image_21 import REPO, SPEC, TARGETS
from tests.harness.families import family_cases

FAMILY = SPEC.name
CASE = next(c for c in family_cases() if c.family == FAMILY)
PROMPT = "a blue triangle on a white background"


@pytest.fixture(scope="module")
def tiny_dir(family_runs):
    return family_runs.models(CASE) / REPO


def test_recognised_from_its_model_id_with_the_pipelines_defaults():
    from backend.config.schema import family_defaults
    from backend.families import recognise

    assert recognise(f"{REPO}:transformer/*.safetensors")[0] == FAMILY
    assert recognise("Qwen/Qwen-Image:transformer/*.safetensors")[0] == "qwen_image"
    d = family_defaults(FAMILY)
    # QwenImage21Pipeline: 40 steps, true_cfg_scale 1.0, output_resolution 1024.
    assert (d["sample_steps"], d["sample_cfg"]) == (40, 1.0)
    assert (d["sample_height"], d["sample_width"]) == (1024, 1024)
    assert SPEC.size_multiple(None)[0] == 32


@pytest.mark.slow
def test_recognised_from_its_files_not_as_qwen_image(tiny_dir):
    import json

    from backend.families import foreign_sources, recognise

    assert json.loads((tiny_dir / "model_index.json").read_text())["_class_name"] == \
        "QwenImage21Pipeline"
    assert recognise(str(tiny_dir))[0] == FAMILY
    assert recognise(str(tiny_dir / "transformer"))[0] == FAMILY
    # Its folder in a Qwen-Image run is another family's, and the reverse by model id.
    assert foreign_sources("qwen_image", str(tiny_dir / "transformer"))
    assert foreign_sources(FAMILY, "Qwen/Qwen-Image:transformer/*.safetensors")


def test_published_transformer_is_diffusers_defaults_and_holds_the_default_targets():
    import inspect

    from diffusers import QwenImage21Transformer2DModel

    from backend.families import get_family
    from backend.models.lora import matches

    published = get_family(FAMILY).published_configs()["transformer"]
    defaults = {k: v.default for k, v in inspect.signature(
        QwenImage21Transformer2DModel.__init__).parameters.items() if k != "self"}
    assert {k: published[k] for k in defaults} == {
        k: list(v) if isinstance(v, tuple) else v for k, v in defaults.items()}
    names = get_family(FAMILY).lora_module_map()
    for target in TARGETS.split(","):
        hits = [n for n in names if matches(n, target)]
        assert len(hits) == published["num_layers"], target


def test_the_estimator_reads_the_published_sizes():
    from backend.config.presets import load_preset
    from backend.planning import estimator

    low = estimator.estimate_memory(load_preset("qwen_image_21_low_vram"))
    assert 7.0e9 < low.params["transformer"] < 7.3e9
    assert 8.5e9 < low.params["text_encoder"] < 9.0e9  # Qwen3-VL-8B
    single = estimator.estimate_memory(load_preset("qwen_image_21_single_gpu"))
    assert low.peak_gpu_gb < 6 < 16 < single.peak_gpu_gb


@pytest.mark.slow
def test_stage1_encodes_and_the_loss_predicts_as_the_pipeline_does(tiny_dir):
    import torch
    from diffusers import (AutoencoderKLQwenImage21, FlowMatchEulerDiscreteScheduler,
                           QwenImage21Pipeline, QwenImage21Transformer2DModel)
    from transformers import Qwen3VLForConditionalGeneration

    from backend.families import get_family
    from backend.families.common import load_chat_tokenizer
    from backend.families.qwen_image_21.adapter import TextProcessor, pack_latents, predict

    family = get_family(FAMILY)
    parts = {c: tiny_dir / c for c in ("transformer", "text_encoder", "vae", "scheduler")}
    # The pipeline from diffusers' and transformers' own loaders (the processor folder's
    # tokenizer stands in for Qwen3VLProcessor, which needs torchvision).
    pipe = QwenImage21Pipeline(
        scheduler=FlowMatchEulerDiscreteScheduler.from_pretrained(str(parts["scheduler"])),
        vae=AutoencoderKLQwenImage21.from_pretrained(str(parts["vae"])),
        text_encoder=Qwen3VLForConditionalGeneration.from_pretrained(
            str(parts["text_encoder"])).eval(),
        processor=TextProcessor(load_chat_tokenizer(tiny_dir / "processor")),
        transformer=QwenImage21Transformer2DModel.from_pretrained(str(parts["transformer"])))
    dirs = {"text_encoder": parts["text_encoder"], "vae": parts["vae"],
            "tokenizer": tiny_dir / "processor"}
    pixels = torch.rand(1, 3, 64, 96) * 2 - 1
    # The VAE reads RGBA: an RGB image, opaque, as the pipeline's RGBA conversion makes it.
    rgba = torch.cat([pixels, torch.ones_like(pixels[:, :1])], 1).unsqueeze(2)
    z = pipe._encode_vae_image(rgba, None)[:, :, 0]
    want, want_mask, image_pad = pipe.encode_prompt(PROMPT, device="cpu")
    assert want_mask is None and not image_pad.any()  # one prompt: nothing padded
    for offload in ("none", "model", "sequential"):
        enc = family.load_encoder(dirs, torch.float32, "cpu", offload=offload)
        emb, mask = enc.encode_prompt(PROMPT)
        assert torch.equal(emb, want), offload
        assert mask.all() and mask.shape == want.shape[:2]
        lat = enc.encode_image(pixels)
        assert lat.shape == (1, 16, 4, 6)  # the tiny VAE: 16 channels, 16 px per cell
        assert torch.allclose(lat, z, atol=1e-6), offload
    # The loss's call of the transformer is the pipeline's (text-to-image, one step).
    sigma = torch.tensor(0.7)
    with torch.no_grad():
        ours = predict(pipe.transformer, lat, sigma, emb, mask)
        img_mask = torch.cat([image_pad, image_pad.new_ones(1, 4 * 6 // 4)], dim=1)
        theirs = pipe.transformer(hidden_states=pack_latents(lat), timestep=sigma.expand(1),
                                  encoder_hidden_states=want, img_shapes=[[(1, 4, 6)]],
                                  img_mask=img_mask, return_dict=False)[0]
    assert torch.allclose(pack_latents(ours), theirs[:, -24:], atol=1e-6)


def test_condition_images_are_refused_without_the_real_processor():
    from backend.families.qwen_image_21.adapter import TextProcessor

    with pytest.raises(ValueError, match="torchvision"):
        TextProcessor(tokenizer=None)(["x"], images=[object()])


def test_the_comfyui_export_fuses_gate_and_up_as_comfyuis_model_does(tiny_dir, tmp_path):
    """ComfyUI's Qwen-Image-2.1 (comfy/ldm/qwen_image21) has one ``img_mlp.gate_up`` layer,
    gate rows first, where diffusers has ``gate_layer`` and ``proj``: the export writes one
    LoRA on it whose change is exactly the two LoRAs' changes stacked (ComfyUI's own rule,
    weight += up @ down * alpha / rank), and reading the export back gives them again. A
    LoRA on one of the two leaves the other's rows unchanged."""
    import torch

    from backend.families import get_family
    from backend.models import lora
    from backend.models.export import export_lora, load_as_diffusers, load_lora_file

    def delta(modules: dict, name: str) -> torch.Tensor:
        a, b = modules[f"{name}.lora_A.default.weight"], modules[f"{name}.lora_B.default.weight"]
        return b.float() @ a.float()

    for targets in (TARGETS, "to_q,img_mlp.proj"):
        model = get_family(FAMILY).load_transformer(tiny_dir / "transformer", torch.float32)
        lora.add_lora(model, 2, targets.split(","))
        g = torch.Generator().manual_seed(5)
        with torch.no_grad():
            for n, p in model.named_parameters():
                if "lora_B" in n:
                    p.copy_(torch.randn(p.shape, generator=g))
        ours = tmp_path / f"{len(targets)}" / "step-1.safetensors"
        tensors = lora.collect_lora_state(model)
        lora.save_lora(ours, tensors, rank=2, target_modules=targets.split(","),
                       model_family=FAMILY)
        comfy = export_lora(ours, "comfyui", out_dir=tmp_path / "c", family=FAMILY,
                            transformer_config=tiny_dir / "transformer")
        keys, meta = load_lora_file(comfy)
        block = "diffusion_model.transformer_blocks.0.img_mlp."
        assert f"{block}gate_up.lora_down.weight" in keys
        assert not [k for k in keys if ".img_mlp.gate_layer." in k or ".img_mlp.proj." in k]
        down, up = keys[f"{block}gate_up.lora_down.weight"], keys[f"{block}gate_up.lora_up.weight"]
        fused = up.float() @ down.float() * keys[f"{block}gate_up.alpha"].item() / down.shape[0]
        mlp = "transformer_blocks.0.img_mlp"
        gate = (delta(tensors, f"{mlp}.gate_layer") if "gate_layer" in targets
                else torch.zeros(fused.shape[0] // 2, fused.shape[1]))
        torch.testing.assert_close(fused, torch.cat([gate, delta(tensors, f"{mlp}.proj")]))
        # Read back (the sample stage's path and an export to another format): the parts.
        back = load_as_diffusers(comfy)
        torch.testing.assert_close(
            back[f"transformer.{mlp}.proj.lora_B.weight"].float()
            @ back[f"transformer.{mlp}.proj.lora_A.weight"].float(),
            delta(tensors, f"{mlp}.proj"))
        again = export_lora(comfy, "reference", out_dir=tmp_path / "r", family=FAMILY,
                            transformer_config=tiny_dir / "transformer")
        assert f"{mlp}.proj.lora_A.default.weight" in load_lora_file(again)[0]
