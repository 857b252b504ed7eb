"""Sample stage: a real subprocess (also under accelerate launch) renders the base-vs-LoRA grid."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from backend.config.schema import RunConfig
from backend.core.progress import ProgressWriter, read_events
from backend.training.samples import list_checkpoints, render_samples, resolve_checkpoints
from tests.harness.loras import make_reference_lora

ROOT = Path(__file__).resolve().parents[1]
PROMPTS = ["a red circle on a white background", "a blue square"]


def env() -> dict[str, str]:
    # One thread on both sides so the base pipeline rendered here matches pixel for pixel.
    return {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1",
            "TOKENIZERS_PARALLELISM": "false", "PYTHONPATH": str(ROOT)}


def sample_config(tiny: Path, tmp: Path, **changes) -> RunConfig:
    values = dict(stages=["sample"], model_id_with_origin_paths=str(tiny), offline=True,
                  sample_prompts=PROMPTS, sample_lora_scales=[0.0, 1.0], sample_seed=7,
                  sample_steps=2, sample_cfg=4.0, sample_height=64, sample_width=64,
                  progress_file=str(tmp / "progress.jsonl"))
    values.update(changes)
    return RunConfig(**values)


@pytest.fixture(scope="module")
def run_dir(tiny_dir, tmp_path_factory) -> Path:  # noqa: F811
    """A run folder with two checkpoints (different LoRAs) in output/, plus an export/."""
    run = tmp_path_factory.mktemp("run")
    make_reference_lora(tiny_dir, run / "output" / "step-2.safetensors", seed=1, b_std=2.0)
    make_reference_lora(tiny_dir, run / "output" / "step-10.safetensors", seed=2, b_std=2.0)
    (run / "output" / "export").mkdir()
    (run / "output" / "training_args.json").write_text("{}")
    return run


def base_image(tiny: Path, prompt: str, seed: int = 7) -> np.ndarray:
    """The plain diffusers pipeline, nothing of ours, at the same settings."""
    from diffusers import QwenImagePipeline

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        pipe = QwenImagePipeline.from_pretrained(tiny, torch_dtype=torch.float32)
        g = torch.Generator("cpu").manual_seed(seed)
        img = pipe(prompt=prompt, negative_prompt="", true_cfg_scale=4.0, num_inference_steps=2,
                   height=64, width=64, generator=g).images[0]
    finally:
        torch.set_num_threads(threads)
    return np.asarray(img)


def pixels(path: Path) -> np.ndarray:
    return np.asarray(Image.open(path).convert("RGB"))


def load_index(out: Path) -> list[dict]:
    return json.loads((out / "index.json").read_text())["images"]


def test_checkpoint_folders_give_latest_or_all(run_dir):
    out = run_dir / "output"
    assert [p.name for p in list_checkpoints(out)] == ["step-2.safetensors", "step-10.safetensors"]
    assert resolve_checkpoints([out]) == [out / "step-10.safetensors"]
    assert [p.name for p in resolve_checkpoints([out], all_checkpoints=True)] == [
        "step-2.safetensors", "step-10.safetensors"]
    assert resolve_checkpoints([out / "step-2.safetensors", out]) == [
        out / "step-2.safetensors", out / "step-10.safetensors"]


@pytest.mark.slow
def test_sample_stage_under_accelerate_renders_base_and_lora_grid(
        tiny_dir, models_root, run_dir, tmp_path, launch_stage, plain_accelerate_config):  # noqa: F811
    # The run.yaml way: default model sources (Qwen/Qwen-Image:...) resolved in models_dir.
    cfg = sample_config(tiny_dir, tmp_path, models_dir=str(models_root),
                        model_id_with_origin_paths=RunConfig().model_id_with_origin_paths)
    cfg.save(tmp_path / "run.yaml")
    out = tmp_path / "samples"
    res = launch_stage(["--config", tmp_path / "run.yaml", "--checkpoints", run_dir / "output",
                        "--output_dir", out], config_file=plain_accelerate_config,
                       stage="sample", timeout=600)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]

    index = load_index(out)
    assert len(index) == 4  # 2 prompts x (base + step-10 at scale 1)
    latest = str((run_dir / "output" / "step-10.safetensors").resolve())
    grid = {(e["prompt"], e["checkpoint"], e["scale"], e["seed"]): out / e["image"] for e in index}
    assert set(grid) == {(p, c, s, 7) for p in PROMPTS for c, s in ((None, 0.0), (latest, 1.0))}
    for path in grid.values():
        assert path.is_file() and Image.open(path).size == (64, 64)
    assert sorted(p.name for p in (out / "base").iterdir()) == ["p00-seed7.png", "p01-seed7.png"]

    for prompt in PROMPTS:
        base = pixels(grid[(prompt, None, 0.0, 7)])
        assert np.array_equal(base, base_image(tiny_dir, prompt))  # scale 0 == plain pipeline
        lora = pixels(grid[(prompt, latest, 1.0, 7)])
        assert np.abs(lora.astype(int) - base).max() > 0  # the LoRA changes the picture
    assert not np.array_equal(pixels(grid[(PROMPTS[0], None, 0.0, 7)]),
                              pixels(grid[(PROMPTS[1], None, 0.0, 7)]))

    events, _ = read_events(tmp_path / "progress.jsonl")
    assert [e["event"] for e in events] == ["start"] + ["sample", "step"] * 4 + ["sample",
                                                                                 "end"]
    assert all(e["stage"] == "sample" for e in events)
    assert events[0]["total"] == 4 and events[-1]["status"] == "succeeded"
    samples = [e for e in events if e["event"] == "sample"]
    assert {Path(e["path"]) for e in samples[:4]} == set(grid.values())
    assert Path(samples[4]["path"]) == out / "index.json"
    # A step per image rendered: the runner's progress shows 4 / 4 when the stage ends.
    assert [(e["step"], e["total"]) for e in events if e["event"] == "step"] == [
        (1, 4), (2, 4), (3, 4), (4, 4)]
    from backend.jobs.watch import ProgressState

    state = ProgressState((0, 0))
    for e in events:
        state.apply(e)
    assert (state.stages["sample"]["step"], state.stages["sample"]["total"]) == (4, 4)


@pytest.mark.slow
def test_all_checkpoints_render_base_once_per_prompt(tiny_dir, run_dir, tmp_path):  # noqa: F811
    out = tmp_path / "samples"
    cmd = [sys.executable, "-m", "backend.stages.sample", "--stages", "sample",
           "--model_id_with_origin_paths", str(tiny_dir), "--offline",
           "--sample_prompts", PROMPTS[0], "--sample_lora_scales", "0", "0.5", "1",
           "--sample_steps", "2", "--sample_height", "64", "--sample_width", "64",
           "--checkpoints", str(run_dir / "output"), "--all_checkpoints",
           "--output_dir", str(out), "--progress_file", str(tmp_path / "p.jsonl")]
    res = subprocess.run(cmd, cwd=ROOT, env=env(), capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    index = load_index(out)
    assert sorted((e["checkpoint_name"], e["scale"]) for e in index) == [
        ("base", 0.0), ("step-10", 0.5), ("step-10", 1.0), ("step-2", 0.5), ("step-2", 1.0)]
    assert len(list((out / "base").iterdir())) == 1
    img = {(e["checkpoint_name"], e["scale"]): pixels(out / e["image"]) for e in index}
    assert len({a.tobytes() for a in img.values()}) == 5  # every scale and checkpoint differs
    events, _ = read_events(tmp_path / "p.jsonl")
    assert events[0]["total"] == 5 and events[-1]["status"] == "succeeded"


def test_render_samples_during_training_reuses_base_and_merges_index(
        tiny_dir, run_dir, tmp_path):  # noqa: F811
    cfg = sample_config(tiny_dir, tmp_path, sample_prompts=[PROMPTS[1]])
    out = tmp_path / "samples"
    progress = ProgressWriter(tmp_path / "train.jsonl", "train")
    totals: list[int] = []
    first = render_samples(cfg, [run_dir / "output" / "step-2.safetensors"], out,
                           progress=progress, step=2, on_start=totals.append)
    base_file = out / "base" / "p00-seed7.png"
    stamp = base_file.stat().st_mtime_ns
    second = render_samples(cfg, [run_dir / "output"], out, progress=progress, step=10,
                            on_start=totals.append)
    assert totals == [2, 1]  # base rendered at step 2, reused at step 10
    assert base_file.stat().st_mtime_ns == stamp
    assert [e["checkpoint_name"] for e in first] == ["base", "step-2"]
    assert [e["checkpoint_name"] for e in second] == ["base", "step-10"]
    assert sorted(e["checkpoint_name"] for e in load_index(out)) == ["base", "step-10", "step-2"]
    events, _ = read_events(tmp_path / "train.jsonl")
    assert [(e["event"], e["step"]) for e in events] == [("sample", 2)] * 3 + [("sample", 10)] * 2
    assert all(e["stage"] == "train" for e in events)  # the caller's stage, no start/end


@pytest.mark.slow
@pytest.mark.parametrize("args, needle, code", [
    (["--checkpoints", "/nonexistent/step-1.safetensors", "--output_dir", "OUT"],
     "checkpoints: not found (got '/nonexistent/step-1.safetensors'", 2),
    (["--output_dir", "OUT"], "checkpoints: LoRA scales [1.0] need a LoRA checkpoint", 2),
    (["--checkpoints", "CKPT"], "output_dir: required", 2),
    (["--checkpoints", "CKPT", "--output_dir", "OUT", "--sample_steps", "0"],
     "sample_steps: input should be greater than or equal to 1", 2),
])
def test_failures_exit_nonzero_with_a_reason(run_dir, tmp_path, args, needle, code):
    args = [a.replace("OUT", str(tmp_path / "s")).replace("CKPT", str(run_dir / "output"))
            for a in args]
    progress = tmp_path / "p.jsonl"
    cmd = [sys.executable, "-m", "backend.stages.sample", "--stages", "sample",
           "--model_id_with_origin_paths", str(tmp_path), "--sample_lora_scales", "0", "1",
           "--progress_file", str(progress)] + args
    res = subprocess.run(cmd, cwd=ROOT, env=env(), capture_output=True, text=True, timeout=300)
    assert res.returncode == code
    assert needle in res.stderr
    events, _ = read_events(progress)
    assert events[-1]["event"] == "end" and events[-1]["status"] == "failed"
    assert needle in events[-1]["reason"]
    assert not (tmp_path / "s").exists()


@pytest.mark.slow
def test_missing_model_fails_with_end_event(tmp_path):
    res = subprocess.run(
        [sys.executable, "-m", "backend.stages.sample", "--stages", "sample",
         "--model_id_with_origin_paths", str(tmp_path / "no-model"), "--offline",
         "--sample_lora_scales", "0", "--output_dir", str(tmp_path / "s"),
         "--progress_file", str(tmp_path / "p.jsonl")],
        cwd=ROOT, env=env(), capture_output=True, text=True, timeout=300)
    assert res.returncode == 1
    events, _ = read_events(tmp_path / "p.jsonl")
    assert events[-1]["status"] == "failed" and "no-model" in events[-1]["reason"]
