"""Messages by key: every sentence the product shows is a code and its parameters.

``Msg("validation.ge", ge=1)`` is a ``str`` whose text is its English (so the CLI, the logs,
``run.yaml`` and every ``str`` operation read plain English as before) that also carries its
``code`` and ``params``. The page renders the same message from the Chinese table
(``text("zh")``); nothing anywhere reads English back to find its meaning.

The tables: ``EN`` and ``ZH`` map each code to a ``str.format`` template. They are assembled
from one module per area of the product (``AREAS``), each defining both languages side by
side; a code defined twice, or a template one language has and the other lacks, fails at
import and in ``tests/test_messages.py`` (which also checks that both templates of a code
use the same placeholders and that every code written in the source has an entry).

Placeholders are formatted per language:

- a ``Msg`` is rendered in the same language; a list or tuple is each item rendered, joined
  with ``", "`` (English) / ``"，"`` (Chinese), or with the separator of ``{x:join=; }``;
- ``{x:@status}`` looks the value up as the code ``status.<value>`` (the value as it is when
  the table has no such code): words that are values in English (``running``) and words in
  Chinese (``运行中``);
- ``{x:q}`` quotes plain text that is another program's own words (a library's error line),
  and renders a ``Msg`` as usual;
- any other spec is Python's (``{gb:.1f}``).

A message crosses a process or SQLite as JSON (``to_json`` / ``from_json``); a code the
tables no longer have reads back as the English it had.
"""
from __future__ import annotations

import importlib
import string
from typing import Any

# One module per area, each with EN and ZH dicts of the same keys.
AREAS = ("common", "validation", "estimate", "jobs", "page", "data", "publish", "slurm",
         "tracking", "fullexport", "models")

LANGS = ("en", "zh")
EN: dict[str, str] = {}
ZH: dict[str, str] = {}
_JOIN = {"en": ", ", "zh": "，"}


def _load() -> None:
    for area in AREAS:
        mod = importlib.import_module(f"{__name__}.{area}")
        lone = sorted(set(mod.EN) ^ set(mod.ZH))
        if lone:
            raise ValueError(f"message code(s) of area {area} without both languages: {lone}")
        twice = sorted(set(mod.EN) & set(EN))
        if twice:
            raise ValueError(f"message code(s) defined twice (area {area}): {twice}")
        EN.update(mod.EN)
        ZH.update(mod.ZH)


def table(lang: str) -> dict[str, str]:
    return ZH if lang == "zh" else EN


class Msg(str):
    """A message: its English as the string, plus ``code`` and ``params``."""

    code: str
    params: dict[str, Any]

    def __new__(cls, code: str, **params: Any) -> "Msg":
        if code not in EN:
            raise KeyError(f"no message with code {code!r} (add it to backend/core/messages)")
        obj = super().__new__(cls, _render(code, params, "en"))
        obj.code = code
        obj.params = params
        return obj

    def __getnewargs_ex__(self):  # pickling and copying keep the code, not only the text
        return (self.code,), dict(self.params)

    def text(self, lang: str = "en") -> str:
        return str.__str__(self) if lang == "en" else _render(self.code, self.params, lang)

    def to_json(self) -> dict[str, Any]:
        return {"code": self.code, "params": {k: _encode(v) for k, v in self.params.items()},
                "text": str.__str__(self)}

    @classmethod
    def from_json(cls, data: Any) -> "Msg | str":
        """The message ``to_json`` wrote; its English text when the code is gone."""
        if not isinstance(data, dict):
            return str(data)
        try:
            return cls(data["code"], **{k: _decode(v) for k, v in data["params"].items()})
        except (KeyError, IndexError, ValueError, TypeError):
            return str(data.get("text", data.get("code", "")))


def text(value: Any, lang: str = "en") -> str:
    """``value`` in ``lang``: a message rendered, a list joined, anything else as it is."""
    return _show(value, lang, "")


def said(error: BaseException) -> "Msg | str":
    """What an error says: the message it was raised with, else its text."""
    first = error.args[0] if error.args else None
    return first if isinstance(first, Msg) else str(error)


def codes(value: Any) -> set[str]:
    """Every code a message is made of (its parameters' too), also of a list or a dict of
    them."""
    if isinstance(value, Msg):
        return {value.code} | codes(list(value.params.values()))
    if isinstance(value, dict):
        value = list(value.values())
    if isinstance(value, (list, tuple)):
        return set().union(*(codes(v) for v in value)) if value else set()
    return set()


def _render(code: str, params: dict[str, Any], lang: str) -> str:
    return _Formatter(lang).vformat(table(lang)[code], (), params)


class _Formatter(string.Formatter):
    def __init__(self, lang: str):
        self.lang = lang

    def format_field(self, value: Any, format_spec: str) -> str:
        return _show(value, self.lang, format_spec)


def _show(value: Any, lang: str, spec: str) -> str:
    if spec.startswith("@"):
        code = f"{spec[1:]}.{value}"
        return _render(code, {}, lang) if code in EN else str(value)
    if isinstance(value, Msg):
        return value.text(lang)
    if isinstance(value, (list, tuple)):
        sep = spec[len("join="):] if spec.startswith("join=") else _JOIN[lang]
        return sep.join(_show(v, lang, "") for v in value)
    if spec == "q":
        return str(value) if lang == "en" else '"' + str(value).replace('"', "'") + '"'
    if spec.startswith("join="):
        return str(value)
    return format(value, spec) if spec else str(value)


def _encode(value: Any) -> Any:
    if isinstance(value, Msg):
        return {"$msg": value.to_json()}
    if isinstance(value, (list, tuple)):
        return [_encode(v) for v in value]
    if value is None or isinstance(value, (bool, int, float)):
        return value
    return str(value)


def _decode(value: Any) -> Any:
    if isinstance(value, dict) and "$msg" in value:
        return Msg.from_json(value["$msg"])
    if isinstance(value, list):
        return [_decode(v) for v in value]
    return value


def placeholders(template: str) -> set[str]:
    """The names a template formats (``{field}``, ``{got:q}`` -> field, got)."""
    return {name.split(".")[0].split("[")[0]
            for _, name, _, _ in string.Formatter().parse(template) if name}


_load()
