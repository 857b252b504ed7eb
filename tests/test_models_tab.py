"""The Models tab as a person uses it, in Chromium, and the same through the API.

The app server is this module's own (``launch.py``; its models folder holds the tiny
Qwen-Image pipeline as ``Qwen/Qwen-Image``). No hub is reachable from the test machines:
the local stand-in of the Hugging Face Hub (``tests/harness/hub_server.py``) runs in this
process, serves the same tiny pipeline, and the server's ``HF_ENDPOINT`` points at it; it
sends files slowly so that the progress bar has time to move.
"""
from __future__ import annotations

import re
import shutil
import time

import pytest
from gradio_client import Client
from gradio_client.exceptions import AppError

from backend.models import inventory as inv
from tests.harness.app import AppServer, launcher_env
from tests.harness.hub_server import HubServer

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]
MODEL = "Qwen/Qwen-Image"


@pytest.fixture(scope="module")
def hub(tiny_model_dir):
    with HubServer("hf_unused", "alice") as server:
        server.add_model(MODEL, tiny_model_dir)
        server.rate = 600_000  # bytes/s: the tiny pipeline (about 4 MB) in several seconds
        yield server


@pytest.fixture(scope="module")
def app(tmp_path_factory, hub, tiny_model_dir):
    tmp = tmp_path_factory.mktemp("models-app")
    models = tmp / "models"
    shutil.copytree(tiny_model_dir, models / MODEL)
    server = AppServer(tmp, "--models-dir", str(models),
                       env=launcher_env(HF_ENDPOINT=hub.url, HF_HUB_OFFLINE="",
                                        TRANSFORMERS_OFFLINE="", HF_TOKEN=""))
    server.models = models
    yield server
    server.stop()


def _choose(page, elem_id: str, label: str) -> None:
    """Pick the option whose text is exactly ``label`` (others may contain it)."""
    page.click(f"#{elem_id} input")
    page.locator("ul[role=listbox] li").filter(
        has_text=re.compile(rf"^\W*{re.escape(label)}\s*$")).first.click()


def _bar(page) -> tuple[str, float]:
    """The bar's status and width, read together: the server replaces the whole bar on each
    answer, so two separate reads could pair one answer's status with another's width."""
    status, width = page.eval_on_selector(
        "#models-bar", "el => [el.dataset.status, el.querySelector('.zl-fill').style.width]")
    return status, float((width or "0%").rstrip("%"))


