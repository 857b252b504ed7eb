"""Real-size Qwen-Image on one GPU: peak memory of every stage per offload mode, host RAM,
seconds per training step, each next to the estimator's prediction.

What it does
1. Writes the models it needs into ``--work``/model (bench/random_model.py): the transformer
   (``--config``; default the published architecture, 20.4 B parameters, 40.9 GB), the
   text encoder Qwen2.5-VL-7B (``--text_encoder_config``, 8.29 B, 16.6 GB) and the VAE
   (``--vae_config``, 0.25 GB) with random bf16 weights -- built on the meta device, each
   parameter materialised on its own (on the GPU when there is one) and written in ~2 GB
   safetensors shards, so host RAM holds a shard or two -- plus the tiny model's tokenizer
   and the real scheduler config. Nothing is downloaded; every measurement reads the same
   files (``--reuse`` keeps them across calls). Disk: 57.7 GB for all three.
2. Runs each selected measurement as its own stage process, planned by
   ``backend.planning.plan.plan_run`` (run.yaml, accelerate YAML, DeepSpeed JSON) and launched with
   the plan's argv, ``bench/stage_probe.py`` in place of ``-m`` so the stage reports its
   own ``torch.cuda.max_memory_allocated`` at exit:
   - ``--data_process`` none,model,sequential: stage 1 (``--task sft:data_process``,
     ``data_process_offload``) on ``--images`` synthetic images of ``--height`` x
     ``--width`` with ~``--text_tokens``-token captions;
   - ``--train`` no_offload,low_vram: stage 2 (``--task sft:train``) from a synthetic
     one-sample cache, preset qwen_image_single_gpu (bf16 weights on the GPU, per-block
     checkpointing) or qwen_image_low_vram (ZeRO-3, parameters and optimizer on the CPU,
     DeepSpeed activation checkpointing), LoRA ``--rank``, ``--warmup`` + ``--steps`` steps;
   - ``--sample`` none,model,sequential,sequential_tiled: the sample stage
     (``sample_cpu_offload``; ``_tiled`` adds ``sample_vae_tiling``) rendering one
     ``--sample_height`` x ``--sample_width`` image of one prompt in ``--sample_steps``
     steps with a random rank-``--rank`` LoRA loaded (``--sample_cfg`` 1: one transformer
     pass per step; guidance > 1 adds a second pass after the first: twice the time,
     about the same memory).
   They run in the flow's order (stage 1, train, sample; modes in the order given) except
   train low_vram, the slowest (it builds DeepSpeed's CPU Adam on first use), which runs
   last. With ``--budget_s`` no measurement starts once less than 60 s are left and a
   running one is stopped 40 s before the end (a train stage finishes its step first;
   what it measured is kept), so the command ends in time with what it has.
3. Records per measurement: peak allocated / reserved (the stage process), the driver's
   view (pynvml, else nvidia-smi: device memory used, peak minus the idle baseline), peak
   host RSS of the stage's process tree, wall time, what it wrote (cache files, images),
   and the estimator's prediction for the same config (GPU, host, parts); for train also
   seconds per step after warm-up and the transfer bound of ZeRO-3 offload (bytes moved
   per step over the measured host->device bandwidth of a pinned ``--bandwidth_gb`` tensor).
Writes ``--out`` (bench/results/gpu_qwen_image.json) after every measurement and prints a
summary table. Exit 0 when every selected measurement ran and succeeded.

Run on a GPU machine (bench/gpu_prepare.md: packages to bring, time per measurement):
    # stage 1 x3, train no_offload, sample x2: about 7 minutes, capped at 8
    python bench/gpu_qwen_image.py --work /tmp/zl-gpu --spill_dir /dev/shm/zl-gpu --keep \\
        --reuse --budget_s 480 --steps 2 --data_process none,sequential,model \\
        --train no_offload --sample sequential_tiled,model
    # train under ZeRO-3 offload alone: about 5 minutes (weights reused on a warm machine)
    python bench/gpu_qwen_image.py --work /tmp/zl-gpu --keep --reuse --steps 2 \\
        --train low_vram --data_process "" --sample ""
CPU check of the whole path (tiny configs; 3-5 minutes on 2 cores, 1-1.5 without --train):
    python bench/gpu_qwen_image.py --tiny --device cpu --height 64 --width 64 \\
        --text_tokens 16 --rank 4 --steps 2 --out /tmp/gpu_check.json
"""
from __future__ import annotations

