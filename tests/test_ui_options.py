"""The training options in a real headless Chromium: a preset that picks Adafactor shows
Adafactor's fields and hides AdamW's, picking AdamW swaps them (the hidden Adafactor value
still goes into the run's settings), the Training tab shows the derived DeepSpeed batch size,
the Dataset check shows the bucket plan, and a short run with held-out samples plots the
validation loss beside the training loss in the Run tab.

The app server and the browser are tests/test_ui.py's fixtures (this module gets its own
server and workspace). The run is the CPU demo cut short: one-shot training (no cache
stage, no samples), 8 images with 2 held out, batches of 2 and 3 of them accumulated, so one
optimizer step with the validation loss before and after it.
"""
from __future__ import annotations

import re

import pytest
import yaml

from tests.harness.browser import RUN_ID, STEP_S, field, md, new_page, pick, tab
from tests.harness.stages import REPO

pytest.importorskip("playwright.sync_api")
from playwright.sync_api import expect  # noqa: E402

RUN_S = 10 * 60
pytestmark = [pytest.mark.slow, pytest.mark.timeout(RUN_S + 10 * 60)]

PRESET = "short_validation"


def _write_preset(ws) -> None:
    """The CPU demo preset, cut short, with validation and Adafactor (as a user saves one)."""
    cfg = yaml.safe_load((REPO / "presets" / "cpu_demo.yaml").read_text(encoding="utf-8"))
    assets = REPO / "backend" / "assets"
    cfg.update(models_dir=str(assets), dataset_base_path=str(assets / "demo_dataset"),
               dataset_metadata_path=str(assets / "demo_dataset" / "metadata.csv"),
               run_name="short-validation", split_training=False, stages=["train"],
               dataset_repeat=1, num_epochs=1, batch_size=2, validation_samples=2,
               validation_every_n_steps=1, optimizer="adafactor", adafactor_decay_rate=-0.5)
    (ws / "presets").mkdir(exist_ok=True)
    (ws / "presets" / f"{PRESET}.yaml").write_text(yaml.safe_dump(cfg), encoding="utf-8")


def _open_advanced(page, group: str) -> None:
    acc = page.locator(f"#adv-{group}")
    if not acc.locator(".label-wrap.open").count():
        acc.locator(".label-wrap").first.click()


def test_option_fields_bucket_plan_and_validation_plot(browser, server):
    url, ws = server
    _write_preset(ws)
    page = new_page(browser, url)
    page.set_default_timeout(STEP_S * 1000)  # a busy machine may take a while per click
    try:
        # A preset that picks Adafactor: its fields shown, AdamW's hidden.
        pick(page, "preset", PRESET)
        expect(md(page, "preset-msg")).to_contain_text(PRESET, timeout=STEP_S * 1000)
        tab(page, "training")
        expect(field(page, "optimizer")).to_have_value("adafactor")
        _open_advanced(page, "training")
        expect(page.locator("#field-adafactor_decay_rate")).to_be_visible(timeout=STEP_S * 1000)
        expect(page.locator("#field-adam_beta1")).to_be_hidden()
        expect(page.locator("#field-prodigy_d_coef")).to_be_hidden()
        # The derived DeepSpeed batch size, never asked for, follows the batch fields.
        batch = md(page, "train-batch")
        expect(batch).to_contain_text("2 = batch_size 2 × gradient_accumulation_steps 1 × 1",
                                      timeout=STEP_S * 1000)
        field(page, "gradient_accumulation_steps").fill("3")
        field(page, "gradient_accumulation_steps").press("Tab")
        expect(batch).to_contain_text("6 = batch_size 2 × gradient_accumulation_steps 3 × 1",
                                      timeout=STEP_S * 1000)

        # Picking AdamW swaps the fields; the hidden Adafactor value is still written (the
        # run's run.yaml, below).
        pick(page, "field-optimizer", "adamw")
        expect(page.locator("#field-adam_beta1")).to_be_visible(timeout=STEP_S * 1000)
        expect(page.locator("#field-adafactor_decay_rate")).to_be_hidden()

        # A short run (3 batches of 2, one optimizer step) while the dataset is checked.
        tab(page, "run")
        page.click("#run-start")
        expect(md(page, "run-message")).to_contain_text("Started run", timeout=STEP_S * 1000)
        run_id = RUN_ID.search(md(page, "run-message").inner_text()).group(0)

        # The Dataset check: the bucket plan of the 6 trained images in batches of 2.
        tab(page, "dataset")
        page.click("#data-check")
        msg = md(page, "data-msg")
        expect(msg).to_contain_text("Bucket plan", timeout=STEP_S * 1000)
        expect(msg).to_contain_text("3 batch(es) per epoch")
        expect(msg).to_contain_text("2 image(s) held out")
        expect(msg.locator("table tbody tr td")).to_have_text(["64×64", "6", "3", "0", "0"])

        # The validation loss is logged and plotted beside the training loss.
        tab(page, "run")
        expect(md(page, "run-current")).to_contain_text("succeeded", timeout=RUN_S * 1000)
        progress = page.locator("#run-progress .zl-stats")
        expect(progress).to_contain_text(re.compile(r"validation loss \d+\.\d{4} at step 1"),
                                         timeout=STEP_S * 1000)
        legend = page.locator("#loss-plot svg text")
        expect(legend.filter(has_text="validation loss")).to_have_count(1, timeout=STEP_S * 1000)
        expect(legend.filter(has_text="training loss")).to_have_count(1)
        # In Chinese the legend follows.
        page.click("#lang-zh")
        expect(legend.filter(has_text="验证损失")).to_have_count(1, timeout=STEP_S * 1000)
        expect(legend.filter(has_text="训练损失")).to_have_count(1)

        # What the run logged: 4 validation points (steps 0..3) and its resolved settings.
        from backend.core.rundir import RunDir
        from backend.jobs.runner import Runner

        runner = Runner(ws, auto_start=False)
        prog = runner.progress(run_id)
        assert [s for s, _ in prog["val_losses"]] == [0, 1]
        assert [s for s, _ in prog["losses"]] == [1]
        saved = yaml.safe_load(RunDir(runner.get_run(run_id)["run_dir"]).run_yaml.read_text())
        assert saved["optimizer"] == "adamw" and saved["adafactor_decay_rate"] == -0.5
        assert saved["gradient_accumulation_steps"] == 3 and saved["batch_size"] == 2
    finally:
        page.context.close()
