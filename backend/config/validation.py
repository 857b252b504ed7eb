"""Validation: a mapping of options (merged file, command line, form) checked field by
field, then by the rules that tie fields together (``backend.config.rules``), every problem
reported at once, one per line, as ``field: problem (got X; allowed Y)`` (``ConfigError``).
Precedence is explicit: command line > config file > schema default (``validate_layers``).
"""
from __future__ import annotations

import re
from typing import Any, get_origin

from pydantic import ValidationError, create_model

from backend.config.errors import ConfigError, field_problem
from backend.config.meta import base_type, field_meta, is_optional
from backend.config.rules import cross_field_problems
from backend.config.schema import (FIELDS, LOKR_FACTOR_ALLOWED, NONE_WORDS, RunConfig,
                                   apply_family_defaults)
from backend.core import bounded
from backend.core.messages import Msg

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


def _field_problems(data: dict[str, Any]) -> tuple[dict[str, Any], list[Msg]]:
    ok: dict[str, Any] = {}
    problems: list[Msg] = []
    for key, value in data.items():
        if key not in FIELDS:
            problems.append(_unknown_key_problem(key, value))
            continue
        try:
            ok[key] = _validate_one(key, _prepare(key, value))
        except ValidationError as e:
            err = e.errors()[0]
            where = [str(p) for p in err.get("loc", ())[1:]]
            at = Msg("validation.at_item", n=where[0]) if where else ""
            problems.append(field_problem(key, Msg(
                "validation.one_field", problem=pydantic_problem(err), at=at,
                got=bounded.short(value), allowed=_allowed(key))))
    return ok, problems


def _number(value: Any) -> Any:
    """A bound as pydantic writes it in its messages (1.0 as 1)."""
    return int(value) if isinstance(value, float) and value.is_integer() else value


def _literal(ctx: dict) -> Msg:
    expected = str(ctx.get("expected", ""))
    head, sep, last = expected.rpartition(" or ")
    if not sep:
        return Msg("validation.pydantic.literal_one", expected=expected)
    return Msg("validation.pydantic.literal_error", choices=head.split(", "), last=last)


def _value_error(ctx: dict) -> Msg:
    error = str(ctx.get("error", ""))
    if error == "not a registered model family":
        return Msg("validation.pydantic.not_a_family")
    return Msg("validation.pydantic.value_error", error=error)


# pydantic's error type -> its message from the error's ``ctx`` (every type the schema's
# fields can raise; another type is pydantic's own words, ``validation.pydantic.other``).
_PYDANTIC: dict[str, Any] = {
    "greater_than_equal": lambda c: Msg("validation.pydantic.greater_than_equal",
                                        ge=_number(c["ge"])),
    "less_than_equal": lambda c: Msg("validation.pydantic.less_than_equal",
                                     le=_number(c["le"])),
    "greater_than": lambda c: Msg("validation.pydantic.greater_than", gt=_number(c["gt"])),
    "less_than": lambda c: Msg("validation.pydantic.less_than", lt=_number(c["lt"])),
    "multiple_of": lambda c: Msg("validation.pydantic.multiple_of",
                                 multiple_of=_number(c["multiple_of"])),
    "finite_number": lambda c: Msg("validation.pydantic.finite_number"),
    "int_parsing": lambda c: Msg("validation.pydantic.int_parsing"),
    "int_from_float": lambda c: Msg("validation.pydantic.int_from_float"),
    "int_type": lambda c: Msg("validation.pydantic.int_type"),
    "float_parsing": lambda c: Msg("validation.pydantic.float_parsing"),
    "float_type": lambda c: Msg("validation.pydantic.float_type"),
    "bool_parsing": lambda c: Msg("validation.pydantic.bool_parsing"),
    "bool_type": lambda c: Msg("validation.pydantic.bool_type"),
    "string_type": lambda c: Msg("validation.pydantic.string_type"),
    "list_type": lambda c: Msg("validation.pydantic.list_type"),
    "literal_error": _literal,
    "string_too_long": lambda c: (
        Msg("validation.pydantic.string_too_long_one", max_length=c["max_length"])
        if c["max_length"] == 1 else
        Msg("validation.pydantic.string_too_long", max_length=c["max_length"])),
    "string_too_short": lambda c: (
        Msg("validation.pydantic.string_too_short_one", min_length=c["min_length"])
        if c["min_length"] == 1 else
        Msg("validation.pydantic.string_too_short", min_length=c["min_length"])),
    "too_short": lambda c: (
        Msg("validation.pydantic.too_short_one", min_length=c["min_length"],
            actual_length=c["actual_length"]) if c["min_length"] == 1 else
        Msg("validation.pydantic.too_short", min_length=c["min_length"],
            actual_length=c["actual_length"])),
    "value_error": _value_error,
    "string_pattern_mismatch": lambda c: Msg("validation.not_expected_form"),
}


