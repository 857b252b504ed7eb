"""Windows of a clip (``frame_extraction``, musubi-tuner's option): one long clip gives
several samples.

- ``window_starts`` for each mode over clips of several lengths (frame_stride, video_fps);
- the dataset check: a clip's windows as records of their own, counted in the findings, the
  Dataset check's summary and its bucket plan; a too-short clip refused naming its row;
- a window's frames are the clip's frames from its start (frames folder, video file, a clip
  resampled by video_fps), and so are its mask's;
- the cache key holds the window; head keeps today's keys;
- the rules: the window stride only with slide, the window count only with uniform, no
  windows beside a row's sound or reference video; an image family ignores the option;
- one slow run of stage 1 on the tiny Wan caching a long clip as its chunks.
"""
from __future__ import annotations

from pathlib import Path

import pytest

from backend.config.errors import ConfigError
from backend.config.validation import validate
from backend.data.dataset import DatasetError, dataset_bucket_plan
from backend.data.video import (Window, check_video_dataset, clip_buckets, load_clip,
                                plan_clips, read_frames, validate_any_dataset, window_starts,
                                window_summary)
from tests.harness.chinese import assert_chinese
from tests.harness import clips as clips_harness
from tests.harness.clips import SIZE, moving_square, stage1, tiny_models

DIFFUSERS = "Wan-AI/Wan2.1-T2V-1.3B-Diffusers"
STAGE1 = (f"{DIFFUSERS}:text_encoder/*.safetensors,"
          f"{DIFFUSERS}:vae/diffusion_pytorch_model.safetensors")


def config(folder: Path | None = None, **changes):
    data = {"dataset_base_path": str(folder), "dataset_metadata_path":
            str(folder / "metadata.csv")} if folder else {}
    return validate({"model_family": "wan", "num_frames": 5, "height": SIZE, "width": SIZE,
                     "model_id_with_origin_paths": DIFFUSERS, **data, **changes},
                    require_inputs=False)


def write_clips(folder: Path, clips, still: bool = False, fps: int = 8) -> Path:
    return clips_harness.write_clips(folder, clips, still, fps)


# ------------------------------------------------------------------------------------------
# Where windows start
# ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("available, changes, starts", [
    # num_frames 5 at frame_stride 1: a window is 5 source frames
    (5, {"frame_extraction": "head"}, [0]),
    (17, {"frame_extraction": "head"}, [0]),
    (4, {"frame_extraction": "chunk"}, []),
    (5, {"frame_extraction": "chunk"}, [0]),
    (9, {"frame_extraction": "chunk"}, [0]),
    (10, {"frame_extraction": "chunk"}, [0, 5]),
    (17, {"frame_extraction": "chunk"}, [0, 5, 10]),
    (5, {"frame_extraction": "slide", "frame_window_stride": 3}, [0]),
    (17, {"frame_extraction": "slide", "frame_window_stride": 3}, [0, 3, 6, 9, 12]),
    (8, {"frame_extraction": "slide"}, [0, 1, 2, 3]),
    (17, {"frame_extraction": "uniform", "frame_sample": 4}, [0, 4, 8, 12]),
    (20, {"frame_extraction": "uniform", "frame_sample": 3}, [0, 7, 15]),
    (17, {"frame_extraction": "uniform"}, [0]),
    # windows that fall on one start are one (6 frames hold starts 0 and 1 only)
    (6, {"frame_extraction": "uniform", "frame_sample": 4}, [0, 1]),
    # frame_stride 2: a window of 5 frames reaches 9 source frames
    (17, {"frame_extraction": "chunk", "frame_stride": 2}, [0]),
    (18, {"frame_extraction": "chunk", "frame_stride": 2}, [0, 9]),
    (20, {"frame_extraction": "slide", "frame_stride": 2, "frame_window_stride": 4},
     [0, 4, 8]),
    # frame buckets: the windows of the largest count the clip fills
    (20, {"frame_extraction": "chunk", "frame_buckets": [5, 9]}, [0, 9]),
    (8, {"frame_extraction": "chunk", "frame_buckets": [5, 9]}, [0]),
])
def test_windows_start_where_each_mode_puts_them(available, changes, starts):
    assert window_starts(available, 0.0, config(**changes)) == starts


