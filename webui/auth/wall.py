"""The login wall: ASGI middleware in front of gradio on a server with sign-in.

- Signed-out visitors get the login page without the API description gradio embeds in it.
- Sign-ins (``POST /login``) come from the app's own page only (a cross-site post is
  refused 403), and a locked user name or client address is answered 429 with the time to
  wait, before any password is checked (``LoginLimiter``).
- Every answer says: never inside a frame of another site (``X-Frame-Options``,
  ``frame-ancestors``), no content sniffing, no referrer to other sites.
- What one signed-in user was handed stays theirs: files under ``served/<user>/`` (the
  downloads of ``webui.security.registry``), files they uploaded, and the results of their
  queue session (by session hash) are refused to everyone else.

The client address for the limiter is the connection's; a forwarded address counts only
from a proxy named by ``launch.py --trusted-proxy`` (uvicorn's ``FORWARDED_ALLOW_IPS``).
"""
from __future__ import annotations

import json
import math
import os
import re
import threading
import time
from collections import OrderedDict
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

from webui.auth.limiter import LoginLimiter

_API_INFO = re.compile(rb"(window\.gradio_api_info\s*=\s*).*?(;\s*</script>)", re.S)
_SIGNED_OUT = re.compile(rb'"auth_required"\s*:\s*true')
SECURITY_HEADERS = [(b"x-frame-options", b"DENY"),
                    (b"content-security-policy", b"frame-ancestors 'none'"),
                    (b"x-content-type-options", b"nosniff"),
                    (b"referrer-policy", b"same-origin")]
MAX_BOUND = 50_000  # uploads and sessions remembered per server


def blank_api_info(html: bytes) -> bytes:
    """The page for a signed-out visitor without the API description gradio puts in it."""
    if not _SIGNED_OUT.search(html):
        return html
    return _API_INFO.sub(rb"\1{}\2", html, count=1)


MAX_LOGIN_BODY = 64 << 10
MAX_JOIN_BODY = 64 << 20


class _Owners:
    """Key -> user, in memory, the oldest forgotten first beyond ``MAX_BOUND``."""

    def __init__(self):
        self._map: OrderedDict[str, str] = OrderedDict()
        self._lock = threading.Lock()

    def claim(self, key: str, user: str) -> bool:
        """Record ``user`` as the owner of ``key`` unless another user owns it."""
        with self._lock:
            owner = self._map.get(key)
            if owner is not None and owner != user:
                return False
            self._map[key] = user
            self._map.move_to_end(key)
            while len(self._map) > MAX_BOUND:
                self._map.popitem(last=False)
            return True

    def owner(self, key: str) -> str | None:
        with self._lock:
            return self._map.get(key)


