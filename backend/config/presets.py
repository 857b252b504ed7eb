"""Presets: YAML files holding ``schema_version`` and only the values they change
(``list_presets``, ``read_preset``, ``load_preset``, ``save_preset``, ``diff_configs``).

Bundled presets live in ``<repo>/presets/``; relative paths inside them resolve against the
repository root. Shared presets live in ``{workspace}/presets/`` (saved by admins, or with
sign-in off), each signed-in user's own in ``{workspace}/presets/users/<user>/``; a user's
own preset may not set what only an admin chooses (``ADMIN_PRESET_FIELDS``).
"""
from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

import yaml

from backend.config.errors import ConfigError, field_problem
from backend.config.files import read_yaml, write_yaml
from backend.config.paths import REPO_ROOT
from backend.config.schema import (FIELDS, PATH_FIELDS, SCHEMA_VERSION, RunConfig,
                                   family_defaults)
from backend.config.validation import validate_layers
from backend.core import bounded
from backend.core.messages import Msg
from backend.families import family_of

PRESETS_DIR = REPO_ROOT / "presets"
# Where the values under a preset came from, in its problems.
PRESET_BASE = Msg("config.source.preset_base")
_PRESET_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,79}$")
_USER_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.@-]{0,63}$")
# What only an admin may put in a preset: where models come from and server folders. A
# user's own preset holding one of these is refused at save and at load (shared presets,
# saved by an admin, may hold them).
ADMIN_PRESET_FIELDS = ("model_id_with_origin_paths", "model_paths", "tokenizer_path",
                       "hub_endpoint", "models_dir", "output_path", "resume_from",
                       "progress_file", "offload_nvme_path", "read_roots",
                       "write_roots")


def _preset_folder(workspace: str | os.PathLike | None, user: str | None = None
                   ) -> Path | None:
    """``{workspace}/presets`` (shared), or ``{workspace}/presets/users/<user>`` (one
    user's own)."""
    if not workspace:
        return None
    if user is None:
        return Path(workspace) / "presets"
    if not _USER_NAME.match(str(user)):
        raise ConfigError([field_problem("user", Msg("config.user_not_name", got=repr(user)))])
    return Path(workspace) / "presets" / "users" / str(user)


def list_presets(workspace: str | os.PathLike | None = None, user: str | None = None
                 ) -> list[tuple[str, Path]]:
    """(name, path) of the bundled presets, the shared presets of ``workspace``, then
    ``user``'s own (shadowing a shared one of the same name). Without ``user`` (sign-in
    off): bundled and shared, as every preset was before presets had owners."""
    out = {p.stem: p for p in sorted(PRESETS_DIR.glob("*.yaml")) if p.is_file()}
    bundled = set(out)
    for folder in (_preset_folder(workspace),
                   _preset_folder(workspace, user) if user is not None else None):
        if folder and folder.is_dir() and not folder.is_symlink():
            out.update((p.stem, p) for p in sorted(folder.glob("*.yaml"))
                       if p.is_file() and not p.is_symlink() and p.stem not in bundled)
    return list(out.items())


def _find_preset(name_or_path: str | os.PathLike, workspace, user: str | None = None,
                 by_path: bool = True) -> Path:
    text = str(name_or_path)
    listed = dict(list_presets(workspace, user))
    if text in listed:  # a listed name loads, whatever it looks like (``x.yaml`` too)
        return listed[text]
    as_path = Path(text).expanduser()
    if as_path.suffix in (".yaml", ".yml") or os.sep in text or "/" in text:
        if by_path and as_path.is_file():
            return as_path
        raise ConfigError([field_problem("preset", Msg(
            "config.preset.file_not_found", got=repr(text)) if by_path else Msg(
            "config.preset.name_not_path", got=repr(text),
            names=" | ".join(n for n, _ in list_presets(workspace, user))))])
    names = list(listed)
    raise ConfigError([field_problem("preset", Msg(
        "config.preset.no_such_name", got=repr(text),
        names=" | ".join(names) or Msg("config.preset.none_yet")))])


def admin_field_problems(data: dict[str, Any], workspace: str | os.PathLike | None = None
                         ) -> list[Msg]:
    """Fields reserved to admins that ``data`` (a user's preset values) sets to a value no
    admin chose: not the schema default, nor the value of a bundled or shared preset."""
    chosen = {k: [FIELDS[k].default] for k in ADMIN_PRESET_FIELDS}
    for _, path in list_presets(workspace):
        try:
            values, _ = read_preset(path, workspace)
        except ConfigError:
            continue
        for k in ADMIN_PRESET_FIELDS:
            if k in values:
                chosen[k].append(values[k])
    return [field_problem(k, Msg("config.preset.reserved_to_admins",
                                 got=bounded.short(data[k])))
            for k in ADMIN_PRESET_FIELDS if k in data and data[k] not in chosen[k]]


