"""LTX-2 text-to-video, video only (the reference's no-audio variant), end to end on the tiny
real-architecture model built by the family's code.

- recognised from its model id and from a local pipeline's ``_class_name``; clips take 8k+1
  frames (the family's ``frame_multiple``), a count it cannot take names the field;
- stage 1 caches what ``LTX2Pipeline`` computes: its prompt encoding through the connectors
  (both streams' embeddings and the mask) and the video VAE's normalised latents of the
  clip as decoded with PyAV;
- stage 2 under DeepSpeed ZeRO-3 with parameter and optimizer offload: finite losses, a
  LoRA on every attention layer of both streams that changes the transformer's output;
- the diffusers export renders a clip through ``LTX2Pipeline`` (WebM and frame strip);
  the ComfyUI names are the original checkpoint's, which diffusers' own LTX-2 converter
  reads back to every module.

The model, the clips, the cache and the trained LoRA are the session's (``family_runs``,
tests/harness/families.py), shared with the common checks of tests/test_every_family.py.
"""
from __future__ import annotations

import json

import pytest

from backend.families import family_spec, get_family, recognise
from tests.harness.families import family_cases

REPO_ID = "Lightricks/LTX-2"
CASE = next(c for c in family_cases() if c.family == "ltx2")
PROMPT = "a red ball rolls from left to right, zlr style"


def pipeline(models):
    from diffusers import LTX2Pipeline

    pipe = LTX2Pipeline.from_pretrained(str(models / REPO_ID))
    pipe.set_progress_bar_config(disable=True)
    return pipe


def test_recognised_by_id_and_class_and_clips_take_8k_plus_1_frames(tmp_path):
    from backend.config.errors import ConfigError
    from backend.config.validation import validate

    assert recognise(f"{REPO_ID}:transformer/*.safetensors") == ("ltx2", None)
    folder = get_family("ltx2").build_tiny(tmp_path / "tiny")
    assert json.loads((folder / "model_index.json").read_text())["_class_name"] == \
        "LTX2Pipeline"
    assert recognise(str(folder)) == ("ltx2", None)
    assert recognise(str(folder / "transformer")) == ("ltx2", None)
    assert family_spec("ltx2").frame_multiple == 8

    base = {"model_family": "ltx2", "model_id_with_origin_paths": str(folder)}
    assert validate({**base, "num_frames": 9, "frame_buckets": [17, 121]},
                    require_inputs=False).num_frames == 9
    with pytest.raises(ConfigError) as refused:  # 4k+1, not 8k+1
        validate({**base, "num_frames": 5}, require_inputs=False)
    assert "num_frames: must be 8k+1 (got 5; allowed e.g. 1 or 9)" in str(refused.value)
    with pytest.raises(ConfigError) as refused:
        validate({**base, "frame_buckets": [17, 21]}, require_inputs=False)
    assert "frame_buckets: must be 8k+1 (got 21; allowed e.g. 17 or 25)" in str(refused.value)
    # The other video family keeps its 4k+1.
    assert validate({"model_family": "wan", "num_frames": 5},
                    require_inputs=False).num_frames == 5


def test_every_data_process_offload_mode_encodes_the_same(tmp_path):
    """Stage 1's encoder with its weights on the device, moved there per pass (``model``:
    the connectors go with the text encoder) or streamed module by module (``sequential``)
    gives the same tensors."""
    import torch

    family = get_family("ltx2")
    folder = family.build_tiny(tmp_path / "tiny")
    dirs = {c: folder / c for c in family_spec("ltx2").stage_components("data_process")}
    clip = torch.rand((1, 3, 9, 32, 64), generator=torch.Generator().manual_seed(0)) * 2 - 1
    items = [(lambda: clip, PROMPT), (lambda: clip[:, :, :1], "a still yellow square")]
    encoded = {mode: list(family.load_encoder(dirs, torch.float32, "cpu", offload=mode)
                          .encode_samples(items, log=lambda _: None))
               for mode in ("none", "model", "sequential")}
    first = encoded["none"]
    assert [tuple(s["latents"].shape) for s in first] == [(1, 8, 2, 1, 2), (1, 8, 1, 1, 2)]
    for mode in ("model", "sequential"):
        for a, b in zip(first, encoded[mode]):
            assert a.keys() == b.keys()
            assert all(torch.allclose(a[k], b[k], atol=1e-6) for k in a), mode


def test_comfyui_names_are_the_originals_and_diffusers_reads_them_back():
    """Every Linear of the published transformer has a ComfyUI name (the original
    checkpoint's: ``patchify_proj``, ``adaln_single``...) that diffusers' own LTX-2 LoRA
    converter maps back to the module."""
    from diffusers.loaders.lora_conversion_utils import \
        _convert_non_diffusers_ltx2_lora_to_diffusers

    family = get_family("ltx2")
    modules = family.lora_module_map()
    native = {f"diffusion_model.{family.export_module_name(m, 'comfyui')}.lora_A.weight": m
              for m in modules}
    assert "diffusion_model.patchify_proj.lora_A.weight" in native
    assert "diffusion_model.adaln_single.linear.lora_A.weight" in native
    assert "diffusion_model.transformer_blocks.0.audio_to_video_attn.to_q.lora_A.weight" in native
    back = _convert_non_diffusers_ltx2_lora_to_diffusers(dict.fromkeys(native, 0))
    assert sorted(back) == sorted(f"transformer.{m}.lora_A.weight" for m in modules)
    assert all(family.import_module_name(family.export_module_name(m, "comfyui"), "comfyui")
               == m for m in modules)