class LoginWall:
    """ASGI middleware for a server with sign-in (see the module doc).

    ``limiter``: the ``LoginLimiter`` of the ``Credentials`` that check passwords.
    ``served_root``: the downloads folder (``webui.security.served_dir``), whose first level
    is the user a file was handed to.
    """

    def __init__(self, app, limiter: LoginLimiter | None = None,
                 served_root: str | os.PathLike | None = None, served_ttl_s: float = 3600.0):
        self.app = app
        self.limiter = limiter
        self.served_root = Path(os.path.realpath(served_root)) if served_root else None
        self.served_ttl_s = float(served_ttl_s)
        self.uploads = _Owners()
        self.sessions = _Owners()

    async def __call__(self, scope, receive, send):
        if scope.get("type") != "http":
            await self.app(scope, receive, send)
            return
        send = _with_headers(send)
        path = str(scope.get("path", ""))
        method = scope.get("method")
        if method == "POST" and path.rstrip("/").endswith("/login"):
            await self._login(scope, receive, send)
            return
        user = _user(scope)
        if method == "POST" and (path.rstrip("/").endswith("/queue/join")
                                 or _API_CALL.search(path)):
            await self._call(scope, receive, send, user)
            return
        if method == "POST" and path.rstrip("/").endswith("/upload"):
            await self.app(scope, receive, self._record_uploads(send, user))
            return
        if method in ("GET", "HEAD") and path.rstrip("/").endswith("/queue/data"):
            session = (parse_qs(scope.get("query_string", b"").decode("latin-1"))
                       .get("session_hash") or [""])[0]
            if user is not None and not self.sessions.claim(session, user):
                await _json_reply(send, 403, "session: not yours")
                return
        if method in ("GET", "HEAD") and "/file=" in path and user is not None:
            if not self._may_fetch(path.split("/file=", 1)[1], user):
                await _json_reply(send, 404, "file: not found")
                return
        if method not in ("GET", "HEAD"):
            await self.app(scope, receive, send)
            return
        await self.app(scope, receive, _blanking(send))

    # ------------------------------------------------------------------ files
    def _may_fetch(self, raw: str, user: str) -> bool:
        """Whether ``user`` may fetch the file a ``/file=`` route names: someone else's
        download or upload is refused (gradio's own checks still apply after this)."""
        text = unquote(raw)
        if re.match(r"^[a-z][a-z0-9+.-]*://", text, re.I):
            return True  # a URL: gradio's own proxy rules answer it
        real = Path(os.path.realpath(text))
        if self.served_root is not None and (real == self.served_root
                                             or self.served_root in real.parents):
            rel = real.relative_to(self.served_root).parts
            if len(rel) < 3 or rel[0] != user:
                return False
            try:  # expired, even before the sweeper removed it
                age = time.time() - os.lstat(self.served_root / rel[0] / rel[1]).st_mtime
            except OSError:
                return False
            return age <= self.served_ttl_s
        owner = self.uploads.owner(str(real))
        return owner is None or owner == user

    def _record_uploads(self, send, user: str | None):
        """Remember who uploaded each file gradio's upload route answers with."""
        state = {"ok": False, "chunks": []}

        async def watch(message):
            if message["type"] == "http.response.start":
                state["ok"] = message.get("status") == 200
            elif message["type"] == "http.response.body" and state["ok"] and user:
                state["chunks"].append(message.get("body", b""))
                if not message.get("more_body"):
                    try:
                        paths = json.loads(b"".join(state["chunks"]))
                    except ValueError:
                        paths = []
                    for p in paths if isinstance(paths, list) else []:
                        if isinstance(p, str):
                            self.uploads.claim(os.path.realpath(p), user)
            await send(message)

        return watch

    # ------------------------------------------------------------------ calls
    async def _call(self, scope, receive, send, user: str | None):
        """An event call (``queue/join``, ``call|run|api/<name>``): its queue session belongs
        to the first user who joins with it, and a call with too few values is refused
        here -- gradio's own refusal prints every value (a hub token too) to the log."""
        body = await _read_body(receive, MAX_JOIN_BODY)
        if body is None:
            await _json_reply(send, 413, "request too large")
            return
        try:
            payload = json.loads(body or b"{}")
        except ValueError:
            payload = None
        payload = payload if isinstance(payload, dict) else {}
        session = str(payload.get("session_hash") or "")
        if user is not None and session and not self.sessions.claim(session, user):
            await _json_reply(send, 403, "session: not yours")
            return
        needed = _inputs_needed(scope, payload)
        data = payload.get("data")
        if needed is not None and isinstance(data, list) and len(data) < needed:
            await _json_reply(send, 422, f"data: {needed} values needed (got {len(data)})")
            return
        await self.app(scope, _replay(body, receive), send)

    # ------------------------------------------------------------------ sign-in
    async def _login(self, scope, receive, send):
        if not _same_site(scope):
            await _json_reply(send, 403, "sign-in: only from this app's own page")
            return
        body = await _read_body(receive, MAX_LOGIN_BODY)
        if body is None:
            await _json_reply(send, 413, "sign-in: request too large")
            return
        if self.limiter is None:
            await self.app(scope, _replay(body, receive), send)
            return
        user = await _form_user(scope, body)
        client = scope.get("client")
        address = str(client[0]) if client else None
        refusal = self.limiter.refusal(user, address)
        if refusal:
            await _json_reply(send, 429, refusal,
                              retry_after=math.ceil(self.limiter.wait_s(user, address)))
            return

        async def watch(message):
            if message["type"] == "http.response.start" and message.get("status") == 400:
                self.limiter.failed(address=address)  # wrong name or password
            await send(message)

        await self.app(scope, _replay(body, receive), watch)


