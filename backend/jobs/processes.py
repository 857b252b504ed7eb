"""Processes: the only module that starts a process, and how a run's processes are found.

- ``spawn_supervisor``: a run's detached supervisor (``python -m backend.jobs.supervisor``,
  own session, output to ``logs/supervisor.log``).
- ``start_stage``: one stage of a run (argv list, own session, cwd = repo root, output
  appended to its log). Only the supervisor calls it.
- ``gpu_query``: ``nvidia-smi``'s answer for the UI's GPU lines (the UI never starts a process).
- Process identity: pid + start time (``process_start_time``, ``process_alive``), so a reused
  pid is never signalled; ``ProcessTree`` finds every process group of a stage (a launcher may
  start workers in sessions of their own) and stops them (SIGTERM, grace, SIGKILL).
- The environment of children: ``child_env`` (repo root on PYTHONPATH, this environment's
  ``bin`` on PATH) and ``runner_env`` (the run marker and the run's GPU set).

Argument lists only, never a shell. Nothing heavy is imported: a supervisor starts in a
fraction of a second.
"""
from __future__ import annotations

import ctypes
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import IO, Callable, Sequence

import psutil

from backend.core.messages import Msg
from backend.core.rundir import RunDir

REPO_ROOT = Path(__file__).resolve().parents[2]
SUPERVISOR_MODULE = "backend.jobs.supervisor"
# Every stage process (and what it starts) carries the run id in its environment.
RUN_MARKER = "ZEROLORA_RUN_ID"
# A run's own secrets (a hub token typed into the UI) reach its waiting supervisor as
# ZEROLORA_SECRET__<NAME> in its environment, and only its stages as <NAME>; never on disk.
SECRET_PREFIX = "ZEROLORA_SECRET__"


# ----------------------------------------------------------------------------- identity


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



# ----------------------------------------------------------------------------- environment


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


# ----------------------------------------------------------------------------- starting


def spawn_supervisor(workspace: Path, run_id: str, run_dir: Path,
                     secret_env: dict[str, str] | None = None) -> subprocess.Popen:
    """Start a run's supervisor. With ``secret_env`` it waits for its turn holding them."""
    files = RunDir(Path(run_dir))
    files.logs.mkdir(parents=True, exist_ok=True)
    env = child_env({SECRET_PREFIX + k: v for k, v in (secret_env or {}).items()})
    argv = [sys.executable, "-m", SUPERVISOR_MODULE, str(workspace), run_id]
    if secret_env:
        argv.append("--wait")
    with open(files.supervisor_log, "ab") as log:
        return subprocess.Popen(argv, cwd=str(REPO_ROOT), env=env, stdin=subprocess.DEVNULL,
                                stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
                                close_fds=True)


def start_stage(argv: list[str], env: dict[str, str], log: IO[bytes]) -> subprocess.Popen:
    """Start one stage: its own session (process group = its pid), cwd = repo root, stdin
    closed, stdout and stderr into ``log``. Raises OSError when it cannot start."""
    return subprocess.Popen(
        argv, cwd=str(REPO_ROOT), env=env, stdin=subprocess.DEVNULL, stdout=log,
        stderr=subprocess.STDOUT, start_new_session=True, close_fds=True)


# ----------------------------------------------------------------------------- GPUs
_gpu_tool: list[str | None] = []


def gpu_query(fields: Sequence[str]) -> list[list[str]] | None:
    """``nvidia-smi --query-gpu=<fields>``: one row per GPU, one stripped text per field; None
    where there is no ``nvidia-smi`` or it fails. Never imports torch (the UI stays light);
    the tool is looked up once."""
    if not _gpu_tool:
        _gpu_tool.append(shutil.which("nvidia-smi"))
    tool = _gpu_tool[0]
    if not tool:
        return None
    try:
        out = subprocess.run(
            [tool, "--query-gpu=" + ",".join(fields), "--format=csv,noheader,nounits"],
            capture_output=True, text=True, timeout=5, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    return [[p.strip() for p in row.split(",")] for row in out.strip().splitlines()
            if row.strip()]


def gpu_memory_text() -> Msg | None:
    """'GPU 0 (name): 3.1 / 80.0 GiB, 5 % busy' lines (a message), or None where there is
    no GPU."""
    rows = gpu_query(["index", "name", "memory.used", "memory.total", "utilization.gpu"])
    if rows is None:
        return None
    lines = []
    for parts in rows:
        if len(parts) < 5:
            continue
        idx, name, used, total, util = parts[:5]
        try:
            lines.append(Msg("runtab.gpu_line", idx=idx, name=name, used=float(used) / 1024,
                             total=float(total) / 1024, util=util))
        except ValueError:
            continue
    return Msg("runtab.gpu_lines", lines=lines) if lines else None


def gpu_memory_totals_gb() -> list[float]:
    """Each GPU's memory in GB (1e9 bytes); empty where there is none or no answer."""
    try:
        return [float(parts[0]) * 1.048576e-3
                for parts in gpu_query(["memory.total"]) or [] if parts and parts[0]]
    except ValueError:
        return []
