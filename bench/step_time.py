"""Stage-2 step time: our train stage vs a minimal PyTorch + peft loop, same model and data.

Both train the same LoRA (same targets, rank, AdamW settings, flow-matching loss from the
model adapter) on the same small Qwen-Image transformer (the tiny pipeline's, widened with
``--heads`` x 128 so a step does real work) from the same one-sample stage-1 cache, one CPU
thread each. In every round the two run side by side, at the same time: our stage
(launched exactly as the run plan launches it: ``accelerate launch --config_file
accelerate_train.yaml -m backend.stages.train ...``) and the plain loop, which loads its
model and then starts stepping when the stage emits its ``start`` event, so both see the
same load on a shared machine; the first ``--warmup`` steps of every run are left out. Our per-step
times are read from the stage's own progress events (time between consecutive ``step``
events), the plain loop's from ``time.perf_counter`` around each step (data read, forward,
backward, optimizer). The ratio is the median of the per-round ratios of medians
(target: <= 1.05 without DeepSpeed). One more run measures the stage under DeepSpeed
ZeRO-3 with parameter and optimizer offload (the low-VRAM path on DeepSpeed's CPU
accelerator), reported against the same plain loop.

Run (about 5 minutes on 2 CPU cores):
    python bench/step_time.py                  # writes bench/results/step_time.json
    python bench/step_time.py --rounds 1 --steps 10 --no_deepspeed --out /tmp/st.json
"""
from __future__ import annotations

import argparse
import json
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

LR = 1e-4
SEED = 42


def plain_loop(transformer: str, cache: str, steps: int, rank: int, targets: list[str],
               checkpointing: bool, go_file: str | None = None) -> list[float]:
    """The baseline: diffusers model + peft LoRA + torch AdamW, nothing else."""
    import torch
    from diffusers import QwenImageTransformer2DModel
    from peft import LoraConfig
    from safetensors.torch import load_file

    from backend.families import get_family

    torch.manual_seed(SEED)
    model = QwenImageTransformer2DModel.from_pretrained(transformer, torch_dtype=torch.float32)
    model.requires_grad_(False)
    model.add_adapter(LoraConfig(r=rank, lora_alpha=rank, target_modules=targets))
    if checkpointing:
        model.enable_gradient_checkpointing()
    model.train()
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=LR, weight_decay=0.01)
    schedule = get_family("qwen_image").training_schedule()
    files = sorted(Path(cache).glob("*.safetensors"))
    while go_file and not Path(go_file).exists():  # start with the stage's first step
        time.sleep(0.01)
    times = []
    for step in range(steps):
        t0 = time.perf_counter()
        sample = load_file(str(files[step % len(files)]))
        g = torch.Generator().manual_seed(SEED * 1000 + step)
        loss = get_family("qwen_image").training_loss(model, sample, schedule, g, torch.float32)
        loss.backward()
        opt.step()
        opt.zero_grad()
        times.append(time.perf_counter() - t0)
    return times


def stage_config(work: Path, steps: int, rank: int, checkpointing: bool, zero3: bool,
                 size: int):
    from backend.config.schema import RunConfig

    extra = {}
    if zero3:
        extra = {"zero_stage": 3, "offload_param_device": "cpu",
                 "offload_optimizer_device": "cpu", "initialize_model_on_cpu": True}
    return RunConfig(run_name="bench-step-time", offline=True,
                     model_id_with_origin_paths=str(work / "model" / "transformer"),
                     dataset_base_path=str(work / "cache"), stages=["train"],
                     height=size, width=size, lora_rank=rank, learning_rate=LR,
                     max_steps=steps, dataset_repeat=steps, num_epochs=1,
                     mixed_precision="no", use_gradient_checkpointing=checkpointing,
                     seed=SEED, **extra)


