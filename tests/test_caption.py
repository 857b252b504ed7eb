"""Captioning a dataset with the tiny Qwen-Image's text encoder (a real random-weight
Qwen2.5-VL): the caption stage through the runner, the same logic called directly for the
metadata target, the API (start, follow, stop, refusals) and the Dataset tab in a browser.

Random weights write gibberish; the checks are on what is written: one caption per image,
existing captions kept (or replaced when asked), the trigger word in front, the length
limit, the metadata's other columns kept, the run in the history.
"""
from __future__ import annotations

import csv
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
from PIL import Image

from backend.config.validation import validate

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]
TERMINAL = ("succeeded", "failed", "stopped")
TRIGGER = "zlr style"
MAX_LENGTH = 6
STEP_MS = 120_000  # waits in the browser, not timing assertions


def make_images(folder: Path, n: int = 3, captions: dict[str, str] | None = None) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for i in range(n):
        Image.new("RGB", (64 + 16 * i, 64), (40 * i, 200 - 30 * i, 90)).save(
            folder / f"img{i}.png")
    for name, text in (captions or {}).items():
        (folder / name).write_text(text + "\n", encoding="utf-8")
    return folder


def caption_cfg(tiny: Path, folder: Path, **changes):
    data = {"dataset_base_path": str(folder), "model_id_with_origin_paths": str(tiny),
            "offline": True, "trigger_word": TRIGGER, "caption_max_length": MAX_LENGTH,
            "caption_batch_size": 2}
    data.update(changes)
    return validate(data)


def wait_run(runner, run_id: str, limit_s: float = 300) -> dict:
    deadline = time.monotonic() + limit_s  # a safety limit, not a timing assertion
    while time.monotonic() < deadline:
        run = runner.get_run(run_id)
        if run["status"] in TERMINAL:
            return run
        time.sleep(0.5)
    raise AssertionError(f"run {run_id} did not end: {runner.get_run(run_id)['status']}")


def tokens(tiny: Path, text: str) -> int:
    from transformers import AutoTokenizer

    return len(AutoTokenizer.from_pretrained(str(tiny / "tokenizer"))(text)["input_ids"])


@pytest.fixture(scope="module")
def caption_run(tmp_path_factory, tiny_model_dir):
    """One caption job through the runner: 3 images, one with a caption of its own."""
    from backend.planning.caption_job import submit_caption
    from backend.jobs.runner import Runner

    tmp = tmp_path_factory.mktemp("caption")
    folder = make_images(tmp / "shapes", 3, {"img1.txt": "my own caption"})
    runner = Runner(tmp / "ws")
    run_id = submit_caption(runner, caption_cfg(tiny_model_dir, folder))
    return runner, wait_run(runner, run_id), folder


def test_the_job_writes_one_caption_per_image_and_keeps_the_existing_one(caption_run,
                                                                         tiny_model_dir):
    from backend.core.rundir import RunDir

    runner, run, folder = caption_run
    log = "".join(runner.last_lines(run["id"], "caption", 80))
    assert run["status"] == "succeeded", log
    assert run["name"] == "caption · shapes"
    assert [s["name"] for s in run["stages"]] == ["caption"]
    txts = sorted(p.name for p in folder.glob("*.txt"))
    assert txts == ["img0.txt", "img1.txt", "img2.txt"]
    assert (folder / "img1.txt").read_text(encoding="utf-8").strip() == "my own caption"
    for name in ("img0.txt", "img2.txt"):
        text = (folder / name).read_text(encoding="utf-8")
        assert text.endswith("\n") and text.count("\n") == 1  # one line
        caption = text.strip()
        assert caption.startswith(f"{TRIGGER}, "), caption
        assert tokens(tiny_model_dir, caption[len(TRIGGER) + 2:]) <= MAX_LENGTH + 1
    progress = runner.progress(run["id"])
    assert progress["stages"]["caption"]["status"] == "succeeded"
    assert (progress["step"], progress["total"]) == (2, 2)
    journal = RunDir.of(run).caption_journal.read_text(encoding="utf-8").split()
    assert sorted(journal) == ["img0.png", "img2.png"]
    assert "[caption] img0.png: zlr style, " in log


