"""Runs sent to SLURM (``backend.jobs.slurm``), against a real single-node SLURM cluster
started by the tests (``tests/harness/slurm.py``: munged, slurmctld and slurmd as root, plus
two declared-but-absent 8-GPU nodes). Nothing of SLURM is mocked: jobs are submitted with
``sbatch``, followed with ``squeue``/``sacct``/``scontrol`` and stopped with ``scancel``.

The tests without the ``slurm_cluster`` fixture check the script, the launcher's argv and
the options without a cluster."""
from __future__ import annotations

import json
import os
import re
import shutil
import sys
import time
from pathlib import Path

import pytest

from backend.config.presets import load_preset
from backend.config.validation import validate
from backend.core.progress import read_events
from backend.core.rundir import ProbeFiles, RunDir
from backend.jobs.slurm import (SlurmError, SlurmExecutor, SlurmOptions, check_cluster,
                                gres_gpus, sbatch_script, sbatch_test_only,
                                scheduler_diagnosis, stage_nodes, write_sbatch)
from backend.jobs import slurm_launch
from backend.jobs.slurm_launch import with_rank_flags
from backend.planning.plan import StagePlan, plan_run
from backend.jobs.slurm_runs import SlurmRunner, StorageProbe
from tests.harness.slurm import demo, slurm_cluster  # noqa: F401  (the session's cluster fixture)
from webui import jobs

PY = sys.executable
REPO = Path(__file__).resolve().parents[1]


def wait_for(predicate, timeout: float, what: str, poll: float = 0.2):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = predicate()
        if found:
            return found
        time.sleep(poll)
    raise AssertionError(f"not within {timeout:g} s: {what}")


def follow(ex: SlurmExecutor, job, timeout: float = 120.0) -> list:
    """Every distinct (status, stage) the job goes through until it ends, with the last
    status object."""
    seen: list = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        st = ex.status(job)
        if not seen or (seen[-1].status, seen[-1].stage) != (st.status, st.stage):
            seen.append(st)
        if st.ended:
            return seen
        time.sleep(0.1)
    raise AssertionError(f"job {job.job_id} still {seen[-1].status} after {timeout:g} s")


# ----------------------------------------------------------------------- a job chain
@pytest.mark.slow
def test_two_stages_run_as_one_job_queued_then_running_then_succeeded(slurm_cluster,
                                                                       tmp_path):
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    stages = [StagePlan("first", [PY, "-c", "import os, time; time.sleep(1); "
                                            "print('first says', os.environ['GREETING'])"],
                        {"GREETING": "hello there"}),
              StagePlan("second", [PY, "-c", "print('second ran')"])]
    # The only node is busy: our job waits, and squeue says why.
    blocker = slurm_cluster.run(["sbatch", "--parsable", "--exclusive", "-N", "1",
                                 "-o", "/dev/null", "--wrap", "sleep 6"]).stdout.strip()
    wait_for(lambda: slurm_cluster.run(["squeue", "-h", "-j", blocker, "-o", "%T"]
                                       ).stdout.strip() == "RUNNING", 60, "the blocker runs")
    ex = SlurmExecutor(SlurmOptions(time_limit="10"))
    job = ex.submit(stages, run_dir, run_id="chain")
    assert job.job_id.isdigit() and job.job_id != blocker
    seen = follow(ex, job)

    assert seen[0].status == "queued" and seen[0].scheduler_state == "PENDING"
    assert seen[0].reason in ("Resources", "Priority"), seen[0]
    assert seen[0].text.code == "slurm.queued"
    running = [s for s in seen if s.status == "running"]
    # (stage None: the job started, its set-up runs before the first stage)
    assert [s.stage for s in running if s.stage] == ["first", "second"], seen
    assert all(s.nodes == [slurm_cluster.host] for s in running)
    last = seen[-1]
    assert (last.status, last.scheduler_state, last.exit_code) == ("succeeded", "COMPLETED", 0)

    files = RunDir(run_dir)
    assert ex.log_path(job, "first") == files.log("first")
    assert "first says hello there" in files.log("first").read_text()
    assert "second ran" in files.log("second").read_text()
    batch = ex.log_path(job, "slurm").read_text()
    assert f"job {job.job_id}: stage second exit code 0" in batch
    assert (run_dir / "slurm.sbatch").is_file()
    assert ex.failure(job) is None


