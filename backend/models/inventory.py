"""The models folder: what is in it, what each family still needs, and fetching that ahead of
a run (the Models tab, ``webui/tabs/models.py``, and the API's ``/list_models``,
``/download_models``, ``/delete_model``, ``/verify_model``).

``models_dir`` holds one folder per hub model id (``{models_dir}/{owner}/{name}``, as
``backend/models/hub.py`` resolves ``model_id:glob`` sources). For each:

- ``list_models(root)``: size on disk, its files, where it came from (``huggingface`` when
  huggingface_hub's own metadata is there, ``modelscope`` when ModelScope's is, else
  ``local``), and whether every ``model_id:glob`` that a family or variant reads from it is
  there (weights with the ``config.json`` beside them; a tokenizer or scheduler folder not
  empty), else which are missing and for whom;
- ``delete_model(root, model_id)``: removes that folder; only a folder inside ``root``, never
  through a link, never while it is being downloaded;
- ``verify_model(root, model_id)``: each downloaded file's size and hash against what the hub
  said when it was fetched (huggingface_hub's ``.cache/huggingface`` records: the tree
  listing's sizes, an LFS file's sha256, a small file's git blob id; for ModelScope the
  listing ZeroLoRA kept in ``.zerolora/manifest.json``).

``Downloads(record_dir).start(cfg, root, target)`` fetches the sources of a run config (a
family's defaults, a variant's, a preset's) that are not complete yet, through
``hub.resolve_source`` (the path a run's own stages take), in a background thread. Its
progress (bytes done of the total the hub lists, the speed) is a small JSON record in
``record_dir`` (the workspace's ``model_downloads/``) written twice a second, so a reloaded
page, the API and another browser read the same. Downloads resume: files already complete
are not fetched again, and a file cut mid-way continues from the bytes it has with a range
request (from Hugging Face file by file here, each into its own ``.incomplete`` file beside
huggingface_hub's records, through huggingface_hub's ``http_get``; from ModelScope through its
``snapshot_download``, which keeps unfinished files in ``._____temp``). A record left
``running`` by a server that stopped reads as ``interrupted``; starting the same target again
resumes it.

``Downloads.stop(download_id, user, admin)`` stops a running download between two chunks
(the check sits where the bytes are written: the partial file's ``write``, ModelScope's
progress callback): finished files and the partial one stay, the record says ``stopped``, and
Download resumes it. Only its starter or an admin may stop it.

Tokens come from the environment only (``HF_TOKEN``, ``MODELSCOPE_API_TOKEN``) and are never
written to a record.
"""
from __future__ import annotations

import collections
import fnmatch
import hashlib
import json
import os
import re
import secrets
import shutil
import threading
import time
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any, Callable

from backend.config.errors import ConfigError
from backend.config.schema import RunConfig
from backend.config.validation import validate
from backend.core import writegate
from backend.core.messages import Msg
from backend.families import family_names, family_spec
from backend.families.base import MODEL, PROCESSOR
from backend.models import hub
from backend.models.hub import HubError, Source

# A hub model id: ``owner/name`` (or one name), each part letters, digits, ``.``, ``_``, ``-``.
MODEL_ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*(/[A-Za-z0-9][A-Za-z0-9._-]*)?$")
HF_META = Path(".cache") / "huggingface"   # huggingface_hub's records inside a local_dir
MS_TEMP = "._____temp"                      # ModelScope's unfinished files
MS_MARKERS = (".msc", ".mdl", ".mv", MS_TEMP)
OWN = ".zerolora"                           # ZeroLoRA's listing of a ModelScope download
MANIFEST = "manifest.json"
PARTIAL_SUFFIX = ".incomplete"
TICK_S = 0.5          # how often a running download writes its record
STALE_S = 10.0        # a "running" record not updated for this long, by no thread here
SPEED_WINDOW_S = 5.0  # the speed shown: bytes over the last few seconds


class DownloadStopped(Exception):
    """Raised between two chunks of a download whose Stop was pressed."""


class InventoryError(RuntimeError):
    """A refusal (a model id, a delete, a download target); ``message`` is a ``Msg``."""

    def __init__(self, message: Msg):
        self.message = message
        super().__init__(message)


