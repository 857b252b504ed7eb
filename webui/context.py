"""What every tab shares: the runner, the workspace, the form, the current run, and the one
helper that turns a request for a run's file into a path (``run_file``)."""
from __future__ import annotations

import os
import secrets
import shutil
import subprocess
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import gradio as gr

from backend.runner import Runner, RunnerError
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
        if self.user_getter is not None:
            return self.user_getter(request)
        return getattr(request, "username", None) if request is not None else None

    def run(self, run_id: str | None, request: gr.Request | None) -> dict | None:
        """The run's history record if it exists and belongs to this user, else None."""
        if not run_id:
            return None
        try:
            run = self.runner.get_run(str(run_id))
        except RunnerError:
            return None
        user = self.owner(request)
        if user is not None and run.get("owner") not in (None, user):
            return None
        return run

    def runs(self, request: gr.Request | None) -> list[dict]:
        return self.runner.list_runs(self.owner(request))

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
    def downloads_dir(self, run_id: str) -> Path:
        return self.workspace / "downloads" / run_id

    def run_file(self, run_id: str, path: str | os.PathLike, request: gr.Request | None
                 ) -> Path:
        """``path`` if it is a regular file of a run this user may read, else gr.Error.

        Every file the UI hands out (downloads, images) goes through here: only files inside
        the run's folder or its downloads folder, as the registry knows them, after resolving
        links. Nothing derived from a request leaves the server otherwise.
        """
        run = self.run(run_id, request)
        if run is None:
            raise gr.Error(f"run_id: no such run (got {run_id!r})")
        roots = [Path(run["run_dir"]).resolve(), self.downloads_dir(run["id"]).resolve()]
        p = Path(path)
        if not p.is_absolute():
            p = roots[0] / p
        real = p.resolve()
        if not any(real == r or r in real.parents for r in roots) or not real.is_file():
            raise gr.Error(f"file: not a file of run {run['id']} (got {str(path)!r})")
        return real

    def serve(self, run_id: str, path: str | os.PathLike, request: gr.Request | None) -> str:
        """A run's file (checked by ``run_file``) as a path gradio will hand to the browser.

        gradio copies returned files into its cache only from the working directory or the
        temp directory; a workspace elsewhere gets a hard link (or copy) in the temp
        directory, so no launch-wide ``allowed_paths`` is needed.
        """
        real = self.run_file(run_id, path, request)
        for root in (Path.cwd().resolve(), Path(tempfile.gettempdir()).resolve()):
            if root in real.parents:
                return str(real)
        st = real.stat()
        folder = Path(tempfile.gettempdir()) / "zerolora-serve" / f"{st.st_ino}-{st.st_mtime_ns}"
        folder.mkdir(parents=True, exist_ok=True)
        target = folder / real.name
        if not target.exists():
            try:
                os.link(real, target)
            except OSError:
                shutil.copyfile(real, target)
        return str(target)


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
    workspace.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(key)
    return key


# ---------------------------------------------------------------------- GPU (lazy)
_gpu_tool: list[str | None] = []


def gpu_memory_text() -> str | None:
    """'GPU 0: 3.1 / 80.0 GiB' lines from nvidia-smi, or None where there is no GPU.

    Never imports torch: the UI process stays light; nvidia-smi is looked up once.
    """
    if not _gpu_tool:
        _gpu_tool.append(shutil.which("nvidia-smi"))
    tool = _gpu_tool[0]
    if not tool:
        return None
    try:
        out = subprocess.run(
            [tool, "--query-gpu=index,name,memory.used,memory.total,utilization.gpu",
             "--format=csv,noheader,nounits"], capture_output=True, text=True, timeout=5,
            check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    lines = []
    for row in out.strip().splitlines():
        parts = [p.strip() for p in row.split(",")]
        if len(parts) < 5:
            continue
        idx, name, used, total, util = parts[:5]
        try:
            lines.append(f"GPU {idx} ({name}): {float(used) / 1024:.1f} / "
                         f"{float(total) / 1024:.1f} GiB, {util} % busy")
        except ValueError:
            continue
    return "\n".join(lines) or None


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
