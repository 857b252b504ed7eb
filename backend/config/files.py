"""Run config files: YAML read (every way a file can be unreadable is a ``ConfigError``),
brought up to the current schema version (``migrate``, the one place for migrations),
loaded and validated (``load_config``), and written (``write_yaml``).
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from backend.config.errors import ConfigError
from backend.config.schema import SCHEMA_VERSION, RunConfig
from backend.config.validation import validate
from backend.core import bounded, writegate


def migrate(data: dict[str, Any], source: str | None = None) -> dict[str, Any]:
    """Bring an older schema version's mapping up to date (the one place for migrations).

    A file without ``schema_version`` is read as the current version. When the schema
    changes incompatibly, bump ``SCHEMA_VERSION`` and add a step here that rewrites
    version N-1 mappings (renamed keys, changed units) into version N.
    """
    data = dict(data)
    version = data.pop("schema_version", SCHEMA_VERSION)
    if isinstance(version, bool) or not isinstance(version, int) or not (
            1 <= version <= SCHEMA_VERSION):
        raise ConfigError([f"schema_version: unsupported (got {bounded.short(version)}; allowed 1.."
                           f"{SCHEMA_VERSION})"], source)
    # (no older versions exist yet: version 1 is the first schema)
    return data


def read_yaml(path: str | os.PathLike, what: str = "config") -> dict[str, Any]:
    """A config or preset file (``what``) as a mapping of the current schema version.

    Every way a file can be unreadable is a ``ConfigError`` naming it (never a traceback);
    an empty preset is refused (it would load as the defaults without a word)."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError([f"{what}: file not found (got {str(path)!r}; allowed an existing "
                           f"YAML file)"])
    try:
        text = bounded.read_text(path, what)
    except bounded.ParseError as e:
        raise ConfigError([str(e)], str(path)) from None
    except UnicodeDecodeError as e:
        raise ConfigError([f"{what}: not UTF-8 text (byte {e.start}; allowed a YAML file)"],
                          str(path)) from None
    except OSError as e:
        raise ConfigError([f"{what}: cannot read ({e.strerror or e}; allowed a readable "
                           f"YAML file)"], str(path)) from None
    try:
        # Sizes, nesting and what YAML aliases expand to are bounded (backend/core/bounded.py).
        data = bounded.load_yaml(text, what)
    except bounded.ParseError as e:
        raise ConfigError([str(e)], str(path)) from None
    if data is None:
        if what == "preset":
            raise ConfigError(["preset: empty file (got no options; allowed schema_version "
                               "and the options the preset changes)"], str(path))
        data = {}
    if not isinstance(data, dict):
        raise ConfigError([f"{what}: top level must be a mapping (got "
                           f"{type(data).__name__})"], str(path))
    bad = [k for k in data if not isinstance(k, str)]
    if bad:
        raise ConfigError([f"{bounded.short(k)}: keys must be option names (got "
                           f"{bounded.short(k)}; allowed the fields of the run schema)"
                           for k in bad], str(path))
    return migrate(data, str(path))


def load_config(path: str | os.PathLike, overrides: dict[str, Any] | None = None) -> RunConfig:
    """A run config from YAML, with ``overrides`` (e.g. command-line values) on top."""
    data = read_yaml(path)
    data.update(overrides or {})
    return validate(data, str(path))


def write_yaml(path: str | os.PathLike, text: str, root: str | os.PathLike | None = None
                ) -> Path:
    """``text`` into ``path`` atomically, never through a link (``root``: the folder the
    write must stay inside, links on the way refused; it is made when missing)."""
    if root is None:
        return writegate.atomic_write(path, text)
    if not os.path.islink(root):
        Path(root).mkdir(parents=True, exist_ok=True)
    try:
        return writegate.gate_of([root]).write_text(path, text, "preset", parents=True)
    except writegate.WriteRefused as e:
        raise ConfigError([str(e).replace(os.fspath(path), Path(path).name)]) from None