@pytest.mark.slow
def test_stop_reaches_the_stage_as_sigterm_and_resume_finishes(slurm_cluster, tmp_path):
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    ready, saved, later = tmp_path / "ready", tmp_path / "saved-on-sigterm", tmp_path / "later"
    stage = (
        "import pathlib, signal, sys, time\n"
        f"saved = pathlib.Path({str(saved)!r})\n"
        "if saved.exists():\n"
        "    print('resumed from the saved state'); sys.exit(0)\n"
        "def on_term(*_):\n"
        "    saved.write_text('state'); print('SIGTERM: state saved', flush=True); "
        "sys.exit(143)\n"
        "signal.signal(signal.SIGTERM, on_term)\n"
        f"pathlib.Path({str(ready)!r}).write_text('ready')\n"
        "time.sleep(300)\n")
    stages = [StagePlan("train", [PY, "-c", stage]),
              StagePlan("after", [PY, "-c", f"open({str(later)!r}, 'w').write('ran')"])]
    ex = SlurmExecutor(SlurmOptions(stop_grace_s=60))
    job = ex.submit(stages, run_dir, run_id="stopper")
    wait_for(ready.exists, 90, "the stage runs and has its SIGTERM handler")
    ex.stop(job, wait=True)

    st = ex.status(job)
    assert st.status == "stopped" and st.exit_code == 143, st
    assert saved.read_text() == "state"
    assert "SIGTERM: state saved" in RunDir(run_dir).log("train").read_text()
    assert not later.exists(), "a stage after the stopped one must not start"

    again = ex.resume(job)
    assert again.job_id != job.job_id and again.run_dir == job.run_dir
    assert follow(ex, again)[-1].status == "succeeded"
    assert "resumed from the saved state" in RunDir(run_dir).log("train").read_text()
    assert later.read_text() == "ran"


@pytest.mark.slow
def test_a_failed_stage_is_diagnosed_from_its_log(slurm_cluster, tmp_path):
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    boom = ("import sys; print('torch.OutOfMemoryError: CUDA out of memory. Tried to "
            "allocate 2.00 GiB', file=sys.stderr); sys.exit(1)")
    ex = SlurmExecutor()
    job = ex.submit([StagePlan("train", [PY, "-c", boom])], run_dir, run_id="boom")
    last = follow(ex, job)[-1]
    assert (last.status, last.scheduler_state, last.exit_code, last.stage) == \
        ("failed", "FAILED", 1, "train")
    facts = ex.failure(job)
    assert facts["job_id"] == job.job_id and facts["scheduler_state"] == "FAILED"
    assert facts["stage"] == "train" and facts["exit_code"] == 1
    assert [d["kind"] for d in facts["diagnoses"]][:1] == ["cuda_oom"]
    assert facts["log_path"] == str(RunDir(run_dir).log("train"))


# ----------------------------------------------------------------------- refusals
@pytest.mark.slow
def test_refused_before_submission_naming_the_field(slurm_cluster, tmp_path):
    stages = [StagePlan("first", [PY, "-c", "print(1)"])]
    queued_before = slurm_cluster.run(["squeue", "-h", "-o", "%i"]).stdout.split()

    with pytest.raises(SlurmError) as e:
        SlurmExecutor(SlurmOptions(partition="nope")).submit(stages, tmp_path, run_id="r")
    (problem,) = e.value.problems
    assert problem.code == "slurm.no_partition"
    assert str(problem).startswith("slurm_partition: no such partition")
    assert "'nope'" in problem and "debug" in problem and "gpu" in problem
    assert "`slurm_partition`" in problem.text("zh")

    with pytest.raises(SlurmError) as e:
        SlurmExecutor(SlurmOptions(partition="gpu", gpus_per_node=16)).submit(
            stages, tmp_path, run_id="r")
    (problem,) = e.value.problems
    assert problem.code == "slurm.too_many_gpus" and str(problem).startswith("slurm_gpus_per_node:")
    assert "got 16" in problem and "at most 8" in problem and "gpu1 gpu:8" in problem

    (problem,) = check_cluster(SlurmOptions(partition="gpu"), nodes=3)
    assert problem.code == "slurm.too_many_nodes" and str(problem).startswith("num_machines:")
    assert "got 3" in problem and "at most 2" in problem

    # Every problem at once: the options' own and the partition's.
    with pytest.raises(SlurmError) as e:
        SlurmExecutor(SlurmOptions(gpus_per_node=1, time_limit="soon")).submit(
            stages, tmp_path, run_id="r")
    assert [p.code for p in e.value.problems] == ["slurm.bad_time_limit",
                                                  "slurm.too_many_gpus"]
    assert slurm_cluster.run(["squeue", "-h", "-o", "%i"]).stdout.split() == queued_before
    assert not (tmp_path / "slurm.sbatch").exists()


