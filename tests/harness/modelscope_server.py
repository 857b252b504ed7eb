"""A local stand-in for the ModelScope Hub: no hub is reachable from the test machines, so a
small ``http.server`` on 127.0.0.1 speaks the part of ModelScope's HTTP protocol that its
own client (``modelscope.hub.api.HubApi``, which delegates to ``modelscope_hub``) calls to
publish a model, at the endpoint the client is given (``HubApi(endpoint=...)`` /
``MODELSCOPE_ENDPOINT``):

- ``POST /api/v1/models``                                   create a model repository
  (JSON ``{Path, Name, Visibility: 1 private | 5 public, License, ...}``; an existing name
  is answered as ModelScope answers it: 400 with business code 10010101001)
- ``POST /api/v1/repos/models/<owner>/<name>/info/lfs/objects/batch``  which blobs to send
  (``{"operation": "upload", "objects": [{oid, size}]}``; each blob not stored yet gets an
  upload ``href`` on this server)
- ``PUT /lfs/<owner>/<name>/<sha256>``                       one blob's bytes (checked)
- ``POST /api/v1/repos/models/<owner>/<name>/commit/<rev>``  the commit: ``actions`` of
  ``type`` normal (base64 ``content``) or lfs (a stored blob by ``sha256``)

Every request needs the server's token, as ``Authorization: Bearer <token>`` or the
``m_session_id`` cookie (else 401), and the owner must be the token's user (else 403).
``fail`` makes one step answer a given status (``{"create": 403}``, ``"lfs"``,
``"commit"``). ``requests`` keeps every request (method, path, body bytes) so a test can
read every byte that arrived (``arrived()``); ``repos`` the files of each repository as
committed (path -> bytes), ``private`` each one's visibility.
"""
from __future__ import annotations

import base64
import hashlib
import json
import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

ALREADY_EXISTS = 10010101001  # ModelScope's business code: the model exists
PRIVATE, PUBLIC = 1, 5


