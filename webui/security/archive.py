"""Zip uploads unpacked safely: without ``..``, absolute paths or links, with count and size
limits measured on the bytes actually written, images and captions only."""
from __future__ import annotations

import os
import re
import stat
import zipfile
from pathlib import Path
from typing import Iterable

from backend.core.readgate import inside as _inside
from backend.core.media_types import IMAGE_EXTS, VIDEO_EXTS  # images, or clips of a video dataset

UPLOAD_EXTS = IMAGE_EXTS + VIDEO_EXTS + (".txt", ".csv", ".json", ".jsonl")
MAX_ZIP_FILES = 20_000
MAX_ZIP_BYTES = 4 << 30


class UnsafeArchiveError(ValueError):
    """An upload that is refused as a whole; nothing of it was left on disk."""



# ------------------------------------------------------------------------------ uploads
class ExtractedFiles(list):
    """The files written (Paths); ``skipped`` holds the entry names left out (other types)."""

    def __init__(self, files: Iterable[Path] = (), skipped: Iterable[str] = ()):
        super().__init__(files)
        self.skipped = list(skipped)


def _entry_parts(info: zipfile.ZipInfo) -> list[str]:
    name = info.filename
    problem = None
    norm = name.replace("\\", "/")
    if "\x00" in norm:
        problem = "a NUL character in the name"
    elif norm.startswith("/") or re.match(r"^[A-Za-z]:", norm):
        problem = "an absolute path"
    parts = [p for p in norm.split("/") if p not in ("", ".")]
    if problem is None and any(p == ".." for p in parts):
        problem = "'..' in the path"
    if problem is None and not parts:
        problem = "an empty name"
    if problem:
        raise UnsafeArchiveError(f"zip: unsafe entry {name!r} ({problem}); nothing was "
                                 f"unpacked")
    return parts


def _is_link(info: zipfile.ZipInfo) -> bool:
    mode = (info.external_attr >> 16) & 0o170000
    return mode == stat.S_IFLNK or (mode != 0 and mode not in (stat.S_IFREG, stat.S_IFDIR))


def safe_extract_zip(zip_path: str | os.PathLike, dest: str | os.PathLike,
                     max_files: int = MAX_ZIP_FILES, max_total_bytes: int = MAX_ZIP_BYTES,
                     allowed_suffixes: Iterable[str] = UPLOAD_EXTS) -> ExtractedFiles:
    """Unpack images and caption/metadata files of a zip into ``dest``; returns the paths.

    The whole archive is refused (``UnsafeArchiveError``, nothing left behind) for an
    absolute or ``..`` entry, a link or special file, more than ``max_files`` files, or more
    than ``max_total_bytes`` -- counted on the bytes actually decompressed, so a zip that
    lies about its sizes cannot get past the limit. Other file types, ``__MACOSX`` and
    dot-files are skipped (their names in ``.skipped``). Files are created without following
    links, and never outside ``dest``.
    """
    dest = Path(dest)
    dest.mkdir(parents=True, exist_ok=True)
    root = dest.resolve()
    allowed = tuple(s.lower() for s in allowed_suffixes)
    written: list[Path] = []
    skipped: list[str] = []
    try:
        with zipfile.ZipFile(zip_path) as zf:
            plan: list[tuple[zipfile.ZipInfo, list[str]]] = []
            declared = 0
            for info in zf.infolist():
                parts = _entry_parts(info)
                if _is_link(info):
                    raise UnsafeArchiveError(f"zip: {info.filename!r} is a link or special "
                                             f"file; links are not allowed; nothing was "
                                             f"unpacked")
                if info.is_dir():
                    continue
                if parts[0] == "__MACOSX" or any(p.startswith(".") for p in parts):
                    skipped.append(info.filename)
                    continue
                if not parts[-1].lower().endswith(allowed):
                    skipped.append(info.filename)
                    continue
                plan.append((info, parts))
                declared += info.file_size
            if len(plan) > max_files:
                raise UnsafeArchiveError(f"zip: too many files (got {len(plan)}; allowed up to "
                                         f"{max_files})")
            if declared > max_total_bytes:
                raise UnsafeArchiveError(f"zip: too large unpacked (got {declared} bytes; "
                                         f"allowed up to {max_total_bytes})")
            total = 0
            for info, parts in plan:
                target = root.joinpath(*parts)
                target.parent.mkdir(parents=True, exist_ok=True)
                if not _inside(target.parent.resolve(), root):
                    raise UnsafeArchiveError(f"zip: {info.filename!r} would be written outside "
                                             f"the target folder")
                fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL
                             | getattr(os, "O_NOFOLLOW", 0), 0o644)
                written.append(target)
                with os.fdopen(fd, "wb") as out, zf.open(info) as src:
                    while True:
                        chunk = src.read(1 << 20)
                        if not chunk:
                            break
                        total += len(chunk)
                        if total > max_total_bytes:
                            raise UnsafeArchiveError(
                                f"zip: too large unpacked (more than {max_total_bytes} bytes; "
                                f"allowed up to {max_total_bytes})")
                        out.write(chunk)
    except FileExistsError as e:
        _remove(written)
        raise UnsafeArchiveError(f"zip: {e.filename} appears twice or already exists; nothing "
                                 f"was unpacked") from None
    except (UnsafeArchiveError, zipfile.BadZipFile, zipfile.LargeZipFile, OSError,
            EOFError, RuntimeError) as e:
        _remove(written)
        if isinstance(e, UnsafeArchiveError):
            raise
        raise UnsafeArchiveError(f"zip: not a readable zip file ({e})") from None
    return ExtractedFiles(written, skipped)


def _remove(paths: list[Path]) -> None:
    for p in reversed(paths):
        try:
            p.unlink()
        except OSError:
            pass

