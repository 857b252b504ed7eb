"""Chinese for everything the UI can show, so no later feature adds English-only text.

Enumerated here: every ``T()`` key, every schema field's label and help line, every problem
bad values of every field give (each a message with Chinese: the tables themselves are
checked in ``tests/test_messages.py``), the memory estimate's lines, and the history
table's headers and status words. Each failure lists exactly
what lacks Chinese. The browser test switches a real page to Chinese, walks the tabs, makes a
problem and an estimate appear, and finds no English word in the visible text.
"""
from __future__ import annotations

from pathlib import Path

import pytest

from backend.config.errors import ConfigError
from backend.config.meta import field_meta
from backend.config.presets import load_preset
from backend.config.schema import FIELDS
from backend.config.validation import validate
from backend.core.messages import ZH, Msg
from webui import i18n, messages
from webui.messages import english_left

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


# ---------------------------------------------------------------------- messages
# Every sentence the server computes is a message (backend/core/messages): a code rendered
# from the English and the Chinese table. Each area's own tests (tests/test_messages_*.py)
# drive its sentences; here, the whole of what validation and the estimate can say.
def _not_chinese(texts) -> list[str]:
    """Texts that are no message, or whose Chinese leaves English words."""
    return [f"{t!r}" + (f" -> left in English: {english_left(t.text('zh'))}"
                        if isinstance(t, Msg) else " is not a message")
            for t in dict.fromkeys(texts)
            if not isinstance(t, Msg) or english_left(t.text("zh"))]


BAD_VALUES = ("abc", -(10**13), 10**13, 3.7, 17, [], ["x"], "", {"a": 1})


def test_every_field_problem_is_a_message_with_chinese():
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
    bad = _not_chinese(problems)
    assert not bad, "validation problems without Chinese:\n  " + "\n  ".join(bad)
    with pytest.raises(ConfigError) as e:
        validate({"lora_rank": 0}, require_inputs=False)
    assert e.value.problems[0].text("zh") == "`lora_rank`：应大于或等于 1（当前：`0`；允许：≥ 1 且 ≤ 1024）"


def test_problems_reach_the_page_in_both_languages_and_the_cli_in_english():
    from webui.form import problems_markdown

    with pytest.raises(ConfigError) as e:
        validate({"zero_stage": 0, "offload_param_device": "cpu"}, require_inputs=False)
    # The CLI and logs read the English as it was.
    assert "offload_param_device: parameter offload needs ZeRO-3" in str(e.value)
    md = problems_markdown(e.value.problems)
    assert "parameter offload needs ZeRO-3" in md and "参数卸载需要 ZeRO-3" in md
    assert '<span class="zl-zh">✗ **1 个问题**' in md


# ---------------------------------------------------------------------- estimate
def test_every_line_of_the_estimate_has_chinese():
    from backend.planning import estimator
    from webui.tabs.training import estimate_markdown

    texts = []
    for preset, devices in (("cpu_demo", ("cpu",)), ("cpu_demo_zero3", ("cuda",)),
                            ("qwen_image_low_vram", ("cpu", "cuda")),
                            ("qwen_image_single_gpu", ("cuda",))):
        cfg = load_preset(preset)
        for device in devices:
            est = estimator.estimate_memory(cfg, device=device)
            texts += est.summary_lines()
            for gpu_gb in (None, 4, 16, 24, 48, 80, 1000):
                for host_gb in (None, 1, 4096):
                    texts.append(estimator.fits(est, gpu_gb, host_gb)[1])
    bad = _not_chinese(texts)
    assert not bad, "estimate lines without Chinese:\n  " + "\n  ".join(bad)
    # What the Training tab shows: every line holds its Chinese.
    md = estimate_markdown(load_preset("qwen_image_low_vram"))
    for line in md.splitlines():
        if english_left(line):
            assert 'class="zl-zh"' in line, line


# ---------------------------------------------------------------------- history
def test_history_headers_and_status_words_have_chinese():
    from backend.jobs.history import TERMINAL
    from webui.tabs import runs

    statuses = ("queued", "running") + tuple(TERMINAL)
    missing = [s for s in statuses if f"status.{s}" not in ZH]
    assert not missing, f"status words without Chinese: {missing}"
    assert runs.headers("zh")[:3] == ["运行 ID", "名称", "状态"]
    table = runs.table([{"id": "r1", "name": "demo", "status": "failed", "created_at": 0,
                         "stages": [{"name": "train", "status": "failed"}],
                         "failure_reason": "Choose a run first."}], "zh")
    row = table.value["data"][0]
    assert '<span class="zl-zh">失败</span>' in row[2]
    assert row[3].startswith("train:") and "失败" in row[3]


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
    """What the server's users typed (run names, sample prompts in the config and in the
    samples a run rendered; the session server holds other tests' runs): shown as it is in
    either language. Longest first."""
    import json

    from backend.core.rundir import SAMPLES_INDEX, RunDir
    from backend.jobs.runner import Runner
    from webui.jobs import run_config

    typed = set()
    for run in Runner(workspace, auto_start=False).list_runs():
        typed.add(run.get("name") or "")
        typed.update(run_config(run).get("sample_prompts") or [])
        index = RunDir(run["run_dir"]).samples / SAMPLES_INDEX
        if index.is_file():
            typed.update(str(e.get("prompt") or "")
                         for e in json.loads(index.read_text()).get("images", []))
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
    # the page's first refresh has landed: a click before its events are bound is lost
    expect(md(page, "preset-diff")).to_contain_text("Same as preset", timeout=240_000)
    page.click("#lang-zh")
    expect(page.locator("#tab-training-button")).to_contain_text("训练设置",
                                                                 timeout=240_000)
    found: dict[str, list[str]] = {}
    opened = 0
    for name in ("model", "dataset", "training", "run", "results", "runs", "models"):
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
