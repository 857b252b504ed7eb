"""The job runner with real detached processes: fake stages (tests/fake_stage.py) launched by
the runner's own argv mechanism, a real SQLite history, real signals."""
from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import psutil
import pytest
from safetensors.numpy import load_file

from backend.jobs import diagnosis
from backend.planning.plan import StagePlan
from backend.core.progress import read_events
from backend.jobs.runner import Runner, RunnerError
from backend.jobs.history import TERMINAL
from backend.jobs.processes import marked_pids
from tests.harness.runs import (SLEEPER, fake, group_running, log_text, running, wait_for,
                                waiting_at_gate)

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.timeout(240)



@pytest.fixture
def ws(tmp_path):
    workspace = tmp_path / "ws"
    yield workspace
    # Never leave processes behind, whatever a test did.
    if (workspace / "zerolora.sqlite").exists():
        r = Runner(workspace, stop_grace_s=1, auto_start=False)
        for run in r.list_runs():
            if run["status"] not in TERMINAL:
                r.stop(run["id"], wait=True)
            for pid in marked_pids(run["id"]):  # whatever a failed test left running
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass


def test_stages_run_in_order_and_the_history_shows_them(ws, monkeypatch):
    monkeypatch.setenv("HF_TOKEN", "hf_zerolora_test_secret")
    r = Runner(ws, stop_grace_s=2)
    rd = ws / "runs" / "one"
    rid = r.submit_stages(
        [fake(rd, "--steps", 2, stage="data_process"),
         StagePlan("train", fake(rd, "--steps", 3, "--save_every", 1,
                                 "--say", "naïve ünïcode ✓").argv,
                   {"TOKENIZERS_PARALLELISM": "false"}),
         fake(rd, "--steps", 1, stage="sample")],
        rd, "lora_rank: 8\n", owner="alice", name="first", gpu_ids="1, 0")
    run = r.wait(rid, timeout=120)

    assert run["status"] == "succeeded", run
    assert [(s["name"], s["status"], s["exit_code"]) for s in run["stages"]] == [
        ("data_process", "succeeded", 0), ("train", "succeeded", 0), ("sample", "succeeded", 0)]
    for before, after in zip(run["stages"], run["stages"][1:]):
        assert after["started_at"] >= before["ended_at"]
    assert run["gpu_ids"] == "0,1" and run["owner"] == "alice" and run["name"] == "first"
    assert run["config_yaml"] == "lora_rank: 8\n"
    assert isinstance(run["supervisor_pid"], int) and run["supervisor_start"]
    assert run["stages"][1]["argv"][:3] == [sys.executable, "-m", "tests.fake_stage"]
    assert run["stages"][1]["env"] == {"TOKENIZERS_PARALLELISM": "false",
                                       "PYTHONUNBUFFERED": "1", "ZEROLORA_RUN_ID": rid,
                                       "CUDA_VISIBLE_DEVICES": "0,1"}
    with sqlite3.connect(ws / "zerolora.sqlite") as db:
        assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert [x["id"] for x in r.list_runs(owner="alice")] == [rid]
    assert r.list_runs(owner="bob") == []

    # Each stage wrote its own log, with the runner's environment applied.
    train_log = log_text(r, rid)
    assert "PYTHONUNBUFFERED=1 CUDA_VISIBLE_DEVICES=0,1" in train_log
    assert f"cwd={ROOT}" in train_log
    assert "step 3/3" in train_log and "step 3/3" not in log_text(r, rid, "data_process")
    # A token reaches the stage through the environment but is never written down.
    assert "HF_TOKEN visible: yes" in train_log
    for f in ws.rglob("*"):
        if f.is_file():
            assert b"hf_zerolora_test_secret" not in f.read_bytes(), f
    with pytest.raises(RunnerError, match=r"stages\[0\]\.env: .*HF_TOKEN"):
        r.submit_stages([StagePlan("x", ["true"], {"HF_TOKEN": "hf_x"})], ws / "runs" / "x", "")

    # Tailing by byte offset in small pieces gives back the file exactly, characters unsplit.
    text, offset, pieces = "", 0, 0
    while True:
        piece, offset = r.tail_log(rid, "train", offset, max_bytes=5)
        if not piece:
            break
        text, pieces = text + piece, pieces + 1
    assert text == train_log and pieces > 10
    assert r.tail_log(rid, "train", offset) == ("", offset)
    assert r.last_lines(rid, "train", 2)[0] == "train: done"

    prog = r.progress(rid)
    assert prog["stage"] == "sample" and prog["stages"]["train"]["status"] == "succeeded"
    assert [s for s, _ in prog["losses"]] == [1, 2, 3]
    assert [c["step"] for c in prog["checkpoints"]] == [1, 2, 3]
    assert r.disk_usage(rid) > 0
    assert r.failure_summary(rid) is None


def test_stop_ends_the_whole_process_group_and_checkpoints_still_load(ws):
    r = Runner(ws, stop_grace_s=5)
    rd = ws / "runs" / "stop"
    gate, pids_file = ws / "gate", ws / "grandchildren.json"
    rid = r.submit_stages(
        [fake(rd, "--steps", 50, "--save_every", 1, "--wait_for", gate, "--wait_at", 4,
              "--spawn_grandchildren", pids_file),
         fake(rd, stage="sample")], rd, "")
    wait_for(waiting_at_gate(r, rid), "the stage to reach its gate")
    grandchildren = json.loads(pids_file.read_text())
    created = {pid: psutil.Process(pid).create_time() for pid in grandchildren.values()}
    assert all(running(pid, t) for pid, t in created.items())
    pgid = r.get_run(rid)["stages"][0]["pgid"]
    assert os.getpgid(grandchildren["same_group"]) == pgid
    assert os.getpgid(grandchildren["new_session"]) != pgid

    r.stop(rid, wait=True)

    run = r.get_run(rid)
    assert run["status"] == "stopped" and run["stop_requested"]
    train, sample = run["stages"]
    # The stage saved and exited by itself (code 0), so it was not killed after the grace.
    assert (train["status"], train["exit_code"], sample["status"]) == ("stopped", 0, "skipped")
    with pytest.raises(ProcessLookupError):
        os.killpg(pgid, 0)
    for pid, t in created.items():
        assert not running(pid, t), f"grandchild {pid} survived the stop"
    log = log_text(r, rid)
    assert "[zerolora] stop requested" in log and "stopping: state saved at step 3" in log
    assert "SIGKILL" not in log

    out = rd / "output"
    ckpts = sorted(out.glob("step-*.safetensors"))
    assert [c.name for c in ckpts] == ["step-1.safetensors", "step-2.safetensors",
                                       "step-3.safetensors"]
    for i, c in enumerate(ckpts, start=1):
        assert np.array_equal(load_file(str(c))["lora_A.weight"], np.full((4, 2), i, np.float32))
    assert int(load_file(str(out / "state" / "state.safetensors"))["step"][0]) == 3
    events, _ = read_events(rd / "progress.jsonl")
    assert events[-1]["event"] == "end" and events[-1]["status"] == "stopped"
    assert r.get_run(rid)["resumable"]


