"""Runs sent to SLURM by the app's runner (``backend.jobs.slurm_runs``): the run schema's
SLURM fields, the history's job id, the refusals, the time limit against measured step
times. The runs on the real one-node SLURM (the CPU demo in the browser, two processes under
srun, a killed step, a requeued job, the storage probe) are in ``tests/test_slurm.py``, beside the other cluster tests: one test worker starts the
one cluster (its ports are fixed)."""
from __future__ import annotations

import json
import sqlite3
import sys

import pytest

import launch
from backend.config.errors import ConfigError
from backend.core.rundir import RunDir
from backend.jobs.history import connect, init_db
from backend.jobs.runner import Runner, RunnerError
from backend.jobs.slurm import SlurmOptions, sbatch_script, slurm_seconds
from backend.jobs.slurm_runs import SlurmRunner, planned_steps, time_limit_check
from backend.planning.plan import plan_run
from tests.harness.slurm import demo
from webui.app import create_app
from webui.tabs import training

PY = sys.executable
SLURM_RUN = {"executor": "slurm", "slurm_partition": "gpu", "slurm_account": "lab",
             "slurm_qos": "normal", "slurm_time_limit": "1-00:00:00",
             "slurm_constraint": "a100&ib", "slurm_gpus_per_node": 8,
             "slurm_cpus_per_task": 32, "slurm_mem_per_task": "400G",
             "slurm_setup_lines": ["module load cuda/12.4"],
             "slurm_nccl_env": ["NCCL_SOCKET_IFNAME=ib0"]}


# ----------------------------------------------------------------------- the schema
def test_the_run_fields_become_the_jobs_options_and_script(tmp_path):
    cfg = demo(tmp_path, **SLURM_RUN)
    server = SlurmOptions(partition="debug", setup_lines=["source /shared/venv/bin/activate"],
                          nccl_env={"NCCL_DEBUG": "WARN"})
    opts = SlurmOptions.from_config(cfg, server)
    assert (opts.partition, opts.account, opts.qos, opts.time_limit, opts.constraint,
            opts.gpus_per_node, opts.cpus_per_task, opts.mem_per_task) == \
        ("gpu", "lab", "normal", "1-00:00:00", "a100&ib", 8, 32, "400G")
    assert opts.setup_lines == ["source /shared/venv/bin/activate", "module load cuda/12.4"]
    assert opts.nccl_env == {"NCCL_DEBUG": "WARN", "NCCL_SOCKET_IFNAME": "ib0"}
    # Empty fields take the server's.
    assert SlurmOptions.from_config(demo(tmp_path, executor="slurm"), server).partition == \
        "debug"
    stages = plan_run(cfg, tmp_path / "run", cuda=True)
    text = sbatch_script(stages, tmp_path / "run", opts, "r1")
    for line in ("#SBATCH --partition=gpu", "#SBATCH --account=lab", "#SBATCH --qos=normal",
                 "#SBATCH --time=1-00:00:00", "#SBATCH --constraint=a100&ib",
                 "#SBATCH --gpus-per-node=8", "#SBATCH --cpus-per-task=32",
                 "#SBATCH --mem=400G", "module load cuda/12.4",
                 "export NCCL_SOCKET_IFNAME=ib0"):
        assert line in text.splitlines(), line
    # commands.sh names the job script; the script is one of the run's config files.
    files = RunDir(tmp_path / "run")
    assert f"sbatch {files.sbatch}" in files.commands.read_text()
    files.sbatch.write_text(text)
    assert files.sbatch in files.config_files()


def test_slurm_fields_are_checked_and_refused_on_a_local_run(tmp_path):
    with pytest.raises(ConfigError) as e:
        demo(tmp_path, slurm_partition="gpu", slurm_gpus_per_node=2)
    assert e.value.fields() == ["slurm_partition", "slurm_gpus_per_node"]
    assert "with executor local" in e.value.problems[0]
    with pytest.raises(ConfigError) as e:
        demo(tmp_path, executor="slurm", slurm_time_limit="2 days", slurm_mem_per_task="lots",
             slurm_nccl_env=["NCCL_DEBUG"], slurm_partition="gpu; rm -rf /")
    assert sorted(e.value.fields()) == ["slurm_mem_per_task", "slurm_nccl_env",
                                        "slurm_partition", "slurm_time_limit"]
    # Several machines under SLURM need no main address: the launcher gives each node one.
    cfg = demo(tmp_path, executor="slurm", num_machines=2, num_processes=2)
    assert cfg.main_process_ip is None


def test_the_local_runner_refuses_a_run_meant_for_slurm(tmp_path):
    with pytest.raises(RunnerError) as e:
        Runner(tmp_path / "ws").submit(demo(tmp_path, executor="slurm"))
    assert e.value.args[0].code == "slurm.local_runner"
    assert "--executor slurm" in str(e.value.args[0])


