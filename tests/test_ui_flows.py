"""More of the web UI in a real headless Chromium: importing the reference's low-VRAM command
onto the low-VRAM preset, the target-GPU panel's Apply, the Results grid showing all of its
rows (and an edit run's input images beside them).

The app server and the browser are ``tests/test_ui.py``'s fixtures (one server for this
module); the runs whose samples the Results tab shows are written into the workspace as a
finished run would leave them, so no stage has to run here.
"""
from __future__ import annotations

import json
import re
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("playwright.sync_api")
from playwright.sync_api import expect  # noqa: E402

from tests.test_importer import SEED_COMMANDS  # noqa: E402
from tests.test_ui import (STEP_S, browser, field, md, new_page, pick, server,  # noqa: E402,F401
                           tab)

pytestmark = [pytest.mark.slow, pytest.mark.timeout(20 * 60)]


@pytest.fixture(scope="module")
def page(browser, server):  # noqa: F811 - the module's one page, after its first refresh
    p = new_page(browser, server[0])
    # The page's first refresh has landed: a preset loaded now is not overwritten by it.
    expect(md(p, "preset-diff")).to_contain_text("Same as preset", timeout=STEP_S * 1000)
    yield p
    p.context.close()


def load_preset(page, name: str) -> None:
    tab(page, "model")
    pick(page, "preset", name)
    page.click("#preset-load")
    expect(md(page, "preset-msg")).to_contain_text(f"Loaded preset {name}",
                                                   timeout=STEP_S * 1000)


# ---------------------------------------------------------------------- import
def test_import_onto_the_low_vram_preset_keeps_zero3_and_lists_the_changes(page):
    """The reference's own low-VRAM commands, whose launch files are not on this machine,
    onto the low-VRAM preset: ZeRO-3 and both offloads stay on (the files are recognised by
    name), the fields the command sets change and each is listed old → new."""
    from backend.config import load_preset as preset

    low = preset("qwen_image_low_vram")
    load_preset(page, "qwen_image_low_vram")
    tab(page, "training")
    expect(field(page, "zero_stage")).to_have_value("3", timeout=STEP_S * 1000)
    field(page, "lora_rank").fill("8")  # a field the user changed: the command sets it to 32
    field(page, "lora_rank").press("Tab")
    page.click("#import-acc .label-wrap")
    page.fill("#import-text textarea", SEED_COMMANDS)
    page.click("#import-btn")
    notes = md(page, "import-notes")
    expect(notes).to_contain_text("field(s) changed", timeout=STEP_S * 1000)
    text = notes.inner_text()
    assert "recognised it as the reference's low-VRAM accelerate config" in text, text
    assert "ds_z3_cpuoffload.json" in text
    # Distributed settings as the reference's files say (and as the preset had them).
    expect(field(page, "zero_stage")).to_have_value("3")
    expect(field(page, "offload_param_device")).to_have_value("cpu")
    expect(field(page, "offload_optimizer_device")).to_have_value("cpu")
    expect(page.locator("#field-initialize_model_on_cpu input")).to_be_checked()
    # What the command sets changed, each listed with its old and new value ...
    expect(field(page, "lora_rank")).to_have_value("32")
    assert re.search(r"lora_rank: 8 → 32", text), text
    changed = set(re.findall(r"^(\w+): .* → ", text, re.M))
    assert "dataset_base_path" in changed and "lora_target_modules" in changed
    # ... and nothing it leaves out, nor what it sets to the value the form had.
    for name in ("zero_stage", "offload_param_device", "num_epochs", "dataset_repeat",
                 "sample_cpu_offload", "data_process_offload"):
        assert name not in changed, (name, text)
    expect(field(page, "data_process_offload")).to_have_value(low.data_process_offload)
    expect(field(page, "num_epochs")).to_have_value(str(low.num_epochs))
    m = re.search(r"(\d+) field\(s\) changed", text)
    assert m and int(m.group(1)) == len(changed), text


# ---------------------------------------------------------------------- target GPU
def test_target_gpu_apply_changes_the_fields_the_panel_names(page):
    load_preset(page, "qwen_image_low_vram")
    tab(page, "training")
    expect(field(page, "zero_stage")).to_have_value("3", timeout=STEP_S * 1000)
    pick(page, "target-gpu", "24 GB GPU")
    est = md(page, "estimate")
    expect(est).to_contain_text("Changes it makes:", timeout=STEP_S * 1000)
    line = next(x for x in est.inner_text().splitlines() if "Changes it makes:" in x)
    changes = dict(re.findall(r"(\w+) → ([^,]+)", line.split(":", 1)[1]))
    assert changes, line
    expect(page.locator("#apply-method")).to_be_visible()
    # Nothing changes until the user applies it.
    expect(field(page, "zero_stage")).to_have_value("3")
    page.click("#apply-method")
    expect(est).to_contain_text("The form already uses it.", timeout=STEP_S * 1000)
    expect(page.locator("#apply-method")).to_be_hidden()
    from backend.config import FIELDS, field_meta

    for name, value in changes.items():
        value = value.strip()
        assert name in FIELDS, name
        if field_meta(name)["group"] in ("model", "data"):
            tab(page, "model" if field_meta(name)["group"] == "model" else "dataset")
        else:
            tab(page, "training")
        box = page.locator(f"#field-{name} input[type=checkbox]")
        if box.count():
            (expect(box).to_be_checked() if value == "True" else
             expect(box).not_to_be_checked())
        else:
            expect(field(page, name)).to_have_value(value)
