"""Users and passwords: salted hashes in memory, ``--auth-file`` lines, the sign-in check.

``Credentials.check`` is gradio's ``auth``; its ``LoginLimiter`` (``webui.auth.limiter``)
refuses a user name after repeated failures, even with the right password.
"""
from __future__ import annotations

import base64
import hashlib
import hmac
import os
import re
import secrets
from dataclasses import dataclass, field
from pathlib import Path

from webui.auth.limiter import LoginLimiter

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