# ------------------------------------------------------------------------------------------
# What each family reads
# ------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Target:
    """Something to download ahead of a run: a family's default model or one of its
    variants (``key`` ``family:<name>[:<variant>]``), or a preset (``preset:<name>``)."""
    key: str
    title: str


def family_targets() -> list[Target]:
    """One target per family, and per variant where a family has several."""
    out = []
    for name in family_names():
        spec = family_spec(name)
        if len(spec.variants) <= 1:
            out.append(Target(f"family:{name}", spec.title))
        else:
            out += [Target(f"family:{name}:{v.name}", v.title) for v in spec.variants]
    return out


@lru_cache(maxsize=None)
def _family_config(key: str) -> RunConfig:
    _, name, variant = (key.split(":") + [""])[:3]
    spec = family_spec(name)
    var = spec.variant(variant) if variant else None
    return validate({"model_family": name, **(dict(var.defaults) if var else {})},
                    require_inputs=False)


def target_config(key: str, load_preset: Callable[[str], RunConfig] | None = None
                  ) -> RunConfig:
    """The run config whose sources ``key`` names; a preset through ``load_preset(name)``
    (the caller's presets, with its rules)."""
    kind, _, rest = str(key or "").partition(":")
    allowed = [t.key for t in family_targets()]
    if kind == "family" and key in allowed:
        return _family_config(key)
    if kind == "preset" and rest and load_preset is not None:
        try:
            return load_preset(rest)
        except (ConfigError, FileNotFoundError, ValueError) as e:
            raise InventoryError(Msg("models.dl_bad_preset", name=rest, why=str(e))) from None
    raise InventoryError(Msg("models.dl_unknown_target", got=str(key)))


def config_sources(cfg: RunConfig) -> list[Source]:
    """Every source a run of ``cfg`` reads: its ``model_id_with_origin_paths`` (or
    ``model_paths``), the tokenizer (``tokenizer_path``, else the family's) and scheduler of
    the family, and a processor whose model is among the sources (an image-to-video model's)."""
    sources = hub.parse_sources(cfg)
    spec = family_spec(cfg.model_family)
    named = {s.guess_component([c.name for c in spec.components]) for s in sources}
    ids = {s.model_id for s in sources if s.model_id}
    extra = []
    for comp in spec.components:
        if comp.kind == MODEL or comp.name in named or not comp.source:
            continue
        entry = cfg.tokenizer_path if comp.kind == "tokenizer" and cfg.tokenizer_path \
            else comp.source
        if comp.kind == PROCESSOR and entry.rsplit(":", 1)[0] not in ids:
            continue
        extra.append(entry)
    return sources + [hub.parse_spec(e, tokenizer=True) for e in dict.fromkeys(extra)]


@dataclass(frozen=True)
class Need:
    """A ``glob`` of a model folder that ``users`` (family or variant titles) read."""
    pattern: str
    users: tuple[str, ...]


@lru_cache(maxsize=1)
def family_needs() -> dict[str, tuple[Need, ...]]:
    """{model id: what the families read from it}, from every family target's sources."""
    found: dict[str, dict[str, list[str]]] = {}
    for target in family_targets():
        for src in config_sources(_family_config(target.key)):
            if src.model_id:
                users = found.setdefault(src.model_id, {}).setdefault(src.pattern, [])
                if target.title not in users:
                    users.append(target.title)
    return {mid: tuple(Need(p, tuple(u)) for p, u in pats.items())
            for mid, pats in found.items()}


# ------------------------------------------------------------------------------------------
# Listing
# ------------------------------------------------------------------------------------------
def models_root(models_dir: str | os.PathLike | None) -> Path:
    """The models folder: the server's (``--models-dir``), else the schema's default with
    ``ZEROLORA_MODELS_DIR`` (``hub.models_dir``)."""
    if models_dir:
        return Path(models_dir).expanduser().resolve()
    return hub.models_dir(RunConfig())


