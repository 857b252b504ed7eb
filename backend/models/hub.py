"""Model files: where they live, fetching the missing ones, and which component is which.

Sources, as in the reference trainer:

- ``model_id_with_origin_paths``: comma-separated ``model_id:glob`` (split at the LAST colon),
  resolved as ``{models_dir}/{model_id}/{glob}``. A glob ending in ``/`` means a whole folder
  (tokenizers). An entry that is an existing local path is used as that path.
- ``model_paths``: a JSON list of local files (an element may be a list of shards).

``models_dir`` is the ``models_dir`` option; when that is left at its default, the
``ZEROLORA_MODELS_DIR`` environment variable replaces it. Missing files are downloaded from
ModelScope (default) or Hugging Face (``download_source``; ``hub_endpoint`` is a mirror);
files already present are used as they are and nothing touches the network. With
``offline`` a missing file is an error naming it. Tokens come only from the environment
(``MODELSCOPE_API_TOKEN``, ``HF_TOKEN``) and are never written or logged.

A component is recognised by the ``config.json`` beside its weights (``_class_name`` for
diffusers models, ``architectures`` for transformers models, as the family's components
declare them), tokenizers by ``tokenizer_config.json``, schedulers by
``scheduler_config.json``, so tiny test models and real ones load through the same code.
"""
from __future__ import annotations

import glob as globlib
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable

from backend.core import readgate
from backend.core.messages import Msg
from backend.config.schema import MODELS_DIR_ENV, RunConfig
from backend.families import family_spec
from backend.families.base import MODEL, SCHEDULER, TOKENIZER


# A tokenizer at a repository's root (``model_id:./``): the files fetched, never weights
ROOT_FILES = ("*.json", "*.txt", "*.model", "*.tiktoken", "*.jinja")


class HubError(RuntimeError):
    """Model files that cannot be found, fetched or recognised (the message names them)."""


@dataclass(frozen=True)
class Source:
    spec: str                      # as written by the user
    model_id: str | None = None    # hub model id (None for a local path)
    pattern: str | None = None     # glob relative to {models_dir}/{model_id}
    path: Path | None = None       # local file or folder

    @property
    def is_folder_pattern(self) -> bool:
        return bool(self.pattern) and self.pattern.endswith("/")

    root_files_only: bool = False  # a tokenizer at the repository's root: no weights

    @property
    def is_root(self) -> bool:
        """A tokenizer kept at a repository's root (``model_id:./``; the reference writes
        ``model_id:``): the root folder's files, not its weights."""
        return self.root_files_only

    def guess_component(self, components: Iterable[str]) -> str | None:
        """The component a pattern names by its first folder (``transformer/...``)."""
        if not self.pattern:
            return None
        head = self.pattern.strip("/").split("/")[0]
        return head if head in set(components) else None


# ------------------------------------------------------------------------------------------
# Parsing
# ------------------------------------------------------------------------------------------
def models_dir(cfg: RunConfig) -> Path:
    default = RunConfig.model_fields["models_dir"].default
    value = cfg.models_dir
    at_default = value in (default, "models") or Path(value).resolve() == Path(default).resolve()
    if at_default and os.environ.get(MODELS_DIR_ENV):
        value = os.environ[MODELS_DIR_ENV]
    return Path(value).expanduser().resolve()


def parse_spec(spec: str, tokenizer: bool = False) -> Source:
    """One ``model_id:glob`` entry, or an existing local path. A ``tokenizer`` at the
    repository's root (``model_id:./``, or the reference's ``model_id:``) is the root
    folder's files without the weights beside them."""
    spec = spec.strip()
    local = Path(spec).expanduser()
    if local.exists():
        return Source(spec, path=local.resolve())
    if ":" not in spec:
        raise HubError(Msg("hub.bad_spec", spec=repr(spec)))
    model_id, pattern = spec.rsplit(":", 1)
    if model_id and tokenizer and pattern.strip() in ("", ".", "./"):
        return Source(spec, model_id=model_id, pattern="./", root_files_only=True)
    if not model_id or not pattern:
        raise HubError(Msg("hub.spec_no_glob", spec=repr(spec)))
    return Source(spec, model_id=model_id, pattern=pattern)