def test_clip_tokens_and_the_training_schedule():
    """A 512x768 clip of 121 frames is 16 x 24 x 16 latent cells; the schedule runs from
    sigma 1 to 0.1 with weights of mean 1."""
    family = get_family("ltx2")
    assert family.video_tokens(512, 768, 121) == 6144
    schedule = family.training_schedule()
    assert float(schedule.sigmas[0]) == pytest.approx(1.0)
    assert float(schedule.sigmas[-1]) == pytest.approx(0.1)
    assert bool((schedule.sigmas[1:] < schedule.sigmas[:-1]).all())
    assert float(schedule.weights.mean()) == pytest.approx(1.0, rel=1e-4)


@pytest.mark.slow
def test_stage1_caches_what_the_pipeline_computes(family_runs):
    import torch
    from diffusers import LTX2Pipeline

    from backend.config.validation import validate
    from backend.data.cache import load_cached_samples, read_manifest
    from backend.data.video import load_clip

    cache = family_runs.cache(CASE)
    models, data = family_runs.models(CASE), family_runs.dataset(CASE)
    manifest = read_manifest(cache)
    assert manifest["family"] == "ltx2"
    samples = load_cached_samples(cache)
    rows = [e["prompt"] for e in manifest["samples"]]
    pipe = pipeline(models)
    for sample, prompt in zip(samples, rows):
        emb, mask, _, _ = pipe.encode_prompt(prompt, do_classifier_free_guidance=False,
                                             device="cpu")
        video, audio, mask = pipe.connectors(emb, mask, padding_side="left")
        assert sample["prompt_emb"].shape == (1, 1024, 16)
        assert torch.allclose(sample["prompt_emb"], video, atol=1e-5)
        assert torch.allclose(sample["audio_prompt_emb"], audio, atol=1e-5)
        assert torch.equal(sample["prompt_emb_mask"].bool(), mask.bool())

    raw = family_runs.config(CASE, data / "unused")
    cfg = validate({**raw, "dataset_base_path": str(data)}, require_inputs=False)
    index = next(i for i, e in enumerate(manifest["samples"]) if e["prompt"] == PROMPT)
    pixels = load_clip(data / "red.webm", cfg)
    frames = cfg.num_frames
    assert tuple(pixels.shape) == (1, 3, frames, 32, 32)
    z = pipe.vae.encode(pixels).latent_dist.mode()
    z = LTX2Pipeline._normalize_latents(z, pipe.vae.latents_mean, pipe.vae.latents_std)
    assert samples[index]["latents"].shape == (1, 8, (frames - 1) // 8 + 1, 1, 1)
    assert torch.allclose(samples[index]["latents"], z, atol=1e-5)


@pytest.mark.slow
def test_zero3_offload_trains_a_lora_that_changes_the_transformer(family_runs):
    import math

    import torch

    from backend.config.validation import validate
    from backend.core.progress import read_events
    from backend.data.cache import load_cached_samples
    from backend.models.lora import load_lora, read_lora
    from backend.training.samples import component_dirs

    path, raw, out = family_runs.trained(CASE)
    assert "ZeRO-3" in out
    events, _ = read_events(f"{raw['output_path']}/progress.jsonl")
    losses = [e["loss"] for e in events if e["event"] == "step"]
    assert losses and all(math.isfinite(x) for x in losses)

    tensors, meta = read_lora(path)
    modules = {k.split(".lora_", 1)[0] for k in tensors}
    for stream in ("attn1", "attn2", "audio_attn1", "audio_attn2", "audio_to_video_attn",
                   "video_to_audio_attn"):
        assert f"transformer_blocks.1.{stream}.to_out.0" in modules, stream

    cfg = validate(raw)
    family = get_family("ltx2")
    folder = component_dirs(cfg, ["transformer"])["transformer"]
    model = family.load_transformer(folder, torch.float32).eval()
    sample = load_cached_samples(family_runs.cache(CASE))[0]
    schedule = family.training_schedule()
    noise = torch.randn(sample["latents"].shape, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        before = family.loss_at(model, sample, schedule, 500, noise, torch.float32)
        load_lora(model, path)
        after = family.loss_at(model, sample, schedule, 500, noise, torch.float32)
    assert math.isfinite(float(after)) and abs(float(after) - float(before)) > 1e-6


@pytest.mark.slow
def test_the_diffusers_export_renders_a_clip_through_the_pipeline(family_runs, tmp_path):
    import numpy as np
    import torch

    from backend.config.validation import validate
    from backend.data.video import read_video_frames
    from backend.models.export import export_lora

    path, raw, _ = family_runs.trained(CASE)
    cfg = validate(raw)
    models = family_runs.models(CASE)
    exported = export_lora(path, "diffusers", out_dir=tmp_path, family="ltx2",
                           transformer_config=models / REPO_ID / "transformer")
    family = get_family("ltx2")
    pipe = pipeline(models)

    def clip():
        return family.render(pipe, PROMPT, negative_prompt="", steps=2, cfg=3.0, height=32,
                             width=64, num_frames=9,
                             generator=torch.Generator().manual_seed(0))

    base = clip()
    pipe.load_lora_weights(str(exported))
    with_lora = clip()
    assert base.shape == with_lora.shape == (9, 32, 64, 3)
    assert np.isfinite(with_lora).all() and np.abs(with_lora - base).max() > 1e-3

    written = family.save_sample(with_lora, tmp_path / "p00-seed0.webm", cfg)
    assert [p.name for p in written] == ["p00-seed0.webm", "p00-seed0.strip.png"]
    frames = read_video_frames(written[0])
    assert len(frames) == 9 and frames[0].shape == (32, 64, 3)
