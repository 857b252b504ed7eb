"""Run supervisor: one detached process per run that starts its stages one after another.

The job runner (``backend.runner.Runner``) starts it in its own process session, so a run goes
on while the UI is closed or restarting:

    python -m backend.supervisor <workspace> <run_id> [--wait]

``--wait``: the run has secrets of its own (a hub token typed into the UI); this supervisor
was started at submit time with them in its environment and waits until the queue lets it
claim the run (no other process can start that run: the secrets live only here).

What it does, top to bottom:

1. claims the run in the history (``{workspace}/zerolora.sqlite``): queued -> running, its pid
   and process start time recorded, but only when the queue allows it (at most
   ``max_running_per_gpu_set`` running runs per GPU set, earlier runs first); otherwise it exits;
2. refuses to start when the run directory's disk has less free space than the workspace's
   ``min_free_disk_bytes`` setting;
3. runs each queued stage as a subprocess (argv list, own session, cwd = repo root,
   ``PYTHONUNBUFFERED=1``, ``CUDA_VISIBLE_DEVICES`` from the run's GPU set), stdout and stderr
   appended to ``logs/<stage>.log``, and records pid, process group, start time, exit code;
4. on a stop request (the runner sets ``stop_requested`` and sends SIGUSR1; SIGTERM/SIGINT from
   the system count too) sends SIGTERM to every process group of the stage, waits up to the
   run's grace period for all of them to vanish (polling ``os.killpg(pgid, 0)``), then SIGKILLs;
5. a failed stage fails the run (its reason from ``backend.diagnose``), later stages are skipped;
6. when done, starts the queued runs that can start now, then exits.

The supervisor is a child subreaper (Linux): processes a stage leaves behind (torch elastic
starts its workers in sessions of their own) stay its descendants, so stop and clean-up reach
them even after the stage's leader has exited.

This module also holds what the runner and the supervisor share: the history schema, process
identity (pid + start time, so a reused pid is never signalled), the queue rule and the
spawning of supervisors. It imports nothing heavy, so a supervisor starts in a fraction of a
second.
"""
from __future__ import annotations

import ctypes
import json
import os
import shlex
import shutil
import signal
import sqlite3
import subprocess
import sys
import threading
import time
import traceback
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Iterator

import psutil

REPO_ROOT = Path(__file__).resolve().parents[1]
DB_NAME = "zerolora.sqlite"
SCHEMA_VERSION = 1
TERMINAL = ("succeeded", "failed", "stopped", "skipped")
LOG_PREFIX = "[zerolora]"
# Every stage process (and what it starts) carries the run id in its environment.
RUN_MARKER = "ZEROLORA_RUN_ID"
# A run's own secrets (a hub token typed into the UI) reach its waiting supervisor as
# ZEROLORA_SECRET__<NAME> in its environment, and only its stages as <NAME>; never on disk.
SECRET_PREFIX = "ZEROLORA_SECRET__"
# A stage header line; diagnosis reads the log from the last one (a resumed run appends).
STAGE_HEADER = LOG_PREFIX + " ==== stage"
DEFAULT_STOP_GRACE_S = 30.0
DEFAULT_MIN_FREE_DISK = 2 * 1024**3
# A supervisor launched this recently is still starting: do not launch a second one.
LAUNCH_PENDING_S = 30.0
# Leftover processes after a stage's leader exited get at most this long after SIGTERM.
LEFTOVER_GRACE_S = 5.0

SCHEMA = """
CREATE TABLE IF NOT EXISTS runs (
    id TEXT PRIMARY KEY,
    seq INTEGER NOT NULL,
    name TEXT,
    owner TEXT,
    status TEXT NOT NULL,
    gpu_ids TEXT NOT NULL,
    created_at REAL NOT NULL,
    started_at REAL,
    ended_at REAL,
    run_dir TEXT NOT NULL,
    config_yaml TEXT,
    supervisor_pid INTEGER,
    supervisor_start REAL,
    launch_requested_at REAL,
    secret_keys TEXT,
    waiter_pid INTEGER,
    waiter_start REAL,
    stop_grace_s REAL NOT NULL,
    stop_requested INTEGER NOT NULL DEFAULT 0,
    stop_requested_at REAL,
    stop_reason TEXT,
    failure_reason TEXT,
    note TEXT,
    attempt INTEGER NOT NULL DEFAULT 1
);
CREATE INDEX IF NOT EXISTS runs_by_status ON runs(status, seq);
CREATE TABLE IF NOT EXISTS stages (
    run_id TEXT NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
    idx INTEGER NOT NULL,
    name TEXT NOT NULL,
    argv TEXT NOT NULL,
    env TEXT NOT NULL,
    status TEXT NOT NULL,
    exit_code INTEGER,
    pid INTEGER,
    pgid INTEGER,
    proc_start REAL,
    started_at REAL,
    ended_at REAL,
    log_path TEXT NOT NULL,
    note TEXT,
    PRIMARY KEY (run_id, idx)
);
CREATE TABLE IF NOT EXISTS attempts (
    run_id TEXT NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
    attempt INTEGER NOT NULL,
    status TEXT NOT NULL,
    started_at REAL,
    ended_at REAL,
    failure_reason TEXT,
    note TEXT,
    PRIMARY KEY (run_id, attempt)
);
CREATE TABLE IF NOT EXISTS settings (
    key TEXT PRIMARY KEY,
    value TEXT NOT NULL
);
"""


