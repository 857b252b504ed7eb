"""Chinese for everything the UI can show, so no later feature adds English-only text.

Enumerated here: every ``T()`` key, every schema field's label and help line, every problem
the schema's validation can emit (read from the source of ``backend/config/rules.py``, so a
new rule counts the moment it is written, and from bad values of every field), the memory estimate's
lines and parts, and the history table's headers and status words. Each failure lists exactly
what lacks Chinese. The browser test switches a real page to Chinese, walks the tabs, makes a
problem and an estimate appear, and finds no English word in the visible text.
"""
from __future__ import annotations

import ast
import inspect
import textwrap
from pathlib import Path

import pytest

from backend.config import rules
from backend.config.errors import ConfigError
from backend.config.meta import field_meta
from backend.config.presets import load_preset
from backend.config.schema import FIELDS
from backend.config.validation import validate
from webui import i18n, messages
from webui.messages import english_left, translate

REPO = Path(__file__).resolve().parent.parent
# Keys whose text is the same in both languages (names).
SAME_IN_BOTH = {"app.title", "group.lora"}


# ---------------------------------------------------------------------- static text
def test_every_ui_key_and_field_has_chinese():
    en, zh = i18n._EN_ALL, i18n._ZH_ALL
    missing = sorted(k for k in en if k not in zh)
    assert not missing, "UI keys without Chinese (add them to webui/i18n.py ZH or " \
        "webui/messages.py ZH_LABELS / ZH_HELP):\n  " + "\n  ".join(missing)
    same = sorted(k for k in en if zh[k] == en[k] and k not in SAME_IN_BOTH)
    assert not same, f"Chinese text identical to the English: {same}"
    english = {k: english_left(v) for k, v in zh.items() if english_left(v)}
    assert not english, f"Chinese text with English words left: {english}"


def test_every_field_has_a_label_in_both_languages():
    no_label = [n for n in FIELDS if not field_meta(n)["label"]]
    assert not no_label, f"fields without an English label (backend/config/labels.py " \
        f"FIELD_LABELS or F(..., label=)): {no_label}"
    no_zh = [n for n in FIELDS if n not in messages.ZH_LABELS or n not in messages.ZH_HELP]
    assert not no_zh, "fields without a Chinese label or help line (webui/messages.py " \
        "ZH_LABELS / ZH_HELP):\n  " + "\n  ".join(no_zh)
    # The form's label leads with the words and keeps the option name.
    assert i18n._EN_ALL["label.lora_rank"] == "LoRA rank · lora_rank"
    assert i18n._ZH_ALL["label.lora_rank"] == "LoRA 秩 · lora_rank"
    assert i18n._ZH_ALL["label.learning_rate"] == "学习率 · learning_rate"
    assert "梯度检查点" in i18n._ZH_ALL["label.use_gradient_checkpointing"]


# ---------------------------------------------------------------------- problems
def _strings_in(fn) -> list[str]:
    """Every message ``fn`` appends, with each {placeholder} given sample values: a name
    the function assigns from string literals takes each of them, the rest '3'."""
    tree = ast.parse(textwrap.dedent(inspect.getsource(fn)))
    literals: dict[str, list[str]] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and \
                isinstance(node.targets[0], ast.Name):
            if isinstance(node.value, ast.IfExp):
                literals[node.targets[0].id] = _branches(node.value)

    def samples(node) -> list[str]:
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            return [node.value]
        if isinstance(node, ast.JoinedStr):
            outs = [""]
            for part in node.values:
                if isinstance(part, ast.Constant):
                    outs = [o + part.value for o in outs]
                else:
                    v = part.value
                    alts = literals.get(v.id, ["3"]) if isinstance(v, ast.Name) else ["3"]
                    outs = [o + a for o in outs for a in alts]
            return outs
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
            return [a + b for a in samples(node.left) for b in samples(node.right)]
        return []

    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and \
                node.func.attr == "append" and node.args:
            out += samples(node.args[0])
    return out


def _branches(node) -> list[str]:
    """The string literals an ``a if cond else b`` expression can give."""
    if isinstance(node, ast.IfExp):
        return _branches(node.body) + _branches(node.orelse)
    return [node.value] if isinstance(node, ast.Constant) and isinstance(node.value, str) \
        else ["3"]


