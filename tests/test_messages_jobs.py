"""The runs area speaks by message code (backend/core/messages/jobs.py): how a stage ended,
each diagnosis with its fixes, the runner's and the supervisor's notes (kept as messages in
the history, across processes), a stage's own ``end`` reason, and the Run and Runs tabs.
Every message is driven through the code that makes it and must read as Chinese in Chinese."""
from __future__ import annotations

import html
import json
import re
import sqlite3
import sys
import textwrap
from pathlib import Path

import pytest
import yaml

from backend.core.messages import EN, ZH, Msg, placeholders
from backend.core.messages import codes as codes_in
from backend.jobs import diagnosis
from tests.harness.chinese import assert_chinese
from webui.messages import english_left

ROOT = Path(__file__).resolve().parents[1]
AREA_PREFIXES = ("exit.", "diagnosis.", "note.", "runtab.", "runs.")


ZH_SPAN = re.compile(r'<span class="zl-zh">(.*?)</span>', re.S)
EN_SPAN = re.compile(r'<span class="zl-en">(.*?)</span>', re.S)


def zh_of(html_text: str) -> str:
    """The Chinese a page shows of a bilingual HTML/Markdown text (spans: the zh ones; the
    rest as it is)."""
    return EN_SPAN.sub("", html_text).replace('<span class="zl-zh">', "").replace("</span>", "")


def assert_page_chinese(html_text: str) -> None:
    text = re.sub(r"<code>.*?</code>", " ", zh_of(html_text))  # names, as they are
    text = html.unescape(re.sub(r"<[^>]+>", " ", text))
    assert english_left(text) == [], (text, english_left(text))


# ---------------------------------------------------------------------- the table itself
def test_the_area_s_codes_have_both_languages_and_the_same_placeholders():
    from backend.core.messages import jobs as runs

    assert set(runs.EN) == set(runs.ZH)
    assert all(code.startswith(AREA_PREFIXES) for code in runs.EN), sorted(runs.EN)
    for code in runs.EN:
        assert placeholders(runs.EN[code]) == placeholders(runs.ZH[code]), code


# ---------------------------------------------------------------------- exit status
def test_each_exit_status_in_words():
    said = {code: diagnosis.exit_code_text(code) for code in (None, 0, 1, 2, -9, 137, 143)}
    for m in said.values():
        assert_chinese(m)
    assert said[1] == "exited with code 1" and said[1].text("zh") == "以退出码 1 结束"
    assert said[-9] == "was killed by signal 9 (SIGKILL)"
    assert said[-9].text("zh") == "被信号 9（SIGKILL）终止"
    assert said[137] == ("exited with code 137 (a launcher's way of saying: killed by signal 9 "
                         "(SIGKILL))")
    assert said[None].text("zh") == "没有退出码（进程已丢失）"
    assert said[0].text("zh") == "正常结束（退出码 0）"


# ---------------------------------------------------------------------- every diagnosis
LOGS = {
    "cuda_oom": "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB",
    "file_too_large": "OSError: [Errno 27] File too large: '/w/cache/a.pth'",
    "file_too_large_plain": "error: EFBIG while saving",
    "disk_full": "OSError: [Errno 28] No space left on device",
    "missing_model": "OSError: does not appear to have a file named config.json",
    "deepspeed_config": "deepspeed.runtime.config.DeepSpeedConfigError: bad",
    "no_gpu": "RuntimeError: No CUDA GPUs are available",
    "port_in_use": "RuntimeError: Address already in use",
    "op_build": "RuntimeError: Error building extension 'cpu_adam'",
    "host_oom": "RuntimeError: DefaultCPUAllocator: can't allocate memory",
}
CONFIGS = [
    {},
    {"zero_stage": 3, "offload_param_device": "cpu", "use_gradient_checkpointing": True,
     "ds_activation_checkpointing": True, "cpu_checkpointing": False, "lora_rank": 2,
     "height": 1024, "width": 768, "offline": True, "dataset_num_workers": 4,
     "pin_memory": True, "sample_height": 1024, "sample_width": 1024,
     "data_process_offload": "none", "sample_cpu_offload": "none"},
    {"zero_stage": 3, "offload_param_device": "cpu", "use_gradient_checkpointing": True,
     "use_gradient_checkpointing_offload": False, "lora_rank": 64, "max_pixels": 262144,
     "offload_optimizer_device": "cpu", "ds_activation_checkpointing": False,
     "sample_vae_tiling": True},
    {"zero_stage": 3, "offload_param_device": "cpu", "use_gradient_checkpointing": True,
     "use_gradient_checkpointing_offload": True, "lora_rank": "x",
     "captioner_path": "/models/qwen-vl"},
    {"captioner_path": "/models/qwen-vl", "offline": True},
    {"trainable_models": "dit", "zero_stage": 2, "offload_optimizer_device": "cpu"},
]


