"""A local stand-in for the Hugging Face Hub: no hub is reachable from the test machines,
so a small ``http.server`` on 127.0.0.1 speaks the part of the Hub's HTTP protocol that
``huggingface_hub``'s real client calls to publish a model (``HF_ENDPOINT`` points at it):

- ``POST /api/repos/create``                       create a repository (409 if it exists)
- ``POST /api/validate-yaml``                      check a model card's metadata (400 + why)
- ``POST /api/models/<owner>/<name>/preupload/<rev>``  every file "regular" (sent inline)
- ``POST /api/models/<owner>/<name>/commit/<rev>``     the NDJSON commit: files, base64

Every request needs ``Authorization: Bearer <token>`` with the server's token (else 401), and
the owner must be the token's user (else 403). ``fail`` makes one endpoint answer a given
status (``{"create": 409}``). ``requests`` keeps every request (method, path, body bytes)
so a test can read every byte that arrived (``arrived()``); ``repos`` the files of each
repository as committed (path -> bytes).

The card check follows the Hub's documented rules for the metadata a LoRA's card uses: a
YAML mapping between ``---`` lines; ``license`` one of the Hub's ids (or ``other``);
``base_model`` a repository id or a list of them; ``base_model_relation`` one of adapter,
merge, quantized, finetune (and only with ``base_model``); ``tags`` a list of strings;
``widget`` a list of mappings with ``text`` and an ``output.url``; ``instance_prompt`` a
string.

It also serves models for downloads (``huggingface_hub.snapshot_download``, the Models tab):
``add_model(repo_id, folder)`` publishes a folder's files (``*.safetensors`` as LFS files,
the rest as regular ones), answered without a token:

- ``GET /api/models/<owner>/<name>/revision/<rev>``    the repository and its commit
- ``GET /api/models/<owner>/<name>/tree/<rev>``        every file: size, git blob id, LFS sha256
- ``HEAD|GET /<owner>/<name>/resolve/<rev>/<path>``     a file, with ``Range: bytes=N-``

``rate`` (bytes per second, 0: no limit) slows file bodies down so a progress bar has time
to move; ``cut`` (path -> bytes) closes the connection after that many bytes of the next
full GET of a file, once (a dropped connection: the client resumes with a range request);
``fail_files`` (path -> status) answers GETs of a file with that status until removed.
``downloads`` keeps (path, Range header or "") of every file body sent.
"""
from __future__ import annotations

import base64
import hashlib
import json
import re
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import yaml

REPO_ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*$")
LICENSES = {"apache-2.0", "mit", "openrail", "openrail++", "creativeml-openrail-m",
            "cc-by-4.0", "cc-by-nc-4.0", "cc-by-sa-4.0", "cc-by-nc-sa-4.0", "cc0-1.0",
            "bsd-3-clause", "gpl-3.0", "llama2", "llama3", "gemma", "other", "unknown"}
RELATIONS = {"adapter", "merge", "quantized", "finetune"}


def card_problems(content: str) -> list[str]:
    """What the Hub would refuse in a model card's metadata (empty: valid)."""
    m = re.match(r"^---\s*\n(.*?)\n---\s*(\n|$)", content, re.S)
    if not m:
        return ["no metadata block between '---' lines"]
    try:
        data = yaml.safe_load(m.group(1))
    except yaml.YAMLError as e:
        return [f"metadata is not YAML: {e}"]
    if not isinstance(data, dict):
        return ["metadata is not a mapping"]
    problems = []
    if "license" in data and data["license"] not in LICENSES:
        problems.append(f"license: not a Hub license id (got {data['license']!r})")
    base = data.get("base_model")
    if base is not None:
        ids = base if isinstance(base, list) else [base]
        if not all(isinstance(b, str) and REPO_ID_RE.match(b) for b in ids):
            problems.append(f"base_model: not a repository id (got {base!r})")
    rel = data.get("base_model_relation")
    if rel is not None and (rel not in RELATIONS or base is None):
        problems.append(f"base_model_relation: {rel!r} needs base_model and one of {RELATIONS}")
    tags = data.get("tags")
    if tags is not None and not (isinstance(tags, list) and all(isinstance(t, str) for t in tags)):
        problems.append("tags: a list of strings")
    widget = data.get("widget")
    if widget is not None:
        if not isinstance(widget, list):
            problems.append("widget: a list")
        else:
            for i, w in enumerate(widget):
                if not (isinstance(w, dict) and isinstance(w.get("text"), str)
                        and isinstance((w.get("output") or {}).get("url"), str)):
                    problems.append(f"widget[{i}]: needs text and output.url")
    if "instance_prompt" in data and not isinstance(data["instance_prompt"], str):
        problems.append("instance_prompt: a string")
    return problems