def test_a_stage_that_ignores_sigterm_is_killed_after_the_grace_period(ws):
    r = Runner(ws, stop_grace_s=2)
    rd = ws / "runs" / "stubborn"
    rid = r.submit_stages([fake(rd, "--steps", 5, "--ignore_sigterm", "--wait_for",
                                ws / "gate", "--wait_at", 2)], rd, "")
    wait_for(waiting_at_gate(r, rid), "the stage to reach its gate")
    pgid = r.get_run(rid)["stages"][0]["pgid"]

    r.stop(rid, wait=True)

    run = r.get_run(rid)
    stage = run["stages"][0]
    assert (run["status"], stage["status"], stage["exit_code"]) == ("stopped", "stopped", -9)
    assert "did not exit within 2 s of SIGTERM and was killed" in stage["note"]
    assert "killed (SIGKILL)" in run["note"]
    log = log_text(r, rid)
    assert log.index("got SIGTERM, ignoring it") < log.index("SIGKILL to process group")
    with pytest.raises(ProcessLookupError):
        os.killpg(pgid, 0)
    assert r.failure_summary(rid) is None


def test_a_sigkilled_training_stage_fails_the_run_with_a_diagnosis(ws):
    r = Runner(ws, stop_grace_s=1)
    rd = ws / "runs" / "oom"
    cfg = ("zero_stage: 3\noffload_param_device: cpu\noffload_optimizer_device: cpu\n"
           "dataset_num_workers: 2\n")
    rid = r.submit_stages([fake(rd, "--steps", 1, stage="data_process"),
                           fake(rd, "--steps", 5, "--save_every", 1, "--self_kill_at", 3),
                           fake(rd, stage="sample")], rd, cfg)
    run = r.wait(rid, timeout=120)

    assert run["status"] == "failed"
    assert [(s["status"], s["exit_code"]) for s in run["stages"]] == [
        ("succeeded", 0), ("failed", -9), ("skipped", None)]
    assert "stage 'train' was killed by signal 9 (SIGKILL)" in run["failure_reason"]
    # It killed itself: no OOM-killer record, memory far from its limit -- not "out of
    # host memory", which is claimed only with evidence.
    assert "out of host memory" not in run["failure_reason"]
    assert "from outside the run" in run["failure_reason"]
    assert "[zerolora] memory: no sign of running out of memory" in log_text(r, rid)
    summary = r.failure_summary(rid)
    assert summary["stage"] == "train" and summary["exit_code"] == -9
    top = summary["diagnoses"][0]
    assert top["kind"] == "killed" and "no sign of running out of memory" in top["evidence"]
    assert any("about to be killed" in line for line in summary["last_lines"])
    assert not any(line.startswith("[zerolora]") for line in summary["last_lines"])
    assert r.get_run(rid)["resumable"]  # state was saved at steps 1 and 2


def test_a_cuda_oom_names_the_settings_to_change(ws):
    r = Runner(ws, stop_grace_s=1)
    rd = ws / "runs" / "cuda"
    msg = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB"
    cfg = ("zero_stage: 0\noffload_param_device: none\nuse_gradient_checkpointing: false\n"
           "max_pixels: 1048576\nlora_rank: 32\n")
    rid = r.submit_stages([fake(rd, "--steps", 3, "--fail_at", 2, "--fail_text", msg)], rd, cfg)
    run = r.wait(rid, timeout=120)

    assert run["status"] == "failed" and run["stages"][0]["exit_code"] == 1
    assert run["failure_reason"] == ("stage 'train' exited with code 1: The GPU ran out of "
                                     "memory (CUDA out of memory)")
    summary = r.failure_summary(rid)
    top = summary["diagnoses"][0]
    assert top["kind"] == "cuda_oom" and top["evidence"] == msg
    assert {"zero_stage", "offload_param_device", "use_gradient_checkpointing", "max_pixels",
            "lora_rank"} <= set(top["settings"])
    assert any("now 1048576; try 524288" in f for f in top["fixes"])
    assert any("now 32; try 16" in f for f in top["fixes"])
    assert summary["end_reason"] == msg
    # No state was saved before the failure: resuming would restart at step 0, so it refuses.
    assert not run["resumable"]
    with pytest.raises(RunnerError, match="no saved training state"):
        r.resume(rid)


# accelerate launch's closing report of a failed stage: one process (CalledProcessError) and
# several (torch elastic's ChildFailedError).
LAUNCHER_ONE = (
    "Traceback (most recent call last):\n"
    '  File "/v/lib/python3.11/site-packages/accelerate/commands/launch.py", line 1, in '
    "simple_launcher\n    raise subprocess.CalledProcessError(returncode=process.returncode, "
    "cmd=cmd)\nsubprocess.CalledProcessError: Command '['/v/bin/python', '-m', "
    "'backend.stages.train']' ")
LAUNCHER_ELASTIC = (
    "E1201 13:00:00.000000 41 torch/distributed/elastic/multiprocessing/api.py:882] failed "
    "(exitcode: -9) local_rank: 0 (pid: 42) of binary: /v/bin/python\n"
    "Traceback (most recent call last):\n"
    '  File "/v/lib/python3.11/site-packages/accelerate/commands/launch.py", line 1, in '
    "multi_gpu_launcher\n"
    '  File "/v/lib/python3.11/site-packages/torch/distributed/run.py", line 1, in run\n'
    "torch.distributed.elastic.multiprocessing.errors.ChildFailedError: \n"
    "====\nbackend.stages.train FAILED\n----\nFailures:\n  <NO_OTHER_FAILURES>\n----\n"
    "Root Cause (first observed failure):\n[0]:\n  rank      : 0 (local_rank: 0)\n"
    "  exitcode  : -9 (pid: 42)\n  error_file: <N/A>\n"
    "  traceback : Signal 9 (SIGKILL) received by PID 42\n====")


