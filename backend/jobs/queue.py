"""The queue: which queued runs may start now, and starting their supervisors.

At most ``max_running_per_gpu_set`` running runs per overlapping GPU set ("all" overlaps
everything, "cpu" only "cpu"), first come first served: a queued run never overtakes an
earlier one waiting for an overlapping set. ``start_ready`` launches a supervisor for each
run that may start; the supervisor claims its run itself (atomically, see
``backend.jobs.supervisor``), so a duplicate launch is harmless. A run whose disk has less
free space than the workspace's ``min_free_disk_bytes`` is refused (``disk_refusal``).
"""
from __future__ import annotations

import os
import shutil
import sqlite3
import threading
import time
from pathlib import Path

from backend.core.messages import Msg
from backend.jobs.history import connect, get_setting, msg_json, transaction
from backend.jobs.processes import spawn_supervisor

DEFAULT_MIN_FREE_DISK = 2 * 1024**3
# A supervisor launched this recently is still starting: do not launch a second one.
LAUNCH_PENDING_S = 30.0


def normalize_gpu_ids(gpu_ids: str | None) -> str:
    """"all" (every visible GPU), "cpu" (none), or a sorted comma list of GPU indices."""
    text = "all" if gpu_ids is None else str(gpu_ids).strip().lower()
    if text in ("", "all"):
        return "all"
    if text in ("cpu", "none"):
        return "cpu"
    try:
        ids = sorted({int(part) for part in text.replace(" ", "").split(",") if part != ""})
    except ValueError:
        ids = []
    if not ids or any(i < 0 for i in ids):
        raise ValueError(f"gpu_ids: not a GPU list (got {gpu_ids!r}; allowed all, cpu, or "
                         f"comma-separated indices such as 0,1)")
    return ",".join(str(i) for i in ids)


def gpu_sets_overlap(a: str, b: str) -> bool:
    if a == "all" or b == "all":
        return True
    if a == "cpu" or b == "cpu":
        return a == b
    return bool(set(a.split(",")) & set(b.split(",")))


def ready_runs(conn: sqlite3.Connection, max_running: int) -> list[sqlite3.Row]:
    """Queued runs that may start now, in queue order.

    A run starts when fewer than ``max_running`` running (or just chosen) runs use a GPU set
    that overlaps its own and no earlier queued run waiting for an overlapping set is ahead.
    """
    # Runs sent to SLURM (a job id) wait in SLURM's queue, not in this one.
    occupied = [r["gpu_ids"] for r in conn.execute(
        "SELECT gpu_ids FROM runs WHERE status = 'running' AND slurm_job_id IS NULL")]
    waiting: list[str] = []
    chosen = []
    for run in conn.execute("SELECT * FROM runs WHERE status = 'queued' "
                            "AND slurm_job_id IS NULL ORDER BY seq"):
        gpus = run["gpu_ids"]
        busy = sum(gpu_sets_overlap(gpus, other) for other in occupied)
        blocked = any(gpu_sets_overlap(gpus, other) for other in waiting)
        if busy < max_running and not blocked:
            chosen.append(run)
            occupied.append(gpus)
        else:
            waiting.append(gpus)
    return chosen


def start_ready(workspace: str | os.PathLike, reap_in_thread: bool = False) -> list[str]:
    """Launch a supervisor for every queued run that can start now; returns their ids.

    The supervisor claims its run itself (atomically), so a duplicate launch is harmless.
    """
    workspace = Path(workspace)
    conn = connect(workspace)
    launched = []
    try:
        with transaction(conn):
            max_running = int(get_setting(conn, "max_running_per_gpu_set", 1))
            now = time.time()
            # A run with secrets is claimed only by its own waiting supervisor.
            todo = [r for r in ready_runs(conn, max_running)
                    if not r["secret_keys"] and (not r["launch_requested_at"]
                                                 or now - r["launch_requested_at"]
                                                 > LAUNCH_PENDING_S)]
            for r in todo:
                conn.execute("UPDATE runs SET launch_requested_at = ? WHERE id = ?",
                             (now, r["id"]))
        for r in todo:
            try:
                proc = spawn_supervisor(workspace, r["id"], Path(r["run_dir"]))
            except OSError as e:
                why = Msg("note.supervisor_not_started", error=str(e))
                with transaction(conn):
                    conn.execute(
                        "UPDATE runs SET status = 'failed', ended_at = ?, failure_reason = ?, "
                        "failure_reason_msg = ? WHERE id = ? AND status = 'queued'",
                        (time.time(), why, msg_json(why), r["id"]))
                continue
            launched.append(r["id"])
            if reap_in_thread:
                threading.Thread(target=proc.wait, daemon=True,
                                 name=f"reap-supervisor-{r['id']}").start()
    finally:
        conn.close()
    return launched



# ----------------------------------------------------------------------------- free disk


def free_disk_bytes(path: str | os.PathLike) -> int:
    p = Path(path)
    while not p.exists() and p != p.parent:
        p = p.parent
    return shutil.disk_usage(p).free


def human_bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.1f} {unit}" if unit != "B" else f"{int(n)} B"
        n /= 1024
    return f"{n:.1f} TiB"


def disk_refusal(path: str | os.PathLike, min_free: int) -> Msg | None:
    """A message when the disk holding ``path`` has less than ``min_free`` bytes free."""
    free = free_disk_bytes(path)
    if free >= min_free:
        return None
    return Msg("note.disk_refusal", free=human_bytes(free), path=str(path),
               need=human_bytes(min_free))