def test_video_fps_counts_windows_in_the_clip_s_own_frames():
    """At 16 fps resampled to 8, 5 frames reach 9 source frames: 30 frames hold 3 chunks;
    at 8 fps resampled to 16 a window is 3 source frames."""
    cfg = config(frame_extraction="chunk", video_fps=8.0)
    assert window_starts(30, 16.0, cfg) == [0, 9, 18]
    assert window_starts(8, 16.0, cfg) == []
    assert window_starts(9, 16.0, cfg) == [0]
    assert window_starts(9, 16.0, config(frame_extraction="slide", video_fps=8.0,
                                         frame_window_stride=2)) == [0]
    assert window_starts(12, 8.0, config(frame_extraction="chunk", video_fps=16.0)) == \
        [0, 3, 6, 9]


# ------------------------------------------------------------------------------------------
# The dataset: windows as records, counted, refused
# ------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def clips(tmp_path_factory) -> Path:
    # a video of 17 frames, an mp4 of 7, a frames folder of 12 and a still image
    return write_clips(tmp_path_factory.mktemp("windows") / "clips",
                       [("long.webm", 17), ("short.mp4", 7), ("frames", 12)], still=True)


def test_each_window_is_a_record_and_the_check_counts_them(clips):
    cfg = config(clips, frame_extraction="chunk", batch_size=2)
    records = check_video_dataset(cfg)
    assert [(r.image.name, r.window) for r in records] == [
        ("long.webm", Window(0, 0, 5)), ("long.webm", Window(1, 5, 5)),
        ("long.webm", Window(2, 10, 5)), ("short.mp4", Window(0, 0, 5)),
        ("frames", Window(0, 0, 5)), ("frames", Window(1, 5, 5)), ("still.png", None)]
    assert {r.where for r in records[:3]} == {"metadata.csv row 1"}
    assert clip_buckets(records, cfg) == [(SIZE, SIZE, 5)] * 6 + [(SIZE, SIZE, 1)]

    findings = validate_any_dataset(cfg)
    assert [f.get("windows") for f in findings] == [3, 1, 2, None]
    assert str(findings[0]["message"]) == \
        "3 windows of 5 frames (frame_extraction chunk; starting at frames 0, 5, 10)"
    assert_chinese(findings[0]["message"])
    summary = window_summary(cfg, findings)
    assert str(summary) == "4 clips → 7 windows, each a sample (frame_extraction chunk)"
    assert_chinese(summary)
    plan = dataset_bucket_plan(cfg, findings)
    assert [(r["frames"], r["images"], r["batches"]) for r in plan["rows"]] == [
        (5, 6, 3), (1, 1, 1)]
    # head: today's one sample a clip, and no summary
    head = config(clips, batch_size=2)
    assert [r.window for r in check_video_dataset(head)] == [None] * 4
    assert window_summary(head, validate_any_dataset(head)) is None
    # the preflight check (headers only) finds the same windows
    assert [r.window for r in check_video_dataset(cfg, headers_only=True)] == \
        [r.window for r in records]


def test_uniform_and_slide_windows_of_a_long_clip(clips):
    uniform = check_video_dataset(config(clips, frame_extraction="uniform", frame_sample=3))
    assert [(r.image.name, r.window.start) for r in uniform if r.window] == [
        ("long.webm", 0), ("long.webm", 6), ("long.webm", 12), ("short.mp4", 0),
        ("short.mp4", 1), ("short.mp4", 2), ("frames", 0), ("frames", 3), ("frames", 7)]
    slide = check_video_dataset(config(clips, frame_extraction="slide",
                                       frame_window_stride=4))
    assert [r.window.start for r in slide if r.image.name == "long.webm"] == [0, 4, 8, 12]


def test_a_too_short_clip_is_refused_naming_its_row_with_windows(tmp_path):
    folder = write_clips(tmp_path / "short", [("ok.webm", 12), ("short.webm", 3),
                                              ("few", 4)])
    for mode in ("chunk", "slide", "uniform"):
        with pytest.raises(DatasetError) as e:
            check_video_dataset(config(folder, frame_extraction=mode))
        said = [str(p) for p in e.value.problems]
        assert said == [
            "metadata.csv row 2: too short: 3 frames at 8 fps, 5 needed for num_frames 5 "
            "(frame_stride 1)",
            "metadata.csv row 3: too short: 4 frames, 5 needed for num_frames 5 "
            "(frame_stride 1)"], said
        for p in e.value.problems:
            assert_chinese(p)