@pytest.mark.parametrize("text, code, kind", [
    ("OSError: [Errno 28] No space left on device", 1, "disk_full"),
    ("OSError: Error no file named diffusion_pytorch_model.safetensors found in directory "
     "/m/transformer.", 1, "missing_model"),
    ("deepspeed.runtime.config.DeepSpeedConfigError: Check batch related parameters. "
     "train_batch_size is not equal to micro_batch_per_gpu * gradient_acc_step * world_size "
     "16 != 1 * 1 * 2", 1, "deepspeed_config"),
    ("RuntimeError: DefaultCPUAllocator: can't allocate memory: you tried to allocate 8 GB",
     1, "host_oom"),
    # SIGKILL is "out of host memory" only with the supervisor's evidence; else "killed".
    ("step 3/10 loss 0.2", 137, "killed"),
    ("step 3/10 loss 0.2\n[zerolora] memory: out of memory: the kernel's OOM killer ended "
     "the stage's process (Killed process 123 (python))", -9, "host_oom"),
    (LAUNCHER_ONE + "died with <Signals.SIGKILL: 9>.", 1, "killed"),  # one process
    (LAUNCHER_ELASTIC, 1, "killed"),  # several processes (torch elastic)
    ("RuntimeError: The server socket has failed to listen on any local network address. "
     "port: 29500, useIPv6=0, code=-98, name=EADDRINUSE, message=address already in use", 1,
     "port_in_use"),
])
def test_diagnosis_of_known_failures(text, code, kind):
    found = diagnosis.diagnose(code, f"loading\n{text}\nTraceback ends\n")
    assert found and found[0].kind == kind
    assert found[0].fixes and found[0].title


@pytest.mark.parametrize("report, own", [
    (LAUNCHER_ONE + "died with <Signals.SIGKILL: 9>.", -9),
    (LAUNCHER_ONE + "returned non-zero exit status 2.", 2),
    (LAUNCHER_ELASTIC, -9),
    # A traceback printed after the stage's message that restates its first line.
    ("RuntimeError: Invalid run config in the command line:\n" + LAUNCHER_ONE +
     "returned non-zero exit status 2.", 2),
])
def test_the_stage_s_own_exit_and_error_come_through_the_launcher(report, own):
    log = ("[zerolora] ==== stage 'train' (attempt 1) started\nstep 1\n"
           "Invalid run config in the command line:\n  lora_rnak: unknown option (got "
           "'--lora_rnak'; allowed: see --help; did you mean lora_rank?)\n" + report + "\n")
    assert diagnosis.stage_exit_code(1, log) == own
    summary = diagnosis.summarize("train", 1, log)
    assert summary["exit_code"] == own
    assert summary["error_line"] == ("Invalid run config in the command line: lora_rnak: "
                                     "unknown option (got '--lora_rnak'; allowed: see --help; "
                                     "did you mean lora_rank?)")
    assert not any("Traceback" in ln or "ChildFailedError" in ln or "CalledProcessError" in ln
                   for ln in summary["last_lines"])


def test_diagnosis_reads_only_the_latest_attempt_and_respects_stop():
    log = ("[zerolora] ==== stage 'train' (attempt 1) started\ntorch.OutOfMemoryError: CUDA "
           "out of memory\n[zerolora] ==== stage 'train' (attempt 2) started\n"
           "OSError: [Errno 28] No space left on device\n")
    assert [d.kind for d in diagnosis.diagnose(1, log)] == ["disk_full"]
    assert diagnosis.diagnose(-9, "step 1", stop_requested=True) == []
    assert diagnosis.diagnose(0, "CUDA out of memory") == []
    assert diagnosis.reason_line("train", 2, "ValueError: bad thing\n") == \
        "stage 'train' exited with code 2: ValueError: bad thing"


def test_every_setting_a_diagnosis_names_is_a_schema_field():
    """The advice names options by their schema names: in ``settings`` and as ``name: value``
    in the fixes (a renamed field must not leave stale advice behind)."""
    import re

    from backend.config.schema import FIELDS

    configs = [{}, {"zero_stage": 3, "offload_param_device": "cpu", "offload_optimizer_device":
                    "cpu", "use_gradient_checkpointing": True, "height": 512, "width": 512,
                    "lora_rank": 32, "dataset_num_workers": 2, "cpu_checkpointing": True,
                    "offline": True, "sample_height": 256, "sample_width": 256,
                    "data_process_offload": "model", "sample_cpu_offload": True}]
    named = set()
    for cfg in configs:
        for stage in ("data_process", "train", "sample"):
            for kind, _, build in diagnosis.RULES:
                d = build(cfg, "evidence", stage)
                assert set(d.settings) <= set(FIELDS), (kind, stage, d.settings)
                for fix in d.fixes:
                    named |= set(re.findall(r"\b([a-z0-9]+(?:_[a-z0-9]+)+)(?=:| now\b)", fix))
                named |= set(d.settings)
    assert named and named <= set(FIELDS), sorted(named - set(FIELDS))


def test_a_restarted_ui_reattaches_and_keeps_tailing(ws):
    gate = ws / "gate"
    a = Runner(ws, stop_grace_s=2)
    rd = ws / "runs" / "tail"
    rid = a.submit_stages([fake(rd, "--steps", 4, "--say", "before the gate",
                                "--wait_for", gate, "--wait_at", 3)], rd, "")
    seen, offset = "", 0

    def read_until_gate():
        nonlocal seen, offset
        piece, offset = a.tail_log(rid, "train", offset)
        seen += piece
        return "waiting for gate" in seen

    wait_for(read_until_gate, "the first part of the log")
    assert "step 2/4" in seen and "step 3/4" not in seen
    del a  # the UI goes away ...

    b = Runner(ws, stop_grace_s=2)  # ... and comes back
    assert b.get_run(rid)["status"] == "running"
    assert b.progress(rid)["step"] == 2
    gate.touch()
    more = ""
    while True:
        done = b.get_run(rid)["status"] in TERMINAL
        piece, offset = b.tail_log(rid, "train", offset)
        more += piece
        if done and not piece:
            break
        time.sleep(0.05)
    assert b.get_run(rid)["status"] == "succeeded"
    assert "step 3/4" in more and "train: done" in more and "before the gate" not in more
    assert seen + more == log_text(b, rid)
    assert b.progress(rid)["step"] == 4


