"""Run supervisor: one detached process per run that starts its stages one after another.

The job runner (``backend.jobs.runner.Runner``) starts it in its own process session, so a run
goes on while the UI is closed or restarting:

    python -m backend.jobs.supervisor <workspace> <run_id> [--wait]

(``python -m backend.supervisor`` is the same, for runs queued before the move.)

``--wait``: the run has secrets of its own (a hub token typed into the UI); this supervisor
was started at submit time with them in its environment and waits until the queue lets it
claim the run (no other process can start that run: the secrets live only here).

What it does, top to bottom:

1. claims the run in the history (``backend.jobs.history``): queued -> running, its pid and
   process start time recorded, but only when the queue allows it (``backend.jobs.queue``:
   at most ``max_running_per_gpu_set`` running runs per GPU set, earlier runs first);
   otherwise it exits;
2. refuses to start when the run directory's disk has less free space than the workspace's
   ``min_free_disk_bytes`` setting;
3. runs each queued stage as a subprocess (``backend.jobs.processes.start_stage``: argv list,
   own session, cwd = repo root, ``PYTHONUNBUFFERED=1``, ``CUDA_VISIBLE_DEVICES`` from the
   run's GPU set), stdout and stderr appended to ``logs/<stage>.log``, and records pid,
   process group, start time, exit code;
4. on a stop request (the runner sets ``stop_requested`` and sends SIGUSR1; SIGTERM/SIGINT from
   the system count too) sends SIGTERM to every process group of the stage, waits up to the
   run's grace period for all of them to vanish (polling ``os.killpg(pgid, 0)``), then SIGKILLs;
5. a failed stage fails the run (its reason from ``backend.jobs.diagnosis``), later stages are
   skipped;
6. when done, starts the queued runs that can start now, then exits.

The supervisor is a child subreaper (Linux): processes a stage leaves behind (torch elastic
starts its workers in sessions of their own) stay its descendants, so stop and clean-up reach
them even after the stage's leader has exited. It imports nothing heavy, so it starts in a
fraction of a second.
"""
from __future__ import annotations

import json
import os
import shlex
import signal
import sqlite3
import sys
import time
import traceback
from pathlib import Path
from typing import TYPE_CHECKING

import psutil

from backend.core.messages import Msg
from backend.jobs.history import connect, get_setting, msg_json, read_msg, transaction
from backend.jobs.processes import (
    SECRET_PREFIX, ProcessTree, become_subreaper, child_env, process_start_time, start_stage)
from backend.jobs.queue import disk_refusal, ready_runs, start_ready
from backend.jobs.watch import LOG_PREFIX, end_reason, last_end_event, read_tail
from backend.core.rundir import RunDir
from backend.jobs import diagnosis
from backend.jobs.memory import MemoryWatch

if TYPE_CHECKING:
    import subprocess

DEFAULT_STOP_GRACE_S = 30.0
# Leftover processes after a stage's leader exited get at most this long after SIGTERM.
LEFTOVER_GRACE_S = 5.0