@dataclass
class ModelEntry:
    model_id: str
    source: str                      # huggingface | modelscope | local
    size: int                        # bytes on disk, hub records and unfinished files too
    files: list[tuple[str, int]]     # (relative path, bytes), hub records left out
    needs: tuple[Need, ...] = ()
    missing: list[Need] = field(default_factory=list)
    partial: int = 0                 # bytes of unfinished downloads
    link: bool = False               # the folder is a link (listed, never deleted)

    @property
    def status(self) -> str:
        if not self.needs:
            return "other"
        return "missing" if self.missing else "complete"

    def to_json(self) -> dict[str, Any]:
        return {"model_id": self.model_id, "source": self.source, "bytes": self.size,
                "files": [{"file": f, "bytes": n} for f, n in self.files],
                "status": self.status, "missing": [n.pattern for n in self.missing],
                "needed_by": sorted({u for n in self.needs for u in n.users}),
                "unfinished_bytes": self.partial, "link": self.link}


def _hidden(rel: Path) -> bool:
    return any(part.startswith(".") for part in rel.parts)


def _walk(folder: Path) -> tuple[int, list[tuple[str, int]], int]:
    """(bytes on disk, [(file, bytes)] without hub records, bytes of unfinished files);
    links inside are counted as links, never followed."""
    total, files, partial = 0, [], 0
    for dirpath, dirnames, filenames in os.walk(folder):
        dirnames.sort()
        for name in sorted(filenames):
            p = Path(dirpath) / name
            try:
                size = p.lstat().st_size
            except OSError:
                continue
            total += size
            rel = p.relative_to(folder)
            if name.endswith(PARTIAL_SUFFIX) or rel.parts[0] == MS_TEMP:
                partial += size
            elif not _hidden(rel):
                files.append((rel.as_posix(), size))
    return total, files, partial


def source_of(folder: Path) -> str:
    """Where a model folder's files came from, by the records its hub client left."""
    manifest = _read_json(folder / OWN / MANIFEST)
    if isinstance(manifest, dict) and manifest.get("source") in ("huggingface", "modelscope"):
        return manifest["source"]
    if (folder / HF_META).is_dir():
        return "huggingface"
    if any((folder / m).exists() for m in MS_MARKERS):
        return "modelscope"
    return "local"


def _model_folders(root: Path) -> list[str]:
    """Model ids with a folder under ``root``: ``owner/name`` folders, a one-level folder
    that holds files itself, and the ids the families name."""
    ids = set()
    if not root.is_dir():
        return []
    for owner in sorted(root.iterdir()):
        if owner.name.startswith(".") or not owner.is_dir():
            continue
        kids = [k for k in owner.iterdir() if not k.name.startswith(".")]
        if any(k.is_file() for k in kids):
            ids.add(owner.name)
            continue
        ids.update(f"{owner.name}/{k.name}" for k in kids if k.is_dir())
    return sorted(i for i in ids if MODEL_ID_RE.match(i))


def model_entry(root: Path, model_id: str) -> ModelEntry:
    folder = root / model_id
    size, files, partial = _walk(folder)
    needs = family_needs().get(model_id, ())
    missing = []
    for need in needs:
        try:
            src = Source(f"{model_id}:{need.pattern}", model_id, need.pattern)
            complete = hub.local_state(folder, src)[1]
        except HubError:
            complete = False
        if not complete:
            missing.append(need)
    return ModelEntry(model_id, source_of(folder), size, files, needs, missing, partial,
                      folder.is_symlink())


def list_models(root: Path) -> list[ModelEntry]:
    """Every model folder under ``root`` with its size, files, source and status."""
    return [model_entry(root, mid) for mid in _model_folders(root)]


def source_states(root: Path, cfg: RunConfig) -> list[tuple[Source, bool]]:
    """(source, complete in ``root``) for every hub source of ``cfg``; a local path is
    complete when it exists."""
    out = []
    for src in config_sources(cfg):
        if src.model_id is None:
            out.append((src, src.path is not None and src.path.exists()))
            continue
        try:
            out.append((src, hub.local_state(root / src.model_id, src)[1]))
        except HubError:
            out.append((src, False))
    return out