def run_side_by_side(work: Path, name: str, cfg, steps: int, warmup: int, rank: int,
                     targets: list[str], checkpointing: bool, env: dict,
                     with_plain: bool = True) -> tuple[list[float], list[float]]:
    """Our stage (as planned) and the plain loop at the same time, one thread each; the
    plain loop starts its steps when the stage emits ``start``, so both see the same
    machine load. Returns (stage step times, plain step times), warm-up left out."""
    from backend.planning.plan import plan_run
    from backend.core.progress import read_events

    run_dir = work / "runs" / name
    plan = next(p for p in plan_run(cfg, run_dir, cuda=False) if p.name == "train")
    go = run_dir / "go"
    stage = subprocess.Popen(plan.argv, env={**env, **plan.env}, cwd=str(ROOT),
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    plain = None
    if with_plain:
        args = json.dumps([str(work / "model" / "transformer"), str(work / "cache"), steps,
                           rank, targets, checkpointing, str(go)])
        plain = subprocess.Popen([sys.executable, __file__, "plain", args], env=env,
                                 cwd=str(ROOT), stdout=subprocess.PIPE,
                                 stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 1800
    while not go.exists() and stage.poll() is None and time.time() < deadline:
        events, _ = read_events(run_dir / "progress.jsonl")
        if any(e.get("event") == "start" for e in events):
            go.touch()
        time.sleep(0.02)
    go.touch()
    out, _ = stage.communicate(timeout=1800)
    if stage.returncode != 0:
        raise RuntimeError(f"train stage failed ({stage.returncode}):\n{out[-3000:]}")
    events, _ = read_events(run_dir / "progress.jsonl")
    t = {e["step"]: e["time"] for e in events if e.get("event") == "step"}
    ours = [t[s] - t[s - 1] for s in sorted(t) if s > warmup and s - 1 in t]
    base: list[float] = []
    if plain is not None:
        pout, perr = plain.communicate(timeout=1800)
        if plain.returncode != 0:
            raise RuntimeError(f"plain loop failed:\n{perr[-3000:]}")
        base = json.loads(pout.strip().splitlines()[-1])[warmup:]
    return ours, base


def main(argv: list[str] | None = None) -> dict | None:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] == "plain":
        import torch
        torch.set_num_threads(1)
        print(json.dumps(plain_loop(*json.loads(argv[1]))))
        return None
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--heads", type=int, default=2, help="transformer width: heads x 128")
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--size", type=int, default=256, help="image side (pixels)")
    parser.add_argument("--rank", type=int, default=16)
    parser.add_argument("--steps", type=int, default=25, help="steps per run")
    parser.add_argument("--warmup", type=int, default=5, help="steps left out per run")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--gradient_checkpointing", action="store_true")
    parser.add_argument("--no_deepspeed", action="store_true")
    parser.add_argument("--out", default=str(ROOT / "bench/results/step_time.json"))
    args = parser.parse_args(argv)

    from backend.families.qwen_image import TARGETS as QWEN_IMAGE_TARGETS
    from bench.host_ram_probe import bench_env, prepare_model

    targets = QWEN_IMAGE_TARGETS.split(",")
    env = bench_env()
    t_start = time.time()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        prep = prepare_model(work, args.heads, args.layers, args.size)
        rounds = []
        for r in range(args.rounds):
            ours, base = run_side_by_side(
                work, f"plain-{r}", stage_config(work, args.steps, args.rank,
                                                 args.gradient_checkpointing, False, args.size),
                args.steps, args.warmup, args.rank, targets, args.gradient_checkpointing, env)
            ratio = statistics.median(ours) / statistics.median(base)
            rounds.append({"stage_median_s": round(statistics.median(ours), 4),
                           "plain_median_s": round(statistics.median(base), 4),
                           "ratio": round(ratio, 3),
                           "stage_steps_s": [round(x, 4) for x in ours],
                           "plain_steps_s": [round(x, 4) for x in base]})
            print(f"round {r + 1}: stage {rounds[-1]['stage_median_s']:.4f} s/step, plain "
                  f"{rounds[-1]['plain_median_s']:.4f} s/step, ratio {ratio:.3f}", flush=True)
        result = {
            "date": time.strftime("%Y-%m-%d"),
            "machine": f"{platform.machine()}, {os.cpu_count()} CPU cores (shared), CPU only, "
                       f"1 thread per run",
            "model": {"heads": args.heads, "head_dim": 128, "layers": args.layers,
                      "transformer_params": prep["params"], "size": args.size,
                      "lora_rank": args.rank, "gradient_checkpointing":
                      args.gradient_checkpointing},
            "steps_per_run": args.steps, "warmup_excluded": args.warmup,
            "rounds": rounds,
            "ratio": round(statistics.median(r["ratio"] for r in rounds), 3),
            "pooled_ratio": round(
                statistics.median(x for r in rounds for x in r["stage_steps_s"])
                / statistics.median(x for r in rounds for x in r["plain_steps_s"]), 3),
            "ratio_range": [min(r["ratio"] for r in rounds), max(r["ratio"] for r in rounds)],
            "target_ratio": 1.05,
        }
        if not args.no_deepspeed:
            ds, _ = run_side_by_side(
                work, "zero3", stage_config(work, args.steps, args.rank, True, True, args.size),
                args.steps, args.warmup, args.rank, targets, True, env, with_plain=False)
            plain_median = statistics.median(r["plain_median_s"] for r in rounds)
            result["zero3_offload"] = {
                "stage_median_s": round(statistics.median(ds), 4),
                "ratio_to_plain": round(statistics.median(ds) / plain_median, 3),
                "stage_steps_s": [round(x, 4) for x in ds],
                "settings": "ZeRO-3, offload_param cpu, offload_optimizer cpu, DeepSpeed "
                            "activation checkpointing, fp32, DeepSpeed CPU accelerator"}
            print(f"ZeRO-3 offload: {result['zero3_offload']['stage_median_s']:.4f} s/step "
                  f"({result['zero3_offload']['ratio_to_plain']:.2f}x the plain loop)",
                  flush=True)
    result["seconds"] = round(time.time() - t_start, 1)
    print(f"step-time ratio (our stage / plain loop, no DeepSpeed): {result['ratio']} "
          f"(median of rounds; pooled {result['pooled_ratio']}, rounds "
          f"{result['ratio_range'][0]}-{result['ratio_range'][1]}; target <= "
          f"{result['target_ratio']})")
    return write_result(args.out, result)


if __name__ == "__main__":
    main()