def _every_diagnosis() -> list[diagnosis.Diagnosis]:
    found = []
    for cfg in CONFIGS:
        text = yaml.safe_dump(cfg)
        for stage in ("train", "data_process", "sample", "caption"):
            for log in LOGS.values():
                found += diagnosis.diagnose(1, log + "\n", config_yaml=text, stage=stage)
            found += diagnosis.diagnose(-9, "", config_yaml=text, stage=stage)  # killed
    return found


def test_every_diagnosis_title_explanation_and_fix_reads_as_chinese():
    found = _every_diagnosis()
    made = set()
    for d in found:
        for m in [d.title, d.explanation, *d.fixes]:
            assert_chinese(m)
        made |= codes_in([d.title, d.explanation, *d.fixes])
    # Every diagnosis sentence of the table is one the code makes.
    table = {c for c in EN if c.startswith("diagnosis.") and not c.startswith(
        ("diagnosis.headline", "diagnosis.dataset_problems", "diagnosis.cannot_read",
         "diagnosis.mask_"))}  # a dataset's problems, said before a stage runs
    assert table - made == set(), sorted(table - made)
    oom = diagnosis.diagnose(1, LOGS["cuda_oom"], config_yaml="lora_rank: 32\n",
                             stage="train")[0]
    assert oom.title.text("zh") == "GPU 显存不足（`CUDA out of memory`）"
    assert "Lower lora_rank (now 32; try 16)." in oom.fixes
    assert "调低 lora_rank（现为 32；试试 16）。" in [f.text("zh") for f in oom.fixes]
    # a full fine-tune: no LoRA rank to lower; its optimizer states, or a LoRA instead
    full = diagnosis.diagnose(1, LOGS["cuda_oom"], stage="train",
                              config_yaml="trainable_models: dit\nlora_rank: 32\n")[0]
    fixes = [f.code for f in full.fixes]
    assert "diagnosis.fix_full_nvme" in fixes and "diagnosis.fix_full_to_lora" in fixes
    assert not [c for c in fixes if "lora_rank" in c]
    assert "lora_rank" not in full.settings and "trainable_models" in full.settings
    # The API's JSON keeps the English
    assert json.loads(json.dumps(oom.to_dict()))["title"] == \
        "The GPU ran out of memory (CUDA out of memory)"


def test_the_failure_line_and_headline_quote_another_program_s_words():
    line = diagnosis.reason_line("train", 2, "ValueError: bad thing\n")
    assert line == "stage 'train' exited with code 2: ValueError: bad thing"
    assert assert_chinese(line) == '阶段 \'train\' 以退出码 2 结束："ValueError: bad thing"'
    line = diagnosis.reason_line("train", 1, LOGS["disk_full"])
    assert line == "stage 'train' exited with code 1: The disk is full"
    assert assert_chinese(line) == "阶段 'train' 以退出码 1 结束：磁盘已满"
    assert assert_chinese(diagnosis.reason_line("sample", 3, "")) == "阶段 'sample' 以退出码 3 结束"

    for log in ("", "RuntimeError: boom\n", LOGS["no_gpu"]):
        s = diagnosis.summarize("train", 1, log)
        assert_chinese(s["headline"])
        assert_chinese(s["exit_text"])
    s = diagnosis.summarize("train", 1, LOGS["no_gpu"])
    assert s["headline"] == ("Stage 'train' exited with code 1: The GPU was not found or the "
                             "GPU selection is wrong.")
    assert s["headline"].text("zh") == "阶段 'train' 以退出码 1 结束：找不到 GPU，或所选 GPU 有误。"
    assert diagnosis.summarize("train", 1, "")["headline"] == "Stage 'train' exited with code 1."