def test_no_sbatch_on_the_path_is_refused(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))
    ex = SlurmExecutor()
    assert ex.available().code == "slurm.no_sbatch"
    with pytest.raises(SlurmError) as e:
        ex.submit([StagePlan("first", [PY, "-c", "print(1)"])], tmp_path, run_id="r")
    assert [p.code for p in e.value.problems] == ["slurm.no_sbatch"]
    assert str(e.value).startswith("sbatch is not on the PATH")


# ----------------------------------------------------------------------- 2 nodes x 8 GPUs
def low_vram_two_nodes(tmp_path) -> tuple[list[StagePlan], Path]:
    base = load_preset("qwen_image_low_vram")
    # main_process_ip/_port: the schema asks for them with several machines; under SLURM
    # the launcher passes the first node's and a port of the job's (slurm_launch) instead.
    cfg = validate({**base.to_dict(), "dataset_base_path": str(tmp_path / "data"),
                    "num_machines": 2, "num_processes": 16, "main_process_ip": "10.0.0.1",
                    "main_process_port": 29500})
    run_dir = (tmp_path / "run").resolve()
    return plan_run(cfg, run_dir, cuda=True), run_dir


TWO_BY_EIGHT = SlurmOptions(partition="gpu", gpus_per_node=8, cpus_per_task=32,
                            mem_per_task="400G", time_limit="2-00:00:00",
                            constraint=None, setup_lines=["module load cuda/12.4 || true"],
                            nccl_env={"NCCL_DEBUG": "WARN", "NCCL_SOCKET_IFNAME": "ib0"})


def test_the_script_of_a_two_node_run(tmp_path):
    stages, run_dir = low_vram_two_nodes(tmp_path)
    assert [stage_nodes(p) for p in stages] == [1, 2, 1]
    text = sbatch_script(stages, run_dir, TWO_BY_EIGHT, "r2x8")
    for line in ("#SBATCH --nodes=2", "#SBATCH --ntasks-per-node=1",
                 "#SBATCH --gpus-per-node=8", "#SBATCH --partition=gpu",
                 "#SBATCH --time=2-00:00:00", "#SBATCH --cpus-per-task=32",
                 "#SBATCH --mem=400G", "#SBATCH --requeue", "module load cuda/12.4 || true",
                 "export NCCL_SOCKET_IFNAME=ib0"):
        assert line in text.splitlines(), line
    assert "srun --nodes=2 --ntasks=2 --ntasks-per-node=1 --cpus-per-task=32 " \
           "--job-name=train" in text
    assert "srun --nodes=1 --ntasks=1 --ntasks-per-node=1 --cpus-per-task=32 " \
           "--job-name=data_process" in text
    assert text.index("--job-name=data_process") < text.index("--job-name=train") < \
        text.index("--job-name=sample")
    assert f"-m backend.jobs.slurm_launch --run-dir {run_dir} --stage train" in text


def test_the_two_by_eight_preset_is_one_two_node_eight_gpu_job(tmp_path):
    """``presets/qwen_image_slurm_2x8.yaml``: the low-VRAM recipe as one job of 2 nodes x 8
    GPUs, its executor fields set; training on both nodes, the other stages on the first."""
    cfg = validate({**load_preset("qwen_image_slurm_2x8").to_dict(),
                    "dataset_base_path": str(tmp_path / "data")})
    low = load_preset("qwen_image_low_vram")
    assert (cfg.zero_stage, cfg.offload_param_device, cfg.offload_optimizer_device) == \
        (low.zero_stage, low.offload_param_device, low.offload_optimizer_device)
    opts = SlurmOptions.from_config(cfg, SlurmOptions(partition="gpu"))
    assert opts.problems() == []
    run_dir = (tmp_path / "run").resolve()
    stages = plan_run(cfg, run_dir, cuda=True)
    assert [stage_nodes(p) for p in stages] == [1, 2, 1]
    text = sbatch_script(stages, run_dir, opts, "r2x8").splitlines()
    for line in ("#SBATCH --nodes=2", "#SBATCH --ntasks-per-node=1", "#SBATCH --partition=gpu",
                 "#SBATCH --gpus-per-node=8", "#SBATCH --time=2-00:00:00",
                 "#SBATCH --cpus-per-task=64", "#SBATCH --mem=256G", "#SBATCH --requeue",
                 "#SBATCH --signal=TERM@120"):
        assert line in text, line
    assert any(ln.startswith("srun --nodes=2 --ntasks=2 --ntasks-per-node=1 ") and
               "--job-name=train" in ln for ln in text)