def test_without_sbatch_a_slurm_run_is_refused_and_nothing_is_kept(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    ws = tmp_path / "ws"
    runner = SlurmRunner(ws, executor="slurm", server=SlurmOptions(partition="debug"))
    restricted = demo(tmp_path, executor="slurm", slurm_setup_lines=["curl x | sh"],
                      slurm_nccl_env=["LD_PRELOAD=/tmp/x.so"]).model_copy(
        update={"read_roots": [str(tmp_path)]})
    with pytest.raises(RunnerError) as e:
        runner.submit(restricted, owner="bob")
    assert [p.code for p in e.value.problems] == ["slurm.no_sbatch", "slurm.setup_admins_only",
                                                  "slurm.nccl_only"]
    assert str(e.value.problems[0]).startswith("sbatch is not on the PATH")
    with pytest.raises(RunnerError) as e:  # a local run on a SLURM server goes there too
        runner.submit(demo(tmp_path), owner="alice")
    assert [p.code for p in e.value.problems] == ["slurm.no_sbatch"]
    with pytest.raises(RunnerError) as e:
        runner.submit(demo(tmp_path, executor="slurm"), secret_env={"HF_TOKEN": "hf_x"})
    assert [p.code for p in e.value.problems] == ["slurm.no_secret_env"]
    assert runner.list_runs() == [] and not list((ws / "runs").glob("*"))
    # launch.py --executor slurm says so and starts nothing.
    args = launch.build_parser().parse_args(["--executor", "slurm", "--slurm-partition", "gpu"])
    assert (args.executor, args.slurm_partition) == ("slurm", "gpu")
    assert launch.slurm_runner(args, ws) is None


def test_the_form_follows_the_servers_executor(tmp_path, monkeypatch):
    """On a ``--executor slurm`` server the page's form starts at executor slurm with the
    server's partition (its ``slurm_*`` fields shown) and the Training tab shows the job's
    ``slurm.sbatch`` beside the accelerate and DeepSpeed files; on a local server choosing
    slurm is refused under ``executor`` before anything is submitted."""
    monkeypatch.setenv("GRADIO_ANALYTICS_ENABLED", "False")
    ws = tmp_path / "ws"
    runner = SlurmRunner(ws, executor="slurm", server=SlurmOptions(partition="debug"))
    app = create_app(runner, ws)
    ctx = app.zerolora_ctx
    form, c = ctx.form, ctx.c
    assert (form.defaults["executor"], form.defaults["slurm_partition"]) == ("slurm", "debug")
    assert form.components["executor"].value == "slurm"
    assert form.components["slurm_partition"].visible
    assert form.components["slurm_partition"].value == "debug"
    assert c["gen_tab_sbatch"].visible
    # The shared-storage probe's line beside the job script (not started: no run yet).
    assert "shared storage: not checked yet" in training.probe_markdown(runner)
    assert "共享存储" in training.probe_markdown(runner)
    cfg = demo(tmp_path)  # what a preset fills in: the server's executor is added on send
    files = training.preview_files(cfg, ws, runner)
    script = files[training.GEN_SBATCH]
    assert "#SBATCH --partition=debug" in script.splitlines()
    assert f"--run-dir {training.RUN_PLACEHOLDER} --stage train" in script
    assert "zerolora-<run_id>" in script and training.GEN_ACCELERATE in files
    assert f"sbatch {training.RUN_PLACEHOLDER}/{training.GEN_SBATCH}" in \
        files[training.GEN_COMMANDS]
    # The form's own check: a SLURM server without sbatch on its PATH says so.
    slurm_cfg = demo(tmp_path, executor="slurm")
    assert form.server_check(slurm_cfg) == []
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    assert [p.code for p in form.server_check(slurm_cfg)] == ["slurm.no_sbatch"]
    monkeypatch.undo()

    local = Runner(tmp_path / "ws2")
    app = create_app(local, tmp_path / "ws2")
    form, c = app.zerolora_ctx.form, app.zerolora_ctx.c
    assert form.defaults["executor"] == "local" and not form.components["slurm_partition"].visible
    assert not c["gen_tab_sbatch"].visible and training.probe_markdown(local) == ""
    values = {n: comp.value for n, comp in form.components.items()}
    assert form.check(form.event_inputs(values))[2] == []
    values.update(executor="slurm", slurm_partition="gpu")
    cfg, _, problems = form.check(form.event_inputs(values))
    assert cfg is None and [p.code for p in problems] == ["slurm.local_runner"]
    assert problems[0].startswith("executor: this server runs the stages itself")
    assert "--executor slurm" in problems[0] and "`executor`" in problems[0].text("zh")
    assert training.GEN_SBATCH not in training.preview_files(demo(tmp_path), tmp_path, local)


def measuring_run(runner: SlurmRunner, tmp_path, cfg, s_per_step: float) -> str:
    """An earlier SLURM run in the history (recorded as the runner records one, job 4242)
    whose progress file shows stage 1 taking 30 s, training starting 20 s before its first
    step and 10 steps ``s_per_step`` apart."""
    run_dir = tmp_path / "measured"
    stages = plan_run(cfg, run_dir, cuda=False)
    run_id = runner.submit_stages(stages, run_dir, RunDir(run_dir).run_yaml.read_text(),
                                  owner="alice", slurm_job_id="4242")
    t = 1_000_000.0
    events = [("data_process", "start", t, {}), ("data_process", "end", t + 30,
                                                 {"status": "succeeded"}),
              ("train", "start", t + 31, {})]
    events += [("train", "step", t + 51 + i * s_per_step, {"step": i + 1}) for i in range(10)]
    RunDir(run_dir).progress.write_text("".join(
        json.dumps({"time": at, "stage": stage, "event": kind, **more}) + "\n"
        for stage, kind, at, more in events))
    return run_id


def test_a_time_limit_shorter_than_the_measured_steps_is_refused(tmp_path, monkeypatch):
    """``slurm_time_limit`` against the seconds per step an earlier SLURM run of the same
    family, resolution and DeepSpeed setting measured (its progress events): refused before
    submission when shorter, naming the field and the figures; accepted with a note when
    nothing like it was measured."""
    ws = tmp_path / "ws"
    runner = SlurmRunner(ws)
    measured = measuring_run(runner, tmp_path, demo(tmp_path, executor="slurm"), 4.0)
    # 100 steps x 4 s + 30 s stage 1 + 20 s start-up = 450 s (7.5 min).
    short = demo(tmp_path, executor="slurm", max_train_steps=100, slurm_time_limit="7",
                 stages=["data_process", "train"])
    refusal, note = time_limit_check(ws, short)
    assert note is None and refusal.code == "slurm.time_too_short"
    assert refusal.startswith("slurm_time_limit: shorter than the run needs (got 7, 420 s;")
    assert "about 00:07:30 or more: 100 steps x 4.0 s a step" in refusal
    assert f"as run {measured} measured over 9 steps" in refusal and "plus 50 s" in refusal
    assert "`slurm_time_limit`" in refusal.text("zh")
    # Refused by the runner before anything is submitted, with the other problems.
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    with pytest.raises(RunnerError) as e:
        runner.submit(short, owner="alice")
    assert [p.code for p in e.value.problems] == ["slurm.no_sbatch", "slurm.time_too_short"]
    monkeypatch.undo()

    refusal, note = time_limit_check(ws, short.model_copy(update={"slurm_time_limit": "8"}))
    assert refusal is None and note.code == "slurm.time_checked" and "about 00:07:30" in note
    # Without stage 1 its 30 s are not counted: 7 minutes are enough.
    trained_only = short.model_copy(update={"stages": ["train"]})
    assert time_limit_check(ws, trained_only)[0] is None
    # Another resolution, another DeepSpeed setting: not measured, accepted with a note.
    for other in (demo(tmp_path, executor="slurm", max_train_steps=100, slurm_time_limit="7",
                       height=128, width=128),
                  demo(tmp_path, executor="slurm", max_train_steps=100, slurm_time_limit="7",
                       zero_stage=2)):
        refusal, note = time_limit_check(ws, other)
        assert refusal is None and note.code == "slurm.time_unchecked"
        assert note.startswith("slurm_time_limit 7 could not be checked")
    # The steps follow from the dataset when max_train_steps is empty (8 images x 2).
    assert planned_steps(demo(tmp_path, executor="slurm", dataset_repeat=2, num_epochs=1)) == 16
    assert time_limit_check(ws, demo(tmp_path, executor="slurm")) == (None, None)  # no limit
    assert [slurm_seconds(t) for t in ("90", "05:30", "1:00:00", "2-00", "1-01:02:03",
                                       "UNLIMITED", "")] == \
        [5400, 330, 3600, 172800, 90123, None, None]


def test_an_older_history_gains_the_job_id_column(tmp_path):
    ws = tmp_path / "ws"
    ws.mkdir()
    conn = sqlite3.connect(ws / "zerolora.sqlite")
    conn.execute("CREATE TABLE runs (id TEXT PRIMARY KEY, seq INTEGER NOT NULL, name TEXT, "
                 "owner TEXT, status TEXT NOT NULL, gpu_ids TEXT NOT NULL, created_at REAL NOT "
                 "NULL, run_dir TEXT NOT NULL, stop_grace_s REAL NOT NULL)")
    conn.execute("INSERT INTO runs VALUES('old', 1, 'n', 'alice', 'succeeded', 'all', 1.0, "
                 "'/x', 5.0)")
    conn.commit()
    conn.close()
    init_db(ws)
    row = connect(ws).execute("SELECT id, slurm_job_id FROM runs").fetchone()
    assert (row["id"], row["slurm_job_id"]) == ("old", None)


# ----------------------------------------------------------------------- the real cluster
