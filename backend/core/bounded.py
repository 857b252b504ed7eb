"""Bounded parsing of what people hand the server: run-option YAML/JSON text and files.

A YAML text of a few hundred bytes can stand for billions of values (anchors and aliases,
nine levels of nine: a "billion laughs"); PyYAML builds it as shared references in no time,
and whatever walks it later (validation, ``repr()`` in an error text, a copy) expands it.
Every config, preset, imported file and run.yaml is read here instead, with limits:

    data = load_yaml(text, "config")            # ParseError: "config: <problem> (got ...)"
    data = load_yaml(read_text(path, "preset"), "preset")  # reads <= MAX_BYTES + 1 bytes
    data = load_json(text, "DeepSpeed file")
    check_value(mapping, "config")              # a mapping that came parsed (an API call)
    short(value)                                # repr()-like, at most 80 characters

- size: at most ``MAX_BYTES`` of text;
- aliases: at most ``MAX_ALIASES`` uses of ``*anchor``, none inside its own anchor;
- values: at most ``MAX_VALUES`` after alias expansion (each scalar, list and mapping
  counts one), counted while the document is composed, so parsing stops at the limit;
- nesting: at most ``MAX_DEPTH`` levels (deeper would exhaust Python's recursion).

A refusal is a ``ParseError`` (a ValueError) whose text reads
``config: too many YAML aliases (got more than 64; allowed up to 64)``. ``short`` shortens
with a budget and never builds a whole value's ``repr()``.
"""
from __future__ import annotations

import json
import os
from typing import Any

import yaml

from backend.core.messages import Msg

MAX_BYTES = 256 * 1024  # the largest bundled preset is under 2 KiB
MAX_ALIASES = 64
MAX_VALUES = 100_000
MAX_DEPTH = 64
SHORT_CHARS = 80


class ParseError(ValueError):
    """Text that is not a bounded YAML/JSON value; the message names ``what`` first."""


class LimitExceeded(ParseError):
    """Text past one of the limits (size, aliases, values, nesting)."""


class BoundedLoader(yaml.SafeLoader):
    """``yaml.SafeLoader`` that counts alias uses, nesting and the values aliases expand to
    while it composes, and stops at the first limit it passes."""

    what = "config"

    def __init__(self, stream: Any):
        super().__init__(stream)
        self.aliases = 0
        self.depth = 0

    def compose_node(self, parent: Any, index: Any) -> Any:
        if self.check_event(yaml.AliasEvent):
            self.aliases += 1
            if self.aliases > MAX_ALIASES:
                raise LimitExceeded(Msg("config.parse.too_many_aliases", what=self.what,
                                        limit=MAX_ALIASES))
            node = super().compose_node(parent, index)
            if not hasattr(node, "zl_values"):
                raise ParseError(Msg("config.parse.self_alias", what=self.what))
            return node
        self.depth += 1
        if self.depth > MAX_DEPTH:
            raise LimitExceeded(Msg("config.parse.too_deep", what=self.what, limit=MAX_DEPTH))
        try:
            node = super().compose_node(parent, index)
        finally:
            self.depth -= 1
        if isinstance(node, yaml.SequenceNode):
            count = 1 + sum(child.zl_values for child in node.value)
        elif isinstance(node, yaml.MappingNode):
            count = 1 + sum(k.zl_values + v.zl_values for k, v in node.value)
        else:
            count = 1
        if count > MAX_VALUES:
            raise LimitExceeded(Msg("config.parse.too_many_values", what=self.what,
                                    limit=MAX_VALUES))
        node.zl_values = count
        return node


def _cut(text: str, limit: int) -> str:
    """A message on one line, at most ``limit`` characters."""
    text = " ".join(text[:4 * limit].split())
    return text if len(text) <= limit else text[:limit - 3] + "..."


def _check_size(what: str, size: int) -> None:
    if size > MAX_BYTES:
        raise LimitExceeded(Msg("config.parse.too_large", what=what, limit=MAX_BYTES))


def loader(what: str = "config") -> type[BoundedLoader]:
    """A ``Loader`` for ``yaml.load`` whose refusals name ``what``; for callers that want
    PyYAML's own errors (with their marks) for text that is not YAML. It bounds aliases,
    values and nesting; the size is the caller's (``read_text`` or ``check_size``)."""
    return type("BoundedLoader", (BoundedLoader,), {"what": what})


def check_size(text: str | bytes, what: str = "config") -> None:
    """``LimitExceeded`` when ``text`` is over ``MAX_BYTES``."""
    _check_size(what, len(text.encode("utf-8") if isinstance(text, str) else text))


