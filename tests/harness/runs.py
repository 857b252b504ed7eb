"""The job runner's fake stages (``tests/fake_stage.py``) and polling waits."""
from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import psutil

from backend.jobs.runner import Runner
from backend.planning.plan import StagePlan


SLEEPER = "import time\nwhile True:\n    time.sleep(0.05)\n"


def fake(run_dir: Path, *args, stage: str = "train") -> StagePlan:
    argv = [sys.executable, "-m", "tests.fake_stage", "--stage", stage,
            "--progress_file", str(run_dir / "progress.jsonl"),
            "--output_dir", str(run_dir / "output"), *map(str, args)]
    return StagePlan(stage, argv, {})


def wait_for(predicate, what: str, timeout: float = 90.0):
    """Poll until ``predicate()`` is truthy (a safety limit, not a timing assertion)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"gave up waiting for {what}")


def log_text(runner: Runner, run_id: str, stage: str = "train") -> str:
    path = Path(next(s["log_path"] for s in runner.get_run(run_id)["stages"]
                     if s["name"] == stage))
    return path.read_text(encoding="utf-8") if path.exists() else ""


def waiting_at_gate(runner: Runner, run_id: str, stage: str = "train"):
    return lambda: "waiting for gate" in log_text(runner, run_id, stage)


def running(pid: int, created: float) -> bool:
    """The very process (pid and creation time) exists and is not a zombie."""
    try:
        p = psutil.Process(pid)
        return p.create_time() == created and p.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def group_running(pgid: int) -> bool:
    """A process that is not a zombie is in the group. (An orphan's zombie waits for PID 1,
    which may reap late; a process the supervisor started it reaps itself.)"""
    for p in psutil.process_iter():
        try:
            if os.getpgid(p.pid) == pgid and p.status() != psutil.STATUS_ZOMBIE:
                return True
        except (OSError, psutil.Error):
            continue
    return False