# ----------------------------------------------------------------------------- history


def db_path(workspace: str | os.PathLike) -> Path:
    return Path(workspace) / DB_NAME


def connect(workspace: str | os.PathLike) -> sqlite3.Connection:
    """A connection in autocommit mode; write with ``transaction(conn)``."""
    conn = sqlite3.connect(str(db_path(workspace)), timeout=60.0, isolation_level=None)
    conn.row_factory = sqlite3.Row
    conn.execute("PRAGMA busy_timeout = 60000")
    conn.execute("PRAGMA synchronous = NORMAL")
    conn.execute("PRAGMA foreign_keys = ON")
    return conn


# Columns added after a table was first created: (table, column, declaration).
ADDED_COLUMNS = [("runs", "secret_keys", "TEXT"), ("runs", "waiter_pid", "INTEGER"),
                 ("runs", "waiter_start", "REAL")]


def init_db(workspace: str | os.PathLike) -> None:
    Path(workspace).mkdir(parents=True, exist_ok=True)
    conn = connect(workspace)
    try:
        conn.execute("PRAGMA journal_mode = WAL")
        with transaction(conn):
            for statement in SCHEMA.split(";"):
                if statement.strip():
                    conn.execute(statement)
            for table, column, decl in ADDED_COLUMNS:
                have = {r["name"] for r in conn.execute(f"PRAGMA table_info({table})")}
                if column not in have:
                    conn.execute(f"ALTER TABLE {table} ADD COLUMN {column} {decl}")
            conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
    finally:
        conn.close()


@contextmanager
def transaction(conn: sqlite3.Connection) -> Iterator[sqlite3.Connection]:
    """BEGIN IMMEDIATE ... COMMIT: read-modify-write without another writer in between."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        yield conn
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    conn.execute("COMMIT")


def get_setting(conn: sqlite3.Connection, key: str, default: Any) -> Any:
    row = conn.execute("SELECT value FROM settings WHERE key = ?", (key,)).fetchone()
    return json.loads(row["value"]) if row else default


def set_setting(conn: sqlite3.Connection, key: str, value: Any) -> None:
    conn.execute("INSERT INTO settings(key, value) VALUES(?, ?) "
                 "ON CONFLICT(key) DO UPDATE SET value = excluded.value", (key, json.dumps(value)))


# ----------------------------------------------------------------------------- processes


def process_start_time(pid: int | None) -> float | None:
    """The process's start time (clock ticks since boot from /proc, else psutil's create time);
    None when no live (non-zombie) process has this pid."""
    if not pid or pid <= 0:
        return None
    stat = Path(f"/proc/{pid}/stat")
    if Path("/proc/self/stat").exists():
        try:
            text = stat.read_text()
        except (FileNotFoundError, ProcessLookupError, PermissionError):
            return None
        # The command name is in parentheses and may hold spaces: split after the last ')'.
        fields = text[text.rfind(")") + 2:].split()
        if fields[0] in ("Z", "X"):
            return None
        return float(fields[19])  # field 22 of stat: starttime
    try:
        proc = psutil.Process(pid)
        if proc.status() == psutil.STATUS_ZOMBIE:
            return None
        return proc.create_time()
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return None


def process_alive(pid: int | None, start_time: float | None) -> bool:
    """True when ``pid`` is a live process that started at ``start_time`` (not a reused pid)."""
    if not pid or start_time is None:
        return False
    now = process_start_time(pid)
    return now is not None and now == start_time


def _live_member(pgid: int) -> bool:
    """Whether a process that is not a zombie belongs to process group ``pgid``."""
    if Path("/proc/self/stat").exists():
        for name in os.listdir("/proc"):
            if not name.isdigit():
                continue
            try:
                text = Path(f"/proc/{name}/stat").read_text()
            except OSError:
                continue
            fields = text[text.rfind(")") + 2:].split()
            if len(fields) > 2 and fields[2] == str(pgid) and fields[0] not in ("Z", "X"):
                return True
        return False
    for proc in psutil.process_iter():
        try:
            if os.getpgid(proc.pid) == pgid and proc.status() != psutil.STATUS_ZOMBIE:
                return True
        except (OSError, psutil.Error):
            continue
    return False


def group_alive(pgid: int) -> bool:
    """Whether process group ``pgid`` still has a running member.

    ``os.killpg(pgid, 0)`` answers first; it counts zombies too, so when it says yes the
    members are checked: a group of zombies whose parent has not reaped them yet (an orphan
    under an init that reaps late, or a container whose PID 1 never reaps) has ended.
    """
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    return _live_member(pgid)


def become_subreaper() -> bool:
    """Linux PR_SET_CHILD_SUBREAPER: orphaned descendants are re-parented to this process."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(36, 1, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def marked_pids(run_id: str) -> list[int]:
    """Live processes whose environment carries ``ZEROLORA_RUN_ID=<run_id>``: every process a
    stage of that run started, whatever became of its parent or session."""
    needle = f"\0{RUN_MARKER}={run_id}\0".encode()
    found = []
    if Path("/proc/self/environ").exists():
        for name in os.listdir("/proc"):
            if not name.isdigit() or int(name) == os.getpid():
                continue
            try:
                data = Path(f"/proc/{name}/environ").read_bytes()
            except OSError:
                continue
            if needle in b"\0" + data + b"\0":
                found.append(int(name))
        return found
    for proc in psutil.process_iter():
        try:
            if proc.environ().get(RUN_MARKER) == run_id:
                found.append(proc.pid)
        except psutil.Error:
            continue
    return found


