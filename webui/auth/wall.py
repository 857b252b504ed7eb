"""The login wall: ASGI middleware in front of gradio on a server with sign-in."""
from __future__ import annotations

import math
import re
from typing import Any

from webui.auth.limiter import LoginLimiter

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