def test_machines_packed_onto_one_node(tmp_path):
    """``machines_per_node``: two launchers (two srun tasks, two machine ranks) on one
    node, for CPU runs; with GPUs it is refused (each launcher would see every GPU)."""
    stages, run_dir = low_vram_two_nodes(tmp_path)
    packed = SlurmOptions(partition="debug", machines_per_node=2)
    assert packed.problems() == [] and packed.job_nodes(2) == 1 and packed.job_nodes(3) == 2
    text = sbatch_script(stages, run_dir, packed, "packed").splitlines()
    assert "#SBATCH --nodes=1" in text and "#SBATCH --ntasks-per-node=2" in text
    assert any(ln.startswith("srun --nodes=1 --ntasks=2 --ntasks-per-node=2 ") and
               "--job-name=train" in ln for ln in text)
    assert any(ln.startswith("srun --nodes=1 --ntasks=1 --ntasks-per-node=1 ") and
               "--job-name=data_process" in ln for ln in text)
    (problem,) = SlurmOptions(machines_per_node=2, gpus_per_node=8).problems()
    assert problem.code == "slurm.packed_gpus" and str(problem).startswith("machines_per_node:")
    assert [p.code for p in SlurmOptions(machines_per_node=0).problems()] == ["slurm.bad_count"]


@pytest.mark.slow
def test_sbatch_test_only_accepts_the_two_node_eight_gpu_script(slurm_cluster, tmp_path):
    stages, run_dir = low_vram_two_nodes(tmp_path)
    ex = SlurmExecutor(TWO_BY_EIGHT)
    assert ex.refusals(stages) == []
    script = write_sbatch(stages, run_dir, TWO_BY_EIGHT, "r2x8")
    ok, said = sbatch_test_only(script)
    assert ok, said
    assert "to start at" in said and "gpu[1-2]" in said and "partition gpu" in said, said
    # The same script asking for a node more than the partition has is refused by SLURM too.
    too_big = script.with_name("too-big.sbatch")
    too_big.write_text(script.read_text().replace("#SBATCH --nodes=2", "#SBATCH --nodes=3"))
    assert not sbatch_test_only(too_big)[0]


# ----------------------------------------------------------------------- the launcher
def test_rank_flags_go_after_launch_and_replace_earlier_ones():
    facts = {"num_machines": 2, "rank": 1, "main_process_ip": "gpu1",
             "main_process_port": 20123}
    argv = [PY, "-m", "accelerate.commands.launch", "--config_file", "a.yaml",
            "--machine_rank", "3", "--main_process_port=1", "-m", "backend.stages.train",
            "--config", "run.yaml", "--machine_rank", "stays"]
    assert with_rank_flags(argv, facts) == [
        PY, "-m", "accelerate.commands.launch", "--num_machines", "2", "--machine_rank", "1",
        "--main_process_ip", "gpu1", "--main_process_port", "20123", "--config_file",
        "a.yaml", "-m", "backend.stages.train", "--config", "run.yaml", "--machine_rank",
        "stays"]


def srun_launcher(cluster, run_dir: Path, command: list[str], *flags: str,
                  env: dict[str, str] | None = None):
    argv = ["srun", "-n", "2", f"--chdir={REPO}", PY, "-m", "backend.jobs.slurm_launch",
            "--run-dir", str(run_dir), "--stage", "train", *flags, "--", *command]
    old = dict(cluster.env)
    cluster.env.update({"PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1", **(env or {})})
    try:
        return cluster.run(argv, timeout=180)
    finally:
        cluster.env.clear()
        cluster.env.update(old)


@pytest.mark.slow
def test_the_launcher_under_srun_gives_each_task_its_rank(slurm_cluster, tmp_path):
    command = [PY, "-m", "accelerate.commands.launch", "--config_file", "x.yaml",
               "-m", "backend.stages.train", "--config", "run.yaml"]
    out = srun_launcher(slurm_cluster, tmp_path, command, "--dry-run").stdout
    tasks = sorted((json.loads(ln) for ln in out.splitlines() if ln.startswith("{")),
                   key=lambda t: t["rank"])
    assert [t["rank"] for t in tasks] == [0, 1]
    assert {t["node_id"] for t in tasks} == {0}  # both on the one node
    for t in tasks:
        argv = t["argv"]
        assert argv[argv.index("--machine_rank") + 1] == str(t["rank"])
        assert argv[argv.index("--num_machines") + 1] == "2"
        assert argv[argv.index("--main_process_ip") + 1] == slurm_cluster.host
    assert len({t["main_process_port"] for t in tasks}) == 1


