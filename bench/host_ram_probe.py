"""Host RAM of the real train stage on a small model: measured increase vs the estimator.

Three processes, so nothing one step leaves behind pollutes the next:

1. ``prepare``: the tiny Qwen-Image pipeline (``backend.families.qwen_image.tiny``) with its transformer
   widened (``--heads`` x 128 wide, ``--layers`` blocks) so that tensors, not library
   overheads, dominate; plus a stage-1 cache of one synthetic sample at ``--size``
   (written with ``backend.data.cache``'s own writer: latents, prompt embedding and mask).
2. ``measure``: imports everything the stage needs (torch, diffusers, peft, accelerate,
   tensorboard, the stage module), takes a baseline, then runs the real train stage
   (``backend.stages.train.main``, one CPU process, float32) while a thread samples the
   process's resident memory; reports peak minus baseline.
3. the parent computes ``estimate_memory(cfg, device="cpu")`` with the prompt length of the
   cache and compares.

What "resident memory" means here, and why:
- anonymous RSS (``RssAnon``, every 2 ms) plus the resident pages of memory-mapped
  ``.safetensors`` files (``/proc/self/smaps``, every 50 ms). On a CPU run diffusers maps
  the float32 weight file and the frozen weights are used in place, so they show up as
  file pages, not anonymous memory; they occupy RAM all the same and the estimator counts
  them as "base weights". Other file pages (library code faulted in later) are left out.
- glibc's malloc gets a fixed mmap threshold (``MALLOC_MMAP_THRESHOLD_`` = 1 MiB) in the
  measuring process. With its default the threshold grows as large blocks are freed, and
  freed activation memory then stays in malloc's heap: on the default settings (heads 6,
  512x512) anonymous RSS peaked at ~450 MB while malloc's own count of live bytes
  (``mallinfo2``) peaked at ~220 MB. That is allocator retention, which the estimator
  does not model; ``--default_malloc`` measures it anyway.
- malloc's live bytes are reported too (``measured_malloc_live_increase_bytes``).

Run (about a minute on 2 CPU cores):
    python bench/host_ram_probe.py                       # writes bench/results/host_ram.json
    python bench/host_ram_probe.py --gradient_checkpointing --out /tmp/x.json
"""
from __future__ import annotations

import argparse
import gc
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

TEXT_TOKENS = 24


