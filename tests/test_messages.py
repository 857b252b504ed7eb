"""Messages by key: the English and the Chinese table hold the same codes with the same
placeholders, every code the source writes has both, and a message keeps its code across
pickling, copying and JSON (processes and SQLite)."""
import ast
import copy
import json
import pickle
from pathlib import Path

import pytest

from backend.core import messages
from backend.core.messages import EN, ZH, Msg, placeholders, text

ROOT = Path(__file__).resolve().parents[1]


def test_both_tables_hold_the_same_codes_and_placeholders():
    assert len(EN) > 20
    assert set(EN) == set(ZH), sorted(set(EN) ^ set(ZH))
    differ = {code: (sorted(placeholders(EN[code])), sorted(placeholders(ZH[code])))
              for code in EN if placeholders(EN[code]) != placeholders(ZH[code])}
    assert not differ, f"templates whose placeholders differ between English and Chinese: {differ}"


def _codes_in_source() -> dict[str, list[str]]:
    """Every code written as ``Msg("code", ...)`` in backend/ and webui/, with where."""
    found: dict[str, list[str]] = {}
    for path in sorted(list((ROOT / "backend").rglob("*.py")) + list((ROOT / "webui").rglob("*.py"))):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "Msg":
                first = node.args[0] if node.args else None
                where = f"{path.relative_to(ROOT)}:{node.lineno}"
                code = first.value if isinstance(first, ast.Constant) else None
                found.setdefault(code if isinstance(code, str) else f"<not a literal> {where}",
                                 []).append(where)
    return found


def test_every_code_written_in_the_source_has_both_languages():
    found = _codes_in_source()
    assert len(found) > 20, found
    not_literal = [c for c in found if c.startswith("<not a literal>")]
    assert not not_literal, f"Msg codes must be string literals: {not_literal}"
    missing = {c: w for c, w in found.items() if c not in EN or c not in ZH}
    assert not missing, f"codes without an entry in both tables: {missing}"


def test_a_message_renders_per_language_and_keeps_its_code_across_processes():
    note = Msg("status.running")
    assert note == "running" and note.text("zh") == "运行中"
    for again in (pickle.loads(pickle.dumps(note)), copy.copy(note), copy.deepcopy(note),
                  Msg.from_json(json.loads(json.dumps(note.to_json())))):
        assert isinstance(again, Msg) and again.code == "status.running"
        assert again.text("zh") == "运行中"
    # a code the tables no longer have reads back as the English it had
    gone = {"code": "status.gone", "params": {}, "text": "gone away"}
    assert Msg.from_json(gone) == "gone away" and not isinstance(Msg.from_json(gone), Msg)
    with pytest.raises(KeyError, match="no message with code"):
        Msg("status.no_such_code")


def test_placeholders_render_messages_lists_words_and_quotes(monkeypatch):
    monkeypatch.setitem(EN, "t.demo", "{who:@status}: {items}; {why:q} ({n:.1f} GB)")
    monkeypatch.setitem(ZH, "t.demo", "{who:@status}：{items}；{why:q}（{n:.1f} GB）")
    m = Msg("t.demo", who="failed", items=[Msg("status.queued"), "a.png"],
            why="OSError: boom", n=2.345)
    assert m == "failed: queued, a.png; OSError: boom (2.3 GB)"
    assert m.text("zh") == '失败：排队中，a.png；"OSError: boom"（2.3 GB）'
    assert text([Msg("status.stopped"), "x"], "zh") == "已停止，x"
    assert Msg.from_json(json.loads(json.dumps(m.to_json()))).text("zh") == m.text("zh")


def test_a_code_defined_twice_or_in_one_language_fails_at_import(monkeypatch):
    import types
    twice = types.SimpleNamespace(EN={"status.running": "x"}, ZH={"status.running": "x"})
    lone = types.SimpleNamespace(EN={"t.lone": "x"}, ZH={})
    for mod, words in ((twice, "defined twice"), (lone, "without both languages")):
        monkeypatch.setattr(messages.importlib, "import_module", lambda name, m=mod: m)
        monkeypatch.setattr(messages, "AREAS", ("extra",))
        with pytest.raises(ValueError, match=words):
            messages._load()


def test_every_chinese_template_reads_as_chinese():
    """No English left in a Chinese template, outside its placeholders and the names that
    stay as they are (options, units, products: ``webui.messages.english_left``)."""
    import re

    from webui.messages import english_left

    left = {code: english_left(re.sub(r"\{[^{}]*\}", " ", template))
            for code, template in ZH.items()}
    left = {code: words for code, words in left.items() if words}
    assert not left, f"Chinese templates with English left: {left}"


def test_every_code_in_the_tables_is_used():
    """A code is written in the source (``Msg("code", ...)``) or reached by a template's
    lookup (``{x:@prefix}`` names ``prefix.<value>``): the tables hold no dead sentence."""
    import re

    written = set(_codes_in_source())
    lookups = {p for t in list(EN.values()) + list(ZH.values())
               for p in re.findall(r"\{\w+:@([\w.]+)\}", t)}
    dead = sorted(c for c in EN if c not in written and c.rsplit(".", 1)[0] not in lookups
                  and not any(c.startswith(p + ".") for p in lookups))
    assert not dead, f"codes nothing uses: {dead}"
