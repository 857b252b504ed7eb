"""Real-size Qwen-Image LoRA training on one GPU: peak memory, host RAM, seconds per step.

What it does
1. Writes the transformer described by ``--config`` (default: the published Qwen-Image
   architecture, bench/qwen_image_transformer_config.json, 20.4 B parameters) with random
   bf16 weights into ``--work``/transformer: the model is built on the meta device and each
   parameter is materialised in bf16 on its own (on the GPU when there is one), copied to
   the host and written in ~2 GB safetensors shards, so host RAM stays at one shard.
   Nothing is downloaded. Never float32.
2. Writes a stage-1 cache holding one synthetic sample at ``--height`` x ``--width``
   (latents [1, 16, H/8, W/8], prompt embedding [1, T, joint_attention_dim], mask).
3. For each mode, plans a run with ``backend.plan.plan_run`` from a bundled preset (the
   generated run.yaml, accelerate YAML and DeepSpeed JSON) and launches its train command
   exactly, with ``bench/train_probe.py`` in place of ``-m backend.stages.train``:
   - ``no_offload``: preset qwen_image_single_gpu (bf16 weights on the GPU, per-block
     torch checkpointing, no DeepSpeed);
   - ``low_vram``: preset qwen_image_low_vram (ZeRO-3, parameters and optimizer offloaded
     to CPU, DeepSpeed activation checkpointing, model built on CPU).
   LoRA rank ``--rank`` (32), ``--warmup`` + ``--steps`` optimizer steps.
4. Records per mode: ``torch.cuda.max_memory_allocated`` / ``max_memory_reserved`` (from the
   stage process), the driver's view (pynvml, else nvidia-smi: device memory used, peak
   minus the idle baseline), peak host RSS of the stage's process tree, seconds per step
   after warm-up (from the stage's progress events), and the estimator's prediction.
5. Measures host->device bandwidth (a pinned bf16 tensor of ``--bandwidth_gb`` copied to
   the GPU) and the transfer bound it implies for ZeRO-3 offload: bytes moved per step
   (``Estimate.h2d_bytes_per_step``) / bandwidth.
Writes ``--out`` (bench/results/gpu_qwen_image.json) and prints a summary.

Run on a GPU machine (about 41 GB of disk and host RAM for the weights; see
bench/gpu_prepare.md for a machine without our packages):
    python bench/gpu_qwen_image.py --steps 3
    python bench/gpu_qwen_image.py --modes low_vram --steps 2
CPU check of the whole path (tiny config, ~2 minutes):
    python bench/gpu_qwen_image.py --config bench/tiny_transformer_config.json --device cpu \\
        --height 64 --width 64 --rank 4 --steps 2 --out /tmp/gpu_check.json
"""
from __future__ import annotations

import argparse
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

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from bench.results_io import write_result  # noqa: E402

MODES = {"no_offload": "qwen_image_single_gpu", "low_vram": "qwen_image_low_vram"}
SHARD_BYTES = 2 * 10**9
GB = 1e9