def load_yaml(text: str | bytes, what: str = "config") -> Any:
    """One YAML (or JSON) document, within the limits above; ``ParseError`` otherwise."""
    check_size(text, what)
    try:
        loader_ = loader(what)(text)
    except yaml.YAMLError as e:  # bytes that are no text (a binary file)
        raise ParseError(Msg("config.parse.not_yaml", what=what,
                             detail=_cut(str(e), 1000))) from None
    try:
        return loader_.get_single_data()
    except yaml.YAMLError as e:
        raise ParseError(Msg("config.parse.not_yaml", what=what,
                             detail=_cut(str(e), 1000))) from None
    except (ValueError, TypeError, OverflowError) as e:
        if isinstance(e, ParseError):
            raise
        # e.g. an integer of more digits than Python converts
        raise ParseError(Msg("config.parse.unreadable_value", what=what,
                             detail=_cut(str(e).split(';')[0], 200))) from None
    except RecursionError:
        raise LimitExceeded(Msg("config.parse.too_deep", what=what, limit=MAX_DEPTH)) from None
    finally:
        loader_.dispose()


def read_text(path: str | os.PathLike, what: str = "config") -> str:
    """A UTF-8 text file of at most ``MAX_BYTES`` (reads no more than that). OSError and
    UnicodeDecodeError pass through; past the size limit: ``LimitExceeded``."""
    with open(path, "rb") as f:
        data = f.read(MAX_BYTES + 1)
    _check_size(what, len(data))
    return data.decode("utf-8")


def load_json(text: str | bytes, what: str = "JSON") -> Any:
    """One JSON value, within the size, value and nesting limits."""
    check_size(text, what)
    try:
        value = json.loads(text)
    except RecursionError:
        raise LimitExceeded(Msg("config.parse.too_deep", what=what, limit=MAX_DEPTH)) from None
    except ValueError as e:
        raise ParseError(Msg("config.parse.not_json", what=what,
                             detail=_cut(str(e), 200))) from None
    check_value(value, what)
    return value


def check_value(value: Any, what: str = "config") -> None:
    """A value that came parsed (JSON from an API call): at most ``MAX_VALUES`` values and
    ``MAX_DEPTH`` levels, counted without recursion (shared or circular references count
    each time they are reached, so the walk ends at the limit)."""
    seen = 0
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        seen += 1
        if seen > MAX_VALUES:
            raise LimitExceeded(Msg("config.parse.too_many", what=what, limit=MAX_VALUES))
        if depth > MAX_DEPTH:
            raise LimitExceeded(Msg("config.parse.too_deep", what=what, limit=MAX_DEPTH))
        if isinstance(item, dict):
            for k, v in item.items():
                stack.append((k, depth + 1))
                stack.append((v, depth + 1))
        elif isinstance(item, (list, tuple, set, frozenset)):
            stack.extend((v, depth + 1) for v in item)


def short(value: Any, limit: int = SHORT_CHARS) -> str:
    """``repr(value)`` cut to at most ``limit`` characters ("..." at the end when cut), built
    piece by piece until the budget is spent: never the whole repr of a big, deep or
    alias-shared value."""
    parts: list[str] = []
    budget = limit + 1  # one more than fits: enough to know it must be cut

    def emit(text: str) -> bool:
        nonlocal budget
        parts.append(text[:budget])
        budget -= len(text)
        return budget > 0

    def one(v: Any) -> str:
        if isinstance(v, str):
            return repr(v[:budget])  # a cut string loses its closing quote: "..." follows
        if isinstance(v, (bytes, bytearray)):
            return repr(bytes(v[:budget]))
        if isinstance(v, int) and not isinstance(v, bool) and v.bit_length() > 4 * budget:
            return f"<an integer of {v.bit_length()} bits>"
        try:
            return repr(v)
        except Exception:  # noqa: BLE001 - a shortened text must never fail
            return f"<{type(v).__name__}>"

    def walk(v: Any) -> bool:
        if isinstance(v, dict):
            if not emit("{"):
                return False
            for i, (k, x) in enumerate(v.items()):
                if (i and not emit(", ")) or not walk(k) or not emit(": ") or not walk(x):
                    return False
            return emit("}")
        if isinstance(v, (list, tuple, set, frozenset)):
            if isinstance(v, (set, frozenset)) and not v:
                return emit(f"{type(v).__name__}()")
            opening, closing = "[]" if isinstance(v, list) else "()" if isinstance(
                v, tuple) else "{}"
            if not emit(opening):
                return False
            for i, x in enumerate(v):
                if (i and not emit(", ")) or not walk(x):
                    return False
            if isinstance(v, tuple) and len(v) == 1 and not emit(","):
                return False
            return emit(closing)
        return emit(one(v))

    walk(value)
    text = "".join(parts)
    return text if len(text) <= limit else text[:max(0, limit - 3)] + "..."