def _untranslated(texts) -> list[str]:
    return [f"{t}\n      -> left in English: {english_left(messages._apply(t))}"
            for t in dict.fromkeys(texts) if translate(t) is None]


# Every rule function of backend/config/rules.py is read (each rule, not only the function
# that calls them).
def test_every_rule_between_fields_has_chinese():
    found = [text for _, fn in inspect.getmembers(rules, inspect.isfunction)
             if fn.__module__ == rules.__name__ for text in _strings_in(fn)]
    assert len(found) >= 25, found  # every rule of the schema, read from its source
    bad = _untranslated(found)
    assert not bad, "validation problems without Chinese (add a rule to webui/messages.py " \
        "RULES):\n  " + "\n  ".join(bad)


BAD_VALUES = ("abc", -(10**13), 10**13, 3.7, 17, [], ["x"], "", {"a": 1})


def test_every_field_problem_has_chinese():
    problems = []
    for name in FIELDS:
        for value in BAD_VALUES:
            try:
                validate({name: value}, require_inputs=False)
            except ConfigError as e:
                problems += [p for p in e.problems if p.split(":", 1)[0] == name]
    for data in ({"lora_rnak": 3}, {"hf_token": "x"}, {"nonsense_option": 1}):
        with pytest.raises(ConfigError) as e:
            validate(data, require_inputs=False)
        problems += e.value.problems
    assert len(problems) > 2 * len(FIELDS)
    bad = _untranslated(problems)
    assert not bad, "validation problems without Chinese:\n  " + "\n  ".join(bad)
    zh = translate("lora_rank: input should be greater than or equal to 1 (got 0; allowed ≥ 1 "
                   "and ≤ 1024)")
    assert zh == "lora_rank：应大于或等于 1（当前：0；允许：≥ 1 且 ≤ 1024）"


def test_problems_reach_the_page_in_both_languages_and_the_cli_in_english():
    from webui.form import problems_markdown

    with pytest.raises(ConfigError) as e:
        validate({"zero_stage": 0, "offload_param_device": "cpu"}, require_inputs=False)
    # The CLI and logs read the English as it was.
    assert "offload_param_device: parameter offload needs ZeRO-3" in str(e.value)
    md = problems_markdown(e.value.problems)
    assert '<span class="zl-en">parameter offload needs ZeRO-3' in md
    assert '<span class="zl-zh">参数卸载需要 ZeRO-3' in md
    assert '<span class="zl-zh">✗ **1 个问题**' in md


# ---------------------------------------------------------------------- estimate
def _estimate_texts():
    from backend.planning import estimator

    texts, parts = [], set()
    for preset, devices in (("cpu_demo", ("cpu",)), ("cpu_demo_zero3", ("cuda",)),
                            ("qwen_image_low_vram", ("cpu", "cuda")),
                            ("qwen_image_single_gpu", ("cuda",))):
        cfg = load_preset(preset)
        for device in devices:
            est = estimator.estimate_memory(cfg, device=device)
            texts += est.summary().splitlines()
            for s in est.stages.values():
                parts |= set(s.gpu) | set(s.host)
            for gpu_gb in (None, 4, 16, 24, 48, 80, 1000):
                for host_gb in (None, 1, 4096):
                    texts.append(estimator.fits(est, gpu_gb, host_gb)[1])
    return texts, parts


def test_every_line_of_the_estimate_has_chinese():
    from webui.tabs.training import estimate_markdown

    texts, parts = _estimate_texts()
    bad = _untranslated(texts)
    assert not bad, "estimate lines without Chinese:\n  " + "\n  ".join(bad)
    # Every part the estimator names, from its source too (parts no config above reached).
    src = ast.parse((REPO / "backend" / "planning" / "estimator.py").read_text())
    named = {n.slice.value for n in ast.walk(src) if isinstance(n, ast.Subscript) and
             isinstance(n.value, ast.Attribute) and n.value.attr in ("gpu", "host") and
             isinstance(n.slice, ast.Constant)}
    missing = sorted((parts | named) - set(messages.PARTS_ZH))
    assert not missing, f"estimate parts without Chinese (webui/messages.py PARTS_ZH): {missing}"
    # What the Training tab shows: every line holds its Chinese.
    md = estimate_markdown(load_preset("qwen_image_low_vram"))
    for line in md.splitlines():
        if english_left(line):
            assert 'class="zl-zh"' in line, line