def parse_sources(cfg: RunConfig) -> list[Source]:
    """The model sources of a config: ``model_paths`` if given, else
    ``model_id_with_origin_paths``."""
    if cfg.model_paths:
        entries = json.loads(cfg.model_paths)
        out, missing = [], []
        for entry in entries:
            for p in (entry if isinstance(entry, list) else [entry]):
                path = Path(str(p)).expanduser()
                if not path.exists():
                    missing.append(str(p))
                else:
                    out.append(Source(str(p), path=path.resolve()))
        if missing:
            raise HubError(Msg("hub.paths_missing", files=missing))
        return out
    sources, notes = family_spec(cfg.model_family).map_reference_sources(
        cfg.model_id_with_origin_paths)
    for note in notes:
        if note not in _SAID:  # once per process
            _SAID.add(note)
            print(f"[hub] {note}", flush=True)
    specs = [s for s in (sources or "").split(",") if s.strip()]
    return [parse_spec(s) for s in specs]


_SAID: set[str] = set()


# ------------------------------------------------------------------------------------------
# Resolving (and downloading what is missing)
# ------------------------------------------------------------------------------------------
def _user() -> str:
    try:
        import pwd
        return pwd.getpwuid(os.geteuid()).pw_name
    except (ImportError, KeyError, AttributeError):
        return "this user"


def unreadable(path: Path, what: str = "reading") -> HubError:
    return HubError(Msg("hub.unreadable", what=what, path=str(path), user=_user()))


def check_readable(path: Path) -> None:
    """Raise HubError naming ``path`` when it exists but cannot be read: a folder that
    cannot be listed, a file whose first byte cannot be read (never reported as missing)."""
    try:
        if path.is_dir():
            os.listdir(path)
        elif path.exists():
            with open(path, "rb") as f:
                f.read(1)
    except PermissionError:
        raise unreadable(path, "listing" if path.is_dir() else "reading") from None


def _local_matches(base: Path, src: Source) -> list[Path]:
    # A folder on the way that exists but cannot be listed hides its files from the glob:
    # say so instead of calling them missing.
    folder = base
    check_readable(folder)
    for part in Path(src.pattern.rstrip("/")).parts[:-1] if not src.is_folder_pattern else \
            Path(src.pattern.rstrip("/")).parts:
        folder = folder / part
        if any(ch in part for ch in "*?["):
            break
        check_readable(folder)
    if src.is_root:
        return [base] if any(p.is_file() for g in ROOT_FILES for p in base.glob(g)) else []
    if src.is_folder_pattern:
        folder = base / src.pattern
        return [folder] if folder.is_dir() and any(folder.iterdir()) else []
    return [Path(p) for p in sorted(globlib.glob(str(base / src.pattern)))]


def _complete(paths: list[Path], src: Source) -> bool:
    """Files matched and, for weight files, a config beside them."""
    if not paths:
        return False
    if src.is_folder_pattern:
        return True
    return all((p.parent / "config.json").is_file() or p.suffix == ".json" for p in paths)


def _allow_patterns(src: Source) -> list[str]:
    if src.is_root:
        return list(ROOT_FILES)
    if src.is_folder_pattern:
        return [src.pattern.rstrip("/") + "/*"]
    folder = os.path.dirname(src.pattern)
    return [src.pattern, f"{folder}/*.json" if folder else "*.json"]


def local_state(base: Path, src: Source) -> tuple[list[Path], bool]:
    """(the files of hub source ``src`` already in its model folder ``base``, whether they
    are complete); never downloads (the Models tab, ``backend/models/inventory.py``)."""
    found = _local_matches(base, src)
    return found, _complete(found, src)


def download_patterns(src: Source) -> list[str]:
    """The hub file patterns ``resolve_source`` downloads for ``src``."""
    return _allow_patterns(src)


