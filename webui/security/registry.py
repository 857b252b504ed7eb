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

from backend.core import rundir
from backend.core.messages import Msg
from backend.core.readgate import inside as _inside
from webui.security.access import AccessDenied, get_run_checked

DB_NAMES = ("zerolora.sqlite", "zerolora.sqlite-wal", "zerolora.sqlite-shm",
            "zerolora.sqlite-journal")
DOWNLOADS_DIR = rundir.DOWNLOADS
SERVED_DIR = "served"          # {workspace}/downloads/served: the only launch allowed_path
SERVED_TTL_S = 3600.0


# ------------------------------------------------------------------------------- files
def _clean_relpath(relpath: str | os.PathLike) -> PurePosixPath:
    text = os.fspath(relpath)
    if not isinstance(text, str) or not text.strip():
        raise AccessDenied(Msg("access.path_empty"))
    text = text.replace("\\", "/")
    if "\x00" in text:
        raise AccessDenied(Msg("access.path_nul"))
    p = PurePosixPath(text)
    if p.is_absolute() or re.match(r"^[A-Za-z]:", text) or text.startswith("~"):
        raise AccessDenied(Msg("access.path_absolute", got=text))
    if any(part == ".." for part in p.parts):
        raise AccessDenied(Msg("access.path_dotdot", got=text))
    return p


def _run_folder(runner: Any, run: dict) -> tuple[Path, Path]:
    """(workspace, run folder), both resolved; refused when the folder is not trustworthy."""
    workspace = Path(getattr(runner, "workspace")).resolve()
    run_dir_raw = Path(run["run_dir"])
    run_dir = run_dir_raw.resolve()
    # A run folder that is a link (e.g. swapped for one to /) is not trusted.
    runs = rundir.runs_root(workspace)
    if run_dir_raw.is_symlink() or (run_dir_raw.parent == runs and not _inside(run_dir, runs)):
        raise AccessDenied(Msg("access.run_folder_link", id=run["id"]))
    if _inside(workspace, run_dir):
        # A "run folder" that holds the whole workspace (history, other runs) is not one.
        raise AccessDenied(Msg("access.run_folder_workspace", id=run["id"]))
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
        raise AccessDenied(Msg("access.no_such_file", id=run["id"], got=str(relpath))
                           ) from None
    if not _inside(real, run_dir):
        raise AccessDenied(Msg("access.outside_run", id=run["id"], got=str(relpath)))
    db = workspace / DB_NAMES[0]
    if real.name in DB_NAMES or (db.exists() and real.exists() and os.path.samefile(real, db)):
        raise AccessDenied(Msg("access.history"))
    st = real.stat()
    if not stat.S_ISREG(st.st_mode):
        raise AccessDenied(Msg("access.not_regular", got=str(relpath)))
    return real


# The files the pages and the API read for a user besides downloads: the progress events,
# the run's config, the samples index and the stage logs.
_READS = rundir.RunDir(".")
RUN_READS = tuple(p.as_posix() for p in (_READS.progress, _READS.run_yaml,
                                         _READS.samples_index))


def check_run_reads(runner: Any, run: dict) -> None:
    """Refuse (``AccessDenied``) a run whose folder is a link, or whose progress, config,
    samples index or stage logs lead outside its folder: ``runner.progress``,
    ``runner.tail_log`` and the logs/configs zips read them by path. ``webui.context``'s
    ``Ctx.run`` and the API call this for every run they hand to a page or a script."""
    _, run_dir = _run_folder(runner, run)
    logs = rundir.RunDir(run_dir).logs
    logs_rel = logs.name
    names = [*RUN_READS, logs_rel] + ([f"{logs_rel}/{n}" for n in sorted(os.listdir(logs))]
                                      if logs.is_dir() and not logs.is_symlink() else [])
    for rel in names:
        path = run_dir / rel
        if not os.path.lexists(path):
            continue
        real = Path(os.path.realpath(path))
        if not _inside(real, run_dir) or (path.is_symlink() and rel == logs_rel):
            raise AccessDenied(Msg("access.link_out", id=run["id"], rel=rel))