def test_a_run_finishes_with_no_ui_process_alive(ws):
    rd = ws / "runs" / "alone"
    gate = ws / "gate"
    script = (
        "import sys\nfrom pathlib import Path\nfrom backend.jobs.runner import Runner\n"
        "from tests.harness.runs import fake\n"
        f"rd = Path({str(rd)!r})\n"
        f"r = Runner(Path({str(ws)!r}), stop_grace_s=2)\n"
        f"print(r.submit_stages([fake(rd, '--steps', 2, '--wait_for', {str(gate)!r}),"
        " fake(rd, stage='sample')], rd, ''))\n")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    ui = subprocess.run([sys.executable, "-c", script], cwd=ROOT, env=env,
                        capture_output=True, text=True, timeout=120)
    assert ui.returncode == 0, ui.stderr
    rid = ui.stdout.split()[-1]

    # The submitting process is gone; read the history with plain sqlite3, no Runner at all.
    def status():
        with sqlite3.connect(ws / "zerolora.sqlite") as db:
            return db.execute("SELECT status FROM runs WHERE id = ?", (rid,)).fetchone()[0]

    wait_for(lambda: status() == "running" and (rd / "logs" / "train.log").exists()
             and "waiting for gate" in (rd / "logs" / "train.log").read_text(), "the stage")
    gate.touch()
    wait_for(lambda: status() in TERMINAL, "the run to end")
    run = Runner(ws, auto_start=False).get_run(rid)
    assert run["status"] == "succeeded"
    assert [s["status"] for s in run["stages"]] == ["succeeded", "succeeded"]


def test_two_runs_on_one_gpu_set_run_one_after_the_other(ws):
    gate = ws / "gate"
    r = Runner(ws, stop_grace_s=2)
    first = r.submit_stages([fake(ws / "runs" / "a", "--steps", 2, "--wait_for", gate)],
                            ws / "runs" / "a", "")
    second = r.submit_stages([fake(ws / "runs" / "b", "--steps", 2)], ws / "runs" / "b", "")
    wait_for(waiting_at_gate(r, first), "the first run to start")
    assert r.get_run(second)["status"] == "queued"
    assert not (ws / "runs" / "b" / "logs" / "train.log").exists()

    gate.touch()  # nothing but the first run's supervisor starts the second one
    b = r.wait(second, timeout=120)
    a = r.get_run(first)
    assert a["status"] == b["status"] == "succeeded"
    assert b["started_at"] >= a["ended_at"]
    assert b["stages"][0]["started_at"] >= a["stages"][0]["ended_at"]


def test_runs_on_separate_gpus_run_side_by_side(ws):
    gate = ws / "gate"
    r = Runner(ws, stop_grace_s=2)
    ids = {g: r.submit_stages([fake(ws / "runs" / g.replace(",", "_"), "--steps", 1,
                                    "--wait_for", gate)], ws / "runs" / g.replace(",", "_"),
                              "", gpu_ids=g) for g in ("0", "1", "0,1")}
    wait_for(waiting_at_gate(r, ids["0"]), "the run on GPU 0")
    wait_for(waiting_at_gate(r, ids["1"]), "the run on GPU 1")
    assert r.get_run(ids["0,1"])["status"] == "queued"
    gate.touch()
    for g, rid in ids.items():
        assert r.wait(rid, timeout=120)["status"] == "succeeded"
        assert f"CUDA_VISIBLE_DEVICES={g} " in log_text(r, rid)


def test_a_resumed_run_continues_at_the_saved_step(ws):
    gate = ws / "gate"
    r = Runner(ws, stop_grace_s=5)
    rd = ws / "runs" / "resume"
    rid = r.submit_stages([fake(rd, "--steps", 1, stage="data_process"),
                           fake(rd, "--steps", 6, "--save_every", 1, "--wait_for", gate,
                                "--wait_at", 4),
                           fake(rd, stage="sample")], rd, "")
    wait_for(waiting_at_gate(r, rid), "training to reach its gate")
    r.stop(rid, wait=True)
    stopped = r.get_run(rid)
    assert stopped["status"] == "stopped" and stopped["resumable"]
    with pytest.raises(RunnerError, match="only a stopped or failed run"):
        r.resume(r.submit_stages([fake(ws / "runs" / "z", "--steps", 1)], ws / "runs" / "z",
                                 ""))

    gate.touch()
    assert r.resume(rid) == rid
    run = r.wait(rid, timeout=120)

    assert run["status"] == "succeeded" and run["attempt"] == 2
    assert [(a["attempt"], a["status"]) for a in run["attempts"]] == [(1, "stopped")]
    dp, train, sample = run["stages"]
    assert dp["started_at"] == stopped["stages"][0]["started_at"]  # not run again
    assert train["argv"][-2:] == ["--resume_from", str(rd / "output" / "state")]
    assert "resumed from step 3" in log_text(r, rid)
    events, _ = read_events(rd / "progress.jsonl")
    train_events = [e for e in events if e["stage"] == "train"]
    starts = [i for i, e in enumerate(train_events) if e["event"] == "start"]
    assert len(starts) == 2
    first_steps = [e["step"] for e in train_events[:starts[1]] if e["event"] == "step"]
    later_steps = [e["step"] for e in train_events[starts[1]:] if e["event"] == "step"]
    assert (first_steps, later_steps) == ([1, 2, 3], [4, 5, 6])
    for step in range(1, 7):
        w = load_file(str(rd / "output" / f"step-{step}.safetensors"))["lora_A.weight"]
        assert float(w[0, 0]) == step
    assert [s for s, _ in r.progress(rid)["losses"]] == [1, 2, 3, 4, 5, 6]
    assert sample["status"] == "succeeded"


FIXTURES = Path(__file__).resolve().parent / "fixtures"


