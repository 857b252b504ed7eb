"""Messages of the Dataset, Results and Model tabs by key (``backend/core/messages/page.py``).

Every line these tabs show is driven through the tabs' real callbacks and helpers; each
line passed to the page (``bilingual`` / ``bilingual_plain``) is recorded and must be a
``Msg`` whose Chinese leaves no English word (``webui.messages.english_left``), while its
English stays what the CLI, the logs and the other tests read."""
from __future__ import annotations

import json
from pathlib import Path

import gradio as gr
import pytest
import yaml

from backend.core.messages import Msg
from webui import messages

PAGE_MODULES = ("webui.tabs.dataset", "webui.tabs.results", "webui.tabs.model")


def shown_ok(m) -> Msg:
    """``m`` is a message whose Chinese has no English left."""
    assert isinstance(m, Msg), (type(m), m)
    zh = m.text("zh")
    assert messages.english_left(zh) == [], (m.code, zh)
    return m


class Seen(list):
    """Values handed to the page; ``codes()`` checks each and gives their codes."""

    def codes(self) -> list[str]:
        for v in self:
            if v != "":  # (an empty line: nothing shown)
                shown_ok(v)
        return [v.code for v in self if isinstance(v, Msg)]


@pytest.fixture
def shown(monkeypatch):
    """Every value the three tabs hand to ``bilingual`` / ``bilingual_plain``."""
    import importlib

    seen = Seen()

    def recorder(real):
        def record(value):
            seen.append(value)
            return real(value)
        return record

    for name in PAGE_MODULES:
        monkeypatch.setattr(importlib.import_module(name), "bilingual",
                            recorder(messages.bilingual))
    monkeypatch.setattr(messages, "bilingual_plain", recorder(messages.bilingual_plain))
    return seen


def zh_page(html: str) -> str:
    """What a Chinese reader sees of a bilingual line: the zh spans, not the en ones."""
    import re

    html = re.sub(r'<span class="zl-en">.*?</span>', "", str(html), flags=re.S)
    return re.sub(r'</?span[^>]*>', "", html)


def png(path: Path, size=(64, 64)) -> Path:
    from PIL import Image

    path.parent.mkdir(parents=True, exist_ok=True)
    Image.new("RGB", size, (200, 30, 30)).save(path)
    return path


def txt_dataset(folder: Path) -> Path:
    for name, caption in (("a", "红色的猫"), ("b", "蓝色的狗")):
        png(folder / f"{name}.png")
        (folder / f"{name}.txt").write_text(caption, encoding="utf-8")
    return folder


# ---------------------------------------------------------------------- the app
@pytest.fixture(scope="module")
def app(tmp_path_factory):
    """The app without sign-in over an empty workspace (built once: it takes seconds)."""
    from backend.jobs.runner import Runner
    from webui.app import create_app

    ws = tmp_path_factory.mktemp("ws")
    demo = create_app(Runner(ws), ws)
    return demo, demo.zerolora_ctx, ws


def callback(demo, module: str, qualname: str):
    found = [f.fn for f in demo.fns.values()
             if getattr(f.fn, "__module__", "") == module and
             getattr(f.fn, "__qualname__", "").endswith(qualname)]
    assert found, qualname
    return found[0]


def form_data(ctx, **values) -> dict:
    from webui.form import to_widget_value

    form = ctx.form
    shown = {n: to_widget_value(n, form.defaults.get(n)) for n in form.components}
    shown.update({n: to_widget_value(n, v) for n, v in values.items()})
    data = {form.components[n]: v for n, v in shown.items()}
    if getattr(form, "snapshot", None) is not None:  # the form as one value
        data[form.snapshot] = json.dumps(shown)
    return data


REQ = gr.Request()


