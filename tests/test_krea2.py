"""Krea 2 (Raw and Turbo) through the family contract, on a tiny real-architecture pipeline
(CPU).

- recognised from its model ids and from its files (``Krea2Pipeline``; Turbo by the
  pipeline's ``is_distilled``), never as another family, with the pipeline's defaults;
- the published configs are diffusers' Krea 2 transformer and hold the default targets;
- stage 1 encodes exactly as ``Krea2Pipeline`` does (the tapped hidden states and mask,
  the latents); dropping the padding changes nothing the transformer computes;
- the reference's Krea-2-Raw / -Turbo LoRA scripts import into this family with only the
  script path changed (one-shot and split), their single-file sources read as the diffusers
  layout's components and named in the notes; their targets reach the same modules;
- the reference and ComfyUI exports name the original checkpoint's modules, and diffusers'
  own Krea 2 LoRA converter reads them back to the same modules.
Training under ZeRO-3 offload, the diffusers export, samples and resume are checked for
every family in tests/test_every_family.py.
"""
from __future__ import annotations

import pytest

from backend.families.krea2 import RAW, SPEC, TARGETS, TURBO
from tests.harness.families import family_cases

FAMILY = SPEC.name
CASE = next(c for c in family_cases() if c.family == FAMILY)
PROMPT = "a blue triangle on a white background"
REFERENCE = """accelerate launch examples/krea2/model_training/train.py \\
  --dataset_base_path data/diffsynth_example_dataset/krea2/Krea-2-{v} \\
  --dataset_metadata_path data/diffsynth_example_dataset/krea2/Krea-2-{v}/metadata.csv \\
  --max_pixels 1048576 \\
  --dataset_repeat 50 \\
  --model_id_with_origin_paths "krea/Krea-2-{v}:{f}.safetensors,Qwen/Qwen3-VL-4B-Instruct:*.safetensors,Qwen/Qwen-Image:vae/diffusion_pytorch_model.safetensors" \\
  --tokenizer_path "Qwen/Qwen3-VL-4B-Instruct:" \\
  --learning_rate 1e-4 \\
  --num_epochs 5 \\
  --remove_prefix_in_ckpt "pipe.dit." \\
  --output_path "./models/train/Krea-2-{v}_lora" \\
  --lora_base_model "dit" \\
  --lora_target_modules "wq,wk,wv,gate,wo,gate,up,down,first,tmlp.0,tmlp.2,projector,txtmlp.1,txtmlp.3,last.linear,tproj.1" \\
  --lora_rank 32 \\
  --use_gradient_checkpointing \\
  --find_unused_parameters \\
  --align_to_opensource_format{task}
"""


@pytest.fixture(scope="module")
def tiny_dir(family_runs):
    return family_runs.models(CASE) / RAW


def test_recognised_from_its_model_ids_with_the_pipelines_defaults():
    from backend.config.schema import family_defaults
    from backend.families import recognise

    assert recognise(f"{RAW}:transformer/*.safetensors")[0] == FAMILY
    family, variant = recognise(f"{TURBO}:turbo.safetensors")
    assert (family, variant.name) == (FAMILY, "krea2_turbo")
    raw = family_defaults(FAMILY, "krea2_raw")
    turbo = family_defaults(FAMILY, "krea2_turbo")
    assert (raw["sample_steps"], raw["sample_cfg"]) == (28, 5.5)   # guidance_scale 4.5
    assert (turbo["sample_steps"], turbo["sample_cfg"]) == (8, 1.0)  # no guidance


@pytest.mark.slow
def test_recognised_from_its_files_turbo_by_is_distilled(tmp_path, tiny_dir):
    from backend.families import get_family, recognise

    assert recognise(str(tiny_dir)) [1].name == "krea2_raw"
    assert recognise(str(tiny_dir / "transformer"))[0] == FAMILY
    turbo = get_family(FAMILY).build_tiny(tmp_path / "turbo", variant="krea2_turbo")
    assert recognise(str(turbo))[1].name == "krea2_turbo"


def test_published_transformer_is_diffusers_krea2_and_holds_the_default_targets():
    import inspect

    from diffusers import Krea2Transformer2DModel

    from backend.families import get_family
    from backend.models.lora import matches

    published = get_family(FAMILY).published_configs()["transformer"]
    defaults = {k: v.default for k, v in inspect.signature(
        Krea2Transformer2DModel.__init__).parameters.items() if k != "self"}
    assert {k: published[k] for k in defaults} == {
        k: list(v) if isinstance(v, tuple) else v for k, v in defaults.items()}
    names = get_family(FAMILY).lora_module_map()
    for target in TARGETS.split(","):
        assert any(matches(n, target) for n in names), target


