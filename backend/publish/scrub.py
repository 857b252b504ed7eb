"""What must never leave the server: its paths and the access token.

Three guards, each on what is about to be sent:

- ``public_settings``: a run's settings without the options that hold a server path
  (``SERVER_OPTIONS``) and without any other value that is a local path or holds a secret;
  the names of the options taken out are returned, never their values.
- ``clean_safetensors``: a copy of a LoRA file whose metadata keeps only the entries that
  name no local path and hold no secret (training writes ``base_model_path``, an export
  ``zerolora_verified_against``: both server paths). The tensors are copied byte for byte.
- ``clean_json``: a copy of a JSON file (a full checkpoint's ``config.json``, its shard
  index) without the entries that name a local path or hold a secret (diffusers may keep
  ``_name_or_path``, the folder a model was loaded from).
- ``leaks``: the last check, on every byte of every staged file: the first secret found
  (the run folder's path, the home folder, an option's server path, the token) and where.

``Secret`` pairs a text with the message that names it without showing it.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable

from backend.config.schema import PATH_FIELDS
from backend.core import rundir
from backend.core.messages import Msg

# Options whose value is a place on the server (or a server's own mirror), never published.
SERVER_OPTIONS = tuple(PATH_FIELDS) + ("read_roots", "write_roots", "model_paths",
                                       "tokenizer_path", "captioner_path", "hub_endpoint")
# A secret shorter than this is too common a string to look for ("/", "/tmp" stays a
# prefix of the longer paths that are looked for).
MIN_SECRET = 5
# A Hugging Face or ModelScope access token written into a value.
TOKEN_RE = re.compile(r"\b(hf_[A-Za-z0-9]{20,}|ms-[A-Za-z0-9-]{20,})\b")
# An absolute path inside a longer text (``... from /data/x/y ...``).
EMBEDDED_PATH_RE = re.compile(r"(?:^|[\s\"'=:,;(\[])(?:/|~/|[A-Za-z]:[\\/])[\w.@+-]+[\\/]")
# Largest safetensors header read (the format's own limit is 100 MB).
MAX_HEADER = 100_000_000


@dataclass(frozen=True)
class Secret:
    text: str
    what: Msg  # names it in a refusal without showing it


def is_local_path(value: str) -> bool:
    """Whether ``value`` reads as a path of this machine (absolute, home-relative or
    explicitly relative), in whole or in one of its comma-separated entries."""
    for part in str(value).split(","):
        p = part.strip()
        if p.startswith(("/", "~", "./", "../", "\\\\")) or re.match(r"^[A-Za-z]:[\\/]", p):
            return True
    return False


def secrets_of(run_dir: Path, settings: dict[str, Any], token: str | None = None
               ) -> list[Secret]:
    """The texts no published byte may hold: the run folder (and its workspace when it is
    one's ``runs/`` folder), the home folder, every local path among the settings, the
    token."""
    found: list[Secret] = []

    def add(text: Any, what: Msg) -> None:
        text = str(text or "").rstrip("/\\")
        if len(text) >= MIN_SECRET and all(s.text != text for s in found):
            found.append(Secret(text, what))

    run_dir = Path(run_dir)
    folder = Msg("publish.what_run_folder")
    for p in dict.fromkeys([run_dir.absolute(), run_dir.resolve()]):
        add(p, folder)
        if p.parent.name == rundir.RUNS:  # a workspace's run: the workspace is the server's
            add(p.parent.parent, folder)
    add(os.path.expanduser("~"), Msg("publish.what_home"))
    for name, value in settings.items():
        for v in (value if isinstance(value, list) else [value]):
            for part in (p.strip() for p in v.split(",")) if isinstance(v, str) else ():
                if is_local_path(part):
                    what = Msg("publish.what_option", name=name)
                    add(part, what)
                    add(Path(part).expanduser().absolute(), what)
                    add(Path(part).expanduser().resolve(), what)
    if token and len(token) >= MIN_SECRET:
        found.append(Secret(token, Msg("publish.what_token")))
    return found


_GONE = object()


def _clean(value: Any, secrets: Iterable[Secret]) -> Any:
    if isinstance(value, str):
        if is_local_path(value) or TOKEN_RE.search(value) or \
                any(s.text in value for s in secrets):
            return _GONE
        return value
    if isinstance(value, (list, tuple)):
        items = [_clean(v, secrets) for v in value]
        return _GONE if any(v is _GONE for v in items) else items
    if isinstance(value, dict):
        items = {k: _clean(v, secrets) for k, v in value.items()}
        return _GONE if any(v is _GONE for v in items.values()) else items
    return value


def public_settings(settings: dict[str, Any], secrets: list[Secret]
                    ) -> tuple[dict[str, Any], list[str]]:
    """(the settings that may be published, the names of the options left out)."""
    kept, removed = {}, []
    for name, value in settings.items():
        if name in SERVER_OPTIONS and value not in (None, "", [], {}):
            removed.append(name)
            continue
        clean = _clean(value, secrets)
        if clean is _GONE:
            removed.append(name)
        else:
            kept[name] = clean
    return kept, removed


def _metadata_leaks(value: str, secrets: list[Secret]) -> bool:
    return bool(is_local_path(value) or EMBEDDED_PATH_RE.search(value) or
                TOKEN_RE.search(value) or any(s.text in value for s in secrets))


def clean_safetensors(src: Path, dst: Path, secrets: list[Secret]) -> list[str]:
    """Copy the safetensors file ``src`` to ``dst`` with the metadata entries that name a
    local path or hold a secret left out; return their keys. Raises ValueError for a file
    that is not safetensors."""
    with open(src, "rb") as f, open(dst, "wb") as out:
        head = f.read(8)
        if len(head) != 8:
            raise ValueError(f"{src.name}: not a safetensors file (shorter than its header)")
        size = struct.unpack("<Q", head)[0]
        if size > MAX_HEADER:
            raise ValueError(f"{src.name}: not a safetensors file (header of {size} bytes)")
        try:
            header = json.loads(f.read(size))
        except (UnicodeDecodeError, json.JSONDecodeError) as e:
            raise ValueError(f"{src.name}: not a safetensors file ({e})") from None
        if not isinstance(header, dict):
            raise ValueError(f"{src.name}: not a safetensors file (its header is no mapping)")
        meta = header.pop("__metadata__", None) or {}
        removed = sorted(k for k, v in meta.items() if _metadata_leaks(str(v), secrets))
        kept = {k: v for k, v in meta.items() if k not in removed}
        header = ({"__metadata__": kept} if kept else {}) | header
        data = json.dumps(header, separators=(",", ":")).encode("utf-8")
        data += b" " * (-len(data) % 8)  # the tensors stay 8-byte aligned
        out.write(struct.pack("<Q", len(data)))
        out.write(data)
        shutil.copyfileobj(f, out, 1 << 20)
    return removed


def clean_json(src: Path, dst: Path, secrets: list[Secret]) -> list[str]:
    """Copy the JSON file ``src`` to ``dst`` with the top-level entries that name a local
    path or hold a secret left out (anywhere in their value); return their keys. Raises
    ValueError for a file that is not a JSON mapping."""
    try:
        data = json.loads(Path(src).read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ValueError(f"{src.name}: not a JSON file ({e})") from None
    if not isinstance(data, dict):
        raise ValueError(f"{src.name}: not a JSON mapping")

    def leaky(value: Any) -> bool:
        if isinstance(value, str):
            return _metadata_leaks(value, secrets)
        if isinstance(value, dict):
            return any(leaky(v) for v in value.values())
        if isinstance(value, (list, tuple)):
            return any(leaky(v) for v in value)
        return False

    removed = sorted(k for k, v in data.items() if leaky(v))
    kept = {k: v for k, v in data.items() if k not in removed}
    Path(dst).write_text(json.dumps(kept, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    return removed


def leaks(folder: Path, secrets: list[Secret]) -> tuple[str, Msg] | None:
    """(a file's path in ``folder``, what it holds) for the first secret found in any byte
    of any file under ``folder``; None when none is."""
    needles = [(s.text.encode("utf-8"), s.what) for s in secrets]
    longest = max((len(n) for n, _ in needles), default=1)
    for path in sorted(p for p in Path(folder).rglob("*") if p.is_file()):
        tail = b""
        with open(path, "rb") as f:
            while True:
                block = f.read(1 << 20)
                if not block:
                    break
                window = tail + block
                for needle, what in needles:
                    if needle in window:
                        return path.relative_to(folder).as_posix(), what
                tail = window[-(longest - 1):] if longest > 1 else b""
    return None