ACCELERATE_YAML = """\
compute_environment: LOCAL_MACHINE
distributed_type: MULTI_GPU
num_machines: 1
num_processes: 2
machine_rank: 0
main_training_function: main
mixed_precision: 'no'
rdzv_backend: static
same_network: true
use_cpu: false
gpu_ids: all
"""
RANK_SCRIPT = """\
import json
import torch
import torch.distributed as dist
dist.init_process_group("gloo")
total = torch.tensor([dist.get_rank() + 1])
dist.all_reduce(total)
print("RANK " + json.dumps({"rank": dist.get_rank(), "world": dist.get_world_size(),
                            "sum": int(total)}), flush=True)
dist.destroy_process_group()
"""


@pytest.mark.slow
def test_two_srun_tasks_join_one_process_group_through_accelerate(slurm_cluster, tmp_path):
    """The launcher's flags really work: two ``accelerate launch`` (one per srun task, as
    one per node) start one process each, and the two find each other (gloo, CPU)."""
    (tmp_path / "acc.yaml").write_text(ACCELERATE_YAML)
    (tmp_path / "rank.py").write_text(RANK_SCRIPT)
    command = [PY, "-m", "accelerate.commands.launch", "--config_file",
               str(tmp_path / "acc.yaml"), str(tmp_path / "rank.py")]
    out = srun_launcher(slurm_cluster, tmp_path, command,
                        env={"ACCELERATE_USE_CPU": "true"}).stdout
    ranks = sorted((json.loads(ln[len("RANK "):]) for ln in out.splitlines()
                    if ln.startswith("RANK ")), key=lambda r: r["rank"])
    assert ranks == [{"rank": 0, "world": 2, "sum": 3}, {"rank": 1, "world": 2, "sum": 3}], out


# ----------------------------------------------------------------------- small parts
def test_gpus_in_a_gres_line():
    assert gres_gpus("gpu:8") == 8
    assert gres_gpus("gpu:a100:4(S:0-1),gpu:h100:4(S:1)") == 8
    assert gres_gpus("(null)") == 0 and gres_gpus("shard:8,gpu") == 1


def test_scheduler_end_states_are_explained_with_what_to_change():
    opts = SlurmOptions(time_limit="04:00:00", mem_per_task="64G")
    kinds = {}
    for state in ("TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY", "PREEMPTED"):
        d = scheduler_diagnosis(state, {}, opts)
        kinds[state] = d.kind
        assert d.fixes and d.settings
        assert d.title.text("zh") != d.title and state in d.title.text("zh")
    assert kinds == {"TIMEOUT": "slurm_timeout", "NODE_FAIL": "slurm_node_fail",
                     "OUT_OF_MEMORY": "slurm_oom", "PREEMPTED": "slurm_preempted"}
    timeout = scheduler_diagnosis("TIMEOUT", {"TimeLimit": "04:00:00"}, opts)
    assert "time_limit (now 04:00:00)" in timeout.fixes[0]
    assert "mem_per_task now 64G" in scheduler_diagnosis("OUT_OF_MEMORY", {}, opts).fixes[0]
    assert scheduler_diagnosis("FAILED", {}, opts) is None
    # Ended from outside the app: cancelled, or its stage killed (scancel --signal=KILL).
    assert scheduler_diagnosis("CANCELLED", {}, opts, job="7").kind == "slurm_cancelled"
    assert scheduler_diagnosis("FAILED", {}, opts, exit_code=143).kind == "slurm_cancelled"
    killed = scheduler_diagnosis("FAILED", {}, opts, exit_code=137, job="7")
    assert killed.kind == "slurm_killed" and "FAILED" in killed.title
    assert "sacct -j 7" in killed.fixes[-1] and "`sacct -j 7`" in killed.fixes[-1].text("zh")