# ---------------------------------------------------------------------- a stage's own reason
def test_a_stage_s_end_reason_crosses_the_progress_file_as_a_message(tmp_path):
    from backend.core.progress import ProgressWriter
    from backend.data.dataset import DatasetError
    from backend.jobs.watch import end_reason, last_end_event
    from backend.stages import end_fields, reason_of

    bad = Msg("diagnosis.cannot_read_image", name="photo.png", why="image file is truncated")
    err = DatasetError([bad, "metadata.csv row 3: caption is empty"])
    assert str(err) == ("Dataset problems:\n  cannot read image photo.png: image file is "
                        "truncated\n  metadata.csv row 3: caption is empty")
    progress = tmp_path / "progress.jsonl"
    ProgressWriter(progress, "data_process").emit("end", **end_fields("failed", reason_of(err)))
    end = last_end_event(progress, "data_process")
    assert end["reason"] == ("Dataset problems: cannot read image photo.png: image file is "
                             "truncated metadata.csv row 3: caption is empty")
    why = end_reason(end)
    assert isinstance(why, Msg) and why == end["reason"]
    assert why.text("zh") == ('数据集问题：无法读取图像 photo.png（"image file is truncated"）；'
                              'metadata.csv row 3: caption is empty')
    # the runner's line for the history
    line = diagnosis.reason_line("data_process", 2, "", end_reason=why)
    assert line == "stage 'data_process' exited with code 2: " + end["reason"]
    assert line.text("zh").startswith("阶段 'data_process' 以退出码 2 结束：数据集问题：无法读取图像")
    # many problems: what fits, and how many more
    many = DatasetError([f"row {i}: caption is empty and far too long to fit" for i in range(40)])
    assert isinstance(many.line_msg, Msg) and many.line_msg.code.endswith("_more")
    assert "另有" in many.line_msg.text("zh")
    # another program's error: its words, no message
    plain = end_fields("failed", reason_of(RuntimeError("boom\n  here"), with_type=True))
    assert plain == {"status": "failed", "reason": "RuntimeError: boom here"}
    assert end_reason(plain) == "RuntimeError: boom here"


def test_a_broken_image_is_said_by_code(tmp_path, monkeypatch):
    from backend.config.schema import RunConfig
    from backend.data import dataset
    from backend.data.dataset import Record, inspect_record

    img = tmp_path / "broken.png"
    img.write_bytes(b"not an image at all")
    errs = []
    monkeypatch.setattr(dataset, "with_findings",
                        lambda info, rec, e, w: errs.extend(e) or info)  # what it was given
    inspect_record(Record(image=img, prompt="a", where="broken.png", name="broken.png"),
                   RunConfig(dataset_base_path=str(tmp_path)))
    assert [m.code for m in errs] == ["diagnosis.cannot_read_image"]
    assert errs[0].startswith("cannot read image broken.png: cannot identify image file")
    assert assert_chinese(errs[0]).startswith('无法读取图像 broken.png（"cannot identify image file')


def test_the_stages_own_stop_and_refusal_reasons():
    for m in (Msg("note.stopped_signal", signal="SIGTERM"),
              Msg("note.stopped_cached", signal="SIGTERM", n=3),
              Msg("note.stopped_at_step", signal="SIGTERM", step=7, path="/w/out/state"),
              Msg("note.data_process_deepspeed"),
              Msg("note.lora_checkpoint_missing", got="'/x.safetensors'"),
              Msg("note.launch_precision_refused", error="bf16 is enabled", got="fp16",
                  where="the command line")):
        assert_chinese(m)
    assert Msg("note.stopped_at_step", signal="SIGTERM", step=7, path="/o/state") == \
        "stopped by signal SIGTERM at step 7; resume with --resume_from /o/state"


