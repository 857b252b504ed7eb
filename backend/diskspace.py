"""Disk full, said plainly: which file could not be written and how much space there is.

A write that runs out of space fails deep inside safetensors, torch or DeepSpeed, with a
message that names neither the file nor the disk. ``writing(path, needed)`` wraps a write:
when it fails for lack of space it removes the partial file and raises ``DiskFullError``
("disk full writing <file>: 12 KiB free of 1.0 MiB on <folder>, needed about 40 KiB").
``disk_full_in(folder, e)`` is the stage's last resort for writes it did not wrap: it names
the file being written there (the newest partial file) and the space left.
"""
from __future__ import annotations

import errno
import os
import re
import shutil
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

# The words safetensors (Rust: "StorageFull", "os error 28"), torch's zip writer and the OS
# use for a full disk or an exhausted quota.
_FULL = re.compile(r"No space left on device|StorageFull|os error 28|\[Errno 28\]|"
                   r"Disk quota exceeded|PytorchStreamWriter failed writing", re.I)


class DiskFullError(RuntimeError):
    """A write failed for lack of space; the message names the file and the space."""


def is_disk_full(e: BaseException | None) -> bool:
    """Whether ``e`` (or an exception it was raised from) means the disk is full."""
    seen = set()
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        if isinstance(e, DiskFullError):
            return True
        if isinstance(e, OSError) and e.errno in (errno.ENOSPC, errno.EDQUOT):
            return True
        if _FULL.search(str(e)):
            return True
        e = e.__cause__ or e.__context__
    return False


def size_text(n: float) -> str:
    for unit in ("bytes", "KiB", "MiB", "GiB", "TiB"):
        if n < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "bytes" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TiB"  # pragma: no cover


def space_text(path: str | os.PathLike) -> str:
    """'12.0 KiB free of 1.0 MiB on <folder>' for the file system holding ``path``."""
    folder = Path(path)
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent
    try:
        usage = shutil.disk_usage(folder)
    except OSError:
        return f"free space unknown on {folder}"
    return f"{size_text(usage.free)} free of {size_text(usage.total)} on {folder}"


def disk_full(path: str | os.PathLike, needed: int | None = None) -> DiskFullError:
    need = f", needed about {size_text(needed)}" if needed else ""
    return DiskFullError(f"disk full writing {path}: {space_text(path)}{need}. Free space "
                         f"there (old runs, caches, checkpoints; fewer checkpoints with "
                         f"keep_last_n_checkpoints) or write to a larger disk.")


@contextmanager
def writing(path: str | os.PathLike, needed: int | None = None,
            partial: str | os.PathLike | None = None) -> Iterator[None]:
    """Around a write of ``path`` (``needed`` bytes when known; ``partial`` the temporary
    file it writes first, removed when the write fails for lack of space)."""
    try:
        yield
    except DiskFullError:
        raise
    except BaseException as e:
        if not is_disk_full(e):
            raise
        if partial is not None and Path(partial).is_dir():
            shutil.rmtree(partial, ignore_errors=True)
        elif partial is not None:
            try:
                Path(partial).unlink(missing_ok=True)
            except OSError:
                pass
        raise disk_full(path, needed) from e


def newest_file(folder: str | os.PathLike, within_s: float = 600.0) -> Path | None:
    """The most recently written file under ``folder`` (two levels deep), if any was written
    in the last ``within_s`` seconds: the file a failed write was writing."""
    best: tuple[float, Path] | None = None
    root = Path(folder)
    now = time.time()
    for pattern in ("*", "*/*"):
        for p in root.glob(pattern):
            try:
                if p.is_file():
                    m = p.stat().st_mtime
                    if now - m <= within_s and (best is None or m > best[0]):
                        best = (m, p)
            except OSError:
                continue
    return best[1] if best else None


def disk_full_in(folder: str | os.PathLike, e: BaseException) -> DiskFullError:
    """For a write the stage did not wrap: the file being written in ``folder`` (the newest
    one there), else the folder itself, and the space left."""
    target = newest_file(folder) or Path(folder)
    if target.name.startswith(".") and target.name.endswith(".tmp"):
        # The project's writers write ".<name>.tmp" first: name the file, free its part.
        try:
            target.unlink()
        except OSError:
            pass
        target = target.with_name(target.name[1:-len(".tmp")])
    err = disk_full(target)
    err.__cause__ = e
    return err