def test_options_report_every_problem():
    bad = SlurmOptions(time_limit="2 days", mem_per_task="lots", gpus_per_node=-1,
                       cpus_per_task=0, nccl_env={"NCCL DEBUG": "INFO"},
                       setup_lines=["module load a\nmodule load b"])
    assert [p.code for p in bad.problems()] == [
        "slurm.bad_time_limit", "slurm.bad_memory", "slurm.bad_count", "slurm.bad_count",
        "slurm.bad_env_name", "slurm.bad_setup_line"]
    assert SlurmOptions(time_limit="1-12:00:00", mem_per_task="500M").problems() == []
    assert os.path.basename(SlurmOptions().python).startswith("python")


@pytest.mark.slow
def test_a_requeued_job_skips_finished_stages_and_trains_from_the_saved_state(
        slurm_cluster, tmp_path, monkeypatch, capsys):
    """What a requeued (preempted) or resumed job's launcher does, task by task."""
    for name, value in (("SLURM_PROCID", "0"), ("SLURM_NTASKS", "1"), ("SLURM_JOB_ID", "77"),
                        ("SLURM_STEP_ID", "1"), ("SLURM_JOB_NODELIST", slurm_cluster.host),
                        ("SLURM_RESTART_COUNT", "1")):
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("SLURM_STEP_NODELIST", raising=False)
    files = RunDir(tmp_path)
    files.progress.write_text(json.dumps({"event": "end", "stage": "data_process",
                                          "status": "succeeded", "time": time.time()}) + "\n")
    ran = tmp_path / "ran"
    assert slurm_launch.main(["--run-dir", str(tmp_path), "--stage", "data_process", "--",
                              PY, "-c", f"open({str(ran)!r}, 'w')"]) == 0
    assert not ran.exists() and "already succeeded" in capsys.readouterr().out

    files.state.mkdir(parents=True)
    (files.state / "optimizer.pt").write_text("saved")
    command = [PY, "-m", "accelerate.commands.launch", "--config_file", "a.yaml",
               "-m", "backend.stages.train", "--config", "run.yaml"]
    assert slurm_launch.main(["--run-dir", str(tmp_path), "--stage", "train", "--dry-run",
                              "--", *command]) == 0
    said = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert said["argv"][-2:] == ["--resume_from", str(files.state)]
    assert said["restart"] == 1 and said["main_process_ip"] == slurm_cluster.host