# ---------------------------------------------------------------------- dataset tab
def test_loading_saving_and_uploading_captions_say_so_in_both_languages(app, shown,
                                                                       tmp_path):
    demo, ctx, _ = app
    c, form = ctx.c, ctx.form
    base, meta = form.components["dataset_base_path"], form.components["dataset_metadata_path"]
    folder = txt_dataset(tmp_path / "cats")
    load = callback(demo, "webui.tabs.dataset", "load_captions")
    save = callback(demo, "webui.tabs.dataset", "save_captions")

    out = load({base: str(folder), meta: ""}, REQ)
    assert out[c["data_msg"]].startswith('<span class="zl-en">2 image(s); captions from one '
                                         '.txt per image.</span>')
    assert zh_page(out[c["data_msg"]]) == "2 张图片；描述来自每张图片的同名 .txt。"
    out = save({base: str(folder), meta: "", c["captions"]: [["a.png", "红猫"]]}, REQ)
    assert "✓ Saved 1 caption(s) in the .txt files." in out[c["data_msg"]]
    (folder / "metadata.csv").write_text("image,prompt\na.png,红猫\n", encoding="utf-8")
    out = load({base: str(folder), meta: str(folder / "metadata.csv")}, REQ)
    assert zh_page(out[c["data_msg"]]) == "1 张图片；描述来自 metadata.csv。"
    out = save({base: str(folder), meta: str(folder / "metadata.csv"),
                c["captions"]: [["a.png", "红猫"]]}, REQ)
    assert zh_page(out[c["data_msg"]]) == "✓ 已把 1 条描述保存到 metadata.csv。"

    # An upload: a new folder, and a note for each file skipped or without a caption.
    files = [str(png(tmp_path / "up" / "c.png"))]
    (tmp_path / "up" / "notes.md").write_text("x")
    files.append(str(tmp_path / "up" / "notes.md"))
    out = callback(demo, "webui.tabs.dataset", "upload")(
        {**form_data(ctx), c["upload_files"]: files, c["upload_name"]: "uploaded-1"}, REQ)
    text = out[c["data_msg"]]
    assert "with 1 image(s).</span>" in text and "- <span" in text
    page = zh_page(text)
    assert "，共 1 张图片。" in page and "notes.md：已跳过（允许 .jpg，.jpeg，" in page
    assert "c.png：还没有描述（已创建空的 c.txt；请在表格里填写）" in page
    assert {"dataset.loaded", "dataset.loaded_txt", "dataset.saved", "dataset.saved_txt",
            "dataset.uploaded", "dataset.skipped_ext",
            "dataset.no_caption"} <= set(shown.codes())


def test_the_upload_notes_keep_their_english(tmp_path, monkeypatch):
    from webui import datasets, security

    def unpack(src, dest, max_total_bytes=None):  # what a zip unpacks to, as it is
        (Path(dest) / "readme.md").write_text("x")
        return [png(Path(dest) / "d.png")]

    monkeypatch.setattr(security, "safe_extract_zip", unpack)
    png(tmp_path / "up" / "c.png")
    (tmp_path / "up" / "notes.md").write_text("x")
    (tmp_path / "up" / "more.zip").write_bytes(b"PK")
    _, _, notes = datasets.add_uploads(tmp_path / "ws", "one",
                                       [str(tmp_path / "up" / "c.png"),
                                        str(tmp_path / "up" / "notes.md"),
                                        str(tmp_path / "up" / "more.zip")])
    for note in notes:
        shown_ok(note)
    assert notes[0].startswith("notes.md: skipped (allowed .jpg, .jpeg, ") and \
        notes[0].endswith(", .jsonl, .zip)")
    assert notes[1] == "readme.md: skipped (not an image or caption file)"
    assert notes[1].text("zh") == "readme.md：已跳过（不是图片或描述文件）"
    assert "c.png: no caption yet (an empty c.txt was created; write one in the table)" in notes


