"""Faults of the third battery (issue 28, items 6 and 7), through the surfaces they were
found on: a run supervisor killed with SIGKILL (real detached supervisors, fake stages from
tests/fake_stage.py, no browser and no UI call), and a YAML alias bomb (the API's config
argument, a preset file, run.yaml on resume, the importer's files)."""
from __future__ import annotations

import os
import re
import signal
import threading
import tracemalloc
from pathlib import Path

import psutil
import pytest

from backend.core import bounded
from backend.config.errors import ConfigError
from backend.config.files import load_config
from backend.config.presets import read_preset
from backend.config.validation import validate
from backend.jobs.watch import last_end_event
from backend.jobs.runner import Runner
from backend.jobs.history import TERMINAL
from backend.jobs.processes import marked_pids
from tests.harness.runs import fake, log_text, running, wait_for

pytestmark = pytest.mark.timeout(240)

LIMIT_TEXT = (f"too many values once YAML aliases are expanded (got more than "
              f"{bounded.MAX_VALUES}; allowed up to {bounded.MAX_VALUES})")


@pytest.fixture
def ws(tmp_path):
    workspace = tmp_path / "ws"
    yield workspace
    # Never leave processes behind, whatever a test did (a stopped supervisor included).
    if (workspace / "zerolora.sqlite").exists():
        r = Runner(workspace, stop_grace_s=1, auto_start=False)
        for run in r.list_runs():
            for pid in [run["supervisor_pid"]] + marked_pids(run["id"]):
                try:
                    if pid:
                        os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass


# ---------------------------------------------------------------------------- item 6
def _pause_supervisor(r: Runner, run_id: str) -> psutil.Process:
    """SIGSTOP the run's supervisor: alive (the runner must leave it be), but it records
    nothing until it is killed, so what its stage does next is lost with it."""
    sup = psutil.Process(r.get_run(run_id)["supervisor_pid"])
    os.kill(sup.pid, signal.SIGSTOP)
    return sup


def _kill(sup: psutil.Process) -> None:
    os.kill(sup.pid, signal.SIGKILL)
    wait_for(lambda: not running(sup.pid, sup.create_time()), "the supervisor to be gone")


def _stage(r: Runner, run_id: str, name: str) -> dict:
    return next(s for s in r.get_run(run_id)["stages"] if s["name"] == name)


def _leader_gone(stage: dict):
    created = psutil.Process(stage["pid"]).create_time()
    return lambda: not running(stage["pid"], created)  # a zombie of the paused supervisor


def test_a_finished_stage_whose_supervisor_was_sigkilled_succeeds_at_app_start(ws):
    """The stage finished 500/500, its supervisor was gone before it could say so: the
    app's start settles the run from the stage's progress file, never as failed."""
    r = Runner(ws, stop_grace_s=5)
    rd, gate = ws / "runs" / "done", ws / "gate"
    rid = r.submit_stages([fake(rd, "--steps", 3, "--wait_for", gate)], rd, "")
    wait_for(lambda: "waiting for gate" in log_text(r, rid), "the stage to start")
    stage = _stage(r, rid, "train")
    sup = _pause_supervisor(r, rid)
    gate.touch()
    wait_for(_leader_gone(stage), "the stage to finish")
    assert last_end_event(rd / "progress.jsonl", "train")["status"] == "succeeded"
    _kill(sup)
    assert r.get_run(rid)["status"] == "running"  # nothing recorded the end

    run = Runner(ws, stop_grace_s=5).wait(rid, timeout=60)  # the app starts again
    assert run["status"] == "succeeded", run["failure_reason"]
    st = run["stages"][0]
    assert st["status"] == "succeeded" and st["exit_code"] is None
    assert "progress file says it succeeded" in st["note"]
    assert f"pid {sup.pid}" in st["note"]