def test_metadata_target_with_overwrite_replaces_the_prompt_column(caption_run, tmp_path,
                                                                   tiny_model_dir):
    """The same logic called directly (no subprocess): the metadata's prompt column
    rewritten for every image, its other columns and rows kept, the journal honoured."""
    from backend.data.captions import load_captioner
    from backend.stages.caption import caption_dataset

    folder = make_images(tmp_path / "meta", 3)
    meta = folder / "metadata.csv"
    meta.write_text("image,prompt,source\nimg0.png,old zero,a\nimg1.png,,b\n"
                    "img2.png,old two,c\n", encoding="utf-8")
    cfg = caption_cfg(tiny_model_dir, folder, dataset_metadata_path=str(meta),
                      caption_target="metadata", caption_overwrite=True, trigger_word="")
    journal = tmp_path / "journal.txt"
    journal.write_text("img2.png\n", encoding="utf-8")  # captioned by an earlier attempt
    seen = []
    summary = caption_dataset(cfg, load_captioner(cfg), journal=journal,
                              on_batch=lambda done, total, caps: seen.append((done, total)))
    assert summary == {"images": 3, "captioned": 2, "kept": 0, "done_before": 1}
    assert seen == [(2, 2)]  # one batch of two
    rows = list(csv.DictReader(meta.open(encoding="utf-8")))
    assert [r["image"] for r in rows] == ["img0.png", "img1.png", "img2.png"]
    assert [r["source"] for r in rows] == ["a", "b", "c"]
    assert rows[0]["prompt"] not in ("", "old zero") and rows[1]["prompt"] != ""
    assert rows[2]["prompt"] == "old two"
    assert not list(folder.glob("*.txt"))  # nothing else written
    assert sorted(journal.read_text(encoding="utf-8").split()) == ["img0.png", "img1.png",
                                                                   "img2.png"]


def test_bad_input_is_refused_naming_the_field_before_anything_starts(caption_run, tmp_path,
                                                                      tiny_model_dir):
    from backend.data.captions import CaptionError
    from backend.planning.caption_job import submit_caption
    from backend.config.errors import ConfigError

    runner = caption_run[0]
    before = len(runner.list_runs())
    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / "notes.txt").write_text("no images here")
    with pytest.raises(CaptionError) as e:
        submit_caption(runner, caption_cfg(tiny_model_dir, empty))
    assert e.value.problems[0].startswith("dataset_base_path: no images to caption")
    with pytest.raises(CaptionError) as e:  # metadata target without a metadata file
        submit_caption(runner, caption_cfg(tiny_model_dir, caption_run[2],
                                           caption_target="metadata"))
    assert e.value.problems[0].startswith("dataset_metadata_path:")
    with pytest.raises(CaptionError) as e:  # a captioning model folder that is none
        submit_caption(runner, caption_cfg(tiny_model_dir, caption_run[2],
                                           captioner_path=str(tiny_model_dir / "vae")))
    assert e.value.problems[0].startswith("captioner_path: not a vision-language model")
    with pytest.raises(ConfigError) as e:
        caption_cfg(tiny_model_dir, empty, caption_target="json", caption_max_length=0)
    assert sorted(e.value.fields()) == ["caption_max_length", "caption_target"]
    assert len(runner.list_runs()) == before  # nothing queued


def test_the_estimate_names_the_captioning_model_size(caption_run, tiny_model_dir):
    from backend.planning.estimator import caption_estimate

    cfg = validate({"dataset_base_path": "x"}, require_inputs=False)  # the released model
    est = caption_estimate(cfg)
    assert 7e9 < est["params"] < 9e9 and 15 < est["weights_gb"] < 18
    assert est["gpu_gb"]["sequential"] < 4 < est["weights_gb"] < est["gpu_gb"]["none"]
    bigger = caption_estimate(cfg.model_copy(update={"caption_batch_size": 16}))
    assert bigger["gpu_gb"]["none"] > est["gpu_gb"]["none"]


# ---------------------------------------------------------------------- the app
@pytest.fixture(scope="module")
def app(server):
    """The session's app server without sign-in (conftest ``server``)."""
    return SimpleNamespace(url=server[0].rstrip("/"))