def read_preset(name_or_path: str | os.PathLike, workspace: str | os.PathLike | None = None,
                user: str | None = None, admin: bool = True
                ) -> tuple[dict[str, Any], Path]:
    """A preset's own values (migrated; bundled relative paths made absolute) and its file.

    ``user``: whose presets besides the bundled and shared ones; with ``admin=False`` only
    names are taken (no paths), and the user's own presets may not hold
    ``ADMIN_PRESET_FIELDS``."""
    path = _find_preset(name_or_path, workspace, user, by_path=admin)
    data = read_yaml(path, "preset")
    own = _preset_folder(workspace, user) if user is not None and workspace else None
    if not admin and own is not None and path.parent == own:
        problems = admin_field_problems(data, workspace)
        if problems:
            raise ConfigError(problems, path.name)
    if path.resolve().parent == PRESETS_DIR.resolve():
        # Bundled presets: relative paths are relative to the repository root.
        for name in PATH_FIELDS + ("tokenizer_path", "model_id_with_origin_paths"):
            value = data.get(name)
            if not isinstance(value, str) or not value:
                continue
            if name == "model_id_with_origin_paths":
                data[name] = ",".join(
                    str((REPO_ROOT / e.strip()).resolve()) if e.strip() and
                    (REPO_ROOT / e.strip()).exists() else e.strip() for e in value.split(","))
            elif name == "tokenizer_path" and ":" in value and not (REPO_ROOT / value).exists():
                continue
            elif not os.path.isabs(value):
                data[name] = str((REPO_ROOT / value).resolve())
    return data, path


def load_preset(name_or_path: str | os.PathLike, workspace: str | os.PathLike | None = None,
                base: RunConfig | None = None, user: str | None = None,
                admin: bool = True) -> RunConfig:
    """A preset (by name or file) applied on top of ``base`` (default: schema defaults).

    Unknown keys and bad values are an error that names the file and the key; ``user`` and
    ``admin`` as for ``read_preset``.
    """
    data, path = read_preset(name_or_path, workspace, user, admin)
    return validate_layers([(PRESET_BASE, _set_values(base)),
                            (str(path) if admin else path.name, data)], require_inputs=False)


def _set_values(base: RunConfig | None) -> dict[str, Any]:
    """What ``base`` sets beyond its family's defaults (e.g. the app's models folder): a
    preset of another family then gets that family's defaults, not the base family's
    sources and targets."""
    if base is None:
        return {}
    values = base.to_dict()
    defaults = family_defaults(*family_of(values))
    return {k: v for k, v in values.items() if defaults.get(k, object()) != v}


def save_preset(cfg: RunConfig, name: str, workspace: str | os.PathLike,
                base: RunConfig | None = None, user: str | None = None,
                admin: bool = True, shared: bool = False) -> Path:
    """Write ``cfg`` as a preset with only the values that differ from ``base`` (default:
    the schema defaults), so the file says what the preset changes. Loading it with the
    same ``base`` gives ``cfg`` back.

    Where: ``{workspace}/presets/<name>.yaml`` without ``user`` (sign-in off) or with
    ``shared`` (admins only: every user sees it); else ``user``'s own
    ``{workspace}/presets/users/<user>/<name>.yaml``. A non-admin's preset may not set
    ``ADMIN_PRESET_FIELDS`` (refused, nothing written)."""
    problems = []
    if not _PRESET_NAME.match(name or ""):
        problems.append(field_problem("name", Msg("config.preset.bad_name", got=repr(name))))
    elif Path(name).suffix.lower() in (".yaml", ".yml"):  # the file would be x.yaml.yaml
        problems.append(field_problem("name", Msg("config.preset.file_name", got=repr(name),
                                                  stem=repr(Path(name).stem))))
    elif (PRESETS_DIR / f"{name}.yaml").exists():
        problems.append(field_problem("name", Msg("config.preset.bundled_name",
                                                  got=repr(name))))
    if not workspace:
        problems.append(field_problem("workspace", Msg("config.preset.workspace_needed")))
    if shared and not admin:
        problems.append(field_problem("shared", Msg("config.preset.only_admins_share")))
    reference = (base or RunConfig()).to_dict()
    values = {k: v for k, v in cfg.to_dict().items() if reference.get(k) != v}
    if not admin:
        problems += admin_field_problems(values, workspace)
    if problems:
        raise ConfigError(problems)
    text = yaml.safe_dump({"schema_version": SCHEMA_VERSION, **values}, sort_keys=False,
                          allow_unicode=True)
    folder = _preset_folder(workspace, None if shared else user)
    # Inside that folder only, links refused (a user's folder swapped for a link to another
    # user's presets cannot redirect the write).
    return write_yaml(folder / f"{name}.yaml", text, root=folder)


def diff_configs(a: RunConfig, b: RunConfig) -> list[tuple[str, Any, Any]]:
    """(field, value in a, value in b) for every field that differs, in schema order."""
    da, db = a.to_dict(), b.to_dict()
    return [(k, da[k], db[k]) for k in FIELDS if da[k] != db[k]]
