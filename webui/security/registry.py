"""The run registry's files: the only way a run's file leaves the server.

- ``registry_file(runner, run_id, relpath, user)``: a regular file inside the run's folder as
  the job registry knows it, after resolving links; never the SQLite history, never another
  user's run, never through a run folder that is itself a link.
- ``list_files``: the same files, listed.
- ``stage_download(src, workspace, user)``: a checked file handed out under a random name in
  ``served_dir`` (gradio's only ``allowed_paths`` entry), bound to ``user`` and removed when
  it expires.
"""
from __future__ import annotations

import os
import re
import secrets
import shutil
import stat
import time
from pathlib import Path, PurePosixPath
from typing import Any, Iterable

from backend.readgate import inside as _inside
from webui.security.access import AccessDenied, get_run_checked

DB_NAMES = ("zerolora.sqlite", "zerolora.sqlite-wal", "zerolora.sqlite-shm",
            "zerolora.sqlite-journal")
DOWNLOADS_DIR = "downloads"
SERVED_DIR = "served"          # {workspace}/downloads/served: the only launch allowed_path
SERVED_TTL_S = 3600.0


# ------------------------------------------------------------------------------- files
def _clean_relpath(relpath: str | os.PathLike) -> PurePosixPath:
    text = os.fspath(relpath)
    if not isinstance(text, str) or not text.strip():
        raise AccessDenied("path: empty (allowed a file inside the run's folder, e.g. "
                           "output/step-10.safetensors)")
    text = text.replace("\\", "/")
    if "\x00" in text:
        raise AccessDenied("path: not allowed (got a NUL character)")
    p = PurePosixPath(text)
    if p.is_absolute() or re.match(r"^[A-Za-z]:", text) or text.startswith("~"):
        raise AccessDenied(f"path: must be relative to the run's folder (got {text!r})")
    if any(part == ".." for part in p.parts):
        raise AccessDenied(f"path: '..' is not allowed (got {text!r})")
    return p


def _run_folder(runner: Any, run: dict) -> tuple[Path, Path]:
    """(workspace, run folder), both resolved; refused when the folder is not trustworthy."""
    workspace = Path(getattr(runner, "workspace")).resolve()
    run_dir_raw = Path(run["run_dir"])
    run_dir = run_dir_raw.resolve()
    # A run folder that is a link (e.g. swapped for one to /) is not trusted.
    if run_dir_raw.is_symlink() or (run_dir_raw.parent == workspace / "runs"
                                    and not _inside(run_dir, workspace / "runs")):
        raise AccessDenied(f"run {run['id']}: its folder is a link; refused")
    if _inside(workspace, run_dir):
        # A "run folder" that holds the whole workspace (history, other runs) is not one.
        raise AccessDenied(f"run {run['id']}: its folder holds the workspace; refused")
    return workspace, run_dir


def registry_file(runner: Any, run_id: str, relpath: str | os.PathLike, user: str | None,
                  admins: Iterable[str] | None = None) -> Path:
    """The resolved path of a regular file of run ``run_id`` that ``user`` may download.

    ``relpath`` is relative to the run's folder. Refused (``AccessDenied``): unknown runs and
    other users' runs (one message for both), absolute paths, ``..``, anything that resolves
    outside the run's folder (links included), the run folder itself escaping the workspace
    by a link, the SQLite history, folders and special files.
    """
    run = get_run_checked(runner, run_id, user, admins)
    rel = _clean_relpath(relpath)
    workspace, run_dir = _run_folder(runner, run)
    candidate = run_dir.joinpath(*rel.parts)
    try:
        real = candidate.resolve(strict=True)
    except (FileNotFoundError, NotADirectoryError, RuntimeError, OSError):
        raise AccessDenied(f"path: no such file in run {run['id']} (got {str(relpath)!r})"
                           ) from None
    if not _inside(real, run_dir):
        raise AccessDenied(f"path: outside run {run['id']}'s folder (got {str(relpath)!r})")
    db = workspace / DB_NAMES[0]
    if real.name in DB_NAMES or (db.exists() and real.exists() and os.path.samefile(real, db)):
        raise AccessDenied("path: the run history is never served")
    st = real.stat()
    if not stat.S_ISREG(st.st_mode):
        raise AccessDenied(f"path: not a regular file (got {str(relpath)!r})")
    return real


def list_files(runner: Any, run_id: str, user: str | None,
               admins: Iterable[str] | None = None, limit: int = 5000) -> list[dict]:
    """The run's files as ``{"file": run-relative path, "bytes": size}``, as
    ``registry_file`` would serve them.

    Links are not followed; the stage-1 cache and the resume state (big, internal) are left
    out of the listing but stay fetchable by name.
    """
    run = get_run_checked(runner, run_id, user, admins)
    _, run_dir = _run_folder(runner, run)
    out: list[dict] = []
    skip = {("cache",), ("output", "state")}
    for root, dirs, files in os.walk(run_dir, followlinks=False):
        rel_root = Path(root).relative_to(run_dir)
        dirs[:] = sorted(d for d in dirs
                         if tuple((rel_root / d).parts) not in skip
                         and not os.path.islink(os.path.join(root, d)))
        for name in sorted(files):
            full = Path(root) / name
            try:
                st = full.lstat()
            except FileNotFoundError:
                continue
            if not stat.S_ISREG(st.st_mode) or name in DB_NAMES:
                continue
            out.append({"file": (rel_root / name).as_posix(), "bytes": st.st_size})
            if len(out) >= limit:
                return out
    return out



# ------------------------------------------------------------------------------ serving
def served_dir(workspace: str | os.PathLike) -> Path:
    """``{workspace}/downloads/served``: gradio's only ``allowed_paths`` entry. It holds
    nothing but copies of checked files, each under a random 128-bit folder name, for an
    hour; the rest of the workspace (history, runs, datasets, other users' exports) is never
    served by path."""
    return Path(workspace) / DOWNLOADS_DIR / SERVED_DIR


def stage_download(src: str | os.PathLike, workspace: str | os.PathLike) -> Path:
    """Hand out ``src`` (already checked by ``registry_file``): a hard link (or copy) under
    a fresh random folder of ``served_dir``; older entries are removed."""
    src = Path(src)
    root = served_dir(workspace)
    root.mkdir(parents=True, exist_ok=True)
    os.chmod(root, 0o700)
    now = time.time()
    for old in root.iterdir():
        try:
            if not old.is_symlink() and old.is_dir() and \
                    now - old.stat().st_mtime > SERVED_TTL_S:
                shutil.rmtree(old, ignore_errors=True)
        except OSError:
            pass
    folder = root / secrets.token_hex(16)
    folder.mkdir(mode=0o700)
    target = folder / src.name
    try:
        os.link(src, target)
    except OSError:
        shutil.copyfile(src, target)
    return target

