"""Frame buckets: clips of different lengths and frame rates in one video dataset, each
trained at the largest of ``frame_buckets`` it fills, batched by (frames, size).

- the option goes through the one schema: a count the family cannot take (not 4k+1, out
  of range, repeated) is refused naming ``frame_buckets``; the CLI takes ``--frame_buckets
  5 9 17``;
- ``video_fps`` resamples clips of other rates to the model's before the bucket is chosen;
- the Dataset check's bucket plan lists frames x size buckets; the sampler never puts two
  frame counts in one batch; the cache key holds the chosen frames;
- on the tiny Wan: stage 1 caches clips of 5, 7, 9, 13, 17 and 20 frames (and a still image)
  at 5, 9 and 17 frames (latent frames 2, 3, 5), stage 2 trains from the cache in batches of
  two, and a clip shorter than the smallest bucket is refused before any model loads, naming
  its row.
"""
from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from backend.config.errors import ConfigError
from backend.core import readgate
from backend.config.validation import validate
from backend.data import buckets
from backend.data.dataset import DatasetError, dataset_bucket_plan
from backend.data.video import (check_video_dataset, clip_buckets, plan_clips, read_frames,
                                validate_any_dataset)
from tests.harness.chinese import assert_chinese
from tests.harness import clips as clips_harness
from tests.harness.clips import SIZE, moving_square, stage1, tiny_models
from tests.harness.stages import run_stage, write_accelerate_config

DIFFUSERS = "Wan-AI/Wan2.1-T2V-1.3B-Diffusers"
STAGE1 = (f"{DIFFUSERS}:text_encoder/*.safetensors,"
          f"{DIFFUSERS}:vae/diffusion_pytorch_model.safetensors")
STAGE2 = f"{DIFFUSERS}:transformer/*.safetensors"
BUCKETS = [17, 5, 9]  # any order
# (name, source frames, the bucket it trains at): a frames folder has no dot.
CLIPS = [("a.webm", 5, 5), ("b.mp4", 7, 5), ("c.webm", 9, 9), ("d", 13, 9),
         ("e.webm", 17, 17), ("f.mp4", 20, 17)]


def write_clips(folder: Path, clips, still: bool = True, fps: int = 8) -> Path:
    return clips_harness.write_clips(folder, clips, still, fps)


def config(folder: Path, **changes):
    return validate({"model_family": "wan", "dataset_base_path": str(folder),
                     "dataset_metadata_path": str(folder / "metadata.csv"),
                     "frame_buckets": BUCKETS, "height": SIZE, "width": SIZE,
                     "model_id_with_origin_paths": DIFFUSERS, **changes},
                    require_inputs=False)


@pytest.fixture(scope="module")
def clips(tmp_path_factory) -> Path:
    return write_clips(tmp_path_factory.mktemp("frame_buckets") / "clips", CLIPS)


# ------------------------------------------------------------------------------------------
# The option
# ------------------------------------------------------------------------------------------
def test_a_count_the_family_cannot_take_is_refused_naming_the_field():
    with pytest.raises(ConfigError) as e:
        validate({"model_family": "wan", "frame_buckets": [5, 8, 9, 9, 2000],
                  "model_id_with_origin_paths": DIFFUSERS}, require_inputs=False)
    said = [str(p) for p in e.value.problems]
    assert said == [
        "frame_buckets: each count must lie between 1 and 1025 (got 2000; allowed e.g. 17, "
        "33, 81)",
        "frame_buckets: must be 4k+1 (got 8; allowed e.g. 5 or 9)",
        "frame_buckets: each count once (got 5, 8, 9, 9, 2000; allowed distinct counts, "
        "e.g. 17, 33, 81)"], said
    for p in e.value.problems:
        assert_chinese(p)
    from backend.config.cli import parse_stage_args
    cfg, _ = parse_stage_args(["--model_family", "wan", "--frame_buckets", "5", "9", "17",
                               "--dataset_base_path", "data"])
    assert cfg.frame_buckets == [5, 9, 17]


