"""Who may see what: users and run ownership, files handed out, uploads unpacked, secrets.

Standard library only (``launch.py`` imports this before gradio, to refuse an unsafe launch
within a second). The rules, in one place:

- ``user_of(request)``: the signed-in user, or None when sign-in is off (one local user,
  who sees every run). With sign-in on, a request without a user is refused.
- ``can_access(user, run, admins)``: a user sees, stops and downloads only their own runs;
  admins (``launch.py --admin``) see all. A run without an owner (made before sign-in was
  turned on) is visible to admins only.
- ``registry_file(runner, run_id, relpath, user, admins)``: the only way a run's file leaves
  the server: a regular file inside the run's folder as the job registry knows it, after
  resolving links; never the SQLite history, never another user's run.
- ``safe_extract_zip``: uploads are unpacked without ``..``, absolute paths or links, with
  count and size limits measured on the bytes actually written, images and captions only.
- ``check_run_paths(cfg, user, workspace, ...)``: with sign-in on, a non-admin's run reads
  only their own datasets (``{workspace}/datasets/<user>/``, ``user_dataset_root``), the
  bundled demo, the server's models folder and their own runs; output locations and
  download mirrors are not theirs to set. Called before every ``runner.submit``;
  ``check_resume_paths`` checks a run again, as its files are now, before it resumes.
  ``check_dataset_paths``: the same rule for the Dataset tab's reads and caption writes.
- Sign-in: ``Credentials`` keeps salted hashes; its ``LoginLimiter`` refuses a user name
  after 5 failed attempts within 5 minutes, for 5 minutes (even the right password), and
  ``LoginWall`` answers such sign-ins 429 with the time to wait (also per client address).
- Hub tokens typed into the UI live in this process's memory only: ``remember_secret`` adds
  one to what ``redact`` hides in log text shown in the UI.
"""
from __future__ import annotations

import base64
import hashlib
import hmac
import math
import os
import re
import secrets
import shutil
import stat
import threading
import time
import zipfile
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any, Iterable

DB_NAMES = ("zerolora.sqlite", "zerolora.sqlite-wal", "zerolora.sqlite-shm",
            "zerolora.sqlite-journal")
IMAGE_EXTS = (".jpg", ".jpeg", ".png", ".webp", ".bmp", ".tif", ".tiff")
UPLOAD_EXTS = IMAGE_EXTS + (".txt", ".csv", ".json", ".jsonl")
MAX_ZIP_FILES = 20_000
MAX_ZIP_BYTES = 4 << 30
DOWNLOADS_DIR = "downloads"
SERVED_DIR = "served"          # {workspace}/downloads/served: the only launch allowed_path
SERVED_TTL_S = 3600.0


class AccessDenied(PermissionError):
    """A request for a run or a file this user may not have; the message is for people."""


class UnsafeArchiveError(ValueError):
    """An upload that is refused as a whole; nothing of it was left on disk."""


# ------------------------------------------------------------------------------ policy
@dataclass(frozen=True)
class Policy:
    auth_enabled: bool = False
    admins: frozenset[str] = frozenset()


_policy = Policy()


def configure(auth_enabled: bool, admins: Iterable[str] = ()) -> Policy:
    """Set the process-wide policy (``launch.py`` calls this before building the UI)."""
    global _policy
    _policy = Policy(bool(auth_enabled), frozenset(a for a in admins if a))
    return _policy


def policy() -> Policy:
    return _policy


def admins() -> frozenset[str]:
    return _policy.admins


def user_of(request: Any) -> str | None:
    """The signed-in user of a gradio request; None when sign-in is off.

    With sign-in on, a request that carries no user (it should never reach a handler) is
    refused rather than treated as the all-seeing local user.
    """
    name = getattr(request, "username", None) if request is not None else None
    if name:
        return str(name)
    if _policy.auth_enabled:
        raise AccessDenied("sign in first")
    return None


def _owner(run: Any) -> str | None:
    if isinstance(run, dict):
        return run.get("owner")
    return getattr(run, "owner", None)


def can_access(user: str | None, run: Any, admins: Iterable[str] | None = None) -> bool:
    """Whether ``user`` may see, stop and download ``run`` (a runner record)."""
    if run is None:
        return False
    if user is None:
        # Sign-in off: one local user. With sign-in on user_of never returns None.
        return not _policy.auth_enabled
    admin_set = _policy.admins if admins is None else frozenset(admins)
    if user in admin_set:
        return True
    owner = _owner(run)
    return owner is not None and owner == user


def list_owner(user: str | None, admins: Iterable[str] | None = None) -> str | None:
    """What to pass to ``runner.list_runs(owner=...)``: None lists every run."""
    admin_set = _policy.admins if admins is None else frozenset(admins)
    if user is None or user in admin_set:
        return None
    return user