class ProcessTree:
    """The processes of one stage: its leader's process group plus every group a descendant
    lives in (a launcher may start workers in sessions of their own).

    ``root`` is the process whose descendants count: the supervisor itself (a subreaper, so
    orphans stay its descendants) or, for a stage whose supervisor is gone, the stage leader.
    With ``run_id``, processes marked with that run (``ZEROLORA_RUN_ID``) count too, so a
    stage whose leader and supervisor are both gone can still be found.
    A group id that was once seen empty is never signalled again (the id could be reused).
    """

    def __init__(self, pgid: int | None, root: int | None,
                 reap: Callable[[], None] | None = None, run_id: str | None = None):
        self.pgid = pgid
        self.root = root
        self.run_id = run_id
        self.reap = reap or (lambda: None)
        self.gone: set[int] = set()
        self.own_groups = {os.getpgid(0), 0, 1}

    def groups(self) -> set[int]:
        found: set[int] = set()
        if self.pgid and self.pgid not in self.gone:
            found.add(self.pgid)
        pids: list[int] = []
        if self.root:
            try:
                pids += [c.pid for c in psutil.Process(self.root).children(recursive=True)]
            except psutil.Error:
                pass
        if self.run_id:
            pids += marked_pids(self.run_id)
        for pid in pids:
            try:
                found.add(os.getpgid(pid))
            except OSError:
                continue
        return found - self.own_groups

    def alive_groups(self, groups: set[int]) -> set[int]:
        alive = set()
        for g in groups:
            if group_alive(g):
                alive.add(g)
            else:
                self.gone.add(g)
        return alive

    def signal(self, groups: set[int], sig: int) -> None:
        for g in groups:
            if g in self.own_groups:
                continue
            try:
                os.killpg(g, sig)
            except ProcessLookupError:
                self.gone.add(g)
            except PermissionError:
                pass

    def terminate(self, grace_s: float, note: Callable[[str], None] = lambda m: None,
                  poll_s: float = 0.1) -> bool:
        """SIGTERM every group, wait up to ``grace_s`` for all of them to vanish, then SIGKILL
        what is left. Returns True when SIGKILL was needed."""
        groups = self.groups()
        self.signal(groups, signal.SIGTERM)
        note(f"SIGTERM sent to process group(s) {sorted(groups)}; waiting up to "
             f"{grace_s:g} s for them to exit")
        deadline = time.monotonic() + grace_s
        while True:
            self.reap()
            new = self.groups() - groups
            if new:
                self.signal(new, signal.SIGTERM)
                groups |= new
            alive = self.alive_groups(groups)
            if not alive:
                self.reap()  # zombies that made a group look present: ours to collect
                return False
            if time.monotonic() >= deadline:
                break
            time.sleep(poll_s)
        note(f"still running {grace_s:g} s after SIGTERM: SIGKILL to process group(s) "
             f"{sorted(alive)}")
        deadline = time.monotonic() + 30.0
        while time.monotonic() < deadline:
            groups |= self.groups()
            alive = self.alive_groups(groups)
            if not alive:
                self.reap()
                return True
            self.signal(alive, signal.SIGKILL)
            self.reap()
            time.sleep(poll_s)
        note(f"process group(s) {sorted(alive)} still present 30 s after SIGKILL (a process "
             f"stuck in the kernel, e.g. in a GPU driver call); giving up on them")
        return True