import argparse
import csv
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from types import SimpleNamespace

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from bench import random_model  # noqa: E402
from bench.results_io import write_result  # noqa: E402

TRAIN = {"no_offload": "qwen_image_single_gpu", "low_vram": "qwen_image_low_vram"}
DATA_PROCESS = ("none", "model", "sequential")
SAMPLE = {"none": ("none", False), "model": ("model", False),
          "sequential": ("sequential", False), "sequential_tiled": ("sequential", True)}
NEEDS = {"data_process": ["text_encoder", "vae"], "train": ["transformer"],
         "sample": ["text_encoder", "vae", "transformer"]}
KINDS = ("data_process", "train", "sample")
MIN_START_S = 60   # with --budget_s: no measurement starts with less left
STOP_S = 40        # ... and each is stopped this long before the budget ends
GB = 1e9
CPU_WEIGHTS_MAX = 4 * GB   # --device cpu refuses more (a CPU check wants --tiny)


# ------------------------------------------------------------------------------------------
# Inputs
# ------------------------------------------------------------------------------------------
def write_cache(folder: Path, config: dict, height: int, width: int, text_tokens: int,
                seed: int = 0) -> Path:
    """A stage-1 cache with one synthetic sample (the cache module's own writer)."""
    import torch

    from backend.data.cache import save_sample, write_manifest

    folder.mkdir(parents=True, exist_ok=True)
    g = torch.Generator().manual_seed(seed)
    joint = int(config.get("joint_attention_dim", 3584))
    tensors = {
        "prompt_emb": torch.randn(1, text_tokens, joint, generator=g).to(torch.bfloat16),
        "prompt_emb_mask": torch.ones(1, text_tokens, dtype=torch.int64),
        "latents": torch.randn(1, 16, height // 8, width // 8, generator=g).to(torch.bfloat16),
        "height": torch.tensor([height]), "width": torch.tensor([width]),
    }
    save_sample(folder / "sample0.safetensors", tensors, {"prompt": "synthetic"})
    write_manifest(folder, [{"key": "sample0", "file": "sample0.safetensors", "image": "-",
                             "prompt": "synthetic", "width": width, "height": height}], [],
                   "qwen_image")
    return folder


def write_dataset(folder: Path, images: int, height: int, width: int, caption: str) -> Path:
    """``images`` noise PNGs of ``height`` x ``width`` and a metadata.csv (image,prompt)."""
    import numpy as np
    from PIL import Image

    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    with open(folder / "metadata.csv", "w", newline="") as f:
        rows = csv.writer(f)
        rows.writerow(["image", "prompt"])
        for i in range(images):
            pixels = rng.integers(0, 256, (height, width, 3), dtype=np.uint8)
            Image.fromarray(pixels).save(folder / f"img{i}.png")
            rows.writerow([f"img{i}.png", caption])
    return folder


# ------------------------------------------------------------------------------------------
# Measurements
# ------------------------------------------------------------------------------------------
def h2d_bandwidth(gb: float, reps: int = 5) -> float | None:
    """Host->device GB/s of a pinned bf16 tensor of ``gb`` GB (None without CUDA)."""
    import torch

    if not torch.cuda.is_available():
        return None
    n = int(gb * GB) // 2
    host = torch.ones(n, dtype=torch.bfloat16).pin_memory()
    dev = torch.empty(n, dtype=torch.bfloat16, device="cuda")
    dev.copy_(host, non_blocking=True)
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(reps):
        dev.copy_(host, non_blocking=True)
    torch.cuda.synchronize()
    seconds = time.perf_counter() - t0
    del host, dev
    torch.cuda.empty_cache()
    return round(reps * n * 2 / seconds / GB, 2)


class GpuUsed:
    """Device memory used, as the driver reports it (pynvml, else nvidia-smi)."""

    def __init__(self, index: int = 0):
        self.nvml = None
        self.index = index
        try:
            import pynvml
            pynvml.nvmlInit()
            self.nvml = pynvml
            self.handle = pynvml.nvmlDeviceGetHandleByIndex(index)
        except Exception:  # noqa: BLE001 - fall back to the command line tool
            self.nvml = None
        self.smi = shutil.which("nvidia-smi")

    @property
    def available(self) -> bool:
        return self.nvml is not None or self.smi is not None

    def used_bytes(self) -> int | None:
        if self.nvml is not None:
            return int(self.nvml.nvmlDeviceGetMemoryInfo(self.handle).used)
        if self.smi:
            out = subprocess.run([self.smi, "--query-gpu=memory.used", "--format=csv,noheader,"
                                  "nounits", f"--id={self.index}"], capture_output=True,
                                 text=True).stdout.strip()
            return int(float(out.splitlines()[0]) * 1024 * 1024) if out else None
        return None

    def describe(self) -> dict:
        if not self.smi:
            return {}
        out = subprocess.run([self.smi, "--query-gpu=name,memory.total,driver_version",
                              "--format=csv,noheader"], capture_output=True, text=True).stdout
        return {"nvidia_smi": out.strip()}


class Monitor:
    """Samples a process tree's RSS and the GPU's used memory every ``period`` seconds."""

    def __init__(self, pid: int, gpu: GpuUsed | None, period: float = 0.25):
        import psutil

        self.proc = psutil.Process(pid)
        self.gpu, self.period = gpu, period
        self.host_peak = 0
        self.gpu_peak = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        import psutil

        while not self._stop.is_set():
            try:
                procs = [self.proc] + self.proc.children(recursive=True)
                rss = 0
                for p in procs:
                    try:
                        rss += p.memory_info().rss
                    except psutil.Error:
                        pass
                self.host_peak = max(self.host_peak, rss)
            except psutil.Error:
                pass
            if self.gpu is not None:
                used = self.gpu.used_bytes()
                if used is not None:
                    self.gpu_peak = max(self.gpu_peak, used)
            self._stop.wait(self.period)

    def start(self) -> "Monitor":
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()


def step_seconds(progress: Path, warmup: int) -> list[float]:
    """Seconds of each optimizer step after ``warmup`` steps, from the stage's events."""
    from backend.core.progress import read_events

    events, _ = read_events(progress)
    times = {e["step"]: e["time"] for e in events if e.get("event") == "step"}
    return [round(times[s] - times[s - 1], 3) for s in sorted(times)
            if s > warmup and s - 1 in times]


# ------------------------------------------------------------------------------------------
# One measurement: a planned stage run under the probe
# ------------------------------------------------------------------------------------------
def stage_config(kind: str, mode: str, ctx):
    """The run config of one measurement (a bundled preset plus the bench's inputs)."""
    from backend.config.presets import load_preset

    a = ctx.args
    common = {"run_name": f"bench-{kind}-{mode}", "model_id_with_origin_paths": str(ctx.model),
              "offline": True, "stages": [kind], "height": a.height, "width": a.width,
              "lora_rank": a.rank, "dataset_num_workers": 0,
              "mixed_precision": "bf16" if a.device == "cuda" else "no"}
    if kind == "train":
        return load_preset(TRAIN[mode]).model_copy(update={
            **common, "dataset_base_path": str(ctx.cache), "dataset_metadata_path": None,
            "max_steps": a.warmup + a.steps, "dataset_repeat": a.warmup + a.steps,
            "num_epochs": 1, "save_steps": None})
    cfg = load_preset("qwen_image_single_gpu")
    if kind == "data_process":
        return cfg.model_copy(update={
            **common, "dataset_base_path": str(ctx.dataset),
            "dataset_metadata_path": str(ctx.dataset / "metadata.csv"),
            "data_process_offload": mode})
    offload, tiled = SAMPLE[mode]
    return cfg.model_copy(update={
        **common, "sample_cpu_offload": offload, "sample_vae_tiling": tiled,
        "sample_prompts": [ctx.caption], "sample_steps": a.sample_steps,
        "sample_cfg": a.sample_cfg, "sample_height": a.sample_height,
        "sample_width": a.sample_width, "sample_lora_scales": [1.0],
        "lora_checkpoint": str(ctx.lora)})


def run_probed(argv: list[str], env: dict, run_dir: Path, gpu, timeout_s: float) -> dict:
    """Run a stage's argv with the probe in place of ``-m``; its exit code, wall time, the
    probe's report (rank 0), peak host RSS of the process tree and the driver's GPU peak."""
    from backend.planning.plan import SAMPLE_MODULE, TRAIN_MODULE

    argv = list(argv)
    j = next(i for i, a in enumerate(argv) if a in (TRAIN_MODULE, SAMPLE_MODULE))
    argv[j - 1] = str(ROOT / "bench" / "stage_probe.py")
    env = {**os.environ, **env, "PYTHONPATH": str(ROOT) + os.pathsep +
           os.environ.get("PYTHONPATH", ""), "ZEROLORA_PROBE_OUT": str(run_dir / "probe"),
           "PYTHONUNBUFFERED": "1"}
    log_path = run_dir / "stage.log"
    base_used = gpu.used_bytes() if gpu is not None else None
    timed_out = False
    t0 = time.time()
    with open(log_path, "w") as log:
        child = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=env,
                                 cwd=str(ROOT), start_new_session=True)
        mon = Monitor(child.pid, gpu).start()
        try:
            code = child.wait(timeout=max(timeout_s, 1))
        except subprocess.TimeoutExpired:
            timed_out = True
            code = stop_group(child)
        finally:
            mon.stop()
    probe = run_dir / "probe.rank0.json"
    rank0 = json.loads(probe.read_text()) if probe.is_file() else {}
    out = {"exit_code": code, "wall_s": round(time.time() - t0, 1),
           "peak_allocated_gb": _gb(rank0.get("max_memory_allocated_bytes")),
           "peak_reserved_gb": _gb(rank0.get("max_memory_reserved_bytes")),
           "driver_peak_gb": (_gb(mon.gpu_peak - base_used) if base_used is not None and
                              mon.gpu_peak else None),
           "host_rss_peak_gb": _gb(mon.host_peak),
           "stage_ru_maxrss_gb": _gb(rank0.get("ru_maxrss_bytes")),
           "log_tail": log_path.read_text(errors="replace")[-1500:]}
    if timed_out:
        out["timed_out"] = True
    return out