# ---------------------------------------------------------------------- history
def test_history_headers_and_status_words_have_chinese():
    from backend.jobs.history import TERMINAL
    from webui.tabs import runs

    assert set(runs.HEADERS) <= set(messages.HISTORY_HEADERS_ZH), runs.HEADERS
    statuses = ("queued", "running") + tuple(TERMINAL)
    missing = [s for s in statuses if s not in messages.STATUS_ZH]
    assert not missing, f"status words without Chinese: {missing}"
    assert runs.headers("zh")[:3] == ["运行 ID", "名称", "状态"]
    table = runs.table([{"id": "r1", "name": "demo", "status": "failed", "created_at": 0,
                         "stages": [{"name": "train", "status": "failed"}],
                         "failure_reason": "Choose a run first."}], "zh")
    row = table.value["data"][0]
    assert '<span class="zl-zh">失败</span>' in row[2]
    assert row[3].startswith("train:") and "失败" in row[3]


def _diagnosis_titles() -> list[str]:
    """The title of every ``Diagnosis`` the failure reader can make (read from its source,
    so a new one counts the moment it is written)."""
    from backend.jobs import diagnosis

    titles = []
    for node in ast.walk(ast.parse(inspect.getsource(diagnosis))):
        if isinstance(node, ast.Call) and getattr(node.func, "id", "") == "Diagnosis":
            title = node.args[1]
            parts = title.values if isinstance(title, ast.JoinedStr) else [title]
            titles.append("".join(p.value for p in parts if isinstance(p, ast.Constant)))
    return titles


def test_run_notes_and_failure_lines_have_chinese():
    """What the history's note column and a run's failure line say: stop reasons, each exit
    status, each diagnosis; another program's error line is quoted as it is."""
    from backend.jobs.diagnosis import reason_line

    titles = _diagnosis_titles()
    assert len(titles) >= 10, titles
    lines = ["stopped on request", "stopped on request before it started"] + [
        reason_line("train", code, "") for code in (1, 2, 137, -9, 0, None)] + [
        f"stage 'train' exited with code 1: {t}" for t in titles] + [
        f"stopped on request; {reason_line('train', 143, '')}", "Failure: stopped"]
    missing = [line for line in lines if translate(line) is None]
    assert not missing, "run notes without Chinese (webui/messages.py, run notes):\n  " + \
        "\n  ".join(missing)
    line = ("stage 'data_process' exited with code 2: Dataset problems: photo.png: cannot "
            "read image photo.png: image file is truncated")  # as a run's note says it
    assert translate(line) == ("阶段 'data_process' 以退出码 2 结束：数据集问题：photo.png："
                               "无法读取该图像（\"image file is truncated\"）"), translate(line)
    assert translate("stage 'train' exited with code 1: RuntimeError: boom") == \
        '阶段 \'train\' 以退出码 1 结束："RuntimeError: boom"'
    # a render's name (the app gives it) follows the page; a name a user typed stays as it is
    from webui.tabs import runs

    row = runs.table([{"id": "r2", "name": "render my run", "status": "stopped",
                       "created_at": 0, "stages": [], "note": "stopped on request"}],
                     "zh").value["data"][0]
    assert '<span class="zl-zh">渲染 my run</span>' in row[1], row[1]
    assert '<span class="zl-zh">按请求停止</span>' in row[6], row[6]
    row = runs.table([{"id": "r3", "name": "<b>wan video</b>", "status": "queued",
                       "created_at": 0, "stages": []}], "zh").value["data"][0]
    assert row[1] == "&lt;b&gt;wan video&lt;/b&gt;"