# ------------------------------------------------------------------------------------------
# A window's frames
# ------------------------------------------------------------------------------------------
def test_a_window_reads_the_clip_s_frames_from_its_start(clips):
    """Frames folder (lossless) and video file alike: window k's pixels are the whole
    clip's pixels from its first frame on."""
    cfg = config(clips, frame_extraction="chunk")
    whole = config(clips).model_copy(update={"frame_buckets": list(range(1, 18))})
    for name, starts in (("frames", [0, 5]), ("long.webm", [0, 5, 10])):
        full = load_clip(clips / name, whole)
        for k, start in enumerate(starts):
            got = load_clip(clips / name, cfg, Window(k, start, 5))
            assert got.shape == (1, 3, 5, SIZE, SIZE)
            assert (got == full[:, :, start:start + 5]).all(), (name, k)
    assert not (load_clip(clips / "frames", cfg, Window(1, 5, 5))
                == load_clip(clips / "frames", cfg)).all()
    # one-shot sft reads the same windows, item by item
    from backend.data.video import ClipDataset

    records = check_video_dataset(cfg)
    items = ClipDataset(records, cfg)
    assert len(items) == 7
    assert (items[2]["pixels"] == load_clip(clips / "long.webm", whole)[:, :, 10:15]).all()
    assert tuple(items[6]["pixels"].shape) == (1, 3, 1, SIZE, SIZE)  # the still image


def test_video_fps_windows_take_every_other_frame_from_their_start(tmp_path):
    """A 16 fps clip of 30 frames at video_fps 8: chunks start at 0, 9, 18, each taking
    every other source frame."""
    import numpy as np

    from backend.core.media import write_video

    folder = tmp_path / "fast"
    folder.mkdir()
    source = moving_square((0, 80, 200), 4, n=30)
    write_video(source, folder / "fast.webm", fps=16)
    (folder / "metadata.csv").write_text("video,prompt\nfast.webm,fast\n", encoding="utf-8")
    cfg = config(folder, frame_extraction="chunk", video_fps=8.0)
    records = check_video_dataset(cfg)
    assert [r.window.start for r in records] == [0, 9, 18]
    for r in records:
        frames = read_frames(r.image, cfg, window=r.window)[0]
        got = np.stack([np.asarray(f, dtype=np.float32) for f in frames])
        want = np.stack(source[r.window.start:r.window.start + 9:2]).astype(np.float32)
        assert got.shape == want.shape
        assert float(np.abs(got - want).mean()) < 12  # lossy VP9
        other = np.stack(source[r.window.start + 1:r.window.start + 10:2]).astype(np.float32)
        assert float(np.abs(got - want).mean()) < float(np.abs(got - other).mean())


def test_a_mask_video_is_cut_with_its_clip_s_window(tmp_path):
    """masked_loss: each window's mask is the mask video's frames at the same window (grey
    levels that rise frame by frame tell them apart); a mask too short for the last window
    is refused naming the row and the window."""
    from backend.core.media import write_video
    from backend.data.video import check_stage_dataset, load_clip_mask
    from backend.families import get_family

    folder = write_clips(tmp_path / "masked", [("long.webm", 15)])
    (tmp_path / "masks").mkdir()
    greys = [moving_square((0, 0, 0), 0, n=1)[0] * 0 + 15 * j for j in range(15)]
    write_video(greys, tmp_path / "masks" / "long.webm", fps=8)
    cfg = config(folder, frame_extraction="chunk", masked_loss=True,
                 mask_path=str(tmp_path / "masks"), mask_missing="refuse")
    records = check_stage_dataset(cfg, get_family("wan"))
    assert [r.window.start for r in records] == [0, 5, 10]
    for r in records:
        mask = load_clip_mask(r, cfg)
        assert tuple(mask.shape) == (1, 5, SIZE, SIZE)
        want = [15 * j / 255 for j in range(r.window.start, r.window.start + 5)]
        got = mask.mean(dim=(2, 3))[0].tolist()
        assert all(abs(a - b) < 0.04 for a, b in zip(got, want)), (got, want)
    write_video(greys[:12], tmp_path / "masks" / "long.webm", fps=8)
    with pytest.raises(DatasetError) as e:
        check_stage_dataset(cfg, get_family("wan"))
    said = [str(p) for p in e.value.problems]
    assert len(said) == 1 and said[0].startswith("metadata.csv row 1") and \
        "window 3 of frame_extraction chunk: 12 frames, 15 needed" in said[0], said