# ----------------------------------------------------------------------------- queue


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
    occupied = [r["gpu_ids"] for r in conn.execute(
        "SELECT gpu_ids FROM runs WHERE status = 'running'")]
    waiting: list[str] = []
    chosen = []
    for run in conn.execute("SELECT * FROM runs WHERE status = 'queued' ORDER BY seq"):
        gpus = run["gpu_ids"]
        busy = sum(gpu_sets_overlap(gpus, other) for other in occupied)
        blocked = any(gpu_sets_overlap(gpus, other) for other in waiting)
        if busy < max_running and not blocked:
            chosen.append(run)
            occupied.append(gpus)
        else:
            waiting.append(gpus)
    return chosen


def child_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """This process's environment plus the repo root on PYTHONPATH and unbuffered output."""
    env = dict(os.environ)
    env.update(extra or {})
    paths = [str(REPO_ROOT)] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep)
                                if p and p != str(REPO_ROOT)]
    env["PYTHONPATH"] = os.pathsep.join(paths)
    env["PYTHONUNBUFFERED"] = "1"
    bindir = str(Path(sys.executable).parent)
    path = env.get("PATH", "")
    if bindir not in path.split(os.pathsep):
        # `accelerate` and friends from this environment, even when it was never activated.
        env["PATH"] = os.pathsep.join([bindir, path]) if path else bindir
    return env


def runner_env(gpu_ids: str, run_id: str) -> dict[str, str]:
    """What the runner adds to every stage's environment (recorded in the history)."""
    env = {"PYTHONUNBUFFERED": "1", RUN_MARKER: run_id}
    if gpu_ids == "cpu":
        env["CUDA_VISIBLE_DEVICES"] = ""
    elif gpu_ids != "all":
        env["CUDA_VISIBLE_DEVICES"] = gpu_ids
    return env


def spawn_supervisor(workspace: Path, run_id: str, run_dir: Path,
                     secret_env: dict[str, str] | None = None) -> subprocess.Popen:
    """Start a run's supervisor. With ``secret_env`` it waits for its turn holding them."""
    logs = Path(run_dir) / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    env = child_env({SECRET_PREFIX + k: v for k, v in (secret_env or {}).items()})
    argv = [sys.executable, "-m", "backend.supervisor", str(workspace), run_id]
    if secret_env:
        argv.append("--wait")
    with open(logs / "supervisor.log", "ab") as log:
        return subprocess.Popen(argv, cwd=str(REPO_ROOT), env=env, stdin=subprocess.DEVNULL,
                                stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
                                close_fds=True)


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
                with transaction(conn):
                    conn.execute(
                        "UPDATE runs SET status = 'failed', ended_at = ?, failure_reason = ? "
                        "WHERE id = ? AND status = 'queued'",
                        (time.time(), f"could not start the run's supervisor: {e}", r["id"]))
                continue
            launched.append(r["id"])
            if reap_in_thread:
                threading.Thread(target=proc.wait, daemon=True,
                                 name=f"reap-supervisor-{r['id']}").start()
    finally:
        conn.close()
    return launched


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


def disk_refusal(path: str | os.PathLike, min_free: int) -> str | None:
    """A message when the disk holding ``path`` has less than ``min_free`` bytes free."""
    free = free_disk_bytes(path)
    if free >= min_free:
        return None
    return (f"not enough free disk: {human_bytes(free)} free on the disk holding {path}, "
            f"need at least {human_bytes(min_free)} (the runner's min_free_disk_bytes); "
            f"delete old runs or caches, or free space")


def read_tail(path: str | os.PathLike, max_bytes: int) -> str:
    """The last ``max_bytes`` of a file as text (never the whole file)."""
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - max_bytes))
            data = f.read()
    except FileNotFoundError:
        return ""
    return data.decode("utf-8", errors="replace")