# ------------------------------------------------------------------------------------------
# Buckets of a dataset: chosen, planned, resampled, refused
# ------------------------------------------------------------------------------------------
def test_each_clip_takes_the_largest_bucket_it_fills_and_the_plan_lists_them(clips):
    """Frames folder or file, each clip gets the largest count it fills; an image is a
    one-frame clip. The Dataset check's plan has one row per (frames, size)."""
    cfg = config(clips, batch_size=2)
    records = check_video_dataset(cfg)
    wanted = [b for *_, b in CLIPS] + [1]
    assert clip_buckets(records, cfg) == [(SIZE, SIZE, b) for b in wanted]
    findings = validate_any_dataset(cfg)
    assert [f["frames"] for f in findings] == wanted
    assert [len(read_frames(r.image, cfg)[0]) for r in records] == wanted

    plan = dataset_bucket_plan(cfg, findings)
    assert [(r["frames"], r["size"], r["images"], r["batches"], r["padded"])
            for r in plan["rows"]] == [(5, [SIZE, SIZE], 2, 1, 0), (9, [SIZE, SIZE], 2, 1, 0),
                                       (17, [SIZE, SIZE], 2, 1, 0), (1, [SIZE, SIZE], 1, 1, 1)]
    assert plan["text"].splitlines() == [
        f"5×{SIZE}x{SIZE}: 2 clip(s), 1 batch(es) of 2",
        f"9×{SIZE}x{SIZE}: 2 clip(s), 1 batch(es) of 2",
        f"17×{SIZE}x{SIZE}: 2 clip(s), 1 batch(es) of 2",
        f"1×{SIZE}x{SIZE}: 1 clip(s), 1 batch(es) of 2, 1 padded",
        "4 batch(es) per epoch"]
    from webui.tabs.dataset import bucket_plan_markdown
    table = bucket_plan_markdown(plan, "pad")
    assert f"| 17 | {SIZE}×{SIZE} | 2 | 1 | 0 | 0 |" in table
    assert f"| 1 | {SIZE}×{SIZE} | 1 | 1 | 1 | 0 |" in table
    assert "帧数" in table and "|---:|---|---:|" in table
    # The Dataset check shows it with frame_buckets even at batch_size 1 (a bucket a clip).
    from webui.tabs.dataset import bucket_plan_section
    one = config(clips)
    shown = bucket_plan_section(one, one.to_dict(), findings)
    assert f"| 9 | {SIZE}×{SIZE} | 2 | 2 | 0 | 0 |" in shown, shown

    # Image datasets keep their (width, height) rows as before.
    assert buckets.bucket_plan([(64, 32), (64, 32)], 2) == [
        {"size": [64, 32], "images": 2, "batches": 1, "padded": 0, "dropped": 0}]


def test_batches_never_mix_frame_counts():
    sizes = [(32, 32, 5), (32, 32, 9), (32, 32, 17), (32, 32, 5), (32, 32, 9), (32, 32, 17),
             (32, 32, 9), (48, 32, 9)] * 3
    for world in (1, 2):
        for rank in range(world):
            sampler = buckets.BucketBatchSampler(sizes, 2, seed=3, rank=rank, world=world)
            for epoch in range(3):
                sampler.use_epoch(epoch)
                batches = list(sampler)
                assert batches and all(len({sizes[i] for i in b}) == 1 for b in batches)
    plan = buckets.bucket_plan(sizes, 2, "drop")
    assert {(r["frames"], tuple(r["size"])): r["images"] for r in plan} == {
        (5, (32, 32)): 6, (9, (32, 32)): 9, (17, (32, 32)): 6, (9, (48, 32)): 3}


def test_video_fps_resamples_clips_of_other_rates_before_the_bucket(tmp_path):
    """One second at 16 fps (17 frames) and one at 8 fps (9 frames): by frame they fill 17
    and 9; at the model's 8 fps both hold 9 frames, every other frame of the first."""
    import numpy as np

    from backend.core.media import write_video

    folder = tmp_path / "rates"
    folder.mkdir()
    fast = moving_square((200, 30, 30), 1, n=17)
    write_video(fast, folder / "fast.webm", fps=16)
    write_video(moving_square((30, 30, 200), 2, n=9), folder / "slow.webm", fps=8)
    (folder / "metadata.csv").write_text(
        "video,prompt\nfast.webm,fast\nslow.webm,slow\n", encoding="utf-8")
    by_frame = config(folder)
    assert [b[2] for b in clip_buckets(check_video_dataset(by_frame), by_frame)] == [17, 9]
    by_time = config(folder, video_fps=8.0)
    records = check_video_dataset(by_time)
    assert [b[2] for b in clip_buckets(records, by_time)] == [9, 9]
    frames = read_frames(records[0].image, by_time)[0]
    got = np.stack([np.asarray(f, dtype=np.float32) for f in frames])
    assert float(np.abs(got - np.stack(fast[::2]).astype(np.float32)).mean()) < 12  # lossy VP9