def test_the_watcher_settles_a_sigkilled_supervisor_s_run_and_the_queue_moves_on(ws):
    """No browser, no UI call: the app's watcher notices each dead supervisor. A finished
    stage succeeds and the run goes on with its next stage; a queued run then starts; a
    stage that really died fails its run, and the queue moves on again. A run whose
    supervisor is alive (here: paused) is never touched."""
    r = Runner(ws, stop_grace_s=5).watch(every_s=0.2)
    try:
        gate_a, gate_b = ws / "gate-a", ws / "gate-b"
        a_dir, b_dir, c_dir = ws / "runs" / "a", ws / "runs" / "b", ws / "runs" / "c"
        a = r.submit_stages([fake(a_dir, "--steps", 2, "--wait_for", gate_a,
                                  stage="data_process"),
                             fake(a_dir, "--steps", 2)], a_dir, "")
        b = r.submit_stages([fake(b_dir, "--steps", 2, "--wait_for", gate_b)], b_dir, "")
        c = r.submit_stages([fake(c_dir, "--steps", 2)], c_dir, "")
        wait_for(lambda: "waiting for gate" in log_text(r, a, "data_process"), "run a")
        assert [r.get_run(x)["status"] for x in (b, c)] == ["queued", "queued"]

        # Run a: its first stage finishes while its supervisor cannot record it.
        stage = _stage(r, a, "data_process")
        sup = _pause_supervisor(r, a)
        gate_a.touch()
        wait_for(_leader_gone(stage), "stage data_process to finish")
        wait_for(lambda: last_end_event(a_dir / "progress.jsonl", "data_process"),
                 "its end event")
        # Many watcher passes over a run with a live (paused) supervisor: untouched.
        threading.Event().wait(2.0)
        run = r.get_run(a)
        assert run["status"] == "running" and run["supervisor_pid"] == sup.pid
        assert _stage(r, a, "data_process")["status"] == "running"
        assert r.get_run(b)["status"] == "queued"

        _kill(sup)
        run = r.wait(a, timeout=90)
        assert run["status"] == "succeeded", run["failure_reason"]
        first, second = run["stages"]
        assert first["status"] == "succeeded" and "says it succeeded" in first["note"]
        assert second["status"] == "succeeded" and second["exit_code"] == 0
        assert run["supervisor_pid"] != sup.pid  # a new supervisor ran stage train

        # The queued run b starts; its stage then dies with its supervisor.
        wait_for(lambda: "waiting for gate" in log_text(r, b), "run b to start")
        stage = _stage(r, b, "train")
        sup = _pause_supervisor(r, b)
        os.kill(stage["pid"], signal.SIGKILL)
        wait_for(_leader_gone(stage), "stage train of run b to die")
        _kill(sup)
        run = r.wait(b, timeout=90)
        assert run["status"] == "failed"
        assert run["stages"][0]["status"] == "failed"
        assert (f"the run's supervisor process (pid {sup.pid}) is gone (the machine "
                f"restarted or the process was killed) while stage 'train' was running"
                ) in run["failure_reason"]

        # ... and the queue moves on to run c.
        run = r.wait(c, timeout=90)
        assert run["status"] == "succeeded", run["failure_reason"]
    finally:
        r.close()
    assert not [t for t in threading.enumerate() if t.name == "zerolora-run-watcher"]
    assert all(x["status"] in TERMINAL for x in r.list_runs())


def _adopted_run(r: Runner, ws: Path, name: str) -> tuple[str, dict, psutil.Process, Path]:
    """A two-stage run whose supervisor is SIGKILLed while stage train (cheap, fake) is at
    step 2 of 4, waiting at a gate: returns (run id, train's stage, the dead supervisor,
    the gate)."""
    rd, gate = ws / "runs" / name, ws / f"gate-{name}"
    rid = r.submit_stages([fake(rd, "--steps", 4, "--save_every", 1, "--wait_for", gate,
                                "--wait_at", 3),
                           fake(rd, "--steps", 1, stage="sample")], rd, "")
    wait_for(lambda: "waiting for gate" in log_text(r, rid), "stage train to reach its gate")
    stage = _stage(r, rid, "train")
    sup = psutil.Process(r.get_run(rid)["supervisor_pid"])
    _kill(sup)
    wait_for(lambda: r.get_run(rid)["adopted"], "the watcher to adopt stage train")
    return rid, stage, sup, gate