# ------------------------------------------------------------------------------------------
# Inputs
# ------------------------------------------------------------------------------------------
def write_random_transformer(config: dict, folder: Path, gen_device: str = "cpu",
                             seed: int = 0, shard_bytes: int = SHARD_BYTES) -> dict:
    """Random bf16 weights for ``config`` in the diffusers layout (config.json, sharded
    safetensors + index), one parameter in memory at a time plus the current shard."""
    import diffusers
    import torch
    from accelerate import init_empty_weights
    from safetensors.torch import save_file

    cls = getattr(diffusers, config.get("_class_name", "QwenImageTransformer2DModel"))
    with init_empty_weights():
        model = cls.from_config(config)
    folder.mkdir(parents=True, exist_ok=True)
    model.save_config(str(folder))
    g = torch.Generator(device=gen_device).manual_seed(seed)
    shard: dict = {}
    size = total = count = 0
    weight_map: dict[str, str] = {}
    names: list[str] = []

    def flush() -> None:
        nonlocal shard, size
        if not shard:
            return
        name = f"diffusion_pytorch_model-{len(names) + 1:05d}.safetensors"
        save_file(shard, str(folder / name), metadata={"format": "pt"})
        names.append(name)
        weight_map.update({k: name for k in shard})
        shard, size = {}, 0

    t0 = time.time()
    for pname, p in model.named_parameters():
        t = torch.empty(p.shape, dtype=torch.bfloat16, device=gen_device)
        if p.ndim >= 2:
            t.normal_(0.0, 0.02, generator=g)
        elif pname.endswith("weight"):
            t.fill_(1.0)   # norm scales
        else:
            t.zero_()      # biases
        shard[pname] = t.cpu()
        size += t.numel() * 2
        total += t.numel() * 2
        count += t.numel()
        del t
        if size >= shard_bytes:
            flush()
    flush()
    (folder / "diffusion_pytorch_model.safetensors.index.json").write_text(json.dumps(
        {"metadata": {"total_size": total}, "weight_map": weight_map}, indent=1))
    return {"params": count, "bytes": total, "shards": len(names),
            "seconds": round(time.time() - t0, 1)}


def reuse_transformer(config: dict, folder: Path) -> dict | None:
    """The weights a previous run wrote to ``folder`` for the same config, if complete."""
    index = folder / "diffusion_pytorch_model.safetensors.index.json"
    saved = folder / "config.json"
    if not (index.is_file() and saved.is_file()):
        return None
    old = json.loads(saved.read_text())
    if any(old.get(k) != v for k, v in config.items() if not k.startswith("_")):
        return None
    data = json.loads(index.read_text())
    shards = sorted(set(data["weight_map"].values()))
    if not all((folder / s).is_file() for s in shards):
        return None
    total = int(data["metadata"]["total_size"])
    return {"params": total // 2, "bytes": total, "shards": len(shards), "seconds": 0.0,
            "reused": True}


def write_cache(folder: Path, config: dict, height: int, width: int, text_tokens: int,
                seed: int = 0) -> Path:
    """A stage-1 cache with one synthetic sample (the cache module's own writer)."""
    import torch

    from backend.cache import save_sample, write_manifest

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
    from backend.progress import read_events

    events, _ = read_events(progress)
    times = {e["step"]: e["time"] for e in events if e.get("event") == "step"}
    return [round(times[s] - times[s - 1], 3) for s in sorted(times)
            if s > warmup and s - 1 in times]


# ------------------------------------------------------------------------------------------
# One mode
# ------------------------------------------------------------------------------------------
def mode_config(mode: str, transformer: Path, cache: Path, args):
    from backend.config import load_preset

    cfg = load_preset(MODES[mode])
    return cfg.model_copy(update={
        "run_name": f"bench-{mode}", "model_id_with_origin_paths": str(transformer),
        "offline": True, "dataset_base_path": str(cache), "dataset_metadata_path": None,
        "stages": ["train"], "height": args.height, "width": args.width,
        "lora_rank": args.rank, "max_steps": args.warmup + args.steps,
        "dataset_repeat": args.warmup + args.steps, "num_epochs": 1, "save_steps": None,
        "dataset_num_workers": 0,
        "mixed_precision": "bf16" if args.device == "cuda" else "no"})