def test_launch_problems_are_messages():
    from types import SimpleNamespace

    from backend.training.launched import launch_problems

    cfg = SimpleNamespace(mixed_precision="bf16", zero_stage=3,
                          offload_optimizer_device="cpu", offload_param_device="none")
    ran = {"mixed_precision": "fp16", "zero_stage": 0, "offload_optimizer_device": "none",
           "offload_param_device": "none"}
    given = {"mixed_precision": "the command line", "zero_stage": "the command line"}
    problems = launch_problems(cfg, given, ran)
    assert len(problems) == 2
    for p in problems:
        assert_chinese(p)
    assert problems[1].startswith("zero_stage: this launch runs 0 (got 3 from the command line")
    assert problems[1].endswith("--use_deepspeed --zero_stage 3 --offload_optimizer_device cpu)")
    cfg0 = SimpleNamespace(mixed_precision="bf16", zero_stage=0, offload_optimizer_device="none",
                           offload_param_device="none")
    ran2 = dict(ran, zero_stage=2, offload_param_device="cpu")
    more = launch_problems(cfg0, {"zero_stage": "a.yaml", "offload_param_device": "a.yaml"},
                           ran2)
    assert {p.params["how"].code for p in more} == {"note.launch_how_no_deepspeed",
                                                     "note.launch_how_decides"}
    for p in more:
        assert_chinese(p)


# ---------------------------------------------------------------------- the history
def _db_rows(workspace: Path, sql: str):
    with sqlite3.connect(workspace / "zerolora.sqlite") as db:
        return db.execute(sql).fetchall()


def test_an_old_history_gains_the_message_columns_and_reads_its_notes_as_text(tmp_path):
    from backend.jobs.history import init_db
    from backend.jobs.runner import Runner

    ws = tmp_path / "ws"
    ws.mkdir()
    with sqlite3.connect(ws / "zerolora.sqlite") as db:  # a history without the _msg columns
        db.executescript(textwrap.dedent("""
            CREATE TABLE runs (id TEXT PRIMARY KEY, seq INTEGER NOT NULL, name TEXT,
              owner TEXT, status TEXT NOT NULL, gpu_ids TEXT NOT NULL, created_at REAL NOT NULL,
              started_at REAL, ended_at REAL, run_dir TEXT NOT NULL, config_yaml TEXT,
              supervisor_pid INTEGER, supervisor_start REAL, launch_requested_at REAL,
              stop_grace_s REAL NOT NULL, stop_requested INTEGER NOT NULL DEFAULT 0,
              stop_requested_at REAL, stop_reason TEXT, failure_reason TEXT, note TEXT,
              attempt INTEGER NOT NULL DEFAULT 1);
            CREATE TABLE stages (run_id TEXT NOT NULL, idx INTEGER NOT NULL, name TEXT NOT NULL,
              argv TEXT NOT NULL, env TEXT NOT NULL, status TEXT NOT NULL, exit_code INTEGER,
              pid INTEGER, pgid INTEGER, proc_start REAL, started_at REAL, ended_at REAL,
              log_path TEXT NOT NULL, note TEXT, PRIMARY KEY (run_id, idx));
            CREATE TABLE attempts (run_id TEXT NOT NULL, attempt INTEGER NOT NULL,
              status TEXT NOT NULL, started_at REAL, ended_at REAL, failure_reason TEXT,
              note TEXT, PRIMARY KEY (run_id, attempt));
            INSERT INTO runs(id, seq, status, gpu_ids, created_at, run_dir, stop_grace_s, note)
              VALUES('old', 1, 'stopped', 'all', 0, '/nowhere', 5, 'stopped on request');
        """))
    init_db(ws)
    cols = {r[1] for r in _db_rows(ws, "PRAGMA table_info(runs)")}
    assert {"note_msg", "failure_reason_msg", "stop_reason_msg"} <= cols
    assert "note_msg" in {r[1] for r in _db_rows(ws, "PRAGMA table_info(stages)")}
    assert "note_msg" in {r[1] for r in _db_rows(ws, "PRAGMA table_info(attempts)")}
    run = Runner(ws, auto_start=False).get_run("old")
    assert run["note"] == "stopped on request" and not isinstance(run["note"], Msg)
    assert "note_msg" not in run