def stop_group(child: subprocess.Popen, grace_s: float = 30) -> int:
    """SIGTERM the child's process group (the launcher and the stage it started), SIGKILL
    what is left after ``grace_s``; the child's exit code. A train stage stops after its
    current step (the steps done and the probe's peaks are still recorded)."""
    import signal

    def signal_group(sig: int) -> bool:
        try:
            os.killpg(child.pid, sig)
            return True
        except ProcessLookupError:
            return False

    signal_group(signal.SIGTERM)
    deadline = time.time() + grace_s
    while time.time() < deadline and (child.poll() is None or signal_group(0)):
        time.sleep(0.5)
    signal_group(signal.SIGKILL)
    return child.wait()


def measure(kind: str, mode: str, ctx, timeout_s: float) -> dict:
    """Plan, run and check one measurement; the estimator's prediction next to it."""
    from backend.planning import estimator
    from backend.data.cache import read_manifest
    from backend.planning.plan import plan_run
    from backend.training.samples import read_index

    a = ctx.args
    cfg = stage_config(kind, mode, ctx)
    run_dir = Path(a.work) / "runs" / f"{kind}-{mode}"
    shutil.rmtree(run_dir, ignore_errors=True)
    plan = next(p for p in plan_run(cfg, run_dir, cuda=a.device == "cuda") if p.name == kind)
    result = run_probed(plan.argv, plan.env, run_dir, ctx.gpu, timeout_s)
    tokens = ctx.caption_tokens if kind == "data_process" else a.text_tokens
    est = estimator.estimate_memory(cfg, ctx.configs, device=a.device, text_tokens=tokens)
    st = est.stages[kind]
    result.update({
        "predicted_gpu_gb": round(st.gpu_gb, 3), "predicted_host_gb": round(st.host_gb, 3),
        "predicted_parts_gb": {"gpu": {k: round(v / GB, 3) for k, v in st.gpu.items()},
                               "host": {k: round(v / GB, 3) for k, v in st.host.items()}},
        "predicted_notes": st.notes})
    if result["peak_allocated_gb"] and st.gpu_gb:
        result["allocated_over_predicted"] = round(result["peak_allocated_gb"] / st.gpu_gb, 3)
    if kind == "train":
        ds = run_dir / "deepspeed_train.json"
        steps = step_seconds(run_dir / "progress.jsonl", a.warmup)
        result.update({
            "preset": TRAIN[mode], "deepspeed_json": json.loads(ds.read_text())
            if ds.exists() else None, "step_seconds": steps,
            "s_per_step": round(sum(steps) / len(steps), 3) if steps else None,
            "h2d_gb_per_step": round(est.h2d_bytes_per_step / GB, 2),
            "transfer_bound_s": (round(est.h2d_bytes_per_step / (ctx.bandwidth * GB), 2)
                                 if ctx.bandwidth and est.h2d_bytes_per_step else None),
            "lora_files": len(list((run_dir / "output").glob("*.safetensors")))})
        result["ok"] = result["exit_code"] == 0 and result["lora_files"] > 0
    elif kind == "data_process":
        manifest = read_manifest(run_dir / "cache") or {"samples": []}
        result.update({"offload": mode, "caption_tokens": ctx.caption_tokens,
                       "cached_samples": len(manifest["samples"])})
        result["ok"] = result["exit_code"] == 0 and result["cached_samples"] == a.images
    else:
        images = [e for e in read_index(run_dir / "samples")
                  if (run_dir / "samples" / e["image"]).is_file()]
        result.update({"sample_cpu_offload": SAMPLE[mode][0],
                       "sample_vae_tiling": SAMPLE[mode][1], "images": len(images)})
        result["ok"] = result["exit_code"] == 0 and len(images) == 1
    return result