def run_mode(mode: str, transformer: Path, cache: Path, config: dict, args,
             gpu: GpuUsed | None, bandwidth: float | None) -> dict:
    from backend import estimator
    from backend.plan import plan_run

    cfg = mode_config(mode, transformer, cache, args)
    run_dir = Path(args.work) / "runs" / mode
    if run_dir.exists():
        shutil.rmtree(run_dir)
    plans = plan_run(cfg, run_dir, cuda=args.device == "cuda")
    plan = next(p for p in plans if p.name == "train")
    argv = list(plan.argv)
    j = argv.index("backend.stages.train")
    argv[j - 1:j + 1] = [str(ROOT / "bench" / "train_probe.py")]
    probe = run_dir / "probe"
    env = dict(os.environ)
    env.update(plan.env)
    env.update({"PYTHONPATH": str(ROOT) + os.pathsep + env.get("PYTHONPATH", ""),
                "ZEROLORA_PROBE_OUT": str(probe), "PYTHONUNBUFFERED": "1"})
    log_path = run_dir / "train.log"
    base_used = gpu.used_bytes() if gpu is not None else None
    t0 = time.time()
    with open(log_path, "w") as log:
        child = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=env,
                                 cwd=str(ROOT), start_new_session=True)
        mon = Monitor(child.pid, gpu).start()
        try:
            code = child.wait(timeout=args.timeout_s)
        except subprocess.TimeoutExpired:
            import signal
            os.killpg(child.pid, signal.SIGTERM)
            try:
                code = child.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(child.pid, signal.SIGKILL)
                code = child.wait()
        finally:
            mon.stop()
    wall = time.time() - t0
    probe_data = {}
    for p in sorted(run_dir.glob("probe.rank*.json")):
        probe_data[p.name.split(".")[1]] = json.loads(p.read_text())
    rank0 = probe_data.get("rank0", {})
    steps = step_seconds(run_dir / "progress.jsonl", args.warmup)
    est = estimator.estimate_memory(cfg, config, device=args.device,
                                    text_tokens=args.text_tokens)
    train = est.stages["train"]
    result = {
        "preset": MODES[mode], "exit_code": code, "wall_s": round(wall, 1),
        "deepspeed_json": (json.loads((run_dir / "deepspeed_train.json").read_text())
                           if (run_dir / "deepspeed_train.json").exists() else None),
        "step_seconds": steps,
        "s_per_step": round(sum(steps) / len(steps), 3) if steps else None,
        "peak_allocated_gb": _gb(rank0.get("max_memory_allocated_bytes")),
        "peak_reserved_gb": _gb(rank0.get("max_memory_reserved_bytes")),
        "driver_peak_gb": _gb(mon.gpu_peak - base_used) if base_used is not None and
        mon.gpu_peak else None,
        "host_rss_peak_gb": _gb(mon.host_peak),
        "stage_ru_maxrss_gb": _gb(rank0.get("ru_maxrss_bytes")),
        "predicted_gpu_gb": round(train.gpu_gb, 3),
        "predicted_host_gb": round(train.host_gb, 3),
        "predicted_parts_gb": {"gpu": {k: round(v / GB, 3) for k, v in train.gpu.items()},
                               "host": {k: round(v / GB, 3) for k, v in train.host.items()}},
        "h2d_gb_per_step": round(est.h2d_bytes_per_step / GB, 2),
        "transfer_bound_s": (round(est.h2d_bytes_per_step / (bandwidth * GB), 2)
                             if bandwidth and est.h2d_bytes_per_step else None),
        "log_tail": log_path.read_text(errors="replace")[-1500:],
    }
    if result["peak_allocated_gb"] and result["predicted_gpu_gb"]:
        result["allocated_over_predicted"] = round(result["peak_allocated_gb"] /
                                                   result["predicted_gpu_gb"], 3)
    return result


def _gb(x) -> float | None:
    return None if x is None else round(x / GB, 3)


