"""More of the web UI in a real headless Chromium: the Results grid showing all of its rows
(and an edit run's input images beside them), an edit dataset's pairs on the Dataset tab,
importing the reference's low-VRAM command onto the low-VRAM preset and the target-GPU
panel's Apply (last: it loads a preset into the module's page).

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

from tests.harness.browser import STEP_S, field, md, new_page, pick, tab
from tests.harness.seeds import SEED_COMMANDS

pytestmark = [pytest.mark.slow, pytest.mark.timeout(20 * 60)]


@pytest.fixture(scope="module")
def page(browser, server):  # noqa: F811 - the module's one page, after its first refresh
    p = new_page(browser, server[0])
    p.set_default_timeout(STEP_S * 1000 * 2)  # a form-wide update takes a while on 2 cores
    # The page's first refresh has landed: a preset loaded now is not overwritten by it.
    expect(md(p, "preset-diff")).to_contain_text("Same as preset", timeout=STEP_S * 1000)
    yield p
    p.context.close()


def load_preset(page, name: str) -> None:
    """Pick a preset (picking loads it) and wait until the form holds it."""
    tab(page, "model")
    pick(page, "preset", name)
    expect(md(page, "preset-msg")).to_contain_text(f"Loaded preset {name}",
                                                   timeout=STEP_S * 1000 * 2)


def show_field(page, name: str):
    """Go where field ``name`` is (its tab; its group's Advanced accordion opened when it is
    an advanced field) and return its input."""
    from backend.config.meta import field_meta

    meta = field_meta(name)
    tab(page, {"model": "model", "data": "dataset", "captions": "dataset"}.get(meta["group"],
                                                                              "training"))
    if meta["ui"] == "advanced" and not page.locator(f"#field-{name}").is_visible():
        page.click(f"#adv-{meta['group']} > button")
    expect(page.locator(f"#field-{name}")).to_be_visible()
    return field(page, name)


def natural_widths(page, selector: str) -> list[int]:
    """The pixel widths of the pictures the page shows, once all have loaded: checked and
    read in one step (the gallery may render its pictures again in between)."""
    found = page.wait_for_function(
        f"() => {{ const els = [...document.querySelectorAll({selector!r})]; "
        "return els.length && els.every(e => e.complete && e.naturalWidth > 0) "
        "? els.map(e => e.naturalWidth) : null; }", timeout=STEP_S * 1000)
    return found.json_value()


# ---------------------------------------------------------------------- results
PROMPTS = ["turn the circle red", "make the square green", "add a blue triangle"]


def _finished_edit_run(ws: Path) -> str:
    """A succeeded edit run whose samples are 3 prompts × (base, one checkpoint), each
    prompt with its input images, as the sample stage writes them."""
    from PIL import Image

    from backend.jobs.runner import Runner
    from backend.planning.plan import StagePlan
    from backend.core.rundir import SAMPLES_INDEX, RunDir

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
    from tests.harness.pairs import make_edit_dataset

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


def test_the_dataset_check_shows_each_mask_over_its_image(page, tmp_path):
    """masked_loss on, masks from a folder, a column and alpha: the check shows the three
    images with their masks over them."""
    from tests.harness.masks import masked_dataset

    data = masked_dataset(tmp_path / "masked")
    tab(page, "dataset")
    field(page, "dataset_base_path").fill(str(data))
    field(page, "dataset_metadata_path").fill(str(data / "metadata.csv"))
    field(page, "dataset_metadata_path").press("Tab")
    show_field(page, "masked_loss").check()
    show_field(page, "alpha_mask").check()
    mask_path = show_field(page, "mask_path")
    mask_path.fill(str(data / "masks"))
    mask_path.press("Tab")
    tab(page, "dataset")
    page.click("#data-check")
    expect(page.locator("#mask-preview img")).to_have_count(3, timeout=STEP_S * 1000)
    expect(page.locator("#mask-preview")).to_contain_text("weight 0")


# ---------------------------------------------------------------------- training tab
def test_low_vram_import_keeps_zero3_then_the_target_gpu_apply(page):
    """One preset load (a form-wide update is the slow part in a browser) for both:
    1. the reference's own low-VRAM commands, whose launch files are not on this machine,
       onto the low-VRAM preset: ZeRO-3 and both offloads stay on (the files are recognised
       by name); only the fields the command sets change, each listed old → new;
    2. a target GPU picked, Apply pressed: the form's fields change as the panel said."""
    from backend.config.schema import FIELDS
    from backend.config.presets import load_preset as preset

    low = preset("qwen_image_low_vram")
    load_preset(page, "qwen_image_low_vram")
    tab(page, "training")
    expect(field(page, "zero_stage")).to_have_value("3", timeout=STEP_S * 1000)
    page.click("#import-acc .label-wrap")
    page.fill("#import-text textarea", SEED_COMMANDS)
    page.click("#import-btn")
    notes = md(page, "import-notes")
    expect(notes).to_contain_text("field(s) changed", timeout=STEP_S * 1000 * 2)
    text = notes.inner_text()
    assert "recognised it as the reference's low-VRAM accelerate config" in text, text
    assert "ds_z3_cpuoffload.json" in text
    # Distributed settings as the reference's files say (and as the preset had them).
    expect(field(page, "zero_stage")).to_have_value("3")
    expect(field(page, "offload_param_device")).to_have_value("cpu")
    expect(field(page, "offload_optimizer_device")).to_have_value("cpu")
    show_field(page, "initialize_model_on_cpu")
    expect(page.locator("#field-initialize_model_on_cpu input")).to_be_checked()
    # What the command sets and the preset had otherwise changed, each listed old → new ...
    changed = dict(re.findall(r"^(\w+): (.*) → ", text, re.M))
    assert changed.get("dataset_base_path") == "(empty)", text
    expect(show_field(page, "dataset_base_path")).to_have_value("data/example_image_dataset")
    # ... and nothing the command leaves out or sets to the value the form had.
    for name in ("zero_stage", "offload_param_device", "lora_rank", "num_epochs",
                 "dataset_repeat", "sample_cpu_offload", "data_process_offload"):
        assert name not in changed, (name, text)
    expect(show_field(page, "data_process_offload")).to_have_value(low.data_process_offload)
    m = re.search(r"(\d+) field\(s\) changed", text)
    assert m and int(m.group(1)) == len(changed), text

    tab(page, "training")
    pick(page, "target-gpu", "24 GB GPU")
    est = md(page, "estimate")
    expect(est).to_contain_text("Changes it makes:", timeout=STEP_S * 1000 * 2)
    line = next(x for x in est.inner_text().splitlines() if "Changes it makes:" in x)
    changes = dict(re.findall(r"(\w+) → ([^,]+)", line.split(":", 1)[1]))
    assert changes, line
    # Nothing changes until the user applies it.
    expect(field(page, "zero_stage")).to_have_value("3")
    page.click("#apply-method")
    expect(est).to_contain_text("The form already uses it.", timeout=STEP_S * 1000 * 2)
    expect(page.locator("#apply-method")).to_be_hidden()
    for name, value in changes.items():
        value = value.strip()
        assert name in FIELDS, name
        shown = show_field(page, name)
        box = page.locator(f"#field-{name} input[type=checkbox]")
        if box.count():
            (expect(box).to_be_checked() if value == "True" else
             expect(box).not_to_be_checked())
        else:
            expect(shown).to_have_value(value)
    assert changes["zero_stage"] == "0"