@pytest.mark.parametrize("user_stops", [False, True], ids=["finishes", "stopped"])
def test_a_live_stage_outlives_its_sigkilled_supervisor(ws, user_stops):
    """The supervisor only keeps the books: a healthy stage whose supervisor was SIGKILLed
    keeps running, adopted by the app's watcher (the run stays running, its progress read
    as before). It then finishes on its own and a new supervisor runs the next stage; or the
    user stops it, and the server ends the stage process itself (SIGTERM, its grace to
    save) and the run is stopped, ready to resume."""
    r = Runner(ws, stop_grace_s=10).watch(every_s=0.2)
    try:
        rid, stage, sup, gate = _adopted_run(r, ws, "adopted")
        rd = ws / "runs" / "adopted"
        created = psutil.Process(stage["pid"]).create_time()
        for _ in range(3):  # more looks (besides the watcher's): the stage is left alone
            r.reattach(wait=True)
        run = r.get_run(rid)
        assert (run["status"], run["current_stage"]) == ("running", "train")
        assert [s["status"] for s in run["stages"]] == ["running", "queued"]
        assert run["supervisor_pid"] == sup.pid  # nobody else claimed it
        assert running(stage["pid"], created)
        assert "goes on, adopted by the server" in log_text(r, rid)
        assert (r.progress(rid)["step"], r.progress(rid)["total"]) == (2, 4)

        if not user_stops:
            gate.touch()
            run = r.wait(rid, timeout=90)
            assert run["status"] == "succeeded", run["failure_reason"]
            train, sample = run["stages"]
            assert train["status"] == "succeeded" and "says it succeeded" in train["note"]
            assert sample["status"] == "succeeded" and sample["exit_code"] == 0
            assert run["supervisor_pid"] != sup.pid  # a new supervisor ran stage sample
            assert "train: done" in log_text(r, rid)
            assert sorted(p.name for p in (rd / "output").glob("step-*.safetensors")) == [
                f"step-{i}.safetensors" for i in range(1, 5)]
            assert last_end_event(rd / "progress.jsonl", "sample")["status"] == "succeeded"
        else:
            r.stop(rid)  # as the Run tab's Stop does
            run = r.wait(rid, timeout=90)
            assert run["status"] == "stopped"
            assert [s["status"] for s in run["stages"]] == ["stopped", "skipped"]
            assert run["note"] == (f"stopped on request; the run's supervisor process (pid "
                                   f"{sup.pid}) is gone, so the server stopped the stage")
            assert not running(stage["pid"], created)
            assert not marked_pids(rid)  # nothing of the run is left
            assert "stopping: state saved at step 2" in log_text(r, rid)
            assert last_end_event(rd / "progress.jsonl", "train")["status"] == "stopped"
            assert run["resumable"]
            gate.touch()
            r.resume(rid)  # from the state it saved when the server stopped it
            run = r.wait(rid, timeout=90)
            assert run["status"] == "succeeded", run["failure_reason"]
            assert "resumed from step 2" in log_text(r, rid)
    finally:
        r.close()
    assert all(x["status"] in TERMINAL for x in r.list_runs())


def test_the_watcher_stops_with_close_and_starts_once(ws):
    r = Runner(ws, auto_start=False)
    assert r.watch(every_s=0.05) is r
    r.watch(every_s=0.05)  # a second call keeps the one thread
    assert len([t for t in threading.enumerate() if t.name == "zerolora-run-watcher"]) == 1
    r.close()
    assert not [t for t in threading.enumerate() if t.name == "zerolora-run-watcher"]
    with pytest.raises(ValueError, match="every_s: must be > 0"):
        r.watch(every_s=0)


# ---------------------------------------------------------------------------- item 7
def bomb(levels: int = 9, width: int = 9, key: str = "lora_target_modules") -> str:
    """The billion laughs: ``width ** levels`` values in a few hundred bytes."""
    lines = ['a0: &a0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    for i in range(1, levels):
        lines.append(f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * width) + "]")
    lines.append(f"{key}: *a{levels - 1}")
    return "\n".join(lines) + "\n"


# After the bomb, text that is not YAML: a parser that stopped at the limit never reads it.
NOT_YAML_AFTER = "broken: [never, closed\n"


def _peak_mib(fn) -> tuple[float, BaseException | None]:
    tracemalloc.start()
    try:
        fn()
        raised = None
    except Exception as e:  # noqa: BLE001 - the refusal is what the caller inspects
        raised = e
    finally:
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
    return peak / 2**20, raised


def test_a_yaml_alias_bomb_through_the_api_is_refused_at_the_limit(ws):
    import gradio as gr

    from webui.api import build_config

    ws.mkdir(parents=True)
    peak, e = _peak_mib(lambda: build_config(bomb(9) + NOT_YAML_AFTER, "", ws))
    assert isinstance(e, gr.Error), e
    assert f"config: {LIMIT_TEXT}" in str(e)
    assert "not valid YAML" not in str(e)  # parsing stopped at the limit
    assert peak < 64, f"{peak:.0f} MiB to refuse"
    # The same bomb handed over as a mapping (JSON from an API client).
    shared: list = ["lol"] * 9
    for _ in range(9):
        shared = [shared] * 9
    peak, e = _peak_mib(lambda: build_config({"lora_target_modules": shared}, "", ws))
    assert isinstance(e, gr.Error) and "config: too many values (got more than" in str(e)
    assert peak < 64
    # Few aliases and values: still YAML as before.
    cfg = build_config("lora_rank: &r 8\nlora_alpha: *r\n", "cpu_demo", ws)
    assert (cfg.lora_rank, cfg.lora_alpha) == (8, 8)


