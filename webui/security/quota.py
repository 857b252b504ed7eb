"""Per-user limits on disk: uploads, dataset folders, stage-1 caches; and how long the raw
uploads gradio keeps in its cache may stay.

``launch.py`` sets them (``--quota-upload-mb``, ``--quota-datasets-gb``,
``--quota-datasets``, ``--quota-cache-gb``, ``--upload-ttl-hours``); they apply to signed-in
users who are not admins (with sign-in off there is one local user and no quota).

- ``upload_limit(workspace, user)``: how many bytes one upload may unpack now -- the smaller
  of the per-upload limit and what is left of the user's dataset quota; ``dataset_problems``
  refuses a new dataset folder beyond the folder count.
- ``cache_problems(runner, user)``: a run is not started while the stage-1 caches of the
  user's runs already hold more than the cache quota.
- ``expire_uploads(workspace)``: raw uploads older than the upload TTL are removed from
  gradio's cache (``launch.py`` runs it every minute with ``expire_downloads``).
"""
from __future__ import annotations

import os
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from backend.config.errors import field_problem
from backend.core.messages import Msg
from backend.core.rundir import RunDir
from webui.security.access import is_admin, policy


@dataclass(frozen=True)
class Quotas:
    upload_bytes: int = 2 << 30        # one upload, unpacked (and gradio's upload route)
    datasets_bytes: int = 20 << 30     # everything under {workspace}/datasets/<user>/
    datasets_count: int = 100          # dataset folders under it
    cache_bytes: int = 100 << 30       # the stage-1 caches of the user's runs
    upload_ttl_s: float = 24 * 3600.0  # raw uploads in gradio's cache


_quotas = Quotas()


def configure_quotas(**values: Any) -> Quotas:
    """Set the process-wide quotas (``launch.py``); unnamed ones keep their defaults."""
    global _quotas
    _quotas = Quotas(**values)
    return _quotas


def quotas() -> Quotas:
    return _quotas


def limited(user: str | None) -> bool:
    """Whether quotas apply to ``user``: signed in and not an admin."""
    return policy().auth_enabled and not is_admin(user)


def folder_bytes(folder: str | os.PathLike, limit: int | None = None) -> int:
    """Bytes of the regular files under ``folder`` (links not followed); stops counting
    past ``limit``."""
    total = 0
    for root, dirs, files in os.walk(folder, followlinks=False):
        for name in files:
            try:
                st = os.lstat(os.path.join(root, name))
            except OSError:
                continue
            total += st.st_size if not os.path.islink(os.path.join(root, name)) else 0
            if limit is not None and total > limit:
                return total
    return total


def _gib(n: float) -> str:
    return f"{n / (1 << 30):.2f} GiB" if n >= 1 << 30 else f"{n / (1 << 20):.1f} MiB"


def upload_limit(user_root: Path, user: str | None) -> int | None:
    """Bytes one upload into ``user_root`` (the user's dataset folder) may unpack now;
    None: no quota."""
    if not limited(user):
        return None
    q = _quotas
    used = folder_bytes(user_root, q.datasets_bytes) if user_root.is_dir() else 0
    return max(0, min(q.upload_bytes, q.datasets_bytes - used))


def dataset_problems(user_root: Path, user: str | None) -> list[Msg]:
    """A new dataset folder beyond the user's folder count or disk quota."""
    if not limited(user):
        return []
    q = _quotas
    count = sum(1 for p in user_root.iterdir() if p.is_dir()) if user_root.is_dir() else 0
    if count >= q.datasets_count:
        return [field_problem("name", Msg("config.quota.dataset_count", count=count,
                                          limit=q.datasets_count))]
    if upload_limit(user_root, user) == 0:
        return [field_problem("files", Msg("config.quota.dataset_bytes",
                                           limit=_gib(q.datasets_bytes)))]
    return []


def cache_problems(runner: Any, user: str | None) -> list[Msg]:
    """A run of ``user`` is not started while their runs' stage-1 caches exceed the quota."""
    if runner is None or not limited(user):
        return []
    q = _quotas
    total = 0
    try:
        runs = runner.list_runs(owner=user)
    except Exception:  # noqa: BLE001 - no registry: nothing to count
        return []
    for run in runs:
        cache = RunDir(run.get("run_dir") or "").cache
        if run.get("owner") == user and cache.is_dir() and not cache.is_symlink():
            total += folder_bytes(cache, q.cache_bytes)
            if total > q.cache_bytes:
                return [field_problem("cache", Msg("config.quota.cache_bytes", total=_gib(total),
                                                   limit=_gib(q.cache_bytes)))]
    return []


def expire_uploads(cache_dir: str | os.PathLike, keep: str | os.PathLike | None = None,
                   now: float | None = None) -> int:
    """Remove raw uploads (gradio's ``<cache>/<hash>/<file>`` folders) older than the
    upload TTL, except ``keep`` (the served downloads); returns how many went."""
    root = Path(cache_dir)
    if not root.is_dir() or root.is_symlink():
        return 0
    now = now or time.time()
    keep_real = os.path.realpath(keep) if keep else None
    removed = 0
    for entry in root.iterdir():
        if keep_real and os.path.realpath(entry) == keep_real:
            continue
        try:
            old = now - entry.lstat().st_mtime > _quotas.upload_ttl_s
        except OSError:
            continue
        if old:
            if entry.is_dir() and not entry.is_symlink():
                shutil.rmtree(entry, ignore_errors=True)
            else:
                entry.unlink(missing_ok=True)
            removed += 1
    return removed
