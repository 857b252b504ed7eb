"""Clip datasets (moving squares written as webm, mp4 and a folder of frames) and the Wan
stages on them."""
from __future__ import annotations

from pathlib import Path

from tests.harness.stages import assert_ok, run_stage, write_accelerate_config

FRAMES, SIZE, RANK = 9, 32, 4


CLIPS = [  # (file, colour, pixels moved per frame, caption)
    ("red.webm", (230, 30, 30), 2, "a red ball rolls from left to right, zlr style"),
    ("blue.mp4", (30, 60, 230), -2, "a blue square slides from right to left, zlr style"),
    ("green", (30, 180, 60), 3, "a green dot moves quickly, zlr style"),
]


def moving_square(colour, dx, n=FRAMES, size=SIZE):
    """``n`` frames of ``size`` x ``size``: a square a quarter of the side wide moving
    ``dx`` pixels a frame on white."""
    import numpy as np

    side, top = size // 4, size * 3 // 8
    frames = []
    for t in range(n):
        a = np.full((size, size, 3), 255, np.uint8)
        x = (8 + t * dx) % (size - side)
        a[top:top + side, x:x + side] = colour
        frames.append(a)
    return frames


def make_video_dataset(folder: Path) -> Path:
    from PIL import Image

    from backend.core.media import write_video

    folder.mkdir(parents=True, exist_ok=True)
    rows = ["video,prompt"]
    for name, colour, dx, caption in CLIPS:
        frames = moving_square(colour, dx)
        if "." in name:
            write_video(frames, folder / name, fps=8)
        else:  # a folder of frames
            (folder / name).mkdir()
            for i, f in enumerate(frames):
                Image.fromarray(f).save(folder / name / f"{i:04d}.png")
        rows.append(f'{name},"{caption}"')
    Image.fromarray(moving_square((200, 200, 30), 0, n=1)[0]).save(folder / "still.png")
    rows.append('still.png,"a still yellow square, zlr style"')
    (folder / "metadata.csv").write_text("\n".join(rows) + "\n", encoding="utf-8")
    return folder


def tiny_models(factory, builder: str, repo: str) -> Path:
    """A models folder holding the tiny pipeline ``backend.families.wan.tiny.<builder>``
    writes (seed 0: every builder's encoders are the same) as ``repo``."""
    from backend.families.wan import tiny

    root = factory.mktemp(builder)
    getattr(tiny, builder)(root / repo, seed=0)
    return root


def stage1(folder: Path, models: Path, data: Path, sources: str, frames: int, *extra):
    """Stage 1 (plain launch) of the clips in ``data`` into ``folder/cache``."""
    out = folder / "cache"
    acc = write_accelerate_config(folder, "plain")
    proc = run_stage(["--task", "sft:data_process", "--models_dir", models, "--offline",
                      "--model_id_with_origin_paths", sources, *extra,
                      "--dataset_base_path", data, "--dataset_metadata_path",
                      data / "metadata.csv", "--num_frames", frames, "--height", SIZE,
                      "--width", SIZE, "--mixed_precision", "no", "--output_path", out],
                     config_file=acc)
    assert_ok(proc)
    return out, proc


def train(folder: Path, acc: Path, models: Path, cache: Path, sources: str, *extra):
    """Stage 2 from ``cache`` into ``folder/out``: rank 4, lr 1e-2, seed 0."""
    out = folder / "out"
    proc = run_stage(["--task", "sft:train", "--models_dir", models, "--offline",
                      "--model_id_with_origin_paths", sources, "--dataset_base_path", cache,
                      "--output_path", out, "--lora_rank", RANK, "--learning_rate", "1e-2",
                      "--seed", "0", *extra], config_file=acc)
    assert_ok(proc)
    return out, proc


def write_clips(folder: Path, clips, still: bool, fps: int = 8) -> Path:
    """A video dataset: ``clips`` ((name, frames, ...) each) as files at ``fps`` (a name with
    a suffix) or frames folders, one metadata row each, and with ``still`` a still image."""
    from PIL import Image

    from backend.core.media import write_video

    folder.mkdir(parents=True, exist_ok=True)
    rows = ["video,prompt"]
    for i, (name, n, *_) in enumerate(clips):
        frames = moving_square((40 * i % 255, 80, 200), 1 + i % 3, n=n)
        if "." in name:
            write_video(frames, folder / name, fps=fps)
        else:
            (folder / name).mkdir()
            for j, f in enumerate(frames):
                Image.fromarray(f).save(folder / name / f"{j:04d}.png")
        rows.append(f'{name},"a square moving, clip {i}, zlr style"')
    if still:
        Image.fromarray(moving_square((200, 200, 30), 0, n=1)[0]).save(folder / "still.png")
        rows.append('still.png,"a still yellow square, zlr style"')
    (folder / "metadata.csv").write_text("\n".join(rows) + "\n", encoding="utf-8")
    return folder