def test_the_check_its_bucket_plan_and_the_sample_prompt_offer(app, shown, tmp_path):
    demo, ctx, _ = app
    c = ctx.c
    folder = txt_dataset(tmp_path / "pets")
    png(folder / "wide.png", (128, 64))
    (folder / "wide.txt").write_text("宽的图", encoding="utf-8")
    data = form_data(ctx, dataset_base_path=str(folder), dataset_metadata_path="",
                     batch_size=2, aspect_buckets=True, bucket_remainder="drop",
                     max_pixels=64 * 64, height=None, width=None, sample_prompts=["其他"],
                     trigger_word="", dataset_repeat=1)
    out = callback(demo, "webui.tabs.dataset", "_bind_check.<locals>.check")(data, REQ)
    text = out[c["data_msg"]]
    page = zh_page(text)
    assert messages.english_left(page) == [], page
    assert "✓ 3 image(s), all readable and captioned." in text
    assert "**分桶计划**（`batch_size` 2，`bucket_remainder` drop）：每个 epoch 1 个批次" in page
    assert "⚠ 每个 epoch 丢弃 1 张图片" in page and "分桶（宽×高）" in page
    assert "**Bucket plan** (`batch_size` 2, `bucket_remainder` drop): 1 batch(es) per " \
        "epoch" in text
    offer = out[c["sample_suggestion"]]
    assert offer and "测试提示词（训练页，样图）没有提到这个数据集" in zh_page(out[c["sample_suggest"]])
    out = callback(demo, "webui.tabs.dataset", "use_suggestion")(
        {**form_data(ctx), c["sample_suggestion"]: offer})
    assert zh_page(out[c["data_msg"]]) == "✓ 测试提示词已设为数据集的 2 条描述（训练页，样图）。"
    assert {"dataset.check_ok", "bucket.head", "bucket.col_bucket", "bucket.col_dropped",
            "bucket.dropped", "samples.suggest", "samples.set"} <= set(shown.codes())


def test_every_verdict_and_bucket_plan_line(shown):
    from webui.tabs.dataset import _report_head, bucket_plan_markdown

    ok = {"level": "ok"}
    assert _report_head([ok, ok]) == "✓ 2 image(s), all readable and captioned."
    bad = _report_head([ok, {"level": "error", "message": "x"}])
    assert bad == "✗ 1 problem(s) in 2 item(s) — fix them before training."
    assert bad.text("zh") == "✗ 2 项中有 1 个问题——训练前请先修正。"
    warned = _report_head([ok, {"level": "warning", "message": Msg("bucket.none_full")},
                           {"level": "warning", "message": "a.png：描述太长"}])
    assert warned == ("✓ 3 image(s), all readable and captioned. ⚠ 2 warning(s): ⚠ No bucket "
                      "holds a full batch: lower `batch_size`, or set `bucket_remainder` to "
                      "pad.  \na.png：描述太长")
    assert warned.text("zh").startswith("✓ 3 张图片，全部可读且都有描述。⚠ 2 条警告：⚠ 没有哪个分桶")
    for m in (bad, warned):
        shown_ok(m)

    none_full = bucket_plan_markdown({"batch_size": 4, "held_out": 2, "rows": [
        {"size": [64, 64], "images": 3, "batches": 0, "padded": 0, "dropped": 3}]}, "drop")
    assert "⚠ No bucket holds a full batch" in none_full
    assert "留出 2 张图片用于验证损失（`validation_samples`）。" in zh_page(none_full)
    assert "2 image(s) held out for the validation loss (`validation_samples`)." in none_full
    assert {"bucket.none_full", "bucket.held_out", "bucket.col_images", "bucket.col_batches",
            "bucket.col_padded"} <= set(shown.codes())


# ---------------------------------------------------------------------- captions
class FakeRunner:
    """What the caption and render callbacks ask of the runner."""

    def __init__(self, runs=(), progress=None, summary=None):
        self.runs, self.prog, self.summary, self.stopped = list(runs), progress or {}, \
            summary, []

    def list_runs(self, *a, **k):
        return self.runs

    def progress(self, run_id):
        return dict(self.prog)

    def failure_summary(self, run_id):
        return self.summary

    def stop(self, run_id):
        self.stopped.append(run_id)


def caption_run(folder: Path, status="running") -> dict:
    return {"id": "cap-1", "status": status, "stages": [{"name": "caption"}],
            "config_yaml": yaml.safe_dump({"dataset_base_path": str(folder)})}


