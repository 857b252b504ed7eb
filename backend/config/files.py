"""Run config files: YAML read (every way a file can be unreadable is a ``ConfigError``),
brought up to the current schema version (``migrate``, the one place for migrations),
loaded and validated (``load_config``), and written (``write_yaml``).
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from backend.config.errors import ConfigError, field_problem
from backend.config.schema import SCHEMA_VERSION, RunConfig
from backend.config.validation import validate
from backend.core import bounded, writegate
from backend.core.messages import Msg


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
        raise ConfigError([field_problem("schema_version", Msg(
            "config.schema_version", got=bounded.short(version), top=SCHEMA_VERSION))], source)
    # (no older versions exist yet: version 1 is the first schema)
    return data


def read_yaml(path: str | os.PathLike, what: str = "config") -> dict[str, Any]:
    """A config or preset file (``what``) as a mapping of the current schema version.

    Every way a file can be unreadable is a ``ConfigError`` naming it (never a traceback);
    an empty preset is refused (it would load as the defaults without a word)."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError([field_problem(what, Msg("config.file_not_found",
                                                   got=repr(str(path))))])
    try:
        text = bounded.read_text(path, what)
    except bounded.ParseError as e:
        raise ConfigError([_said(e)], str(path)) from None
    except UnicodeDecodeError as e:
        raise ConfigError([field_problem(what, Msg("config.not_utf8", byte=e.start))],
                          str(path)) from None
    except OSError as e:
        raise ConfigError([field_problem(what, Msg("config.cannot_read",
                                                   why=str(e.strerror or e)))],
                          str(path)) from None
    try:
        # Sizes, nesting and what YAML aliases expand to are bounded (backend/core/bounded.py).
        data = bounded.load_yaml(text, what)
    except bounded.ParseError as e:
        raise ConfigError([_said(e)], str(path)) from None
    if data is None:
        if what == "preset":
            raise ConfigError([field_problem("preset", Msg("config.preset_empty"))], str(path))
        data = {}
    if not isinstance(data, dict):
        raise ConfigError([field_problem(what, Msg("config.top_level",
                                                   type=type(data).__name__))], str(path))
    bad = [k for k in data if not isinstance(k, str)]
    if bad:
        raise ConfigError([field_problem(bounded.short(k), Msg(
            "config.keys_option_names", got=bounded.short(k))) for k in bad], str(path))
    return migrate(data, str(path))


def _said(error: Exception) -> Any:
    """An error's message: the ``Msg`` it was raised with, else its text."""
    first = error.args[0] if error.args else None
    return first if isinstance(first, Msg) else str(error)


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
