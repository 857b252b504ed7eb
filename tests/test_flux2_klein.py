"""FLUX.2 [klein] through the family contract, on a tiny real-architecture pipeline (CPU).

- stage 1 encodes exactly as ``Flux2KleinPipeline`` does, in every offload mode;
- the family's shared LoRA (stage 1 + stage 2 under DeepSpeed ZeRO-3 with parameter and
  optimizer offload; its loss, exports, samples and resume are checked for every family in
  tests/test_every_family.py) trains every block; the diffusers export changes what
  ``Flux2KleinPipeline.load_lora_weights`` renders and applies exactly the saved LoRA; every
  ComfyUI key is one ComfyUI's FLUX key map accepts and maps to a Linear of the model;
- the reference trainer's klein-base LoRA commands and its split-training script import
  into configs of this family with the flags' values.
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from backend.families.flux2_klein import (BASE_4B, BASE_9B, BLOCK_TARGETS, DISTILLED_4B,
                                          DISTILLED_9B, SPEC, single_block_targets)
from tests.harness.flux2 import (check_comfyui_export, check_stage1_encodes_as_the_pipeline,
                                 flux2_pipeline, lora_on_targets, render)
from tests.harness.families import family_cases

FAMILY = SPEC.name
RANK = 4
CASE = next(c for c in family_cases() if c.family == FAMILY)  # the shared LoRA's


# ------------------------------------------------------------------------------------------
# Fixtures: the tiny pipeline under both repo names, a data set, the stage-1 cache
# ------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def models_root(family_runs) -> Path:
    """The family's shared tiny pipeline (tests/harness/families.py), as the distilled repo
    (stage 1: text encoder, VAE, tokenizer) and as the base repo (stage 2: transformer), as
    the reference's script names them."""
    return family_runs.models(CASE)


@pytest.fixture(scope="module")
def tiny_dir(models_root) -> Path:
    return models_root / BASE_4B


@pytest.fixture(scope="module")
def cache(family_runs) -> Path:
    """The shared stage-1 cache: the family's default sources, offline."""
    return family_runs.cache(CASE)


def _pipeline(tiny_dir):
    return flux2_pipeline(tiny_dir, "Flux2KleinPipeline")


def _render(pipe):
    return render(FAMILY, pipe, cfg=1.0)


# ------------------------------------------------------------------------------------------
# Stage 1
# ------------------------------------------------------------------------------------------
def test_stage1_encodes_as_the_pipeline_does_in_every_offload_mode(tiny_dir):
    check_stage1_encodes_as_the_pipeline(FAMILY, _pipeline(tiny_dir), tiny_dir,
                                         "a blue triangle on a white background")


def test_the_cache_holds_what_stage_2_reads(cache):
    from backend.data.cache import load_cached_samples, read_manifest

    assert read_manifest(cache)["family"] == FAMILY
    samples = load_cached_samples(cache)
    assert len(samples) == 4
    assert {k for s in samples for k in s} == {"prompt_emb", "latents", "height", "width"}