def test_a_caption_run_start_to_end_in_both_languages(app, shown, tmp_path, monkeypatch):
    from webui import services
    from webui.tabs import dataset

    demo, ctx, _ = app
    c, form = ctx.c, ctx.form
    folder = txt_dataset(tmp_path / "cats")
    base = form.components["dataset_base_path"]
    meta = form.components["dataset_metadata_path"]
    data = form_data(ctx, dataset_base_path=str(folder), dataset_metadata_path="")

    monkeypatch.setattr(services, "caption", lambda *a, **k: "cap-1")
    out = callback(demo, "webui.tabs.dataset", "_bind_caption_start.<locals>.start")(data, REQ)
    assert zh_page(out[c["caption_msg"]]) == "○ 描述任务 `cap-1` 已排队。"
    assert "○ Caption run `cap-1` queued." in out[c["caption_msg"]]

    # While it runs: the editor is locked, its progress counts images.
    run = caption_run(folder)
    monkeypatch.setattr(ctx, "runner", FakeRunner([run], {"step": 1, "total": 2}))
    monkeypatch.setattr(ctx, "run", lambda run_id, request: run if run_id else None)
    lock = dataset.caption_lock(ctx, str(folder))
    assert lock == ("🔒 Caption run `cap-1` is writing this folder's captions: the table is "
                    "read-only until it ends.")
    assert shown_ok(lock).text("zh") == "🔒 描述任务 `cap-1` 正在写这个文件夹的描述：它结束前表格只读。"
    out = callback(demo, "webui.tabs.dataset", "save_captions")(
        {base: str(folder), meta: "", c["captions"]: [["a.png", "x"]]}, REQ)
    assert "read-only until it ends" in out[c["data_msg"]]
    out = callback(demo, "webui.tabs.dataset", "lock_state")({**data, c["caption_job"]: None},
                                                              REQ)
    assert "正在写这个文件夹的描述" in zh_page(out[c["data_msg"]])
    tick = callback(demo, "webui.tabs.dataset", "_bind_caption_tick.<locals>.tick")
    job = {c["caption_job"]: {"run_id": "cap-1", "before": {}}, base: str(folder), meta: ""}
    out = tick(job, REQ)
    assert "○ Captioning (run `cap-1`, running) 1/2 images…" in out[c["caption_msg"]]
    assert zh_page(out[c["caption_msg"]]) == "○ 正在写描述（任务 `cap-1`，运行中） 1/2 张图……"
    ctx.runner.prog = {}
    out = tick(job, REQ)
    assert zh_page(out[c["caption_msg"]]) == "○ 正在写描述（任务 `cap-1`，运行中）……"
    out = callback(demo, "webui.tabs.dataset", "_bind_caption_stop.<locals>.stop")(
        {c["caption_job"]: None, base: str(folder)}, REQ)
    assert zh_page(out[c["caption_msg"]]) == "○ 正在停止描述任务 `cap-1`……"
    assert ctx.runner.stopped == ["cap-1"]

    # When it ends: finished, or failed / stopped.
    run["status"] = "succeeded"
    ctx.runner.prog = {"step": 2, "total": 2}
    out = tick(job, REQ)
    assert "✓ Caption run `cap-1` finished: 2 image(s) captioned." in out[c["caption_msg"]]
    assert zh_page(out[c["caption_msg"]]) == "✓ 描述任务 `cap-1` 已完成：写了 2 张图的描述。"
    run["status"] = "stopped"
    assert zh_page(tick(job, REQ)[c["caption_msg"]]) == "✗ 描述任务 `cap-1` 已停止。"
    out = callback(demo, "webui.tabs.dataset", "_bind_caption_stop.<locals>.stop")(
        {c["caption_job"]: {"run_id": "cap-1"}, base: str(folder)}, REQ)
    assert zh_page(out[c["caption_msg"]]) == "没有可停止的描述任务。"
    assert {"caption.queued", "caption.lock", "caption.progress", "caption.progress_count",
            "caption.stopping", "caption.finished", "caption.ended",
            "caption.none_to_stop"} <= set(shown.codes())


def test_the_captioning_memory_line():
    from backend.config.validation import validate
    from backend.planning.estimator import caption_estimate, caption_estimate_line
    from webui.tabs.dataset import caption_memory

    est = caption_estimate(validate({"dataset_base_path": "x"}, require_inputs=False))
    line = shown_ok(caption_memory(est))
    assert line == caption_estimate_line(est)  # the English the estimator writes
    assert line.text("zh").startswith(f"描述模型：{est['params'] / 1e9:.2f} B 参数，bf16 下 "
                                      f"{est['weights_gb']:.1f} GB。批大小 {est['batch']} 时")