def download(cfg: RunConfig, model_id: str, allow_patterns: list[str], local_dir: Path,
             check: Callable[[], None] | None = None) -> None:
    """Fetch files of ``model_id`` matching ``allow_patterns`` into ``local_dir``.
    ``check()`` (ModelScope: at each chunk, through its progress callback) raises to stop;
    the unfinished file stays for the next download to continue."""
    local_dir.mkdir(parents=True, exist_ok=True)
    if cfg.download_source == "huggingface":
        from huggingface_hub import snapshot_download
        kwargs = {"endpoint": cfg.hub_endpoint} if cfg.hub_endpoint else {}
        snapshot_download(model_id, allow_patterns=allow_patterns, local_dir=str(local_dir),
                          token=os.environ.get("HF_TOKEN") or None, **kwargs)
    else:
        from modelscope import snapshot_download
        from modelscope.hub.callback import ProgressCallback
        kwargs = {"endpoint": cfg.hub_endpoint} if cfg.hub_endpoint else {}
        if check is not None:
            class Checked(ProgressCallback):
                def update(self, size: int) -> None:
                    check()

            kwargs["progress_callbacks"] = [Checked]
        snapshot_download(model_id, allow_patterns=allow_patterns, local_dir=str(local_dir),
                          token=os.environ.get("MODELSCOPE_API_TOKEN") or None, **kwargs)


def resolve_source(cfg: RunConfig, src: Source,
                   check: Callable[[], None] | None = None) -> list[Path]:
    """Local files (or one folder) for a source, downloading them when missing (``check``:
    see ``download``)."""
    if src.path is not None:
        check_readable(src.path)
        return [src.path]
    base = models_dir(cfg) / src.model_id
    found = _local_matches(base, src)
    for p in found:
        check_readable(p)
        if p.is_file():
            check_readable(p.parent / "config.json")
    if _complete(found, src):
        return found
    where = base / src.pattern
    if cfg.offline:
        raise HubError(Msg("hub.offline_missing", spec=src.spec, where=str(where),
                           env=MODELS_DIR_ENV))
    try:
        download(cfg, src.model_id, _allow_patterns(src), base, check)
    except Exception as e:  # network, auth, unknown repo: one clear line
        reason = " ".join(str(e).split())[:300]
        raise HubError(Msg("hub.download_failed", spec=src.spec, source=cfg.download_source,
                           folder=str(base), why=f"{type(e).__name__}: {reason}")) from e
    found = _local_matches(base, src)
    if not _complete(found, src):
        raise HubError(Msg("hub.nothing_after_download", spec=src.spec,
                           source=cfg.download_source, where=str(where)))
    return found


# ------------------------------------------------------------------------------------------
# Components
# ------------------------------------------------------------------------------------------
def identify_folder(folder: Path, classes: dict[str, str],
                    kinds: dict[str, str] | None = None) -> str | None:
    """Which component a folder holds, read from its config files: a model by its class
    (``classes``: class name -> component), a scheduler or tokenizer by its config file
    (``kinds``: kind -> component; default the kinds' own names)."""
    kinds = kinds or {SCHEDULER: "scheduler", TOKENIZER: "tokenizer"}
    cfg_file = folder / "config.json"
    if cfg_file.is_file():
        try:
            data = json.loads(cfg_file.read_text(encoding="utf-8"))
        except PermissionError:
            raise unreadable(cfg_file) from None
        except (OSError, ValueError):
            data = {}
        names = [data.get("_class_name")] + list(data.get("architectures") or [])
        for name in names:
            if name in classes:
                return classes[name]
    if (folder / "scheduler_config.json").is_file() and SCHEDULER in kinds:
        return kinds[SCHEDULER]
    if ((folder / "tokenizer_config.json").is_file() or (folder / "tokenizer.json").is_file()
            ) and TOKENIZER in kinds:
        return kinds[TOKENIZER]
    return None


def _folders_of(paths: Iterable[Path]) -> list[Path]:
    """Component folders for resolved paths; a pipeline folder expands to its subfolders."""
    out: list[Path] = []
    for p in paths:
        if p.is_dir() and (p / "model_index.json").is_file():
            out += sorted(d for d in p.iterdir() if d.is_dir())
        elif p.is_dir():
            out.append(p)
        else:
            out.append(p.parent)
    seen, unique = set(), []
    for f in out:
        if f not in seen:
            seen.add(f)
            unique.append(f)
    return unique


def _resolve_extra(cfg: RunConfig, spec: str | None, default: str, sibling: Path | None
                   ) -> Path:
    """Tokenizer / scheduler folder: the given spec; else the same pipeline's sibling folder;
    else ``default`` (a ``model_id:folder/`` resolved like the other files)."""
    if not spec and sibling is not None and sibling.is_dir():
        return sibling
    src = parse_spec(spec or default, tokenizer=True)
    found = resolve_source(cfg, src)
    return found[0] if found[0].is_dir() else found[0].parent