def _git_sha1(data: bytes) -> str:
    """A file's git blob id (what the Hub's tree lists as ``oid``)."""
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


class HubServer:
    """The local Hub on a free port: ``with HubServer(token, user) as hub: hub.url``."""

    def __init__(self, token: str, user: str):
        self.token, self.user = token, user
        self.repos: dict[str, dict[str, bytes]] = {}
        self.private: dict[str, bool] = {}
        self.requests: list[tuple[str, str, bytes]] = []
        self.fail: dict[str, int] = {}
        self.models: dict[str, dict[str, bytes]] = {}
        self.rate = 0
        self.cut: dict[str, int] = {}
        self.fail_files: dict[str, int] = {}
        self.downloads: list[tuple[str, str]] = []
        self.lock = threading.Lock()
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.url = f"http://127.0.0.1:{self._httpd.server_address[1]}"
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)

    def __enter__(self) -> "HubServer":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()

    def add_model(self, repo_id: str, folder) -> dict[str, bytes]:
        """Serve every file under ``folder`` as model ``repo_id``; returns them by path."""
        from pathlib import Path

        root = Path(folder)
        files = {p.relative_to(root).as_posix(): p.read_bytes()
                 for p in sorted(root.rglob("*")) if p.is_file()
                 and not any(part.startswith(".") for part in p.relative_to(root).parts)}
        with self.lock:
            self.models[repo_id] = files
        return files

    def commit_of(self, repo_id: str) -> str:
        return hashlib.sha1(repo_id.encode()).hexdigest()

    @staticmethod
    def is_lfs(path: str) -> bool:
        return path.endswith(".safetensors")

    def body_bytes(self) -> bytes:
        """Every request body that arrived, one after the other."""
        return b"".join(body for _, _, body in self.requests)

    def arrived(self) -> dict[str, bytes]:
        """Every byte that arrived, by where: each committed file's content, and each
        request body with the files' base64 content taken out (JSON and NDJSON as sent)."""
        out = {}
        for n, (_, path, body) in enumerate(self.requests):
            text = body.decode("utf-8", "replace")
            for line in text.splitlines() or [text]:
                try:
                    item = json.loads(line)
                except json.JSONDecodeError:
                    continue
                if isinstance(item, dict) and item.get("key") == "file":
                    v = item["value"]
                    out[f"file {v['path']}"] = base64.b64decode(v["content"])
            out[f"request {n} {path}"] = re.sub(r'"content": ?"[A-Za-z0-9+/=]*"',
                                                '"content": ""', text).encode()
        return out

    def _handler(self):
        hub = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):  # quiet
                pass

            def _send(self, status: int, payload, content_type="application/json"):
                data = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(data)))
                if status >= 400 and content_type == "application/json":
                    self.send_header("X-Error-Message", payload.get("error", ""))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self):
                self._model_get(head=False)

            def do_HEAD(self):
                self._model_get(head=True)

            def _model_get(self, head: bool):
                path = self.path.split("?")[0]
                m = re.match(r"^/api/models/([^/]+/[^/]+)/(revision|tree)/([^/]+)", path)
                r = re.match(r"^/([^/]+/[^/]+)/resolve/([^/]+)/(.+)$", path)
                repo_id = (m or r).group(1) if (m or r) else None
                files = hub.models.get(repo_id) if repo_id else None
                if files is None:
                    return self._send(404, {"error": "Repository not found"})
                commit = hub.commit_of(repo_id)
                if m and m.group(2) == "revision":
                    return self._send(200, {"id": repo_id, "modelId": repo_id, "sha": commit,
                                            "private": False, "siblings": [
                                                {"rfilename": f} for f in files]})
                if m:
                    return self._send(200, [self._entry(p, data) for p, data in files.items()])
                from urllib.parse import unquote

                name = unquote(r.group(3))
                if name not in files:
                    return self._send(404, {"error": "Entry not found"},)
                data = files[name]
                if not head and name in hub.fail_files:
                    return self._send(hub.fail_files[name], {"error": f"refused {name}"})
                etag = (hashlib.sha256(data).hexdigest() if hub.is_lfs(name)
                        else _git_sha1(data))
                rng = self.headers.get("Range") or ""
                start = int(re.match(r"bytes=(\d+)-", rng).group(1)) if rng else 0
                self.send_response(206 if start else 200)
                self.send_header("X-Repo-Commit", commit)
                self.send_header("ETag", f'"{etag}"')
                self.send_header("Content-Length", str(len(data) - start))
                if start:
                    self.send_header("Content-Range", f"bytes {start}-{len(data) - 1}/{len(data)}")
                self.end_headers()
                if head:
                    return
                with hub.lock:
                    hub.downloads.append((name, rng))
                    cut = hub.cut.pop(name, None) if not start else None
                body = data[start:] if cut is None else data[start:start + cut]
                step = max(1, hub.rate // 10) if hub.rate else len(body) or 1
                for i in range(0, len(body), step):
                    self.wfile.write(body[i:i + step])
                    self.wfile.flush()
                    if hub.rate:
                        time.sleep(step / hub.rate)
                if cut is not None:  # the connection drops mid-file
                    self.close_connection = True
                    try:
                        self.connection.shutdown(2)
                    except OSError:
                        pass

            def _entry(self, path: str, data: bytes) -> dict:
                out = {"type": "file", "path": path, "size": len(data), "oid": _git_sha1(data)}
                if hub.is_lfs(path):
                    out["lfs"] = {"oid": hashlib.sha256(data).hexdigest(), "size": len(data),
                                  "pointerSize": 134}
                return out

            def do_POST(self):
                n = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(n) if n else b""
                path = self.path.split("?")[0]
                with hub.lock:
                    hub.requests.append(("POST", path, body))
                if path == "/api/validate-yaml":
                    problems = card_problems(json.loads(body).get("content", ""))
                    if problems:
                        return self._send(400, "; ".join(problems).encode(), "text/plain")
                    return self._send(200, {})
                if self.headers.get("Authorization") != f"Bearer {hub.token}":
                    return self._send(401, {"error": "Invalid credentials in Authorization "
                                                     "header"})
                if path == "/api/repos/create":
                    return self._create(json.loads(body))
                m = re.match(r"^/api/models/([^/]+)/([^/]+)/(preupload|commit)/([^/]+)$", path)
                if not m:
                    return self._send(404, {"error": f"no route {path}"})
                repo_id, what = f"{m.group(1)}/{m.group(2)}", m.group(3)
                if what in hub.fail:
                    return self._send(hub.fail[what], {"error": f"refused ({what})"})
                if m.group(1) != hub.user:
                    return self._send(403, {"error": "You don't have the rights to write "
                                                     f"to {repo_id}"})
                if repo_id not in hub.repos:
                    return self._send(404, {"error": "Repository not found"})
                if what == "preupload":
                    files = json.loads(body)["files"]
                    return self._send(200, {"files": [
                        {"path": f["path"], "uploadMode": "regular", "shouldIgnore": False,
                         "oid": None} for f in files]})
                return self._commit(repo_id, body)

            def _create(self, data: dict):
                if "create" in hub.fail:
                    return self._send(hub.fail["create"], {"error": "refused (create)"})
                owner = data.get("organization") or hub.user
                repo_id = f"{owner}/{data.get('name')}"
                if owner != hub.user:
                    return self._send(403, {"error": f"You cannot create in {owner}"})
                with hub.lock:
                    if repo_id in hub.repos:
                        return self._send(409, {"error": "You already created this model "
                                                         "repo", "url": f"{hub.url}/{repo_id}"})
                    hub.repos[repo_id] = {}
                    hub.private[repo_id] = data.get("visibility") == "private" or \
                        bool(data.get("private"))
                return self._send(200, {"url": f"{hub.url}/{repo_id}", "name": repo_id})

            def _commit(self, repo_id: str, body: bytes):
                files = {}
                for line in body.splitlines():
                    item = json.loads(line)
                    if item["key"] == "file":
                        v = item["value"]
                        files[v["path"]] = base64.b64decode(v["content"])
                    elif item["key"] != "header":
                        return self._send(400, {"error": f"unexpected {item['key']}"})
                with hub.lock:
                    hub.repos[repo_id].update(files)
                oid = hashlib.sha1(body).hexdigest()
                return self._send(200, {"commitUrl": f"{hub.url}/{repo_id}/commit/{oid}",
                                        "commitOid": oid, "pullRequestUrl": None})

        return Handler