def test_a_stop_before_the_start_is_a_message_in_the_history(tmp_path, monkeypatch):
    from backend.jobs.runner import Runner, RunnerError
    from backend.planning.plan import StagePlan

    ws = tmp_path / "ws"
    monkeypatch.setattr(Runner, "_start_ready", lambda self: [])  # the run stays queued
    r = Runner(ws, auto_start=False, min_free_disk_bytes=0)
    rd = ws / "runs" / "q"
    rid = r.submit_stages([StagePlan("train", [sys.executable, "-c", "pass"], {})], rd, "",
                          gpu_ids="cpu")
    assert r.get_run(rid)["status"] == "queued"
    r.stop(rid)
    run = r.get_run(rid)
    assert run["note"] == "stopped on request before it started"
    assert isinstance(run["note"], Msg) and assert_chinese(run["note"]) == "按请求停止（尚未开始）"
    assert isinstance(run["stop_reason"], Msg)
    stored = _db_rows(ws, f"SELECT note, note_msg FROM runs WHERE id = '{rid}'")[0]
    assert stored[0] == "stopped on request before it started"
    assert json.loads(stored[1])["code"] == "note.before_start"
    for call, args in ((r.resume, (rid,)), (r.get_run, ("nope",))):
        with pytest.raises(RunnerError) as e:
            call(*args)
        assert_chinese(e.value.args[0])
    with pytest.raises(RunnerError) as e:
        r.resume(rid)
    assert str(e.value).startswith(f"run {rid}: no saved training state in ")
    with pytest.raises(RunnerError) as e:
        r.get_run("nope")
    assert str(e.value) == "run_id: no such run (got 'nope')"


def test_a_failed_stage_s_message_reaches_the_history_and_the_page(tmp_path):
    """A real supervisor and stage: the stage's end reason (a DatasetError, as code and
    params in its progress file) becomes the run's failure line, read back as a message."""
    from backend.jobs.runner import Runner
    from backend.planning.plan import StagePlan
    from webui.tabs.run import failure_markdown, head_markdown, stages_html
    from webui.tabs.runs import table

    ws = tmp_path / "ws"
    r = Runner(ws, min_free_disk_bytes=0, stop_grace_s=2)
    rd = ws / "runs" / "bad"
    code = textwrap.dedent(f"""
        import sys
        from backend.core.messages import Msg
        from backend.core.progress import ProgressWriter
        from backend.data.dataset import DatasetError
        from backend.stages import end_fields, reason_of
        e = DatasetError([Msg("diagnosis.cannot_read_image", name="photo.png",
                              why="image file is truncated")])
        print("error:", e, file=sys.stderr)
        ProgressWriter({str(rd / 'progress.jsonl')!r}, "data_process").emit(
            "end", **end_fields("failed", reason_of(e)))
        sys.exit(2)
    """)
    rid = r.submit_stages([StagePlan("data_process", [sys.executable, "-c", code], {}),
                           StagePlan("train", [sys.executable, "-c", "pass"], {})],
                          rd, "", gpu_ids="cpu")
    run = r.wait(rid, timeout=120)
    assert run["status"] == "failed"
    assert run["failure_reason"] == ("stage 'data_process' exited with code 2: Dataset "
                                     "problems: cannot read image photo.png: image file is "
                                     "truncated")
    assert isinstance(run["failure_reason"], Msg)
    assert assert_chinese(run["failure_reason"]) == (
        "阶段 'data_process' 以退出码 2 结束：数据集问题：无法读取图像 photo.png"
        "（\"image file is truncated\"）")
    assert isinstance(run["stages"][0]["note"], Msg)
    summary = r.failure_summary(rid)
    assert isinstance(summary["headline"], Msg) and isinstance(summary["end_reason"], Msg)
    md = failure_markdown(summary)
    assert_page_chinese(md.replace("```", "\n").split("日志的最后几行")[0])
    assert "数据集问题" in md and "Reason: Dataset problems" in md
    assert_page_chinese(head_markdown(run))
    assert_page_chinese(stages_html(run, r.progress(rid)))
    row = table(r.list_runs(), "zh").value["data"][0]
    assert "阶段 &#x27;data_process&#x27; 以退出码 2 结束" in row[6]
    for cell in row[1:4] + row[6:]:
        assert_page_chinese(cell)