# ------------------------------------------------------------------------------------------
# Delete
# ------------------------------------------------------------------------------------------
def model_folder(root: Path, model_id: str) -> Path:
    """The folder of ``model_id`` inside ``root``, refused when the id is not one, when any
    part of the way is a link, or when it leads outside ``root``."""
    model_id = str(model_id or "").strip()
    if not MODEL_ID_RE.match(model_id) or ".." in model_id.split("/"):
        raise InventoryError(Msg("models.bad_id", got=model_id))
    real_root = Path(os.path.realpath(root))
    folder = Path(root)
    for part in model_id.split("/"):
        folder = folder / part
        if folder.is_symlink():
            raise InventoryError(Msg("models.is_link", id=model_id))
    if not folder.is_dir():
        raise InventoryError(Msg("models.not_found", id=model_id))
    real = Path(os.path.realpath(folder))
    if real == real_root or real_root not in real.parents:
        raise InventoryError(Msg("models.outside", id=model_id))
    return folder


def delete_model(root: Path, model_id: str, busy: set[str] = frozenset()) -> int:
    """Remove ``model_id``'s folder from ``root`` (never through a link; links inside are
    removed as links); returns the bytes freed. ``busy``: ids being downloaded (refused)."""
    folder = model_folder(root, model_id)
    if model_id in busy:
        raise InventoryError(Msg("models.busy", id=model_id))
    size = _walk(folder)[0]
    shutil.rmtree(folder)
    owner = folder.parent
    if owner != Path(root) and not owner.is_symlink() and not any(owner.iterdir()):
        owner.rmdir()
    return size


# ------------------------------------------------------------------------------------------
# Verify
# ------------------------------------------------------------------------------------------
@dataclass
class Verified:
    model_id: str
    basis: str | None          # huggingface | modelscope | None (nothing to check against)
    checked: int = 0
    problems: list[Msg] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.basis is not None and not self.problems

    def summary(self) -> Msg:
        if self.basis is None:
            return Msg("models.verify_none", id=self.model_id)
        if self.problems:
            return Msg("models.verify_bad", id=self.model_id, n=len(self.problems),
                       total=self.checked)
        return Msg("models.verify_ok", id=self.model_id, n=self.checked)

    def to_json(self) -> dict[str, Any]:
        return {"model_id": self.model_id, "basis": self.basis, "checked": self.checked,
                "ok": self.ok, "summary": str(self.summary()),
                "problems": [str(p) for p in self.problems]}


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def _hub_records(folder: Path) -> dict[str, dict[str, Any]]:
    """{file: {size, sha256, git_sha1}} as huggingface_hub recorded them for the files it
    downloaded into ``folder`` (``.cache/huggingface/download/<file>.metadata``: commit and
    etag; ``trees/<commit>.json``: sizes and hashes)."""
    meta_dir = folder / HF_META / "download"
    out: dict[str, dict[str, Any]] = {}
    trees: dict[str, Any] = {}
    if not meta_dir.is_dir():
        return out
    for meta in sorted(meta_dir.rglob("*.metadata")):
        rel = meta.relative_to(meta_dir).as_posix()[:-len(".metadata")]
        try:
            commit, etag = meta.read_text(encoding="utf-8").splitlines()[:2]
        except (OSError, ValueError):
            continue
        if commit not in trees:
            data = _read_json(folder / HF_META / "trees" / f"{commit}.json")
            trees[commit] = (data or {}).get("files", {}) if isinstance(data, dict) else {}
        entry = trees[commit].get(rel, {})
        etag = etag.strip().strip('"')
        rec: dict[str, Any] = {"size": entry.get("size")}
        if entry.get("lfs_sha256") or re.fullmatch(r"[0-9a-f]{64}", etag):
            rec["sha256"] = entry.get("lfs_sha256") or etag
        elif entry.get("blob_id") or re.fullmatch(r"[0-9a-f]{40}", etag):
            rec["git_sha1"] = entry.get("blob_id") or etag
        out[rel] = rec
    return out


