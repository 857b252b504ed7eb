"""The write gate: the read gate's twin. Every file written into a user's folder goes through
here, so no link planted before or during the write can send the bytes anywhere else.

A write gate holds the folders that may be written (``roots``, resolved once); None: any
folder (sign-in off, admins, runs from a command line). Every write is **link-safe and
race-free**, restricted or not:

- the destination folder is opened once, component by component from the root with
  ``O_NOFOLLOW`` (a parent swapped for a link at any moment fails the walk; with roots, the
  opened folder is checked again by what the kernel says it is);
- the bytes go to a new temp file created with ``O_CREAT | O_EXCL | O_NOFOLLOW`` and a
  random name *inside that opened folder* (a planted ``.name.tmp`` link is never followed);
- the temp file is renamed over the destination relative to the same folder handle;
  ``rename`` replaces a link at the destination instead of writing through it, and a
  destination that already is a link is refused (``WriteRefused``) before anything is
  written.

Use it like this (``cfg`` a ``RunConfig``)::

    gate = writegate.for_config(cfg)        # cfg.write_roots plus the run's own folder
    gate.write_text(folder / "a.txt", "a caption\\n", what="caption")
    gate.makedirs(folder / "sub")
    with gate.create(folder / "x.png") as f:  # a new file, never an existing one
        f.write(data)
    with gate.replacing(folder / "a.zip") as f:  # streamed, renamed into place at the end
        write_zip(f)
    writegate.atomic_write(path, data)       # unrestricted, still link-safe

Standard library only (the web server imports it before anything heavy).
"""
from __future__ import annotations

import contextlib
import os
import re
import secrets
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Iterable, Iterator

from backend.core.messages import Msg
from backend.core.readgate import inside, real_path, under_any

__all__ = ["WriteGate", "WriteRefused", "UNRESTRICTED", "atomic_write", "for_config",
           "gate_of", "temp_name"]

_DIR_FLAGS = os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | getattr(os, "O_CLOEXEC", 0)
_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)


class WriteRefused(PermissionError):
    """A write the gate will not make: outside the writable folders, through a link, or onto
    something that is not a regular file. The text names the file and what is allowed."""


def temp_name(name: str) -> str:
    """A fresh, unguessable temp name beside ``name`` (``.name.<random>.tmp``)."""
    return f".{name}.{secrets.token_hex(6)}.tmp"


_TEMP = re.compile(r"^\.(.+?)(?:\.[0-9a-f]{12})?\.tmp$")


def meant_by_temp(temp: str) -> str | None:
    """The file name a temp name of ``temp_name`` (or an older ``.name.tmp``) was for;
    None for a name that is no temp file."""
    m = _TEMP.match(temp)
    return m.group(1) if m else None


def _opened_path(fd: int) -> Path | None:
    try:
        return Path(os.readlink(f"/proc/self/fd/{fd}"))
    except OSError:
        return None


