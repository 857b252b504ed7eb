"""Local paths: the repository root, and a config's path options made absolute
(``resolve_paths``)."""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from backend.config.schema import FIELDS, MODELS_DIR_ENV, PATH_FIELDS, RunConfig

REPO_ROOT = Path(__file__).resolve().parents[2]


def resolve_paths(cfg: RunConfig, base: str | os.PathLike | None = None) -> RunConfig:
    """Make every local path option absolute against ``base`` (default: working directory).

    Also freezes ``models_dir``: at its default, ``ZEROLORA_MODELS_DIR`` (when set) replaces
    it, as the hub does. ``model_id:glob`` entries stay as they are; entries of
    ``model_id_with_origin_paths``/``tokenizer_path`` that exist as local paths under
    ``base`` and the files of ``model_paths`` become absolute.
    """
    base = Path(base or os.getcwd())

    def absolute(value: str) -> str:
        p = Path(value).expanduser()
        return str(p if p.is_absolute() else (base / p).resolve())

    updates: dict[str, Any] = {}
    if cfg.models_dir == FIELDS["models_dir"].default and os.environ.get(MODELS_DIR_ENV):
        updates["models_dir"] = absolute(os.environ[MODELS_DIR_ENV])
    for name in PATH_FIELDS:
        value = updates.get(name, getattr(cfg, name))
        if value:
            updates[name] = absolute(value)
    if cfg.tokenizer_path:
        tp = cfg.tokenizer_path
        if ":" not in tp or (base / tp).exists():
            updates["tokenizer_path"] = absolute(tp)
    if cfg.captioner_path:  # a local folder, or model_id:folder/ (kept as it is)
        cp = cfg.captioner_path
        if ":" not in cp or (base / cp).exists() or Path(cp).is_absolute():
            updates["captioner_path"] = absolute(cp)
    if cfg.model_id_with_origin_paths:
        entries = []
        for entry in cfg.model_id_with_origin_paths.split(","):
            e = entry.strip()
            entries.append(absolute(e) if e and ((base / e).exists() or Path(e).is_absolute())
                           else e)
        updates["model_id_with_origin_paths"] = ",".join(entries)
    if cfg.model_paths:
        items = json.loads(cfg.model_paths)
        items = [[absolute(y) for y in x] if isinstance(x, list) else absolute(x) for x in items]
        updates["model_paths"] = json.dumps(items)
    return cfg.model_copy(update=updates)