# ------------------------------------------------------------------------------------------
# The cache key
# ------------------------------------------------------------------------------------------
def test_the_cache_key_holds_the_window_and_head_keeps_its_keys(clips):
    cfg = config(clips, frame_extraction="chunk")
    records = check_video_dataset(cfg)
    entries = plan_clips(cfg, records, [])
    assert len({e["key"] for e in entries}) == len(entries) == 7
    assert [e.get("window") for e in entries] == [0, 1, 2, 0, 0, 1, None]
    assert [e.get("start") for e in entries] == [0, 5, 10, 0, 0, 5, None]
    assert plan_clips(cfg, check_video_dataset(cfg), []) == entries  # a re-run: same keys
    head = config(clips)
    head_entries = plan_clips(head, check_video_dataset(head), [])
    assert all("window" not in e for e in head_entries)
    # the first window is the head's frames, but its own sample (another key)
    assert head_entries[0]["key"] != entries[0]["key"]
    assert head_entries[-1]["key"] == entries[-1]["key"]  # the image: one sample either way


# ------------------------------------------------------------------------------------------
# The rules
# ------------------------------------------------------------------------------------------
def test_window_options_only_with_their_mode_and_not_beside_sound():
    with pytest.raises(ConfigError) as e:
        config(frame_extraction="chunk", frame_window_stride=4, frame_sample=3)
    assert [str(p) for p in e.value.problems] == [
        "frame_window_stride: a window stride without sliding windows (got 4 with "
        "frame_extraction chunk; allowed 1, or frame_extraction slide)",
        "frame_sample: a window count without uniform windows (got 3 with frame_extraction "
        "chunk; allowed 1, or frame_extraction uniform)"]
    for p in e.value.problems:
        assert_chinese(p)
    assert config(frame_extraction="slide", frame_window_stride=4).frame_window_stride == 4
    assert config(frame_extraction="uniform", frame_sample=3).frame_sample == 3
    with pytest.raises(ConfigError) as e:
        validate({"model_family": "ltx2", "frame_extraction": "slide",
                  "extra_inputs": "input_audio"}, require_inputs=False)
    said = [str(p) for p in e.value.problems if str(p).startswith("frame_extraction")]
    assert said == ["frame_extraction: windows of a clip cannot be cut from its extra_inputs "
                    "input_audio (got slide; allowed head, or extra_inputs without "
                    "input_audio)"], [str(p) for p in e.value.problems]
    assert_chinese(e.value.problems[[str(p) for p in e.value.problems].index(said[0])])
    # below zero, or a mode that is none of them: the schema's own bounds
    with pytest.raises(ConfigError) as e:
        config(frame_extraction="full", frame_sample=0)
    assert {str(p).split(":")[0] for p in e.value.problems} == {"frame_extraction",
                                                               "frame_sample"}
    # an image family ignores it, as it does frame_buckets
    assert validate({"model_family": "qwen_image", "frame_extraction": "chunk"},
                    require_inputs=False).frame_extraction == "chunk"


# ------------------------------------------------------------------------------------------
# Stage 1 on the tiny Wan
# ------------------------------------------------------------------------------------------
@pytest.mark.slow
@pytest.mark.timeout(600)
def test_stage1_caches_each_chunk_of_a_long_clip(tmp_path_factory):
    """A 15-frame clip at num_frames 5 is three chunks, a 7-frame one one: stage 1 caches
    four samples of 5 frames (2 latent frames), and a second run encodes nothing."""
    from backend.data.cache import check_cache, load_sample, read_manifest

    data = write_clips(tmp_path_factory.mktemp("windows_run") / "clips",
                       [("long.webm", 15), ("short.webm", 7)])
    models = tiny_models(tmp_path_factory, "build_tiny_wan", DIFFUSERS)
    folder = tmp_path_factory.mktemp("windows_stage1")
    cache, proc = stage1(folder, models, data, STAGE1, 5, "--frame_extraction", "chunk")
    log = proc.stdout + proc.stderr
    assert "2 clips → 4 windows, each a sample (frame_extraction chunk)" in log, log[-3000:]
    manifest = read_manifest(cache)
    assert [(e["frames"], e.get("window"), e.get("start")) for e in manifest["samples"]] == [
        (5, 0, 0), (5, 1, 5), (5, 2, 10), (5, 0, 0)]
    files = check_cache(cache)
    assert len(files) == 4
    latents = [load_sample(p)["latents"] for p in files]
    assert [tuple(x.shape) for x in latents] == [(1, 16, 2, SIZE // 8, SIZE // 8)] * 4
    assert not (latents[0] == latents[1]).all()  # another window, other frames
    _, again = stage1(folder, models, data, STAGE1, 5, "--frame_extraction", "chunk")
    assert "4 samples: 0 to encode, 4 reused" in again.stdout + again.stderr