def test_a_clip_shorter_than_the_smallest_bucket_is_refused_naming_its_row(tmp_path):
    folder = write_clips(tmp_path / "short", [("ok.webm", 9), ("short.webm", 3), ("few", 4)],
                         still=False)
    with pytest.raises(DatasetError) as e:
        check_video_dataset(config(folder))
    said = [str(p) for p in e.value.problems]
    assert said == [
        "metadata.csv row 2: too short: 3 frames at 8 fps, 5 needed for the smallest of "
        "frame_buckets 5, 9, 17 (frame_stride 1)",
        "metadata.csv row 3: too short: 4 frames, 5 needed for the smallest of frame_buckets "
        "5, 9, 17 (frame_stride 1)"], said
    for p in e.value.problems:
        assert_chinese(p)
    # At video_fps 4 the 8 fps clips reach twice as far: 9 frames still fill 5 of them.
    with pytest.raises(DatasetError) as e:
        check_video_dataset(config(folder, video_fps=4.0))
    assert [str(p) for p in e.value.problems][0] == (
        "metadata.csv row 2: too short: 3 frames at 8 fps, 9 needed for the smallest of "
        "frame_buckets 5, 9, 17 (video_fps 4)")


def test_the_cache_key_holds_the_chosen_frames(clips):
    cfg = config(clips)
    records = check_video_dataset(cfg)
    entries = plan_clips(cfg, records, [])
    assert [e["frames"] for e in entries] == [b for *_, b in CLIPS] + [1]
    fewer = plan_clips(config(clips, frame_buckets=[5, 9]), records, [])
    assert [e["frames"] for e in fewer] == [5, 5, 9, 9, 9, 9, 1]
    assert not {e["key"] for e in entries} & {e["key"] for e in fewer}
    assert len({e["key"] for e in entries}) == len(entries)


