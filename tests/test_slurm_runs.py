"""Runs sent to SLURM by the app's runner (``backend.jobs.slurm_runs``): the run schema's
SLURM fields, the history's job id, the refusals; and, against the real one-node SLURM of
``tests/harness/slurm.py``, the CPU demo submitted through the services the page calls
(``webui.services.start_run`` / ``resume_run``, ``runner.stop``): followed from squeue/sacct,
its logs tailed from the run folder, stopped with its state saved and resumed to its last
step, its samples rendered."""
from __future__ import annotations

import re
import sqlite3
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

import launch
from backend.config.errors import ConfigError
from backend.config.presets import load_preset
from backend.config.validation import validate
from backend.core.progress import read_events
from backend.core.rundir import RunDir
from backend.jobs.history import connect, init_db
from backend.jobs.runner import Runner, RunnerError
from backend.jobs.slurm import SlurmOptions, sbatch_script
from backend.jobs.slurm_runs import SlurmRunner
from backend.planning.plan import plan_run
from tests.harness.slurm import slurm_cluster  # noqa: F401  (the session's cluster fixture)
from webui import jobs, services
from webui.app import create_app
from webui.tabs import training

PY = sys.executable
SLURM_RUN = {"executor": "slurm", "slurm_partition": "gpu", "slurm_account": "lab",
             "slurm_qos": "normal", "slurm_time_limit": "1-00:00:00",
             "slurm_constraint": "a100&ib", "slurm_gpus_per_node": 8,
             "slurm_cpus_per_task": 32, "slurm_mem_per_task": "400G",
             "slurm_setup_lines": ["module load cuda/12.4"],
             "slurm_nccl_env": ["NCCL_SOCKET_IFNAME=ib0"]}


def demo(tmp_path, **changes):
    """The CPU demo preset with ``changes``, its dataset where the bundle has it."""
    return validate({**load_preset("cpu_demo").to_dict(), **changes})


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
    assert not c["gen_tab_sbatch"].visible
    values = {n: comp.value for n, comp in form.components.items()}
    assert form.check(form.event_inputs(values))[2] == []
    values.update(executor="slurm", slurm_partition="gpu")
    cfg, _, problems = form.check(form.event_inputs(values))
    assert cfg is None and [p.code for p in problems] == ["slurm.local_runner"]
    assert problems[0].startswith("executor: this server runs the stages itself")
    assert "--executor slurm" in problems[0] and "`executor`" in problems[0].text("zh")
    assert training.GEN_SBATCH not in training.preview_files(demo(tmp_path), tmp_path, local)


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
def train_steps(run_dir: Path) -> list[list[int]]:
    """The train stage's step events, one list per start of the stage."""
    events, _ = read_events(RunDir(run_dir).progress)
    attempts: list[list[int]] = []
    for ev in events:
        if ev.get("stage") != "train":
            continue
        if ev["event"] == "start":
            attempts.append([])
        elif ev["event"] == "step" and attempts:
            attempts[-1].append(ev["step"])
    return attempts


