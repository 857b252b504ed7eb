"""Wan2.2-TI2V-5B end to end on a tiny real-architecture model built by the family's code
(``build_tiny_wan_ti2v``: the Wan 2.2 VAE's layout, 48 latent channels, ``expand_timesteps``).

- the variant is named by its model id and found in a local pipeline folder; its defaults
  are the model card's; its published configs are a 5B transformer and the Wan 2.2 VAE;
- stage 1 caches what the pipeline computes with the Wan 2.2 VAE; stage 2 under DeepSpeed
  ZeRO-3 with offload lowers the held-out loss; the diffusers export loads into
  ``WanPipeline`` (expand_timesteps) and changes the clip;
- image-conditioned (``extra_inputs: input_image``): stage 1 caches the first frame's clean
  latent as ``WanImageToVideoPipeline`` builds it; training leaves that frame out of the
  loss; the LoRA changes the pipeline's clip from a first frame.

The clips and stage helpers are tests/test_wan.py's.
"""
from __future__ import annotations

from pathlib import Path

import pytest

from backend.families.wan import TI2V_5B, sources
from tests.harness.clips import CLIPS, SIZE, moving_square, stage1, tiny_models, train
from tests.harness.seeds import SEED_ZERO3
from tests.harness.stages import write_accelerate_config

TI2V_DIFFUSERS = TI2V_5B + "-Diffusers"
FRAMES = 5


@pytest.fixture(scope="module")
def ti2v_models(tmp_path_factory) -> Path:
    return tiny_models(tmp_path_factory, "build_tiny_wan_ti2v", TI2V_DIFFUSERS)


@pytest.fixture(scope="module")
def ti2v_stage1(tmp_path_factory, ti2v_models, wan_data):
    return stage1(tmp_path_factory.mktemp("ti2v_cache"), ti2v_models, wan_data,
                  sources(TI2V_5B), FRAMES)


def assert_loss_falls(models: Path, cfg, ckpt: Path, samples, what: str) -> None:
    """The cached samples' held-out loss falls by over 10% with the LoRA ``ckpt`` loaded."""
    from backend.models import lora
    from backend.families import get_family

    family = get_family("wan").for_config(cfg)
    tdir = models / TI2V_DIFFUSERS / "transformer"
    before = family.eval_loss(family.load_transformer(tdir), samples)
    trained = family.load_transformer(tdir)
    lora.load_lora(trained, ckpt)
    after = family.eval_loss(trained, samples)
    print(f"{what} held-out loss {before:.4f} -> {after:.4f}")
    assert after < before * 0.9, (before, after)


def pipeline(models: Path, image: bool = False):
    from diffusers import WanImageToVideoPipeline, WanPipeline

    cls = WanImageToVideoPipeline if image else WanPipeline
    pipe = cls.from_pretrained(str(models / TI2V_DIFFUSERS))
    pipe.set_progress_bar_config(disable=True)
    assert pipe.config.expand_timesteps
    return pipe


def clip(pipe, **kw):
    import torch

    return pipe(prompt=CLIPS[0][3], num_inference_steps=2, height=SIZE, width=SIZE,
                num_frames=FRAMES, guidance_scale=1.0, output_type="np",
                generator=torch.Generator().manual_seed(0), **kw).frames[0]