@dataclass(frozen=True)
class WriteGate:
    """The folders that may be written (``roots``, resolved); None: no restriction."""

    roots: tuple[Path, ...] | None = None

    @property
    def restricted(self) -> bool:
        return self.roots is not None

    # ---------------------------------------------------------------- checks
    def _refused(self, path, what: str, why: Msg) -> WriteRefused:
        allowed = (Msg("config.write.own_folders") if self.restricted
                   else Msg("config.write.regular_file"))
        return WriteRefused(Msg("config.write.refused", what=what, why=why,
                                got=os.fspath(path), allowed=allowed))

    def allows(self, path: str | os.PathLike) -> bool:
        """Whether ``path`` (links resolved now) is inside the roots."""
        return self.roots is None or under_any(real_path(path), self.roots)

    def check(self, path: str | os.PathLike, what: str = "file") -> Path:
        """``path`` resolved when it may be written, else ``WriteRefused`` -- the early,
        friendly answer; the writes below check again as they write."""
        real = real_path(path)
        if real is None or not self.allows(path):
            raise self._refused(path, what, Msg("config.write.not_writable"))
        return real

    # ---------------------------------------------------------------- folders
    def _walk(self, start: int, parts: Iterable[str], path, what: str, create: bool) -> int:
        """Open ``parts`` below the folder handle ``start`` one by one without following
        links (``create``: make the missing ones); returns the last handle (the caller
        closes it). ``start`` is closed."""
        fd = start
        try:
            for part in parts:
                if part in ("", "."):
                    continue
                if part == "..":
                    raise self._refused(path, what, Msg("config.write.dotdot"))
                try:
                    nxt = os.open(part, _DIR_FLAGS | _NOFOLLOW, dir_fd=fd)
                except FileNotFoundError:
                    if not create:
                        raise self._refused(path, what, Msg("config.write.no_folder")) from None
                    try:
                        os.mkdir(part, 0o755, dir_fd=fd)
                    except FileExistsError:
                        pass
                    nxt = os.open(part, _DIR_FLAGS | _NOFOLLOW, dir_fd=fd)
                except OSError:  # a link (ELOOP) or not a folder (ENOTDIR)
                    raise self._refused(path, what, Msg("config.write.link_on_way")) \
                        from None
                os.close(fd)
                fd = nxt
            return fd
        except BaseException:
            os.close(fd)
            raise

    def _open_dir(self, folder: str | os.PathLike, what: str, create: bool = False) -> int:
        """A handle on ``folder``, reached without following links from its root (with
        roots) or as given (without)."""
        given = Path(os.path.abspath(os.path.expanduser(os.fspath(folder))))
        if self.roots is None:
            if create:
                os.makedirs(given, exist_ok=True)
            try:
                return os.open(given, _DIR_FLAGS)
            except OSError:
                raise self._refused(folder, what, Msg("config.write.no_folder")) from None
        real = real_path(given)
        root = next((r for r in self.roots if real is not None and inside(real, r)), None)
        if root is None:
            raise self._refused(folder, what, Msg("config.write.not_writable"))
        # The root's own path has no links (it was resolved); a link swapped in since fails.
        top = os.open("/", _DIR_FLAGS)
        fd = self._walk(top, root.parts[1:], folder, what, create=False)
        fd = self._walk(fd, real.relative_to(root).parts, folder, what, create)
        opened = _opened_path(fd)
        if opened is not None and not under_any(opened, self.roots):
            os.close(fd)
            raise self._refused(folder, what, Msg("config.write.not_writable"))
        return fd

    @contextlib.contextmanager
    def folder(self, folder: str | os.PathLike, what: str = "folder",
               create: bool = False) -> Iterator[int]:
        """A handle on ``folder`` for ``dir_fd`` calls (``create``: made when missing)."""
        fd = self._open_dir(folder, what, create)
        try:
            yield fd
        finally:
            os.close(fd)

    def makedirs(self, folder: str | os.PathLike, what: str = "folder") -> Path:
        """Make ``folder`` and its missing parents inside the roots (links never followed)."""
        with self.folder(folder, what, create=True):
            pass
        return Path(folder)

    # ---------------------------------------------------------------- files
    def _target(self, path: str | os.PathLike, what: str) -> tuple[Path, str]:
        p = Path(os.path.expanduser(os.fspath(path)))
        if p.name in ("", ".", ".."):
            raise self._refused(path, what, Msg("config.write.not_name"))
        return p.parent, p.name

    def _check_dest(self, dfd: int, name: str, path, what: str) -> None:
        try:
            st = os.stat(name, dir_fd=dfd, follow_symlinks=False)
        except FileNotFoundError:
            return
        if stat.S_ISLNK(st.st_mode):
            raise self._refused(path, what, Msg("config.write.is_link"))
        if not stat.S_ISREG(st.st_mode):
            raise self._refused(path, what, Msg("config.write.not_regular"))

    @contextlib.contextmanager
    def replacing(self, path: str | os.PathLike, what: str = "file", *, mode: int = 0o644,
                  parents: bool = False) -> Iterator[IO[bytes]]:
        """A file object to write ``path``'s new content to: a fresh temp file beside it,
        renamed over ``path`` when the block ends (removed when it raises). A reader sees
        the old file or the new one, never a part; no link is followed (``parents``: make
        the folder)."""
        parent, name = self._target(path, what)
        with self.folder(parent, what, create=parents) as dfd:
            self._check_dest(dfd, name, path, what)
            tmp = temp_name(name)
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NOFOLLOW
                         | getattr(os, "O_CLOEXEC", 0), mode, dir_fd=dfd)
            try:
                with os.fdopen(fd, "wb") as f:
                    yield f
                os.replace(tmp, name, src_dir_fd=dfd, dst_dir_fd=dfd)
            except BaseException:
                with contextlib.suppress(OSError):
                    os.unlink(tmp, dir_fd=dfd)
                raise

    def write_bytes(self, path: str | os.PathLike, data: bytes, what: str = "file", *,
                    mode: int = 0o644, parents: bool = False) -> Path:
        """Replace (or create) ``path`` with ``data`` atomically (``replacing``)."""
        with self.replacing(path, what, mode=mode, parents=parents) as f:
            f.write(data)
        return Path(path)

    def write_text(self, path: str | os.PathLike, text: str, what: str = "file", *,
                   encoding: str = "utf-8", parents: bool = False) -> Path:
        return self.write_bytes(path, text.encode(encoding), what, parents=parents)

    @contextlib.contextmanager
    def create(self, path: str | os.PathLike, what: str = "file", *,
               parents: bool = False, mode: int = 0o644) -> Iterator[IO[bytes]]:
        """A new file at ``path`` opened for writing (binary); an existing name (a file or a
        link) is refused, never truncated. Removed again when the block raises."""
        parent, name = self._target(path, what)
        with self.folder(parent, what, create=parents) as dfd:
            try:
                fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NOFOLLOW
                             | getattr(os, "O_CLOEXEC", 0), mode, dir_fd=dfd)
            except FileExistsError:
                raise self._refused(path, what, Msg("config.write.exists")) from None
            try:
                with os.fdopen(fd, "wb") as f:
                    yield f
            except BaseException:
                with contextlib.suppress(OSError):
                    os.unlink(name, dir_fd=dfd)
                raise

    def copy_file(self, src: str | os.PathLike, path: str | os.PathLike, what: str = "file",
                  *, parents: bool = False, chunk: int = 1 << 20) -> Path:
        """Copy the server's own file ``src`` (an upload) to a new file ``path``."""
        with open(src, "rb") as inp, self.create(path, what, parents=parents) as out:
            while True:
                block = inp.read(chunk)
                if not block:
                    break
                out.write(block)
        return Path(path)