def pydantic_problem(err: dict) -> Msg:
    """One pydantic error (``ValidationError.errors()`` item) as a message, keyed by its
    type with its ``ctx`` as parameters. The English is pydantic's own message with a
    lower-case first letter (a type without a template, or a message whose wording differs
    from the template's, e.g. after a pydantic upgrade: pydantic's words, quoted)."""
    text = str(err.get("msg", ""))
    text = text[:1].lower() + text[1:]
    make = _PYDANTIC.get(str(err.get("type")))
    try:
        msg = make(err.get("ctx") or {}) if make is not None else None
    except (KeyError, TypeError, ValueError):
        msg = None
    if msg is not None and (str(msg) == text or err.get("type") == "string_pattern_mismatch"):
        return msg
    return Msg("validation.pydantic.other", msg=text)


def _unknown_key_problem(key: str, value: Any) -> Msg:
    if _SECRET_KEY.search(key):
        return field_problem(key, Msg("validation.secret_never_stored"))
    return field_problem(key, Msg("validation.unknown_option", got=bounded.short(value),
                                  suggest=suggest(key)))


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


def suggest(key: str) -> Msg | str:
    """"; did you mean <option>?" for a key close to an option's name, else ""."""
    import difflib
    close = difflib.get_close_matches(key, list(FIELDS), n=1, cutoff=0.75)
    return Msg("validation.did_you_mean", option=close[0]) if close else ""


def _allowed(name: str) -> Msg | str:
    """What a field allows, as the tail of its one-field problems ("allowed Y")."""
    meta = field_meta(name)
    text: Msg | str
    if "choices" in meta:
        text = " | ".join(str(c) for c in meta["choices"])
        if get_origin(base_type(name)) is list:
            text = Msg("validation.allowed.list_of", choices=text)
        return text
    lo = meta.get("ge", meta.get("gt"))
    hi = meta.get("le", meta.get("lt"))
    parts: list[Msg | str] = []
    if lo is not None or hi is not None:
        lo_s = "" if lo is None else (f"> {lo}" if "gt" in meta else f"≥ {lo}")
        hi_s = "" if hi is None else (f"< {hi}" if "lt" in meta else f"≤ {hi}")
        parts.append(Msg("validation.allowed.and", lo=lo_s, hi=hi_s) if lo_s and hi_s
                     else lo_s or hi_s)
    if "multiple_of" in meta:
        parts.append(Msg("validation.allowed.multiple_of", n=meta["multiple_of"]))
    if name == "lokr_factor":  # 0 lies inside the bounds but splits nothing
        parts = [LOKR_FACTOR_ALLOWED]
    if name == "gpu_ids":
        parts.append(Msg("validation.allowed.gpu_ids"))
    elif name == "hub_endpoint":
        parts.append(Msg("validation.allowed.http_url"))
    if "min_length" in meta and get_origin(base_type(name)) is list:
        parts.append(Msg("validation.allowed.at_least_items", n=meta["min_length"]))
    elif "min_length" in meta:
        parts.append(Msg("validation.allowed.non_empty_text"))
    if "max_length" in meta:
        parts.append(Msg("validation.allowed.at_most_chars", n=meta["max_length"]))
    if parts:
        text = parts[0] if len(parts) == 1 else Msg("validation.allowed.parts", parts=parts)
    else:
        base = base_type(name)
        text = {bool: "true | false", int: Msg("validation.allowed.integer"),
                float: Msg("validation.allowed.number"),
                str: Msg("validation.allowed.text")}.get(
            base, str(base).replace("typing.", ""))
    return Msg("validation.allowed.or_empty", allowed=text) if is_optional(name) else text


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