# ------------------------------------------------------------------------------------------
# Stage 2 under ZeRO-3 offload, exports, diffusers and ComfyUI
# ------------------------------------------------------------------------------------------
@pytest.mark.slow
@pytest.mark.timeout(1500)
def test_the_zero3_lora_trains_every_block_and_diffusers_applies_exactly_it(tmp_path,
                                                                           family_runs):
    """The family's shared LoRA, trained by split training under ZeRO-3 offload from the
    default sources (its loss, exports and samples: tests/test_every_family.py): DeepSpeed's
    activation checkpointing, every double and single block trained, the diffusers export
    applies exactly what training saved, and every ComfyUI key is one ComfyUI's FLUX key map
    accepts, a Linear of matching sizes."""
    import numpy as np
    import torch

    from backend.data.cache import load_cached_samples
    from backend.families import get_family
    from backend.families.flux2_klein import adapter as fa
    from backend.models import lora
    from backend.models.export import export_lora

    ckpt, raw, stdout = family_runs.trained(CASE)
    models_root, cache = family_runs.models(CASE), family_runs.cache(CASE)
    tiny_dir = models_root / BASE_4B
    family = get_family(FAMILY)
    assert "DeepSpeed activation checkpointing configured" in stdout
    assert "transformer built partitioned" in stdout
    args = json.loads((ckpt.parent / "training_args.json").read_text())
    assert args["zero_stage"] == 3 and args["model_family"] == FAMILY
    assert Path(args["resolved_components"]["transformer"]) == tiny_dir / "transformer"

    # Keys: to_out.0 of the double blocks and each single block's to_out, all trained.
    tensors, meta = lora.read_lora(ckpt)
    assert meta["model_family"] == FAMILY
    for key in ("transformer_blocks.0.attn.to_out.0.lora_A.default.weight",
                "single_transformer_blocks.1.attn.to_out.lora_B.default.weight",
                "single_transformer_blocks.0.attn.to_qkv_mlp_proj.lora_B.default.weight",
                "transformer_blocks.1.ff_context.linear_out.lora_B.default.weight"):
        assert key in tensors, key
    assert all(v.abs().sum() > 0 for k, v in tensors.items() if ".lora_B." in k)

    # diffusers: the pipeline loads the export and renders something else ...
    exported = export_lora(ckpt, "diffusers", out_dir=tmp_path)
    assert exported == tmp_path / f"{ckpt.stem}.diffusers.safetensors"
    pipe = _pipeline(tiny_dir)
    plain = _render(pipe)
    assert np.isfinite(plain).all()
    pipe.load_lora_weights(str(exported))
    with_lora = _render(pipe)
    print(f"[flux2_klein] mean |image change| with the LoRA: "
          f"{np.abs(with_lora - plain).mean():.3f} / 255")
    assert np.abs(with_lora - plain).mean() > 0.01, "the LoRA did not change the image"
    # ... and applies exactly the LoRA training saved.
    trained = family.load_transformer(tiny_dir / "transformer", torch.float32).eval()
    lora.load_lora(trained, ckpt)
    sample = load_cached_samples(cache)[0]
    x = torch.randn(sample["latents"].shape, generator=torch.Generator().manual_seed(1))
    sigma = torch.tensor(0.5)
    with torch.no_grad():
        ours = fa.FLOW.predict(trained, x, sigma, sample["prompt_emb"])
        theirs = fa.FLOW.predict(pipe.transformer, x, sigma, sample["prompt_emb"])
    assert torch.allclose(ours, theirs, atol=1e-5)

    # ComfyUI: every key is one its FLUX key map accepts and a Linear of the model.
    comfy = export_lora(ckpt, "comfyui", out_dir=tmp_path)
    base = family.load_transformer(tiny_dir / "transformer", torch.float32).eval()
    n = check_comfyui_export(comfy, base)
    assert n == len({k.split(".lora_")[0] for k in tensors})


def test_comfyui_export_of_every_target_maps_to_the_model(tmp_path, tiny_dir):
    """Without training: a LoRA on the family's default targets (the published 4B names,
    cut to the tiny model's blocks) exports to keys ComfyUI maps, each a Linear."""
    import torch
    from safetensors.torch import load_file

    from backend.families import get_family
    from backend.models.export import export_lora

    path, state = lora_on_targets(tmp_path, tiny_dir, FAMILY, _targets(2).split(","), RANK, 1.0)
    comfy = export_lora(path, "comfyui", transformer_config=tiny_dir / "transformer")
    fresh = get_family(FAMILY).load_transformer(tiny_dir / "transformer", torch.float32)
    # 2 double blocks x (8 attention + 4 feed-forward Linears) + 2 single blocks x 2.
    assert check_comfyui_export(comfy, fresh) == 2 * 12 + 2 * 2
    # ... and it reads back as the same LoRA.
    back = export_lora(comfy, "reference", out_dir=tmp_path / "back")
    assert {k: v.shape for k, v in load_file(str(back)).items()} == {
        k: v.shape for k, v in state.items()}


def test_diffusers_loads_the_diffusers_export(tmp_path, tiny_dir):
    """A LoRA on the default targets, exported for diffusers, loads with
    ``Flux2KleinPipeline.load_lora_weights`` and changes the rendered image."""
    import numpy as np

    from backend.models.export import export_lora

    path, _ = lora_on_targets(tmp_path, tiny_dir, FAMILY, _targets(2).split(","), RANK, 0.5)
    exported = export_lora(path, "diffusers", transformer_config=tiny_dir / "transformer")
    pipe = _pipeline(tiny_dir)
    plain = _render(pipe)
    pipe.load_lora_weights(str(exported))
    assert np.abs(_render(pipe) - plain).mean() > 1.0


