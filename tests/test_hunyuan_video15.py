"""HunyuanVideo 1.5 text-to-video and image-to-video, on the tiny real-architecture models built
by the family's code (what only this family has; training, exports, samples and sizes are
the common checks of tests/test_every_family.py).

- recognised from its model ids (480p / 720p, text- / image-to-video) and from a local
  pipeline's classes and transformer config; clips take 4k+1 frames; each model trains on
  its own scheduler's flow shift;
- stage 1's encoder gives ``HunyuanVideo15Pipeline.encode_prompt``'s tensors (the glyph
  encoder's for quoted text) and the VAE's scaled latents, the same in every offload mode;
- the ComfyUI names cover every Linear of the published transformer and read back, the
  query, key and value LoRAs fused as ComfyUI's model fuses them; the estimator's figures
  come from the published configs;
- image-to-video (slow): stage 1 caches the pipeline's first-frame inputs (SigLIP's
  embedding, the first frame's latents and mask), the loss depends on them, and the
  image-to-video pipeline renders a clip from an image.
"""
from __future__ import annotations

import json

import pytest

from backend.families import family_spec, get_family, recognise
from tests.harness.families import cases

T2V = "hunyuanvideo-community/HunyuanVideo-1.5-480p_t2v"
PROMPT = 'a red ball rolls from left to right, the sign says "ZLR", zlr style'
I2V_CASE = next(c for c in cases() if c.id == "hunyuan_video15_480p_i2v")


@pytest.fixture(scope="module")
def tiny_t2v(tmp_path_factory):
    return get_family("hunyuan_video15").build_tiny(tmp_path_factory.mktemp("hv15") / "t2v")


def test_recognised_by_id_and_class_with_its_frames_and_flow_shift(tiny_t2v, tmp_path):
    from backend.config.errors import ConfigError
    from backend.config.validation import validate

    assert recognise(f"{T2V}:transformer/*.safetensors") == (
        "hunyuan_video15", family_spec("hunyuan_video15").variants[0])
    for model_id, variant in (
            ("hunyuanvideo-community/HunyuanVideo-1.5-720p_t2v", "hunyuan_video15_720p_t2v"),
            ("hunyuanvideo-community/HunyuanVideo-1.5-Diffusers-480p_i2v",
             "hunyuan_video15_480p_i2v")):
        assert recognise(f"{model_id}:vae/*.safetensors")[1].name == variant
    assert json.loads((tiny_t2v / "model_index.json").read_text())["_class_name"] == \
        "HunyuanVideo15Pipeline"
    assert recognise(str(tiny_t2v))[0] == "hunyuan_video15"
    # A local image-to-video pipeline by its class; a 720p one by its transformer's size.
    i2v = tmp_path / "i2v"
    i2v.mkdir()
    (i2v / "model_index.json").write_text('{"_class_name": "HunyuanVideo15ImageToVideoPipeline"}')
    assert recognise(str(i2v))[1].name == "hunyuan_video15_480p_i2v"
    (i2v / "transformer").mkdir()
    (i2v / "transformer" / "config.json").write_text(json.dumps(
        {"_class_name": "HunyuanVideo15Transformer3DModel", "target_size": 960,
         "task_type": "i2v"}))
    assert recognise(str(i2v))[1].name == "hunyuan_video15_720p_i2v"

    base = {"model_family": "hunyuan_video15", "model_id_with_origin_paths": str(tiny_t2v)}
    assert validate({**base, "num_frames": 9}, require_inputs=False).num_frames == 9
    with pytest.raises(ConfigError) as refused:
        validate({**base, "num_frames": 8}, require_inputs=False)
    assert "num_frames: must be 4k+1" in str(refused.value)

    family = get_family("hunyuan_video15")
    shifts = {}
    for variant in family_spec("hunyuan_video15").variants:
        sources = variant.defaults.get("model_id_with_origin_paths",
                                       family_spec("hunyuan_video15").defaults[
                                           "model_id_with_origin_paths"])
        cfg = validate({"model_family": "hunyuan_video15",
                        "model_id_with_origin_paths": sources, **variant.defaults},
                       require_inputs=False)
        bound = family.for_config(cfg)
        shifts[variant.name] = (bound.train_shift, bound.input_images)
        # The schedule is the scheduler's: sigma = shift s / (1 + (shift - 1) s).
        sigma = float(bound.training_schedule().sigmas[500])
        assert sigma == pytest.approx(bound.train_shift * 0.5 / (1 + (bound.train_shift - 1) * 0.5))
    assert shifts == {"hunyuan_video15_480p_t2v": (5.0, 0), "hunyuan_video15_720p_t2v": (9.0, 0),
                      "hunyuan_video15_480p_i2v": (5.0, 1), "hunyuan_video15_720p_i2v": (7.0, 1)}