# ------------------------------------------------------------------------------------------
def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--config", default=str(ROOT / "bench/qwen_image_transformer_config.json"),
                        help="transformer config.json (a tiny one for CPU checks)")
    parser.add_argument("--device", choices=["cuda", "cpu"], default=None,
                        help="default: cuda when available")
    parser.add_argument("--modes", default="no_offload,low_vram")
    parser.add_argument("--height", type=int, default=1024)
    parser.add_argument("--width", type=int, default=1024)
    parser.add_argument("--text_tokens", type=int, default=256)
    parser.add_argument("--rank", type=int, default=32)
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--bandwidth_gb", type=float, default=4.0)
    parser.add_argument("--timeout_s", type=float, default=1800)
    parser.add_argument("--work", default=None, help="scratch folder (default: a temp dir)")
    parser.add_argument("--keep", action="store_true", help="keep the scratch folder")
    parser.add_argument("--reuse", action="store_true",
                        help="reuse weights already written to --work for the same config")
    parser.add_argument("--out", default=str(ROOT / "bench/results/gpu_qwen_image.json"))
    args = parser.parse_args(argv)

    import torch

    if args.device is None:
        args.device = "cuda" if torch.cuda.is_available() else "cpu"
    if args.device == "cuda" and not torch.cuda.is_available():
        parser.error("--device cuda: no CUDA device")
    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    unknown = [m for m in modes if m not in MODES]
    if unknown:
        parser.error(f"--modes: unknown {unknown}; allowed {list(MODES)}")
    config = json.loads(Path(args.config).read_text())
    own_work = args.work is None
    args.work = args.work or tempfile.mkdtemp(prefix="zerolora-gpu-")
    work = Path(args.work)
    try:
        gpu = GpuUsed() if args.device == "cuda" else None
        bandwidth = h2d_bandwidth(args.bandwidth_gb) if args.device == "cuda" else None
        print(f"[bench] host->device bandwidth: {bandwidth} GB/s", flush=True)
        gen = "cuda" if args.device == "cuda" else "cpu"
        written = reuse_transformer(config, work / "transformer") if args.reuse else None
        written = written or write_random_transformer(config, work / "transformer", gen)
        verb = "reused" if written.get("reused") else "wrote"
        print(f"[bench] {verb} {written['params'] / 1e9:.2f} B parameters "
              f"({written['bytes'] / GB:.1f} GB bf16, {written['shards']} shards) in "
              f"{written['seconds']} s", flush=True)
        cache = write_cache(work / "cache", config, args.height, args.width, args.text_tokens)
        result = {
            "date": time.strftime("%Y-%m-%d"), "device": args.device,
            "gpu": (torch.cuda.get_device_name(0) if args.device == "cuda" else None),
            **(gpu.describe() if gpu is not None else {}),
            "machine": f"{platform.machine()}, {os.cpu_count()} CPU cores",
            "torch": torch.__version__, "config": os.path.relpath(args.config, ROOT),
            "transformer_params": written["params"], "height": args.height,
            "width": args.width, "text_tokens": args.text_tokens, "rank": args.rank,
            "warmup_steps": args.warmup, "timed_steps": args.steps,
            "h2d_bandwidth_gb_s": bandwidth, "weights_write_s": written["seconds"],
            "modes": {},
        }
        for mode in modes:
            print(f"[bench] {mode}: preset {MODES[mode]} ...", flush=True)
            r = run_mode(mode, work / "transformer", cache, config, args, gpu, bandwidth)
            result["modes"][mode] = r
            print(f"[bench] {mode}: exit {r['exit_code']}, {r['s_per_step']} s/step, "
                  f"allocated {r['peak_allocated_gb']} GB (predicted {r['predicted_gpu_gb']}),"
                  f" driver {r['driver_peak_gb']} GB, host RSS {r['host_rss_peak_gb']} GB "
                  f"(predicted {r['predicted_host_gb']} beyond libraries), transfer bound "
                  f"{r['transfer_bound_s']} s", flush=True)
            if r["exit_code"] != 0:
                print(r["log_tail"], flush=True)
        return write_result(args.out, result, prefix="[bench] ")
    finally:
        if own_work and not args.keep:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    res = main()
    sys.exit(0 if all(m["exit_code"] == 0 for m in res["modes"].values()) else 1)