def last_end_event(progress_file: Path, stage: str) -> dict | None:
    """The last ``end`` event of ``stage`` in the progress file (read from its last 256 KiB)."""
    text = read_tail(progress_file, 256 * 1024)
    found = None
    for line in text.splitlines():
        if '"end"' not in line:
            continue
        try:
            ev = json.loads(line)
        except json.JSONDecodeError:
            continue
        if ev.get("event") == "end" and ev.get("stage") == stage:
            found = ev
    return found


# ----------------------------------------------------------------------------- supervisor


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
                self.conn.execute(
                    "UPDATE runs SET stop_requested = 1, stop_requested_at = ?, "
                    "stop_reason = COALESCE(stop_reason, ?) WHERE id = ?",
                    (time.time(), f"the run's supervisor received {self.signal_name}",
                     self.run_id))
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
                "supervisor_pid = ?, supervisor_start = ?, failure_reason = NULL, note = NULL "
                "WHERE id = ?", (time.time(), pid, process_start_time(pid), self.run_id))
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
            self.finish("failed", f"the run's supervisor failed: {type(e).__name__}: {e}")
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
            note = run["note"]
            if status == "stopped":
                note = "; ".join(x for x in (run["stop_reason"], reason) if x) or "stopped"
            self.conn.execute(
                "UPDATE runs SET status = ?, ended_at = ?, failure_reason = ?, note = ?, "
                "launch_requested_at = NULL WHERE id = ?",
                (status, now, failure, note, self.run_id))
        print(f"{LOG_PREFIX} run {self.run_id} {status}" + (f": {reason}" if reason else ""),
              flush=True)

    # -- one stage
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

    def run_stage(self, run: sqlite3.Row, stage: sqlite3.Row) -> tuple[str, str | None]:
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
                self.proc = subprocess.Popen(
                    argv, cwd=str(REPO_ROOT), env=env, stdin=subprocess.DEVNULL, stdout=log,
                    stderr=subprocess.STDOUT, start_new_session=True, close_fds=True)
        except OSError as e:
            reason = f"stage '{name}' could not start: {e}"
            note(reason)
            with transaction(self.conn):
                self.conn.execute(
                    "UPDATE stages SET status = 'failed', exit_code = 127, started_at = ?, "
                    "ended_at = ?, note = ? WHERE run_id = ? AND idx = ?",
                    (started, time.time(), reason, self.run_id, stage["idx"]))
            return "failed", reason

        proc = self.proc
        tree = ProcessTree(proc.pid, os.getpid(), self.reap, run_id=self.run_id)
        with transaction(self.conn):
            self.conn.execute(
                "UPDATE stages SET status = 'running', pid = ?, pgid = ?, proc_start = ?, "
                "started_at = ?, ended_at = NULL, exit_code = NULL, note = NULL "
                "WHERE run_id = ? AND idx = ?",
                (proc.pid, proc.pid, process_start_time(proc.pid), started, self.run_id,
                 stage["idx"]))

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

        from backend import diagnose  # light; only needed at the end of a stage

        stage_note = None
        if stopped or (code != 0 and self.stop_requested()):
            status = "stopped"
            reason = (f"stage '{name}' did not exit within {grace:g} s of SIGTERM and was "
                      f"killed (SIGKILL); its last save may be incomplete" if killed else None)
            stage_note = reason
        elif code == 0:
            status, reason = "succeeded", None
        else:
            status = "failed"
            end = last_end_event(Path(run["run_dir"]) / "progress.jsonl", name)
            reason = diagnose.reason_line(
                name, code, read_tail(log_path, 64 * 1024),
                end_reason=(end or {}).get("reason"), config_yaml=run["config_yaml"])
            stage_note = reason
        note(f"stage '{name}' {diagnose.exit_code_text(code)}; status {status}")
        with transaction(self.conn):
            self.conn.execute(
                "UPDATE stages SET status = ?, exit_code = ?, ended_at = ?, note = ? "
                "WHERE run_id = ? AND idx = ?",
                (status, code, ended, stage_note, self.run_id, stage["idx"]))
        return status, reason


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else list(argv)
    wait = "--wait" in args
    args = [a for a in args if a != "--wait"]
    if len(args) != 2:
        print("usage: python -m backend.supervisor <workspace> <run_id> [--wait]",
              file=sys.stderr)
        return 2
    return Supervisor(args[0], args[1], wait=wait).run()


if __name__ == "__main__":
    sys.exit(main())