def test_stage1_encodes_as_the_pipeline_in_every_offload_mode(tiny_t2v):
    """The encoder's prompt tensors are ``encode_prompt``'s (the quoted text through the
    glyph encoder: its mask is not empty), its latents the VAE's mode times the scaling
    factor; weights on the device, moved per pass or streamed module by module give the
    same tensors."""
    import torch
    from diffusers import HunyuanVideo15Pipeline

    family = get_family("hunyuan_video15")
    dirs = {c: tiny_t2v / c for c in family_spec("hunyuan_video15")
            .stage_components("data_process")}
    clip = torch.rand((1, 3, 5, 32, 48), generator=torch.Generator().manual_seed(0)) * 2 - 1
    items = [(lambda: clip, PROMPT)]
    encoded = {mode: list(family.load_encoder(dirs, torch.float32, "cpu", offload=mode)
                          .encode_samples(items, log=lambda _: None))[0]
               for mode in ("none", "model", "sequential")}
    pipe = HunyuanVideo15Pipeline.from_pretrained(str(tiny_t2v))
    emb, mask, emb_2, mask_2 = pipe.encode_prompt(PROMPT, device="cpu")
    sample = encoded["none"]
    assert sample["prompt_emb"].shape == (1, 1000, 32) and sample["prompt_emb_2"].shape == (
        1, 256, 16)
    assert float(sample["prompt_emb_mask_2"].sum()) > 0  # "ZLR" reached the glyph encoder
    for key, want in (("prompt_emb", emb), ("prompt_emb_mask", mask),
                      ("prompt_emb_2", emb_2), ("prompt_emb_mask_2", mask_2)):
        assert torch.allclose(sample[key], want, atol=1e-6), key
    with torch.no_grad():
        z = pipe.vae.encode(clip).latent_dist.mode() * pipe.vae.config.scaling_factor
    assert sample["latents"].shape == (1, 8, 2, 2, 3)
    assert torch.allclose(sample["latents"], z, atol=1e-5)
    for mode in ("model", "sequential"):
        assert encoded[mode].keys() == sample.keys()
        assert all(torch.allclose(encoded[mode][k], sample[k], atol=1e-6) for k in sample), mode


def test_comfyui_names_cover_every_linear_and_fuse_query_key_value():
    """Every Linear of the published transformer but the final modulation (its original
    swaps scale and shift) has a ComfyUI name that reads back to it; a LoRA on q, k and v is
    written as one LoRA on ComfyUI's fused ``qkv`` whose change is the three stacked."""
    import torch

    from backend.models.export import fuse_modules

    family = get_family("hunyuan_video15")
    modules = family.lora_module_map()
    named = {}
    for m in modules:
        try:
            named[m] = family.export_module_name(m, "comfyui")
        except KeyError:
            pass
    assert sorted(set(modules) - set(named)) == ["norm_out.linear"]
    assert all(family.import_module_name(n, "comfyui") == m for m, n in named.items())
    assert named["transformer_blocks.53.attn.to_add_out"] == "double_blocks.53.txt_attn.proj"
    assert named["transformer_blocks.0.ff_context.net.0.proj"] == "double_blocks.0.txt_mlp.0"
    assert named["context_embedder.token_refiner.refiner_blocks.1.norm_out.linear"] == \
        "txt_in.individual_token_refiner.blocks.1.adaLN_modulation.1"
    assert named["context_embedder_2.linear_3"] == "byt5_in.fc3"

    g = torch.Generator().manual_seed(0)
    parts = {f"transformer_blocks.0.attn.to_{p}": (torch.randn(2, 8, generator=g),
                                                    torch.randn(8, 2, generator=g), 2.0)
             for p in "qkv"}
    fused = fuse_modules(parts, family.fused_modules["comfyui"])
    assert list(fused) == ["transformer_blocks.0.attn.to_qkv"]
    assert family.export_module_name("transformer_blocks.0.attn.to_qkv", "comfyui") == \
        "double_blocks.0.img_attn.qkv"
    down, up, _ = fused["transformer_blocks.0.attn.to_qkv"]
    stacked = torch.cat([b @ a for a, b, _ in parts.values()])
    assert torch.allclose(up @ down, stacked, atol=1e-5)