def wait_for(predicate, timeout: float, what: str, poll: float = 0.5):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = predicate()
        if found:
            return found
        time.sleep(poll)
    raise AssertionError(f"not within {timeout:g} s: {what}")


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_the_cpu_demo_through_slurm_from_the_page_services(slurm_cluster, tmp_path):
    ws = tmp_path / "ws"
    runner = SlurmRunner(ws, executor="slurm", server=SlurmOptions(partition="debug"),
                         stop_grace_s=90)
    where = SimpleNamespace(runner=runner, workspace=ws, models_dir=None)
    # The demo, shorter: 24 steps, a checkpoint every 8, small renders. Left at
    # executor local, as the form sends it: the server sends it to SLURM.
    cfg = demo(tmp_path, dataset_repeat=3, num_epochs=1, save_steps=8, sample_steps=4)
    run_id = services.start_run(where, cfg, None, name="demo on slurm")
    run = runner.get_run(run_id)
    job = run["slurm_job_id"]
    assert job and job.isdigit(), run
    assert RunDir(Path(run["run_dir"])).sbatch.is_file()
    assert "executor: slurm" in run["config_yaml"] and "slurm_partition: debug" in \
        run["config_yaml"]
    ids = slurm_cluster.run(["squeue", "-h", "-o", "%i"]).stdout.split() + \
        slurm_cluster.run(["sacct", "--completion", "-n", "-X", "-o", "JobID"],
                          check=False).stdout.split()
    assert job in ids or runner.get_run(run_id)["status"] != "queued"

    # Training runs on the node: its log tails from the run folder, progress counts steps.
    wait_for(lambda: (runner.progress(run_id).get("stage") == "train"
                      and (runner.progress(run_id).get("step") or 0) >= 3), 300,
             "training to pass step 3")
    live = runner.get_run(run_id)
    assert live["status"] == "running" and live["current_stage"] == "train"
    assert [s["status"] for s in live["stages"]] == ["succeeded", "running", "queued"]
    assert "running as SLURM job" in str(live["note"])
    text, offset = runner.tail_log(run_id, "train", 0)
    assert f"SLURM job {job} step" in text and offset > 0

    runner.stop(run_id, wait=True)  # what the Run tab's Stop calls
    stopped = runner.get_run(run_id)
    assert stopped["status"] == "stopped", (stopped, runner.last_lines(run_id, "train", 30))
    assert [s["status"] for s in stopped["stages"]] == ["succeeded", "stopped", "skipped"]
    assert stopped["stages"][1]["exit_code"] == 143 and stopped["resumable"]
    files = RunDir(Path(stopped["run_dir"]))
    assert files.has_state()
    (first,) = train_steps(files.run_dir)
    saved = first[-1]
    assert 3 <= saved < 24

    again = services.resume_run(where, stopped, None)
    assert again == run_id
    resumed = runner.get_run(run_id)
    assert resumed["slurm_job_id"] not in (None, job) and resumed["attempt"] == 2
    done = runner.wait(run_id, timeout=420)
    assert done["status"] == "succeeded", (done, runner.last_lines(run_id, "train", 30),
                                           runner.last_lines(run_id, "sample", 30))
    assert [s["status"] for s in done["stages"]] == ["succeeded"] * 3
    assert [(a["attempt"], a["status"]) for a in done["attempts"]] == [(1, "stopped")]
    first, later = train_steps(files.run_dir)
    assert later[0] == saved + 1 and later[-1] == 24, (first, later)
    assert "already succeeded (an earlier job): skipped" in \
        files.log("slurm").read_text() + files.log("data_process").read_text()
    images, titles, cols = jobs.grid(done)
    assert images and cols >= 2, titles
    assert all(Path(p).is_file() for p, _ in images)


def task_lines(log_text: str) -> list[tuple[int, int, int, int]]:
    """(SLURM_PROCID, SLURM_LOCALID, SLURM_NODEID, machine_rank) of each task's line."""
    return sorted((int(m[1]), int(m[2]), int(m[3]), int(m[4])) for m in re.finditer(
        r"task SLURM_PROCID=(\d+) SLURM_LOCALID=(\d+) SLURM_NODEID=(\d+) on \S+: "
        r"machine_rank (\d+) of 2", log_text))


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_a_two_process_zero3_training_runs_through_srun_on_the_one_node(slurm_cluster,
                                                                        tmp_path):
    """Two machines of one process each, packed onto the one node (``machines_per_node``):
    one ``srun`` step of two tasks, each an ``accelerate launch`` whose machine rank is its
    SLURM_PROCID, join one ZeRO-3 training (gloo, CPU). Most of its time is two processes
    importing DeepSpeed (and building its CPU ops when ~/.cache/torch_extensions lacks them):
    the 4 steps take about 10 s."""
    ws = tmp_path / "ws"
    runner = SlurmRunner(ws, server=SlurmOptions(partition="debug", machines_per_node=2))
    cfg = demo(tmp_path, executor="slurm", num_machines=2, num_processes=2, zero_stage=3,
               dataset_repeat=1, num_epochs=1, stages=["data_process", "train"])
    run_id = runner.submit(cfg, owner="alice")
    done = runner.wait(run_id, timeout=540)
    files = RunDir(Path(done["run_dir"]))
    train_log = files.log("train").read_text()
    assert done["status"] == "succeeded", (done, train_log[-3000:])
    script = files.sbatch.read_text().splitlines()
    assert "#SBATCH --nodes=1" in script and "#SBATCH --ntasks-per-node=2" in script
    assert any(ln.startswith("srun --nodes=1 --ntasks=2 --ntasks-per-node=2 ") and
               "--job-name=train" in ln for ln in script)
    # Two tasks on the one node, told apart by SLURM: each is its own machine rank.
    assert task_lines(train_log) == [(0, 0, 0, 0), (1, 1, 0, 1)], train_log[-3000:]
    assert "2 process(es) on cpu, ZeRO-3" in train_log
    (first,) = train_steps(files.run_dir)
    assert first == [1, 2, 3, 4]  # 8 images / 2 processes
    events, _ = read_events(files.progress)
    start = next(e for e in events if e.get("stage") == "train" and e["event"] == "start")
    assert start["num_processes"] == 2
    assert (files.output / "epoch-0.safetensors").is_file()