def place_weights(configs: dict, sizes: dict[str, int], work: Path, spill: str | None,
                  reuse: bool) -> dict[str, Path | str]:
    """Where each component's weights go: ``work``/weights while that disk keeps 2 GB free
    (largest first), else ``spill`` (a different file system); weights already there for
    the same config with ``reuse``. A string instead of a folder says why none fits."""
    stores = [work / "weights"] + ([Path(spill)] if spill else [])
    there = {s: next(p for p in (s, *s.parents) if p.exists()) for s in stores}
    if len(stores) == 2 and there[stores[0]].stat().st_dev == there[stores[1]].stat().st_dev:
        stores = stores[:1]  # the same disk: spilling gains nothing
    free = {s: shutil.disk_usage(there[s]).free - 2 * GB for s in stores}
    places: dict[str, Path | str] = {}
    for c in sorted(sizes, key=lambda c: -sizes[c]):
        old = [s / c for s in stores if reuse and random_model.reusable(s / c, configs[c])]
        fits = [s for s in stores if sizes[c] <= free[s]]
        if old:
            places[c] = old[0]
        elif fits:
            places[c] = fits[0] / c
            free[fits[0]] -= sizes[c]
        else:
            places[c] = (f"disk: {c} needs {sizes[c] / GB:.1f} GB; " + ", ".join(
                f"{max(free[s], 0) / GB:.1f} GB left in {s}" for s in stores)
                + ("" if spill else " (--spill_dir /dev/shm/... uses host RAM)"))
    return places