def test_the_supervisor_gone_notes_are_messages():
    from backend.jobs.runner import Runner

    sup = Msg("note.supervisor", pid=41)
    stage = {"name": "train", "log_path": "/nowhere/train.log", "adopted_at": None}
    notes = [Runner._stage_outcome(stage, {"status": "succeeded"}, None, None, False, sup, 5,
                                   None)[1],
             Runner._stage_outcome(stage, None, True, None, True, sup, 5, None)[1],
             Runner._stage_outcome(stage, None, False, None, True, sup, 5, None)[1],
             Runner._stage_outcome(stage, {"status": "failed", "reason": "boom"}, None, True,
                                   False, sup, 5, None)[1],
             Runner._stage_outcome(stage, {"status": "stopped"}, None, None, True, sup, 5,
                                   None)[1],
             Runner._stage_outcome(dict(stage, adopted_at=1.0), None, None, True, False, sup,
                                   5, None)[1],
             Runner._stage_outcome(stage, None, None, None, False, sup, 5, None)[1]]
    fresh = {"secret_keys": json.dumps(["HF_TOKEN"]), "stop_reason": None,
             "stop_reason_msg": None}
    for st, stopped, todo, reason in (("succeeded", False, ["sample"], None),
                                      ("failed", False, [], None),
                                      ("stopped", True, [], notes[1])):
        _, failure, note = Runner._run_outcome(st, reason, stopped, todo, fresh, sup)
        notes += [x for x in (failure, note) if x]
    notes.append(Msg("note.adopted", sup=sup))
    for n in notes:
        assert_chinese(n)
    assert notes[1] == "the run's supervisor process (pid 41) is gone, so the server stopped " \
                       "the stage; it did not exit within 5 s of SIGTERM and was killed " \
                       "(SIGKILL); its last save may be incomplete"
    assert notes[3] == ("stage 'train' failed: boom (the run's supervisor process (pid 41) is "
                        "gone, so its exit code is unknown; see logs/train.log); the processes "
                        "it left behind were stopped")
    assert notes[3].text("zh").startswith('阶段 \'train\' 失败："boom"（运行的监督进程（进程号 41）已不在')
    assert notes[-2] == ("stopped; the run's supervisor process (pid 41) is gone, so the server "
                         "stopped the stage; it did not exit within 5 s of SIGTERM and was killed "
                         "(SIGKILL); its last save may be incomplete")


def test_the_supervisor_s_own_notes(tmp_path):
    from backend.jobs.queue import disk_refusal
    from backend.jobs.supervisor import joined

    for m in (Msg("note.supervisor_signal", signal="SIGTERM"),
              Msg("note.supervisor_failed", error="KeyError: 'x'"),
              Msg("note.supervisor_not_started", error="[Errno 2] No such file"),
              Msg("note.could_not_start", stage="train", error="[Errno 2] No such file"),
              Msg("note.sigterm_killed", stage="train", grace=2.0),
              Msg("note.secrets_lost", keys=["HF_TOKEN"], pid=7),
              disk_refusal(tmp_path, 1 << 60),
              joined(Msg("note.stopped_on_request"), Msg("note.sigterm_killed", stage="train",
                                                         grace=30.0)),
              joined(None, None), joined("an old reason", None)):
        assert isinstance(m, (Msg, str))
        if isinstance(m, Msg):
            assert_chinese(m)
    assert Msg("note.sigterm_killed", stage="train", grace=2.0) == (
        "stage 'train' did not exit within 2 s of SIGTERM and was killed (SIGKILL); its last "
        "save may be incomplete")
    assert joined(Msg("note.stopped_on_request"), "RuntimeError: x").text("zh") == \
        '按请求停止；"RuntimeError: x"'
    assert joined(None, None).text("zh") == "已停止"


