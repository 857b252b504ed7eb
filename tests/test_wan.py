"""Wan 2.1 text-to-video end to end on tiny real-architecture models built by the family's code.

- clips made here with PyAV (VP9 WebM, H.264 MP4, a folder of PNG frames, a still image as a
  one-frame clip); stage 1 from the reference trainer's own sources (the original
  repositories' pickled ``.pth`` files), which run against the ``-Diffusers`` layout without
  a pickle being read, and caches what ``WanPipeline`` computes;
- bad clips are refused before any model loads, each naming its row;
- stage 2 under DeepSpeed ZeRO-3 with parameter and optimizer offload, with the reference's
  target spelling ``q,k,v,o,ffn.0,ffn.2``: the held-out loss falls;
- the diffusers export loads with ``WanPipeline.load_lora_weights`` and changes the clip; the
  ComfyUI export holds exactly Wan's native names, and diffusers' own Wan key conversion
  reads it back to the same clip;
- the sample stage's code writes WebM clips (base and LoRA, same seed) with frame strips.
"""
from __future__ import annotations

from pathlib import Path

import pytest

from backend.families.wan import sources
from tests.harness.clips import CLIPS, FRAMES, SIZE, moving_square, stage1, tiny_models, train
from tests.harness.seeds import SEED_ZERO3
from tests.harness.stages import write_accelerate_config

REPO_ID = "Wan-AI/Wan2.1-T2V-1.3B"
DIFFUSERS = REPO_ID + "-Diffusers"
# The reference trainer's stage-1 sources: the original repository's files.
REFERENCE_STAGE1 = (f"{REPO_ID}:models_t5_umt5-xxl-enc-bf16.pth,{REPO_ID}:Wan2.1_VAE.pth")
REFERENCE_STAGE2 = f"{REPO_ID}:diffusion_pytorch_model*.safetensors"

# ------------------------------------------------------------------------------------------
# Fixtures: the tiny model in the -Diffusers layout, the clips, one stage-1 cache, one
# ZeRO-3 training run.
# ------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def wan_models(tmp_path_factory) -> Path:
    return tiny_models(tmp_path_factory, "build_tiny_wan", DIFFUSERS)



@pytest.fixture(scope="module")
def wan_stage1(tmp_path_factory, wan_models, wan_data):
    return stage1(tmp_path_factory.mktemp("wan_cache"), wan_models, wan_data,
                  REFERENCE_STAGE1, FRAMES)


@pytest.fixture(scope="module")
def wan_trained(tmp_path_factory, wan_models, wan_stage1):
    folder = tmp_path_factory.mktemp("wan_train")
    acc = write_accelerate_config(folder, "z3", ds_config=SEED_ZERO3, zero3_init_flag=True)
    return train(folder, acc, wan_models, wan_stage1[0], REFERENCE_STAGE2,
                 "--lora_target_modules", "q,k,v,o,ffn.0,ffn.2", "--dataset_repeat", "6",
                 "--save_steps", "24", "--use_gradient_checkpointing",
                 "--initialize_model_on_cpu")


def transformer(models: Path):
    import torch

    from backend.families import get_family
    return get_family("wan").load_transformer(models / DIFFUSERS / "transformer",
                                              torch.float32).eval()


def pipeline(models: Path):
    from diffusers import WanPipeline

    pipe = WanPipeline.from_pretrained(str(models / DIFFUSERS))
    pipe.set_progress_bar_config(disable=True)
    return pipe


def clip(pipe, prompt: str = "a red ball rolls from left to right, zlr style"):
    import torch

    return pipe(prompt=prompt, num_inference_steps=2, height=SIZE, width=SIZE, num_frames=5,
                guidance_scale=1.0, generator=torch.Generator().manual_seed(0),
                output_type="np").frames[0]