def _gb(x) -> float | None:
    return None if x is None else round(x / GB, 3)


def _modes(parser, flag: str, value: str, allowed) -> list[str]:
    modes = [m.strip() for m in value.split(",") if m.strip()]
    unknown = [m for m in modes if m not in allowed]
    if unknown:
        parser.error(f"--{flag}: unknown {unknown}; allowed {list(allowed)}")
    return modes


def summary(result: dict) -> str:
    lines = [f"{'measurement':<30}{'exit':>5}{'alloc GB':>10}{'predicted':>10}{'ratio':>7}"
             f"{'driver':>8}{'host RSS':>9}{'wall s':>8}"]
    for kind in KINDS:
        for mode, r in result[kind].items():
            name = f"{kind} {mode}"
            if "skipped" in r:
                lines.append(f"{name:<30} skipped: {r['skipped']}")
                continue
            f = [r.get(k) for k in ("peak_allocated_gb", "predicted_gpu_gb",
                                    "allocated_over_predicted", "driver_peak_gb",
                                    "host_rss_peak_gb", "wall_s")]
            lines.append(f"{name:<30}{r['exit_code']:>5}" + "".join(
                f"{'-' if v is None else v:>{w}}" for v, w in zip(f, (10, 10, 7, 8, 9, 8)))
                + (f"  {r['s_per_step']} s/step" if r.get("s_per_step") else "")
                + ("  TIMED OUT" if r.get("timed_out") else "")
                + ("" if r["ok"] else "  FAILED"))
    return "\n".join(lines)