class Supervisor:
    POLL_S = 0.2  # stage exit / stop flag
    DB_POLL_S = 0.5  # stop_requested in the history (SIGUSR1 makes it immediate)
    REAP_EVERY_S = 2.0  # orphaned descendants that ended
    WAIT_POLL_S = 0.5  # a waiting supervisor (--wait) trying to claim its run

    def __init__(self, workspace: str | os.PathLike, run_id: str, wait: bool = False):
        self.workspace = Path(workspace).resolve()
        self.run_id = run_id
        self.wait = wait
        # This run's secrets: out of our own environment (so no other process we start
        # inherits them), into its stages' environment only.
        self.secrets = {k[len(SECRET_PREFIX):]: os.environ.pop(k) for k in list(os.environ)
                        if k.startswith(SECRET_PREFIX)}
        self.conn = connect(self.workspace)
        self.signal_name: str | None = None
        self.wake = False
        self.proc: subprocess.Popen | None = None
        self._last_db_check = 0.0
        self._stop_cached = False

    # -- signals and stop requests
    def install_signal_handlers(self) -> None:
        def external(signum, frame):
            self.signal_name = signal.Signals(signum).name

        def wake(signum, frame):
            self.wake = True

        signal.signal(signal.SIGTERM, external)
        signal.signal(signal.SIGINT, external)
        signal.signal(signal.SIGUSR1, wake)
        # A handler, not SIG_IGN: an ignored signal would stay ignored in the stages.
        signal.signal(signal.SIGHUP, lambda signum, frame: None)

    def stop_requested(self) -> bool:
        if self._stop_cached:
            return True
        if self.signal_name:
            with transaction(self.conn):
                why = Msg("note.supervisor_signal", signal=self.signal_name)
                self.conn.execute(
                    "UPDATE runs SET stop_requested = 1, stop_requested_at = ?, "
                    "stop_reason_msg = CASE WHEN stop_reason IS NULL THEN ? "
                    "ELSE stop_reason_msg END, stop_reason = COALESCE(stop_reason, ?) "
                    "WHERE id = ?",
                    (time.time(), msg_json(why), why, self.run_id))
            self._stop_cached = True
            return True
        now = time.monotonic()
        if self.wake or now - self._last_db_check >= self.DB_POLL_S:
            self.wake = False
            self._last_db_check = now
            row = self.conn.execute("SELECT stop_requested FROM runs WHERE id = ?",
                                    (self.run_id,)).fetchone()
            self._stop_cached = bool(row is None or row["stop_requested"])
        return self._stop_cached

    # -- the run
    def claim(self) -> sqlite3.Row | None:
        with transaction(self.conn):
            run = self.conn.execute("SELECT * FROM runs WHERE id = ?", (self.run_id,)).fetchone()
            if run is None or run["status"] != "queued":
                return None
            max_running = int(get_setting(self.conn, "max_running_per_gpu_set", 1))
            if self.run_id not in {r["id"] for r in ready_runs(self.conn, max_running)}:
                return None
            pid = os.getpid()
            self.conn.execute(
                "UPDATE runs SET status = 'running', started_at = ?, ended_at = NULL, "
                "supervisor_pid = ?, supervisor_start = ?, failure_reason = NULL, note = NULL, "
                "failure_reason_msg = NULL, note_msg = NULL WHERE id = ?", (time.time(), pid, process_start_time(pid), self.run_id))
            return self.conn.execute("SELECT * FROM runs WHERE id = ?", (self.run_id,)).fetchone()

    def wait_for_turn(self) -> sqlite3.Row | None:
        """Claim the run as soon as the queue allows; None when it stopped being queued."""
        while True:
            run = self.claim()
            if run is not None:
                return run
            row = self.conn.execute("SELECT status FROM runs WHERE id = ?",
                                    (self.run_id,)).fetchone()
            if row is None or row["status"] != "queued" or self.signal_name:
                return None
            time.sleep(self.WAIT_POLL_S)

    def run(self) -> int:
        self.install_signal_handlers()
        run = self.wait_for_turn() if self.wait else self.claim()
        if run is None:
            return 0
        become_subreaper()
        print(f"{LOG_PREFIX} supervisor pid {os.getpid()} runs {self.run_id} "
              f"(attempt {run['attempt']})", flush=True)
        try:
            self.run_stages(run)
        except BaseException as e:  # noqa: BLE001 - record any crash, never leave 'running'
            traceback.print_exc()
            if self.proc is not None:
                ProcessTree(self.proc.pid, os.getpid(), self.reap,
                            run_id=self.run_id).terminate(
                    float(run["stop_grace_s"]))
            self.finish("failed", Msg("note.supervisor_failed",
                                      error=f"{type(e).__name__}: {e}"))
        finally:
            try:
                start_ready(self.workspace)
            except Exception:  # noqa: BLE001
                traceback.print_exc()
            self.conn.close()
        return 0

    def run_stages(self, run: sqlite3.Row) -> None:
        run_dir = Path(run["run_dir"])
        min_free = int(get_setting(self.conn, "min_free_disk_bytes", 0))
        refusal = disk_refusal(run_dir, min_free)
        if refusal:
            self.finish("failed", refusal)
            return
        stages = self.conn.execute("SELECT * FROM stages WHERE run_id = ? ORDER BY idx",
                                   (self.run_id,)).fetchall()
        for stage in stages:
            if stage["status"] != "queued":
                continue
            if self.stop_requested():
                break
            status, reason = self.run_stage(run, stage)
            if status == "failed":
                self.finish("failed", reason)
                return
            if status == "stopped":
                self.finish("stopped", reason)
                return
        if self.stop_requested():
            self.finish("stopped", None)
        else:
            self.finish("succeeded", None)

    def finish(self, status: str, reason: str | None) -> None:
        with transaction(self.conn):
            run = self.conn.execute("SELECT * FROM runs WHERE id = ?", (self.run_id,)).fetchone()
            if run is None:
                return
            now = time.time()
            self.conn.execute(
                "UPDATE stages SET status = 'skipped' WHERE run_id = ? AND status = 'queued'",
                (self.run_id,))
            self.conn.execute(
                "UPDATE stages SET status = ?, ended_at = ? WHERE run_id = ? AND status = 'running'",
                ("stopped" if status == "stopped" else "failed", now, self.run_id))
            failure = reason if status == "failed" else None
            note = read_msg(run["note_msg"], run["note"])
            if status == "stopped":
                note = joined(read_msg(run["stop_reason_msg"], run["stop_reason"]), reason)
            self.conn.execute(
                "UPDATE runs SET status = ?, ended_at = ?, failure_reason = ?, note = ?, "
                "failure_reason_msg = ?, note_msg = ?, launch_requested_at = NULL WHERE id = ?",
                (status, now, failure, note, msg_json(failure), msg_json(note), self.run_id))
        print(f"{LOG_PREFIX} run {self.run_id} {status}" + (f": {reason}" if reason else ""),
              flush=True)

    # -- one stage
    @staticmethod
    def stage_pids(leader: int) -> list[int]:
        """The stage's processes: its leader and every descendant (the launcher's workers)."""
        try:
            proc = psutil.Process(leader)
            return [leader] + [c.pid for c in proc.children(recursive=True)]
        except psutil.Error:
            return []

    def reap(self) -> None:
        """Reap finished children: the stage leader and orphans re-parented to us."""
        if self.proc is not None:
            self.proc.poll()
        try:
            children = psutil.Process().children()
        except psutil.Error:
            return
        for child in children:
            if self.proc is not None and child.pid == self.proc.pid:
                continue
            try:
                os.waitpid(child.pid, os.WNOHANG)
            except ChildProcessError:
                pass

    def run_stage(self, run: sqlite3.Row, stage: sqlite3.Row) -> tuple[str, Msg | None]:
        name = stage["name"]
        log_path = Path(stage["log_path"])
        log_path.parent.mkdir(parents=True, exist_ok=True)
        argv = json.loads(stage["argv"])
        env = child_env({**json.loads(stage["env"]), **self.secrets})
        grace = float(run["stop_grace_s"])

        def note(message: str) -> None:
            with open(log_path, "a", encoding="utf-8") as f:
                f.write(f"{LOG_PREFIX} {message}\n")

        started = time.time()
        note(f"==== stage '{name}' (attempt {run['attempt']}) started "
             f"{time.strftime('%Y-%m-%d %H:%M:%S', time.localtime(started))}")
        note(f"$ {shlex.join(argv)}")
        try:
            with open(log_path, "ab") as log:
                self.proc = start_stage(argv, env, log)
        except OSError as e:
            reason = Msg("note.could_not_start", stage=name, error=str(e))
            note(reason)
            with transaction(self.conn):
                self.conn.execute(
                    "UPDATE stages SET status = 'failed', exit_code = 127, started_at = ?, "
                    "ended_at = ?, note = ?, note_msg = ? WHERE run_id = ? AND idx = ?",
                    (started, time.time(), reason, msg_json(reason), self.run_id,
                     stage["idx"]))
            return "failed", reason

        proc = self.proc
        tree = ProcessTree(proc.pid, os.getpid(), self.reap, run_id=self.run_id)
        with transaction(self.conn):
            self.conn.execute(
                "UPDATE stages SET status = 'running', pid = ?, pgid = ?, proc_start = ?, "
                "started_at = ?, ended_at = NULL, exit_code = NULL, note = NULL, "
                "note_msg = NULL WHERE run_id = ? AND idx = ?",
                (proc.pid, proc.pid, process_start_time(proc.pid), started, self.run_id,
                 stage["idx"]))

        memory = MemoryWatch()
        stopped = killed = False
        last_reap = time.monotonic()
        while proc.poll() is None:
            if self.stop_requested():
                stopped = True
                note("stop requested")
                killed = tree.terminate(grace, note)
                break
            if time.monotonic() - last_reap >= self.REAP_EVERY_S:
                self.reap()
                memory.sample(self.stage_pids(proc.pid))
                last_reap = time.monotonic()
            time.sleep(self.POLL_S)
        code = proc.wait()

        # A stage is over when its leader exits; what it left behind must not hold the GPU.
        leftovers = tree.alive_groups(tree.groups())
        if leftovers:
            note(f"stage '{name}' left processes behind in group(s) {sorted(leftovers)}; "
                 f"stopping them")
            tree.terminate(min(grace, LEFTOVER_GRACE_S), note)
        self.reap()
        self.proc = None
        ended = time.time()

        # Under accelerate launch the leader is the launcher (exit 1 for any failure): keep
        # the stage process's own exit status, which the launcher reports in the log.
        own = diagnosis.stage_exit_code(code, read_tail(log_path, 64 * 1024))
        if own != code:
            note(f"the launcher exited with code {code}; the stage's own process "
                 f"{diagnosis.exit_code_text(own)}")
            code = own
        if diagnosis.killed_by_sigkill(code) and not stopped:
            note("memory: " + memory.note())  # evidence for (or against) out of memory
        stage_note = None
        if stopped or (code != 0 and self.stop_requested()):
            status = "stopped"
            reason = Msg("note.sigterm_killed", stage=name, grace=grace) if killed else None
            stage_note = reason
        elif code == 0:
            status, reason = "succeeded", None
        else:
            status = "failed"
            end = last_end_event(RunDir(Path(run["run_dir"])).progress, name)
            reason = diagnosis.reason_line(
                name, code, read_tail(log_path, 64 * 1024),
                end_reason=end_reason(end), config_yaml=run["config_yaml"])
            stage_note = reason
        note(f"stage '{name}' {diagnosis.exit_code_text(code)}; status {status}")
        with transaction(self.conn):
            self.conn.execute(
                "UPDATE stages SET status = ?, exit_code = ?, ended_at = ?, note = ?, "
                "note_msg = ? WHERE run_id = ? AND idx = ?",
                (status, code, ended, stage_note, msg_json(stage_note), self.run_id,
                 stage["idx"]))
        return status, reason


def joined(first, second):
    """A stopped run's note: why it was stopped (``first``) and what its stage said
    (``second``), as one message; "stopped" when neither says anything."""
    if first and second:
        return Msg("note.joined", first=first, second=second)
    return first or second or Msg("status.stopped")


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else list(argv)
    wait = "--wait" in args
    args = [a for a in args if a != "--wait"]
    if len(args) != 2:
        print("usage: python -m backend.jobs.supervisor <workspace> <run_id> [--wait]",
              file=sys.stderr)
        return 2
    return Supervisor(args[0], args[1], wait=wait).run()


if __name__ == "__main__":
    sys.exit(main())