def test_a_run_stopped_before_the_jobs_package_resumes(ws):
    """A history and run folder written before backend/jobs existed (by ``backend.jobs.runner`` and
    ``python -m backend.supervisor`` of that time; paths as @WORKSPACE@ / @PYTHON@) still
    show, resume from the saved state and finish."""
    src = FIXTURES / "run_before_jobs"

    def here(text: str) -> str:
        return text.replace("@WORKSPACE@", str(ws)).replace("@PYTHON@", sys.executable)

    rd = ws / "runs" / "before-jobs"
    for p in sorted((src / "run").rglob("*")):
        if p.is_file():
            out = rd / p.relative_to(src / "run")
            out.parent.mkdir(parents=True, exist_ok=True)
            if p.suffix == ".safetensors":
                out.write_bytes(p.read_bytes())
            else:
                out.write_text(here(p.read_text(encoding="utf-8")), encoding="utf-8")
    db = sqlite3.connect(ws / "zerolora.sqlite")
    db.executescript(here((src / "history.sql").read_text(encoding="utf-8")))
    db.close()
    (ws / "gate").touch()

    r = Runner(ws, stop_grace_s=5)
    rid = "20250101-000000-before"
    before = r.get_run(rid)
    assert before["status"] == "stopped" and before["resumable"]
    assert [s["status"] for s in before["stages"]] == ["succeeded", "stopped", "skipped"]
    assert [s for s, _ in r.progress(rid)["losses"]] == [1, 2, 3]
    assert r.resume(rid) == rid
    run = r.wait(rid, timeout=120)
    assert run["status"] == "succeeded" and run["attempt"] == 2
    assert [(a["attempt"], a["status"]) for a in run["attempts"]] == [(1, "stopped")]
    assert run["stages"][1]["argv"][-2:] == ["--resume_from", str(rd / "output" / "state")]
    assert "resumed from step 3" in log_text(r, rid)
    assert [s for s, _ in r.progress(rid)["losses"]] == [1, 2, 3, 4, 5, 6]


