"""The data area's messages (``backend/core/messages/data.py``): what the dataset check, a
clip's reading and the stage-1 cache say reaches the page as a code, so the Chinese page
shows it in Chinese -- the per-file findings of the Dataset tab, a stage's end reason in
the Run and Runs tabs."""
from __future__ import annotations

import ast
import io
import json
from pathlib import Path

import pytest
from PIL import Image

from backend.core.messages import Msg, placeholders
from tests.harness.chinese import assert_chinese

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "backend" / "data"
PROBLEM_LISTS = {"problems", "errs", "warns", "notes", "bad"}


def test_the_area_s_codes_have_both_languages_and_the_same_placeholders():
    from backend.core.messages import data

    assert set(data.EN) == set(data.ZH)
    assert all(code.startswith("data.") for code in data.EN), sorted(data.EN)
    for code in data.EN:
        assert placeholders(data.EN[code]) == placeholders(data.ZH[code]), code
    source = "\n".join(p.read_text(encoding="utf-8") for p in (ROOT / "backend").rglob("*.py")
                       if "messages" not in p.parts)
    nouns = {c for c in data.EN if c.startswith("data.noun.")}  # looked up as {x:@data.noun}
    unused = sorted(c for c in set(data.EN) - nouns if f'"{c}"' not in source)
    assert unused == [], f"codes no source writes (remove them): {unused}"


def _literal_text(node: ast.AST | None) -> bool:
    return isinstance(node, ast.JoinedStr) or (isinstance(node, ast.Constant)
                                               and isinstance(node.value, str))


def test_the_data_layer_says_nothing_in_plain_english():
    """What the data layer raises, and what it collects as a problem, a warning or a note
    of a file, is a message: a string written in the source there (an f-string or a
    literal) would show in English on the Chinese page. The stage logs' own lines
    (``log(...)``) stay plain English."""
    offenders = []
    for path in sorted(DATA.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            where = f"{path.relative_to(ROOT)}:{getattr(node, 'lineno', '?')}"
            if isinstance(node, ast.Raise) and isinstance(node.exc, ast.Call):
                args = node.exc.args
                if args and (_literal_text(args[0]) or (
                        isinstance(args[0], ast.List) and any(map(_literal_text,
                                                                  args[0].elts)))):
                    offenders.append(f"{where}: raise with text")
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                    and node.func.attr == "append" and isinstance(node.func.value, ast.Name)
                    and node.func.value.id in PROBLEM_LISTS and node.args
                    and _literal_text(node.args[0])):
                offenders.append(f"{where}: {node.func.value.id}.append(text)")
            if (isinstance(node, ast.Return) and isinstance(node.value, ast.Tuple)
                    and any(isinstance(e, ast.List) and any(map(_literal_text, e.elts))
                            for e in node.value.elts)):
                offenders.append(f"{where}: returns a list of text")
    assert offenders == [], "say it with Msg (backend/core/messages/data.py):\n" + \
        "\n".join(offenders)


def _png(path: Path, size=(64, 64), mode="RGB", cut: int | None = None) -> None:
    buf = io.BytesIO()
    colour = (10, 200, 30, 0) if mode == "RGBA" else (10, 200, 30)
    Image.new(mode, size, colour).save(buf, format="PNG")
    path.write_bytes(buf.getvalue()[:cut] if cut else buf.getvalue())


def test_every_finding_of_a_broken_dataset_is_a_message_with_chinese(tmp_path):
    """A folder with one of each problem: each finding of the Dataset tab, and the stage's
    refusal, is a message whose Chinese has no English left."""
    from backend.config.schema import RunConfig
    from backend.data.dataset import DatasetError, check_dataset, validate_dataset

    d = tmp_path / "ds"
    d.mkdir()
    _png(d / "ok.png")
    (d / "ok.txt").write_text("a cat", encoding="utf-8")
    _png(d / "nocaption.png")
    _png(d / "cut.png", cut=120)
    (d / "cut.txt").write_text("a cat", encoding="utf-8")
    _png(d / "tiny.png", size=(4, 4))
    (d / "tiny.txt").write_text("a cat", encoding="utf-8")
    _png(d / "glass.png", mode="RGBA", size=(32, 32))
    (d / "glass.txt").write_text("a cat", encoding="utf-8")
    _png(d / "blank.png")
    (d / "blank.txt").write_text("  ", encoding="utf-8")
    cfg = RunConfig(dataset_base_path=str(d), height=64, width=64)
    findings = validate_dataset(cfg)
    said = {f["level"]: [] for f in findings}
    for f in findings:
        said[f["level"]].append(f["message"])
    assert said["ok"] == [""]
    codes = set()
    for m in said["error"] + said["warning"]:
        assert_chinese(m)
        codes |= {m.code} | {p.code for v in m.params.values()
                             for p in (v if isinstance(v, list) else [v]) if isinstance(p, Msg)}
    assert {"data.no_caption_file", "data.record_errors", "data.record_warnings",
            "data.empty_caption", "diagnosis.cannot_read_image",
            "data.composited", "data.upscaled"} <= codes, codes
    with pytest.raises(DatasetError) as e:
        check_dataset(cfg)
    assert "cut.png" in e.value.line_msg and "nocaption.png" in e.value.line_msg
    assert "数据集问题" in assert_chinese(e.value.line_msg)


@pytest.mark.parametrize("name,text", [
    ("meta.csv", "file,caption\nok.png,a cat\n"),
    ("meta.json", json.dumps({"image": "ok.png"})),
    ("meta.jsonl", '{"image": "ok.png", "prompt": "a"}\n{not json\n'),
    ("meta.jsonl", '{"image": "ok.png"}\n["ok.png"]\n{"image": ["a.png", "b.png"], '
                   '"prompt": "x"}\n'),
    ("meta.txt", "ok.png a cat\n"),
    ("meta.csv", "image,prompt\n"),
])
def test_every_metadata_problem_is_a_message_with_chinese(tmp_path, name, text):
    from backend.config.schema import RunConfig
    from backend.data.dataset import read_records

    (tmp_path / name).write_text(text, encoding="utf-8")
    _, problems = read_records(RunConfig(dataset_base_path=str(tmp_path),
                                         dataset_metadata_path=str(tmp_path / name)))
    assert problems
    for p in problems:
        assert_chinese(p)


def test_a_clip_that_is_too_short_and_a_missing_cache_are_messages(tmp_path):
    from backend.config.schema import RunConfig
    from backend.data.cache import CacheError, check_cache
    from backend.data.video import inspect_video_record
    from backend.data.dataset import Record

    frames = tmp_path / "clip"
    frames.mkdir()
    for i in range(3):
        _png(frames / f"{i:03d}.png", size=(32, 32))
    cfg = RunConfig(model_family="wan", dataset_base_path=str(tmp_path), num_frames=9,
                    height=32, width=32)
    found = inspect_video_record(Record(frames, "a clip", "clip", None, "clip"), cfg)
    assert found["level"] == "error"
    assert "too short: 3 frames" in found["message"]
    assert "太短" in assert_chinese(found["message"])
    with pytest.raises(CacheError) as e:
        check_cache(tmp_path / "nowhere")
    assert "找不到缓存文件夹" in assert_chinese(e.value.args[0])
