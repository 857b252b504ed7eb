"""A stand-in stage for the job runner's tests (launched by the runner like a real stage):

    python -m tests.fake_stage --stage train --steps 5 --progress_file P --output_dir D

Each step prints a line, writes a ``step`` progress event and, when asked, saves a
"checkpoint" (``step-N.safetensors``, written to a temporary name and renamed) and the resume
state (``state/state.safetensors``). ``--resume_from`` continues after the saved step.
On SIGTERM it saves its state, writes ``end{stopped}`` and exits 0, unless ``--ignore_sigterm``.
It can wait for a gate file, start grandchildren (one in its group, one in a session of its
own, the way torch elastic starts workers), kill itself with SIGKILL, or fail with a message.
"""
from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
from safetensors.numpy import load_file, save_file

from backend.core.progress import ProgressWriter

SLEEPER = "import time\nwhile True:\n    time.sleep(0.05)\n"


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--stage", default="train")
    p.add_argument("--progress_file")
    p.add_argument("--output_dir")
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--sleep", type=float, default=0.01)
    p.add_argument("--save_every", type=int, default=0)
    p.add_argument("--resume_from")
    p.add_argument("--wait_for", help="a gate file to wait for before step --wait_at")
    p.add_argument("--wait_at", type=int, default=1)
    p.add_argument("--spawn_grandchildren", help="write the grandchildren's pids here (JSON)")
    p.add_argument("--ignore_sigterm", action="store_true")
    p.add_argument("--self_kill_at", type=int)
    p.add_argument("--fail_at", type=int)
    p.add_argument("--fail_text", default="RuntimeError: something broke")
    p.add_argument("--say", action="append", default=[], help="print this line at start")
    args = p.parse_args()

    progress = ProgressWriter(args.progress_file, args.stage)
    out = Path(args.output_dir) if args.output_dir else None
    state_file = out / "state" / "state.safetensors" if out else None
    terminated = []

    def on_sigterm(signum, frame):
        if args.ignore_sigterm:
            print("got SIGTERM, ignoring it", flush=True)
            return
        terminated.append(signum)

    signal.signal(signal.SIGTERM, on_sigterm)

    print(f"{args.stage}: PYTHONUNBUFFERED={os.environ.get('PYTHONUNBUFFERED')} "
          f"CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES', '<unset>')} "
          f"HF_TOKEN visible: {'yes' if os.environ.get('HF_TOKEN') else 'no'} "
          f"cwd={os.getcwd()}")
    for line in args.say:
        print(line)
    if args.spawn_grandchildren:
        same = subprocess.Popen([sys.executable, "-c", SLEEPER])
        own = subprocess.Popen([sys.executable, "-c", SLEEPER], start_new_session=True)
        tmp = Path(args.spawn_grandchildren + ".tmp")
        tmp.write_text(json.dumps({"same_group": same.pid, "new_session": own.pid}))
        os.replace(tmp, args.spawn_grandchildren)

    done = 0
    if args.resume_from:
        done = int(load_file(str(Path(args.resume_from) / "state.safetensors"))["step"][0])
        print(f"resumed from step {done}")

    def save_state(step: int) -> None:
        if state_file is None:
            return
        state_file.parent.mkdir(parents=True, exist_ok=True)
        tmp = state_file.with_suffix(".tmp")
        save_file({"step": np.array([step], dtype=np.int64)}, str(tmp))
        os.replace(tmp, state_file)

    def stop_now() -> int:
        save_state(done)
        print(f"stopping: state saved at step {done}", flush=True)
        progress.end("stopped", f"stopped at step {done}")
        return 0

    progress.emit("start", total=args.steps)
    for step in range(done + 1, args.steps + 1):
        if args.wait_for and step == args.wait_at:
            print(f"waiting for {Path(args.wait_for).name}", flush=True)
            while not Path(args.wait_for).exists():
                if terminated:
                    return stop_now()
                time.sleep(0.02)
        if terminated:
            return stop_now()
        if args.fail_at == step:
            print(args.fail_text, file=sys.stderr, flush=True)
            progress.end("failed", args.fail_text)
            return 1
        if args.self_kill_at == step:
            print(f"step {step}: about to be killed", flush=True)
            os.kill(os.getpid(), signal.SIGKILL)
        time.sleep(args.sleep)
        loss = 1.0 / step
        print(f"step {step}/{args.steps} loss {loss:.4f} · ok", flush=True)
        progress.emit("step", step=step, total=args.steps, epoch=0, loss=loss, lr=1e-4,
                      samples_per_s=10.0, eta_s=(args.steps - step) * args.sleep)
        done = step
        if out is not None and args.save_every and step % args.save_every == 0:
            out.mkdir(parents=True, exist_ok=True)
            ckpt = out / f"step-{step}.safetensors"
            tmp = out / f".step-{step}.tmp"
            save_file({"lora_A.weight": np.full((4, 2), step, dtype=np.float32)}, str(tmp))
            os.replace(tmp, ckpt)
            save_state(step)
            progress.emit("checkpoint", step=step, path=str(ckpt))
    progress.end("succeeded")
    print(f"{args.stage}: done")
    return 0


if __name__ == "__main__":
    sys.exit(main())