def test_ti2v_is_named_by_its_id_and_found_in_a_local_folder(ti2v_models):
    """The model id picks the variant and the model card's defaults; a local pipeline folder
    with expand_timesteps binds the same adapter; the published configs are the 5B."""
    from accelerate import init_empty_weights
    from diffusers import WanTransformer3DModel

    from backend.config.validation import validate
    from backend.families import family_of
    from backend.families import get_family

    cfg = validate({"model_id_with_origin_paths": sources(TI2V_5B)}, require_inputs=False)
    assert family_of(cfg.to_dict()) == ("wan", "wan22_ti2v_5b")
    assert (cfg.sample_height, cfg.sample_width, cfg.sample_num_frames, cfg.num_frames,
            cfg.sample_fps, cfg.max_pixels) == (704, 1280, 121, 121, 24, 704 * 1280)
    family = get_family("wan")
    bound = family.for_config(cfg)
    assert bound.title == "Wan2.2-TI2V-5B" and bound.input_images == 0
    assert bound.vae_scale_factor == 16 and bound.video_tokens(704, 1280, 121) == 31 * 22 * 40
    image = family.for_config(cfg.model_copy(update={"extra_inputs": "input_image"}))
    assert image.input_images == 1 and "image_encoder" not in image.spec.stage_components(
        "data_process")  # no CLIP

    local = validate({"model_family": "wan", "model_id_with_origin_paths":
                      str(ti2v_models / TI2V_DIFFUSERS)}, require_inputs=False)
    assert family.for_config(local).title == "Wan2.2-TI2V-5B"
    # The folder alone (no family, no id) is the variant, with the model card's defaults.
    found = validate({"model_id_with_origin_paths": str(ti2v_models / TI2V_DIFFUSERS)},
                     require_inputs=False)
    assert family_of(found.to_dict()) == ("wan", "wan22_ti2v_5b")
    assert (found.sample_num_frames, found.sample_fps) == (121, 24)
    t2v = validate({"model_family": "wan"}, require_inputs=False)
    assert family.for_config(t2v) is family

    configs = family.variant_configs("wan22_ti2v_5b")
    assert configs["vae"]["z_dim"] == 48 and configs["vae"]["is_residual"]
    t = {k: v for k, v in configs["transformer"].items() if not k.startswith("_")}
    with init_empty_weights():
        model = WanTransformer3DModel(**t)
    n = sum(p.numel() for p in model.parameters())
    assert 4.9e9 < n < 5.1e9, n


