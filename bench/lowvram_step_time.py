"""Stage-2 step time of the low-VRAM methods on the CPU: layer offload (no DeepSpeed) vs
DeepSpeed ZeRO-3 with parameter + optimizer offload vs plain training, side by side.

In each round the three train stages run one after the other (the rounds interleave them,
so a change in the machine's load reaches all three), launched as the run plan launches
them, one CPU thread each, on the same small Qwen-Image transformer (the tiny pipeline's, widened
with ``--heads`` x 128) from the same stage-1 cache, with torch checkpointing (ZeRO-3:
DeepSpeed's, as its preset). Step times come from each stage's progress events; the first
``--warmup`` steps are left out; a method's ratio is the median over rounds of its median
over the plain stage's of the same round.

What this measures on a CPU: host and "device" are the same memory, so no weight crosses a
bus. Layer offload's figure is the overhead of its hooks (one copy of each block's frozen
weights out of the arena per forward and per backward, the saved-tensor tokens), ZeRO-3's
that of DeepSpeed's partitioning and its CPU Adam. On a GPU the transfer bound
(``estimator.compare_methods``: bus bytes per step / bandwidth) comes on top.

Run (about 6 minutes on 2 CPU cores):
    python bench/lowvram_step_time.py          # writes bench/results/lowvram_step_time.json
    python bench/lowvram_step_time.py --rounds 1 --steps 8 --warmup 2 --out /tmp/lv.json
"""
from __future__ import annotations

import argparse
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from bench.results_io import write_result  # noqa: E402
from bench.step_time import stage_config  # noqa: E402

METHODS = {
    "plain": {},
    "layer_offload": {"enable_model_cpu_offload": True},
    "zero3_offload": {"zero_stage": 3, "offload_param_device": "cpu",
                      "offload_optimizer_device": "cpu", "initialize_model_on_cpu": True},
}


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--heads", type=int, default=2, help="transformer width: heads x 128")
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--size", type=int, default=256, help="image side (pixels)")
    parser.add_argument("--rank", type=int, default=16)
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--out", default=str(ROOT / "bench/results/lowvram_step_time.json"))
    args = parser.parse_args(argv)

    from backend.planning.plan import plan_run
    from backend.core.progress import read_events
    from bench.host_ram_probe import bench_env, prepare_model

    env = bench_env()
    t0 = time.time()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        prep = prepare_model(work, args.heads, args.layers, args.size)
        rounds = []
        for r in range(args.rounds):
            medians, steps = {}, {}
            for name, changes in METHODS.items():
                cfg = stage_config(work, args.steps, args.rank, True, False, args.size)
                cfg = cfg.model_copy(update=changes)
                run_dir = work / "runs" / f"{name}-{r}"
                plan = next(p for p in plan_run(cfg, run_dir, cuda=False)
                            if p.name == "train")
                proc = subprocess.run(plan.argv, env={**env, **plan.env}, cwd=str(ROOT),
                                      stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                      text=True, timeout=3600)
                if proc.returncode != 0:
                    raise RuntimeError(f"{name} failed ({proc.returncode}):\n"
                                       f"{proc.stdout[-3000:]}")
                events, _ = read_events(run_dir / "progress.jsonl")
                t = {e["step"]: e["time"] for e in events if e.get("event") == "step"}
                times = [t[s] - t[s - 1] for s in sorted(t) if s > args.warmup and s - 1 in t]
                steps[name] = [round(x, 4) for x in times]
                medians[name] = statistics.median(times)
                print(f"round {r + 1} {name}: {medians[name]:.4f} s/step", flush=True)
            rounds.append({"median_s": {k: round(v, 4) for k, v in medians.items()},
                           "ratio_to_plain": {k: round(v / medians["plain"], 3)
                                              for k, v in medians.items()},
                           "steps_s": steps})
    result = {
        "date": time.strftime("%Y-%m-%d"),
        "machine": f"{platform.machine()}, {os.cpu_count()} CPU cores (shared), CPU only, "
                   f"1 thread per run, the three runs one after the other in each round",
        "what": "on a CPU: the hooks' overhead (no bus); a GPU adds the transfer bound",
        "model": {"heads": args.heads, "head_dim": 128, "layers": args.layers,
                  "transformer_params": prep["params"], "size": args.size,
                  "lora_rank": args.rank, "checkpointing": True},
        "steps_per_run": args.steps, "warmup_excluded": args.warmup,
        "ratio_to_plain": {k: round(statistics.median(r["ratio_to_plain"][k] for r in rounds),
                                    3) for k in METHODS},
        "rounds": rounds,
        "seconds": round(time.time() - t0, 1),
    }
    print("ratio to plain:", result["ratio_to_plain"])
    return write_result(args.out, result)


if __name__ == "__main__":
    main()