def test_too_many_aliases_too_deep_too_large_and_self_reference_are_refused():
    many = "a: &a 1\nb: [" + ", ".join(["*a"] * (bounded.MAX_ALIASES + 1)) + "]\n"
    limits = {
        many: f"config: too many YAML aliases (got more than {bounded.MAX_ALIASES}; allowed "
              f"up to {bounded.MAX_ALIASES})",
        "a: " + "[" * 1000 + "]" * 1000: f"config: nested too deep (got more than "
                                         f"{bounded.MAX_DEPTH} levels",
        "a: &a [1, *a]\n": "config: a YAML alias inside the value it names",
        "a: " + "x" * (bounded.MAX_BYTES + 1): f"config: too large (got more than "
                                              f"{bounded.MAX_BYTES} bytes",
    }
    for text, message in limits.items():
        with pytest.raises(bounded.ParseError) as e:
            bounded.load_yaml(text, "config")
        assert str(e.value).startswith(message), str(e.value)
    with pytest.raises(bounded.ParseError, match=r"^DeepSpeed file: nested too deep"):
        bounded.load_json("[" * 100_000 + "]" * 100_000, "DeepSpeed file")


def test_a_yaml_alias_bomb_in_a_preset_file_is_refused(ws):
    presets = ws / "presets"
    presets.mkdir(parents=True)
    (presets / "laughs.yaml").write_text(bomb(9) + NOT_YAML_AFTER)
    peak, e = _peak_mib(lambda: read_preset("laughs", ws))
    assert isinstance(e, ConfigError), e
    assert e.problems == [f"preset: {LIMIT_TEXT}"]
    assert e.source == str(presets / "laughs.yaml")
    assert peak < 64
    # ... and through the API, by name.
    from webui.api import build_config

    with pytest.raises(Exception, match=re.escape(f"preset: {LIMIT_TEXT}")):
        build_config("", "laughs", ws)
    # A run config file for a stage's --config as well.
    (ws / "run.yaml").write_text(bomb(9, key="dataset_base_path"))
    with pytest.raises(ConfigError, match=re.escape(f"config: {LIMIT_TEXT}")):
        load_config(ws / "run.yaml")


def test_a_yaml_alias_bomb_in_run_yaml_is_refused_on_resume(ws):
    from webui import security

    r = Runner(ws, auto_start=False)
    rd = ws / "runs" / "bobs"
    rid = r.submit_stages([fake(rd, "--steps", 1)], rd, "", owner="bob")
    run = r.wait(rid, timeout=90)
    (rd / "run.yaml").write_text(bomb(9, key="dataset_base_path"))
    problems = None

    def check():
        nonlocal problems
        problems = security.check_resume_paths(r, run, "bob", ws, admins=[])

    peak, e = _peak_mib(check)
    assert e is None, e
    assert problems == [f"run.yaml: {LIMIT_TEXT}"]
    assert peak < 64


def test_the_importer_refuses_alias_bombs_in_the_files_it_reads(tmp_path):
    from backend.planning.importer import import_commands

    command = ("accelerate launch --config_file acc.yaml train.py --task sft:train "
               "--config run.yaml")
    with pytest.raises(ConfigError, match=re.escape(f"--config_file: {LIMIT_TEXT}")):
        import_commands(command, tmp_path, files={"acc.yaml": bomb(9)})
    with pytest.raises(ConfigError, match=re.escape(f"config: {LIMIT_TEXT}")):
        import_commands("python train.py --task sft:train --config run.yaml", tmp_path,
                        files={"run.yaml": bomb(9)})
    deep = "[" * 100_000 + "]" * 100_000
    result = import_commands("accelerate launch --deepspeed_config_file ds.json train.py "
                             "--task sft:train", tmp_path, files={"ds.json": deep})
    said = " ".join(result.not_understood)
    assert "ds.json: nested too deep (got more than" in said, said


def test_error_texts_of_deep_huge_and_shared_values_stay_short():
    deep: list = []
    for _ in range(100_000):  # repr() of this raises RecursionError
        deep = [deep]
    shared: list = ["lol"] * 9
    for _ in range(12):  # 9**13 values by reference: repr() would never end
        shared = [shared] * 9
    huge = list(range(1_000_000))
    data = {"lora_rank": deep, "lora_alpha": shared, "learning_rate": huge,
            "no_such_option": shared, "optimizer": "x" * 1_000_000}
    peak, e = _peak_mib(lambda: validate(data))
    assert isinstance(e, ConfigError), e
    by_field = {p.split(":", 1)[0]: p for p in e.problems}
    assert set(data) <= set(by_field), e.problems
    for field in data:
        got = by_field[field].split("(got ", 1)[1].split("; allowed", 1)[0]
        assert len(got) <= bounded.SHORT_CHARS, (field, got)
        assert got.endswith("..."), (field, got)
    assert peak < 64
    # Short values read as repr() does.
    for value in (["a", 1, None], {"k": (1,)}, "it's", 3.5, set(), (1, 2)):
        assert bounded.short(value) == repr(value)
    assert bounded.short(10 ** 5000) == "<an integer of 16610 bits>"