def test_published_configs_hold_the_default_targets():
    from backend.families import get_family
    from backend.families.flux2_klein.published import CONFIGS_9B

    family = get_family(FAMILY)
    shapes = family.lora_module_map(CONFIGS_9B["transformer"])
    targets = f"{BLOCK_TARGETS},{single_block_targets(24)}".split(",")
    for t in targets:
        assert any(n == t or n.endswith("." + t) for n in shapes), t
    # The double blocks' to_out is a list: only to_out.0 is a Linear.
    assert "transformer_blocks.0.attn.to_out.0" in shapes
    assert "transformer_blocks.0.attn.to_out" not in shapes
    assert "single_transformer_blocks.23.attn.to_out" in shapes
    assert family.transformer_shape(CONFIGS_9B["transformer"]) == (32, 4096)
    params = sum(i * o for i, o in shapes.values())
    assert 8.5e9 < params < 9.5e9, params


# ------------------------------------------------------------------------------------------
# The reference's commands
# ------------------------------------------------------------------------------------------
def _targets(n: int) -> str:
    return f"{BLOCK_TARGETS},{single_block_targets(n)}"


def _sources(distilled: str, base: str) -> str:
    return (f"{distilled}:text_encoder/*.safetensors,{base}:transformer/*.safetensors,"
            f"{distilled}:vae/diffusion_pytorch_model.safetensors")


def reference_lora_script(size: str) -> str:
    """The reference's lora/FLUX.2-klein-base-{size}.sh, the script path changed."""
    distilled, base = (DISTILLED_4B, BASE_4B) if size == "4B" else (DISTILLED_9B, BASE_9B)
    n = 20 if size == "4B" else 24
    return f"""modelscope download --dataset DiffSynth-Studio/diffsynth_example_dataset --include "flux2/FLUX.2-klein-base-{size}/*" --local_dir ./data/diffsynth_example_dataset

accelerate launch backend/stages/train.py \\
  --dataset_base_path data/diffsynth_example_dataset/flux2/FLUX.2-klein-base-{size} \\
  --dataset_metadata_path data/diffsynth_example_dataset/flux2/FLUX.2-klein-base-{size}/metadata.csv \\
  --max_pixels 1048576 \\
  --dataset_repeat 50 \\
  --model_id_with_origin_paths "{_sources(distilled, base)}" \\
  --tokenizer_path "{distilled}:tokenizer/" \\
  --learning_rate 1e-4 \\
  --num_epochs 5 \\
  --remove_prefix_in_ckpt "pipe.dit." \\
  --output_path "./models/train/FLUX.2-klein-base-{size}_lora" \\
  --lora_base_model "dit" \\
  --lora_target_modules "{_targets(n)}" \\
  --lora_rank 32 \\
  --use_gradient_checkpointing

# Edit
# accelerate launch examples/flux2/model_training/train.py \\
#   --dataset_base_path data/example_image_dataset \\
#   --lora_rank 32 \\
#   --use_gradient_checkpointing
"""