# ------------------------------------------------------------------------------------------
def main(argv: list[str] | None = None) -> dict:
    from backend.families.qwen_image.published import CONFIGS as QWEN_IMAGE_CONFIGS

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--config", default=str(ROOT / "bench/qwen_image_transformer_config.json"),
                        help="transformer config.json (a tiny one for CPU checks)")
    parser.add_argument("--text_encoder_config", default=None,
                        help="text encoder config (default: the published Qwen2.5-VL-7B)")
    parser.add_argument("--vae_config", default=None,
                        help="VAE config (default: the published Qwen-Image VAE)")
    parser.add_argument("--tiny", action="store_true",
                        help="the bench's tiny configs for all three (CPU checks): "
                        "bench/tiny_{transformer,text_encoder,vae}_config.json")
    parser.add_argument("--device", choices=["cuda", "cpu"], default=None,
                        help="default: cuda when available")
    parser.add_argument("--train", "--modes", dest="train", default="no_offload,low_vram",
                        help=f"train modes, comma-separated ('' for none): {list(TRAIN)}")
    parser.add_argument("--data_process", default="none,model,sequential",
                        help=f"stage-1 offload modes ('' for none): {list(DATA_PROCESS)}")
    parser.add_argument("--sample", default="none,model,sequential,sequential_tiled",
                        help=f"sample offload modes ('' for none): {list(SAMPLE)}")
    parser.add_argument("--height", type=int, default=1024, help="train and stage-1 size")
    parser.add_argument("--width", type=int, default=1024)
    parser.add_argument("--images", type=int, default=1, help="stage-1 images")
    parser.add_argument("--text_tokens", type=int, default=256,
                        help="cached prompt length (train); caption length (stage 1, sample)")
    parser.add_argument("--rank", type=int, default=32)
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--sample_height", type=int, default=None, help="default: --height")
    parser.add_argument("--sample_width", type=int, default=None, help="default: --width")
    parser.add_argument("--sample_steps", type=int, default=2)
    parser.add_argument("--sample_cfg", type=float, default=1.0)
    parser.add_argument("--bandwidth_gb", type=float, default=4.0)
    parser.add_argument("--timeout_s", type=float, default=1800, help="per measurement")
    parser.add_argument("--budget_s", type=float, default=None,
                        help="seconds for the whole run: start nothing with under 60 s left, "
                        "stop a running measurement 40 s before the end")
    parser.add_argument("--work", default=None, help="scratch folder (default: a temp dir)")
    parser.add_argument("--spill_dir", default=None,
                        help="weights that do not fit --work's disk go here (another disk, "
                        "or /dev/shm: host RAM), linked into the model folder")
    parser.add_argument("--keep", action="store_true", help="keep the scratch folder")
    parser.add_argument("--reuse", action="store_true",
                        help="reuse weights already written to --work for the same configs")
    parser.add_argument("--out", default=str(ROOT / "bench/results/gpu_qwen_image.json"))
    args = parser.parse_args(argv)
    t_start = time.time()

    import torch

    if args.device is None:
        args.device = "cuda" if torch.cuda.is_available() else "cpu"
    if args.device == "cuda" and not torch.cuda.is_available():
        parser.error("--device cuda: no CUDA device")
    selected = {"data_process": _modes(parser, "data_process", args.data_process, DATA_PROCESS),
                "train": _modes(parser, "train", args.train, TRAIN),
                "sample": _modes(parser, "sample", args.sample, SAMPLE)}
    if args.tiny:
        args.config, args.text_encoder_config, args.vae_config = (
            str(ROOT / f"bench/tiny_{c}_config.json") for c in ("transformer", "text_encoder",
                                                                "vae"))
    args.sample_height = args.sample_height or args.height
    args.sample_width = args.sample_width or args.width
    configs = {"transformer": json.loads(Path(args.config).read_text()),
               "text_encoder": (json.loads(Path(args.text_encoder_config).read_text())
                                if args.text_encoder_config else
                                QWEN_IMAGE_CONFIGS["text_encoder"]),
               "vae": (json.loads(Path(args.vae_config).read_text()) if args.vae_config
                       else QWEN_IMAGE_CONFIGS["vae"])}
    order = [(kind, m) for kind in KINDS for m in selected[kind] if m != "low_vram"]
    order += [("train", "low_vram")] * ("low_vram" in selected["train"])
    sizes = {c: random_model.pipeline_bytes(configs, [c])
             for c in sorted({c for k, _ in order for c in NEEDS[k]})}
    if args.device == "cpu" and sum(sizes.values()) > CPU_WEIGHTS_MAX:
        parser.error(f"--device cpu: the selected measurements need "
                     f"{sum(sizes.values()) / GB:.1f} GB of real-size weights; check the "
                     f"path with --tiny")
    own_work = args.work is None
    args.work = args.work or tempfile.mkdtemp(prefix="zerolora-gpu-")
    work = Path(args.work)
    ctx = SimpleNamespace(args=args, configs=configs, model=work / "model", cache=None,
                          dataset=None, lora=None, caption=None, caption_tokens=None,
                          gpu=GpuUsed() if args.device == "cuda" else None, bandwidth=None)
    gen = "cuda" if args.device == "cuda" else "cpu"
    places = place_weights(configs, sizes, work, args.spill_dir, args.reuse)
    result = {
        "date": time.strftime("%Y-%m-%d"), "device": args.device,
        "gpu": torch.cuda.get_device_name(0) if args.device == "cuda" else None,
        **(ctx.gpu.describe() if ctx.gpu is not None else {}),
        "machine": f"{platform.machine()}, {os.cpu_count()} CPU cores",
        "torch": torch.__version__,
        "configs": {"transformer": os.path.relpath(args.config, ROOT),
                    "text_encoder": args.text_encoder_config or "published",
                    "vae": args.vae_config or "published"},
        "height": args.height, "width": args.width, "images": args.images,
        "sample_height": args.sample_height, "sample_width": args.sample_width,
        "sample_steps": args.sample_steps, "sample_cfg": args.sample_cfg,
        "text_tokens": args.text_tokens, "rank": args.rank, "warmup_steps": args.warmup,
        "timed_steps": args.steps, "budget_s": args.budget_s, "weights": {},
        "h2d_bandwidth_gb_s": None, "data_process": {}, "train": {}, "sample": {},
    }
    written: set[str] = set()

    def left() -> float:
        """Seconds of ``--budget_s`` left (infinite without one)."""
        return float("inf") if args.budget_s is None else args.budget_s - (time.time() - t_start)

    def check_budget() -> None:
        if left() < MIN_START_S:
            raise TimeoutError(f"budget: {left():.0f} s left")

    def ensure(kind: str) -> None:
        """The inputs of ``kind``: model weights (written on first need), the stage-1
        dataset, the train cache, the sample LoRA."""
        missing = [c for c in NEEDS[kind] if c not in written]
        if missing:
            bad = [places[c] for c in missing if isinstance(places[c], str)]
            if bad:
                raise RuntimeError("; ".join(bad))
            result["weights"].update(random_model.write_pipeline(
                ctx.model, configs, missing, places=places, gen_device=gen, reuse=args.reuse,
                log=lambda m: print(f"[bench] {m}", flush=True)))
            written.update(missing)
            if args.device == "cuda":
                torch.cuda.empty_cache()  # the stages get the whole GPU
        if ctx.caption is None and "text_encoder" in written:
            from backend.families.common import load_tokenizer

            ctx.caption, ctx.caption_tokens = random_model.caption_of_tokens(
                load_tokenizer(ctx.model / "tokenizer"), args.text_tokens)
        if kind == "data_process" and ctx.dataset is None:
            ctx.dataset = write_dataset(work / "dataset", args.images, args.height,
                                        args.width, ctx.caption)
        if kind == "train" and ctx.cache is None:
            ctx.cache = write_cache(work / "cache", configs["transformer"], args.height,
                                    args.width, args.text_tokens)
            if args.device == "cuda":
                ctx.bandwidth = h2d_bandwidth(args.bandwidth_gb)
                result["h2d_bandwidth_gb_s"] = ctx.bandwidth
                print(f"[bench] host->device bandwidth: {ctx.bandwidth} GB/s", flush=True)
        if kind == "sample" and ctx.lora is None:
            from backend.config.presets import load_preset

            ctx.lora = random_model.write_random_lora(
                work / "lora" / f"random-r{args.rank}.safetensors", configs["transformer"],
                args.rank, load_preset("qwen_image_single_gpu").target_modules(), gen)

    try:
        for kind, mode in order:
            try:
                check_budget()
                ensure(kind)
                check_budget()  # writing the inputs took time too
                print(f"[bench] {kind} {mode} ...", flush=True)
                r = measure(kind, mode, ctx, min(args.timeout_s, left() - STOP_S))
            except Exception as e:  # noqa: BLE001 - recorded; the next measurement runs
                why = str(e) if isinstance(e, TimeoutError) else f"{type(e).__name__}: {e}"
                result[kind][mode] = {"skipped": why[:300], "ok": False}
                print(f"[bench] {kind} {mode}: skipped, {why}", flush=True)
                continue
            result[kind][mode] = r
            print(f"[bench] {kind} {mode}: exit {r['exit_code']}, {r['wall_s']} s, allocated "
                  f"{r['peak_allocated_gb']} GB (predicted {r['predicted_gpu_gb']}), driver "
                  f"{r['driver_peak_gb']} GB, host RSS {r['host_rss_peak_gb']} GB"
                  + (f", {r['s_per_step']} s/step (transfer bound {r['transfer_bound_s']} s)"
                     if kind == "train" else ""), flush=True)
            if not r["ok"]:
                print(r["log_tail"], flush=True)
            result["wall_s"] = round(time.time() - t_start, 1)
            result["summary"] = summary(result).splitlines()
            write_result(args.out, result, prefix="[bench] ")
        result["wall_s"] = round(time.time() - t_start, 1)
        result["summary"] = summary(result).splitlines()
        print("\n".join(result["summary"]), flush=True)
        return write_result(args.out, result, prefix="[bench] ")
    finally:
        if own_work and not args.keep:
            shutil.rmtree(work, ignore_errors=True)
            for folder in places.values():  # spilled weights (they may hold host RAM)
                if isinstance(folder, Path) and not folder.is_relative_to(work):
                    shutil.rmtree(folder, ignore_errors=True)


def all_ok(result: dict) -> bool:
    return all(r["ok"] for kind in KINDS for r in result[kind].values())


if __name__ == "__main__":
    sys.exit(0 if all_ok(main()) else 1)