class ModelScopeServer:
    """The local ModelScope Hub on a free port: ``with ModelScopeServer(token, user) as ms``."""

    def __init__(self, token: str, user: str):
        self.token, self.user = token, user
        self.repos: dict[str, dict[str, bytes]] = {}
        self.private: dict[str, bool] = {}
        self.licenses: dict[str, str] = {}
        self.blobs: dict[str, bytes] = {}
        self.requests: list[tuple[str, str, bytes]] = []
        self.fail: dict[str, int] = {}
        self.lock = threading.Lock()
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.url = f"http://127.0.0.1:{self._httpd.server_address[1]}"
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)

    def __enter__(self) -> "ModelScopeServer":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()

    def body_bytes(self) -> bytes:
        """Every request body that arrived, one after the other."""
        return b"".join(body for _, _, body in self.requests)

    def arrived(self) -> dict[str, bytes]:
        """Every byte that arrived, by where: each request body as sent (a blob's bytes, a
        commit's JSON) and each file a commit carried inline, decoded."""
        out = {}
        for n, (method, path, body) in enumerate(self.requests):
            out[f"request {n} {method} {path}"] = body
            if "/commit/" in path:
                for action in json.loads(body).get("actions", []):
                    if action.get("type") != "lfs":
                        out[f"request {n} file {action['path']}"] = \
                            base64.b64decode(action.get("content") or "")
        return out

    def _handler(self):
        ms = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):  # quiet
                pass

            def _send(self, status: int, payload: dict):
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _ok(self, data=None):
                return self._send(200, {"Code": 200, "Data": data or {}, "Message": "success",
                                        "Success": True, "RequestId": "local"})

            def _no(self, status: int, message: str, code: int | None = None):
                return self._send(status, {"Code": code or status, "Message": message,
                                           "Success": False, "RequestId": "local"})

            def _authorized(self) -> bool:
                bearer = self.headers.get("Authorization") == f"Bearer {ms.token}"
                cookie = f"m_session_id={ms.token}" in (self.headers.get("Cookie") or "")
                return bearer or cookie

            def _read(self) -> tuple[str, bytes]:
                n = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(n) if n else b""
                path = self.path.split("?")[0]
                with ms.lock:
                    ms.requests.append((self.command, path, body))
                return path, body

            def do_PUT(self):
                path, body = self._read()
                m = re.match(r"^/lfs/([^/]+)/([^/]+)/([0-9a-f]{64})$", path)
                if not m:
                    return self._no(404, f"no route {path}")
                if not self._authorized():
                    return self._no(401, "Unauthorized")
                if "lfs" in ms.fail:
                    return self._no(ms.fail["lfs"], "refused (lfs)")
                if hashlib.sha256(body).hexdigest() != m.group(3):
                    return self._no(400, "blob does not match its sha256")
                with ms.lock:
                    ms.blobs[m.group(3)] = body
                return self._send(200, {"Code": 200})

            def do_POST(self):
                path, body = self._read()
                if not self._authorized():
                    return self._no(401, "AccessToken is invalid or expired, please login")
                if path == "/api/v1/models":
                    return self._create(json.loads(body))
                m = re.match(r"^/api/v1/repos/models/([^/]+)/([^/]+)/"
                             r"(info/lfs/objects/batch|commit/[^/]+)$", path)
                if not m:
                    return self._no(404, f"no route {path}")
                owner, repo_id = m.group(1), f"{m.group(1)}/{m.group(2)}"
                what = "commit" if m.group(3).startswith("commit") else "lfs"
                if what in ms.fail:
                    return self._no(ms.fail[what], f"refused ({what})")
                if owner != ms.user:
                    return self._no(403, f"Permission denied: you cannot write to {repo_id}")
                if repo_id not in ms.repos:
                    return self._no(404, f"model {repo_id} not found")
                data = json.loads(body)
                if what == "lfs":
                    objects = []
                    for o in data.get("objects", []):
                        if o["oid"] not in ms.blobs:
                            objects.append({**o, "actions": {"upload": {
                                "href": f"{ms.url}/lfs/{repo_id}/{o['oid']}"}}})
                    return self._ok({"objects": objects})
                return self._commit(repo_id, data)

            def _create(self, data: dict):
                if "create" in ms.fail:
                    return self._no(ms.fail["create"], "refused (create)")
                owner, name = data.get("Path"), data.get("Name")
                repo_id = f"{owner}/{name}"
                if owner != ms.user:
                    return self._no(403, f"Permission denied: you cannot create in {owner}")
                with ms.lock:
                    if repo_id in ms.repos:
                        return self._no(400, "模型已存在 (model already exists)", ALREADY_EXISTS)
                    ms.repos[repo_id] = {}
                    ms.private[repo_id] = data.get("Visibility") == PRIVATE
                    ms.licenses[repo_id] = data.get("License")
                return self._ok({"Id": len(ms.repos), "Path": owner, "Name": name,
                                 "Visibility": data.get("Visibility")})

            def _commit(self, repo_id: str, data: dict):
                files = {}
                for action in data.get("actions", []):
                    if action.get("action") != "create":
                        return self._no(400, f"unexpected action {action.get('action')}")
                    if action.get("type") == "lfs":
                        blob = ms.blobs.get(action.get("sha256"))
                        if blob is None or len(blob) != action.get("size"):
                            return self._no(400, f"blob of {action['path']} was not uploaded")
                        files[action["path"]] = blob
                    else:
                        files[action["path"]] = base64.b64decode(action.get("content") or "")
                with ms.lock:
                    ms.repos[repo_id].update(files)
                oid = hashlib.sha1(json.dumps(data, sort_keys=True).encode()).hexdigest()
                return self._ok({"CommitId": oid, "CommitMessage": data.get("commit_message")})

        return Handler