def _digest(path: Path, algo: str) -> str:
    h = hashlib.sha256() if algo == "sha256" else hashlib.sha1()
    with open(path, "rb") as f:
        if algo == "git_sha1":
            h.update(b"blob %d\0" % os.fstat(f.fileno()).st_size)
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def verify_model(root: Path, model_id: str) -> Verified:
    """Each file the hub listed against what is on disk: present, its size, its hash."""
    folder = model_folder(root, model_id)
    records = _hub_records(folder)
    basis = "huggingface" if records else None
    if not records:
        manifest = _read_json(folder / OWN / MANIFEST)
        if isinstance(manifest, dict) and isinstance(manifest.get("files"), dict):
            records = {str(k): v for k, v in manifest["files"].items() if isinstance(v, dict)}
            basis = str(manifest.get("source") or "modelscope")
    out = Verified(model_id, basis if records else None)
    for rel, rec in sorted(records.items()):
        p = folder / rel
        out.checked += 1
        if ".." in Path(rel).parts or not p.is_file() or p.is_symlink():
            out.problems.append(Msg("models.verify_missing", file=rel))
            continue
        size = p.stat().st_size
        if rec.get("size") is not None and size != int(rec["size"]):
            out.problems.append(Msg("models.verify_size", file=rel, got=size,
                                    want=int(rec["size"])))
            continue
        for algo in ("sha256", "git_sha1"):
            if rec.get(algo) and _digest(p, algo) != str(rec[algo]).lower():
                out.problems.append(Msg("models.verify_hash", file=rel, algo=algo))
                break
    return out


# ------------------------------------------------------------------------------------------
# Download
# ------------------------------------------------------------------------------------------
def offline_reason(cfg: RunConfig) -> str | None:
    """Why nothing may be downloaded for ``cfg`` (the option or variable that says so)."""
    if cfg.offline:
        return "offline"
    names = ["HF_HUB_OFFLINE"] if cfg.download_source == "huggingface" else []
    for name in names + ["ZEROLORA_OFFLINE"]:
        if os.environ.get(name, "").strip().lower() in ("1", "true", "yes", "on"):
            return f"{name}=1"
    return None


def remote_files(cfg: RunConfig, model_id: str, patterns: list[str]
                 ) -> dict[str, dict[str, Any]]:
    """{file: {size, sha256?}} of ``model_id``'s files matching ``patterns`` as the hub lists
    them (``download_source``; ``hub_endpoint`` when set)."""
    endpoint = cfg.hub_endpoint or None
    out: dict[str, dict[str, Any]] = {}
    if cfg.download_source == "huggingface":
        from huggingface_hub import HfApi
        from huggingface_hub.hf_api import RepoFile

        api = HfApi(endpoint=endpoint, token=os.environ.get("HF_TOKEN") or None)
        for f in api.list_repo_tree(model_id, recursive=True):
            if isinstance(f, RepoFile):
                out[f.path] = {"size": int(f.size or 0),
                               "sha256": f.lfs.sha256 if f.lfs is not None else None}
    else:
        from modelscope.hub.api import HubApi

        api = HubApi(endpoint=endpoint, token=os.environ.get("MODELSCOPE_API_TOKEN") or None)
        for f in api.get_model_files(model_id, recursive=True):
            if f.get("Type", "blob") != "tree" and f.get("Path"):
                out[str(f["Path"])] = {"size": int(f.get("Size") or 0),
                                       "sha256": f.get("Sha256") or None}
    return {p: v for p, v in out.items() if any(fnmatch.fnmatch(p, pat) for pat in patterns)}


def _write_manifest(folder: Path, source: str, files: dict[str, dict[str, Any]]) -> None:
    """Keep what the hub listed for a ModelScope download (huggingface_hub keeps its own)."""
    path = folder / OWN / MANIFEST
    old = _read_json(path)
    known = old.get("files", {}) if isinstance(old, dict) else {}
    writegate.atomic_write(path, json.dumps({"source": source, "files": {**known, **files}},
                                            indent=1, sort_keys=True))


class _CheckedFile:
    """A partial file whose ``write`` first calls ``check`` (which raises to stop): a stop
    lands between two chunks, and every byte written before it stays on disk."""

    def __init__(self, f, check: Callable[[], None]):
        self._f, self._check = f, check

    def write(self, data: bytes) -> int:
        self._check()
        return self._f.write(data)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._f, name)


