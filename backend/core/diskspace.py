"""Disk full, said plainly: which file could not be written and how much space there is.

A write that runs out of space fails deep inside safetensors, torch or DeepSpeed, with a
message that names neither the file nor the disk. ``writing(path, needed)`` wraps a write:
when it fails for lack of space it removes the partial file and raises ``DiskFullError``
("disk full writing <file>: 12 KiB free of 1.0 MiB on <folder>, needed about 40 KiB").
``disk_full_in(folder, e)`` is the stage's last resort for writes it did not wrap: it names
the file being written there (the newest partial file) and the space left.

A file past the process's file-size limit (``ulimit -f``, RLIMIT_FSIZE; or a file system's
largest file) fails with EFBIG, "File too large" (os error 27): not a full disk, and said so.
``is_file_too_large(e)`` recognises it, ``writing`` raises ``FileSizeLimitError`` for it and
``file_too_large_in(folder, e)`` is the stage's last resort, like the disk-full ones:
"file size limit reached writing <file>: this process may write files of at most 4.0 KiB
(ulimit -f / RLIMIT_FSIZE) ...".
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

from backend.core import writegate

# The words safetensors (Rust: "StorageFull", "os error 28"), torch's zip writer and the OS
# use for a full disk or an exhausted quota.
_FULL = re.compile(r"No space left on device|StorageFull|os error 28|\[Errno 28\]|"
                   r"Disk quota exceeded|PytorchStreamWriter failed writing", re.I)


# The words for a file past a size limit: the OS's (EFBIG), safetensors' (Rust: "File too
# large (os error 27)", "FileTooLarge").
_TOO_LARGE = re.compile(r"File too large|FileTooLarge|os error 27\b|\[Errno 27\]|\bEFBIG\b",
                        re.I)


class DiskFullError(RuntimeError):
    """A write failed for lack of space; the message names the file and the space."""


class FileSizeLimitError(RuntimeError):
    """A write failed because the file would pass the largest file this process may write
    (RLIMIT_FSIZE, ``ulimit -f``) or the file system holds; the message names the file and
    the limit. The disk is not full."""


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


def is_file_too_large(e: BaseException | None) -> bool:
    """Whether ``e`` (or an exception it was raised from) is EFBIG: a file past the
    process's file-size limit (``ulimit -f``) or the file system's largest file."""
    seen = set()
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        if isinstance(e, FileSizeLimitError):
            return True
        if isinstance(e, OSError) and e.errno == errno.EFBIG:
            return True
        if _TOO_LARGE.search(str(e)):
            return True
        e = e.__cause__ or e.__context__
    return False


def file_size_limit() -> int | None:
    """The largest file this process may write, in bytes (RLIMIT_FSIZE's soft limit);
    None when unlimited or unknown."""
    try:
        import resource

        soft, _ = resource.getrlimit(resource.RLIMIT_FSIZE)
    except (ImportError, OSError, ValueError, AttributeError):
        return None
    return None if soft == resource.RLIM_INFINITY or soft < 0 else int(soft)


def file_too_large(path: str | os.PathLike) -> FileSizeLimitError:
    limit = file_size_limit()
    if limit is not None:
        why = (f"this process may write files of at most {size_text(limit)} (its file-size "
               f"limit: ulimit -f / RLIMIT_FSIZE), and this file is larger; the disk is not "
               f"full. Raise the limit where the app (or the command) is started, e.g. "
               f"`ulimit -f unlimited` in its shell or LimitFSIZE=infinity in its systemd "
               f"unit, then start the run again (a resumed run keeps what it wrote)")
    else:
        why = ("the file system refuses a file this large (File too large, EFBIG; the "
               "process has no file-size limit now). Put the workspace on a file system "
               "without a small largest-file size (FAT32 holds at most 4 GiB per file), or "
               "check `ulimit -f` where the app is started")
    return FileSizeLimitError(f"file size limit reached writing {path}: {why}.")


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
    except (DiskFullError, FileSizeLimitError):
        raise
    except BaseException as e:
        full, too_large = is_disk_full(e), is_file_too_large(e)
        if not (full or too_large):
            raise
        if partial is not None and Path(partial).is_dir():
            shutil.rmtree(partial, ignore_errors=True)
        elif partial is not None:
            try:
                Path(partial).unlink(missing_ok=True)
            except OSError:
                pass
        raise (disk_full(path, needed) if full else file_too_large(path)) from e


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


def _file_being_written(folder: str | os.PathLike) -> Path:
    """The file a failed write in ``folder`` was writing (the newest one there), else the
    folder itself; a partial temp file of the project's writers (``writegate.temp_name``) is
    removed and the file it was for named."""
    target = newest_file(folder) or Path(folder)
    meant = writegate.meant_by_temp(target.name)
    if meant is not None:
        # The project's writers write a temp file first: name the file, free its part.
        try:
            target.unlink()
        except OSError:
            pass
        target = target.with_name(meant)
    return target


def disk_full_in(folder: str | os.PathLike, e: BaseException) -> DiskFullError:
    """For a write the stage did not wrap: the file being written in ``folder`` (the newest
    one there), else the folder itself, and the space left."""
    err = disk_full(_file_being_written(folder))
    err.__cause__ = e
    return err


def file_too_large_in(folder: str | os.PathLike, e: BaseException) -> FileSizeLimitError:
    """``disk_full_in`` for a file past the file-size limit (``is_file_too_large``)."""
    err = file_too_large(_file_being_written(folder))
    err.__cause__ = e
    return err