# ------------------------------------------------------------------------------------------
# Runs of the app sent to the cluster (backend.jobs.slurm_runs): here beside the other
# cluster tests, so that one test worker (--dist loadfile) starts the one cluster
# ------------------------------------------------------------------------------------------
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


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_the_cpu_demo_through_slurm_in_the_browser(slurm_cluster, browser, tmp_path):
    """A server started with ``launch.py --executor slurm --slurm-partition debug``, used in
    Chromium as a person would: the Training tab shows the job script and the shared-storage
    probe (ok: this node wrote, the server read back), Start sends the CPU demo (24 steps, a
    checkpoint every 8, small renders) to SLURM as a job whose id the Run tab shows, its log
    tails there, Stop saves the state at its step, Resume finishes at the last step in a new
    job, the samples render."""
    pytest.importorskip("playwright.sync_api")
    from playwright.sync_api import expect
    from tests.harness.app import AppServer
    from tests.harness.browser import RUN_ID, STEP_S, field, md, new_page, tab

    server = AppServer(tmp_path, "--executor", "slurm", "--slurm-partition", "debug")
    page = new_page(browser, server.url)
    run_id = None
    try:
        tab(page, "training")
        # A tiny step takes well under a second: enough of them that Stop lands mid-run.
        for name, value in (("max_train_steps", "400"), ("save_steps", "100"),
                            ("sample_steps", "4")):
            field(page, name).fill(value)
            field(page, name).press("Tab")
        expect(field(page, "max_train_steps")).to_have_value("400")
        page.click("#gen-tab-sbatch-button")
        expect(page.locator("#gen-sbatch")).to_contain_text("#SBATCH --partition=debug")
        expect(md(page, "storage-probe")).to_contain_text(
            "shared storage: ok, the file the probe job", timeout=STEP_S * 1000)
        assert slurm_cluster.host in md(page, "storage-probe").inner_text()

        tab(page, "run")
        page.click("#run-start")
        expect(md(page, "run-message")).to_contain_text("Started run", timeout=STEP_S * 1000)
        run_id = RUN_ID.search(md(page, "run-message").inner_text()).group(0)
        ws = server.workspace
        run = SlurmRunner(ws, auto_start=False).get_run(run_id)
        job = run["slurm_job_id"]
        assert job and job.isdigit() and "executor: slurm" in run["config_yaml"]
        assert "max_train_steps: 400" in run["config_yaml"]
        expect(md(page, "run-current")).to_contain_text(f"SLURM job {job}",
                                                        timeout=STEP_S * 1000)
        page.wait_for_function(
            "() => /stage train · step ([3-9]|[1-9]\\d+) \\//.test("
            "document.querySelector('#run-progress .zl-stats')?.innerText || '')",
            timeout=300_000)
        expect(md(page, "run-current")).to_contain_text(f"running as SLURM job {job}")
        assert f"SLURM job {job} step" in page.locator("#run-log textarea").input_value()

        page.click("#run-stop")
        expect(md(page, "run-message")).to_contain_text("Stopping", timeout=STEP_S * 1000)
        expect(md(page, "run-current")).to_contain_text("stopped", timeout=300_000)
        expect(md(page, "run-current")).to_contain_text("can be resumed", timeout=STEP_S * 1000)
        files = RunDir(Path(run["run_dir"]))
        assert files.has_state()
        (first,) = train_steps(files.run_dir)
        saved = first[-1]
        assert 3 <= saved < 400

        page.click("#run-resume")
        expect(md(page, "run-message")).to_contain_text("Resumed run", timeout=STEP_S * 1000)
        expect(md(page, "run-current")).to_contain_text("succeeded", timeout=420_000)
        done = SlurmRunner(ws, auto_start=False).get_run(run_id)
        assert done["slurm_job_id"] not in (None, job) and done["attempt"] == 2
        assert [s["status"] for s in done["stages"]] == ["succeeded"] * 3
        first, later = train_steps(files.run_dir)
        assert later[0] == saved + 1 and later[-1] == 400, (first, later)
        page.wait_for_function("() => document.querySelectorAll('#run-samples img').length >= 1",
                               timeout=STEP_S * 1000)
        images, titles, cols = jobs.grid(done)
        assert images and cols >= 2 and all(Path(p).is_file() for p, _ in images), titles
    except BaseException:
        print(server.log()[-6000:])
        raise
    finally:
        page.context.close()
        server.stop()
        if run_id:
            slurm_cluster.run(["scancel", f"--name=zerolora-{run_id}"], check=False)


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
    # 200 steps (a tiny step takes well under a second), a checkpoint (LoRA + resume state)
    # every 20; no samples.
    cfg = demo(tmp_path, executor="slurm", max_train_steps=200, save_steps=20,
               stages=["data_process", "train"])
    run_id = runner.submit(cfg, owner="alice")
    files = RunDir(Path(runner.get_run(run_id)["run_dir"]))
    wait_for(lambda: files.has_state() and (runner.progress(run_id).get("step") or 0) >= 25,
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
    assert saved % 20 == 0 and saved < before[-1] < 200

    runner.resume(run_id)
    assert runner.get_run(run_id)["slurm_job_id"] != job
    done = runner.wait(run_id, timeout=420)
    assert done["status"] == "succeeded", (done, runner.last_lines(run_id, "train", 30))
    assert [s["status"] for s in done["stages"]] == ["succeeded"] * 2
    _, later = train_steps(files.run_dir)
    assert later[0] == saved + 1 and later[-1] == 200, (before, later)
    assert "already succeeded (an earlier job): skipped" in \
        files.log("slurm").read_text() + files.log("data_process").read_text()


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_a_job_requeued_by_slurm_resumes_from_its_checkpoint_by_itself(slurm_cluster,
                                                                        tmp_path):
    """``scontrol requeue`` (what preemption with PreemptMode=REQUEUE does): SLURM sends the
    steps SIGTERM (training saves its state), puts the job back in the queue and runs its
    script again with SLURM_RESTART_COUNT=1; stage 1 is skipped and training continues from
    the saved state to its last step, in the same job, without a Resume."""
    ws = tmp_path / "ws"
    runner = SlurmRunner(ws, server=SlurmOptions(partition="debug"))
    # 200 steps (a tiny step takes well under a second), a checkpoint (LoRA + resume state)
    # every 20; no samples.
    cfg = demo(tmp_path, executor="slurm", max_train_steps=200, save_steps=20,
               stages=["data_process", "train"], slurm_time_limit="30")
    run_id = runner.submit(cfg, owner="alice")
    files = RunDir(Path(runner.get_run(run_id)["run_dir"]))
    assert "#SBATCH --requeue" in files.sbatch.read_text().splitlines()
    assert "#SBATCH --signal=TERM@120" in files.sbatch.read_text().splitlines()
    # No earlier SLURM run measured this setting: the limit is accepted, with a note.
    note = runner.get_run(run_id)["stages"][1]["note"]
    assert note.code == "slurm.time_unchecked" and "could not be checked" in note
    wait_for(lambda: files.has_state() and (runner.progress(run_id).get("step") or 0) >= 25,
             400, "training past its first checkpoint")
    job = runner.get_run(run_id)["slurm_job_id"]
    slurm_cluster.run(["scontrol", "requeue", job])

    back = wait_for(lambda: (lambda r: r if r["status"] == "queued" else None)(
        runner.get_run(run_id)), 60, "the run back in the queue", poll=0.5)
    assert back["note"].code == "slurm.requeued", back["note"]
    assert "requeued by SLURM (restart 1" in back["note"] and \
        "resumes from its last saved state by itself" in back["note"]
    assert [s["status"] for s in back["stages"]] == ["succeeded", "queued"]

    done = runner.wait(run_id, timeout=420)
    assert done["status"] == "succeeded", (done, runner.last_lines(run_id, "train", 30))
    assert done["slurm_job_id"] == job and done["attempt"] == 1  # no Resume: the same job
    assert done["note"].code == "slurm.ended_requeued" and "after 1 requeue(s)" in done["note"]
    assert [s["status"] for s in done["stages"]] == ["succeeded"] * 2
    before, later = train_steps(files.run_dir)
    events, _ = read_events(files.progress)
    checkpoints = [e["step"] for e in events if e.get("stage") == "train"
                   and e["event"] == "checkpoint" and e["step"] <= before[-1]]
    assert checkpoints and checkpoints[0] == 20
    # From the state saved on SIGTERM (the step it reached) or, had the save not finished
    # within KillWait, from the last checkpoint: never from the start.
    assert later[0] - 1 in (before[-1], checkpoints[-1]) and later[0] > 20, (before, later)
    assert later[-1] == 200
    batch = files.log("slurm").read_text()
    assert f"job {job} (restart 1): stage data_process starts" in batch
    assert "already succeeded (an earlier job): skipped" in \
        batch + files.log("data_process").read_text()
    assert f"SLURM job {job} step" in files.log("train").read_text() and \
        "restart 1) started" in files.log("train").read_text()


@pytest.mark.slow
def test_the_storage_probe_reads_back_what_a_node_wrote_or_warns(slurm_cluster, tmp_path):
    """The probe job of the shared-storage check: pending while the only node is busy (the
    page shows it), a warning when the job ran but its file is not there (its folder
    removed before it ran, as on a node that does not mount it), ok when it reads back."""
    ws = tmp_path / "ws"
    blocker = slurm_cluster.run(["sbatch", "--parsable", "--exclusive", "-N", "1",
                                 "-o", "/dev/null", "--wrap", "sleep 60"]).stdout.strip()
    wait_for(lambda: slurm_cluster.run(["squeue", "-h", "-j", blocker, "-o", "%T"]
                                       ).stdout.strip() == "RUNNING", 60, "the blocker runs")
    probe = StorageProbe(ws, SlurmOptions(partition="debug"), poll_s=0.2, visible_wait_s=1)
    assert probe.state()["state"] == "idle"
    pending = wait_for(lambda: (lambda s: s if s["state"] == "pending" and s["text"].params
                                .get("reason") != "submitted" else None)(probe.start().state()),
                       30, "the probe waits in the queue")
    assert pending["text"].code == "slurm.probe_pending" and pending["job_id"].isdigit()
    assert "pending" in pending["text"] and "not held back" in pending["text"]
    files = ProbeFiles.of(ws)
    assert files.script.is_file() and "#SBATCH --partition=debug" in files.script.read_text()
    shutil.rmtree(files.folder)  # the node will not find the folder
    slurm_cluster.run(["scancel", blocker])
    said = probe.wait(90)
    assert said["state"] == "missing", said
    assert said["text"].code == "slurm.probe_missing" and "Warning" in said["text"]
    assert pending["path"] in said["text"] and str(ws / "runs") in said["text"]

    again = StorageProbe(ws, SlurmOptions(partition="debug"), poll_s=0.2).start().wait(90)
    assert again["state"] == "ok", again
    assert again["node"] == slurm_cluster.host and slurm_cluster.host in again["text"]
    assert not list(files.folder.glob("answer-*"))  # read back, then removed