def resolve_component_dirs(cfg: RunConfig, components: Iterable[str]) -> dict[str, Path]:
    """Map each requested component of the config's family (``transformer``,
    ``text_encoder``, ``vae``, ``tokenizer``, ``scheduler``... as its ``FamilySpec`` lists
    them) to a local folder, downloading only what is missing (and never when offline).
    Sources that name a component not requested (by their first folder, e.g.
    ``text_encoder/...`` in stage 2) are not fetched. A tokenizer or scheduler without a
    source of its own is the folder of that name beside a model component found in the
    same pipeline, else the family's default source; ``tokenizer_path`` overrides."""
    spec = family_spec(cfg.model_family)
    names = [c.name for c in spec.components]
    wanted = list(dict.fromkeys(components))
    bad = [c for c in wanted if c not in names]
    if bad:
        raise ValueError(f"unknown components {bad}; allowed {names}")
    classes = spec.class_map()
    kinds = {c.kind: c.name for c in spec.components if c.kind != MODEL}

    found: dict[str, Path] = {}
    unrecognised: list[str] = []
    for src in parse_sources(cfg):
        guess = src.guess_component(names)
        if guess is not None and guess not in wanted:
            continue  # e.g. text_encoder/... in stage 2: not needed, not fetched
        for folder in _folders_of(resolve_source(cfg, src)):
            check_readable(folder)
            comp = identify_folder(folder, classes, kinds)
            if comp is None:
                unrecognised.append(str(folder))
            elif comp not in found:
                found[comp] = folder
    models = [c.name for c in spec.components if c.kind == MODEL]
    result: dict[str, Path] = {}
    missing = []
    for comp in wanted:
        kind = spec.component(comp).kind
        if kind == MODEL:
            if comp in found:
                result[comp] = found[comp]
            else:
                missing.append(comp)
            continue
        given = cfg.tokenizer_path if kind == TOKENIZER else None
        if comp in found and not given:
            result[comp] = found[comp]
            continue
        siblings = [found[m].parent / comp for m in models if m in found]
        sibling = next((p for p in siblings if p.is_dir()), None)
        result[comp] = _resolve_extra(cfg, given, spec.default_source(comp), sibling)
    if missing:
        seen = [f"{k}={v}" for k, v in found.items()]
        example = spec.default_source(missing[0]) or f"org/model:{missing[0]}/*.safetensors"
        raise HubError(Msg("hub.components_missing", missing=missing,
                           found=Msg("hub.found", items=seen) if seen else
                           Msg("hub.found_nothing"),
                           odd=Msg("hub.unrecognised", folders=unrecognised)
                           if unrecognised else "",
                           example=example, known=sorted(classes)))
    gate = readgate.for_config(cfg)
    for comp, folder in result.items():
        gate.check_tree(folder, f"{comp} folder")
    return result


def fingerprint(folders: Iterable[Path]) -> list[list]:
    """[path, size, mtime_ns] of every file under ``folders``: what a cache depends on."""
    out = []
    for folder in folders:
        folder = Path(folder)
        files = [folder] if folder.is_file() else sorted(p for p in folder.rglob("*")
                                                           if p.is_file())
        for p in files:
            st = p.stat()
            out.append([str(p.resolve()), st.st_size, st.st_mtime_ns])
    return out


def local_component_dir(cfg: RunConfig, component: str) -> Path | None:
    """The folder of ``component`` among the model files already on disk for ``cfg``;
    None when it is not there. Never downloads (checks made before a run starts)."""
    spec = family_spec(cfg.model_family)
    names = [c.name for c in spec.components]
    classes = spec.class_map()
    kinds = {c.kind: c.name for c in spec.components if c.kind != MODEL}
    try:
        sources = parse_sources(cfg)
    except (HubError, ValueError):
        return None
    for src in sources:
        guess = src.guess_component(names)
        if guess is not None and guess != component:
            continue
        paths = [src.path] if src.path is not None else _local_matches(
            models_dir(cfg) / src.model_id, src)
        for folder in _folders_of(paths):
            try:
                if identify_folder(folder, classes, kinds) == component:
                    return folder
            except OSError:
                continue
    return None