# ---------------------------------------------------------------------- the Run tab
def test_the_run_tab_shows_progress_stages_and_head_in_chinese():
    from webui.tabs.run import (active_markdown, failure_markdown, head_markdown,
                                progress_html, stages_html)

    p = {"status": "running", "stage": "train", "step": 3, "total": 10, "fraction": 0.3,
         "epoch": 1, "loss": 0.5, "val_losses": [[2, 0.7]], "eta_s": 90, "samples_per_s": 1.5,
         "seconds_since_output": 600,
         "stages": {"train": {"step": 3, "total": 10,
                              "reason": Msg("note.stopped_signal", signal="SIGTERM")}}}
    html = progress_html(p)
    assert "step <b>3</b> / 10 (30 %)" in html and "步 <b>3</b> / 10（30 %）" in html
    assert "阶段 <b>train（训练）</b>" in html
    assert_page_chinese(html)
    assert_page_chinese(progress_html({"status": "failed"}))
    run = {"id": "r1", "name": "mine", "status": "stopped", "attempt": 2, "resumable": True,
           "note": Msg("note.before_start", reason=Msg("note.stopped_on_request")),
           "stages": [{"name": "train", "status": "stopped", "exit_code": 143,
                       "started_at": 1.0, "ended_at": 5.0,
                       "note": Msg("note.sigterm_killed", stage="train", grace=3.0)}]}
    head = head_markdown(run)
    assert "Run `r1` — mine — **stopped** · attempt 2 · stopped on request before it started" \
           " · can be resumed" in head
    assert "运行 `r1` — mine — **已停止** · 第 2 次尝试 · 按请求停止（尚未开始） · 可以继续" in head
    assert_page_chinese(head.replace("mine", ""))
    assert_page_chinese(head_markdown(dict(run, status="running", stop_requested=True,
                                           note=None, name=None)))
    table = stages_html(run, {"stages": {}})
    assert "<code>SIGTERM</code>" in table
    assert_page_chinese(table)
    active = active_markdown([{"id": "a", "status": "running", "current_stage": "train"},
                              {"id": "b", "status": "queued"}])
    assert_page_chinese(active.replace("train", ""))
    summary = diagnosis.summarize("train", 1, LOGS["cuda_oom"] + "\n",
                                  config_yaml="lora_rank: 32\n", last_lines=["x"])
    summary["log_path"] = "/w/logs/train.log"
    md = failure_markdown(summary)
    assert "What to change:" in md and "要改什么：" in md
    assert_page_chinese(md.replace("```\nx\n```", ""))
    md = failure_markdown({"headline": None, "exit_text": diagnosis.exit_code_text(1),
                           "error_line": "ValueError: nope", "diagnoses": []})
    assert_page_chinese(md)
    assert "错误：`ValueError: nope`" in md


def test_gpu_lines_are_a_message(monkeypatch):
    from backend.jobs import processes

    monkeypatch.setattr(processes, "gpu_query",
                        lambda fields: [["0", "H200", "1024", "143770", "5"]])
    gpu = processes.gpu_memory_text()
    assert gpu == "GPU 0 (H200): 1.0 / 140.4 GiB, 5 % busy"
    assert assert_chinese(gpu) == "GPU 0（H200）：1.0 / 140.4 GiB，占用率 5 %"
    assert_chinese(Msg("runtab.gpu_memory", lines=gpu))