def train_step_of(cluster, job: str) -> str:
    """The job's running ``train`` step (``<job>.<step>``), from squeue."""
    out = cluster.run(["squeue", "-h", "-s", "-j", job, "-o", "%i %j"]).stdout
    return next(line.split()[0] for line in out.splitlines() if line.split()[1:] == ["train"])


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_a_stage_killed_with_scancel_kill_is_diagnosed_and_resumes_to_the_end(
        slurm_cluster, tmp_path):
    ws = tmp_path / "ws"
    runner = SlurmRunner(ws, server=SlurmOptions(partition="debug"))
    # 16 steps, a checkpoint (LoRA + resume state) every 4; no samples.
    cfg = demo(tmp_path, executor="slurm", dataset_repeat=2, num_epochs=1, save_steps=4,
               stages=["data_process", "train"])
    run_id = runner.submit(cfg, owner="alice")
    files = RunDir(Path(runner.get_run(run_id)["run_dir"]))
    wait_for(lambda: files.has_state() and (runner.progress(run_id).get("step") or 0) >= 6,
             400, "training past its first checkpoint")
    job = runner.get_run(run_id)["slurm_job_id"]
    slurm_cluster.run(["scancel", "--signal=KILL", train_step_of(slurm_cluster, job)])

    failed = runner.wait(run_id, timeout=120)
    assert failed["status"] == "failed", failed
    assert [s["status"] for s in failed["stages"]] == ["succeeded", "failed"]
    assert failed["resumable"]
    facts = runner.failure_summary(run_id)
    assert (facts["job_id"], facts["scheduler_state"], facts["exit_code"]) == \
        (job, "FAILED", 137)
    kinds = [d["kind"] for d in facts["diagnoses"]]
    assert kinds[0] == "slurm_killed" and "killed" not in kinds, kinds
    first = facts["diagnoses"][0]
    assert "SLURM killed the job's stage with SIGKILL (the job ended FAILED)" in \
        facts["headline"]
    assert any("Resume" in f for f in first["fixes"]) and any(
        "scancel --signal=TERM" in f for f in first["fixes"])
    assert first["settings"] == ["save_steps", "slurm_mem_per_task"]
    assert "`SIGKILL`" in facts["headline"].text("zh")
    assert str(failed["failure_reason"]) == str(facts["headline"])
    (before,) = train_steps(files.run_dir)
    events, _ = read_events(files.progress)
    saved = max(e["step"] for e in events if e.get("stage") == "train"
                and e["event"] == "checkpoint")
    assert saved % 4 == 0 and saved < before[-1] < 16

    runner.resume(run_id)
    assert runner.get_run(run_id)["slurm_job_id"] != job
    done = runner.wait(run_id, timeout=420)
    assert done["status"] == "succeeded", (done, runner.last_lines(run_id, "train", 30))
    assert [s["status"] for s in done["stages"]] == ["succeeded"] * 2
    _, later = train_steps(files.run_dir)
    assert later[0] == saved + 1 and later[-1] == 16, (before, later)
    assert "already succeeded (an earlier job): skipped" in \
        files.log("slurm").read_text() + files.log("data_process").read_text()