SPLIT_SCRIPT = f"""modelscope download --dataset DiffSynth-Studio/diffsynth_example_dataset --include "flux2/FLUX.2-klein-base-4B/*" --local_dir ./data/diffsynth_example_dataset

# Stage 1: cache deterministic preprocessing outputs.
accelerate launch backend/stages/train.py \\
  --dataset_base_path data/diffsynth_example_dataset/flux2/FLUX.2-klein-base-4B \\
  --dataset_metadata_path data/diffsynth_example_dataset/flux2/FLUX.2-klein-base-4B/metadata.csv \\
  --max_pixels 1048576 \\
  --dataset_repeat 1 \\
  --model_id_with_origin_paths '{_sources(DISTILLED_4B, BASE_4B)}' \\
  --tokenizer_path {DISTILLED_4B}:tokenizer/ \\
  --learning_rate 1e-4 \\
  --num_epochs 5 \\
  --remove_prefix_in_ckpt pipe.dit. \\
  --output_path ./models/train/FLUX.2-klein-base-4B_lora_cache \\
  --lora_base_model dit \\
  --lora_target_modules {_targets(20)} \\
  --lora_rank 32 \\
  --use_gradient_checkpointing \\
  --offload_models '{BASE_4B}:transformer/*.safetensors' \\
  --task sft:data_process

# Stage 2: train LoRA from the cached dataset.
accelerate launch backend/stages/train.py \\
  --dataset_base_path ./models/train/FLUX.2-klein-base-4B_lora_cache \\
  --max_pixels 1048576 \\
  --dataset_repeat 50 \\
  --model_id_with_origin_paths '{_sources(DISTILLED_4B, BASE_4B)}' \\
  --tokenizer_path {DISTILLED_4B}:tokenizer/ \\
  --learning_rate 1e-4 \\
  --num_epochs 5 \\
  --remove_prefix_in_ckpt pipe.dit. \\
  --output_path ./models/train/FLUX.2-klein-base-4B_lora \\
  --lora_base_model dit \\
  --lora_target_modules {_targets(20)} \\
  --lora_rank 32 \\
  --use_gradient_checkpointing \\
  --offload_models '{DISTILLED_4B}:text_encoder/*.safetensors,{DISTILLED_4B}:vae/diffusion_pytorch_model.safetensors' \\
  --task sft:train
"""


@pytest.mark.parametrize("size", ["4B", "9B"])
def test_the_reference_lora_scripts_import_into_this_family(tmp_path, size):
    from backend.planning.importer import import_commands

    result = import_commands(reference_lora_script(size), base_dir=tmp_path)
    cfg = result.config
    distilled, base = (DISTILLED_4B, BASE_4B) if size == "4B" else (DISTILLED_9B, BASE_9B)
    assert cfg.model_family == FAMILY
    assert not cfg.split_training  # one sft command
    assert cfg.model_id_with_origin_paths == _sources(distilled, base)
    assert cfg.tokenizer_path == f"{distilled}:tokenizer/"
    assert cfg.lora_target_modules == _targets(20 if size == "4B" else 24)
    assert (cfg.lora_rank, cfg.learning_rate, cfg.num_epochs, cfg.dataset_repeat,
            cfg.max_pixels) == (32, 1e-4, 5, 50, 1048576)
    assert cfg.use_gradient_checkpointing and cfg.remove_prefix_in_ckpt == "pipe.dit."
    assert cfg.dataset_base_path == str(
        tmp_path / f"data/diffsynth_example_dataset/flux2/FLUX.2-klein-base-{size}")
    assert result.not_understood == []


def test_the_reference_split_training_script_imports_into_this_family(tmp_path):
    from backend.planning.importer import import_commands

    result = import_commands(SPLIT_SCRIPT, base_dir=tmp_path)
    cfg = result.config
    assert cfg.model_family == FAMILY
    assert cfg.split_training and cfg.stages[:2] == ["data_process", "train"]
    # Data from stage 1, training from stage 2.
    assert cfg.dataset_base_path == str(
        tmp_path / "data/diffsynth_example_dataset/flux2/FLUX.2-klein-base-4B")
    assert cfg.dataset_repeat == 50
    assert cfg.model_id_with_origin_paths == _sources(DISTILLED_4B, BASE_4B)
    assert cfg.tokenizer_path == f"{DISTILLED_4B}:tokenizer/"
    assert cfg.lora_target_modules == _targets(20)
    assert (cfg.lora_rank, cfg.learning_rate, cfg.num_epochs) == (32, 1e-4, 5)
    assert result.not_understood == []
    notes = "\n".join(result.notes)
    assert "--offload_models" in notes


def test_the_estimator_reads_each_variants_published_sizes():
    from backend.planning import estimator
    from backend.config.presets import load_preset

    params = {}
    for size in ("4b", "9b"):
        cfg = load_preset(f"flux2_klein_{size}_low_vram")
        params[size] = estimator.estimate_memory(cfg).params
    assert 3.5e9 < params["4b"]["transformer"] < 4.2e9
    assert 8.5e9 < params["9b"]["transformer"] < 9.5e9
    assert params["9b"]["text_encoder"] > params["4b"]["text_encoder"]