@pytest.mark.slow
@pytest.mark.timeout(1500)
def test_ti2v_stage1_and_zero3_training_change_the_pipelines_clip(
        tmp_path, ti2v_models, wan_data, ti2v_stage1):
    """Stage 1 caches the Wan 2.2 VAE's normalised latents (48 channels, 16x smaller);
    ZeRO-3 training with offload lowers the held-out loss; the diffusers export loads into
    WanPipeline with expand_timesteps and changes the clip."""
    import torch

    from backend.data.cache import load_cached_samples
    from backend.config.validation import validate
    from backend.models.export import export_lora
    from backend.data.video import load_clip

    cache, _ = ti2v_stage1
    samples = load_cached_samples(cache)
    assert [tuple(s["latents"].shape) for s in samples] == \
        [(1, 48, 2, SIZE // 16, SIZE // 16)] * 3 + [(1, 48, 1, SIZE // 16, SIZE // 16)]
    pipe = pipeline(ti2v_models)
    cfg = validate({"model_family": "wan", "dataset_base_path": str(wan_data),
                    "num_frames": FRAMES, "height": SIZE, "width": SIZE,
                    "model_id_with_origin_paths": sources(TI2V_5B)}, require_inputs=False)
    vae = pipe.vae
    z = vae.encode(load_clip(wan_data / "blue.mp4", cfg)).latent_dist.mode()
    mean = torch.tensor(vae.config.latents_mean).view(1, 48, 1, 1, 1)
    std = torch.tensor(vae.config.latents_std).view(1, 48, 1, 1, 1)
    assert torch.allclose(samples[1]["latents"], (z - mean) / std, atol=1e-4)

    folder = tmp_path / "run"
    acc = write_accelerate_config(folder, "z3", ds_config=SEED_ZERO3, zero3_init_flag=True)
    out, _ = train(folder, acc, ti2v_models, cache,
                   f"{TI2V_DIFFUSERS}:transformer/*.safetensors", "--dataset_repeat", "6",
                   "--save_steps", "24", "--initialize_model_on_cpu")
    ckpt = out / "step-24.safetensors"
    assert ckpt.is_file(), sorted(p.name for p in out.iterdir())

    assert_loss_falls(ti2v_models, cfg, ckpt, samples, "ti2v")

    base = clip(pipe)
    pipe.load_lora_weights(str(export_lora(ckpt, "diffusers", tmp_path)), adapter_name="d")
    assert base.shape == (FRAMES, SIZE, SIZE, 3)
    assert float(abs(clip(pipe) - base).mean()) > 1e-3


# ------------------------------------------------------------------------------------------
# Image-conditioned: the first frame kept clean
# ------------------------------------------------------------------------------------------
@pytest.mark.slow
@pytest.mark.timeout(1500)
def test_ti2v_from_a_first_frame_trains_on_the_other_frames_and_keeps_the_first(
        tmp_path, tmp_path_factory, ti2v_models, wan_data):
    """With extra_inputs input_image stage 1 caches each clip's first frame as
    WanImageToVideoPipeline (expand_timesteps) encodes it; training lowers the held-out loss
    of the frames after it; the LoRA changes the pipeline's clip but not its first frame,
    and the sample stage renders from the image in sample_images."""
    import numpy as np
    import torch
    from PIL import Image

    from backend.data.cache import load_cached_samples
    from backend.config.validation import validate
    from backend.models.export import export_lora
    from backend.training.samples import render_samples
    from backend.data.video import read_video_frames

    cache, _ = stage1(tmp_path_factory.mktemp("ti2v_image_cache"), ti2v_models, wan_data,
                      sources(TI2V_5B), FRAMES, "--extra_inputs", "input_image")
    samples = load_cached_samples(cache)
    pipe = pipeline(ti2v_models, image=True)
    # The folder of PNG frames (lossless): its first frame is exactly the one drawn here.
    first = Image.fromarray(moving_square(CLIPS[2][1], CLIPS[2][2])[0])
    with torch.no_grad():
        pixels = pipe.video_processor.preprocess(first, height=SIZE, width=SIZE)
        _, condition, mask = pipe.prepare_latents(pixels, 1, 48, SIZE, SIZE, FRAMES,
                                                  torch.float32, "cpu", None)
    assert tuple(samples[2]["first_frame"].shape) == (1, 48, 1, SIZE // 16, SIZE // 16)
    assert torch.allclose(samples[2]["first_frame"], condition, atol=1e-4)
    assert not mask[:, :, 0].any() and mask[:, :, 1:].all()

    folder = tmp_path / "run"
    out, _ = train(folder, write_accelerate_config(folder, "plain"), ti2v_models, cache,
                   f"{TI2V_DIFFUSERS}:transformer/*.safetensors", "--extra_inputs",
                   "input_image", "--dataset_repeat", "6", "--save_steps", "24",
                   "--mixed_precision", "no")
    ckpt = out / "step-24.safetensors"
    cfg = validate({"model_family": "wan", "models_dir": str(ti2v_models), "offline": True,
                    "model_id_with_origin_paths": sources(TI2V_5B),
                    "extra_inputs": "input_image"}, require_inputs=False)
    assert_loss_falls(ti2v_models, cfg, ckpt, samples, "ti2v image-conditioned")

    base = clip(pipe, image=first)
    pipe.load_lora_weights(str(export_lora(ckpt, "diffusers", tmp_path)), adapter_name="d")
    with_lora = clip(pipe, image=first)
    assert float(abs(with_lora[1:] - base[1:]).mean()) > 1e-3
    assert float(abs(with_lora[0] - base[0]).max()) < 1e-4  # the clean first frame

    first.save(tmp_path / "first.png")
    cfg = cfg.model_copy(update={
        "stages": ["sample"], "sample_prompts": ["a green dot, zlr style"],
        "sample_images": [str(tmp_path / "first.png")], "sample_steps": 2, "sample_cfg": 1.0,
        "sample_height": SIZE, "sample_width": SIZE, "sample_num_frames": FRAMES,
        "sample_fps": 8, "sample_lora_scales": [0, 1]})
    entries = render_samples(cfg, [ckpt], tmp_path / "samples")
    clips = [np.stack(read_video_frames(tmp_path / "samples" / e["image"])).astype(np.float32)
             for e in entries]
    assert [e["inputs"] for e in entries] == [[str(tmp_path / "first.png")]] * 2
    assert clips[0].shape == (FRAMES, SIZE, SIZE, 3)
    assert float(np.abs(clips[0] - clips[1]).mean()) > 0.5


PRESET = "wan_2_2_ti2v_5b_24gb"


def test_the_24gb_preset_binds_the_ti2v_adapter():
    """The run it loads is a TI2V-5B's (tests/test_presets.py loads, round-trips and plans
    every bundled preset, this one included)."""
    from backend.config.presets import load_preset
    from backend.families import get_family

    cfg = load_preset(PRESET)
    assert (cfg.height, cfg.width, cfg.num_frames, cfg.sample_fps) == (704, 1280, 121, 24)
    assert get_family("wan").for_config(cfg).title == "Wan2.2-TI2V-5B"