def test_the_old_supervisor_entry_point_still_carries_a_run(ws, monkeypatch):
    """``python -m backend.supervisor`` (what supervisors were started with before the move)."""
    monkeypatch.setattr("backend.jobs.runner.start_ready", lambda *a, **k: [])  # we start it
    r = Runner(ws, stop_grace_s=2, auto_start=False)
    rd = ws / "runs" / "old-entry"
    rid = r.submit_stages([fake(rd, "--steps", 2)], rd, "")
    assert r.get_run(rid)["status"] == "queued"
    proc = subprocess.run([sys.executable, "-m", "backend.supervisor", str(ws), rid],
                          cwd=str(Path(__file__).resolve().parents[1]), timeout=120,
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert r.get_run(rid)["status"] == "succeeded", proc.stdout + proc.stderr


def test_stop_a_queued_run_and_delete_runs(ws):
    gate = ws / "gate"
    r = Runner(ws, stop_grace_s=2)
    first = r.submit_stages([fake(ws / "runs" / "a", "--steps", 2, "--wait_for", gate)],
                            ws / "runs" / "a", "")
    second = r.submit_stages([fake(ws / "runs" / "b", "--steps", 2)], ws / "runs" / "b", "")
    wait_for(waiting_at_gate(r, first), "the first run to start")

    r.stop(second)
    b = r.get_run(second)
    assert b["status"] == "stopped" and [s["status"] for s in b["stages"]] == ["skipped"]
    assert not (ws / "runs" / "b" / "logs" / "train.log").exists()

    with pytest.raises(RunnerError, match="stop it before deleting"):
        r.delete(first)
    r.stop(first, wait=True)
    assert r.get_run(first)["status"] == "stopped"
    assert r.disk_usage(first) > 0
    r.delete(first)
    assert not (ws / "runs" / "a").exists()
    with pytest.raises(RunnerError, match="no such run"):
        r.get_run(first)
    assert [x["id"] for x in r.list_runs()] == [second]


def _kill_supervisor(r: Runner, run_id: str) -> dict:
    run = r.get_run(run_id)
    pid = run["supervisor_pid"]
    created = psutil.Process(pid).create_time()
    os.kill(pid, signal.SIGKILL)  # the supervisor dies; its stage lives on
    wait_for(lambda: not running(pid, created), "the supervisor to go")
    stage = run["stages"][0]
    assert running(stage["pid"], psutil.Process(stage["pid"]).create_time())
    return stage


def test_a_vanished_supervisor_s_live_stage_is_adopted_and_a_reused_pid_is_never_signalled(ws):
    """The supervisor only keeps the books: a stage still running without it goes on. Stop
    still ends it (run a, whose supervisor's pid now belongs to another process, which is
    never signalled); a restarted UI adopts run b's stage and leaves it running, and when
    that stage fails on its own the run fails with the stage's reason."""
    gate = ws / "gate"
    r = Runner(ws, stop_grace_s=5)
    a_dir, b_dir = ws / "runs" / "a", ws / "runs" / "b"
    a = r.submit_stages([fake(a_dir, "--steps", 3, "--wait_for", gate)], a_dir, "", gpu_ids="0")
    b = r.submit_stages([fake(b_dir, "--steps", 3, "--wait_for", gate, "--fail_at", 2)],
                        b_dir, "", gpu_ids="1")
    wait_for(waiting_at_gate(r, a), "run a to start")
    wait_for(waiting_at_gate(r, b), "run b to start")
    a_stage, b_stage = _kill_supervisor(r, a), _kill_supervisor(r, b)

    # Run a: another process now holds its supervisor's pid (same pid, other start time).
    other = subprocess.Popen([sys.executable, "-c", SLEEPER])
    try:
        with sqlite3.connect(ws / "zerolora.sqlite") as db:
            db.execute("UPDATE runs SET supervisor_pid = ? WHERE id = ?", (other.pid, a))
        r.stop(a, wait=True)  # SIGUSR1 to that pid would end it
        assert other.poll() is None, "a process with a reused pid was signalled"
    finally:
        other.kill()
        other.wait()
    run_a = r.get_run(a)
    assert (run_a["status"], run_a["stages"][0]["status"]) == ("stopped", "stopped")
    assert (f"stopped on request; the run's supervisor process (pid {other.pid}) is gone, so "
            f"the server stopped the stage") == run_a["note"]
    assert "stopping: state saved at step 0" in log_text(r, a)  # SIGTERM, not SIGKILL
    assert not group_running(a_stage["pgid"])
    assert run_a["resumable"]

    # Run b: a restarted UI finds it without its supervisor and adopts its live stage ...
    b_created = psutil.Process(b_stage["pid"]).create_time()
    restarted = Runner(ws, stop_grace_s=5)
    wait_for(lambda: restarted.get_run(b)["adopted"], "the restarted UI to adopt run b's stage")
    run_b = restarted.get_run(b)
    assert (run_b["status"], run_b["current_stage"]) == ("running", "train")
    assert "goes on and the server watches it (adopted)" in run_b["stages"][0]["note"]
    assert "goes on, adopted by the server" in log_text(restarted, b)
    restarted.reattach(wait=True)  # another look: still left alone
    assert running(b_stage["pid"], b_created)
    assert restarted.get_run(b)["status"] == "running"
    # ... which then fails on its own: the run fails with the stage's reason.
    gate.touch()
    run_b = restarted.wait(b, timeout=60)
    assert run_b["status"] == "failed" and run_b["stages"][0]["status"] == "failed"
    assert run_b["failure_reason"].startswith(
        "stage 'train' failed: RuntimeError: something broke (the run's supervisor process "
        f"(pid {run_b['supervisor_pid']}) is gone, so its exit code is unknown; see logs/train.log)")
    summary = restarted.failure_summary(b)
    assert summary["headline"] == run_b["stages"][0]["note"]
    assert summary["end_reason"] == "RuntimeError: something broke"
    assert not group_running(b_stage["pgid"])


def test_a_restarted_ui_ends_what_an_orphaned_stage_left_running(ws):
    """Supervisor and stage leader both gone (think: the launcher was killed), its workers
    still running, one in a session of its own: found by the run id in their environment.
    Nothing is left to adopt: the workers are stopped and the run fails."""
    r = Runner(ws, stop_grace_s=5)
    rd = ws / "runs" / "workers"
    pids_file = ws / "workers.json"
    rid = r.submit_stages([fake(rd, "--steps", 3, "--wait_for", ws / "gate",
                                "--spawn_grandchildren", pids_file)], rd, "")
    wait_for(waiting_at_gate(r, rid), "the stage to start")
    workers = {pid: psutil.Process(pid).create_time()
               for pid in json.loads(pids_file.read_text()).values()}
    stage = _kill_supervisor(r, rid)
    os.kill(stage["pid"], signal.SIGKILL)
    wait_for(lambda: all(running(pid, t) for pid, t in workers.items())
             and not running(stage["pid"], psutil.Process(stage["pid"]).create_time()
                             if psutil.pid_exists(stage["pid"]) else -1), "the leader to go")

    run = Runner(ws, stop_grace_s=5).wait(rid, timeout=60)
    assert run["status"] == "failed"
    assert ("is gone (the machine restarted or the process was killed) while stage 'train' "
            "was running; see logs/train.log; the processes it left behind were stopped"
            ) in run["failure_reason"]
    assert run["stages"][0]["adopted_at"] is None
    for pid, t in workers.items():
        assert not running(pid, t), f"worker {pid} was left running"


def test_no_start_when_the_disk_is_too_full(ws):
    r = Runner(ws, min_free_disk_bytes=1 << 50)
    rd = ws / "runs" / "full"
    with pytest.raises(RunnerError, match="not enough free disk: .* need at least 1024.0 TiB"):
        r.submit_stages([fake(rd, "--steps", 1)], rd, "")
    assert r.list_runs() == []


def test_submit_plans_a_config_into_a_queued_run(ws):
    from backend.config.errors import ConfigError
    from backend.config.presets import load_preset

    gate = ws / "gate"
    r = Runner(ws, stop_grace_s=2)
    blocker_dir = ws / "runs" / "blocker"
    blocker = r.submit_stages([fake(blocker_dir, "--steps", 1, "--wait_for", gate)],
                              blocker_dir, "")
    rid = r.submit(load_preset("cpu_demo"), owner="alice")

    run = r.get_run(rid)  # queued behind the blocker, so nothing heavy starts
    run_dir = Path(run["run_dir"])
    assert (run["status"], run["name"], run["owner"]) == ("queued", "cpu-demo", "alice")
    assert run_dir == (ws / "runs" / rid).resolve()
    assert run["config_yaml"] == (run_dir / "run.yaml").read_text(encoding="utf-8")
    assert [s["name"] for s in run["stages"]] == ["data_process", "train", "sample"]
    assert run["stages"][1]["argv"][1:3] == ["-m", "accelerate.commands.launch"]
    assert run["stages"][1]["log_path"] == str(run_dir / "logs" / "train.log")

    bad = load_preset("cpu_demo").model_copy(update={"lora_rank": 0})
    with pytest.raises(ConfigError, match="lora_rank"):
        r.submit(bad)
    assert sorted(p.name for p in (ws / "runs").iterdir()) == sorted(["blocker", rid])
    assert len(r.list_runs()) == 2

    r.stop(rid)
    r.delete(rid)
    assert not run_dir.exists() and blocker_dir.exists()
    gate.touch()
    assert r.wait(blocker, timeout=120)["status"] == "succeeded"


def test_lora_targets_that_match_nothing_are_refused_before_any_stage(ws):
    """Checked against the model's own module list (the local config.json, meta device)."""
    from backend.config.errors import ConfigError
    from backend.config.presets import load_preset

    r = Runner(ws, stop_grace_s=2)
    bad = load_preset("cpu_demo").model_copy(update={"lora_target_modules":
                                                     "to_q,to_qq,img_mlp.net.9"})
    with pytest.raises(ConfigError) as e:
        r.submit(bad)
    assert e.value.fields() == ["lora_target_modules"]
    assert "to_qq, img_mlp.net.9 match no Linear layer" in str(e.value)
    assert "transformer/config.json" in str(e.value)  # the demo model's own modules
    assert r.list_runs() == [] and not list((ws / "runs").glob("*"))


def test_what_each_planned_stage_reads_is_checked_before_the_run_is_accepted(ws, tmp_path):
    """A train-only split run on a cache folder that does not exist, a dataset folder or
    metadata file that is not there: refused at submission, naming the field; nothing is
    queued (issue 21)."""
    from backend.config.errors import ConfigError
    from backend.config.presets import load_preset

    r = Runner(ws, stop_grace_s=2)
    demo = load_preset("cpu_demo")
    cases = [
        ({"stages": ["train", "sample"], "dataset_base_path": str(tmp_path / "no_cache"),
          "dataset_metadata_path": ""}, ["dataset_base_path"], "cache folder not found"),
        ({"stages": ["train"], "dataset_base_path": demo.dataset_base_path,
          "dataset_metadata_path": ""}, ["dataset_base_path"], "no cached samples"),
        ({"dataset_base_path": str(tmp_path / "no_images")}, ["dataset_base_path"],
         "folder not found"),
        ({"dataset_metadata_path": str(tmp_path / "gone.csv")}, ["dataset_metadata_path"],
         "file not found"),
        ({"split_training": False, "stages": ["train"],
          "dataset_metadata_path": str(tmp_path / "gone.csv")}, ["dataset_metadata_path"],
         "file not found"),
    ]
    for changes, fields, text in cases:
        with pytest.raises(ConfigError) as e:
            r.submit(demo.model_copy(update=changes))
        assert e.value.fields() == fields, (changes, str(e.value))
        assert text in str(e.value), (changes, str(e.value))
    assert r.list_runs() == [] and not list((ws / "runs").glob("*"))


def test_processes_a_stage_leaves_behind_are_ended_with_it(ws):
    r = Runner(ws, stop_grace_s=2)
    rd = ws / "runs" / "leaky"
    pids_file = ws / "grandchildren.json"
    rid = r.submit_stages([fake(rd, "--steps", 1, "--spawn_grandchildren", pids_file),
                           fake(rd, stage="sample")], rd, "")
    wait_for(pids_file.exists, "the grandchildren")
    created = {}
    for pid in json.loads(pids_file.read_text()).values():
        try:
            created[pid] = psutil.Process(pid).create_time()
        except psutil.NoSuchProcess:
            pass  # already ended with its stage
    run = r.wait(rid, timeout=120)
    assert run["status"] == "succeeded"
    for pid, t in created.items():
        assert not running(pid, t), f"grandchild {pid} outlived its stage"
    assert "left processes behind" in log_text(r, rid)
    # the next stage started only after they were gone
    assert run["stages"][1]["started_at"] >= run["stages"][0]["ended_at"]


def test_a_stage_that_cannot_start_fails_the_run(ws):
    r = Runner(ws, stop_grace_s=2)
    rd = ws / "runs" / "nostart"
    rid = r.submit_stages([StagePlan("train", [str(rd / "no-such-program")], {}),
                           fake(rd, stage="sample")], rd, "")
    run = r.wait(rid, timeout=120)
    assert run["status"] == "failed"
    assert [(s["status"], s["exit_code"]) for s in run["stages"]] == [("failed", 127),
                                                                     ("skipped", None)]
    assert run["failure_reason"].startswith("stage 'train' could not start: [Errno 2]")
    assert "could not start" in r.last_lines(rid, "train", 1)[0]


def test_a_sigterm_to_the_supervisor_stops_the_run_cleanly(ws):
    """A machine shutting down sends SIGTERM: the stage gets its grace to save, the run is
    recorded as stopped (and can be resumed), not lost."""
    r = Runner(ws, stop_grace_s=5)
    rd = ws / "runs" / "shutdown"
    rid = r.submit_stages([fake(rd, "--steps", 5, "--save_every", 1, "--wait_for", ws / "gate",
                                "--wait_at", 3)], rd, "")
    wait_for(waiting_at_gate(r, rid), "the stage to reach its gate")
    os.kill(r.get_run(rid)["supervisor_pid"], signal.SIGTERM)
    run = r.wait(rid, timeout=120)
    assert run["status"] == "stopped" and run["stages"][0]["exit_code"] == 0
    assert run["note"] == "the run's supervisor received SIGTERM"
    assert run["resumable"]


@pytest.mark.slow
def test_stop_through_a_real_accelerate_launch_lets_the_training_process_save(ws):
    """`accelerate launch` dies on SIGTERM at once; its training process, in the same group,
    still gets the grace period to save (the runner waits for the group, not the leader)."""
    r = Runner(ws, stop_grace_s=20)
    rd = ws / "runs" / "accelerate"
    plan = fake(rd, "--steps", 9, "--save_every", 1, "--wait_for", ws / "gate", "--wait_at", 3)
    argv = [sys.executable, "-m", "accelerate.commands.launch", "--num_processes", "1",
            "--cpu", "--mixed_precision", "no", "--num_machines", "1", "--dynamo_backend", "no",
            *plan.argv[1:]]
    rid = r.submit_stages([StagePlan("train", argv, {})], rd, "")
    wait_for(waiting_at_gate(r, rid), "the training process to reach its gate", timeout=180)
    r.stop(rid, wait=True)
    run = r.get_run(rid)
    stage = run["stages"][0]
    assert (run["status"], stage["status"]) == ("stopped", "stopped")
    assert stage["exit_code"] != -9  # nothing needed SIGKILL
    assert "stopping: state saved at step 2" in log_text(r, rid)
    assert int(load_file(str(rd / "output" / "state" / "state.safetensors"))["step"][0]) == 2
    with pytest.raises(ProcessLookupError):
        os.killpg(stage["pgid"], 0)


def test_a_token_for_one_run_reaches_only_that_run_and_is_never_written(ws, monkeypatch):
    monkeypatch.delenv("HF_TOKEN", raising=False)
    secret = "hf_only_for_run_b"
    gate = ws / "gate"
    r = Runner(ws, stop_grace_s=2)
    dirs = {k: ws / "runs" / k for k in "abcd"}
    a = r.submit_stages([fake(dirs["a"], "--steps", 1, "--wait_for", gate)], dirs["a"], "")
    wait_for(waiting_at_gate(r, a), "run a to start")
    b = r.submit_stages([fake(dirs["b"], "--steps", 1)], dirs["b"], "",
                        secret_env={"HF_TOKEN": secret})
    c = r.submit_stages([fake(dirs["c"], "--steps", 1)], dirs["c"], "")
    d = r.submit_stages([fake(dirs["d"], "--steps", 1)], dirs["d"], "",
                        secret_env={"HF_TOKEN": "hf_lost"})
    assert r.get_run(b)["secret_keys"] == ["HF_TOKEN"]
    assert [r.get_run(x)["status"] for x in (b, c, d)] == ["queued"] * 3

    # d's supervisor, waiting in the queue with its token, dies (think: a reboot) ...
    waiter = r.get_run(d)["waiter_pid"]
    created = psutil.Process(waiter).create_time()
    os.kill(waiter, signal.SIGKILL)
    wait_for(lambda: not running(waiter, created), "d's waiting supervisor to go")
    r.reattach()  # ... so d can never get its token: it fails and says why
    lost = r.get_run(d)
    assert lost["status"] == "failed" and "submit it again" in lost["failure_reason"]

    gate.touch()
    for x in (a, b, c):
        assert r.wait(x, timeout=120)["status"] == "succeeded"
    assert r.get_run(c)["started_at"] >= r.get_run(b)["ended_at"]  # the queue order held
    assert "HF_TOKEN visible: yes" in log_text(r, b)
    assert "HF_TOKEN visible: no" in log_text(r, a)
    assert "HF_TOKEN visible: no" in log_text(r, c)  # started by b's supervisor
    for f in ws.rglob("*"):
        if f.is_file():
            assert secret.encode() not in f.read_bytes(), f
    with pytest.raises(RunnerError, match="secret_env: not an environment variable name"):
        r.submit_stages([fake(dirs["a"], "--steps", 1)], ws / "runs" / "e", "",
                        secret_env={"HF TOKEN": "x"})


@pytest.mark.parametrize("stage, cfg, settings, advice", [
    ("data_process", {"data_process_offload": "none", "max_pixels": 1048576},
     {"data_process_offload", "max_pixels"}, "data_process_offload now none; try model"),
    ("data_process", {"data_process_offload": "model", "height": 1024, "width": 1024},
     {"data_process_offload", "height", "width"}, "now model; try sequential"),
    ("sample", {"sample_cpu_offload": "model", "sample_vae_tiling": False,
                "sample_height": 1328, "sample_width": 1328},
     {"sample_cpu_offload", "sample_vae_tiling", "sample_height", "sample_width"},
     "sample_cpu_offload now model; try sequential"),
])
def test_a_cuda_oom_outside_training_names_that_stages_settings(stage, cfg, settings, advice):
    """Stage 1 and the sample stage hold other models than training: their advice names
    their own offload settings, never ZeRO or the LoRA rank."""
    import yaml

    msg = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB"
    summary = diagnosis.summarize(stage, 1, f"loading\n{msg}\n", config_yaml=yaml.safe_dump(cfg))
    top = summary["diagnoses"][0]
    assert top["kind"] == "cuda_oom"
    assert set(top["settings"]) == settings
    assert any(advice in f for f in top["fixes"]), top["fixes"]
    assert not {"zero_stage", "lora_rank", "use_gradient_checkpointing"} & set(top["settings"])


def test_the_gpu_query_reads_nvidia_smi(tmp_path, monkeypatch):
    """The UI's GPU lines come from the process module (the UI starts no process)."""
    from backend.jobs import processes

    tool = tmp_path / "nvidia-smi"
    tool.write_text("#!/bin/sh\n"
                    "if [ \"$1\" = --query-gpu=memory.total ]; then echo 143771; echo 143771\n"
                    "else echo '0, NVIDIA H200, 1024, 143771, 5'\n"
                    "echo '1, NVIDIA H200, 2048, 143771, 90'; fi\n")
    tool.chmod(0o755)
    monkeypatch.setattr(processes, "_gpu_tool", [str(tool)])
    assert processes.gpu_memory_text() == ("GPU 0 (NVIDIA H200): 1.0 / 140.4 GiB, 5 % busy\n"
                                           "GPU 1 (NVIDIA H200): 2.0 / 140.4 GiB, 90 % busy")
    assert [round(g, 1) for g in processes.gpu_memory_totals_gb()] == [150.8, 150.8]
    monkeypatch.setattr(processes, "_gpu_tool", [None])  # no driver tool: no GPU lines
    assert processes.gpu_memory_text() is None and processes.gpu_memory_totals_gb() == []


# ------------------------------------------------------------------ real stages, real launcher
def _real_train(run_dir: Path, models_root: Path, cache: Path, config_file: Path,
                *extra) -> StagePlan:
    """The train stage as the run plan launches it: accelerate launch -m backend.stages.train."""
    from tests.harness.stages import train_args

    argv = [sys.executable, "-m", "accelerate.commands.launch", "--config_file",
            str(config_file), "-m", "backend.stages.train",
            *map(str, train_args(models_root, cache, run_dir / "output", *extra)),
            "--progress_file", str(run_dir / "progress.jsonl")]
    return StagePlan("train", argv, {"OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"})


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_kill_9_of_a_real_training_process_records_its_signal_not_oom(
        ws, models_root, stage1_cache, plain_accelerate_config):
    r = Runner(ws, stop_grace_s=5)
    rd = ws / "runs" / "kill9"
    rid = r.submit_stages([_real_train(rd, models_root, stage1_cache, plain_accelerate_config,
                                       "--num_epochs", "1000")], rd, "")
    wait_for(lambda: any(e["event"] == "step" for e in read_events(rd / "progress.jsonl")[0]),
             "the first training step", timeout=300)
    leader = r.get_run(rid)["stages"][0]["pid"]
    trainer = [p for p in psutil.Process(leader).children(recursive=True)
               if "backend.stages.train" in " ".join(p.cmdline())
               and "accelerate.commands.launch" not in " ".join(p.cmdline())]
    assert len(trainer) == 1
    trainer[0].send_signal(signal.SIGKILL)  # the training process itself, not the launcher
    run = r.wait(rid, timeout=120)

    stage = run["stages"][0]
    assert (run["status"], stage["status"], stage["exit_code"]) == ("failed", "failed", -9)
    assert "stage 'train' was killed by signal 9 (SIGKILL)" in run["failure_reason"]
    assert "out of host memory" not in run["failure_reason"]
    summary = r.failure_summary(rid)
    assert summary["exit_code"] == -9 and summary["diagnoses"][0]["kind"] == "killed"
    assert "no sign of running out of memory" in summary["diagnoses"][0]["evidence"]
    assert "the launcher exited with code 1" in log_text(r, rid)


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_a_failed_real_stage_shows_its_own_error_and_exit_code(
        ws, models_root, stage1_cache, plain_accelerate_config):
    r = Runner(ws, stop_grace_s=5)
    rd = ws / "runs" / "usage"
    rid = r.submit_stages([_real_train(rd, models_root, stage1_cache, plain_accelerate_config,
                                       "--lora_rnak", "4")], rd, "")
    run = r.wait(rid, timeout=300)

    assert (run["status"], run["stages"][0]["exit_code"]) == ("failed", 2)  # not 1
    assert "lora_rnak: unknown option" in run["failure_reason"]
    summary = r.failure_summary(rid)
    own = ("Invalid run config in the command line: lora_rnak: unknown option (got "
           "'--lora_rnak'; allowed: see --help; did you mean lora_rank?)")
    assert summary["exit_code"] == 2 and summary["error_line"] == own  # the API's error line
    assert summary["headline"].startswith("Stage 'train' exited with code 2: ")
    assert "lora_rnak" in summary["end_reason"]
    assert not any("CalledProcessError" in ln or "accelerate/commands/launch.py" in ln
                   for ln in summary["last_lines"])
    assert "CalledProcessError" in log_text(r, rid)  # the launcher's traceback stays in the log
