"""More of the web UI in a real headless Chromium: the Results grid showing all of its rows
(and an edit run's input images beside them), an edit dataset's pairs on the Dataset tab.

The app server and the browser are ``tests/test_ui.py``'s fixtures (one server for this
module); the runs whose samples the Results tab shows are written into the workspace as a
finished run would leave them, so no stage has to run here.
"""
from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("playwright.sync_api")
from playwright.sync_api import expect  # noqa: E402

from tests.test_ui import (STEP_S, browser, field, md, new_page, pick, server,  # noqa: E402,F401
                           tab)

pytestmark = [pytest.mark.slow, pytest.mark.timeout(20 * 60)]


@pytest.fixture(scope="module")
def page(browser, server):  # noqa: F811 - the module's one page, after its first refresh
    p = new_page(browser, server[0])
    p.set_default_timeout(STEP_S * 1000 * 2)  # a form-wide update takes a while on 2 cores
    # The page's first refresh has landed: a preset loaded now is not overwritten by it.
    expect(md(p, "preset-diff")).to_contain_text("Same as preset", timeout=STEP_S * 1000)
    yield p
    p.context.close()


def natural_widths(page, selector: str) -> list[int]:
    """The pixel widths of the pictures the page shows, once all have loaded."""
    page.wait_for_function(f"() => [...document.querySelectorAll({selector!r})]"
                           ".every(e => e.complete && e.naturalWidth > 0)",
                           timeout=STEP_S * 1000)
    return page.eval_on_selector_all(selector, "els => els.map(e => e.naturalWidth)")


# ---------------------------------------------------------------------- results
PROMPTS = ["turn the circle red", "make the square green", "add a blue triangle"]


def _finished_edit_run(ws: Path) -> str:
    """A succeeded edit run whose samples are 3 prompts × (base, one checkpoint), each
    prompt with its input images, as the sample stage writes them."""
    from PIL import Image

    from backend.jobs.runner import Runner
    from backend.plan import StagePlan
    from backend.rundir import SAMPLES_INDEX, RunDir

    run_dir = ws / "runs" / "edit-run"
    samples = RunDir(run_dir).samples
    entries = []
    for i, prompt in enumerate(PROMPTS):
        inputs = samples / f"inputs/p{i:02d}.png"
        inputs.parent.mkdir(parents=True, exist_ok=True)
        Image.new("RGB", (128, 64), (200, 200, 40 * i)).save(inputs)
        for ckpt, colour in ((None, (40 * i, 40, 40)), ("step-2", (40, 40 * i, 200))):
            name = f"{ckpt or 'base'}/p{i:02d}-seed0.png"
            (samples / name).parent.mkdir(parents=True, exist_ok=True)
            Image.new("RGB", (64, 64), colour).save(samples / name)
            entries.append({"prompt": prompt, "prompt_index": i, "checkpoint":
                            str(run_dir / "output" / "step-2.safetensors") if ckpt else None,
                            "checkpoint_name": ckpt or "base", "scale": 1.0 if ckpt else 0.0,
                            "image": name, "seed": 0, "inputs": [f"/data/in{i}.png"],
                            "input_image": str(inputs.relative_to(samples))})
    (samples / SAMPLES_INDEX).write_text(json.dumps({"version": 1, "images": entries}))
    yaml = "schema_version: 1\nmodel_family: qwen_image\n"
    runner = Runner(ws)
    run_id = runner.submit_stages([StagePlan("train", [sys.executable, "-c", "pass"])],
                                  run_dir, yaml, name="edit run")
    deadline = time.monotonic() + STEP_S
    while runner.get_run(run_id)["status"] != "succeeded":
        assert time.monotonic() < deadline, runner.get_run(run_id)
        time.sleep(0.5)
    return run_id


def test_results_grid_shows_every_row_and_an_edit_runs_input_images(page, server):
    run_id = _finished_edit_run(server[1])
    tab(page, "results")
    page.click("#res-refresh")
    pick(page, "res-run", run_id)
    cols = md(page, "res-columns")
    expect(cols).to_contain_text("input images", timeout=STEP_S * 1000)
    expect(cols).to_contain_text("base model")
    expect(cols).to_contain_text("step-2 × 1")
    imgs = page.locator("#res-grid img")
    expect(imgs).to_have_count(3 * 3, timeout=STEP_S * 1000)
    # Each row starts with the prompt's input images (the wide 128×64 picture).
    assert natural_widths(page, "#res-grid img") == [128, 64, 64] * 3
    # The last row is inside the gallery's box, which scrolls nothing away.
    wrap = page.locator("#res-grid .grid-wrap")
    hidden = wrap.evaluate("w => w.scrollHeight - w.clientHeight")
    assert hidden <= 1, f"the gallery hides {hidden}px of its rows"
    last, box = imgs.nth(8).bounding_box(), wrap.bounding_box()
    assert last and box and last["height"] > 20
    assert last["y"] + last["height"] <= box["y"] + box["height"] + 1, (last, box)


# ---------------------------------------------------------------------- edit datasets
def test_an_edit_dataset_shows_its_pairs_and_instructions(page, tmp_path):
    from tests.test_qwen_image_edit import make_edit_dataset

    make_edit_dataset(tmp_path)
    tab(page, "dataset")
    field(page, "dataset_base_path").fill(str(tmp_path))
    field(page, "dataset_metadata_path").fill(str(tmp_path / "metadata.json"))
    field(page, "dataset_metadata_path").press("Tab")
    page.click("#captions-load")
    pairs = page.locator("#edit-pairs img")
    expect(pairs).to_have_count(3, timeout=STEP_S * 1000)
    expect(page.locator("#captions")).to_contain_text("put the circle of picture 2 in picture 1")
    # Each picture is the input image(s), an arrow, the target: two inputs make it wider.
    widths = natural_widths(page, "#edit-pairs img")
    assert widths[0] == widths[1] < widths[2], widths