def hf_partial(folder: Path, rel: str, etag: str) -> Path:
    """Where a file from Hugging Face collects its bytes until it is complete: beside
    huggingface_hub's records of the folder, named for the file and the hub's version of it
    (a changed file never continues another version's bytes)."""
    return folder / HF_META / "download" / f"{rel}.{etag[:16]}{PARTIAL_SUFFIX}"


def fetch_hf_files(cfg: RunConfig, model_id: str, files: dict[str, dict[str, Any]],
                   folder: Path, check: Callable[[], None]) -> None:
    """Fetch ``files`` (as ``remote_files`` lists them) of ``model_id`` from Hugging Face into
    ``folder``, one after the other, each continuing from the bytes its partial file holds
    (a range request) and moved into place when complete, with huggingface_hub's record
    beside it (commit and etag: what ``verify_model`` checks and what huggingface_hub reads
    to know the file is current). ``check()`` runs before every chunk is written and raises
    ``DownloadStopped`` to stop. A file that fails does not stop the others; the first
    failure is raised at the end."""
    from huggingface_hub import get_hf_file_metadata, hf_hub_url
    from huggingface_hub.file_download import http_get
    from huggingface_hub.utils import build_hf_headers

    token = os.environ.get("HF_TOKEN") or None
    failed: list[Exception] = []
    for rel, info in files.items():
        dest = folder / rel
        if ".." in Path(rel).parts or (dest.is_file() and not dest.is_symlink()
                                       and dest.stat().st_size == info["size"]):
            continue
        check()
        try:
            meta = get_hf_file_metadata(hf_hub_url(model_id, rel,
                                                   endpoint=cfg.hub_endpoint or None),
                                        token=token)
            etag = (meta.etag or "").strip('"')
            partial = hf_partial(folder, rel, etag or "unknown")
            partial.parent.mkdir(parents=True, exist_ok=True)
            have = partial.stat().st_size if partial.is_file() else 0
            if meta.size is not None and have > meta.size:
                partial.unlink()
                have = 0
            with open(partial, "ab") as f:
                http_get(meta.location, _CheckedFile(f, check), resume_size=have,
                         headers=build_hf_headers(token=token), expected_size=meta.size,
                         displayed_filename=rel)
            dest.parent.mkdir(parents=True, exist_ok=True)
            os.replace(partial, dest)
            record = folder / HF_META / "download" / f"{rel}.metadata"
            record.write_text(f"{meta.commit_hash}\n{etag}\n{time.time()}\n",
                              encoding="utf-8")
        except DownloadStopped:
            raise
        except Exception as e:  # noqa: BLE001 - network, auth: the others still come
            failed.append(e)
    if failed:
        raise failed[0]


def _unfinished(folder: Path) -> int:
    total = 0
    for dirpath, _, filenames in os.walk(folder):
        under_temp = MS_TEMP in Path(dirpath).relative_to(folder).parts
        for name in filenames:
            if under_temp or name.endswith(PARTIAL_SUFFIX):
                try:
                    total += (Path(dirpath) / name).lstat().st_size
                except OSError:
                    pass
    return total


@dataclass
class _Job:
    record: dict[str, Any]
    path: Path
    root: Path
    files: dict[str, dict[str, dict[str, Any]]] = field(default_factory=dict)
    samples: collections.deque = field(default_factory=lambda: collections.deque(maxlen=64))
    finished: threading.Event = field(default_factory=threading.Event)
    stop: threading.Event = field(default_factory=threading.Event)

    def check(self) -> None:
        """Raise ``DownloadStopped`` once Stop was pressed (called between chunks)."""
        if self.stop.is_set():
            raise DownloadStopped()


_LOCK = threading.Lock()
_RUNNING: dict[str, _Job] = {}  # download id -> job, in this process


