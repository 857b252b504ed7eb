"""What every tab shares: the runner, the workspace, the form, the current run, and the one
helper that turns a request for a run's file into a path (``run_file``)."""
from __future__ import annotations

import os
import secrets
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import gradio as gr

from backend.jobs.processes import gpu_memory_text  # noqa: F401 - the Run tab's GPU lines
from backend.core import writegate
from backend.core.rundir import RunDir
from backend.jobs.runner import Runner
from webui import security
from webui.form import Form

TERMINAL = ("succeeded", "failed", "stopped")


@dataclass
class Ctx:
    runner: Runner
    workspace: Path
    models_dir: Path | None = None
    user_getter: Callable[[Any], str | None] | None = None
    form: Form | None = None
    # Components one tab creates and another drives (set in create_ui).
    c: dict[str, Any] = field(default_factory=dict)
    _reattach_at: float = 0.0
    _lock: threading.Lock = field(default_factory=threading.Lock)

    # ------------------------------------------------------------------ users
    def owner(self, request: gr.Request | None) -> str | None:
        """The signed-in user (None without sign-in: one local user sees every run)."""
        getter = self.user_getter or security.user_of
        try:
            return getter(request)
        except security.AccessDenied as e:
            raise gr.Error(str(e)) from None

    def run(self, run_id: str | None, request: gr.Request | None) -> dict | None:
        """The run's history record if it exists and this user may see it, else None."""
        if not run_id:
            return None
        try:
            run = security.get_run_checked(self.runner, str(run_id), self.owner(request))
            # Its log, progress and config files are read by path: none may lead out.
            security.check_run_reads(self.runner, run)
            return run
        except security.AccessDenied:
            return None

    def runs(self, request: gr.Request | None) -> list[dict]:
        """The runs this user may see (admins: everyone's), newest first."""
        user = self.owner(request)
        return [r for r in self.runner.list_runs(security.list_owner(user))
                if security.can_access(user, r)]

    def reattach_now_and_then(self, every_s: float = 10.0) -> None:
        """Let the runner notice vanished supervisors (a few times a minute, not every tick)."""
        with self._lock:
            if time.monotonic() - self._reattach_at < every_s:
                return
            self._reattach_at = time.monotonic()
        try:
            self.runner.reattach()
        except Exception:  # noqa: BLE001 - a failed check must not break the page
            pass

    # ------------------------------------------------------------------ files
    def downloads_dir(self, run: dict) -> Path:
        """Where zips of a run are built: inside its folder, so the registry knows them and
        deleting the run removes them."""
        return RunDir.of(run).downloads

    def serve(self, run_id: str, path: str | os.PathLike, request: gr.Request | None) -> str:
        """The one way a run's file reaches the browser (downloads, images).

        ``security.registry_file`` checks that it is a regular file inside the folder of a
        run this user may read (after resolving links); ``security.stage_download`` hands
        out a link to it under a random name in this user's folder of the served downloads
        (only they may fetch it, for an hour).
        """
        run = self.run(run_id, request)
        if run is None:
            raise gr.Error(f"run_id: no such run of yours (got {run_id!r})")
        run_dir = Path(run["run_dir"]).resolve()
        p = Path(path)
        try:
            rel = p.resolve().relative_to(run_dir) if p.is_absolute() else p
            real = security.registry_file(self.runner, run["id"], rel.as_posix(),
                                          self.owner(request))
        except (ValueError, security.AccessDenied) as e:
            raise gr.Error(f"file: not a file of run {run['id']} (got {str(path)!r})") from e
        return str(security.stage_download(real, self.workspace, self.owner(request)))


def persistent_secret(workspace: Path) -> str:
    """A random key for the browser-stored run id, kept in the workspace so a restarted
    server can still read what the browser kept (the page reattaches to its run)."""
    path = workspace / ".ui_browser_key"
    try:
        key = path.read_text(encoding="utf-8").strip()
        if len(key) >= 16:
            return key
    except FileNotFoundError:
        pass
    key = secrets.token_urlsafe(24)
    writegate.atomic_write(path, key, mode=0o600)
    return key


def human_bytes(n: float | None) -> str:
    if n is None:
        return ""
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TiB"


def human_seconds(s: float | None) -> str:
    if s is None:
        return "–"
    s = int(max(0, s))
    h, rem = divmod(s, 3600)
    m, sec = divmod(rem, 60)
    return f"{h}h {m:02d}m" if h else (f"{m}m {sec:02d}s" if m else f"{sec}s")
