"""Upgrade path: a workspace written before the family contract and the run-directory owner
(``tests/fixtures/legacy_workspace``: the CPU demo's stage 1 and 7 training steps, stopped
on request) still lists, shows and resumes.

The fixture was written by the app as it was before the move, in another checkout, so its
history and text files name that checkout's paths; the test puts them where this
checkout's files are (as an in-place upgrade would find them). Binary files are left as
written.
"""
from __future__ import annotations

import json
import shutil
import sqlite3
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
FIXTURE = REPO / "tests" / "fixtures" / "legacy_workspace"
OLD_WORKSPACE, OLD_REPO = "/tmp/legacy/ws", "/work/wt-orig"
RUN_ID = "20261201-123029-596b4a"

pytestmark = pytest.mark.slow


def _relocate(text: str, workspace: Path) -> str:
    return (text.replace(f"{OLD_REPO}/.venv/bin/python", sys.executable)
            .replace(OLD_REPO, str(REPO)).replace(OLD_WORKSPACE, str(workspace)))


@pytest.fixture
def legacy_workspace(tmp_path) -> Path:
    ws = tmp_path / "ws"
    shutil.copytree(FIXTURE, ws)
    for path in ws.rglob("*"):
        if path.is_file() and path.suffix in (".yaml", ".json", ".jsonl", ".sh", ".log"):
            path.write_text(_relocate(path.read_text(encoding="utf-8"), ws), encoding="utf-8")
    conn = sqlite3.connect(ws / "zerolora.sqlite")
    with conn:
        for table, columns in (("runs", ("run_dir", "config_yaml")),
                               ("stages", ("argv", "log_path"))):
            rows = conn.execute(f"SELECT rowid, {', '.join(columns)} FROM {table}").fetchall()
            for rowid, *values in rows:
                conn.execute(f"UPDATE {table} SET {', '.join(c + '=?' for c in columns)} "
                             f"WHERE rowid=?", [_relocate(v or "", ws) if v else v
                                                for v in values] + [rowid])
    conn.close()
    return ws


def test_a_run_written_before_the_move_shows_and_resumes(legacy_workspace):
    from backend.config.files import load_config
    from backend.jobs.runner import Runner

    runner = Runner(legacy_workspace)
    runs = runner.list_runs()
    assert [r["id"] for r in runs] == [RUN_ID]
    run = runner.get_run(RUN_ID)
    assert run["status"] == "stopped" and run["name"] == "legacy-run"
    progress = runner.progress(RUN_ID)
    assert progress["step"] == 7, progress
    run_dir = Path(run["run_dir"])
    # Its run.yaml still loads with today's schema (the family, the old field set).
    cfg = load_config(run_dir / "run.yaml")
    assert cfg.model_family == "qwen_image" and cfg.lora_rank == 8

    runner.resume(RUN_ID)
    done = runner.wait(RUN_ID, timeout=600)
    log = (run_dir / "logs" / "train.log").read_text(encoding="utf-8")
    assert done["status"] == "succeeded", log[-3000:]
    assert "resumed from" in log and "at step 7" in log
    state = json.loads((run_dir / "output" / "state" / "trainer_state.json").read_text())
    assert state["global_step"] == state["total_steps"] > 7
    final = run_dir / "output" / f"step-{state['global_step']}.safetensors"
    assert final.is_file()
    # The resumed run continues the same progress record: steps after 7, none repeated.
    steps = [json.loads(line)["step"] for line in
             (run_dir / "progress.jsonl").read_text().splitlines()
             if json.loads(line).get("event") == "step" and json.loads(line)["stage"] == "train"]
    assert steps[:7] == list(range(1, 8)) and steps[7] == 8