# ---------------------------------------------------------------------- the page, in Chinese
# Every visible text node, outside code (option values, generated files, logs), inputs and
# the user's own captions.
VISIBLE_TEXT_JS = """
() => {
  const skip = ('CODE,PRE,TEXTAREA,INPUT,SCRIPT,STYLE,SVG,svg,.cm-editor,.zl-log,' +
                '[data-testid=status-tracker],.sr-only,#thumbs').split(',');
  const out = [];
  const walker = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
  for (let n = walker.nextNode(); n; n = walker.nextNode()) {
    const el = n.parentElement;
    const text = n.textContent.trim();
    if (!el || !text) continue;
    if (skip.some(s => el.closest(s))) continue;
    if (el.closest('#captions') && !el.closest('th, label, [data-testid=block-info]')) continue;
    if (!el.checkVisibility({checkOpacity: true, checkVisibilityCSS: true})) continue;
    const r = el.getBoundingClientRect();
    if (r.width <= 1 || r.height <= 1) continue;
    out.push(text);
  }
  return out;
}
"""
OPEN_ACCORDIONS_JS = """
() => {
  let opened = 0;
  for (const b of document.querySelectorAll(
      '[id^=adv-] > button, #import-acc > button, #upload-acc > button')) {
    if (b.checkVisibility() && b.getAttribute('aria-expanded') !== 'true') {
      b.click();
      opened += 1;
    }
  }
  return opened;
}
"""
# Names: the language switch's own "English", gradio's name in its footer.
NAMES = {"English", "Gradio"}


def _typed_by_users(workspace: Path) -> list[str]:
    """What the server's users typed (run names, sample prompts; the session server holds
    other tests' runs): shown as it is in either language. Longest first."""
    from backend.jobs.runner import Runner
    from webui.jobs import run_config

    typed = set()
    for run in Runner(workspace, auto_start=False).list_runs():
        typed.add(run.get("name") or "")
        typed.update(run_config(run).get("sample_prompts") or [])
    return sorted((t for t in typed if t.strip()), key=len, reverse=True)


def _english_on_page(page, typed: list[str]) -> list[str]:
    def product_text(t: str) -> str:
        for user_text in typed:
            t = t.replace(user_text, " ")
        return t

    return sorted({t for t in page.evaluate(VISIBLE_TEXT_JS)
                   if [w for w in english_left(product_text(t)) if w not in NAMES]})


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_chinese_page_shows_no_english(browser, server):
    """Switch to Chinese, walk every tab with its accordions open, make a problem and an
    estimate appear: no visible text is left in English but what users typed (the runs,
    notes and samples other tests left on the session's server show in the page's
    language)."""
    from playwright.sync_api import expect

    from tests.harness.browser import md, new_page, tab

    page = new_page(browser, server[0])
    page.set_default_timeout(180_000)  # a page re-rendered in the other language
    page.click("#lang-zh")
    expect(page.locator("#tab-training-button")).to_contain_text("训练设置",
                                                                 timeout=240_000)
    found: dict[str, list[str]] = {}
    opened = 0
    for name in ("model", "dataset", "training", "run", "results", "runs"):
        if name != "model":  # the tab the page opens on
            tab(page, name)
        if name == "training":
            # the estimate of the loaded preset, then a problem in the form
            expect(md(page, "estimate")).to_contain_text("显存估算", timeout=240_000)
            page.fill("#field-lora_rank input", "0")
            page.press("#field-lora_rank input", "Tab")
            expect(md(page, "err-lora_rank")).to_contain_text("应大于或等于 1",
                                                              timeout=120_000)
            expect(md(page, "problems")).to_contain_text("1 个问题")
            expect(page.locator("#field-lora_rank")).to_contain_text(
                "LoRA 秩 · lora_rank")
        if name == "runs":
            expect(page.locator("#runs-table")).to_contain_text("状态",
                                                                 timeout=60_000)
        # every closed accordion of the tab opened in one go (a click each through
        # the driver costs seconds on a page this size)
        opened += page.evaluate(OPEN_ACCORDIONS_JS)
        page.wait_for_timeout(500)
        left = _english_on_page(page, _typed_by_users(server[1]))
        if left:
            found[name] = left
    page.context.close()
    assert opened >= 5, f"only {opened} accordions opened: their selectors changed?"
    assert not found, "English left on the Chinese page, by tab (translate it: " \
        "webui/i18n.py, webui/messages.py):\n" + "\n".join(
            f"  {t}: {texts}" for t, texts in found.items())