# ------------------------------------------------------------------------------------------
# One run on the tiny Wan
# ------------------------------------------------------------------------------------------
@pytest.mark.slow
@pytest.mark.timeout(600)
def test_clips_of_three_lengths_cache_and_train_in_one_run(tmp_path_factory, clips):
    from backend.data.batches import cached_sizes
    from backend.data.cache import check_cache, load_sample, read_manifest

    models = tiny_models(tmp_path_factory, "build_tiny_wan", DIFFUSERS)
    folder = tmp_path_factory.mktemp("frame_buckets_run")
    cache, proc = stage1(folder, models, clips, STAGE1, 81, "--frame_buckets",
                         *map(str, BUCKETS))
    assert "frame_buckets [5, 9, 17]" in proc.stdout + proc.stderr

    # --- stage 1: every clip at its bucket's frame count (latent frames (F - 1) / 4 + 1)
    wanted = [b for *_, b in CLIPS] + [1]
    manifest = read_manifest(cache)
    assert [e["frames"] for e in manifest["samples"]] == wanted
    files = check_cache(cache)
    shapes = [tuple(load_sample(p)["latents"].shape) for p in files]
    assert shapes == [(1, 16, (b - 1) // 4 + 1, SIZE // 8, SIZE // 8) for b in wanted]
    assert [s[2] for s in shapes] == [2, 2, 3, 3, 5, 5, 1]
    assert cached_sizes(cache, files, readgate.UNRESTRICTED) == [(SIZE, SIZE, b)
                                                                 for b in wanted]

    # --- stage 2: batches of two from one (frames, size) bucket each
    out = folder / "out"
    proc = run_stage(["--task", "sft:train", "--models_dir", models, "--offline",
                      "--model_id_with_origin_paths", STAGE2, "--dataset_base_path", cache,
                      "--output_path", out, "--lora_rank", "4", "--learning_rate", "1e-3",
                      "--seed", "0", "--batch_size", "2", "--num_epochs", "2",
                      "--mixed_precision", "no"],
                     config_file=write_accelerate_config(folder, "plain"))
    log = proc.stdout + proc.stderr
    assert proc.returncode == 0, log[-6000:]
    for line in (f"5×{SIZE}x{SIZE}: 2 clip(s), 1 batch(es) of 2",
                 f"17×{SIZE}x{SIZE}: 2 clip(s), 1 batch(es) of 2",
                 f"1×{SIZE}x{SIZE}: 1 clip(s), 1 batch(es) of 2, 1 padded"):
        assert line in log, log[-4000:]
    events = [json.loads(x) for x in (out / "progress.jsonl").read_text().splitlines()]
    losses = [e["loss"] for e in events if e["event"] == "step"]
    assert len(losses) == 8 and all(math.isfinite(x) for x in losses), losses
    assert events[-1]["status"] == "succeeded"
    loras = sorted(p.name for p in out.glob("*.safetensors"))
    assert loras, sorted(p.name for p in out.iterdir())

    # --- one-shot sft (encoded each step) batches by the same buckets
    once = folder / "once"
    proc = run_stage(["--task", "sft", "--models_dir", models, "--offline",
                      "--model_id_with_origin_paths", f"{STAGE1},{STAGE2}",
                      "--dataset_base_path", clips, "--dataset_metadata_path",
                      clips / "metadata.csv", "--frame_buckets", *map(str, BUCKETS),
                      "--height", SIZE, "--width", SIZE, "--output_path", once,
                      "--lora_rank", "4", "--batch_size", "2", "--num_epochs", "1",
                      "--mixed_precision", "no"],
                     config_file=write_accelerate_config(folder, "plain"))
    log = proc.stdout + proc.stderr
    assert proc.returncode == 0, log[-6000:]
    assert f"9×{SIZE}x{SIZE}: 2 clip(s), 1 batch(es) of 2" in log
    steps = [json.loads(x) for x in (once / "progress.jsonl").read_text().splitlines()
             if '"step"' in x]
    assert len([e for e in steps if e["event"] == "step"]) == 4

    # --- a clip shorter than the smallest bucket: refused before any model, naming its row
    short = write_clips(folder / "short", [("ok.webm", 9), ("short.webm", 3)], still=False)
    proc = run_stage(["--task", "sft:data_process", "--models_dir", models, "--offline",
                      "--model_id_with_origin_paths", STAGE1, "--dataset_base_path", short,
                      "--dataset_metadata_path", short / "metadata.csv", "--frame_buckets",
                      *map(str, BUCKETS), "--height", SIZE, "--width", SIZE,
                      "--output_path", folder / "short_cache"],
                     config_file=write_accelerate_config(folder, "plain"))
    assert proc.returncode != 0
    assert "metadata.csv row 2: too short: 3 frames at 8 fps, 5 needed for the smallest " \
           "of frame_buckets 5, 9, 17" in proc.stdout + proc.stderr
    assert not (folder / "short_cache" / "manifest.json").exists()


def test_a_clip_s_mask_is_read_at_the_clip_s_bucket(tmp_path):
    """masked_loss: a mask video is taken frame for frame with its clip, at the count the
    clip trains at; a mask too short for that count is refused naming the row."""
    from backend.core.media import write_video
    from backend.data.video import check_stage_dataset, load_clip_mask
    from backend.families import get_family

    folder = write_clips(tmp_path / "masked", [("long.webm", 17), ("other.webm", 17)],
                         still=False)
    (tmp_path / "masks").mkdir()
    white = [f * 0 + 255 for f in moving_square((0, 0, 0), 0, n=20)]
    write_video(white, tmp_path / "masks" / "long.webm", fps=8)
    write_video(white[:5], tmp_path / "masks" / "other.webm", fps=8)
    cfg = config(folder, frame_buckets=[5, 9], masked_loss=True,
                 mask_path=str(tmp_path / "masks"), mask_missing="refuse")
    with pytest.raises(DatasetError) as e:
        check_stage_dataset(cfg, get_family("wan"))
    said = [str(p) for p in e.value.problems]
    assert len(said) == 1 and said[0].startswith("metadata.csv row 2") \
        and "9 needed for the smallest of frame_buckets 9" in said[0], said
    write_video(white[:9], tmp_path / "masks" / "other.webm", fps=8)
    records = check_stage_dataset(cfg, get_family("wan"))
    assert [tuple(load_clip_mask(r, cfg).shape) for r in records] == [(1, 9, SIZE, SIZE)] * 2


def test_the_memory_estimate_counts_the_longest_bucket():
    """81 frames at 480x832 are 21 x 30 x 52 tokens, whatever the num_frames beside them."""
    from backend.config.presets import load_preset
    from backend.planning.estimator import estimate_memory

    preset = load_preset("wan_1_3b_12gb")
    mixed = estimate_memory(preset.model_copy(update={"num_frames": 17,
                                                      "frame_buckets": [17, 33, 81]}))
    assert mixed.image_tokens == 21 * 30 * 52
    assert mixed.stages["train"].gpu_gb == estimate_memory(preset).stages["train"].gpu_gb
