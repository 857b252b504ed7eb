"""Evidence that a stage ran out of host memory, gathered by its supervisor while it runs.

A process ended by SIGKILL was not necessarily killed by the kernel's out-of-memory killer
(a person, a scheduler or a container runtime may send it too), so the supervisor looks for
evidence and the diagnosis claims "out of host memory" only with it:

- the kernel's OOM-killer mark: a ``Killed process <pid>`` / ``oom-kill ... pid=<pid>``
  record in the kernel log (``/dev/kmsg``, where this process may read it) naming one of the
  stage's processes;
- the OOM-kill counter of the memory cgroup the run lives in (cgroup v2 ``memory.events``
  ``oom_kill``, v1 ``memory.oom_control``) going up while the stage ran;
- memory use (the cgroup's, else the machine's) reaching ``NEAR_LIMIT`` of its limit.

``MemoryWatch.note()`` is one line for the stage's log: ``out of memory: <evidence>`` or
``no sign of running out of memory: <what was seen>``. Nothing heavy is imported.
"""
from __future__ import annotations

import os
import re
from pathlib import Path

import psutil

NEAR_LIMIT = 0.95
OOM_NOTE = "out of memory: "
NO_OOM_NOTE = "no sign of running out of memory: "
_KMSG_KILL = re.compile(r"Killed process (\d+)|oom-kill:.*\bpid=(\d+)")
_UNLIMITED = 1 << 60


def _cgroup_dirs() -> tuple[Path | None, Path | None]:
    """(cgroup v2 folder, cgroup v1 memory folder) of this process, where they exist."""
    v2 = v1 = None
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return None, None
    for line in lines:
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        _, controllers, path = parts
        if controllers == "" and Path("/sys/fs/cgroup/cgroup.controllers").exists():
            for cand in (Path("/sys/fs/cgroup") / path.lstrip("/"), Path("/sys/fs/cgroup")):
                if (cand / "memory.events").exists():
                    v2 = cand
                    break
        elif "memory" in controllers.split(","):
            for cand in (Path("/sys/fs/cgroup/memory") / path.lstrip("/"),
                         Path("/sys/fs/cgroup/memory")):
                if (cand / "memory.oom_control").exists():
                    v1 = cand
                    break
    return v2, v1


def _read_key(path: Path, key: str) -> int | None:
    try:
        for line in path.read_text().splitlines():
            name, _, value = line.partition(" ")
            if name == key:
                return int(value)
    except (OSError, ValueError):
        return None
    return None


def _read_int(path: Path) -> int | None:
    try:
        text = path.read_text().strip()
    except OSError:
        return None
    if text == "max":
        return _UNLIMITED
    try:
        return int(text)
    except ValueError:
        return None


def oom_kill_count() -> int | None:
    """OOM kills recorded for this process's memory cgroup (None: not readable here)."""
    v2, v1 = _cgroup_dirs()
    if v2 is not None:
        return _read_key(v2 / "memory.events", "oom_kill")
    if v1 is not None:
        return _read_key(v1 / "memory.oom_control", "oom_kill")
    return None


def memory_use() -> tuple[int, int, str]:
    """(bytes used, limit, what the limit is): the memory cgroup's when it has a limit below
    the machine's RAM, else the machine's."""
    vm = psutil.virtual_memory()
    v2, v1 = _cgroup_dirs()
    used = limit = None
    if v2 is not None:
        used, limit = _read_int(v2 / "memory.current"), _read_int(v2 / "memory.max")
    elif v1 is not None:
        used = _read_int(v1 / "memory.usage_in_bytes")
        limit = _read_int(v1 / "memory.limit_in_bytes")
    if used is not None and limit is not None and limit < vm.total:
        return used, limit, "the memory limit of this container (cgroup)"
    return vm.total - vm.available, vm.total, "the machine's RAM"


def kernel_oom_marks(pids: set[int]) -> list[str]:
    """Kernel-log records of the OOM killer ending one of ``pids`` ([] where the kernel log
    is not readable)."""
    try:
        fd = os.open("/dev/kmsg", os.O_RDONLY | os.O_NONBLOCK)
    except OSError:
        return []
    found = []
    try:
        while True:
            try:
                record = os.read(fd, 8192)
            except BlockingIOError:
                break
            except OSError:  # EPIPE: a record was overwritten while reading; go on
                continue
            if not record:
                break
            text = record.decode("utf-8", "replace").split(";", 1)[-1].strip()
            m = _KMSG_KILL.search(text)
            if m and int(m.group(1) or m.group(2)) in pids:
                found.append(text[:200])
    finally:
        os.close(fd)
    return found


def _gib(n: int) -> str:
    return f"{n / 2**30:.1f} GiB"


class MemoryWatch:
    """Started with a stage; ``sample(pids)`` while it runs; ``note()`` when it ended."""

    def __init__(self):
        self.kills_before = oom_kill_count()
        self.pids: set[int] = set()
        self.peak = 0.0
        self.peak_used = 0
        self.limit = 0
        self.limit_what = ""
        self.sample([])

    def sample(self, pids) -> None:
        self.pids |= set(pids)
        try:
            used, limit, what = memory_use()
        except (OSError, psutil.Error):
            return
        if limit and used / limit >= self.peak:
            self.peak, self.peak_used, self.limit, self.limit_what = used / limit, used, \
                limit, what

    def evidence(self) -> str | None:
        marks = kernel_oom_marks(self.pids)
        if marks:
            return f"the kernel's OOM killer ended the stage's process ({marks[-1]})"
        after = oom_kill_count()
        if self.kills_before is not None and after is not None and after > self.kills_before:
            return (f"the kernel's OOM killer ended {after - self.kills_before} process(es) "
                    f"in this run's memory group while the stage ran (cgroup oom_kill "
                    f"{self.kills_before} -> {after})")
        if self.peak >= NEAR_LIMIT:
            return (f"memory use reached {self.peak:.0%} of {self.limit_what} "
                    f"({_gib(self.peak_used)} of {_gib(self.limit)}) while the stage ran")
        return None

    def note(self) -> str:
        found = self.evidence()
        if found:
            return OOM_NOTE + found
        counter = ("no OOM kill recorded for this memory group" if self.kills_before is not None
                   else "no OOM-kill counter readable here")
        return (f"{NO_OOM_NOTE}{counter}; no OOM-killer mark for its processes in the kernel "
                f"log; memory use peaked at {self.peak:.0%} of {self.limit_what} "
                f"({_gib(self.peak_used)} of {_gib(self.limit)}, sampled every few seconds)")
