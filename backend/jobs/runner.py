"""The job runner: detached runs with a SQLite history, live logs, stop, queue, reattach, resume.

A run is an ordered list of stages (data_process -> train -> sample). ``Runner.submit`` plans
it (``backend.planning.plan.plan_run``), records it in ``{workspace}/zerolora.sqlite`` and queues it;
each run is carried by a detached supervisor process (``python -m backend.jobs.supervisor``, see
there) that starts the stages one after another. The UI process only reads the history, the
logs and the progress events, so it can close, restart and reattach at any time:

    runner = Runner(workspace)              # reattaches, starts queued runs that can start
    run_id = runner.submit(cfg)             # or submit_stages(plans, run_dir, yaml)
    text, offset = runner.tail_log(run_id, "train", offset)   # poll with the new offset
    runner.progress(run_id)                 # step/total, loss, eta, losses, checkpoints
    runner.stop(run_id)                     # SIGTERM, grace period, SIGKILL
    runner.resume(run_id)                   # same run id, from output/state

Resume re-queues the *same* run id: its cache, checkpoints, logs and progress stay in one
run folder (nothing multi-gigabyte is copied), the progress plot continues, and the history
keeps each earlier attempt in ``attempts``.

Secrets: a stage sees the environment of the process that started its supervisor (a hub
token set for the whole server reaches every run). A token for one run goes in
``secret_env``: that run's supervisor starts at once, holds it in memory while the run waits
in the queue, and hands it to that run's stages only. The history stores the names of such
variables, never their values; a plan whose ``env`` holds a secret-looking name is refused.

The queue: at most ``max_running_per_gpu_set`` running runs per overlapping GPU set ("all"
overlaps everything), first come first served; a finishing supervisor starts the next run.
The last ``Runner`` created for a workspace sets this limit and the free-disk threshold.

A supervisor that vanished (``kill -9``, a crash) is noticed by ``reattach()``: at start, from
the app's own watcher thread (``runner.watch()`` ... ``runner.close()``; no browser needed),
from the Run tab's timer and from ``wait()``. The supervisor only keeps the books, so a stage
still running without it is *adopted*: it goes on untouched, the run stays ``running`` (its
progress read from the progress file as before) and every look checks that very process (pid
and start time) again. Once the stage is over, what the supervisor would have recorded is
read from the stage's files: a stage whose progress file ends with ``end{succeeded}`` (this
attempt's) succeeded and the run goes on with its next stage (re-queued, a new supervisor
claims it) or succeeds; ``end{failed}`` or no ``end`` at all fails the run, with the reason.
Stop on an adopted run signals the stage's processes directly (SIGTERM, grace, SIGKILL).
Then the queue moves on. A run whose supervisor lives is never touched. All other reads
have no side effects.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import signal
import sys
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterator

from backend.core.messages import Msg
from backend.jobs import diagnosis
from backend.jobs.history import TERMINAL, connect, init_db, msg_json, read_msg, set_setting, \
    transaction, with_msgs
from backend.jobs.processes import ProcessTree, process_alive, process_start_time, \
    runner_env, spawn_supervisor
from backend.jobs.queue import DEFAULT_MIN_FREE_DISK, disk_refusal, normalize_gpu_ids, \
    start_ready
from backend.jobs.supervisor import DEFAULT_STOP_GRACE_S, LEFTOVER_GRACE_S, joined
from backend.jobs.watch import LOG_PREFIX, ProgressState, end_reason, last_end_event, \
    read_tail, utf8_cut
from backend.planning.plan import StagePlan, plan_run
from backend.core.progress import read_events
from backend.core import readgate, rundir
from backend.core.rundir import RunDir, new_run_id
from backend.config.errors import ConfigError
from backend.models.lora import target_module_problems
from backend.data.cache import CacheError, check_cache
from backend.planning import preflight

if TYPE_CHECKING:
    from backend.config.schema import RunConfig

__all__ = ["Runner", "RunnerError", "StagePlan"]

STAGE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")
# HF_TOKEN, MODELSCOPE_API_TOKEN, AWS_SECRET_ACCESS_KEY ... (not TOKENIZERS_PARALLELISM)
SECRET_KEY = re.compile(
    r"(^|_)(TOKEN|SECRET|PASSWORD|PASSWD|API_?KEY|ACCESS_KEY|CREDENTIALS?)(_|$)", re.I)
RESUME_FLAG = "--resume_from"
# How often the app's watcher looks for runs whose supervisor vanished (``Runner.watch``).
WATCH_EVERY_S = 2.0
# One recovery at a time across every process using a workspace (``Runner._recovery_lock``).
RECOVER_LOCK = ".recover.lock"
# Why a run stops when nothing else is said (``Runner.stop``).
STOPPED_ON_REQUEST = Msg("note.stopped_on_request")


class RunnerError(RuntimeError):
    """A request the runner refuses; the message is meant for people."""


def input_problems(cfg: "RunConfig") -> list[str]:
    """What the planned stages will read and is not there, as ``field: problem`` lines:
    the dataset folder and metadata file for data_process and one-shot training, the
    stage-1 cache for a train-only split run (data_process not planned). Read through the
    run's read gate, so a folder outside the user's roots reads as missing."""
    stages = list(cfg.stages)
    gate = readgate.for_config(cfg)
    base, meta = cfg.dataset_base_path, cfg.dataset_metadata_path
    reads_cache = "train" in stages and cfg.split_training and "data_process" not in stages
    reads_raw = "data_process" in stages or ("train" in stages and not cfg.split_training)
    problems = []
    if reads_raw:
        if not base or not gate.is_dir(Path(base).expanduser()):
            problems.append(f"dataset_base_path: folder not found (got {base!r}; allowed an "
                            f"existing dataset folder)")
        if meta and not gate.is_file(Path(meta).expanduser()):
            problems.append(f"dataset_metadata_path: file not found (got {meta!r}; allowed "
                            f"an existing .csv, .json or .jsonl file, or empty for .txt "
                            f"captions next to the images)")
    if reads_cache:
        try:
            check_cache(Path(base).expanduser(), gate)
        except CacheError as e:
            text = str(e)
            problems.append(text if text.startswith("dataset_base_path:")
                            else f"dataset_base_path: {text}")
    return problems


def check_before_start(cfg: "RunConfig") -> None:
    """What a config's stages will need, checked before any stage starts: the files each
    planned stage reads (``input_problems``) and what the stages would refuse in them
    (``backend.planning.preflight``: dataset rows, images, clips, edit rows, validation_samples),
    the LoRA target names against the trained component's modules, and a sample stage's
    prompts, input images and checkpoints. Raises ConfigError listing every problem."""
    problems = input_problems(cfg)
    if not problems:  # the files are there: what the stages would say of them
        problems += preflight.dataset_problems(cfg)
    if "train" in cfg.stages:
        problems += target_module_problems(cfg)
    problems += preflight.sample_problems(cfg)
    if problems:
        raise ConfigError(problems)


def with_resume_from(argv: list[str], state_dir: Path) -> list[str]:
    """``argv`` without any earlier --resume_from, plus ``--resume_from <state_dir>``."""
    out: list[str] = []
    skip = False
    for arg in argv:
        if skip:
            skip = False
            continue
        if arg == RESUME_FLAG:
            skip = True
            continue
        if arg.startswith(RESUME_FLAG + "="):
            continue
        out.append(arg)
    return out + [RESUME_FLAG, str(state_dir)]


class Runner:
    """Submit, watch, stop, resume and delete runs; safe to use from several threads."""

    def __init__(self, workspace: Path, max_running_per_gpu_set: int = 1,
                 stop_grace_s: float = DEFAULT_STOP_GRACE_S,
                 min_free_disk_bytes: int = DEFAULT_MIN_FREE_DISK, auto_start: bool = True):
        if max_running_per_gpu_set < 1:
            raise ValueError(f"max_running_per_gpu_set: must be at least 1 (got "
                             f"{max_running_per_gpu_set})")
        if stop_grace_s < 0:
            raise ValueError(f"stop_grace_s: must be >= 0 (got {stop_grace_s})")
        self.workspace = Path(workspace).expanduser().resolve()
        self.max_running_per_gpu_set = int(max_running_per_gpu_set)
        self.stop_grace_s = float(stop_grace_s)
        self.min_free_disk_bytes = int(min_free_disk_bytes)
        init_db(self.workspace)
        conn = connect(self.workspace)
        try:
            with transaction(conn):
                # Supervisors read these: the finishing run starts the next one by itself.
                set_setting(conn, "max_running_per_gpu_set", self.max_running_per_gpu_set)
                set_setting(conn, "min_free_disk_bytes", self.min_free_disk_bytes)
        finally:
            conn.close()
        self._lock = threading.Lock()
        self._progress: dict[str, ProgressState] = {}
        self._recovering: set[str] = set()
        self._again: set[str] = set()  # asked again while being settled (a stop, say)
        self._watcher: threading.Thread | None = None
        self._closing = threading.Event()
        if auto_start:
            self.reattach()

    # ------------------------------------------------------------------ helpers
    def _db(self):
        return connect(self.workspace)

    def _row(self, conn, run_id: str):
        row = conn.execute("SELECT * FROM runs WHERE id = ?", (run_id,)).fetchone()
        if row is None:
            raise RunnerError(Msg("note.no_such_run", run_id=repr(run_id)))
        return row

    def _start_ready(self) -> list[str]:
        return start_ready(self.workspace, reap_in_thread=True)

    @staticmethod
    def _secret_problems(secret_env: dict[str, str] | None) -> list[str]:
        problems = []
        for k, v in (secret_env or {}).items():
            if not ENV_NAME.match(str(k)):
                problems.append(f"secret_env: not an environment variable name (got {k!r})")
            elif not isinstance(v, str) or not v or "\0" in v:
                problems.append(f"secret_env.{k}: a non-empty string (got a {type(v).__name__})")
        return problems

    def _spawn_waiter(self, conn, run_id: str, run_dir: Path,
                      secret_env: dict[str, str]) -> None:
        """Inside the caller's transaction: start the run's own supervisor, holding its
        secrets in memory, and record it (its first claim waits for our commit)."""
        proc = spawn_supervisor(self.workspace, run_id, run_dir, secret_env)
        threading.Thread(target=proc.wait, daemon=True, name=f"reap-waiter-{run_id}").start()
        conn.execute("UPDATE runs SET secret_keys = ?, waiter_pid = ?, waiter_start = ?, "
                     "launch_requested_at = ? WHERE id = ?",
                     (json.dumps(sorted(secret_env)), proc.pid, process_start_time(proc.pid),
                      time.time(), run_id))

    # ------------------------------------------------------------------ submit
    def submit_stages(self, stages: list[StagePlan], run_dir: Path, config_yaml: str,
                      owner: str | None = None, name: str | None = None,
                      gpu_ids: str = "all", run_id: str | None = None,
                      secret_env: dict[str, str] | None = None,
                      slurm_job_id: str | None = None) -> str:
        """Queue a run of ``stages`` in ``run_dir``; returns its id. Starts it when it can.

        ``slurm_job_id``: the run was submitted to SLURM as that job
        (``backend.jobs.slurm_runs``); it is recorded, never started by the local queue.

        ``secret_env`` (e.g. ``{"HF_TOKEN": token}`` typed into the UI) reaches this run's
        stages only and is never written anywhere: the run's supervisor starts now and holds
        it in memory while the run waits in the queue. Such a run cannot survive a machine
        restart before it starts (it is then marked failed, asking to submit it again).
        """
        problems = self._secret_problems(secret_env)
        if not stages:
            problems.append("stages: a run needs at least one stage (got none)")
        seen: set[str] = set()
        for i, st in enumerate(stages):
            if not STAGE_NAME.match(str(st.name)):
                problems.append(f"stages[{i}].name: letters, digits, _ . - only (got "
                                f"{st.name!r})")
            elif st.name in seen or st.name == "supervisor":
                problems.append(f"stages[{i}].name: must be unique and not 'supervisor' "
                                f"(got {st.name!r})")
            seen.add(st.name)
            if not st.argv or not all(isinstance(a, str) for a in st.argv):
                problems.append(f"stages[{i}].argv: a non-empty list of strings (got "
                                f"{st.argv!r})")
            secrets_found = sorted(k for k in (st.env or {}) if SECRET_KEY.search(k))
            if secrets_found:
                problems.append(f"stages[{i}].env: secrets are never stored in the history "
                                f"(got {', '.join(secrets_found)}; allowed: the server's "
                                f"environment, or secret_env for this run alone)")
        try:
            gpus = normalize_gpu_ids(gpu_ids)
        except ValueError as e:
            problems.append(str(e))
        if problems:
            raise RunnerError("; ".join(problems))
        run_dir = Path(run_dir).expanduser().resolve()
        refusal = disk_refusal(run_dir, self.min_free_disk_bytes)
        if refusal:
            raise RunnerError(refusal)
        run_id = run_id or new_run_id()
        added = runner_env(gpus, run_id)
        files = RunDir(run_dir)
        files.logs.mkdir(parents=True, exist_ok=True)
        now = time.time()
        conn = self._db()
        try:
            with transaction(conn):
                clash = conn.execute("SELECT id FROM runs WHERE run_dir = ? OR id = ?",
                                     (str(run_dir), run_id)).fetchone()
                if clash:
                    raise RunnerError(f"run_dir: already used by run {clash['id']} (got "
                                      f"{run_dir}; allowed a new folder per run)")
                seq = conn.execute("SELECT COALESCE(MAX(seq), 0) + 1 FROM runs").fetchone()[0]
                conn.execute(
                    "INSERT INTO runs(id, seq, name, owner, status, gpu_ids, created_at, "
                    "run_dir, config_yaml, stop_grace_s, slurm_job_id) "
                    "VALUES(?,?,?,?,?,?,?,?,?,?,?)",
                    (run_id, seq, name, owner, "queued", gpus, now, str(run_dir), config_yaml,
                     self.stop_grace_s, slurm_job_id))
                for i, st in enumerate(stages):
                    conn.execute(
                        "INSERT INTO stages(run_id, idx, name, argv, env, status, log_path) "
                        "VALUES(?,?,?,?,?,?,?)",
                        (run_id, i, st.name, json.dumps(list(st.argv)),
                         json.dumps({**(st.env or {}), **added}), "queued",
                         str(files.log(st.name))))
                if secret_env:
                    self._spawn_waiter(conn, run_id, run_dir, secret_env)
        finally:
            conn.close()
        if not secret_env:
            self._start_ready()
        return run_id

    def submit(self, cfg: "RunConfig", owner: str | None = None, name: str | None = None,
               secret_env: dict[str, str] | None = None) -> str:
        """Plan ``cfg`` into a new run folder under ``{workspace}/runs/<id>`` and queue it
        (``secret_env``: see ``submit_stages``)."""
        problems = self._secret_problems(secret_env)
        if problems:
            raise RunnerError("; ".join(problems))
        refusal = disk_refusal(self.workspace, self.min_free_disk_bytes)
        if refusal:
            raise RunnerError(refusal)
        if getattr(cfg, "executor", "local") != "local":  # backend.jobs.slurm_runs does
            raise RunnerError(Msg("slurm.local_runner", executor=cfg.executor))
        check_before_start(cfg)

        run_id = new_run_id()
        run_dir = RunDir.new(self.workspace, run_id).run_dir
        run_dir.mkdir(parents=True)
        try:
            stages = plan_run(cfg, run_dir)
            yaml_file = RunDir(run_dir).run_yaml
            if yaml_file.exists():
                config_yaml = yaml_file.read_text(encoding="utf-8")
            else:
                import yaml

                config_yaml = yaml.safe_dump(cfg.model_dump(mode="json"), sort_keys=False)
            return self.submit_stages(
                stages, run_dir, config_yaml, owner=owner,
                name=name or getattr(cfg, "run_name", None) or None,
                gpu_ids=getattr(cfg, "gpu_ids", "all"), run_id=run_id, secret_env=secret_env)
        except BaseException:
            conn = self._db()
            try:
                known = conn.execute("SELECT 1 FROM runs WHERE id = ?", (run_id,)).fetchone()
            finally:
                conn.close()
            if not known:
                shutil.rmtree(run_dir, ignore_errors=True)
            raise

    # ------------------------------------------------------------------ stop
    def stop(self, run_id: str, wait: bool = False, reason: str = STOPPED_ON_REQUEST) -> None:
        """Stop a run: a queued run is just marked stopped; a running one gets SIGTERM (all its
        process groups), the run's grace period to save its state, then SIGKILL. Its supervisor
        does that (told by SIGUSR1); for a stage adopted after its supervisor died, this
        process does (``_settle``, in a thread of its own unless ``wait``).

        With ``wait`` this returns once the run is no longer running.
        """
        conn = self._db()
        try:
            with transaction(conn):
                run = self._row(conn, run_id)
                if run["status"] == "queued":
                    now = time.time()
                    note = Msg("note.before_start", reason=reason)
                    conn.execute(
                        "UPDATE runs SET status = 'stopped', ended_at = ?, stop_requested = 1, "
                        "stop_requested_at = ?, stop_reason = ?, note = ?, stop_reason_msg = ?, "
                        "note_msg = ? WHERE id = ?",
                        (now, now, reason, note, msg_json(reason), msg_json(note), run_id))
                    conn.execute("UPDATE stages SET status = 'skipped' "
                                 "WHERE run_id = ? AND status = 'queued'", (run_id,))
                    return
                if run["status"] != "running":
                    return
                conn.execute(
                    "UPDATE runs SET stop_requested = 1, stop_requested_at = ?, "
                    "stop_reason_msg = CASE WHEN stop_reason IS NULL THEN ? "
                    "ELSE stop_reason_msg END, stop_reason = COALESCE(stop_reason, ?) "
                    "WHERE id = ?",
                    (time.time(), msg_json(reason), reason, run_id))
            run = self._row(conn, run_id)
        finally:
            conn.close()
        if process_alive(run["supervisor_pid"], run["supervisor_start"]):
            try:
                os.kill(run["supervisor_pid"], signal.SIGUSR1)  # "look at the history now"
            except ProcessLookupError:
                pass
        else:
            self._recover(run_id, wait=wait)
        if wait:
            self.wait(run_id, timeout=float(run["stop_grace_s"]) + 120.0)

    def wait(self, run_id: str, timeout: float | None = None, poll_s: float = 0.2) -> dict:
        """Block until the run has ended (any terminal status); returns ``get_run``.

        A running run whose supervisor is gone is settled from here too (``_settle``), so
        the end of an adopted stage is seen without the watcher."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            run = self.get_run(run_id)
            if run["status"] in TERMINAL:
                return run
            if run["status"] == "running" and not process_alive(run["supervisor_pid"],
                                                                run["supervisor_start"]):
                self._recover(run_id, wait=True)
            if deadline is not None and time.monotonic() > deadline:
                raise TimeoutError(f"run {run_id} is still {run['status']} after {timeout:g} s")
            time.sleep(poll_s)

    # ------------------------------------------------------------------ reattach
    def reattach(self, wait: bool = False) -> None:
        """Find running runs again (a restarted UI, the watcher): a run whose supervisor
        process is gone (checked by pid and process start time) has its live stage adopted,
        or is settled from its stage's files once that stage is over (see ``_settle``; in a
        thread of its own unless ``wait``). Then start whatever queued runs can start. Reads
        only, when nothing needs doing (an adopted stage that still runs included)."""
        conn = self._db()
        try:
            running = conn.execute("SELECT * FROM runs WHERE status = 'running' "
                                   "AND slurm_job_id IS NULL").fetchall()
        finally:
            conn.close()
        for run in running:
            if not process_alive(run["supervisor_pid"], run["supervisor_start"]):
                self._recover(run["id"], wait=wait)
        self._fail_lost_waiters()
        if self._queue_waits():
            self._start_ready()

    def _queue_waits(self) -> bool:
        conn = self._db()
        try:
            return conn.execute("SELECT 1 FROM runs WHERE status = 'queued' LIMIT 1"
                                ).fetchone() is not None
        finally:
            conn.close()

    # ------------------------------------------------------------------ the watcher
    def watch(self, every_s: float = WATCH_EVERY_S) -> "Runner":
        """Notice vanished supervisors from this process, with no browser open: a thread
        calls ``reattach`` every ``every_s`` seconds until ``close()``. The app's server
        starts it (``python -m webui``, ``launch.py``); returns the runner."""
        if every_s <= 0:
            raise ValueError(f"every_s: must be > 0 (got {every_s})")
        with self._lock:
            if self._watcher is not None and self._watcher.is_alive():
                return self
            self._closing.clear()
            self._watcher = threading.Thread(target=self._watch_loop, args=(float(every_s),),
                                             daemon=True, name="zerolora-run-watcher")
            self._watcher.start()
        return self

    def _watch_loop(self, every_s: float) -> None:
        said: set[str] = set()
        while not self._closing.wait(every_s):
            try:
                self.reattach(wait=True)  # settled in this thread: close() joins it all
            except Exception as e:  # noqa: BLE001 - the watcher outlives a failed look
                text = f"{type(e).__name__}: {e}"
                if text not in said:  # once per distinct problem, not every few seconds
                    said.add(text)
                    print(f"zerolora: the run watcher could not check the runs: {text}",
                          file=sys.stderr, flush=True)

    def close(self, timeout: float = 60.0) -> None:
        """Stop the watcher (waits for a recovery under way, up to ``timeout`` seconds).
        Runs and their supervisors go on: they never depend on this process."""
        self._closing.set()
        watcher = self._watcher
        if watcher is not None and watcher is not threading.current_thread():
            watcher.join(timeout)
        self._watcher = None

    def _fail_lost_waiters(self) -> None:
        """Queued runs with secrets whose waiting supervisor is gone cannot start any more."""
        conn = self._db()
        try:
            waiting = conn.execute("SELECT waiter_pid, waiter_start FROM runs WHERE status = "
                                   "'queued' AND secret_keys IS NOT NULL").fetchall()
            if all(process_alive(r["waiter_pid"], r["waiter_start"]) for r in waiting):
                return  # the usual case: no write at all
            with transaction(conn):
                for run in conn.execute("SELECT * FROM runs WHERE status = 'queued' AND "
                                        "secret_keys IS NOT NULL").fetchall():
                    if process_alive(run["waiter_pid"], run["waiter_start"]):
                        continue
                    why = Msg("note.secrets_lost", keys=json.loads(run["secret_keys"]),
                              pid=run["waiter_pid"])
                    conn.execute(
                        "UPDATE runs SET status = 'failed', ended_at = ?, failure_reason = ?, "
                        "failure_reason_msg = ? WHERE id = ?",
                        (time.time(), why, msg_json(why), run["id"]))
                    conn.execute("UPDATE stages SET status = 'skipped' WHERE run_id = ?",
                                 (run["id"],))
        finally:
            conn.close()

    def _recover(self, run_id: str, wait: bool) -> None:
        """A running run whose supervisor is gone: adopt its live stage, or record how it
        ended (``_settle``). One settle per run at a time in this process; a call while one
        is under way makes it look once more when done (a stop must not wait a tick)."""
        with self._lock:
            if run_id in self._recovering:
                self._again.add(run_id)
                return
            self._recovering.add(run_id)
        if wait:
            self._recover_now(run_id)
        else:
            threading.Thread(target=self._recover_now, args=(run_id,), daemon=True,
                             name=f"recover-{run_id}").start()

    def _recover_now(self, run_id: str) -> None:
        try:
            while True:
                with self._recovery_lock():
                    self._settle(run_id)
                with self._lock:
                    if run_id not in self._again:
                        break
                    self._again.discard(run_id)
        finally:
            with self._lock:
                self._recovering.discard(run_id)
                self._again.discard(run_id)

    @contextmanager
    def _recovery_lock(self) -> Iterator[None]:
        """One recovery at a time across every process on this workspace (the app's watcher,
        a restarted app, a script's Runner): a run is settled once, and the stage of a run
        one recovery re-queued is never taken for another's leftovers."""
        try:
            import fcntl
        except ImportError:  # not Linux/macOS: the in-process guard only
            yield
            return
        with open(self.workspace / RECOVER_LOCK, "a") as f:
            fcntl.flock(f, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(f, fcntl.LOCK_UN)

    def _settle(self, run_id: str) -> None:
        """A running run whose supervisor is gone: adopt its stage while it runs, else record
        what its supervisor would have.

        The stage leader still alive (pid and start time) and no stop requested: the stage
        is adopted (``_adopt``) and left alone; the next look checks it again. A stop
        request: its processes are stopped (SIGTERM, grace, SIGKILL) and the run is stopped.
        A leader that is over: what it left behind is stopped (as the supervisor does), then
        its exit status, gone with the supervisor, is read from the stage's own word, the
        last ``end`` event of this attempt in the progress file: ``end{succeeded}`` -> the
        stage succeeded and the run is re-queued for its next stage (a new supervisor claims
        it) or succeeds; ``end{stopped}`` or a stop request -> stopped; anything else (no
        ``end``, ``failed``) -> failed, with the reason. A run with secrets of its own cannot
        go on (they lived in that process).
        """
        conn = self._db()
        try:
            run = self._row(conn, run_id)
            stage = conn.execute("SELECT * FROM stages WHERE run_id = ? AND status = "
                                 "'running' ORDER BY idx LIMIT 1", (run_id,)).fetchone()
        finally:
            conn.close()
        if run["status"] != "running" or run["slurm_job_id"] or process_alive(
                run["supervisor_pid"], run["supervisor_start"]):
            return  # (a SLURM job is followed by backend.jobs.slurm_runs)
        sup = Msg("note.supervisor", pid=run["supervisor_pid"])
        leader = stage is not None and process_alive(stage["pid"], stage["proc_start"])
        if leader and not run["stop_requested"]:
            self._adopt(run, stage, sup)
            return
        log = Path(stage["log_path"]) if stage is not None else \
            RunDir(Path(run["run_dir"])).supervisor_log

        def note(message: str) -> None:
            self._log_note(log, message)

        killed, left = self._stop_orphans(run, stage, leader, sup, note)
        end = None
        if stage is not None:
            end = last_end_event(RunDir(Path(run["run_dir"])).progress, stage["name"],
                                 since=stage["started_at"])
        now = time.time()
        settled = None
        conn = self._db()
        try:
            with transaction(conn):
                fresh = self._row(conn, run_id)
                if fresh["status"] != "running" or fresh["supervisor_pid"] != \
                        run["supervisor_pid"]:
                    return  # it finished or was picked up meanwhile
                stopped = bool(fresh["stop_requested"])
                if stage is not None:
                    st_status, reason = self._stage_outcome(
                        stage, end, killed, left, stopped, sup, float(run["stop_grace_s"]),
                        fresh["config_yaml"])
                    conn.execute(
                        "UPDATE stages SET status = ?, ended_at = ?, note = ?, note_msg = ? "
                        "WHERE run_id = ? AND idx = ?",
                        (st_status, now, reason, msg_json(reason), run_id, stage["idx"]))
                    settled = st_status
                stages = conn.execute("SELECT name, status, note, note_msg FROM stages "
                                      "WHERE run_id = ? ORDER BY idx", (run_id,)).fetchall()
                if stage is None:  # gone between two stages: the history has them all
                    ended = [x for x in stages if x["status"] in ("failed", "stopped")]
                    st_status = ended[-1]["status"] if ended else "succeeded"
                    reason = (read_msg(ended[-1]["note_msg"], ended[-1]["note"]) or Msg(
                        "note.stage_status", stage=ended[-1]["name"],
                        status=ended[-1]["status"])) if ended else None
                todo = [x["name"] for x in stages if x["status"] == "queued"]
                status, failure, note_text = self._run_outcome(st_status, reason, stopped,
                                                               todo, fresh, sup)
                if status is None:
                    # Its next stage: a new supervisor claims the run (earliest in queue).
                    conn.execute(
                        "UPDATE runs SET status = 'queued', supervisor_pid = NULL, "
                        "supervisor_start = NULL, launch_requested_at = NULL WHERE id = ?",
                        (run_id,))
                else:
                    conn.execute("UPDATE stages SET status = 'skipped' "
                                 "WHERE run_id = ? AND status = 'queued'", (run_id,))
                    conn.execute(
                        "UPDATE runs SET status = ?, ended_at = ?, failure_reason = ?, "
                        "note = ?, failure_reason_msg = ?, note_msg = ?, "
                        "launch_requested_at = NULL WHERE id = ?",
                        (status, now, failure, note_text, msg_json(failure),
                         msg_json(note_text), run_id))
        finally:
            conn.close()
        if settled is not None:
            note(f"stage '{stage['name']}' {settled} (recorded by the server: {sup} is gone, "
                 f"and the stage's exit code with it)")
        self._start_ready()

    @staticmethod
    def _stop_orphans(run, stage, leader: bool, sup: str,
                      note: Callable[[str], None]) -> tuple[bool | None, bool | None]:
        """Stop the processes of a run whose supervisor is gone: a verified stage leader
        whose stop was requested, else whatever the stage left behind. (killed, left) as
        ``_stage_outcome`` takes them (None: nothing of that kind was stopped)."""
        grace = float(run["stop_grace_s"])
        # The run's processes: the stage leader's group (only for a verified leader: a group
        # id cannot be reused while its leader lives) and every process marked with the run.
        tree = ProcessTree(stage["pgid"] if leader else None,
                           stage["pid"] if leader else None, run_id=run["id"])
        if leader:  # a stop request, and no supervisor to carry it out
            note(f"stop requested; {sup} is gone, so the server stops the stage")
            return tree.terminate(grace, note), None
        leftovers = tree.alive_groups(tree.groups())
        if not leftovers:
            return None, None
        what = f"stage '{stage['name']}'" if stage is not None else "the run"
        note(f"{what} left processes behind in group(s) {sorted(leftovers)}; "
             f"stopping them")
        return None, tree.terminate(min(grace, LEFTOVER_GRACE_S), note)

    @staticmethod
    def _run_outcome(st_status: str, reason: str | None, stopped: bool, todo: list[str],
                     fresh, sup: Msg) -> tuple[str | None, Msg | None, Msg | None]:
        """(status, failure_reason, note) of a run whose supervisor is gone, once its stage
        is settled as ``st_status`` (``reason``: its note); status None: its next stage
        (``todo[0]``) goes on under a new supervisor."""
        if st_status == "succeeded" and not stopped:
            if not todo:
                return "succeeded", None, None
            if fresh["secret_keys"]:
                return "failed", Msg("note.secrets_gone", sup=sup,
                                     keys=json.loads(fresh["secret_keys"]), stage=todo[0]), None
            return None, None, None
        status = "stopped" if stopped or st_status == "stopped" else "failed"
        if st_status == "succeeded":  # stopped after its stage had finished
            reason = None
        elif reason is None:
            reason = Msg("note.supervisor_gone", sup=sup)
        failure = reason if status == "failed" else None
        stop_reason = read_msg(fresh["stop_reason_msg"], fresh["stop_reason"])
        note_text = joined(stop_reason or Msg("status.stopped"), reason) \
            if status == "stopped" else None
        return status, failure, note_text

    def _adopt(self, run, stage, sup: str) -> None:
        """The stage of a run whose supervisor is gone still runs: let it go on. Recorded
        once (``adopted_at``, a stage note, a line in its log), whichever process looks
        first (under the recovery lock, so never twice); nothing else changes: the run stays
        ``running`` and keeps its GPUs, and each later look checks the stage again."""
        if stage["adopted_at"] is not None:
            return
        text = Msg("note.adopted", sup=sup)
        conn = self._db()
        try:
            with transaction(conn):
                done = conn.execute(
                    "UPDATE stages SET adopted_at = ?, note = ?, note_msg = ? "
                    "WHERE run_id = ? AND idx = ? "
                    "AND status = 'running' AND adopted_at IS NULL AND pid = ? AND EXISTS "
                    "(SELECT 1 FROM runs WHERE id = ? AND status = 'running' AND "
                    "supervisor_pid = ?)",
                    (time.time(), text, msg_json(text), run["id"], stage["idx"],
                     stage["pid"], run["id"],
                     run["supervisor_pid"])).rowcount
        finally:
            conn.close()
        if done:
            self._log_note(Path(stage["log_path"]),
                           f"{sup} is gone; stage '{stage['name']}' (pid {stage['pid']}) goes "
                           f"on, adopted by the server (pid {os.getpid()})")

    @staticmethod
    def _log_note(path: Path, message: str) -> None:
        """A runner line in a stage's log (as the supervisor writes them)."""
        try:
            with open(path, "a", encoding="utf-8") as f:
                f.write(f"{LOG_PREFIX} {message}\n")
        except OSError:
            pass

    @staticmethod
    def _stage_outcome(stage, end: dict | None, killed: bool | None, left: bool | None,
                       stopped: bool, sup: Msg, grace: float,
                       config_yaml: str | None) -> tuple[str, Msg]:
        """(status, note) of a stage whose supervisor is gone, from its last ``end`` event
        of this attempt; ``killed``: whether stopping its live leader on request needed
        SIGKILL (None: it was over already); ``left``: whether processes it left behind had
        to be stopped (None: none were left); ``stopped``: whether a stop was requested."""
        name = stage["name"]
        log = RunDir.log_relpath(name)
        said = (end or {}).get("status")
        if said == "succeeded":
            return "succeeded", Msg("note.said_succeeded", sup=sup)
        if killed is not None:
            return "stopped", (Msg("note.server_stopped_killed", sup=sup, grace=grace)
                               if killed else Msg("note.server_stopped", sup=sup))
        status = "stopped" if stopped or said == "stopped" else "failed"
        after = Msg("note.left_stopped") if left is not None else ""
        if said in ("failed", "stopped"):
            why = end_reason(end)
            if said == "failed":
                found = diagnosis.diagnose(None, read_tail(stage["log_path"], 64 * 1024),
                                           end_reason=why, config_yaml=config_yaml,
                                           stage=name)
                why = found[0].title if found else why
            return status, Msg("note.stage_said", stage=name, said=said,
                               why=why or Msg("note.no_reason"), sup=sup, log=log, after=after)
        if stage["adopted_at"] is not None:
            return status, Msg("note.no_end_event", stage=name, sup=sup, log=log, after=after)
        return status, Msg("note.gone_while_running", sup=sup, stage=name, log=log,
                           after=after)

    # ------------------------------------------------------------------ resume / delete
    def resume(self, run_id: str, secret_env: dict[str, str] | None = None) -> str:
        """Re-queue a stopped or failed run (same id) from its first unfinished stage; the
        train stage continues from ``<run_dir>/output/state`` (``--resume_from``).
        ``secret_env``: as for ``submit_stages`` (secrets of the first attempt are gone)."""
        problems = self._secret_problems(secret_env)
        if problems:
            raise RunnerError("; ".join(problems))
        conn = self._db()
        try:
            with transaction(conn):
                run = self._row(conn, run_id)
                if run["status"] not in ("stopped", "failed"):
                    raise RunnerError(Msg("note.cannot_resume", run_id=run_id,
                                          status=run["status"]))
                stages = conn.execute("SELECT * FROM stages WHERE run_id = ? ORDER BY idx",
                                      (run_id,)).fetchall()
                todo = [s for s in stages if s["status"] != "succeeded"]
                if not todo:
                    raise RunnerError(Msg("note.nothing_to_resume", run_id=run_id))
                first = todo[0]
                if first["name"] == "train":
                    files = RunDir(Path(run["run_dir"]))
                    state = files.state
                    if not files.has_state():
                        raise RunnerError(Msg("note.no_saved_state", run_id=run_id,
                                              state=str(state)))
                    conn.execute("UPDATE stages SET argv = ? WHERE run_id = ? AND idx = ?",
                                 (json.dumps(with_resume_from(json.loads(first["argv"]), state)),
                                  run_id, first["idx"]))
                conn.execute(
                    "INSERT OR REPLACE INTO attempts(run_id, attempt, status, started_at, "
                    "ended_at, failure_reason, note, failure_reason_msg, note_msg) "
                    "VALUES(?,?,?,?,?,?,?,?,?)",
                    (run_id, run["attempt"], run["status"], run["started_at"], run["ended_at"],
                     run["failure_reason"], run["note"], run["failure_reason_msg"],
                     run["note_msg"]))
                seq = conn.execute("SELECT COALESCE(MAX(seq), 0) + 1 FROM runs").fetchone()[0]
                conn.execute(
                    "UPDATE runs SET status = 'queued', seq = ?, attempt = attempt + 1, "
                    "started_at = NULL, ended_at = NULL, supervisor_pid = NULL, "
                    "supervisor_start = NULL, launch_requested_at = NULL, stop_requested = 0, "
                    "stop_requested_at = NULL, stop_reason = NULL, failure_reason = NULL, "
                    "note = NULL, stop_reason_msg = NULL, failure_reason_msg = NULL, "
                    "note_msg = NULL, secret_keys = NULL, waiter_pid = NULL, "
                    "waiter_start = NULL WHERE id = ?", (seq, run_id))
                conn.execute(
                    "UPDATE stages SET status = 'queued', exit_code = NULL, pid = NULL, "
                    "pgid = NULL, proc_start = NULL, started_at = NULL, ended_at = NULL, "
                    "note = NULL, note_msg = NULL, adopted_at = NULL "
                    "WHERE run_id = ? AND idx >= ?",
                    (run_id, first["idx"]))
                if secret_env:
                    self._spawn_waiter(conn, run_id, Path(run["run_dir"]), secret_env)
        finally:
            conn.close()
        if not secret_env:
            self._start_ready()
        return run_id

    def delete(self, run_id: str, remove_files: bool = True) -> None:
        """Delete a run from the history and its folder (cache, checkpoints, logs). Refused
        while it runs."""
        conn = self._db()
        try:
            with transaction(conn):
                run = self._row(conn, run_id)
                if run["status"] == "running":
                    raise RunnerError(Msg("note.delete_running", run_id=run_id))
                conn.execute("DELETE FROM runs WHERE id = ?", (run_id,))
        finally:
            conn.close()
        with self._lock:
            self._progress.pop(run_id, None)
        if remove_files:
            self._remove_run_dir(Path(run["run_dir"]))

    def _remove_run_dir(self, run_dir: Path) -> None:
        runs_root = rundir.runs_root(self.workspace).resolve()
        run_dir = run_dir.resolve()
        if run_dir.parent == runs_root:
            shutil.rmtree(run_dir, ignore_errors=True)
            return
        # A folder the caller chose: remove only what a run writes there.
        for p in RunDir(run_dir).artifacts():
            if p.is_dir() and not p.is_symlink():
                shutil.rmtree(p, ignore_errors=True)
            else:
                p.unlink(missing_ok=True)
        try:
            run_dir.rmdir()
        except OSError:
            pass

    # ------------------------------------------------------------------ reads
    def _stage_dicts(self, conn, run_id: str) -> list[dict[str, Any]]:
        out = []
        for s in conn.execute("SELECT * FROM stages WHERE run_id = ? ORDER BY idx", (run_id,)):
            out.append({
                "index": s["idx"], "name": s["name"], "argv": json.loads(s["argv"]),
                "env": json.loads(s["env"]), "status": s["status"], "exit_code": s["exit_code"],
                "pid": s["pid"], "pgid": s["pgid"], "proc_start": s["proc_start"],
                "started_at": s["started_at"], "ended_at": s["ended_at"],
                "log_path": s["log_path"], "note": read_msg(s["note_msg"], s["note"]),
                "adopted_at": s["adopted_at"]})
        return out

    @staticmethod
    def _run_dict(run, stages: list[dict[str, Any]]) -> dict[str, Any]:
        d = with_msgs(run)  # notes read back as messages
        d["stop_requested"] = bool(d["stop_requested"])
        d["secret_keys"] = json.loads(d["secret_keys"]) if d.get("secret_keys") else []
        d["stages"] = stages
        current = [s for s in stages if s["status"] == "running"]
        d["current_stage"] = current[0]["name"] if current else None
        # Its stage goes on without its supervisor, watched by the server (``_adopt``).
        d["adopted"] = bool(current and current[0]["adopted_at"] is not None)
        return d

    def list_runs(self, owner: str | None = None) -> list[dict]:
        """Runs, newest first (optionally only ``owner``'s), each with its stages."""
        conn = self._db()
        try:
            if owner is None:
                runs = conn.execute("SELECT * FROM runs ORDER BY created_at DESC, seq DESC")
            else:
                runs = conn.execute("SELECT * FROM runs WHERE owner = ? "
                                    "ORDER BY created_at DESC, seq DESC", (owner,))
            return [self._run_dict(r, self._stage_dicts(conn, r["id"])) for r in runs.fetchall()]
        finally:
            conn.close()

    def get_run(self, run_id: str) -> dict:
        """The run's history record: status, timestamps, reasons, stages (status, exit code,
        pid, log path), earlier attempts, and whether it can be resumed."""
        conn = self._db()
        try:
            run = self._row(conn, run_id)
            d = self._run_dict(run, self._stage_dicts(conn, run_id))
            d["attempts"] = [with_msgs(a) for a in conn.execute(
                "SELECT attempt, status, started_at, ended_at, failure_reason, note, "
                "failure_reason_msg, note_msg FROM attempts WHERE run_id = ? ORDER BY attempt",
                (run_id,))]
        finally:
            conn.close()
        todo = [s for s in d["stages"] if s["status"] != "succeeded"]
        d["resumable"] = bool(
            d["status"] in ("stopped", "failed") and todo
            and (todo[0]["name"] != "train" or RunDir(Path(d["run_dir"])).has_state()))
        return d

    def _log_file(self, run_id: str, stage: str) -> Path:
        conn = self._db()
        try:
            run = self._row(conn, run_id)
            if stage == "supervisor":
                return RunDir(Path(run["run_dir"])).supervisor_log
            row = conn.execute("SELECT log_path FROM stages WHERE run_id = ? AND name = ?",
                               (run_id, stage)).fetchone()
        finally:
            conn.close()
        if row is None:
            raise RunnerError(f"stage: run {run_id} has no stage {stage!r}")
        return Path(row["log_path"])

    def tail_log(self, run_id: str, stage: str, offset: int = 0,
                 max_bytes: int = 1 << 20) -> tuple[str, int]:
        """New text of a stage's log from byte ``offset``; returns (text, new_offset).

        Reads at most ``max_bytes`` (call again for more) and never splits a UTF-8 character.
        A log shorter than ``offset`` (replaced) is read from the start again.
        """
        path = self._log_file(run_id, stage)
        try:
            size = path.stat().st_size
        except FileNotFoundError:
            return "", offset
        if offset > size:
            offset = 0
        if offset == size:
            return "", offset
        with open(path, "rb") as f:
            f.seek(offset)
            data = f.read(min(size - offset, max_bytes))
        cut = utf8_cut(data)
        return data[:cut].decode("utf-8", errors="replace"), offset + cut

    def last_lines(self, run_id: str, stage: str, n: int = 40) -> list[str]:
        """The last ``n`` lines of a stage's log, read from the end (progress-bar rewrites
        collapsed, colour codes removed)."""
        path = self._log_file(run_id, stage)
        block = 8192
        data = b""
        try:
            with open(path, "rb") as f:
                f.seek(0, os.SEEK_END)
                pos = f.tell()
                while pos > 0 and data.count(b"\n") <= n and len(data) < (4 << 20):
                    step = min(block, pos)
                    pos -= step
                    f.seek(pos)
                    data = f.read(step) + data
        except FileNotFoundError:
            return []
        lines = diagnosis.clean_lines(data.decode("utf-8", errors="replace"))
        if pos > 0 and lines:
            lines = lines[1:]  # the first line may be cut
        return lines[-n:] if n > 0 else []

    def progress(self, run_id: str) -> dict:
        """Progress from the stages' JSON-lines events (read incrementally): current stage,
        step/total, loss, eta, losses [[step, loss], ...] for a plot (val_losses
        [[step, val_loss], ...]: the held-out validation loss beside it), checkpoints, samples,
        per-stage state, and seconds since the run last wrote anything."""
        run = self.get_run(run_id)
        path = RunDir(Path(run["run_dir"])).progress
        with self._lock:
            try:
                st = path.stat()
                key = (st.st_dev, st.st_ino)
            except FileNotFoundError:
                st, key = None, (0, 0)
            state = self._progress.get(run_id)
            if state is None or state.key != key or (st and st.st_size < state.offset):
                state = self._progress[run_id] = ProgressState(key)
            if st is not None:
                events, state.offset = read_events(path, state.offset)
                for ev in events:
                    state.apply(ev)
            current = run["current_stage"] or state.current
            cur = dict(state.stages.get(current, {})) if current else {}
            summary = {
                "run_id": run_id, "status": run["status"], "stage": current,
                "stage_status": cur.get("status"),
                "step": cur.get("step"), "total": cur.get("total"), "epoch": cur.get("epoch"),
                "loss": cur.get("loss"), "lr": cur.get("lr"),
                "samples_per_s": cur.get("samples_per_s"), "eta_s": cur.get("eta_s"),
                "fraction": (cur["step"] / cur["total"]) if cur.get("total") and
                cur.get("step") is not None else None,
                "losses": [list(p) for p in state.losses.get(
                    "train" if "train" in state.losses else current, [])],
                "val_loss": cur.get("val_loss"),
                "val_losses": [list(p) for p in state.val_losses.get("train", [])],
                "checkpoints": [dict(c) for c in state.checkpoints],
                "samples": [dict(s) for s in state.samples],
                "stages": {k: dict(state.stages[k]) for k in state.order},
                "last_event_time": state.last_time,
            }
        times = [t for t in (state.last_time,) if t]
        if current:
            try:
                times.append(self._log_file(run_id, current).stat().st_mtime)
            except (FileNotFoundError, RunnerError):
                pass
        summary["seconds_since_output"] = (time.time() - max(times)) if times else None
        return summary

    def failure_summary(self, run_id: str) -> dict | None:
        """For a failed run: the failed stage, exit code in words, diagnoses (what to change),
        the stage's ``end`` reason and the last log lines. None for other runs."""
        run = self.get_run(run_id)
        if run["status"] != "failed":
            return None
        failed = [s for s in run["stages"] if s["status"] == "failed"]
        if not failed:
            return {"run_id": run_id, "stage": None, "exit_code": None, "exit_text": None,
                    "headline": run["failure_reason"] or Msg("note.run_failed"),
                    "diagnoses": [],
                    "end_reason": None, "error_line": None, "last_lines": [],
                    "reason": run["failure_reason"], "log_path": None}
        stage = failed[-1]
        log_text = read_tail(stage["log_path"], 256 * 1024)
        end = last_end_event(RunDir(Path(run["run_dir"])).progress, stage["name"])
        # The stage's own lines: the launcher's closing traceback stays in the log.
        lines = diagnosis.clean_lines(diagnosis.stage_text(log_text))[-40:]
        summary = diagnosis.summarize(
            stage["name"], stage["exit_code"], log_text, end_reason=end_reason(end),
            stop_requested=run["stop_requested"], config_yaml=run["config_yaml"],
            last_lines=lines)
        summary.update(run_id=run_id, reason=run["failure_reason"], log_path=stage["log_path"])
        if stage["exit_code"] is None and stage["note"]:
            summary["headline"] = stage["note"]
        return summary

    def disk_usage(self, run_id: str) -> int:
        """Bytes the run's folder takes on disk (allocated blocks; hard links counted once)."""
        conn = self._db()
        try:
            run_dir = Path(self._row(conn, run_id)["run_dir"])
        finally:
            conn.close()
        total = 0
        seen: set[tuple[int, int]] = set()
        stack = [run_dir]
        while stack:
            d = stack.pop()
            try:
                entries = list(os.scandir(d))
            except (FileNotFoundError, NotADirectoryError, PermissionError):
                continue
            for e in entries:
                try:
                    st = e.stat(follow_symlinks=False)
                except FileNotFoundError:
                    continue
                if (st.st_dev, st.st_ino) in seen:
                    continue
                seen.add((st.st_dev, st.st_ino))
                total += getattr(st, "st_blocks", 0) * 512 or st.st_size
                if e.is_dir(follow_symlinks=False):
                    stack.append(Path(e.path))
        return total