def test_api_starts_follows_and_stops_a_caption_job(app, tmp_path, tiny_model_dir):
    from gradio_client import Client
    from gradio_client.exceptions import AppError

    c = Client(app.url, analytics_enabled=False, verbose=False)
    config = {"model_id_with_origin_paths": str(tiny_model_dir), "offline": True,
              "caption_max_length": 64, "caption_batch_size": 1}
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(AppError, match="dataset_base_path: no images to caption"):
        c.predict(config={**config, "dataset_base_path": str(empty)}, preset="",
                  hub_token="", api_name="/start_caption")
    folder = make_images(tmp_path / "many", 24)
    started = c.predict(config={**config, "dataset_base_path": str(folder)}, preset="",
                        hub_token="", api_name="/start_caption")
    run_id = started["run_id"]
    assert started["name"] == "caption · many"
    deadline = time.monotonic() + 300  # a safety limit, not a timing assertion
    while c.predict(run_id=run_id, api_name="/run_status")["status"] != "running":
        assert time.monotonic() < deadline
        time.sleep(0.3)
    progress = c.predict(run_id=run_id, api_name="/run_progress")
    assert progress["run_id"] == run_id and progress["status"] == "running"
    stopped = c.predict(run_id=run_id, api_name="/stop_run")
    while stopped["status"] not in TERMINAL:
        assert time.monotonic() < deadline
        time.sleep(0.3)
        stopped = c.predict(run_id=run_id, api_name="/run_status")
    assert stopped["status"] == "stopped"
    assert [s["name"] for s in stopped["stages"]] == ["caption"]
    log = c.predict(run_id=run_id, stage="caption", offset=0, api_name="/run_log")
    assert isinstance(log["text"], str) and log["offset"] >= 0
    assert len(list(folder.glob("*.txt"))) < 24  # stopped before the end


def test_dataset_tab_writes_captions_and_shows_them_for_review(app, browser, tmp_path,
                                                              tiny_model_dir):
    from playwright.sync_api import expect

    from tests.harness.browser import field, md, new_page, tab

    folder = make_images(tmp_path / "browser", 3, {"img0.txt": "keep me"})
    page = new_page(browser, app.url)
    try:
        tab(page, "model")
        field(page, "model_id_with_origin_paths").fill(str(tiny_model_dir))
        tab(page, "dataset")
        field(page, "dataset_base_path").fill(str(folder))
        field(page, "dataset_metadata_path").fill("")  # .txt captions
        field(page, "trigger_word").fill(TRIGGER)
        field(page, "caption_max_length").fill(str(MAX_LENGTH))
        field(page, "caption_max_length").press("Tab")
        expect(md(page, "caption-estimate")).to_contain_text("GB in bf16",
                                                             timeout=STEP_MS)
        page.click("#caption-start")
        expect(md(page, "caption-msg")).to_contain_text("Caption run", timeout=STEP_MS)
        # While the job writes, the editor is read-only and says why.
        expect(page.locator("#captions-save")).to_be_disabled()
        expect(md(page, "data-msg")).to_contain_text("read-only until it ends",
                                                     timeout=STEP_MS)
        expect(md(page, "caption-msg")).to_contain_text("finished: 2 image(s)",
                                                        timeout=300_000)
        expect(page.locator("#captions-save")).to_be_enabled(timeout=STEP_MS)
        table = page.locator("#captions")
        expect(table).to_contain_text("keep me", timeout=STEP_MS)
        expect(page.locator("#caption-review [role=row].virtual-row")).to_have_count(2)
        expect(page.locator("#caption-review")).to_contain_text(f"{TRIGGER},")
        written = (folder / "img1.txt").read_text(encoding="utf-8").strip()
        expect(table).to_contain_text(written[:20])
    finally:
        page.context.close()
    assert (folder / "img0.txt").read_text(encoding="utf-8").strip() == "keep me"
    for name in ("img1.txt", "img2.txt"):
        assert (folder / name).read_text(encoding="utf-8").startswith(f"{TRIGGER}, ")