# ---------------------------------------------------------------------- results
def sample_run(tmp_path: Path) -> dict:
    """A run with its own samples (base + one checkpoint) and one render set of an edit
    model (with input images)."""
    from backend.core.rundir import RunDir

    run = {"id": "run-1", "name": "demo", "status": "succeeded",
           "run_dir": str(tmp_path / "run-1"), "stages": [{"name": "train"}]}
    files = RunDir.of(run)
    own = [{"prompt": "红猫", "prompt_index": 0, "image": "base.png", "seed": 7,
            "checkpoint": None},
           {"prompt": "红猫", "prompt_index": 0, "image": "s10.png", "seed": 7,
            "checkpoint": "x", "checkpoint_name": "step-10", "scale": 1.0}]
    render = [{"prompt": "蓝狗", "image": "r.png", "seed": 3, "checkpoint": "x",
               "checkpoint_name": "step-10", "scale": 0.5, "input_image": "in.png"}]
    for folder, entries in ((files.samples, own), (files.render_dir("job-2"), render)):
        for e in entries:
            png(folder / e["image"])
            if e.get("input_image"):
                png(folder / e["input_image"])
        (folder / "index.json").write_text(json.dumps({"version": 1, "images": entries}))
    return run


def test_the_grid_and_its_sets_in_the_page_language(tmp_path):
    from webui import jobs

    run = sample_run(tmp_path)
    assert jobs.sample_sets(run) == [("render job-2", "job-2"),
                                     ("samples rendered by the run", "run")]
    assert jobs.sample_sets(run, "zh") == [("渲染 job-2", "job-2"), ("运行期间渲染的样图", "run")]
    images, titles, n = jobs.grid(run, "run")
    assert titles == ["base model", "step-10 × 1"] and n == 2
    assert [cap for _, cap in images] == ["base model · seed 7 · 红猫",
                                          "step-10 × 1 · seed 7 · 红猫"]
    images, titles, n = jobs.grid(run, "run", "zh")
    assert [cap for _, cap in images] == ["基础模型 · 种子 7 · 红猫", "step-10 × 1 · 种子 7 · 红猫"]
    assert shown_ok(titles[0]).text("zh") == "基础模型"
    images, titles, n = jobs.grid(run, "job-2", "zh")
    assert titles == ["input images", "step-10 × 0.5"] and n == 2
    assert [cap for _, cap in images] == ["输入图像 · 蓝狗", "step-10 × 0.5 · 种子 3 · 蓝狗"]
    for _, cap in images:
        assert messages.english_left(cap) == []