def comfyui_hunyuan15_linears(depth: int) -> set[str]:
    """The Linear modules of ComfyUI's HunyuanVideo 1.5 model (``comfy/ldm/hunyuan_video/
    model.py``: ``HunyuanVideo`` with FLUX's ``DoubleStreamBlock``, ``MLPEmbedder`` and
    ``LastLayer``, its ``TokenRefiner`` and ``ByT5Mapper``, and an ``MLPProj`` as
    ``vision_in``; no single-stream blocks, no vector or guidance input), transcribed from
    its module tree. ComfyUI's LoRA loader takes ``diffusion_model.<module>`` for each."""
    names = {"time_in.in_layer", "time_in.out_layer", "txt_in.input_embedder",
             "txt_in.t_embedder.in_layer", "txt_in.t_embedder.out_layer",
             "txt_in.c_embedder.in_layer", "txt_in.c_embedder.out_layer",
             "byt5_in.fc1", "byt5_in.fc2", "byt5_in.fc3", "vision_in.proj.1",
             "vision_in.proj.3", "final_layer.linear", "final_layer.adaLN_modulation.1"}
    for i in range(2):
        names |= {f"txt_in.individual_token_refiner.blocks.{i}.{n}" for n in (
            "adaLN_modulation.1", "self_attn.qkv", "self_attn.proj", "mlp.0", "mlp.2")}
    for i in range(depth):
        names |= {f"double_blocks.{i}.{side}_{n}" for side in ("img", "txt") for n in (
            "mod.lin", "attn.qkv", "attn.proj", "mlp.0", "mlp.2")}
    return names


def test_comfyui_export_names_are_modules_of_comfyuis_model():
    """What a ComfyUI export names (the fused query/key/value as one) are Linear modules of
    ComfyUI's own HunyuanVideo 1.5 model, and they cover all of them but the final layer's
    modulation (its original swaps scale and shift)."""
    family = get_family("hunyuan_video15")
    fused_parts = {p for parts in family.fused_modules["comfyui"].values() for p in parts}
    exported = set()
    for m in family.lora_module_map():
        if any(m.endswith("." + p) for p in fused_parts):
            continue  # written through its fused layer
        try:
            exported.add(family.export_module_name(m, "comfyui"))
        except KeyError:
            pass
    for block in range(54):
        for fused in family.fused_modules["comfyui"]:
            exported.add(family.export_module_name(f"transformer_blocks.{block}.{fused}",
                                                   "comfyui"))
    for block in range(2):
        exported.add(family.export_module_name(
            f"context_embedder.token_refiner.refiner_blocks.{block}.attn.to_qkv", "comfyui"))
    comfy = comfyui_hunyuan15_linears(54)
    assert sorted(exported - comfy) == []
    assert sorted(comfy - exported) == ["final_layer.adaLN_modulation.1"]