def get_run_checked(runner: Any, run_id: str, user: str | None,
                    admins: Iterable[str] | None = None) -> dict:
    """The run's record when ``user`` may have it; the same refusal whether it does not exist
    or belongs to someone else (no probing for other users' run ids)."""
    run_id = str(run_id or "").strip()
    refusal = AccessDenied(f"run_id: no such run of yours (got {run_id!r})")
    if not run_id:
        raise refusal
    try:
        run = runner.get_run(run_id)
    except Exception:  # noqa: BLE001 - RunnerError for unknown ids; never say more
        raise refusal from None
    if not can_access(user, run, admins):
        raise refusal
    return run


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


def _inside(path: Path, root: Path) -> bool:
    return path == root or root in path.parents


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


# ------------------------------------------------------------------------------ secrets
_secrets: set[str] = set()
_secrets_lock = threading.Lock()
SECRET_PATTERNS = [
    re.compile(r"\bhf_[A-Za-z0-9]{16,}\b"),
    re.compile(r"(?i)(authorization\s*[:=]\s*(?:bearer|token)\s+)[^\s'\"]+"),
    # KEY=value / "key": "value" where a _-separated part of KEY names a secret
    # (HF_TOKEN, MODELSCOPE_API_TOKEN, hub_token; not TOKENIZERS_PARALLELISM).
    re.compile(r"(?i)\b((?:[A-Z0-9]+_)*(?:TOKEN|SECRET|PASSWORD|PASSWD|API_?KEY|ACCESS_KEY|"
               r"CREDENTIALS?)(?:_[A-Z0-9]+)*[\"']?\s*[=:]\s*[\"']?)(?!\*\*\*)[^\s'\",;&]+"),
    re.compile(r"(?i)([?&](?:token|access_token|api_key)=)[^&\s'\"]+"),
]
REDACTED = "***"


def remember_secret(value: str | None) -> None:
    """Add a secret (a token typed into the UI) to what ``redact`` hides; memory only."""
    if value and len(value) >= 6:
        with _secrets_lock:
            _secrets.add(value)


def forget_secret(value: str | None) -> None:
    with _secrets_lock:
        _secrets.discard(value or "")


def redact(text: str | None) -> str:
    """``text`` with tokens hidden: every secret remembered by this process, plus anything
    shaped like a hub token, an Authorization header or ``SOMETHING_TOKEN=value``."""
    if not text:
        return text or ""
    with _secrets_lock:
        known = sorted(_secrets, key=len, reverse=True)
    for s in known:
        text = text.replace(s, REDACTED)
    text = SECRET_PATTERNS[0].sub(REDACTED, text)
    for pat in SECRET_PATTERNS[1:]:
        text = pat.sub(lambda m: m.group(1) + REDACTED, text)
    return text


# ------------------------------------------------------------------------------ passwords
HASH_SCHEME = "pbkdf2_sha256"
HASH_ITERATIONS = 600_000


def hash_password(password: str, iterations: int = HASH_ITERATIONS,
                  salt: bytes | None = None) -> str:
    """``pbkdf2_sha256$<iterations>$<salt>$<hash>`` (salted; for ``--auth-file`` lines)."""
    salt = salt or secrets.token_bytes(16)
    digest = hashlib.pbkdf2_hmac("sha256", password.encode("utf-8"), salt, iterations)
    b64 = lambda b: base64.b64encode(b).decode("ascii").rstrip("=")  # noqa: E731
    return f"{HASH_SCHEME}${iterations}${b64(salt)}${b64(digest)}"


def _b64decode(text: str) -> bytes:
    return base64.b64decode(text + "=" * (-len(text) % 4))


def is_password_hash(text: str) -> bool:
    parts = text.split("$")
    return len(parts) == 4 and parts[0] == HASH_SCHEME and parts[1].isdigit()


