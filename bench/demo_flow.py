"""Wall time of the CPU demo flow: cache -> LoRA -> base-vs-LoRA samples, through the runner.

Submits a bundled preset (default ``cpu_demo``: the tiny Qwen-Image of backend/assets and
its 8-image "zlr style" dataset, offline) to the real job runner in a fresh workspace,
exactly as the UI's Start button does, waits for it, and reports the whole run's wall time
and each stage's (from the runner's history: stage start and end), the number of training
steps and images, and the last training loss.

Run (a few minutes on 2 CPU cores; needs backend/assets, built by
``python -m backend.families.qwen_image.demo build --out backend/assets``):
    python bench/demo_flow.py                          # writes bench/results/demo_flow.json
    python bench/demo_flow.py --preset cpu_demo_zero3 --out bench/results/demo_flow_zero3.json
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from bench.results_io import write_result  # noqa: E402


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--preset", default="cpu_demo")
    parser.add_argument("--timeout_s", type=float, default=3600)
    parser.add_argument("--workspace", default=None,
                        help="keep the run in this workspace (default: a temp dir)")
    parser.add_argument("--assets", default=None,
                        help="a demo assets folder other than backend/assets (as written by "
                             "python -m backend.families.qwen_image.demo build --out DIR)")
    parser.add_argument("--out", default=None,
                        help="default: bench/results/demo_flow.json (cpu_demo), else "
                             "bench/results/demo_flow_<preset>.json")
    args = parser.parse_args(argv)
    out = Path(args.out or ROOT / "bench" / "results" / (
        "demo_flow.json" if args.preset == "cpu_demo" else f"demo_flow_{args.preset}.json"))

    from backend.config.presets import load_preset
    from backend.core.progress import read_events
    from backend.jobs.runner import Runner

    cfg = load_preset(args.preset)
    if args.assets:
        assets = Path(args.assets).resolve()
        cfg = cfg.model_copy(update={
            "models_dir": str(assets), "dataset_base_path": str(assets / "demo_dataset"),
            "dataset_metadata_path": str(assets / "demo_dataset" / "metadata.csv")})
    missing = [p for p in (cfg.dataset_base_path, cfg.models_dir) if not Path(p).exists()]
    if missing:
        sys.exit(f"{args.preset}: missing {', '.join(missing)}; build the demo assets first: "
                 f"python -m backend.families.qwen_image.demo build --out backend/assets")
    with tempfile.TemporaryDirectory() as tmp:
        runner = Runner(Path(args.workspace or Path(tmp) / "workspace"))
        t0 = time.time()
        run_id = runner.submit(cfg)
        run = runner.wait(run_id, timeout=args.timeout_s, poll_s=0.5)
        wall = time.time() - t0
        run_dir = Path(run["run_dir"])
        events, _ = read_events(run_dir / "progress.jsonl")
        steps = [e for e in events if e.get("event") == "step" and e.get("stage") == "train"]
        index = run_dir / "samples" / "index.json"
        images = json.loads(index.read_text())["images"] if index.is_file() else []
        stages = {s["name"]: {"status": s["status"], "exit_code": s["exit_code"],
                              "seconds": (round(s["ended_at"] - s["started_at"], 1)
                                          if s["started_at"] and s["ended_at"] else None)}
                  for s in run["stages"]}
        result = {
            "date": time.strftime("%Y-%m-%d"), "preset": args.preset,
            "assets": str(args.assets) if args.assets else "backend/assets",
            "machine": f"{platform.machine()}, {os.cpu_count()} CPU cores (shared), CPU only",
            "status": run["status"], "failure_reason": run.get("failure_reason"),
            "wall_s": round(wall, 1), "stages": stages,
            "train_steps": len(steps),
            "last_loss": steps[-1]["loss"] if steps else None,
            "sample_images": len(images),
        }
    print(f"{args.preset}: {result['status']} in {result['wall_s']} s "
          + ", ".join(f"{k} {v['seconds']} s" for k, v in stages.items())
          + f"; {result['train_steps']} steps, {result['sample_images']} images")
    return write_result(out, result)


if __name__ == "__main__":
    main()
