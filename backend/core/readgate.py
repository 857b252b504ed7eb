"""The read gate: every file a stage opens on a user's behalf goes through here.

A run started by a signed-in user who is not an admin carries its read policy in its config:
``read_roots``, the folders that user's run may read (their dataset folder, the bundled
assets, the folders of their own runs, the server's models folder). The web server sets it
when the run is submitted (``webui.security.with_file_policy``); users cannot. With
``read_roots`` unset (sign-in off, admins, runs from a command line) nothing is restricted.

The stage checks each file **when it opens it**, links resolved: a file that is (or, through
a link, leads) outside the roots is refused with the same words as a missing file, so a run
cannot tell whether a path outside its roots exists. Besides ``read_roots`` a run may always
read its own folder (where the run plan put ``progress_file``; users cannot set that field).

Use it like this (``cfg`` a ``RunConfig``)::

    gate = readgate.for_config(cfg)
    with gate.open(path) as f:            # binary; refusal or absence -> ReadRefused
        data = f.read()
    gate.read_text(path); gate.is_file(path); gate.is_dir(path); gate.list_dir(path)

Standard library and the message tables only (the web server imports it before anything
heavy).
"""
from __future__ import annotations

import io
import os
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Iterable

from backend.core.messages import Msg

__all__ = ["ReadGate", "ReadRefused", "UNRESTRICTED", "for_config", "inside", "real_path",
           "under_any"]


class ReadRefused(FileNotFoundError):
    """A file the run may not read, or that does not exist: one message for both."""


def inside(path: Path, root: Path) -> bool:
    """Whether ``path`` is ``root`` or below it (both already resolved)."""
    return path == root or root in path.parents


def under_any(path: Path | None, roots: Iterable[Path]) -> bool:
    return path is not None and any(inside(path, r) for r in roots)


def real_path(value: str | os.PathLike, base: Path | None = None) -> Path | None:
    """``value`` as an absolute path with every link followed (relative: against ``base``,
    default the working folder); None for text that is no path (a NUL character)."""
    try:
        p = Path(os.path.expanduser(os.fspath(value)))
        if not p.is_absolute():
            p = (base or Path.cwd()) / p
        return Path(os.path.realpath(p))
    except (ValueError, OSError, TypeError):
        return None


def _opened_path(fd: int, fallback: Path) -> Path:
    """Where an open file really is (Linux: its /proc link), else the path it was opened by."""
    proc = f"/proc/self/fd/{fd}"
    try:
        return Path(os.readlink(proc))
    except OSError:
        return fallback


@dataclass(frozen=True)
class ReadGate:
    """The folders a run may read (``roots``, resolved); None: no restriction."""

    roots: tuple[Path, ...] | None = None

    @property
    def restricted(self) -> bool:
        return self.roots is not None

    def allows(self, path: str | os.PathLike) -> bool:
        """Whether ``path`` (links resolved now) is inside the roots."""
        if self.roots is None:
            return True
        return under_any(real_path(path), self.roots)

    def _refused(self, path, what: str) -> ReadRefused:
        return ReadRefused(Msg("config.read.not_found", what=what, got=os.fspath(path)))

    def check(self, path: str | os.PathLike, what: str = "file") -> Path:
        """``path`` resolved, when the run may read it; else ``ReadRefused`` worded like a
        missing file."""
        real = real_path(path)
        if real is None or (self.roots is not None and not under_any(real, self.roots)):
            raise self._refused(path, what)
        return real

    def exists(self, path: str | os.PathLike) -> bool:
        return self.allows(path) and os.path.exists(path)

    def is_file(self, path: str | os.PathLike) -> bool:
        return self.allows(path) and os.path.isfile(path)

    def is_dir(self, path: str | os.PathLike) -> bool:
        return self.allows(path) and os.path.isdir(path)

    def digest(self, paths: Iterable[str | os.PathLike], what: str = "file") -> str:
        """The SHA-256 of the files' names and bytes, in the order given (a cache key of
        what they hold), each read through this gate."""
        import hashlib

        h = hashlib.sha256()
        for p in map(Path, paths):
            h.update(p.name.encode())
            with self.open(p, what) as f:
                for chunk in iter(lambda: f.read(1 << 20), b""):
                    h.update(chunk)
        return h.hexdigest()

    def open(self, path: str | os.PathLike, what: str = "file") -> IO[bytes]:
        """A regular file opened for reading (binary), checked again after opening: a link
        swapped in between the check and the open cannot lead outside the roots."""
        real = self.check(path, what)
        try:
            fd = os.open(real, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
        except OSError:
            raise self._refused(path, what) from None
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                raise self._refused(path, what)
            if self.roots is not None and not under_any(_opened_path(fd, real), self.roots):
                raise self._refused(path, what)
        except BaseException:
            os.close(fd)
            raise
        return os.fdopen(fd, "rb")

    def read_bytes(self, path: str | os.PathLike, what: str = "file") -> bytes:
        with self.open(path, what) as f:
            return f.read()

    def read_text(self, path: str | os.PathLike, what: str = "file", *,
                  encoding: str = "utf-8", errors: str = "strict") -> str:
        return self.read_bytes(path, what).decode(encoding, errors)

    def open_text(self, path: str | os.PathLike, what: str = "file", *,
                  encoding: str = "utf-8", newline: str | None = None) -> IO[str]:
        return io.TextIOWrapper(self.open(path, what), encoding=encoding, newline=newline)

    def check_tree(self, path: str | os.PathLike, what: str = "folder") -> Path:
        """``check`` for ``path`` and, when it is a folder, for every link below it: a model
        folder read by a library (which opens its files itself) cannot lead outside the
        roots through a link planted inside it. Returns ``path`` resolved."""
        real = self.check(path, what)
        if self.roots is None or not real.is_dir():
            return real
        for top, dirs, files in os.walk(real, followlinks=False):
            for name in (*dirs, *files):
                entry = Path(top) / name
                if entry.is_symlink():
                    self.check(entry, what)
        return real

    def list_dir(self, path: str | os.PathLike, what: str = "folder") -> list[Path]:
        """The entries of a folder the run may read (entries themselves are checked when
        opened)."""
        real = self.check(path, what)
        try:
            names = sorted(os.listdir(real))
        except OSError:
            raise self._refused(path, what) from None
        return [Path(path) / n for n in names]


UNRESTRICTED = ReadGate(None)


def gate_of(read_roots: Iterable[str] | None, run_dir: str | os.PathLike | None = None
            ) -> ReadGate:
    """The gate of a policy: ``read_roots`` (None: unrestricted) plus the run's own folder."""
    if read_roots is None:
        return UNRESTRICTED
    roots = [real_path(r) for r in read_roots if isinstance(r, str) and r and "\x00" not in r]
    if run_dir:
        roots.append(real_path(run_dir))
    return ReadGate(tuple(dict.fromkeys(r for r in roots if r is not None)))


def for_config(cfg) -> ReadGate:
    """The gate of a run config: its ``read_roots`` and its own folder (the folder of the
    ``progress_file`` the run plan set)."""
    roots = getattr(cfg, "read_roots", None)
    progress = getattr(cfg, "progress_file", None)
    return gate_of(roots, Path(progress).parent if progress else None)