class LoginLimiter:
    """Failed sign-ins, counted per user name and per client address, in memory.

    After ``max_failures`` failures for one name within ``window_s`` seconds, that name is
    refused for ``window_s`` seconds -- the right password too; one address gets
    ``max_address_failures`` (more: people behind one proxy or NAT share an address).
    ``clock`` (seconds, monotonic) is injectable so tests need not wait. Only names and
    addresses are kept here, never passwords.
    """

    def __init__(self, max_failures: int = 5, window_s: float = 300.0,
                 max_address_failures: int = 20, clock=time.monotonic,
                 max_keys: int = 10_000):
        self.max_failures = max_failures
        self.max_address_failures = max_address_failures
        self.window_s = float(window_s)
        self.clock = clock
        self.max_keys = max_keys
        self._failures: dict[tuple[str, str], list[float]] = {}
        self._locked: dict[tuple[str, str], float] = {}
        self._lock = threading.Lock()

    @staticmethod
    def _keys(user: str | None, address: str | None) -> list[tuple[str, str]]:
        return ([("user", user)] if user else []) + ([("address", address)] if address else [])

    def _limit(self, key: tuple[str, str]) -> int:
        return self.max_failures if key[0] == "user" else self.max_address_failures

    def _prune(self, now: float) -> None:
        for key in [k for k, until in self._locked.items() if until <= now]:
            del self._locked[key]
        for key in list(self._failures):
            recent = [t for t in self._failures[key] if now - t < self.window_s]
            if recent:
                self._failures[key] = recent
            else:
                del self._failures[key]
        for table in (self._failures, self._locked):  # a flood of made-up names
            while len(table) > self.max_keys:
                table.pop(next(iter(table)))

    def wait_s(self, user: str | None = None, address: str | None = None) -> float:
        """Seconds before ``user`` (from ``address``) may try again; 0: now."""
        with self._lock:
            now = self.clock()
            self._prune(now)
            return max([self._locked.get(k, now) - now for k in self._keys(user, address)]
                       + [0.0])

    def failed(self, user: str | None = None, address: str | None = None) -> None:
        """Count one failed sign-in; the name (address) is locked at its limit."""
        with self._lock:
            now = self.clock()
            self._prune(now)
            for key in self._keys(user, address):
                times = self._failures.setdefault(key, [])
                times.append(now)
                if len(times) >= self._limit(key):
                    self._locked[key] = now + self.window_s
                    del self._failures[key]

    def succeeded(self, user: str | None = None) -> None:
        """A correct sign-in clears the name's earlier failures (not a lock)."""
        with self._lock:
            self._failures.pop(("user", user or ""), None)

    def refusal(self, user: str | None = None, address: str | None = None) -> str | None:
        """The message for a refused attempt (None: it may go ahead)."""
        with self._lock:
            now = self.clock()
            self._prune(now)
            waits = [(self._locked[k] - now, k) for k in self._keys(user, address)
                     if k in self._locked]
        if not waits:
            return None
        wait, key = max(waits)
        minutes, seconds = divmod(math.ceil(wait), 60)
        when = f"{minutes} min {seconds} s" if minutes else f"{seconds} s"
        who = f"user name {key[1]!r}" if key[0] == "user" else "your address"
        return (f"sign-in: too many failed attempts for {who} ({self._limit(key)} within "
                f"{self.window_s / 60:g} minutes); wait {when} and try again")


@dataclass
class Credentials:
    """Users and their salted password hashes, in memory; ``check`` is gradio's ``auth``.

    ``limiter`` counts failures per user name: a name locked by it is refused even with
    the right password (``LoginWall`` adds the client address and the message to wait).
    """

    hashes: dict[str, str] = field(default_factory=dict)
    limiter: LoginLimiter | None = field(default_factory=LoginLimiter, repr=False)

    def add(self, user: str, password_or_hash: str, iterations: int = 100_000) -> None:
        if is_password_hash(password_or_hash):
            self.hashes[user] = password_or_hash
        else:
            # Plain passwords are hashed at once and never kept.
            self.hashes[user] = hash_password(password_or_hash, iterations=iterations)

    def check(self, user: str, password: str) -> bool:
        if self.limiter is not None and self.limiter.wait_s(user) > 0:
            return False  # locked: not even the right password, and no new failure counted
        ok = self._matches(user, password)
        if self.limiter is not None:
            if ok:
                self.limiter.succeeded(user)
            else:
                self.limiter.failed(user)
        return ok

    def _matches(self, user: str, password: str) -> bool:
        stored = self.hashes.get(user)
        if stored is None:
            # Same work for unknown users, so timing does not tell which users exist.
            hash_password(password or "", iterations=100_000, salt=b"\0" * 16)
            return False
        _, iters, salt, digest = stored.split("$")
        got = hashlib.pbkdf2_hmac("sha256", (password or "").encode("utf-8"),
                                  _b64decode(salt), int(iters))
        return hmac.compare_digest(got, _b64decode(digest))

    async def check_async(self, user: str, password: str) -> bool:
        """``check`` off the event loop (a slow hash never stalls the server)."""
        import asyncio

        return await asyncio.to_thread(self.check, user, password)

    def __call__(self, user: str, password: str) -> bool:
        return self.check(user, password)

    def __len__(self) -> int:
        return len(self.hashes)

    def __repr__(self) -> str:  # never print hashes
        return f"Credentials(users={sorted(self.hashes)})"


def login_message(creds: Credentials) -> str:
    """The text above the login form (gradio's form shows no reason for a refusal)."""
    lim = creds.limiter
    if lim is None:
        return "ZeroLoRA: sign in"
    return (f"ZeroLoRA: sign in (after {lim.max_failures} failed attempts a user name is "
            f"paused for {lim.window_s / 60:g} minutes)")


USER_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.@-]{0,63}$")


def parse_auth_line(text: str, where: str) -> tuple[str, str]:
    """``user:password`` or ``user:pbkdf2_sha256$...`` -> (user, secret); errors never echo
    the password."""
    if ":" not in text:
        raise ValueError(f"{where}: expected user:password (got a line without ':')")
    user, secret = text.split(":", 1)
    user = user.strip()
    if not USER_NAME.match(user):
        raise ValueError(f"{where}: user name must be letters, digits, _ . @ - (got {user!r})")
    if not secret:
        raise ValueError(f"{where}: empty password for user {user!r}")
    return user, secret