def read_run_text(runner: Any, run_id: str, relpath: str, user: str | None,
                  offset: int = 0, max_bytes: int = 1 << 20,
                  admins: Iterable[str] | None = None) -> tuple[str, int]:
    """New text of a run's file (a stage log) from byte ``offset``, through
    ``registry_file``: (text, new offset). A file shorter than ``offset`` (replaced) is read
    from the start; a missing one reads as empty; a UTF-8 character is never split."""
    try:
        real = registry_file(runner, run_id, relpath, user, admins)
    except AccessDenied as e:
        if "no such file" in str(e):
            return "", offset
        raise
    with open(real, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        offset = 0 if offset > size or offset < 0 else offset
        f.seek(offset)
        data = f.read(min(size - offset, max_bytes))
    cut = len(data)
    for back in range(1, min(4, len(data)) + 1):  # a trailing incomplete character waits
        b = data[-back]
        if b & 0xC0 == 0x80:
            continue
        if b >= 0xC0 and back < (4 if b >= 0xF0 else 3 if b >= 0xE0 else 2):
            cut = len(data) - back
        break
    return data[:cut].decode("utf-8", errors="replace"), offset + cut


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
GRADIO_CACHE_DIR = ".gradio"   # {workspace}/.gradio: gradio's cache (launch.py sets it)
NOBODY = "_"                   # the served folder of the one local user (sign-in off)


def gradio_cache(workspace: str | os.PathLike) -> Path:
    """Where gradio keeps uploads and the files it serves: ``GRADIO_TEMP_DIR``, which
    ``launch.py`` sets to ``{workspace}/.gradio`` unless it was set already."""
    return Path(os.environ.get("GRADIO_TEMP_DIR") or Path(workspace) / GRADIO_CACHE_DIR)


def served_dir(workspace: str | os.PathLike) -> Path:
    """``served/`` in gradio's cache: the downloads handed out, as
    ``served/<user>/<random 128-bit folder>/<file>``, each for ``SERVED_TTL_S``. Inside the
    cache, so gradio serves them where they are (no copy under another name) and the login
    wall can tell whose each is; the rest of the workspace (history, runs, datasets) is
    never served by path."""
    return gradio_cache(workspace) / SERVED_DIR


def stage_download(src: str | os.PathLike, workspace: str | os.PathLike,
                   user: str | None = None) -> Path:
    """Hand out ``src`` (already checked by ``registry_file``) to ``user``: a hard link (or
    copy) under a fresh random folder of ``served_dir/<user>/``, which only ``user`` may
    fetch (``webui.auth.wall``) and which is removed after ``SERVED_TTL_S``."""
    from webui.auth.passwords import USER_NAME

    if user is not None and not USER_NAME.match(str(user)):
        raise AccessDenied(Msg("access.not_user_name", got=user))
    src = Path(src)
    expire_downloads(workspace)
    root = served_dir(workspace)
    root.mkdir(parents=True, exist_ok=True)
    os.chmod(root, 0o700)
    mine = root / (user or NOBODY)
    mine.mkdir(mode=0o700, exist_ok=True)
    if mine.is_symlink():
        raise AccessDenied(Msg("access.downloads_link", user=user))
    folder = mine / secrets.token_hex(16)
    folder.mkdir(mode=0o700)
    target = folder / src.name
    try:
        os.link(src, target)
    except OSError:
        shutil.copyfile(src, target)
    return target


def download_expired(folder: str | os.PathLike, now: float | None = None) -> bool:
    """Whether a handed-out download folder is older than ``SERVED_TTL_S``."""
    try:
        return (now or time.time()) - os.lstat(folder).st_mtime > SERVED_TTL_S
    except OSError:
        return True


def expire_downloads(workspace: str | os.PathLike, now: float | None = None) -> int:
    """Remove handed-out downloads older than ``SERVED_TTL_S``; returns how many. Run by
    every ``stage_download`` and every minute by ``launch.py``."""
    root = served_dir(workspace)
    removed = 0
    if not root.is_dir() or root.is_symlink():
        return 0
    for user_dir in root.iterdir():
        if user_dir.is_symlink() or not user_dir.is_dir():
            continue
        for folder in user_dir.iterdir():
            if download_expired(folder, now):
                if folder.is_dir() and not folder.is_symlink():
                    shutil.rmtree(folder, ignore_errors=True)
                else:
                    folder.unlink(missing_ok=True)
                removed += 1
    return removed