def test_the_results_tab_lines(app, shown, tmp_path, monkeypatch):
    from webui import services
    from webui.tabs import results

    demo, ctx, _ = app
    c = ctx.c
    run = sample_run(tmp_path)
    monkeypatch.setattr(ctx, "serve", lambda run_id, path, request: str(path))
    monkeypatch.setattr(ctx, "run", lambda run_id, request: run if run_id == "run-1" else None)
    out = results.show_run(ctx, "run-1", REQ, "zh")  # no checkpoint in output/
    assert zh_page(out[c["res_status"]]) == "这个运行还没有检查点。"
    header = out[c["res_columns"]]
    assert "Columns: **input images** | **step-10 × 0.5** — one row per prompt" in header
    assert zh_page(header) == "列：**输入图像** | **step-10 × 0.5** —— 每条提示词一行"
    empty = dict(run, run_dir=str(tmp_path / "none"))
    out = results.grid_outputs(ctx, empty, REQ)
    assert zh_page(out[c["res_columns"]]) == "还没有样图。"

    render = callback(demo, "webui.tabs.results", "bind_events.<locals>.render")
    data = {c[k]: None for k in results.SETTINGS} | {c["res_run"]: None,
                                                     c["res_checkpoints"]: []}
    assert zh_page(render(data, REQ)[c["res_status"]]) == "✗ 请先选择一个运行。"
    run["status"] = "running"
    out = render({**data, c["res_run"]: "run-1"}, REQ)
    assert "✗ Run `run-1` is running: render when it has ended." in out[c["res_status"]]
    assert zh_page(out[c["res_status"]]) == "✗ 运行 `run-1` 运行中：请在它结束后再渲染。"
    run["status"] = "succeeded"
    monkeypatch.setattr(services, "render", lambda *a, **k: "job-3")
    from webui.form import to_widget_value

    settings = {c[k]: to_widget_value(f, ctx.form.defaults.get(f))
                for k, f in results.SETTINGS.items()}
    out = render({**data, **settings, c["res_run"]: "run-1"}, REQ)
    assert zh_page(out[c["res_status"]]) == "○ 正在渲染（任务 `job-3`）……结束后网格会填满。"

    # Watching the render job.
    job = {"id": "job-3", "status": "running", "note": ""}
    runs = {"run-1": run, "job-3": job}
    monkeypatch.setattr(ctx, "run", lambda run_id, request: runs.get(run_id))
    monkeypatch.setattr(ctx, "runner", FakeRunner(progress={"step": 1, "total": 4}))
    watch = callback(demo, "webui.tabs.results", "bind_events.<locals>.watch")
    state = {c["res_render_state"]: {"job": "job-3", "run": "run-1"}, c["lang_box"]: "zh"}
    out = watch(state, REQ)
    assert "○ Rendering (job `job-3`, running) (1/4 images)…" in out[c["res_status"]]
    assert zh_page(out[c["res_status"]]) == "○ 正在渲染（任务 `job-3`，运行中）（1/4 张图）……"
    ctx.runner.prog = {}
    assert zh_page(watch(state, REQ)[c["res_status"]]) == "○ 正在渲染（任务 `job-3`，运行中）……"
    job["status"] = "succeeded"
    assert zh_page(watch(state, REQ)[c["res_status"]]) == "✓ 渲染 `job-3` 已完成。"
    job["status"] = "failed"
    ctx.runner.summary = {"headline": "CUDA out of memory"}
    out = watch(state, REQ)
    assert "✗ Render `job-3` failed: CUDA out of memory" in out[c["res_status"]]
    assert zh_page(out[c["res_status"]]) == '✗ 渲染 `job-3` 失败："CUDA out of memory"'
    ctx.runner.summary = {"headline": Msg("results.no_checkpoint")}
    assert zh_page(watch(state, REQ)[c["res_status"]]) == \
        "✗ 渲染 `job-3` 失败：这个运行还没有检查点。"
    ctx.runner.summary = None
    job["status"] = "stopped"
    assert zh_page(watch(state, REQ)[c["res_status"]]) == "✗ 渲染 `job-3` 已停止："
    codes = set(shown.codes())
    assert {"results.no_checkpoint", "results.columns", "results.no_samples",
            "results.choose_run", "results.not_ended", "results.render_queued",
            "results.rendering", "results.rendering_count", "results.rendered",
            "results.render_ended", "results.render_ended_why"} <= codes


# ---------------------------------------------------------------------- model tab
def test_the_preset_diff_and_saving_a_preset(app, shown, monkeypatch):
    from webui.tabs.model import diff_markdown

    demo, ctx, _ = app
    c = ctx.c
    loaded = {"lora_rank": 16, "trigger_word": "zl", "note": "x"}
    same = diff_markdown(loaded, loaded, "cpu_demo")
    assert '<span class="zl-en">Same as preset **cpu_demo**.</span>' in same
    assert zh_page(same) == "与预设 **cpu_demo** 相同。"
    assert zh_page(diff_markdown(loaded, loaded, None)) == "与默认设置相同。"
    text = diff_markdown(loaded, {"lora_rank": 8, "trigger_word": ""}, "cpu_demo")
    assert "**2** change(s) from preset **cpu_demo**:" in text
    page = zh_page(text)
    assert page.startswith("与预设 **cpu_demo** 相比有 **2** 处改动：")
    assert "| 字段 | 预设 | 现在 |" in page and "*空*" in page
    assert messages.english_left(page) == [], page
    assert zh_page(diff_markdown(loaded, {"lora_rank": 8}, None)).startswith(
        "与默认设置相比有 **1** 处改动：")

    save = callback(demo, "webui.tabs.model", "bind_events.<locals>.save")
    data = form_data(ctx) | {c["preset_save_name"]: "my-preset", c["preset_shared"]: False}
    out = save(data, REQ)
    assert "✓ Saved preset **my-preset** (" in out[c["preset_msg"]]
    assert zh_page(out[c["preset_msg"]]).startswith("✓ 已保存预设 **my-preset**（")
    assert {"preset.same", "preset.same_defaults", "preset.changes", "preset.changes_defaults",
            "preset.col_field", "preset.col_preset", "preset.col_now", "word.empty",
            "preset.saved"} <= set(shown.codes())