def load_auth_file(path: str | os.PathLike) -> list[tuple[str, str]]:
    """Lines ``user:password`` or ``user:<hash from --hash-password>``; # comments, blanks."""
    p = Path(path)
    try:
        lines = p.read_text(encoding="utf-8").splitlines()
    except OSError as e:
        raise ValueError(f"--auth-file: cannot read {str(p)!r} ({e.strerror})") from None
    out = []
    for i, line in enumerate(lines, 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        out.append(parse_auth_line(line, f"--auth-file {p.name} line {i}"))
    if not out:
        raise ValueError(f"--auth-file: no user:password lines in {str(p)!r}")
    return out


# ------------------------------------------------------------------------------ login wall
_API_INFO = re.compile(rb"(window\.gradio_api_info\s*=\s*).*?(;\s*</script>)", re.S)
_SIGNED_OUT = re.compile(rb'"auth_required"\s*:\s*true')


def blank_api_info(html: bytes) -> bytes:
    """The page for a signed-out visitor without the API description gradio puts in it."""
    if not _SIGNED_OUT.search(html):
        return html
    return _API_INFO.sub(rb"\1{}\2", html, count=1)


MAX_LOGIN_BODY = 64 << 10


class LoginWall:
    """ASGI middleware for a server with sign-in: the page gradio serves to signed-out
    visitors embeds the API description (endpoint names, parameters, docstrings) next to
    the login form; this removes it, so they get the login page and nothing else.

    With a ``limiter`` (the ``LoginLimiter`` of the ``Credentials`` that check passwords),
    sign-ins (``POST /login``) of a locked user name or client address are answered 429
    with the time to wait, before any password is checked; each refused sign-in counts
    against the client's address (``Credentials.check`` counts the name).
    """

    def __init__(self, app, limiter: LoginLimiter | None = None):
        self.app = app
        self.limiter = limiter

    async def __call__(self, scope, receive, send):
        if (self.limiter is not None and scope.get("type") == "http"
                and scope.get("method") == "POST"
                and str(scope.get("path", "")).rstrip("/").endswith("/login")):
            await self._login(scope, receive, send)
            return
        if scope.get("type") != "http" or scope.get("method") not in ("GET", "HEAD"):
            await self.app(scope, receive, send)
            return
        state: dict[str, Any] = {"start": None, "html": False, "chunks": []}

        async def capture(message):
            if message["type"] == "http.response.start":
                ctype = dict(message.get("headers") or []).get(b"content-type", b"")
                if ctype.startswith(b"text/html"):
                    state.update(start=message, html=True)
                    return
                await send(message)
                return
            if not state["html"] or message["type"] != "http.response.body":
                await send(message)
                return
            state["chunks"].append(message.get("body", b""))
            if message.get("more_body"):
                return
            body = blank_api_info(b"".join(state["chunks"]))
            start = state["start"]
            headers = [(k, v) for k, v in start.get("headers") or []
                       if k.lower() != b"content-length"]
            headers.append((b"content-length", str(len(body)).encode()))
            await send({**start, "headers": headers})
            await send({"type": "http.response.body", "body": body})

        await self.app(scope, receive, capture)

    async def _login(self, scope, receive, send):
        body, more = b"", True
        while more:
            message = await receive()
            if message["type"] != "http.request":
                return  # the client went away
            body += message.get("body", b"")
            more = message.get("more_body", False)
            if len(body) > MAX_LOGIN_BODY:
                await _json_reply(send, 413, "sign-in: request too large")
                return
        user = await _form_user(scope, body)
        client = scope.get("client")
        address = str(client[0]) if client else None
        refusal = self.limiter.refusal(user, address)
        if refusal:
            await _json_reply(send, 429, refusal,
                              retry_after=math.ceil(self.limiter.wait_s(user, address)))
            return
        sent = [False]

        async def replay():
            if sent[0]:
                return await receive()
            sent[0] = True
            return {"type": "http.request", "body": body, "more_body": False}

        async def watch(message):
            if message["type"] == "http.response.start" and message.get("status") == 400:
                self.limiter.failed(address=address)  # wrong name or password
            await send(message)

        await self.app(scope, replay, watch)


async def _form_user(scope, body: bytes) -> str:
    """The ``username`` field of a sign-in form (urlencoded or multipart), as gradio reads
    it; empty when there is none."""
    from starlette.requests import Request

    async def once():
        return {"type": "http.request", "body": body, "more_body": False}

    try:
        form = await Request(dict(scope), once).form()
        name = form.get("username")
        return name.strip() if isinstance(name, str) else ""
    except Exception:  # noqa: BLE001 - a malformed form: gradio refuses it on its own
        return ""


async def _json_reply(send, status: int, detail: str, retry_after: int | None = None):
    import json

    body = json.dumps({"detail": detail}).encode("utf-8")
    headers = [(b"content-type", b"application/json"),
               (b"content-length", str(len(body)).encode())]
    if retry_after is not None:
        headers.append((b"retry-after", str(max(1, retry_after)).encode()))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


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


# ------------------------------------------------------------------------------ run paths
REPO_ROOT = Path(__file__).resolve().parent.parent
DATASETS_DIR = "datasets"
MODELS_DIR_ENV = "ZEROLORA_MODELS_DIR"
# Set by the runner and the run plan for every run; never by users.
PLAN_ONLY_FIELDS = ("output_path", "progress_file", "offload_nvme_path")
PLAN_ONLY_DEFAULTS = {"output_path": "./models", "progress_file": None,
                      "offload_nvme_path": None}
MAX_DATASET_ENTRIES = 200_000
# Every option that names a server path (backend.config.PATH_FIELDS and the model sources).
PATH_OPTIONS = ("output_path", "resume_from", "progress_file", "models_dir",
                "dataset_base_path", "dataset_metadata_path", "lora_checkpoint",
                "offload_nvme_path", "model_id_with_origin_paths", "model_paths",
                "tokenizer_path")


def user_dataset_root(workspace: str | os.PathLike, user: str | None) -> Path:
    """Where ``user``'s dataset folders live (uploads go here):
    ``{workspace}/datasets/<user>/`` for a signed-in user, ``{workspace}/datasets/`` with
    sign-in off (one local user)."""
    root = Path(workspace) / DATASETS_DIR
    if user is None:
        return root
    if not USER_NAME.match(str(user)):
        raise AccessDenied(f"user: not a user name (got {user!r})")
    return root / str(user)


def _real(value: str | os.PathLike, base: Path) -> Path | None:
    """``value`` as an absolute path with every link followed (relative: against ``base``);
    None for text that is no path (a NUL character)."""
    try:
        p = Path(os.path.expanduser(os.fspath(value)))
        if not p.is_absolute():
            p = base / p
        return Path(os.path.realpath(p))
    except (ValueError, OSError):
        return None


def _linked(value: str | os.PathLike, base: Path) -> bool:
    """Whether following links changes where ``value`` points."""
    real = _real(value, base)
    if real is None:
        return False
    p = Path(os.path.expanduser(os.fspath(value)))
    if not p.is_absolute():
        p = base / p
    return Path(os.path.normpath(p)) != real


def _under_any(path: Path | None, roots: Iterable[Path]) -> bool:
    return path is not None and any(_inside(path, r) for r in roots)


def _got(value: Any, base: Path | None = None) -> str:
    text = repr(value if isinstance(value, str) else str(value))
    if base is not None and isinstance(value, str) and value and _linked(value, base):
        text += ", a link to a place outside"
    return f"got {text}"


class _Roots:
    """The folders a signed-in, non-admin user's run may read from."""

    def __init__(self, user: str, workspace: Path, models_dir, repo_root: Path, runner: Any,
                 cwd: Path):
        self.cwd = cwd
        self.assets = Path(os.path.realpath(repo_root / "backend" / "assets"))
        # What a run at the default models_dir uses (see backend.config.resolve_paths) and
        # the folder launch.py was given (it exports it as ZEROLORA_MODELS_DIR too).
        default_models = _real(os.environ.get(MODELS_DIR_ENV) or "./models", cwd)
        self.server_models = _real(models_dir, cwd) if models_dir else default_models
        self.models = list(dict.fromkeys([self.server_models, default_models, self.assets]))
        # The user's own datasets folder, unless it is a link (or leads out of datasets/).
        datasets = Path(os.path.realpath(workspace / DATASETS_DIR))
        own = user_dataset_root(workspace, user)
        self.user_datasets = own
        real_own = Path(os.path.realpath(own))
        self.datasets = [real_own] if not own.is_symlink() and \
            _inside(real_own, datasets) and real_own != datasets else []
        # The folders of the user's own runs, as the job registry knows them.
        self.runs: list[Path] = []
        if runner is not None:
            try:
                records = runner.list_runs(owner=user)
            except Exception:  # noqa: BLE001 - no registry: no runs to allow
                records = []
            for run in records:
                if _owner(run) != user:
                    continue
                try:
                    self.runs.append(_run_folder(runner, run)[1])
                except (AccessDenied, KeyError, OSError):
                    continue
        self.runs_text = (f"a file inside one of your runs ({workspace / 'runs'}/<run id>/)"
                          if runner is not None else "nothing (no run registry to check)")

    @property
    def readable_data(self) -> list[Path]:
        return self.datasets + [self.assets] + self.runs

    def data_text(self, write: bool = False) -> str:
        mine = f"a folder under {self.user_datasets}/"
        if write:
            return mine
        return f"{mine}, the demo dataset under {self.assets}/ or a folder of one of your runs"

    def models_text(self) -> str:
        return f"a path under {self.server_models} or {self.assets}"


def _data_problems(base: Any, metadata: Any, roots: _Roots, write: bool,
                   keys: Iterable[str] = ("image",), shown: dict | None = None) -> list[str]:
    """``shown``: the values as the user gave them (for messages), by field name."""
    allowed = roots.datasets if write else roots.readable_data
    shown = shown or {}
    problems: list[str] = []
    for name, value in (("dataset_base_path", base), ("dataset_metadata_path", metadata)):
        if not value:
            continue
        if not _under_any(_real(value, roots.cwd), allowed):
            given = shown.get(name) or value
            problems.append(f"{name}: outside your dataset folders ({_got(given, roots.cwd)}; "
                            f"allowed {roots.data_text(write)})")
    if problems:
        return problems
    # Inside an allowed folder: links in it and files named by the metadata must stay inside.
    if base and os.path.isdir(_real(base, roots.cwd)):
        problems += _link_problems(_real(base, roots.cwd), allowed, roots, write)
    if metadata and not problems and os.path.isfile(_real(metadata, roots.cwd)):
        folder = _real(base, roots.cwd) if base else _real(metadata, roots.cwd).parent
        problems += _row_problems(_real(metadata, roots.cwd), folder, allowed, roots, write,
                                  keys)
    return problems


def _outside_link(folder: Path, allowed: list[Path], field: str) -> tuple[str | None, list[str]]:
    """The first link under ``folder`` that resolves outside ``allowed`` (relative path),
    or a problem for ``field`` when the folder holds too many entries to check."""
    seen = 0
    for root, dirs, files in os.walk(folder, followlinks=False):
        for name in dirs + files:
            seen += 1
            if seen > MAX_DATASET_ENTRIES:
                return None, [f"{field}: too many files to check (got more than "
                              f"{MAX_DATASET_ENTRIES}; allowed up to {MAX_DATASET_ENTRIES})"]
            full = os.path.join(root, name)
            if os.path.islink(full) and not _under_any(Path(os.path.realpath(full)), allowed):
                return os.path.relpath(full, folder), []
    return None, []


def _link_problems(folder: Path, allowed: list[Path], roots: _Roots, write: bool) -> list[str]:
    rel, problems = _outside_link(folder, allowed, "dataset_base_path")
    if rel is not None:
        return [f"dataset_base_path: {rel!r} is a link to a place outside your dataset "
                f"folders (got a link; allowed files inside {roots.data_text(write)})"]
    return problems


def _metadata_rows(meta: Path) -> list[Any]:
    import csv
    import json

    suffix = meta.suffix.lower()
    try:
        if suffix == ".csv":
            with open(meta, newline="", encoding="utf-8-sig") as f:
                return list(csv.DictReader(f))
        text = meta.read_text(encoding="utf-8")
        if suffix == ".json":
            data = json.loads(text)
            return data if isinstance(data, list) else []
        if suffix == ".jsonl":
            return [json.loads(line) for line in text.splitlines() if line.strip()]
    except (OSError, ValueError, UnicodeDecodeError, csv.Error):
        return []  # unreadable: the stage refuses it on its own, reading nothing else
    return []


def _row_problems(meta: Path, folder: Path, allowed: list[Path], roots: _Roots, write: bool,
                  keys: Iterable[str]) -> list[str]:
    for i, row in enumerate(_metadata_rows(meta), 1):
        if i > MAX_DATASET_ENTRIES:
            break
        if not isinstance(row, dict):
            continue
        for key in keys:
            value = row.get(key)
            for item in (value if isinstance(value, list) else [value]):
                if not isinstance(item, str) or not item:
                    continue
                if not _under_any(_real(item, folder), allowed):
                    return [f"dataset_metadata_path: {meta.name} row {i} names a file "
                            f"outside your dataset folders ({_got(item, folder)}; allowed "
                            f"files inside {roots.data_text(write)})"]
    return []


def _source_problem(field: str, entry: str, roots: _Roots, repo_root: Path) -> str | None:
    """One ``model_id:glob`` entry or local path, as the stages' hub code reads it (stages
    run in the repository root)."""
    local = Path(os.path.expanduser(entry))
    if not local.is_absolute():
        local = repo_root / local
    if os.path.lexists(local) or ":" not in entry:
        if _under_any(Path(os.path.realpath(local)), roots.models):
            return None
        return (f"{field}: a local path outside the models folders ({_got(entry, repo_root)}; "
                f"allowed {roots.models_text()}, or model_id:glob)")
    model_id, pattern = entry.rsplit(":", 1)
    for part, text in (("model_id", model_id), ("glob", pattern)):
        parts = text.replace("\\", "/").split("/")
        if ".." in parts or text.startswith("~") or (part == "glob" and text.startswith("/")):
            return (f"{field}: '..', '~' and absolute paths are not allowed in a {part} "
                    f"(got {entry!r}; allowed model_id:glob inside the models folder)")
    if model_id.startswith("/") and not _under_any(Path(os.path.realpath(model_id)),
                                                   roots.models):
        return (f"{field}: a local path outside the models folders (got {entry!r}; allowed "
                f"{roots.models_text()}, or model_id:glob)")
    return None


def check_run_paths(cfg: Any, user: str | None, workspace: str | os.PathLike,
                    admins: Iterable[str] | None = None,
                    models_dir: str | os.PathLike | None = None,
                    repo_root: str | os.PathLike = REPO_ROOT, *, runner: Any = None,
                    cwd: str | os.PathLike | None = None) -> list[str]:
    """What in run config ``cfg`` (a RunConfig or a mapping) ``user`` may not point at, as
    ``field: problem (got X; allowed Y)`` lines; empty: the run may start.

    Call it before ``runner.submit`` (the API's start_run does). With sign-in off (``user``
    None) and for admins nothing is restricted. Other users' runs read only:

    - ``dataset_base_path`` / ``dataset_metadata_path``: inside their own
      ``{workspace}/datasets/<user>/`` (where uploads go), the bundled demo dataset under
      ``backend/assets/``, or one of their runs (a stage-1 cache) -- after following links;
      links inside the folder and files named by the metadata must stay there too;
    - ``models_dir``: the server's models folder (``--models-dir``, else
      ``ZEROLORA_MODELS_DIR``, else ./models) or ``backend/assets``, or a folder inside one;
      local entries of ``model_id_with_origin_paths``, ``model_paths``, ``tokenizer_path``
      likewise; ``model_id:glob`` entries without ``..``, ``~`` or absolute globs;
    - ``lora_checkpoint`` / ``resume_from``: inside one of their own runs (``runner``'s
      registry; without a runner: refused);
    - ``output_path`` / ``progress_file`` / ``offload_nvme_path``: set by the run plan only
      (their defaults);
    - ``hub_endpoint``: empty (a download mirror is for admins).

    ``models_dir`` is the server's models folder (``launch.py --models-dir``); relative
    values resolve against ``cwd`` (default: this process's working folder), as the run
    plan resolves them.
    """
    unchecked = _unrestricted(user, admins)
    if unchecked is not None:
        return unchecked
    from backend import config as schema

    if isinstance(cfg, dict):
        cfg = schema.validate(cfg, "run config", require_inputs=False)
    base = Path(cwd or os.getcwd()).resolve()
    repo = Path(os.path.realpath(repo_root))
    workspace = Path(os.path.realpath(Path(workspace).expanduser()))
    try:
        roots = _Roots(user, workspace, models_dir, repo, runner, base)
    except AccessDenied as e:
        return [str(e)]
    nul = [f"{name}: not allowed (got a NUL character; allowed a path)"
           for name in (*PATH_OPTIONS, "hub_endpoint")
           if "\x00" in str(getattr(cfg, name, None) or "")]
    if nul:
        return nul
    try:
        resolved = schema.resolve_paths(cfg, base)
    except (ValueError, OSError) as e:
        return [f"model_paths: cannot be read as paths (got {e}; allowed a JSON list of "
                f"files)"]
    problems: list[str] = []

    for name in PLAN_ONLY_FIELDS:
        value = getattr(cfg, name)
        if value not in (PLAN_ONLY_DEFAULTS[name], None, ""):
            who = "a server folder for admins only" if name == "offload_nvme_path" else \
                "set by the run plan, not by users"
            problems.append(f"{name}: {who} ({_got(value)}; allowed "
                            f"{PLAN_ONLY_DEFAULTS[name] or 'empty'})")
    if cfg.hub_endpoint:
        problems.append(f"hub_endpoint: a download mirror is for admins only "
                        f"({_got(cfg.hub_endpoint)}; allowed empty)")

    problems += _data_problems(
        resolved.dataset_base_path, resolved.dataset_metadata_path, roots, write=False,
        keys=("image", *[k.strip() for k in (cfg.data_file_keys or "").split(",")
                         if k.strip()]),
        shown={"dataset_base_path": cfg.dataset_base_path,
               "dataset_metadata_path": cfg.dataset_metadata_path})

    if not _under_any(_real(resolved.models_dir, base), roots.models):
        problems.append(f"models_dir: not the server's models folder "
                        f"({_got(cfg.models_dir, base)}; allowed {roots.server_models} or "
                        f"{roots.assets}, or a folder inside one)")
    for entry in (resolved.model_id_with_origin_paths or "").split(","):
        if entry.strip():
            p = _source_problem("model_id_with_origin_paths", entry.strip(), roots, repo)
            if p:
                problems.append(p)
                break
    if resolved.tokenizer_path:
        p = _source_problem("tokenizer_path", resolved.tokenizer_path.strip(), roots, repo)
        if p:
            problems.append(p)
    if resolved.model_paths:
        import json

        items = json.loads(resolved.model_paths)
        for item in items:
            bad = [x for x in (item if isinstance(item, list) else [item])
                   if not _under_any(_real(str(x), base), roots.models)]
            if bad:
                problems.append(f"model_paths: a file outside the models folders "
                                f"({_got(str(bad[0]), base)}; allowed {roots.models_text()})")
                break

    for name in ("lora_checkpoint", "resume_from"):
        value = getattr(resolved, name)
        if value and not _under_any(_real(value, base), roots.runs):
            problems.append(f"{name}: not inside one of your runs "
                            f"({_got(getattr(cfg, name), base)}; allowed {roots.runs_text})")
    return problems


def _unrestricted(user: str | None, admins: Iterable[str] | None) -> list[str] | None:
    """The answer of a path check that has nothing to check: sign-in off (everything
    allowed), no user with sign-in on (refused), or an admin (everything allowed). None:
    ``user`` is restricted; check the paths."""
    if user is None:
        return ["user: sign in first (got no user; allowed a signed-in user)"] \
            if _policy.auth_enabled else []
    if user in (_policy.admins if admins is None else frozenset(admins)):
        return []
    return None


def check_dataset_paths(base: str | None, metadata: str | None, user: str | None,
                        workspace: str | os.PathLike, admins: Iterable[str] | None = None, *,
                        write: bool = False, runner: Any = None,
                        models_dir: str | os.PathLike | None = None,
                        repo_root: str | os.PathLike = REPO_ROOT,
                        cwd: str | os.PathLike | None = None) -> list[str]:
    """The dataset rule of ``check_run_paths`` alone, for the Dataset tab before it reads a
    folder (captions, thumbnails, checks) or, with ``write=True``, writes captions into it
    (then only the user's own ``{workspace}/datasets/<user>/`` is allowed)."""
    unchecked = _unrestricted(user, admins)
    if unchecked is not None:
        return unchecked
    here = Path(cwd or os.getcwd()).resolve()
    workspace = Path(os.path.realpath(Path(workspace).expanduser()))
    try:
        roots = _Roots(user, workspace, models_dir, Path(os.path.realpath(repo_root)), runner,
                       here)
    except AccessDenied as e:
        return [str(e)]
    if "\x00" in f"{base or ''}{metadata or ''}":
        return ["dataset_base_path: not allowed (got a NUL character; allowed a path)"]
    return _data_problems(base or "", metadata or None, roots, write)


def check_resume_paths(runner: Any, run: dict, user: str | None,
                       workspace: str | os.PathLike, admins: Iterable[str] | None = None,
                       models_dir: str | os.PathLike | None = None,
                       repo_root: str | os.PathLike = REPO_ROOT) -> list[str]:
    """``check_run_paths`` again, before run ``run`` (a registry record ``user`` may access)
    continues: files may have changed since it started. Empty: it may resume.

    What the resumed stages read is checked as it is on disk now: the run's folder (not a
    link), its ``run.yaml`` (a regular file; the stored config when the run has none) by the
    rules of ``check_run_paths`` -- its run-folder ``output_path`` / ``progress_file`` are
    the plan's and stay allowed while they lead inside the folder -- and every link inside
    the run's folder (the saved state, the stage-1 cache), which must stay inside it.
    """
    unchecked = _unrestricted(user, admins)
    if unchecked is not None:
        return unchecked
    import yaml

    from backend import config as schema

    try:
        _, run_dir = _run_folder(runner, run)
    except AccessDenied as e:
        return [f"run_dir: {e}"]
    yaml_file = Path(run["run_dir"]) / "run.yaml"
    if os.path.lexists(yaml_file) and (yaml_file.is_symlink() or not yaml_file.is_file()):
        return [f"run.yaml: not a regular file of run {run['id']} (got a link or special "
                f"file; allowed the file its plan wrote)"]
    try:
        text = yaml_file.read_text(encoding="utf-8") if yaml_file.is_file() else \
            run.get("config_yaml") or ""
        data = yaml.safe_load(text) or {}
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as e:
        return [f"run.yaml: cannot be read ({type(e).__name__}; allowed the file its plan "
                f"wrote)"]
    if not isinstance(data, dict):
        return [f"run.yaml: not a mapping of run options (got {type(data).__name__})"]
    data = dict(data)
    # Where the plan put this run's outputs: allowed while it leads inside the run's folder.
    for name in ("output_path", "progress_file"):
        value = data.get(name)
        if isinstance(value, str) and value and "\x00" not in value and \
                _inside(Path(os.path.realpath(value)), run_dir):
            data[name] = PLAN_ONLY_DEFAULTS[name]
    try:
        problems = check_run_paths(data, user, workspace, admins, models_dir, repo_root,
                                   runner=runner)
    except schema.ConfigError as e:
        return list(e.problems)
    return problems + _run_link_problems(run, run_dir)


def _run_link_problems(run: dict, run_dir: Path) -> list[str]:
    rel, problems = _outside_link(run_dir, [run_dir], "run_dir")
    if rel is not None:
        return [f"run_dir: {rel!r} in run {run['id']} is a link to a place outside its "
                f"folder (got a link; allowed files inside the run's folder)"]
    return problems