def test_estimator_figures_come_from_the_published_configs():
    """The published transformer is 8.3B parameters in 54 blocks of width 2048; a 480p clip of
    121 frames (848x480) is 31 x 30 x 53 latent cells, one token each."""
    from backend.config.validation import validate
    from backend.planning.estimator import estimate_memory

    family = get_family("hunyuan_video15")
    config = family.published_configs()["transformer"]
    assert family.transformer_shape(config) == (54, 2048)
    assert family.video_tokens(480, 848, 121) == 31 * 30 * 53
    assert family.video_tokens(720, 1280, 121) == 31 * 45 * 80
    assert family.variant_configs("hunyuan_video15_720p_t2v")["transformer"]["target_size"] == 960
    cfg = validate({"model_family": "hunyuan_video15", "height": 480, "width": 848},
                   require_inputs=False)
    estimate = estimate_memory(cfg)
    assert set(estimate.sources.values()) == {"published"}
    assert estimate.params["transformer"] == pytest.approx(8.33e9, rel=0.01)
    assert estimate.image_tokens == 31 * 30 * 53


@pytest.mark.slow
def test_i2v_caches_the_pipelines_first_frame_inputs_and_renders_from_an_image(family_runs,
                                                                               tmp_path):
    """Stage 1 of the 480p image-to-video model caches what
    ``HunyuanVideo15ImageToVideoPipeline`` computes from each clip's first frame (SigLIP's
    embedding; the frame's latents in the first latent frame and a mask of ones there); the
    loss changes with them; the pipeline renders a clip from an image."""
    import numpy as np
    import torch
    from diffusers import HunyuanVideo15ImageToVideoPipeline

    from backend.config.validation import validate
    from backend.data.cache import load_cached_samples, read_manifest
    from backend.data.video import load_clip
    from backend.families.common import frame_to_pil as to_pil

    cache = family_runs.cache(I2V_CASE)
    models, data = family_runs.models(I2V_CASE), family_runs.dataset(I2V_CASE)
    manifest = read_manifest(cache)
    samples = load_cached_samples(cache)
    index = next(i for i, e in enumerate(manifest["samples"]) if e["file"] and
                 e["prompt"].startswith("a red ball"))
    sample = samples[index]
    raw = family_runs.config(I2V_CASE, tmp_path / "unused")
    cfg = validate({**raw, "dataset_base_path": str(data)}, require_inputs=False)
    pixels = load_clip(data / "red.webm", cfg)
    first = to_pil(pixels[0, :, 0])

    repo = I2V_CASE.model_ids[0]
    pipe = HunyuanVideo15ImageToVideoPipeline.from_pretrained(str(models / repo))
    pipe.set_progress_bar_config(disable=True)
    with torch.no_grad():
        embeds = pipe.encode_image(first, 1, "cpu", torch.float32)
        condition, mask = pipe.prepare_cond_latents_and_mask(
            sample["latents"], first, 1, 32, 32, torch.float32, "cpu")
    assert sample["image_embeds"].shape == (1, 16, 16)
    assert torch.allclose(sample["image_embeds"], embeds, atol=1e-5)
    assert sample["condition"].shape == (1, 9, 2, 2, 2)
    assert torch.allclose(sample["condition"], torch.cat([condition, mask], 1), atol=1e-5)
    assert float(sample["condition"][:, :8, 1:].abs().sum()) == 0
    assert bool((sample["condition"][:, 8, 0] == 1).all())

    family = get_family("hunyuan_video15").for_config(cfg)
    model = family.load_transformer(models / repo / "transformer", torch.float32).eval()
    noise = torch.randn(sample["latents"].shape, generator=torch.Generator().manual_seed(1))
    schedule = family.training_schedule()
    with torch.no_grad():
        given = float(family.loss_at(model, sample, schedule, 500, noise, torch.float32))
        without = {k: v for k, v in sample.items() if k not in ("condition", "image_embeds")}
        plain = float(family.loss_at(model, without, schedule, 500, noise, torch.float32))
    assert np.isfinite(given) and abs(given - plain) > 1e-6

    frames = family.render(pipe, "a red ball rolls", negative_prompt="", steps=2, cfg=6.0,
                           height=32, width=32, num_frames=5, images=[first],
                           generator=torch.Generator().manual_seed(0))
    assert frames.shape == (5, 32, 32, 3) and np.isfinite(frames).all()
    with pytest.raises(ValueError, match="sample_images"):
        family.render(pipe, "a red ball", negative_prompt="", steps=1, cfg=1.0, height=32,
                      width=32, num_frames=5, images=[], generator=None)