def test_a_model_is_listed_deleted_after_confirmation_and_downloaded_with_progress(
        browser, app, hub):
    from playwright.sync_api import expect

    from tests.harness.browser import md, new_page, tab

    size = inv.size_text(inv.model_entry(app.models, MODEL).size)
    page = new_page(browser, app.url)
    tab(page, "models")
    table = page.locator("#models-table")
    expect(table).to_contain_text(MODEL, timeout=60_000)
    row = table.locator("tr", has_text=MODEL)
    expect(row).to_contain_text(size)
    expect(row).to_contain_text("complete")

    # Delete asks for the box first; then the folder goes, and the table says so.
    _choose(page, "models-pick", MODEL)
    page.click("#models-delete")
    expect(md(page, "models-msg")).to_contain_text("Tick the box")
    assert (app.models / MODEL).is_dir()
    page.check("#models-confirm input")
    page.click("#models-delete")
    expect(md(page, "models-msg")).to_contain_text(f"Deleted {MODEL}")
    expect(table).not_to_contain_text(MODEL)
    assert not (app.models / MODEL).exists()

    # Download the family's sources from the local Hub: the bar moves, stops on Stop
    # (keeping what it has), the stopped record survives a reload, Download resumes it, and
    # it ends full with the model back in the table.
    def download():
        # Picking a target sets the source to the target's own (one answer for both): pick
        # another target first and wait for its answer, then this one's, so no late answer
        # can put the source back after it is chosen.
        needs = md(page, "models-needs")
        _choose(page, "models-target", "LTX-2")
        expect(needs).to_contain_text("LTX-2:")
        _choose(page, "models-target", "Qwen-Image")
        expect(needs).to_contain_text("Qwen-Image:")
        expect(needs).not_to_contain_text("LTX-2")
        expect(needs).to_contain_text("missing")
        _choose(page, "models-source", "huggingface")
        page.click("#models-download")
        expect(md(page, "models-msg")).to_contain_text("from Hugging Face")

    download()
    seen: list[float] = []
    reloaded = stopped = False
    deadline = time.monotonic() + 240  # a bound on the wait (a loaded machine), not a timing
    while time.monotonic() < deadline:
        status, width = _bar(page)
        if not seen or width != seen[-1]:
            seen.append(width)
        if status in ("succeeded", "failed"):  # a failure: the assert below says why
            break
        if 0 < width < 100 and not stopped:
            page.click("#models-stop")
            expect(page.locator("#models-bar")).to_have_attribute("data-status", "stopped",
                                                                  timeout=30_000)
            stopped = True
            page.reload()  # the progress is the server's: a new page shows the same download
            tab(page, "models")
            expect(page.locator("#models-bar")).to_have_attribute("data-status", "stopped",
                                                                  timeout=30_000)
            expect(page.locator("#models-progress")).to_contain_text("press Download to resume")
            assert int(page.locator("#models-bar").get_attribute("data-done")) > 0
            reloaded = True
            download()  # resumes: what was fetched stays
        page.wait_for_timeout(200)
    assert reloaded and stopped and any(0 < w < 100 for w in seen) and seen[-1] == 100.0, (
        seen, _bar(page), md(page, "models-msg").inner_text(),
        page.locator("#models-progress").inner_text())
    expect(page.locator("#models-progress")).to_contain_text("Downloaded Qwen-Image")
    expect(table.locator("tr", has_text=MODEL)).to_contain_text("complete", timeout=30_000)
    got = dict(inv.model_entry(app.models, MODEL).files)
    assert {f for f in got if f.endswith(".safetensors")} == {
        f for f in hub.models[MODEL] if f.endswith(".safetensors")}
    for rel in got:  # what the family reads (model_index.json it does not)
        assert (app.models / MODEL / rel).read_bytes() == hub.models[MODEL][rel], rel
    page.context.close()


def test_the_api_deletes_downloads_lists_and_verifies(app, hub):
    c = Client(app.url, analytics_enabled=False, verbose=False)
    with pytest.raises(AppError, match="not a model id"):
        c.predict(model_id="../outside", api_name="/delete_model")
    if (app.models / MODEL).exists():
        assert c.predict(model_id=MODEL, api_name="/delete_model")["deleted"] == MODEL
    rec = c.predict(target="family:qwen_image:qwen_image", source="huggingface",
                    api_name="/download_models")
    deadline = time.monotonic() + 240  # a bound on the wait (a loaded machine), not a timing
    while rec["status"] == "running" and time.monotonic() < deadline:
        time.sleep(0.5)
        rec = c.predict(download_id=rec["id"], api_name="/download_progress")
    assert rec["status"] == "succeeded" and rec["bytes_done"] == rec["bytes_total"] > 0, rec
    listed = {m["model_id"]: m for m in c.predict(api_name="/list_models")}
    assert listed[MODEL]["status"] == "complete" and listed[MODEL]["source"] == "huggingface"
    assert listed[MODEL]["bytes"] == inv.model_entry(app.models, MODEL).size
    checked = c.predict(model_id=MODEL, api_name="/verify_model")
    assert checked["ok"] and checked["basis"] == "huggingface", checked
    again = c.predict(target="family:qwen_image:qwen_image", source="huggingface",
                      api_name="/download_models")
    assert again["status"] == "succeeded" and "already" in again["message"]
