"""Validation: a mapping of options (merged file, command line, form) checked field by
field, then by the rules that tie fields together (``backend.config.rules``), every problem
reported at once, one per line, as ``field: problem (got X; allowed Y)`` (``ConfigError``).
Precedence is explicit: command line > config file > schema default (``validate_layers``).
"""
from __future__ import annotations

import re
from typing import Any, get_origin

from pydantic import ValidationError, create_model

from backend.config.errors import ConfigError
from backend.config.meta import base_type, field_meta, is_optional
from backend.config.rules import cross_field_problems
from backend.config.schema import (FIELDS, LOKR_FACTOR_ALLOWED, NONE_WORDS, RunConfig,
                                   apply_family_defaults)
from backend.core import bounded

_FLOATISH = re.compile(r"^[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?$")


def _prepare(name: str, value: Any) -> Any:
    """Spellings every view uses: 'none'/'' for unset optionals, 5e7 for integers."""
    if isinstance(value, str) and is_optional(name) and value.strip().lower() in NONE_WORDS:
        return None
    if base_type(name) is int and isinstance(value, str) and _FLOATISH.match(value.strip()):
        number = float(value)
        if number.is_integer():
            return int(number)
    return value


def _field_problems(data: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
    ok: dict[str, Any] = {}
    problems: list[str] = []
    for key, value in data.items():
        if key not in FIELDS:
            problems.append(_unknown_key_problem(key, value))
            continue
        try:
            ok[key] = _validate_one(key, _prepare(key, value))
        except ValidationError as e:
            err = e.errors()[0]
            msg = err["msg"]
            if err.get("type") == "string_pattern_mismatch":
                msg = "not in the expected form"
            where = [str(p) for p in err.get("loc", ())[1:]]
            at = f" at item {where[0]}" if where else ""
            problems.append(f"{key}: {msg[0].lower() + msg[1:]}{at} (got {bounded.short(value)}; "
                            f"allowed {_allowed(key)})")
    return ok, problems


def _unknown_key_problem(key: str, value: Any) -> str:
    if _SECRET_KEY.search(key):
        return (f"{key}: secrets are never stored in run configs (got a value; allowed: set "
                f"HF_TOKEN or MODELSCOPE_API_TOKEN in the environment)")
    return (f"{key}: unknown option (got {bounded.short(value)}; allowed: the fields of the run "
            f"schema{suggest(key)})")


_SECRET_KEY = re.compile(r"(^|_)(token|secret|password|passwd|api_?key)s?($|_)", re.I)
_one_field_models: dict[str, Any] = {}


def _validate_one(key: str, value: Any) -> Any:
    """Validate one field with its constraints through a cached one-field model."""
    model = _one_field_models.get(key)
    if model is None:
        info = FIELDS[key]
        model = create_model(f"_F_{key}", **{key: (info.annotation, info)})
        _one_field_models[key] = model
    return getattr(model.model_validate({key: value}), key)


def suggest(key: str) -> str:
    """"; did you mean <option>?" for a key close to an option's name, else ""."""
    import difflib
    close = difflib.get_close_matches(key, list(FIELDS), n=1, cutoff=0.75)
    return f"; did you mean {close[0]}?" if close else ""


def _allowed(name: str) -> str:
    meta = field_meta(name)
    if "choices" in meta:
        text = " | ".join(str(c) for c in meta["choices"])
        return f"a list of {text}" if get_origin(base_type(name)) is list else text
    lo = meta.get("ge", meta.get("gt"))
    hi = meta.get("le", meta.get("lt"))
    parts = []
    if lo is not None or hi is not None:
        lo_s = "" if lo is None else (f"> {lo}" if "gt" in meta else f"≥ {lo}")
        hi_s = "" if hi is None else f"≤ {hi}"
        parts.append(" and ".join(p for p in (lo_s, hi_s) if p))
    if "multiple_of" in meta:
        parts.append(f"a multiple of {meta['multiple_of']}")
    if name == "lokr_factor":  # 0 lies inside the bounds but splits nothing
        parts = [LOKR_FACTOR_ALLOWED]
    if name == "gpu_ids":
        parts.append("all or comma-separated GPU numbers like 0,1")
    elif name == "hub_endpoint":
        parts.append("an http(s) URL")
    if "min_length" in meta and get_origin(base_type(name)) is list:
        parts.append(f"at least {meta['min_length']} item(s)")
    elif "min_length" in meta:
        parts.append("non-empty text")
    if "max_length" in meta:
        parts.append(f"at most {meta['max_length']} characters")
    if parts:
        text = ", ".join(parts)
    else:
        base = base_type(name)
        text = {bool: "true | false", int: "an integer", float: "a number", str: "text"}.get(
            base, str(base).replace("typing.", ""))
    return text + (" or empty" if is_optional(name) else "")


def validate(data: dict[str, Any], source: str | None = None, *,
             require_inputs: bool = True, sources: dict[str, str] | None = None) -> RunConfig:
    """Validate a mapping of options (merged file + CLI) and report every problem at once.

    ``require_inputs=False`` accepts a config that still lacks the user's own inputs (the
    dataset folder), as a preset does; everything else is checked all the same.
    ``source`` names where the values came from; ``sources`` where single fields came from
    when that differs (see ``ConfigError``; ``validate_layers`` builds it).
    """
    data = dict(data)
    data.pop("schema_version", None)
    data = apply_family_defaults(data)
    ok, problems = _field_problems(data)
    merged = RunConfig.model_construct().model_dump()
    merged.update(ok)
    # Rules about a field that is already wrong on its own would only repeat the problem.
    failed = [k for k in data if k in FIELDS and k not in ok]
    problems += [p for p in cross_field_problems(merged, require_inputs)
                 if not any(re.search(rf"\b{k}\b", p) for k in failed)]
    if problems:
        raise ConfigError(problems, source, sources)
    return RunConfig.model_validate(ok)


def validate_layers(layers: list[tuple[str, dict[str, Any]]], *, require_inputs: bool = True
                    ) -> RunConfig:
    """Validate ``(source, values)`` layers merged in order (later layers win), each
    problem attributed to the layer its field's value came from; a problem about a field
    no layer set (a rule about a default) goes to the last layer. E.g. a preset file and
    the values of an API call on top: ``[(str(preset_path), preset), ("start_run", values)]``.
    """
    data: dict[str, Any] = {}
    sources: dict[str, str] = {}
    for where, values in layers:
        for key, value in values.items():
            if key == "schema_version":
                continue
            data[key] = value
            sources[key] = where
    last = layers[-1][0] if layers else None
    return validate(data, last, require_inputs=require_inputs, sources=sources)