_API_CALL = re.compile(r"/(?:call|run|api)/([A-Za-z0-9_.-]+)/?$")


def _inputs_needed(scope, payload: dict) -> int | None:
    """How many input values the called event takes (None: unknown, gradio decides)."""
    blocks = getattr(scope.get("app"), "get_blocks", lambda: None)()
    fns = getattr(blocks, "fns", None)
    if not isinstance(fns, dict):
        return None
    match = _API_CALL.search(str(scope.get("path", "")))
    for fn in fns.values():
        if (match and getattr(fn, "api_name", None) == match.group(1)) or (
                not match and getattr(fn, "id", None) == payload.get("fn_index")):
            return len(getattr(fn, "inputs", None) or [])
    return None


def _headers(scope) -> dict[bytes, bytes]:
    return {k.lower(): v for k, v in scope.get("headers") or []}


def _same_site(scope) -> bool:
    """A sign-in post from this app's own page, or from a script (no browser headers).

    Browsers send ``Origin`` (and ``Sec-Fetch-Site``) with every cross-site post; a post
    whose origin is another host, or ``null``, is refused."""
    h = _headers(scope)
    site = h.get(b"sec-fetch-site", b"").decode("latin-1").lower()
    if site in ("cross-site", "same-site"):
        return False
    origin = h.get(b"origin", b"").decode("latin-1")
    if not origin:
        referer = h.get(b"referer", b"").decode("latin-1")
        if not referer:
            return True
        origin = referer
    host = (h.get(b"x-forwarded-host") or h.get(b"host") or b"").decode("latin-1")
    try:
        return origin != "null" and urlsplit(origin).netloc.lower() == host.lower()
    except ValueError:
        return False


def _user(scope) -> str | None:
    """The signed-in user of a request, as gradio's own ``/user`` route finds it."""
    app = scope.get("app")
    tokens, cookie_id = getattr(app, "tokens", None), getattr(app, "cookie_id", None)
    if tokens is None or cookie_id is None:
        return None
    from http.cookies import CookieError, SimpleCookie

    jar = SimpleCookie()
    try:
        jar.load(_headers(scope).get(b"cookie", b"").decode("latin-1"))
    except CookieError:
        return None
    for name in (f"access-token-{cookie_id}", f"access-token-unsecure-{cookie_id}"):
        if name in jar and jar[name].value in tokens:
            return tokens[jar[name].value]
    return None


async def _read_body(receive, limit: int) -> bytes | None:
    body, more = b"", True
    while more:
        message = await receive()
        if message["type"] != "http.request":
            return b""  # the client went away
        body += message.get("body", b"")
        more = message.get("more_body", False)
        if len(body) > limit:
            return None
    return body


def _replay(body: bytes, receive):
    sent = [False]

    async def replay():
        if sent[0]:
            return await receive()
        sent[0] = True
        return {"type": "http.request", "body": body, "more_body": False}

    return replay


def _with_headers(send):
    async def add(message):
        if message["type"] == "http.response.start":
            have = {k.lower() for k, _ in message.get("headers") or []}
            message = {**message, "headers": list(message.get("headers") or [])
                       + [(k, v) for k, v in SECURITY_HEADERS if k not in have]}
        await send(message)

    return add


def _blanking(send):
    """A ``send`` that takes the API description out of a signed-out visitor's page."""
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

    return capture


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
    body = json.dumps({"detail": detail}).encode("utf-8")
    headers = [(b"content-type", b"application/json"),
               (b"content-length", str(len(body)).encode())]
    if retry_after is not None:
        headers.append((b"retry-after", str(max(1, retry_after)).encode()))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})