class Downloads:
    """The downloads of one workspace: progress records in ``record_dir``, one running at a
    time (each writes only its own model folders)."""

    def __init__(self, record_dir: str | os.PathLike):
        self.dir = Path(record_dir)

    # ---------------------------------------------------------------- records
    def _path(self, download_id: str) -> Path:
        if not re.fullmatch(r"[0-9]{8}-[0-9]{6}-[0-9a-f]{6}", str(download_id or "")):
            raise InventoryError(Msg("models.dl_unknown", got=str(download_id)))
        return self.dir / f"{download_id}.json"

    def record(self, download_id: str) -> dict[str, Any] | None:
        """The download's progress record as the page shows it (``interrupted``: it was
        running in a server that is gone)."""
        data = _read_json(self._path(download_id))
        if not isinstance(data, dict):
            return None
        if data.get("status") == "running" and download_id not in _RUNNING and \
                time.time() - float(data.get("updated_at") or 0) > STALE_S:
            data["status"] = "interrupted"
        return data

    def latest(self) -> dict[str, Any] | None:
        if not self.dir.is_dir():
            return None
        ids = sorted(p.stem for p in self.dir.glob("*.json"))
        for download_id in reversed(ids):
            try:
                rec = self.record(download_id)
            except InventoryError:
                continue
            if rec is not None:
                return rec
        return None

    def busy(self) -> set[str]:
        """Model ids a download of this process is writing now."""
        with _LOCK:
            return {m for job in _RUNNING.values() for m in job.record.get("model_ids", [])}

    def _write(self, job: _Job) -> None:
        job.record["updated_at"] = time.time()
        writegate.atomic_write(job.path, json.dumps(job.record, indent=1))

    # ---------------------------------------------------------------- start
    def start(self, cfg: RunConfig, root: Path, target: str, title: str,
              owner: str | None = None, wait: bool = False) -> dict[str, Any]:
        """Download what ``cfg``'s sources still lack into ``root``; returns its record
        (``wait``: when it has ended)."""
        why = offline_reason(cfg)
        if why:
            raise InventoryError(Msg("models.dl_offline", why=why))
        cfg = cfg.model_copy(update={"models_dir": str(root), "offline": False})
        todo = [src for src, done in source_states(root, cfg) if not done and src.model_id]
        for src in todo:  # a model id leads into root only (a preset may name any)
            if not MODEL_ID_RE.match(src.model_id) or ".." in src.model_id.split("/"):
                raise InventoryError(Msg("models.bad_id", got=src.model_id))
        with _LOCK:
            for job in _RUNNING.values():
                raise InventoryError(Msg("models.dl_running", target=job.record["title"]))
            download_id = time.strftime("%Y%m%d-%H%M%S") + "-" + secrets.token_hex(3)
            record = {"id": download_id, "target": target, "title": title,
                      "source": cfg.download_source, "owner": owner,
                      "model_ids": sorted({s.model_id for s in todo}),
                      "status": "running", "bytes_done": 0, "bytes_total": None,
                      "speed": 0.0, "current": None, "started_at": time.time(),
                      "ended_at": None, "message": None}
            job = _Job(record, self._path(download_id), root)
            if not todo:
                record.update(status="succeeded", bytes_total=0, ended_at=time.time(),
                              message=Msg("models.dl_nothing", target=title).to_json())
                self._write(job)
                return dict(record)
            _RUNNING[download_id] = job
        self._write(job)
        worker = threading.Thread(target=self._run, args=(job, cfg, todo), daemon=True,
                                  name=f"model-download-{download_id}")
        worker.start()
        threading.Thread(target=self._watch, args=(job,), daemon=True,
                         name=f"model-download-progress-{download_id}").start()
        if wait:
            worker.join()
            job.finished.wait(5 * TICK_S + 5)
        return dict(job.record)

    # ---------------------------------------------------------------- stop
    def stop(self, download_id: str, user: str | None = None, admin: bool = True
             ) -> dict[str, Any]:
        """Ask the running download ``download_id`` (empty: the latest) to stop at its next
        chunk; ``user`` may when ``admin`` or when they started it. Returns its record."""
        rec = self.record(download_id) if download_id else self.latest()
        if rec is None:
            raise InventoryError(Msg("models.dl_unknown", got=str(download_id)))
        with _LOCK:
            job = _RUNNING.get(rec["id"])
        if job is None or job.record["status"] != "running":
            raise InventoryError(Msg("models.dl_not_running", target=str(rec.get("title")),
                                     status=str(rec.get("status"))))
        if not admin and job.record.get("owner") != user:
            raise InventoryError(Msg("models.dl_stop_not_yours", target=job.record["title"]))
        job.record["stop_requested_by"] = user
        job.stop.set()
        return dict(job.record)

    # ---------------------------------------------------------------- the work
    def _run(self, job: _Job, cfg: RunConfig, todo: list[Source]) -> None:
        rec = job.record
        try:
            by_id: dict[str, list[Source]] = {}
            for src in todo:
                by_id.setdefault(src.model_id, []).append(src)
            for model_id, sources in by_id.items():
                patterns = [p for s in sources for p in hub.download_patterns(s)]
                job.check()
                try:
                    job.files[model_id] = remote_files(cfg, model_id, patterns)
                except Exception as e:  # noqa: BLE001 - network, auth, unknown repo
                    raise InventoryError(Msg("models.dl_listing_failed", id=model_id,
                                             source=cfg.download_source,
                                             why=_one_line(e))) from None
            rec["bytes_total"] = sum(f["size"] for files in job.files.values()
                                     for f in files.values())
            for model_id, sources in by_id.items():
                job.check()
                rec["current"] = model_id
                if cfg.download_source == "huggingface":
                    fetch_hf_files(cfg, model_id, job.files[model_id], job.root / model_id,
                                   job.check)
                for src in sources:  # what is there now is used; ModelScope fetches the rest
                    hub.resolve_source(cfg, src, check=job.check)
                if cfg.download_source != "huggingface":
                    _write_manifest(job.root / model_id, cfg.download_source,
                                    job.files[model_id])
            rec["bytes_done"] = self._bytes(job)
            rec.update(status="succeeded", message=Msg(
                "models.dl_done", target=rec["title"], size=size_text(rec["bytes_total"]),
                seconds=round(time.time() - rec["started_at"])).to_json())
        except Exception as e:  # noqa: BLE001 - HubError and the clients' own errors
            if job.stop.is_set():  # DownloadStopped, or a client's error wrapping it
                rec.update(status="stopped", message=Msg(
                    "models.dl_stopped", target=rec["title"]).to_json())
            elif isinstance(e, InventoryError):
                rec.update(status="failed", message=e.message.to_json())
            else:
                rec.update(status="failed", message=Msg("models.dl_failed",
                                                        why=_one_line(e)).to_json())
        finally:
            rec["ended_at"] = time.time()
            with _LOCK:
                _RUNNING.pop(rec["id"], None)

    def _bytes(self, job: _Job) -> int:
        done = 0
        for model_id, files in job.files.items():
            folder = job.root / model_id
            for rel, info in files.items():
                try:
                    done += min((folder / rel).stat().st_size, info["size"])
                except OSError:
                    pass
            done += _unfinished(folder)
        total = job.record.get("bytes_total")
        return min(done, total) if total else done

    def _watch(self, job: _Job) -> None:
        """Twice a second: bytes on disk and the speed into the record, until the work ends."""
        rec = job.record
        try:
            while True:
                ended = rec["status"] != "running"
                if job.files:
                    now, done = time.monotonic(), self._bytes(job)
                    rec["bytes_done"] = done
                    job.samples.append((now, done))
                    old = next((s for s in job.samples if now - s[0] <= SPEED_WINDOW_S),
                               job.samples[0])
                    rec["speed"] = (done - old[1]) / (now - old[0]) if now > old[0] else 0.0
                self._write(job)
                if ended:
                    return
                time.sleep(TICK_S)
        finally:
            job.finished.set()


def size_text(n: float | None) -> str:
    """Bytes as people read them (``B``, ``KiB`` ... ``TiB``)."""
    n = float(n or 0)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TiB"  # pragma: no cover


def _one_line(e: BaseException) -> str:
    text = " ".join(str(e).split())[:300]
    return f"{type(e).__name__}: {text}" if text else type(e).__name__


def progress_fraction(rec: dict[str, Any] | None) -> float:
    if not rec:
        return 0.0
    if rec.get("status") == "succeeded":
        return 1.0
    total = rec.get("bytes_total") or 0
    return min(1.0, (rec.get("bytes_done") or 0) / total) if total else 0.0