# ---------------------------------------------------------------------- the Runs tab
def test_the_runs_tab_history_and_info(tmp_path):
    from types import SimpleNamespace

    from webui.tabs import runs

    assert runs.headers("zh") == ["运行 ID", "名称", "状态", "阶段", "创建时间", "用时", "备注"]
    assert runs.headers("en") == runs.HEADERS
    assert runs.pick_label({"id": "a", "status": "failed"}, "en") == "run · a · failed"
    assert runs.pick_label({"id": "a", "status": "failed"}, "zh") == "运行 · a · 失败"
    rows = runs.table([{"id": "r2", "name": "render my run", "status": "failed",
                        "created_at": 0, "stages": [{"name": "train", "status": "failed"}],
                        "failure_reason": diagnosis.reason_line("train", 1, LOGS["disk_full"])},
                       {"id": "r3", "name": "<b>x</b>", "status": "queued", "created_at": 0,
                        "stages": []}], "zh").value["data"]
    assert '<span class="zl-zh">渲染 my run</span>' in rows[0][1]
    assert rows[1][1] == "&lt;b&gt;x&lt;/b&gt;"
    assert '<span class="zl-zh">失败</span>' in rows[0][2]
    assert "阶段 &#x27;train&#x27; 以退出码 1 结束：磁盘已满" in rows[0][6]
    for cell in (rows[0][1].replace("my run", ""), *rows[0][2:4], rows[0][6]):
        assert_page_chinese(cell)

    ctx = SimpleNamespace(runner=SimpleNamespace(disk_usage=lambda rid: 2048))
    run = {"id": "r2", "status": "failed", "run_dir": str(tmp_path),
           "failure_reason": diagnosis.reason_line("train", 1, "RuntimeError: x")}
    info = runs._info(ctx, run)
    assert "Run `r2` — **failed** · folder" in info and "检查点：还没有" in info
    assert '失败原因：阶段 \'train\' 以退出码 1 结束："RuntimeError: x"' in info
    assert_page_chinese(info.replace(str(tmp_path), ""))


def test_every_run_and_runs_tab_sentence_reads_as_chinese():
    """The tabs' one-off sentences (said by their buttons), each with sample parameters."""
    samples = {"id": "r1", "n": 2, "ahead": "r0", "status": "running", "why": "boom",
               "file": "lora.safetensors", "size": "1.0 MiB", "folder": "/w/runs/r1",
               "disk": "2.0 KiB", "names": ["step-10.safetensors"], "h": "exit code",
               "name": "x1", "path": "/w/logs/train.log", "line": "ValueError: x",
               "how": Msg("exit.code", exit=1), "title": Msg("diagnosis.disk_full"),
               "icon": "■", "extras": [Msg("runtab.stopping")], "note": "stopped",
               "lines": [], "time": "3m 02s", "stage": "train", "step": 1, "total": 2,
               "pct": 50.0, "epoch": 1, "loss": 0.25, "eta": "1m 00s", "speed": 2.0,
               "idx": 0, "used": 1.0, "util": 5, "got": "step-3", "allowed": "step-2"}
    for code in EN:
        if code.startswith(("runtab.", "runs.")):
            m = Msg(code, **{k: samples[k] for k in placeholders(EN[code])})
            assert_chinese(m)
    assert Msg("runtab.queued", id="b", n=1, ahead="a", status="running").text("zh") == \
        "运行 `b` 已排队：前面的 1 个运行结束后开始。本页继续显示 `a`，它当前运行中。"


def test_the_area_s_codes_are_written_in_its_files():
    """Each code of the area is made somewhere in the code (none left over)."""
    files = [*(ROOT / "backend" / "jobs").glob("*.py"), *(ROOT / "backend" / "stages").glob("*.py"),
             ROOT / "backend" / "training" / "launched.py", ROOT / "backend" / "data" / "dataset.py",
             ROOT / "webui" / "tabs" / "run.py", ROOT / "webui" / "tabs" / "runs.py",
             ROOT / "webui" / "jobs.py",
             ROOT / "backend" / "families" / "qwen3_vl.py",  # a captioner's refusal
             ROOT / "backend" / "data" / "masks.py", ROOT / "backend" / "data" / "video.py",
             ROOT / "backend" / "training" / "preservation.py",
             ROOT / "backend" / "training" / "class_images.py"]
    source = "\n".join(f.read_text() for f in files)
    from backend.core.messages import jobs as runs

    unused = [c for c in runs.EN if f'"{c}"' not in source and f"'{c}'" not in source]
    assert unused == [], unused
    assert ZH["note.stopped_on_request"] == "按请求停止"
