"""An option's metadata for forms and messages (``field_meta``: group, UI level, label,
help, default, choices and bounds), and the type helpers the validation and the command line
share (``base_type``, ``is_optional``)."""
from __future__ import annotations

import copy
from typing import Any, Literal, Union, get_args, get_origin

from backend.config.labels import FIELD_LABELS
from backend.config.schema import FIELDS
from backend.families import family_names


def field_meta(name: str) -> dict[str, Any]:
    """Group, UI level, help, default, choices and bounds of a field, for forms and messages."""
    info = FIELDS[name]
    extra = dict(info.json_schema_extra or {})
    meta: dict[str, Any] = {"name": name, "help": info.description or "",
                            "label": extra.get("label") or FIELD_LABELS.get(name, ""),
                            "default": copy.deepcopy(info.default)
                            if info.default_factory is None else info.default_factory(),
                            "group": extra.get("group"), "ui": extra.get("ui", "basic")}
    for m in info.metadata:
        for attr in ("ge", "gt", "le", "lt", "multiple_of", "min_length", "max_length",
                     "pattern"):
            if getattr(m, attr, None) is not None:
                meta[attr] = getattr(m, attr)
    choices = (list(family_names()) if extra.get("choices_from") == "families"
               else _choices(info.annotation))
    if choices:
        meta["choices"] = choices
    return meta


def _choices(annotation: Any) -> list[Any] | None:
    if get_origin(annotation) is Literal:
        return list(get_args(annotation))
    for arg in get_args(annotation):
        found = _choices(arg)
        if found:
            return found
    return None


def is_optional(name: str) -> bool:
    return type(None) in get_args(FIELDS[name].annotation)


def base_type(name: str) -> Any:
    ann = FIELDS[name].annotation
    if get_origin(ann) is Union:
        args = [a for a in get_args(ann) if a is not type(None)]
        if len(args) == 1:
            return args[0]
    return ann