def rss_anon() -> int:
    """Anonymous resident memory of this process (bytes)."""
    with open("/proc/self/status", encoding="ascii") as f:
        for line in f:
            if line.startswith("RssAnon:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("RssAnon not in /proc/self/status")


def weight_file_rss() -> int:
    """Resident pages of memory-mapped .safetensors files (the weights diffusers maps)."""
    total, in_weights = 0, False
    with open("/proc/self/smaps", encoding="utf-8", errors="replace") as f:
        for line in f:
            head = line.split(None, 1)[0]
            if "-" in head and not head.endswith(":"):  # a mapping's first line
                in_weights = line.rstrip().endswith(".safetensors")
            elif in_weights and head == "Rss:":
                total += int(line.split()[1]) * 1024
    return total


def malloc_live() -> int | None:
    """Bytes glibc's malloc has handed out and not got back (mallinfo2), if available."""
    import ctypes

    class MallInfo2(ctypes.Structure):
        _fields_ = [(n, ctypes.c_size_t) for n in ("arena", "ordblks", "smblks", "hblks",
                    "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks", "keepcost")]
    try:
        libc = ctypes.CDLL("libc.so.6")
        libc.mallinfo2.restype = MallInfo2
    except (OSError, AttributeError):
        return None
    m = libc.mallinfo2()
    return int(m.uordblks + m.hblkhd)


class PeakSampler:
    """Samples memory in a thread: anonymous RSS every 2 ms, mapped weight pages every
    50 ms, malloc's live bytes; ``peak`` is the largest anonymous + weight-page sum seen."""

    def __init__(self, period_s: float = 0.002):
        self.period = period_s
        self.weights = weight_file_rss()
        self.peak = rss_anon() + self.weights
        live = malloc_live()
        self.peak_live = live or 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _sample(self, with_files: bool) -> None:
        if with_files:
            self.weights = max(self.weights, weight_file_rss())
        self.peak = max(self.peak, rss_anon() + self.weights)
        live = malloc_live()
        if live is not None:
            self.peak_live = max(self.peak_live, live)

    def _run(self) -> None:
        i = 0
        while not self._stop.is_set():
            self._sample(i % 25 == 0)
            i += 1
            time.sleep(self.period)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()


def prepare(work: Path, heads: int, layers: int, size: int, seed: int = 0) -> dict:
    import torch
    from diffusers import QwenImageTransformer2DModel

    from backend.data.cache import save_sample, write_manifest
    from backend.families.qwen_image.tiny import TRANSFORMER_CONFIG, build_tiny_qwen_image

    model = build_tiny_qwen_image(work / "model", seed=seed)
    config = dict(TRANSFORMER_CONFIG, num_attention_heads=heads, attention_head_dim=128,
                  num_layers=layers, axes_dims_rope=(16, 56, 56))
    torch.manual_seed(seed)
    wide = QwenImageTransformer2DModel(**config)
    wide.save_pretrained(model / "transformer", safe_serialization=True)
    cache = work / "cache"
    cache.mkdir(parents=True, exist_ok=True)
    g = torch.Generator().manual_seed(seed)
    tensors = {
        "prompt_emb": torch.randn(1, TEXT_TOKENS, config["joint_attention_dim"], generator=g),
        "prompt_emb_mask": torch.ones(1, TEXT_TOKENS, dtype=torch.int64),
        "latents": torch.randn(1, 16, size // 8, size // 8, generator=g),
        "height": torch.tensor([size]), "width": torch.tensor([size]),
    }
    save_sample(cache / "sample0.safetensors", tensors, {"prompt": "synthetic"})
    write_manifest(cache, [{"key": "sample0", "file": "sample0.safetensors", "image": "-",
                            "prompt": "synthetic", "width": size, "height": size}], [],
                   "qwen_image")
    return {"transformer": str(model / "transformer"), "cache": str(cache),
            "params": sum(p.numel() for p in wide.parameters())}


def stage_argv(work: Path, size: int, steps: int, rank: int, ckpt: bool) -> list[str]:
    argv = ["--task", "sft:train", "--offline",
            "--model_id_with_origin_paths", str(work / "model" / "transformer"),
            "--dataset_base_path", str(work / "cache"), "--dataset_metadata_path", "none",
            "--output_path", str(work / "out"), "--lora_rank", str(rank),
            "--max_steps", str(steps), "--dataset_repeat", str(steps),
            "--height", str(size), "--width", str(size), "--mixed_precision", "no"]
    if ckpt:
        argv.append("--use_gradient_checkpointing")
    return argv


def measure(argv: list[str]) -> dict:
    # Everything the stage imports, imported before the baseline.
    import accelerate  # noqa: F401
    import diffusers  # noqa: F401
    import peft  # noqa: F401
    import safetensors.torch  # noqa: F401
    import torch
    import torch.utils.tensorboard  # noqa: F401
    from diffusers import QwenImageTransformer2DModel  # noqa: F401

    import backend.data.cache  # noqa: F401
    import backend.models.hub  # noqa: F401
    import backend.models.lora  # noqa: F401
    import backend.families.qwen_image.adapter  # noqa: F401
    from backend.stages import train

    torch.set_num_threads(1)
    gc.collect()
    baseline = rss_anon() + weight_file_rss()
    baseline_live = malloc_live() or 0
    t0 = time.time()
    with PeakSampler() as sampler:
        code = train.main(argv)
    return {"exit_code": code, "baseline_bytes": baseline, "peak_bytes": sampler.peak,
            "increase_bytes": sampler.peak - baseline,
            "weight_pages_bytes": sampler.weights,
            "malloc_live_increase_bytes": sampler.peak_live - baseline_live,
            "seconds": round(time.time() - t0, 1)}


def bench_env() -> dict[str, str]:
    """The environment of a measured child: this checkout importable, one CPU thread,
    offline."""
    return dict(os.environ, PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1", MKL_NUM_THREADS="1",
                HF_HUB_OFFLINE="1", TOKENIZERS_PARALLELISM="false")


def prepare_model(work: Path, heads: int, layers: int, size: int) -> dict:
    """A widened tiny model and its cache written under ``work`` by a child process (see
    ``prepare``); what it wrote (``params``, ...)."""
    return _child(["prepare", str(work), str(heads), str(layers), str(size)])


def _child(args: list[str], malloc_threshold: bool = True) -> dict:
    env = bench_env()
    if malloc_threshold:
        # A fixed mmap threshold: glibc then returns every freed block of 1 MiB or more to
        # the system at once. With its default (a threshold that grows as blocks are
        # freed) it keeps freed activation memory in its heap, and RSS reports allocator
        # retention rather than tensors (see the module docstring).
        env["MALLOC_MMAP_THRESHOLD_"] = str(1 << 20)
    proc = subprocess.run([sys.executable, __file__, *args], capture_output=True, text=True,
                          env=env, cwd=str(ROOT), timeout=1800)
    if proc.returncode != 0:
        raise RuntimeError(f"{args[0]} failed ({proc.returncode}):\n{proc.stdout[-2000:]}\n"
                           f"{proc.stderr[-4000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def run(work: Path, heads: int = 6, layers: int = 2, size: int = 512, steps: int = 2,
        rank: int = 32, ckpt: bool = False, malloc_threshold: bool = True) -> dict:
    """Prepare, measure and estimate; returns the comparison (bytes and the ratio)."""
    from backend.planning import estimator
    from backend.config.cli import parse_stage_args

    prep = prepare_model(work, heads, layers, size)
    argv = stage_argv(work, size, steps, rank, ckpt)
    got = _child(["measure", json.dumps(argv)], malloc_threshold)
    if got["exit_code"] != 0:
        raise RuntimeError(f"train stage exited {got['exit_code']}")
    cfg, _ = parse_stage_args(argv)
    config = json.loads((work / "model" / "transformer" / "config.json").read_text())
    est = estimator.estimate_memory(cfg, config, device="cpu", text_tokens=TEXT_TOKENS)
    train = est.stages["train"]
    return {"heads": heads, "layers": layers, "size": size, "steps": steps, "rank": rank,
            "gradient_checkpointing": ckpt, "transformer_params": prep["params"],
            "lora_params": est.params["lora"], "malloc_mmap_threshold": malloc_threshold,
            "measured_increase_bytes": got["increase_bytes"],
            "measured_weight_pages_bytes": got["weight_pages_bytes"],
            "measured_malloc_live_increase_bytes": got["malloc_live_increase_bytes"],
            "predicted_bytes": train.host_bytes,
            "predicted_parts": {k: round(v) for k, v in train.host.items()},
            "ratio": round(train.host_bytes / got["increase_bytes"], 3),
            "stage_seconds": got["seconds"]}


def main(argv: list[str] | None = None) -> dict | None:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] == "prepare":
        work, heads, layers, size = Path(argv[1]), int(argv[2]), int(argv[3]), int(argv[4])
        print(json.dumps(prepare(work, heads, layers, size)))
        return None
    if argv and argv[0] == "measure":
        print(json.dumps(measure(json.loads(argv[1]))))
        return None
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--work", default=None, help="scratch folder (default: a temp dir)")
    parser.add_argument("--heads", type=int, default=6)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--size", type=int, default=512)
    parser.add_argument("--steps", type=int, default=2)
    parser.add_argument("--gradient_checkpointing", action="store_true")
    parser.add_argument("--default_malloc", action="store_true",
                        help="measure with glibc's default (growing) mmap threshold")
    parser.add_argument("--out", default=str(ROOT / "bench/results/host_ram.json"))
    args = parser.parse_args(argv)
    import platform
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        work = Path(args.work or tmp)
        r = run(work, args.heads, args.layers, args.size, args.steps,
                ckpt=args.gradient_checkpointing, malloc_threshold=not args.default_malloc)
    r.update({"date": time.strftime("%Y-%m-%d"), "machine": f"{platform.machine()}, "
              f"{os.cpu_count()} CPU cores, CPU only"})
    print(f"train stage host RAM increase: measured {r['measured_increase_bytes'] / 1e6:.0f} MB,"
          f" predicted {r['predicted_bytes'] / 1e6:.0f} MB (ratio {r['ratio']})")
    for k, v in r["predicted_parts"].items():
        print(f"  {k:32s} {v / 1e6:8.1f} MB")
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(r, indent=2) + "\n")
    print(f"wrote {args.out}")
    return r


if __name__ == "__main__":
    main()