UNRESTRICTED = WriteGate(None)


def gate_of(write_roots: Iterable[str | os.PathLike] | None,
            run_dir: str | os.PathLike | None = None) -> WriteGate:
    """The gate of a policy: ``write_roots`` (None: unrestricted) plus the run's own
    folder. A root that is itself a link is left out (nothing below it is writable)."""
    if write_roots is None:
        return UNRESTRICTED
    roots = []
    for r in [*write_roots, *([run_dir] if run_dir else [])]:
        if not isinstance(r, (str, os.PathLike)) or not os.fspath(r) or \
                "\x00" in os.fspath(r):
            continue
        if os.path.islink(os.path.abspath(os.fspath(r))):
            continue
        real = real_path(r)
        if real is not None:
            roots.append(real)
    return WriteGate(tuple(dict.fromkeys(roots)))


def for_config(cfg) -> WriteGate:
    """The gate of a run config: its ``write_roots`` and its own folder (the folder of the
    ``progress_file`` the run plan set)."""
    roots = getattr(cfg, "write_roots", None)
    progress = getattr(cfg, "progress_file", None)
    return gate_of(roots, Path(progress).parent if progress else None)


def atomic_write(path: str | os.PathLike, data: bytes | str, *, parents: bool = True,
                 mode: int = 0o644) -> Path:
    """``path`` replaced by ``data`` (text: UTF-8) atomically and link-safely, with no
    folder restriction: the server's own files and a run's own files."""
    if isinstance(data, str):
        data = data.encode("utf-8")
    return UNRESTRICTED.write_bytes(path, data, "file", parents=parents, mode=mode)