@pytest.mark.slow
def test_stage1_encodes_as_the_pipeline_does(tiny_dir):
    import torch
    from diffusers import Krea2Pipeline

    from backend.families import get_family

    family = get_family(FAMILY)
    pipe = Krea2Pipeline.from_pretrained(str(tiny_dir), torch_dtype=torch.float32)
    dirs = {c: tiny_dir / c for c in ("text_encoder", "vae", "tokenizer")}
    for offload in ("none", "model", "sequential"):
        enc = family.load_encoder(dirs, torch.float32, "cpu", offload=offload)
        emb, mask = enc.encode_prompt(PROMPT)
        want, want_mask = pipe.encode_prompt(PROMPT, device="cpu")
        assert torch.equal(emb, want[:, want_mask[0]]), offload
        assert mask.all() and mask.shape[1] == int(want_mask.sum())
        pixels = torch.rand(1, 3, 64, 48) * 2 - 1
        z = pipe.vae.encode(pixels.unsqueeze(2)).latent_dist.mean[:, :, 0]
        mean = torch.tensor(pipe.vae.config.latents_mean).view(1, -1, 1, 1)
        std = torch.tensor(pipe.vae.config.latents_std).view(1, -1, 1, 1)
        assert torch.allclose(enc.encode_image(pixels), (z - mean) / std, atol=1e-6)
    # The pipeline feeds the padded embedding with its mask; the cache's unpadded one gives
    # the transformer's same prediction.
    from backend.families.krea2.adapter import pack_latents, predict
    lat = torch.randn(1, 16, 8, 6)
    sigma = torch.tensor(0.7)
    with torch.no_grad():
        ours = predict(pipe.transformer, lat, sigma, emb, mask)
        ids = pipe.prepare_position_ids(want.shape[1], 4, 3, "cpu")
        theirs = pipe.transformer(pack_latents(lat), want, sigma.expand(1), ids,
                                  encoder_attention_mask=want_mask, return_dict=False)[0]
    assert torch.allclose(pack_latents(ours), theirs, atol=1e-5)


@pytest.mark.parametrize("variant,file", [("Raw", "raw"), ("Turbo", "turbo")])
@pytest.mark.parametrize("task", ["", "sft:data_process", "sft:train"])
def test_the_reference_lora_scripts_import_into_this_family(variant, file, task):
    from backend.families import get_family
    from backend.planning.importer import import_commands

    text = REFERENCE.format(v=variant, f=file,
                            task=f" \\\n  --task {task}" if task else "")
    text = text.replace("examples/krea2/model_training/train.py",
                        "-m backend.stages.train")
    result = import_commands(text)
    cfg = result.config
    assert cfg.model_family == FAMILY
    repo = f"krea/Krea-2-{variant}"
    assert cfg.model_id_with_origin_paths.split(",") == [
        f"{repo}:transformer/*.safetensors", f"{repo}:text_encoder/*.safetensors",
        f"{repo}:vae/diffusion_pytorch_model.safetensors"]
    notes = " ".join(str(n) for n in result.notes)
    assert f"{file}.safetensors" in notes and "Qwen3-VL-4B-Instruct:*.safetensors" in notes
    mods = get_family(FAMILY).target_modules(cfg.target_modules())
    assert sorted(mods) == sorted(TARGETS.split(","))


def test_a_config_naming_the_reference_files_is_judged_by_what_they_are_read_as():
    """A run config written by hand with the reference's single files (its VAE file lives in
    another family's repository) validates: the files are judged as the Krea folders they
    are read as. A Krea run with another family's transformer is still refused."""
    from backend.config.errors import ConfigError
    from backend.config.validation import validate

    reference = ("krea/Krea-2-Raw:raw.safetensors,Qwen/Qwen3-VL-4B-Instruct:*.safetensors,"
                 "Qwen/Qwen-Image:vae/diffusion_pytorch_model.safetensors")
    cfg = validate({"model_family": FAMILY, "model_id_with_origin_paths": reference},
                   require_inputs=False)
    assert cfg.model_family == FAMILY
    with pytest.raises(ConfigError) as e:
        validate({"model_family": FAMILY, "model_id_with_origin_paths":
                  "Qwen/Qwen-Image:transformer/diffusion_pytorch_model*.safetensors"},
                 require_inputs=False)
    assert any(p.code == "validation.field_problem" and "model_id_with_origin_paths" in p
               for p in e.value.problems), e.value.problems


def test_reference_and_comfyui_exports_name_the_original_modules(tmp_path):
    import torch
    from diffusers.loaders.lora_conversion_utils import (
        _convert_non_diffusers_krea2_lora_to_diffusers)
    from safetensors.torch import load_file, save_file

    from backend.families import get_family
    from backend.models.export import export_lora

    family = get_family(FAMILY)
    names = [n for n in family.lora_module_map() if any(
        n == t or n.endswith("." + t) for t in family.target_modules(TARGETS.split(",")))]
    sd = {}
    for n in names:
        sd[f"{n}.lora_A.default.weight"] = torch.zeros(2, 4)
        sd[f"{n}.lora_B.default.weight"] = torch.zeros(4, 2)
    src = tmp_path / "lora.safetensors"
    save_file(sd, str(src))
    comfy = load_file(str(export_lora(src, "comfyui", tmp_path / "c", family=FAMILY)))
    ref = load_file(str(export_lora(src, "reference", tmp_path / "r", family=FAMILY)))
    assert "diffusion_model.blocks.0.attn.wq.lora_down.weight" in comfy
    assert "blocks.0.attn.wq.lora_A.default.weight" in ref
    assert "first.lora_A.default.weight" in ref
    # diffusers' converter (the form of the reference trainer and ComfyUI) reads them back.
    back = _convert_non_diffusers_krea2_lora_to_diffusers(
        {"diffusion_model." + k.replace(".default", ""): v for k, v in ref.items()})
    assert {k.removeprefix("transformer.").rsplit(".lora_", 1)[0] for k in back} == set(names)
