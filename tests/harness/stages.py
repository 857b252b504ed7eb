"""The stages as a user's run starts them: ``accelerate launch -m backend.stages.<stage>`` in
a subprocess, offline, one CPU thread; the files they read and the checks of what they write."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


CAPTIONS = [
    ("red.png", (220, 30, 30), "circle", "a red circle on a white background"),
    ("green.png", (30, 200, 60), "square", "a green square on a white background"),
    ("blue.png", (30, 60, 220), "triangle", "a blue triangle on a white background"),
    ("yellow.png", (230, 210, 40), "circle", "a yellow circle on a black background"),
]


def stage_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    env = dict(os.environ)
    env.update({
        "PYTHONPATH": str(REPO) + os.pathsep + env.get("PYTHONPATH", ""),
        "HF_HUB_OFFLINE": "1", "HF_HUB_DISABLE_TELEMETRY": "1",
        "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false",
        "ACCELERATE_DISABLE_RICH": "1", "PYTHONUNBUFFERED": "1",
    })
    env.pop("ZEROLORA_MODELS_DIR", None)
    env.update(extra or {})
    return env


def make_dataset(folder: Path, size: int = 64) -> Path:
    from PIL import Image, ImageDraw

    folder.mkdir(parents=True, exist_ok=True)
    rows = ["image,prompt"]
    for name, colour, shape, caption in CAPTIONS:
        bg = (0, 0, 0) if "black" in caption else (255, 255, 255)
        im = Image.new("RGB", (size, size), bg)
        d = ImageDraw.Draw(im)
        box = (size // 4, size // 4, 3 * size // 4, 3 * size // 4)
        if shape == "circle":
            d.ellipse(box, fill=colour)
        elif shape == "square":
            d.rectangle(box, fill=colour)
        else:
            d.polygon([(size // 2, size // 4), (size // 4, 3 * size // 4),
                       (3 * size // 4, 3 * size // 4)], fill=colour)
        im.save(folder / name)
        (folder / name).with_suffix(".txt").write_text(caption, encoding="utf-8")
        rows.append(f"{name},{caption}")
    (folder / "metadata.csv").write_text("\n".join(rows) + "\n", encoding="utf-8")
    return folder


def write_accelerate_config(folder: Path, name: str = "plain", *, zero_stage: int = 0,
                            num_processes: int = 1, ds_config: dict | None = None,
                            zero3_init_flag: bool = False) -> Path:
    """An accelerate YAML for CPU runs; with ``ds_config`` a DEEPSPEED one plus its JSON."""
    import yaml

    folder.mkdir(parents=True, exist_ok=True)
    cfg = {"compute_environment": "LOCAL_MACHINE", "debug": False, "machine_rank": 0,
           "main_training_function": "main", "mixed_precision": "no", "num_machines": 1,
           "num_processes": num_processes, "rdzv_backend": "static", "same_network": True,
           "use_cpu": True, "main_process_port": 29500 + (os.getpid() % 2000)}
    if ds_config is not None:
        ds_path = folder / f"{name}.json"
        ds_path.write_text(json.dumps(ds_config, indent=2))
        cfg.update({"distributed_type": "DEEPSPEED", "downcast_bf16": "no",
                    "deepspeed_config": {"deepspeed_config_file": str(ds_path),
                                         "zero3_init_flag": zero3_init_flag}})
        cfg["use_cpu"] = False  # DeepSpeed picks its CPU accelerator by itself
        del cfg["mixed_precision"]  # the DeepSpeed JSON decides ("auto": off here)
    else:
        # Several CPU processes: accelerate spawns them itself only for MULTI_GPU with
        # use_cpu (MULTI_CPU expects an external MPI launcher), as plan.py writes it.
        cfg["distributed_type"] = "MULTI_GPU" if num_processes > 1 else "NO"
    path = folder / f"{name}.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


def run_stage(args: list[str], *, config_file: Path | None = None, cwd: Path | None = None,
              stage: str = "train", timeout: float = 900, env: dict | None = None,
              launch: bool = False) -> subprocess.CompletedProcess:
    """The stage as ``accelerate launch [--config_file F] -m backend.stages.<stage> args``.

    A run that the launcher would give one plain process (no config file, or one without
    DeepSpeed, for one process) runs in this process instead (``run_stage_here``): the
    subprocess would add only the seconds of importing torch and the model libraries
    again. ``launch=True``, another working folder or extra environment variables keep the
    real launch (what the launcher itself does, signals, DeepSpeed, several processes)."""
    argv = [str(a) for a in args]
    if not launch and cwd is None and env is None and one_plain_process(config_file):
        code, out, err = run_stage_here(stage, argv)
        return subprocess.CompletedProcess(["backend.stages." + stage, *argv], code, out, err)
    cmd = [sys.executable, "-m", "accelerate.commands.launch"]
    if config_file is not None:
        cmd += ["--config_file", str(config_file)]
    cmd += ["-m", f"backend.stages.{stage}", *argv]
    return subprocess.run(cmd, cwd=str(cwd or REPO), env=stage_env(env), capture_output=True,
                          text=True, timeout=timeout)


def one_plain_process(config_file: Path | None) -> bool:
    """The accelerate file (or none) launches one process without DeepSpeed."""
    if config_file is None:
        return True
    import yaml

    cfg = yaml.safe_load(Path(config_file).read_text()) or {}
    return cfg.get("distributed_type", "NO") == "NO" and int(cfg.get("num_processes", 1)) == 1


def run_stage_here(stage: str, argv: list) -> tuple[int, str, str]:
    """``backend.stages.<stage>.main(argv)`` in this process: (exit code, stdout, stderr).
    For one process without DeepSpeed only, on one thread as a launched stage; the stage's
    signal handlers and the thread count are put back."""
    import contextlib
    import importlib
    import io
    import signal

    import torch
    from accelerate.state import AcceleratorState

    main = importlib.import_module(f"backend.stages.{stage}").main
    handlers = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGINT)}
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # as a launched stage runs (OMP_NUM_THREADS=1, stage_env)
    out, err = io.StringIO(), io.StringIO()
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = main([str(a) for a in argv])
    finally:
        for s, h in handlers.items():  # the stage's stop handler belongs to its run
            signal.signal(s, h)
        torch.set_num_threads(threads)
        # accelerate keeps one state per process: the next stage here starts as a launched
        # one would (its own mixed precision), not with this one's
        AcceleratorState._reset_state(reset_partial_state=True)
    return int(code or 0), out.getvalue(), err.getvalue()


def read_progress(path: Path) -> list[dict]:
    from backend.core.progress import read_events

    events, _ = read_events(path)
    return events


def eval_lora_loss(transformer_dir: str | Path, cache_dir: str | Path,
                   lora_path: str | Path | None = None, seed: int = 0) -> float:
    """The tiny Qwen-Image transformer (with the LoRA file ``lora_path``)'s held-out loss
    (``Family.eval_loss``) on a stage-1 cache."""
    import torch

    from backend.data.cache import load_cached_samples
    from backend.families import get_family
    from backend.models.lora import load_lora

    family = get_family("qwen_image")
    model = family.load_transformer(transformer_dir, torch.float32).eval()
    if lora_path is not None:
        load_lora(model, lora_path)
    return family.eval_loss(model, load_cached_samples(cache_dir), seed)


RANK = 4


def train_args(models_root, cache, out, *extra) -> list:
    return ["--task", "sft:train", "--models_dir", models_root, "--offline",
            "--model_id_with_origin_paths",
            "Qwen/Qwen-Image:transformer/diffusion_pytorch_model*.safetensors",
            "--dataset_base_path", cache, "--output_path", out, "--lora_rank", RANK,
            "--learning_rate", "5e-3", "--seed", "0", *extra]


def assert_ok(proc: subprocess.CompletedProcess) -> None:
    assert proc.returncode == 0, (f"exit {proc.returncode}\n--- stdout\n{proc.stdout[-4000:]}"
                                  f"\n--- stderr\n{proc.stderr[-8000:]}")


def check_progress(out: Path, total: int) -> list[dict]:
    events = read_progress(out / "progress.jsonl")
    assert events, "no progress events"
    kinds = [e["event"] for e in events]
    assert kinds[0] == "start" and kinds[-1] == "end", kinds
    assert events[-1]["status"] == "succeeded", events[-1]
    assert events[0]["total"] == total
    steps = [e for e in events if e["event"] == "step"]
    assert [e["step"] for e in steps] == list(range(1, total + 1)), [e["step"] for e in steps]
    for e in steps:
        assert {"step", "total", "epoch", "loss", "lr", "samples_per_s", "eta_s"} <= set(e)
        assert e["loss"] >= 0 and e["lr"] > 0  # 0 where the timestep weight is 0
    assert sum(e["loss"] for e in steps) > 0
    assert any(e["event"] == "checkpoint" for e in events)
    return events


def launch_and_stop(args: list, config_file: Path | None, progress: Path, at_step: int,
                    timeout: float = 600) -> int:
    """Start a stage in its own process group (under ``accelerate launch``, or plainly with
    no ``config_file``), SIGTERM the group once ``at_step`` is reached, wait for every
    process of the group to exit; return the leader's exit code."""
    cmd = [sys.executable, "-m"]
    if config_file is not None:
        cmd += ["accelerate.commands.launch", "--config_file", str(config_file), "-m"]
    cmd += ["backend.stages.train", *[str(a) for a in args]]
    proc = subprocess.Popen(cmd, cwd=REPO, env=stage_env(), stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)
    deadline = time.time() + timeout
    try:
        while time.time() < deadline:
            steps = [e for e in read_progress(progress) if e["event"] == "step"]
            if steps and steps[-1]["step"] >= at_step:
                break
            assert proc.poll() is None, "stage ended before it could be stopped"
            time.sleep(0.05)
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=timeout)
        while time.time() < deadline:  # the group may outlive its leader
            try:
                os.killpg(proc.pid, 0)
            except ProcessLookupError:
                break
            time.sleep(0.2)
        else:
            raise AssertionError("stage did not exit after SIGTERM")
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    return proc.returncode