# ------------------------------------------------------------------------------------------
# Stage 1
# ------------------------------------------------------------------------------------------
@pytest.mark.slow
@pytest.mark.timeout(900)
def test_stage1_from_the_reference_sources_caches_what_the_pipeline_computes(
        wan_models, wan_data, wan_stage1):
    """The reference's pickled files are named as the -Diffusers components (and said so);
    each clip's cache holds the pipeline's prompt embedding (its padding cut off) and the
    normalised latents of the clip as decoded with PyAV; a still image is a one-frame clip."""
    import torch

    from backend.data.cache import load_cached_samples, read_manifest
    from backend.config.validation import validate
    from backend.data.video import load_clip

    cache, proc = wan_stage1
    log = proc.stdout + proc.stderr
    assert "models_t5_umt5-xxl-enc-bf16.pth (a pickle: never read) -> " \
           f"{DIFFUSERS}:text_encoder/*.safetensors" in log
    assert f"Wan2.1_VAE.pth (a pickle: never read) -> {DIFFUSERS}:vae/" in log
    assert not list(wan_models.rglob("*.pth"))  # nothing was fetched under the old names

    manifest = read_manifest(cache)
    assert manifest["family"] == "wan"
    assert [e["frames"] for e in manifest["samples"]] == [FRAMES, FRAMES, FRAMES, 1]
    samples = load_cached_samples(cache)
    latent_frames = (FRAMES - 1) // 4 + 1
    assert [tuple(s["latents"].shape) for s in samples] == \
        [(1, 16, latent_frames, SIZE // 8, SIZE // 8)] * 3 + [(1, 16, 1, SIZE // 8, SIZE // 8)]

    pipe = pipeline(wan_models)
    emb = pipe.encode_prompt(CLIPS[0][3], do_classifier_free_guidance=False,
                             max_sequence_length=512, device="cpu")[0]
    n = samples[0]["prompt_emb"].shape[1]
    assert torch.allclose(samples[0]["prompt_emb"], emb[:, :n], atol=1e-5)
    assert 1 < n < 512 and not emb[:, n:].any()  # what was cut off is the zero padding

    cfg = validate({"model_family": "wan", "dataset_base_path": str(wan_data),
                    "num_frames": FRAMES, "height": SIZE, "width": SIZE,
                    "model_id_with_origin_paths": DIFFUSERS}, require_inputs=False)
    pixels = load_clip(wan_data / "blue.mp4", cfg)
    assert tuple(pixels.shape) == (1, 3, FRAMES, SIZE, SIZE)
    vae = pipe.vae
    z = vae.encode(pixels).latent_dist.mean
    mean = torch.tensor(vae.config.latents_mean).view(1, -1, 1, 1, 1)
    std = torch.tensor(vae.config.latents_std).view(1, -1, 1, 1, 1)
    assert torch.allclose(samples[1]["latents"], (z - mean) / std, atol=1e-5)


def test_bad_clips_are_refused_naming_their_rows(tmp_path):
    """Before any model loads: a clip too short for num_frames, a file PyAV cannot decode and
    a missing one each name their row; a frame count that is not 4k+1 names the field."""
    from backend.config.errors import ConfigError
    from backend.config.validation import validate
    from backend.data.dataset import DatasetError
    from backend.core.media import write_video
    from backend.data.video import check_video_dataset

    folder = tmp_path / "clips"
    folder.mkdir()
    write_video(moving_square((200, 0, 0), 1, n=5), folder / "short.webm", fps=8)
    write_video(moving_square((0, 0, 200), 1), folder / "ok.webm", fps=8)
    (folder / "broken.mp4").write_bytes(b"not a video at all" * 10)
    (folder / "metadata.csv").write_text(
        "video,prompt\nok.webm,fine\nshort.webm,too short\nbroken.mp4,broken\n"
        "gone.webm,missing\n", encoding="utf-8")
    cfg = validate({"model_family": "wan", "dataset_base_path": str(folder),
                    "dataset_metadata_path": str(folder / "metadata.csv"),
                    "num_frames": FRAMES, "height": SIZE, "width": SIZE,
                    "model_id_with_origin_paths": DIFFUSERS}, require_inputs=False)
    with pytest.raises(DatasetError) as err:
        check_video_dataset(cfg)
    problems = err.value.problems
    assert len(problems) == 3, problems
    assert problems[0].startswith("metadata.csv row 2: too short: 5 frames")
    assert f"{FRAMES} needed for num_frames {FRAMES}" in problems[0]
    assert problems[1].startswith("metadata.csv row 3: cannot decode video broken.mp4")
    assert problems[2] == "metadata.csv row 4: video not found (got 'gone.webm')"
    # The Dataset tab's findings: one per row, the good clip with its frame count and size.
    from backend.data.video import validate_any_dataset
    findings = validate_any_dataset(cfg)
    assert [f["level"] for f in findings] == ["ok", "error", "error", "error"]
    assert findings[0]["frames"] == FRAMES and findings[0]["size"] == [SIZE, SIZE]
    # A stride reaches further into the clip: ok.webm's 9 frames are too few for stride 2.
    with pytest.raises(DatasetError, match=r"row 1: too short: 9 frames.*frame_stride 2"):
        check_video_dataset(cfg.model_copy(update={"frame_stride": 2}))
    # Or a rate in the clip's own time: 9 frames at 8 fps hold 1 s, 4 fps x 9 frames need 2.
    with pytest.raises(DatasetError, match=r"row 1: too short: 9 frames at 8 fps, 17 needed"
                                           r".*video_fps 4"):
        check_video_dataset(cfg.model_copy(update={"video_fps": 4.0}))
    with pytest.raises(ConfigError, match=r"num_frames: must be 4k\+1 \(got 8; allowed e.g. "
                                          r"5 or 9\)"):
        validate({"model_family": "wan", "num_frames": 8,
                  "model_id_with_origin_paths": DIFFUSERS}, require_inputs=False)


# ------------------------------------------------------------------------------------------
# Stage 2, exports and samples (one ZeRO-3 run)
# ------------------------------------------------------------------------------------------
@pytest.mark.slow
@pytest.mark.timeout(1500)
def test_zero3_training_lowers_the_loss_and_its_exports_change_the_clip(
        tmp_path, wan_models, wan_stage1, wan_trained):
    import torch
    from safetensors.torch import load_file

    from backend.models import lora
    from backend.data.cache import load_cached_samples
    from backend.models.export import export_lora
    from backend.families import get_family

    out, proc = wan_trained
    ckpt = out / "step-24.safetensors"
    assert ckpt.is_file(), sorted(p.name for p in out.iterdir())

    # --- the reference's target spelling reached every attention and feed-forward module
    keys = set(load_file(str(ckpt)))
    expected = {f"blocks.{b}.{m}.lora_{ab}.default.weight" for b in range(2)
                for m in ("attn1.to_q", "attn1.to_k", "attn1.to_v", "attn1.to_out.0",
                          "attn2.to_q", "attn2.to_k", "attn2.to_v", "attn2.to_out.0",
                          "ffn.net.0.proj", "ffn.net.2") for ab in "AB"}
    assert keys == expected

    # --- the held-out loss falls
    family = get_family("wan")
    samples = load_cached_samples(wan_stage1[0])
    before = family.eval_loss(transformer(wan_models), samples)
    trained = transformer(wan_models)
    lora.load_lora(trained, ckpt)
    after = family.eval_loss(trained, samples)
    print(f"wan held-out loss {before:.4f} -> {after:.4f}")
    assert after < before * 0.9, (before, after)

    # --- diffusers export: WanPipeline.load_lora_weights changes the clip
    pipe = pipeline(wan_models)
    base = clip(pipe)
    d_path = export_lora(ckpt, "diffusers", tmp_path)
    pipe.load_lora_weights(str(d_path), adapter_name="d")
    with_lora = clip(pipe)
    assert base.shape == with_lora.shape == (5, SIZE, SIZE, 3)
    assert float(abs(with_lora - base).mean()) > 1e-3
    pipe.delete_adapters("d")
    assert float(abs(clip(pipe) - base).max()) < 1e-5  # the adapter removed: the base clip

    # --- ComfyUI export: exactly Wan's native names, read back by diffusers' own Wan map
    c_path = export_lora(ckpt, "comfyui", tmp_path)
    native = {f"diffusion_model.blocks.{b}.{m}.{part}" for b in range(2)
              for m in ("self_attn.q", "self_attn.k", "self_attn.v", "self_attn.o",
                        "cross_attn.q", "cross_attn.k", "cross_attn.v", "cross_attn.o",
                        "ffn.0", "ffn.2")
              for part in ("lora_down.weight", "lora_up.weight", "alpha")}
    assert set(load_file(str(c_path))) == native
    pipe.load_lora_weights(str(c_path), adapter_name="c")
    assert float(abs(clip(pipe) - with_lora).max()) < 1e-4
    # ... and the ComfyUI file exports back to the same diffusers LoRA.
    back = load_file(str(export_lora(c_path, "diffusers", tmp_path / "back")))
    ours = load_file(str(d_path))
    assert set(back) == set(ours)
    assert all(torch.allclose(back[k], ours[k]) for k in ours)


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_samples_are_webm_clips_with_frame_strips(tmp_path, wan_models, wan_trained):
    """The sample code renders the base clip and the LoRA clip at the same seed as VP9 WebM
    files that decode back to the clip's frames, each with a strip of frames beside it."""
    import numpy as np
    from PIL import Image

    from backend.config.validation import validate
    from backend.training.samples import render_samples
    from backend.data.video import read_video_frames

    cfg = validate({"model_family": "wan", "models_dir": str(wan_models), "offline": True,
                    "stages": ["sample"], "sample_prompts": ["a red ball, zlr style"],
                    "sample_steps": 2, "sample_cfg": 1.0, "sample_height": SIZE,
                    "sample_width": SIZE, "sample_num_frames": 5, "sample_fps": 8,
                    "sample_lora_scales": [0, 1]}, require_inputs=False)
    entries = render_samples(cfg, [wan_trained[0] / "step-24.safetensors"], tmp_path)
    assert [e["image"] for e in entries] == ["base/p00-seed0.webm",
                                             "step-24/p00-x1-seed0.webm"]
    clips = []
    for e in entries:
        frames = read_video_frames(tmp_path / e["image"])
        assert len(frames) == 5 and frames[0].shape == (SIZE, SIZE, 3)
        assert e["num_frames"] == 5 and e["fps"] == 8
        strip = Image.open(tmp_path / e["strip"])
        assert strip.size == (4 * SIZE, SIZE)
        clips.append(np.stack(frames).astype(np.float32))
    assert float(np.abs(clips[0] - clips[1]).mean()) > 0.5  # the LoRA changes the clip


def test_estimator_counts_clip_tokens_and_the_presets_fit_their_cards():
    """A clip is latent frames x latent area tokens: 81 frames at 480x832 are 21 x 30 x 52;
    the 1.3B preset fits a 12 GB card, the 14B ZeRO-3 offload preset a 24 GB one and not a
    12 GB one, and more frames need more memory."""
    from backend.config.presets import load_preset
    from backend.planning.estimator import estimate_memory, fits

    small = estimate_memory(load_preset("wan_1_3b_12gb"))
    assert small.image_tokens == 21 * 30 * 52
    assert fits(small, 12, 64)[0], fits(small, 12, 64)[1]
    big = estimate_memory(load_preset("wan_14b_zero3_offload"))
    assert big.params["transformer"] > 13e9 and small.params["transformer"] < 1.5e9
    assert fits(big, 24, 128)[0] and not fits(big, 12, 128)[0]
    fewer = estimate_memory(load_preset("wan_1_3b_12gb").model_copy(update={"num_frames": 33}))
    assert fewer.image_tokens == 9 * 30 * 52
    assert fewer.stages["train"].gpu_gb < small.stages["train"].gpu_gb
    # I2V-14B: the 14B plus the image cross-attention; one A14B expert: the 14B, 49 frames.
    i2v = estimate_memory(load_preset("wan_2_1_i2v_14b_zero3_offload"))
    expert = estimate_memory(load_preset("wan_2_2_t2v_a14b_low_noise_zero3_offload"))
    assert i2v.params["transformer"] > big.params["transformer"] + 1e9
    assert expert.params["transformer"] == big.params["transformer"]
    assert expert.image_tokens == 13 * 30 * 52
    # The first frame conditions through the clip's own channels: no tokens of its own in
    # the step's activations (an edit model's input image has them).
    from backend.planning.estimator import input_image_tokens

    assert input_image_tokens(load_preset("wan_2_1_i2v_14b_zero3_offload"), 480, 832) == 0
    assert input_image_tokens(load_preset("qwen_image_edit_2511_low_vram"), 480, 832) > 0
    # TI2V-5B's VAE is 16x: 121 frames at 704x1280 are 31 x 22 x 40 tokens; its preset
    # fits the 24 GB card it is named for.
    ti2v = estimate_memory(load_preset("wan_2_2_ti2v_5b_24gb"))
    assert ti2v.image_tokens == 31 * 22 * 40
    assert fits(ti2v, 24, 64)[0], fits(ti2v, 24, 64)[1]
    for e in (i2v, expert):
        assert fits(e, 24, 128)[0] and not fits(e, 12, 128)[0]


def test_the_reference_wan_command_imports_onto_the_diffusers_layout():
    """The reference's Wan2.1-T2V-1.3B LoRA command imports with only the script path
    changed: its original-repository files (pickles among them) become the -Diffusers
    components, never read; its targets, frames and size are kept; --fp8_models maps to its
    field and --offload_models is explained."""
    from backend.planning.importer import import_commands

    result = import_commands(
        "accelerate launch examples/wanvideo/model_training/train.py \\\n"
        "  --dataset_base_path data/example_video_dataset \\\n"
        "  --dataset_metadata_path data/example_video_dataset/metadata.csv \\\n"
        "  --height 480 --width 832 --num_frames 81 --dataset_repeat 100 \\\n"
        f"  --model_id_with_origin_paths \"{REFERENCE_STAGE2},{REFERENCE_STAGE1}\" \\\n"
        "  --learning_rate 1e-4 --num_epochs 5 --remove_prefix_in_ckpt pipe.dit. \\\n"
        "  --output_path ./models/train/Wan2.1-T2V-1.3B_lora --lora_base_model dit \\\n"
        "  --lora_target_modules q,k,v,o,ffn.0,ffn.2 --lora_rank 32 \\\n"
        "  --offload_models dit --fp8_models dit\n")
    cfg = result.config
    assert cfg.model_family == "wan"
    assert cfg.model_id_with_origin_paths == (
        f"{DIFFUSERS}:transformer/*.safetensors,{DIFFUSERS}:text_encoder/*.safetensors,"
        f"{DIFFUSERS}:vae/diffusion_pytorch_model.safetensors")
    assert (cfg.num_frames, cfg.height, cfg.width, cfg.lora_rank) == (81, 480, 832, 32)
    assert cfg.lora_target_modules == "q,k,v,o,ffn.0,ffn.2"
    pickles = [n for n in result.notes if "a pickle: never read" in n]
    assert len(pickles) == 2 and any("Wan2.1_VAE.pth" in n for n in pickles)
    assert cfg.fp8_models == "dit"  # the reference's low-VRAM flag: an fp8 transformer
    assert not any("--fp8_models" in n for n in result.not_understood), result.not_understood
    assert any("--offload_models" in n for n in result.notes), result.notes


# ------------------------------------------------------------------------------------------
# Image-to-video (Wan2.1-I2V-14B-480P): one tiny model, one stage-1 cache, one training run
# ------------------------------------------------------------------------------------------
I2V_ID = "Wan-AI/Wan2.1-I2V-14B-480P"
I2V_DIFFUSERS = I2V_ID + "-Diffusers"
I2V_CLIP_PTH = "models_clip_open-clip-xlm-roberta-large-vit-huge-14.pth"
# The reference's I2V command names these original-repository files (pickles among them).
I2V_REFERENCE = (f"{I2V_ID}:diffusion_pytorch_model*.safetensors,"
                 f"{I2V_ID}:models_t5_umt5-xxl-enc-bf16.pth,{I2V_ID}:Wan2.1_VAE.pth,"
                 f"{I2V_ID}:{I2V_CLIP_PTH}")
I2V_FRAMES = 5


@pytest.fixture(scope="module")
def i2v_models(tmp_path_factory) -> Path:
    return tiny_models(tmp_path_factory, "build_tiny_wan_i2v", I2V_DIFFUSERS)


@pytest.fixture(scope="module")
def i2v_stage1(tmp_path_factory, i2v_models, wan_data):
    return stage1(tmp_path_factory.mktemp("wan_i2v_cache"), i2v_models, wan_data,
                  I2V_REFERENCE, I2V_FRAMES, "--extra_inputs", "input_image")


@pytest.fixture(scope="module")
def i2v_trained(tmp_path_factory, i2v_models, i2v_stage1):
    folder = tmp_path_factory.mktemp("wan_i2v_train")
    return train(folder, write_accelerate_config(folder, "plain"), i2v_models, i2v_stage1[0],
                 f"{I2V_ID}:diffusion_pytorch_model*.safetensors", "--extra_inputs",
                 "input_image", "--lora_target_modules", "q,k,v,o,ffn.0,ffn.2",
                 "--dataset_repeat", "6", "--save_steps", "24", "--use_gradient_checkpointing",
                 "--mixed_precision", "no")


def i2v_pipeline(models: Path):
    from diffusers import WanImageToVideoPipeline

    pipe = WanImageToVideoPipeline.from_pretrained(str(models / I2V_DIFFUSERS))
    pipe.set_progress_bar_config(disable=True)
    return pipe


def i2v_clip(pipe, image, prompt: str = "a red ball rolls from left to right, zlr style"):
    import torch

    return pipe(image=image, prompt=prompt, num_inference_steps=2, height=SIZE, width=SIZE,
                num_frames=5, guidance_scale=1.0, generator=torch.Generator().manual_seed(0),
                output_type="np").frames[0]


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_i2v_stage1_caches_the_first_frame_as_the_pipeline_conditions_it(
        i2v_models, wan_data, i2v_stage1):
    """The reference's I2V files (the open-clip pickle too) are the -Diffusers components,
    never read; each clip's cache holds WanImageToVideoPipeline's CLIP embedding of its first
    frame and the condition its prepare_latents builds from that frame (mask + latents)."""
    import torch
    from PIL import Image

    from backend.data.cache import load_cached_samples, read_manifest

    cache, proc = i2v_stage1
    log = proc.stdout + proc.stderr
    assert f"{I2V_CLIP_PTH} (a pickle: never read) -> " \
           f"{I2V_DIFFUSERS}:image_encoder/*.safetensors" in log
    assert not list(i2v_models.rglob("*.pth"))
    assert read_manifest(cache)["family"] == "wan"
    samples = load_cached_samples(cache)
    latent_frames = (I2V_FRAMES - 1) // 4 + 1
    assert tuple(samples[0]["condition"].shape) == (1, 20, latent_frames, SIZE // 8, SIZE // 8)
    assert tuple(samples[3]["condition"].shape) == (1, 20, 1, SIZE // 8, SIZE // 8)  # a still

    pipe = i2v_pipeline(i2v_models)
    # The folder of PNG frames (lossless): its first frame is exactly the one drawn here.
    first = Image.fromarray(moving_square(CLIPS[2][1], CLIPS[2][2])[0])
    with torch.no_grad():
        embeds = pipe.encode_image(first, "cpu")
        pixels = pipe.video_processor.preprocess(first, height=SIZE, width=SIZE)
        _, condition = pipe.prepare_latents(pixels, 1, 16, SIZE, SIZE, I2V_FRAMES,
                                            torch.float32, "cpu",
                                            torch.Generator().manual_seed(0))
    assert torch.allclose(samples[2]["image_embeds"], embeds, atol=1e-5)
    assert torch.allclose(samples[2]["condition"], condition, atol=1e-4)
    assert samples[2]["condition"][:, :4, 0].eq(1).all()  # the first frame's mask
    assert not samples[2]["condition"][:, :4, 1:].any()
    assert not torch.allclose(samples[0]["condition"], samples[2]["condition"])


@pytest.mark.slow
@pytest.mark.timeout(1500)
def test_i2v_training_lowers_the_loss_and_its_lora_changes_the_pipelines_clip(
        tmp_path, i2v_models, i2v_stage1, i2v_trained, wan_data):
    """Stage 2 on the first-frame inputs: the held-out loss falls; the diffusers export loads
    with WanImageToVideoPipeline.load_lora_weights and changes the clip; the sample stage's
    code renders base and LoRA clips from a first frame given in sample_images."""
    import numpy as np
    from PIL import Image

    from backend.models import lora
    from backend.data.cache import load_cached_samples
    from backend.config.validation import validate
    from backend.models.export import export_lora
    from backend.families import get_family
    from backend.training.samples import render_samples
    from backend.data.video import read_video_frames

    ckpt = i2v_trained[0] / "step-24.safetensors"
    assert ckpt.is_file()
    samples = load_cached_samples(i2v_stage1[0])
    family = get_family("wan")
    folder = i2v_models / I2V_DIFFUSERS / "transformer"
    before = family.eval_loss(family.load_transformer(folder), samples)
    trained = family.load_transformer(folder)
    lora.load_lora(trained, ckpt)
    after = family.eval_loss(trained, samples)
    print(f"wan i2v held-out loss {before:.4f} -> {after:.4f}")
    assert after < before * 0.9, (before, after)

    first = Image.fromarray(moving_square(CLIPS[0][1], CLIPS[0][2])[0])
    pipe = i2v_pipeline(i2v_models)
    base = i2v_clip(pipe, first)
    pipe.load_lora_weights(str(export_lora(ckpt, "diffusers", tmp_path)), adapter_name="d")
    assert float(abs(i2v_clip(pipe, first) - base).mean()) > 1e-3

    first.save(tmp_path / "first.png")
    cfg = validate({"model_family": "wan", "models_dir": str(i2v_models), "offline": True,
                    "model_id_with_origin_paths": sources(I2V_ID, image=True),
                    "stages": ["sample"],
                    "sample_prompts": ["a red ball, zlr style"],
                    "sample_images": [str(tmp_path / "first.png")], "sample_steps": 2,
                    "sample_cfg": 1.0, "sample_height": SIZE, "sample_width": SIZE,
                    "sample_num_frames": 5, "sample_fps": 8, "sample_lora_scales": [0, 1]},
                   require_inputs=False)
    entries = render_samples(cfg, [ckpt], tmp_path / "samples")
    clips = [np.stack(read_video_frames(tmp_path / "samples" / e["image"])).astype(np.float32)
             for e in entries]
    assert [e["inputs"] for e in entries] == [[str(tmp_path / "first.png")]] * 2
    assert clips[0].shape == (5, SIZE, SIZE, 3)
    assert float(np.abs(clips[0] - clips[1]).mean()) > 0.5

    # No sample_images: each prompt starts from the first frame of a dataset row's clip,
    # which the sample set keeps beside the clips (the Results tab's input column).
    from_rows = cfg.model_copy(update={
        "sample_images": [], "sample_prompts": ["red", "blue"], "sample_lora_scales": [0.0],
        "dataset_base_path": str(wan_data), "dataset_metadata_path": str(wan_data /
                                                                         "metadata.csv"),
        "num_frames": I2V_FRAMES, "max_pixels": SIZE * SIZE, "extra_inputs": "input_image"})
    entries = render_samples(from_rows, [ckpt], tmp_path / "from_rows")
    assert [Path(e["inputs"][0]).name for e in entries] == [CLIPS[0][0], CLIPS[1][0]]
    for e, colour in zip(entries, (CLIPS[0][1], CLIPS[1][1])):
        first = np.asarray(Image.open(tmp_path / "from_rows" / e["input_image"]), dtype=float)
        assert first.shape == (SIZE, SIZE, 3)
        # the square's colour is in the frame: its strongest channel is the clip's
        peak = first.reshape(-1, 3)[first.reshape(-1, 3).std(axis=1).argmax()]
        assert int(np.argmax(peak)) == int(np.argmax(colour)), (e, peak)


def test_the_reference_i2v_command_imports_onto_the_diffusers_layout():
    """The reference's Wan2.1-I2V-14B-480P command imports as it is: its four original files
    (three pickles, the open-clip image encoder among them) become -Diffusers components with
    a note each; --extra_inputs input_image binds the image-to-video adapter."""
    from backend.families import get_family
    from backend.planning.importer import import_commands

    result = import_commands(
        "accelerate launch examples/wanvideo/model_training/train.py \\\n"
        "  --dataset_base_path data/i2v --dataset_metadata_path data/i2v/metadata.csv \\\n"
        "  --height 480 --width 832 --dataset_repeat 100 \\\n"
        f"  --model_id_with_origin_paths \"{I2V_REFERENCE}\" \\\n"
        "  --learning_rate 1e-4 --num_epochs 5 --remove_prefix_in_ckpt \"pipe.dit.\" \\\n"
        "  --output_path \"./models/train/Wan2.1-I2V-14B-480P_lora\" --lora_base_model dit \\\n"
        "  --lora_target_modules \"q,k,v,o,ffn.0,ffn.2\" --lora_rank 32 \\\n"
        "  --extra_inputs \"input_image\"\n")
    cfg = result.config
    assert cfg.model_family == "wan" and cfg.extra_inputs == "input_image"
    assert cfg.model_id_with_origin_paths == (
        f"{I2V_DIFFUSERS}:transformer/*.safetensors,{I2V_DIFFUSERS}:text_encoder/*.safetensors,"
        f"{I2V_DIFFUSERS}:vae/diffusion_pytorch_model.safetensors,"
        f"{I2V_DIFFUSERS}:image_encoder/*.safetensors")
    pickles = [n for n in result.notes if "a pickle: never read" in n]
    assert len(pickles) == 3 and any(I2V_CLIP_PTH in n for n in pickles), result.notes
    bound = get_family("wan").for_config(cfg)
    assert bound.input_images == 1 and "image_encoder" in bound.spec.stage_components(
        "data_process")
    assert not result.not_understood, result.not_understood


# ------------------------------------------------------------------------------------------
# Wan 2.2 A14B: two experts, one trained per run over its timestep range
# ------------------------------------------------------------------------------------------
A14B_ID = "Wan-AI/Wan2.2-T2V-A14B"
A14B_DIFFUSERS = A14B_ID + "-Diffusers"
LOW_NOISE = f"{A14B_ID}:low_noise_model/diffusion_pytorch_model*.safetensors"


@pytest.fixture(scope="module")
def a14b_models(tmp_path_factory) -> Path:
    return tiny_models(tmp_path_factory, "build_tiny_wan_a14b", A14B_DIFFUSERS)


@pytest.mark.slow
@pytest.mark.timeout(1500)
def test_a14b_low_noise_expert_trains_in_its_range_and_samples_put_the_lora_on_it(
        tmp_path, a14b_models, wan_stage1):
    """The reference's low-noise command (its low_noise_model/ folder is the -Diffusers
    transformer_2/) trains from the shared text-to-video cache with every step's timestep
    below the pipeline's boundary (0.875 x 1000); the pipeline loads both experts and the
    LoRA goes on transformer_2 only; the diffusers export loads there with diffusers'
    load_into_transformer_2 and changes the clip."""
    import json
    import re

    import torch

    from backend.config.validation import validate
    from backend.models.export import export_lora
    from backend.families import get_family
    from backend.training.samples import attach_lora, component_dirs

    folder = tmp_path / "run"
    out, proc = train(folder, write_accelerate_config(folder, "plain"), a14b_models,
                      wan_stage1[0], LOW_NOISE, "--min_timestep_boundary", "0.417",
                      "--max_timestep_boundary", "1", "--dataset_repeat", "3",
                      "--save_steps", "12", "--mixed_precision", "no")
    log = proc.stdout + proc.stderr
    assert f"low_noise_model/diffusion_pytorch_model*.safetensors -> " \
           f"{A14B_DIFFUSERS}:transformer_2/*.safetensors" in log
    args = json.loads((out / "training_args.json").read_text())
    assert Path(args["resolved_components"]["transformer"]).name == "transformer_2"
    drawn = [(float(t), int(i)) for t, i in
             re.findall(r"\[wan\] timestep ([\d.]+) \(schedule index (\d+) of \[417, 1000\)",
                        log)]
    assert len(drawn) == 12, log[-2000:]
    assert all(417 <= i < 1000 and t < 875 for t, i in drawn), drawn
    ckpt = out / "step-12.safetensors"

    cfg = validate({"model_family": "wan", "models_dir": str(a14b_models), "offline": True,
                    "model_id_with_origin_paths": f"{A14B_DIFFUSERS}:transformer_2/"
                    "*.safetensors," + ",".join(sources(A14B_ID).split(",")[1:])},
                   require_inputs=False)
    pipe = get_family("wan").for_config(cfg).load_pipeline(component_dirs(cfg))
    pipe.set_progress_bar_config(disable=True)
    assert pipe.config.boundary_ratio == 0.875 and pipe.transformer_2 is not None

    def render():
        return pipe(prompt=CLIPS[0][3], num_inference_steps=4, height=SIZE, width=SIZE,
                    num_frames=5, guidance_scale=1.0, output_type="np",
                    generator=torch.Generator().manual_seed(0)).frames[0]

    def has_lora(model) -> bool:
        return any("lora_A" in n for n, _ in model.named_modules())

    base = render()
    attach_lora(pipe, ckpt, "low")
    assert has_lora(pipe.transformer_2) and not has_lora(pipe.transformer)
    assert float(abs(render() - base).mean()) > 1e-3

    from diffusers import WanPipeline
    plain = WanPipeline.from_pretrained(str(a14b_models / A14B_DIFFUSERS))
    plain.set_progress_bar_config(disable=True)
    plain.load_lora_weights(str(export_lora(ckpt, "diffusers", tmp_path)),
                            load_into_transformer_2=True)
    assert has_lora(plain.transformer_2) and not has_lora(plain.transformer)


def test_the_reference_a14b_commands_import_with_their_expert_and_range():
    """The reference's Wan2.2-I2V-A14B low-noise command: low_noise_model/ becomes the
    -Diffusers transformer_2/, its boundaries and input image are kept; bad boundaries are
    refused naming the field."""
    from backend.config.errors import ConfigError
    from backend.config.validation import validate
    from backend.planning.importer import import_commands

    result = import_commands(
        "accelerate launch examples/wanvideo/model_training/train.py \\\n"
        "  --dataset_base_path data/v --dataset_metadata_path data/v/metadata.csv \\\n"
        "  --height 480 --width 832 --num_frames 49 --dataset_repeat 100 \\\n"
        "  --model_id_with_origin_paths \"Wan-AI/Wan2.2-I2V-A14B:low_noise_model/"
        "diffusion_pytorch_model*.safetensors,Wan-AI/Wan2.2-I2V-A14B:"
        "models_t5_umt5-xxl-enc-bf16.pth,Wan-AI/Wan2.2-I2V-A14B:Wan2.1_VAE.pth\" \\\n"
        "  --learning_rate 1e-4 --num_epochs 5 --remove_prefix_in_ckpt \"pipe.dit.\" \\\n"
        "  --output_path ./out --lora_base_model dit --lora_target_modules q,k,v,o,ffn.0,ffn.2 \\\n"
        "  --lora_rank 32 --extra_inputs input_image \\\n"
        "  --max_timestep_boundary 1 --min_timestep_boundary 0.358\n")
    cfg = result.config
    d = "Wan-AI/Wan2.2-I2V-A14B-Diffusers"
    assert cfg.model_id_with_origin_paths.split(",")[0] == f"{d}:transformer_2/*.safetensors"
    assert (cfg.min_timestep_boundary, cfg.max_timestep_boundary) == (0.358, 1.0)
    assert cfg.extra_inputs == "input_image" and not result.not_understood
    from backend.families import get_family
    bound = get_family("wan").for_config(cfg)
    assert bound.timestep_range == (358, 1000) and bound.input_images == 1
    assert "image_encoder" not in bound.spec.stage_components("data_process")  # no CLIP
    with pytest.raises(ConfigError, match=r"min_timestep_boundary: must be below "
                                          r"max_timestep_boundary \(got 0.9 with"):
        validate({"model_family": "wan", "min_timestep_boundary": 0.9,
                  "max_timestep_boundary": 0.5}, require_inputs=False)


I2V_A14B_ID = "Wan-AI/Wan2.2-I2V-A14B"
I2V_A14B_DIFFUSERS = I2V_A14B_ID + "-Diffusers"


@pytest.mark.slow
@pytest.mark.timeout(1200)
def test_i2v_a14b_low_noise_expert_from_the_clips_to_a_clip_with_its_lora(tmp_path_factory,
                                                                         wan_data):
    """Wan2.2-I2V-A14B end to end: stage 1 caches the first-frame condition without a CLIP
    image encoder (the model has none); the low-noise expert trains in its range from the
    reference's low_noise_model/ name; the sample stage's code loads both experts, starts
    from a dataset row's first frame (no sample_images), and the LoRA's clip differs from
    the base model's."""
    import json

    import numpy as np
    from safetensors import safe_open

    from backend.config.validation import validate
    from backend.training.samples import render_samples
    from backend.data.video import read_video_frames

    models = tiny_models(tmp_path_factory, "build_tiny_wan_i2v_a14b", I2V_A14B_DIFFUSERS)
    cache, _ = stage1(tmp_path_factory.mktemp("i2v_a14b_cache"), models, wan_data,
                      sources(I2V_A14B_ID), I2V_FRAMES, "--extra_inputs", "input_image")
    first = sorted(cache.glob("*.safetensors"))[0]
    with safe_open(str(first), "pt") as f:
        keys = set(f.keys())
    assert "condition" in keys and "image_embeds" not in keys, keys

    folder = tmp_path_factory.mktemp("i2v_a14b_train")
    out, proc = train(folder, write_accelerate_config(folder, "plain"), models, cache,
                      f"{I2V_A14B_ID}:low_noise_model/diffusion_pytorch_model*.safetensors",
                      "--extra_inputs", "input_image", "--min_timestep_boundary", "0.358",
                      "--max_timestep_boundary", "1", "--dataset_repeat", "3",
                      "--save_steps", "12", "--mixed_precision", "no")
    args = json.loads((out / "training_args.json").read_text())
    assert Path(args["resolved_components"]["transformer"]).name == "transformer_2"
    ckpt = out / "step-12.safetensors"
    assert ckpt.is_file()

    cfg = validate({"model_family": "wan", "models_dir": str(models), "offline": True,
                    "model_id_with_origin_paths": f"{I2V_A14B_DIFFUSERS}:transformer_2/"
                    "*.safetensors," + ",".join(sources(I2V_A14B_ID).split(",")[1:]),
                    "extra_inputs": "input_image", "stages": ["sample"],
                    "dataset_base_path": str(wan_data),
                    "dataset_metadata_path": str(wan_data / "metadata.csv"),
                    "num_frames": I2V_FRAMES, "height": SIZE, "width": SIZE,
                    "sample_prompts": [CLIPS[0][3]], "sample_steps": 4, "sample_cfg": 1.0,
                    "sample_height": SIZE, "sample_width": SIZE, "sample_num_frames": 5,
                    "sample_fps": 8, "sample_lora_scales": [0, 1]}, require_inputs=False)
    samples = tmp_path_factory.mktemp("i2v_a14b_samples")
    entries = render_samples(cfg, [ckpt], samples)
    assert [Path(e["inputs"][0]).name for e in entries] == [CLIPS[0][0]] * 2
    clips = [np.stack(read_video_frames(samples / e["image"])).astype(np.float32)
             for e in entries]
    assert clips[0].shape == (5, SIZE, SIZE, 3)
    assert float(np.abs(clips[0] - clips[1]).mean()) > 0.5
