"""The SLURM executor: a run's stages as one ``sbatch`` job on the cluster the users already run.

    ex = SlurmExecutor(SlurmOptions(partition="gpu", gpus_per_node=8, time_limit="2-00:00:00",
                                    setup_lines=["module load cuda/12.4",
                                                 "source /shared/zerolora/.venv/bin/activate"]))
    stages = plan_run(cfg, run_dir, cuda=True)      # the run folder, as for a local run
    job = ex.submit(stages, run_dir, run_id=run_id)  # refused first: see check_cluster
    ex.status(job)      # queued (SLURM's reason) / running (nodes) / ended (state, exit code)
    ex.stop(job)        # scancel --signal=TERM, the grace period, then scancel
    job = ex.resume(job)  # a new job from the saved state
    ex.failure(job)     # TIMEOUT / NODE_FAIL / OUT_OF_MEMORY / PREEMPTED explained

**One job for all the stages** (not one job per stage chained with ``afterok``). Each stage
is one ``srun`` step of the job, named after the stage, run only when the step before
exited 0, as the local runner chains them. Why: on a busy cluster every job waits in the
queue; a chain of three jobs waits three times, hours apart, while the stage-1 cache and
the user's attention sit idle, and a chain needs three ids followed, stopped and cleaned up
together. One job waits once, is one id in the history and is stopped with one ``scancel``.
The price: the allocation is sized for the largest stage (training's nodes) and stays held
while stage 1 and the samples run on its first node (minutes, against hours of training).

The script (``write_sbatch``, ``slurm.sbatch`` in the run folder) has the ``#SBATCH`` lines
of ``SlurmOptions``, the set-up lines (module loads, the environment to activate), the NCCL
variables and one block per stage::

    srun --nodes=N --ntasks=N --ntasks-per-node=1 --job-name=train --kill-on-bad-exit=1 \\
        "$PYTHON" -m backend.jobs.slurm_launch --run-dir RUN --stage train -- <stage argv>

``srun`` starts our launcher once per node (``backend.jobs.slurm_launch``), which reads
``SLURM_PROCID`` and the step's node list and runs the stage's ``accelerate launch`` with
``--num_machines``, ``--machine_rank``, ``--main_process_ip`` and ``--main_process_port``
(argv lists; see there). A stage that is not an accelerate launch (samples) runs as one task
on the first node. Each stage's output goes to ``logs/<stage>.log`` as locally, the job's
own lines to ``logs/slurm.log``; the run folder must be on storage the nodes share.

The job is requeued on preemption (``--requeue``): the script runs again (SLURM sets
``SLURM_RESTART_COUNT``), the launcher skips a stage whose progress file says it succeeded
and starts training from ``output/state``, so the run resumes from its last checkpoint by
itself; ``status`` counts the restarts (``JobStatus.restarts``, from ``scontrol``'s
``Restarts`` and the ``(restart N)`` lines of ``logs/slurm.log``) and says so. SLURM sends
a preempted or requeued job's steps SIGTERM and kills them after ``KillWait`` (preemption:
the partition's ``GraceTime``): training saves its state on SIGTERM. Before the time limit,
``--signal=TERM@<term_before_limit_s>`` sends the steps SIGTERM early enough to save.
``resume`` submits the same script again.

Status comes from ``squeue`` while the job is queued or running, then from ``sacct``
(accounting, or the job completion log with ``--completion`` where there is no accounting
database), then ``scontrol show job`` (recently ended jobs). Before submission
(``check_cluster``): the partition exists, it has enough nodes, and its nodes have as many
GPUs as asked for per node (``scontrol show partition`` / ``show node``, what ``sinfo``
reports); ``sbatch`` missing from the PATH is refused first.

A job is ``stopped`` only when the app asked (``stop`` writes ``stop requested by the app``
into ``logs/slurm.log`` first); one cancelled or sent SIGTERM from outside (``CANCELLED``, a
stage's 143) or whose stage was killed (``scancel --signal=KILL <job>.<step>``: ``FAILED``
with 137) is ``failed``, explained by ``scheduler_diagnosis``, and resumes as any failed run.

The run's ``slurm_*`` fields become ``SlurmOptions`` (``SlurmOptions.from_config``); the
app's runner follows these jobs in its history (``backend.jobs.slurm_runs``), checks the
time limit against measured step times (``time_limit_check`` there) and the shared storage
with a probe job (``StorageProbe`` there; its script: ``probe_script`` here).
"""
from __future__ import annotations

import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field, replace
from pathlib import Path

import yaml

from backend.config.rules import SLURM_MEMORY, SLURM_TIME
from backend.config.schema import RunConfig
from backend.core.messages import Msg
from backend.core.rundir import RunDir
from backend.jobs import diagnosis
from backend.jobs.diagnosis import Diagnosis
from backend.jobs.executor import Executor, ExecutorError, Job, JobStatus
from backend.jobs.processes import REPO_ROOT, RUN_MARKER, child_env, start_stage
from backend.jobs.watch import LOG_PREFIX, end_reason, last_end_event, read_tail
from backend.planning.plan import LAUNCH, StagePlan

BATCH_LOG = "slurm"
STOP_LINE = ": stop requested by the app"  # after "[zerolora] job <id>" in logs/slurm.log  # the job's own output: RunDir.log(BATCH_LOG), beside the stage logs
LAUNCH_MODULE = "backend.jobs.slurm_launch"
TOOL_TIMEOUT_S = 30.0
# A stage that exits with this code was stopped on request (SIGTERM; see backend/core/exits).
STOPPED_EXIT = 143
# The launcher's line when a SIGTERM came with little time left (``--signal=TERM@N``, the
# time limit near): the stage's log then explains a 143 as the time limit, not a scancel.
TIME_NEAR_LINE = "SIGTERM with the job's time limit near"
TIME_NEAR_S = 900

_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_JOB_ID = re.compile(r"^(\d+)(;\S+)?$", re.M)

# SLURM's job states in the history's words (anything else that ended: failed).
QUEUED_STATES = {"PENDING", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED", "RESV_DEL_HOLD",
                 "CONFIGURING", "SPECIAL_EXIT"}
RUNNING_STATES = {"RUNNING", "COMPLETING", "SIGNALING", "STAGE_OUT", "RESIZING", "SUSPENDED",
                  "STOPPED"}


class SlurmError(ExecutorError):
    """A SLURM command failed or refused, or the request cannot run on this cluster."""


@dataclass
class SlurmOptions:
    """How a run is asked of SLURM (the ``#SBATCH`` lines and what the script sets up).

    A run's come from its ``slurm_*`` fields (``backend/config/schema.py``) on top of the
    server's (``launch.py --slurm-partition``, ``--slurm-setup``): ``from_config``."""

    partition: str | None = None       # None: the cluster's default partition
    account: str | None = None
    qos: str | None = None
    time_limit: str | None = None      # SLURM's forms: "90", "12:00:00", "2-00:00:00"
    constraint: str | None = None      # node features, e.g. "a100&ib"
    gpus_per_node: int = 0
    cpus_per_task: int | None = None   # one task per node: the CPUs of a node's launcher
    mem_per_task: str | None = None    # one task per node, so --mem: e.g. "256G"
    setup_lines: list[str] = field(default_factory=list)  # module loads, activate ...
    nccl_env: dict[str, str] = field(default_factory=dict)  # NCCL_SOCKET_IFNAME=ib0 ...
    python: str = sys.executable       # the Python on the nodes (after the set-up lines)
    requeue: bool = True               # preempted: back in the queue, resumed by itself
    # Seconds before the time limit at which the stages get SIGTERM (``--signal=TERM@N``):
    # training saves its state and ends before SLURM kills it.
    term_before_limit_s: int = 120
    stop_grace_s: float = 120.0        # Stop: seconds after SIGTERM before scancel
    # The run's machines (accelerate's num_machines) that share a node: 1, one launcher per
    # node (a cluster); 2+ packs that many launchers, each its own srun task with its own
    # SLURM_PROCID / SLURM_LOCALID, onto a node (CPU runs: a one-node test cluster).
    machines_per_node: int = 1

    @classmethod
    def from_config(cls, cfg: RunConfig, server: "SlurmOptions | None" = None
                    ) -> "SlurmOptions":
        """A run's options: its ``slurm_*`` fields, each empty one the server's; set-up lines
        the server's first, then the run's; NCCL variables the server's, the run's on top."""
        base = server or cls()
        env = dict(base.nccl_env)
        env.update(line.split("=", 1) for line in cfg.slurm_nccl_env if "=" in line)
        return replace(
            base, partition=cfg.slurm_partition or base.partition,
            account=cfg.slurm_account or base.account, qos=cfg.slurm_qos or base.qos,
            time_limit=cfg.slurm_time_limit or base.time_limit,
            constraint=cfg.slurm_constraint or base.constraint,
            gpus_per_node=cfg.slurm_gpus_per_node or base.gpus_per_node,
            cpus_per_task=cfg.slurm_cpus_per_task or base.cpus_per_task,
            mem_per_task=cfg.slurm_mem_per_task or base.mem_per_task,
            setup_lines=list(base.setup_lines) + list(cfg.slurm_setup_lines), nccl_env=env)

    def problems(self) -> list[Msg]:
        """What is wrong with the options themselves, every problem at once."""
        found: list[Msg] = []
        if self.time_limit is not None and not SLURM_TIME.match(str(self.time_limit)):
            found.append(Msg("slurm.bad_time_limit", got=self.time_limit))
        if self.mem_per_task is not None and not SLURM_MEMORY.match(str(self.mem_per_task)):
            found.append(Msg("slurm.bad_memory", got=self.mem_per_task))
        if self.gpus_per_node < 0:
            found.append(Msg("slurm.bad_count", field="slurm_gpus_per_node", least=0,
                             got=self.gpus_per_node))
        if self.cpus_per_task is not None and self.cpus_per_task < 1:
            found.append(Msg("slurm.bad_count", field="slurm_cpus_per_task", least=1,
                             got=self.cpus_per_task))
        found += [Msg("slurm.bad_env_name", got=k) for k in self.nccl_env
                  if not _ENV_NAME.match(k)]
        if any("\n" in line or "\r" in line for line in self.setup_lines):
            found.append(Msg("slurm.bad_setup_line"))
        if self.machines_per_node < 1:
            found.append(Msg("slurm.bad_count", field="machines_per_node", least=1,
                             got=self.machines_per_node))
        elif self.machines_per_node > 1 and self.gpus_per_node:
            found.append(Msg("slurm.packed_gpus", n=self.machines_per_node,
                             gpus=self.gpus_per_node))
        return found

    def job_nodes(self, machines: int) -> int:
        """The nodes ``machines`` launchers take (``machines_per_node`` to a node)."""
        per = max(1, self.machines_per_node)
        return -(-max(1, machines) // per)


# ----------------------------------------------------------------------------- commands
def run_tool(argv: list[str], timeout: float = TOOL_TIMEOUT_S) -> tuple[int, str]:
    """Run a SLURM client command (argv list); returns (exit code, stdout and stderr).

    Started through ``backend.jobs.processes`` (the one module that starts processes)."""
    tool = shutil.which(argv[0])
    if tool is None:
        raise SlurmError([Msg("slurm.no_sbatch") if argv[0] == "sbatch"
                          else Msg("slurm.no_tool", tool=argv[0])])
    with tempfile.TemporaryFile() as out:
        proc = start_stage([tool, *argv[1:]], child_env(), out)
        try:
            rc = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            raise SlurmError([Msg("slurm.tool_timeout", tool=argv[0], seconds=timeout)])
        out.seek(0)
        return rc, out.read().decode("utf-8", errors="replace")


def _checked(argv: list[str]) -> str:
    rc, out = run_tool(argv)
    if rc != 0:
        raise SlurmError([Msg("slurm.tool_failed", tool=argv[0], exit=rc,
                              why=_last_line(out))])
    return out


def _last_line(text: str) -> str:
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    return lines[-1] if lines else ""


def _fields(line: str) -> dict[str, str]:
    """``Key=Value Key2=Value2`` (``scontrol -o``) as a dict (values without spaces)."""
    return dict(m.groups() for m in re.finditer(r"(\S+?)=(\S*)", line))


def hostnames(nodelist: str) -> list[str]:
    """A SLURM node list expanded: ``gpu[1-2]`` -> ``["gpu1", "gpu2"]``."""
    return _checked(["scontrol", "show", "hostnames", nodelist]).split()


# ----------------------------------------------------------------------------- the cluster
def partitions() -> list[dict[str, str]]:
    """Every partition (hidden ones too), as ``scontrol -o show partition`` fields."""
    out = _checked(["scontrol", "-a", "-o", "show", "partition"])
    return [_fields(ln) for ln in out.splitlines() if ln.startswith("PartitionName=")]


def partition_nodes(nodes: str) -> list[dict[str, str]]:
    """The nodes of a partition (``Nodes=`` expression), those in state FUTURE too."""
    if not nodes or nodes == "(null)":
        return []
    # Nodes the cluster hides (powered-down cloud nodes without PrivateData=cloud) answer
    # "not found": they are left out, and their GPUs are not judged here (sbatch will).
    _, out = run_tool(["scontrol", "-F", "-o", "show", "node", nodes])
    return [_fields(ln) for ln in out.splitlines() if ln.startswith("NodeName=")]


def gres_gpus(gres: str) -> int:
    """GPUs in a node's ``Gres=`` (``gpu:8``, ``gpu:a100:4(S:0-1),gpu:h100:4``)."""
    total = 0
    for item in (gres or "").split(","):
        parts = re.sub(r"\(.*?\)", "", item).split(":")
        if parts[0] != "gpu":
            continue
        total += int(parts[-1]) if len(parts) > 1 and parts[-1].isdigit() else 1
    return total


def _node_summary(nodes: list[dict[str, str]]) -> str:
    """What sinfo would say of the nodes, one ``name gres state`` item each (plain text)."""
    return ", ".join(f"{n.get('NodeName')} {n.get('Gres', '(null)')} "
                     f"{n.get('State', '?').lower()}" for n in nodes) or "no nodes"


def check_cluster(options: SlurmOptions, nodes: int) -> list[Msg]:
    """Refusals before submission, each naming its field: a partition that does not exist,
    more nodes than it has, more GPUs per node than its nodes have."""
    parts = partitions()
    known = [p["PartitionName"] for p in parts]
    if options.partition:
        chosen = [p for p in parts if p["PartitionName"] == options.partition]
        if not chosen:
            return [Msg("slurm.no_partition", got=options.partition, known=known)]
    else:
        chosen = [p for p in parts if p.get("Default") == "YES"]
        if not chosen:
            return [Msg("slurm.no_default_partition", known=known)]
    part = chosen[0]
    members = partition_nodes(part.get("Nodes", ""))
    found: list[Msg] = []
    total = int(part["TotalNodes"]) if part.get("TotalNodes", "").isdigit() else len(members)
    if nodes > total:
        found.append(Msg("slurm.too_many_nodes", partition=part["PartitionName"], got=nodes,
                         most=total, nodes=_node_summary(members)))
    if options.gpus_per_node and members:
        most = max((gres_gpus(n.get("Gres", "")) for n in members), default=0)
        if options.gpus_per_node > most:
            found.append(Msg("slurm.too_many_gpus", partition=part["PartitionName"],
                             got=options.gpus_per_node, most=most,
                             nodes=_node_summary(members)))
    return found


# ----------------------------------------------------------------------------- the script
def is_accelerate_launch(argv: list[str]) -> bool:
    """Whether a stage's argv is ``python -m accelerate.commands.launch ...`` (or
    ``accelerate launch ...``)."""
    for i in range(len(argv) - 1):
        if tuple(argv[i:i + 2]) == LAUNCH:
            return True
    return len(argv) > 1 and Path(argv[0]).name == "accelerate" and argv[1] == "launch"


def stage_nodes(plan: StagePlan) -> int:
    """The nodes a stage runs on: its accelerate config's ``num_machines`` (1 otherwise)."""
    if not is_accelerate_launch(plan.argv) or "--config_file" not in plan.argv:
        return 1
    i = plan.argv.index("--config_file")
    try:
        data = yaml.safe_load(Path(plan.argv[i + 1]).read_text(encoding="utf-8")) or {}
    except (OSError, IndexError, yaml.YAMLError):
        return 1
    return max(1, int(data.get("num_machines") or 1))


def _quote_argv(argv: list[str]) -> str:
    """A stage's argv as shell words, its Python (the server's) replaced by ``"$PYTHON"``."""
    words = [shlex.quote(a) for a in argv]
    if argv and (argv[0] == sys.executable or Path(argv[0]).name.startswith("python")):
        words[0] = '"$PYTHON"'
    return " ".join(words)


def sbatch_script(stages: list[StagePlan], run_dir: Path, options: SlurmOptions,
                  run_id: str) -> str:
    """The ``sbatch`` script of a run (see the module docstring)."""
    files = RunDir(Path(run_dir))
    machines = max([stage_nodes(p) for p in stages] or [1])
    nodes = options.job_nodes(machines)
    per_node = min(machines, max(1, options.machines_per_node))
    head = ["#!/bin/bash",
            f"# ZeroLoRA run {run_id}: {', '.join(p.name for p in stages)} as one SLURM job,",
            "# one srun step per stage (backend/jobs/slurm.py). Submit: sbatch <this file>",
            f"#SBATCH --job-name=zerolora-{run_id}",
            f"#SBATCH --nodes={nodes}",
            f"#SBATCH --ntasks-per-node={per_node}",
            f"#SBATCH --output={files.log(BATCH_LOG)}",
            "#SBATCH --open-mode=append",
            f"#SBATCH --chdir={REPO_ROOT}",
            "#SBATCH --requeue" if options.requeue else "#SBATCH --no-requeue"]
    if options.term_before_limit_s > 0:
        head.append(f"#SBATCH --signal=TERM@{int(options.term_before_limit_s)}")
    for flag, value in (("partition", options.partition), ("account", options.account),
                        ("qos", options.qos), ("time", options.time_limit),
                        ("constraint", options.constraint),
                        ("gpus-per-node", options.gpus_per_node or None),
                        ("cpus-per-task", options.cpus_per_task),
                        ("mem", options.mem_per_task)):
        if value is not None and value != "":
            head.append(f"#SBATCH --{flag}={value}")
    body = ["", "# Stop: scancel --batch --signal=USR1 tells this shell to start no further "
                "stage,", "# scancel --signal=TERM has the running stage save and end.",
            "trap 'stop_requested=1' USR1 TERM", ""]
    if options.setup_lines:
        body += ["# set-up"] + list(options.setup_lines) + [""]
    body += [f"PYTHON={shlex.quote(options.python)}",
             f"export PYTHONPATH={shlex.quote(str(REPO_ROOT))}${{PYTHONPATH:+:$PYTHONPATH}}",
             "export PYTHONUNBUFFERED=1",
             f"export {RUN_MARKER}={shlex.quote(run_id)}"]
    body += [f"export {k}={shlex.quote(str(v))}" for k, v in options.nccl_env.items()]
    cpus = f" --cpus-per-task={options.cpus_per_task}" if options.cpus_per_task else ""
    for plan in stages:
        n = stage_nodes(plan)
        env = "".join(f" --env {shlex.quote(f'{k}={v}')}" for k, v in plan.env.items())
        log = shlex.quote(str(files.log(plan.name)))
        body += ["",
                 f"# ---- stage {plan.name}",
                 f"echo \"{LOG_PREFIX} job $SLURM_JOB_ID (restart ${{SLURM_RESTART_COUNT:-0}}): "
                 f"stage {plan.name} starts\"",
                 f"srun --nodes={options.job_nodes(n)} --ntasks={n} "
                 f"--ntasks-per-node={min(n, max(1, options.machines_per_node))}{cpus} "
                 f"--job-name={shlex.quote(plan.name)} --kill-on-bad-exit=1 \\",
                 f"    \"$PYTHON\" -m {LAUNCH_MODULE} --run-dir {shlex.quote(str(files.run_dir))} "
                 f"--stage {shlex.quote(plan.name)}{env} -- \\",
                 f"    {_quote_argv(plan.argv)} \\",
                 f"    >> {log} 2>&1",
                 "rc=$?",
                 f"echo \"{LOG_PREFIX} job $SLURM_JOB_ID: stage {plan.name} exit code $rc\"",
                 "if [ \"$rc\" -ne 0 ]; then exit \"$rc\"; fi",
                 f"if [ -n \"${{stop_requested:-}}\" ]; then echo \"{LOG_PREFIX} stop requested "
                 f"after stage {plan.name}: no further stage starts\"; exit {STOPPED_EXIT}; fi"]
    return "\n".join(head + body) + "\n"


def probe_script(options: SlurmOptions, answer: Path, log: Path, token: str) -> str:
    """The storage probe's job (``backend.jobs.slurm_runs.StorageProbe``): one task on one
    node of the run's partition writes ``<token> <node> <time>`` into ``answer``."""
    head = ["#!/bin/bash",
            "# ZeroLoRA storage probe: can the nodes write where this server reads the runs?",
            "#SBATCH --job-name=zerolora-storage-probe",
            "#SBATCH --nodes=1",
            "#SBATCH --ntasks=1",
            f"#SBATCH --output={log}",
            "#SBATCH --time=5",
            "#SBATCH --no-requeue"]
    for flag, value in (("partition", options.partition), ("account", options.account),
                        ("qos", options.qos), ("constraint", options.constraint)):
        if value:
            head.append(f"#SBATCH --{flag}={value}")
    target = shlex.quote(str(answer))
    body = ["", "set -e",
            f"printf '%s %s %s\\n' {shlex.quote(token)} \"$(hostname -s)\" "
            f"\"$(date -u +%Y-%m-%dT%H:%M:%SZ)\" > {target}.part",
            f"mv {target}.part {target}",
            f"echo \"{LOG_PREFIX} storage probe $SLURM_JOB_ID wrote {answer} on $(hostname -s)\""]
    return "\n".join(head + body) + "\n"


def sbatch_path(run_dir: Path) -> Path:
    return RunDir(Path(run_dir)).sbatch


def write_sbatch(stages: list[StagePlan], run_dir: Path, options: SlurmOptions,
                 run_id: str) -> Path:
    """Write the run's ``sbatch`` script into its folder (and ``logs/``); returns its path."""
    files = RunDir(Path(run_dir))
    files.logs.mkdir(parents=True, exist_ok=True)
    path = sbatch_path(files.run_dir)
    path.write_text(sbatch_script(stages, files.run_dir, options, run_id), encoding="utf-8")
    path.chmod(0o755)
    return path


def sbatch_test_only(script: Path) -> tuple[bool, str]:
    """``sbatch --test-only``: whether SLURM would accept the script, and what it says."""
    rc, out = run_tool(["sbatch", "--test-only", str(script)])
    return rc == 0, out.strip()


# ----------------------------------------------------------------------------- job facts
def slurm_seconds(limit: str | None) -> int | None:
    """A SLURM time (``90``, ``MM:SS``, ``HH:MM:SS``, ``D-HH``, ``D-HH:MM``,
    ``D-HH:MM:SS``) in seconds; None for none, ``UNLIMITED`` or a malformed one."""
    text = str(limit or "").strip()
    if not text or not SLURM_TIME.match(text) or not text[0].isdigit():
        return None
    days, _, rest = text.rpartition("-")
    parts = [int(x) for x in rest.split(":")]
    if days:  # D-HH, D-HH:MM, D-HH:MM:SS
        h, m, s = (parts + [0, 0])[:3]
        return int(days) * 86400 + h * 3600 + m * 60 + s
    if len(parts) == 1:   # minutes
        return parts[0] * 60
    if len(parts) == 2:   # MM:SS
        return parts[0] * 60 + parts[1]
    return parts[0] * 3600 + parts[1] * 60 + parts[2]


def _exit(code: str | None) -> tuple[int | None, int | None]:
    """SLURM's ``ExitCode=code:signal``."""
    m = re.match(r"^(\d+):(\d+)$", code or "")
    if not m:
        return None, None
    return int(m[1]), (int(m[2]) or None)


def job_facts(job_id: str) -> dict[str, str] | None:
    """What SLURM says of a job: ``State``, ``Reason``, ``NodeList``, ``ExitCode``,
    ``TimeLimit`` (where known); None when no source knows it. ``squeue`` first (queued and
    running jobs), then ``sacct`` (accounting, else the job completion log), then
    ``scontrol show job`` (recently ended jobs)."""
    rc, out = run_tool(["squeue", "-h", "-j", job_id, "-o", "%i|%T|%r|%N|%l"])
    for line in out.splitlines():
        parts = line.strip().split("|")
        if rc == 0 and len(parts) == 5 and parts[0] == job_id:
            return {"State": parts[1], "Reason": parts[2], "NodeList": parts[3],
                    "TimeLimit": parts[4], "source": "squeue"}
    for extra in ([], ["--completion"]):
        rc, out = run_tool(["sacct", *extra, "-n", "-P", "-X", "-j", job_id,
                            "-o", "JobID,State,ExitCode,NodeList,TimelimitRaw"
                            if not extra else "JobID,State,ExitCode,NodeList"])
        rows = [ln.split("|") for ln in out.splitlines() if ln.split("|")[0] == job_id]
        if rc == 0 and rows:
            row = rows[-1]
            facts = {"State": row[1].split()[0], "ExitCode": row[2], "NodeList": row[3],
                     "source": "sacct"}
            if len(row) > 4:
                facts["TimeLimit"] = row[4]
            return facts
    rc, out = run_tool(["scontrol", "-o", "show", "job", job_id])
    if rc == 0 and out.startswith("JobId="):
        f = _fields(out.splitlines()[0])
        return {"State": f.get("JobState", "UNKNOWN"), "Reason": f.get("Reason", ""),
                "NodeList": f.get("NodeList", ""), "ExitCode": f.get("ExitCode", ""),
                "TimeLimit": f.get("TimeLimit", ""), "Restarts": f.get("Restarts", ""),
                "source": "scontrol"}
    return None


def time_left(job_id: str) -> int | None:
    """Seconds before the job's time limit (``squeue -o %L``); None without one."""
    try:
        rc, out = run_tool(["squeue", "-h", "-j", str(job_id), "-o", "%L"])
    except SlurmError:
        return None
    return slurm_seconds(out.strip()) if rc == 0 else None


def scontrol_restarts(job_id: str) -> int:
    """How often SLURM restarted the job's batch script (``scontrol``'s ``Restarts``:
    requeued by preemption, ``scontrol requeue``, a node failure); 0 when unknown."""
    rc, out = run_tool(["scontrol", "-o", "show", "job", job_id])
    m = re.search(r"\bRestarts=(\d+)", out) if rc == 0 else None
    return int(m[1]) if m else 0


def log_restarts(run_dir: Path, job_id: str) -> int:
    """The highest ``(restart N)`` the job's script wrote into ``logs/slurm.log``."""
    found = [int(m[1]) for ln in _batch_lines(run_dir, job_id)
             for m in [re.search(r"\(restart (\d+)\)", ln)] if m]
    return max(found, default=0)


def _batch_lines(run_dir: Path, job_id: str) -> list[str]:
    text = read_tail(RunDir(Path(run_dir)).log(BATCH_LOG), 256 * 1024)
    head = f"{LOG_PREFIX} job {job_id}"
    return [ln for ln in text.splitlines()
            if ln.startswith(head) and ln[len(head):len(head) + 1] in (" ", ":")]


def stop_requested(run_dir: Path, job_id: str) -> bool:
    """Whether the app asked the job to stop (``SlurmExecutor.stop`` says so in
    ``logs/slurm.log``): a job SLURM cancelled or ended with SIGTERM without that request
    was ended from outside (``scancel``, an admin) and counts as failed, with a diagnosis."""
    return any(ln.endswith(STOP_LINE) for ln in _batch_lines(run_dir, job_id))


def stage_of(run_dir: Path, job_id: str) -> tuple[str | None, int | None]:
    """The last stage the job started (from ``logs/slurm.log``) and its exit code (None
    while it runs or when the job ended before it could say)."""
    stage, code = None, None
    for line in _batch_lines(run_dir, job_id):
        m = re.search(r": stage (\S+) starts$", line)
        if m:
            stage, code = m[1], None
        m = re.search(r": stage (\S+) exit code (\d+)$", line)
        if m and m[1] == stage:
            code = int(m[2])
    return stage, code


# ----------------------------------------------------------------------------- diagnosis
def scheduler_diagnosis(state: str, facts: dict[str, str], options: SlurmOptions, *,
                        exit_code: int | None = None, job: str = "?") -> Diagnosis | None:
    """The plain-language diagnosis of an end state the scheduler imposed, or of a job
    ended from outside the app: cancelled or sent SIGTERM without a stop request
    (``CANCELLED``, a stage's 143), or its stage killed with SIGKILL (a stage's 137:
    ``scancel --signal=KILL <job>.<step>``, a step's memory limit)."""
    limit = facts.get("TimeLimit") or options.time_limit or "?"
    mem = options.mem_per_task or "?"
    if state == "CANCELLED" or (state == "FAILED" and exit_code == STOPPED_EXIT):
        return Diagnosis("slurm_cancelled", Msg("slurm.cancelled", state=state),
                         Msg("slurm.cancelled_explained", job=job),
                         [Msg("slurm.fix_resume"), Msg("slurm.fix_stop_from_page")],
                         settings=["save_steps"])
    if state == "FAILED" and exit_code in (137, -9):
        return Diagnosis("slurm_killed", Msg("slurm.killed", state=state),
                         Msg("slurm.killed_explained", job=job),
                         [Msg("slurm.fix_resume_saved"), Msg("slurm.fix_stop_from_page"),
                          Msg("slurm.fix_who_killed", job=job, mem=mem)],
                         settings=["save_steps", "slurm_mem_per_task"])
    if state == "TIMEOUT":
        return Diagnosis("slurm_timeout", Msg("slurm.timeout"),
                         Msg("slurm.timeout_explained", limit=limit),
                         [Msg("slurm.fix_time_limit", limit=limit), Msg("slurm.fix_fewer_steps")],
                         settings=["slurm_time_limit", "max_train_steps", "save_steps"])
    if state == "NODE_FAIL":
        return Diagnosis("slurm_node_fail", Msg("slurm.node_fail"),
                         Msg("slurm.node_fail_explained"),
                         [Msg("slurm.fix_resume_saved"), Msg("slurm.fix_bad_node")],
                         settings=["save_steps", "slurm_constraint"])
    if state == "OUT_OF_MEMORY":
        return Diagnosis("slurm_oom", Msg("slurm.oom"), Msg("slurm.oom_explained", mem=mem),
                         [Msg("slurm.fix_more_memory", mem=mem), Msg("slurm.fix_less_ram")],
                         settings=["slurm_mem_per_task", "offload_param_device",
                                   "offload_optimizer_device", "dataset_num_workers"])
    if state == "PREEMPTED":
        return Diagnosis("slurm_preempted", Msg("slurm.preempted"),
                         Msg("slurm.preempted_explained"),
                         [Msg("slurm.fix_resume"), Msg("slurm.fix_no_preempt")],
                         settings=["slurm_partition", "slurm_qos"])
    return None


# ----------------------------------------------------------------------------- the executor
class SlurmExecutor(Executor):
    """Runs go to SLURM as one ``sbatch`` job each (see the module docstring)."""

    name = "slurm"

    def __init__(self, options: SlurmOptions | None = None):
        self.options = options or SlurmOptions()

    @staticmethod
    def available() -> Msg | None:
        """Why runs cannot go to SLURM from this machine (None: they can)."""
        return None if shutil.which("sbatch") else Msg("slurm.no_sbatch")

    def refusals(self, stages: list[StagePlan]) -> list[Msg]:
        """Every reason not to submit (no sbatch; the options; the partition's limits)."""
        missing = self.available()
        if missing:
            return [missing]
        return self.options.problems() + check_cluster(
            self.options, self.options.job_nodes(max([stage_nodes(p) for p in stages] or [1])))

    def submit(self, stages: list[StagePlan], run_dir: Path, *, run_id: str) -> Job:
        problems = self.refusals(stages)
        if problems:
            raise SlurmError(problems)
        run_dir = Path(run_dir).expanduser().resolve()
        script = write_sbatch(stages, run_dir, self.options, run_id)
        return Job(self.name, self._sbatch(script), run_id, run_dir)

    def _sbatch(self, script: Path) -> str:
        rc, out = run_tool(["sbatch", "--parsable", str(script)])
        if rc != 0:
            raise SlurmError([Msg("slurm.submit_refused", why=_last_line(out))])
        m = _JOB_ID.search(out)
        if not m:
            raise SlurmError([Msg("slurm.no_job_id", why=_last_line(out))])
        return m[1]

    def status(self, job: Job) -> JobStatus:
        facts = job_facts(job.job_id)
        if facts is None:
            raise SlurmError([Msg("slurm.unknown_job", job=job.job_id)])
        state = facts["State"].rstrip("+")
        code, sig = _exit(facts.get("ExitCode"))
        stage, stage_code = stage_of(job.run_dir, job.job_id)
        nodes = hostnames(facts["NodeList"]) if facts.get("NodeList") not in \
            (None, "", "(null)", "None assigned") else []
        reason = facts.get("Reason") if facts.get("Reason") not in (None, "", "None") else None
        live = state in QUEUED_STATES or state in RUNNING_STATES
        restarts = max(log_restarts(job.run_dir, job.job_id),
                       int(facts["Restarts"]) if facts.get("Restarts", "").isdigit() else 0,
                       scontrol_restarts(job.job_id) if live and
                       facts.get("source") != "scontrol" else 0)
        if state in QUEUED_STATES:
            text = Msg("slurm.queued", job=job.job_id, reason=reason or state) \
                if not restarts else Msg("slurm.requeued", job=job.job_id, n=restarts,
                                         reason=reason or state)
            return JobStatus(job.job_id, "queued", state, reason, [], stage=stage,
                             text=text, restarts=restarts)
        if state in RUNNING_STATES:
            where = ", ".join(nodes) or facts.get("NodeList", "")
            text = Msg("slurm.running", job=job.job_id, nodes=where) if not restarts else \
                Msg("slurm.running_requeued", job=job.job_id, nodes=where, n=restarts)
            return JobStatus(job.job_id, "running", state, None, nodes, stage=stage,
                             text=text, restarts=restarts)
        if stage_code is not None and stage_code != 0:
            code = stage_code
        if state == "COMPLETED" and (code or 0) == 0:
            status = "succeeded"
        elif (state == "CANCELLED" or code == STOPPED_EXIT) and \
                stop_requested(job.run_dir, job.job_id):
            status = "stopped"
        else:
            # Cancelled or sent SIGTERM from outside the app, a scheduler's end state
            # (TIMEOUT ...), a stage that failed: failed, with a diagnosis (``failure``).
            status = "failed"
        shown = code if code is not None else "?"
        text = Msg("slurm.ended", job=job.job_id, state=state, exit=shown) if not restarts \
            else Msg("slurm.ended_requeued", job=job.job_id, state=state, exit=shown,
                     n=restarts)
        return JobStatus(job.job_id, status, state, None, nodes, code, sig, stage,
                         text=text, restarts=restarts)

    def log_path(self, job: Job, stage: str) -> Path:
        """A stage's log; ``"slurm"``: the job's own output (``logs/slurm.log``)."""
        return RunDir(job.run_dir).log(stage)

    def stop(self, job: Job, wait: bool = False) -> None:
        """``scancel --batch --signal=USR1`` (the script starts no further stage), then
        ``scancel --signal=TERM`` (the running stage saves and ends); after ``stop_grace_s`` a job still there is cancelled. A
        queued job is cancelled at once. With ``wait``, returns once the job has ended."""
        st = self.status(job)
        if st.ended:
            return
        batch_log = RunDir(job.run_dir).log(BATCH_LOG)
        batch_log.parent.mkdir(parents=True, exist_ok=True)
        with batch_log.open("a", encoding="utf-8") as f:
            f.write(f"{LOG_PREFIX} job {job.job_id}{STOP_LINE}\n")
        if st.status == "queued":
            _checked(["scancel", job.job_id])
        else:
            # The shell first (no further stage), then the running step. Not --full: srun
            # takes a SIGTERM of its own as "cancel the step" and kills the stage at once.
            _checked(["scancel", "--batch", "--signal=USR1", job.job_id])
            _checked(["scancel", "--signal=TERM", job.job_id])
        deadline = time.monotonic() + self.options.stop_grace_s

        def finish() -> None:
            while time.monotonic() < deadline:
                if self.status(job).ended:
                    return
                time.sleep(1.0)
            run_tool(["scancel", job.job_id])
            while not self.status(job).ended and time.monotonic() < deadline + 120:
                time.sleep(1.0)

        if wait:
            finish()
        else:
            threading.Thread(target=finish, name=f"slurm-stop-{job.job_id}",
                             daemon=True).start()

    def resume(self, job: Job) -> Job:
        """Submit the run's script again as a new job: stages that succeeded are skipped,
        training continues from ``output/state`` (``backend.jobs.slurm_launch``)."""
        st = self.status(job)
        if st.status not in ("stopped", "failed"):
            raise SlurmError([Msg("slurm.cannot_resume", job=job.job_id, status=st.status)])
        return Job(self.name, self._sbatch(sbatch_path(job.run_dir)), job.run_id, job.run_dir)

    def failure(self, job: Job) -> dict | None:
        """The failure facts of a failed job (``Runner.failure_summary``'s shape, plus
        ``job_id`` and ``scheduler_state``): a scheduler's end state explained first, then
        what the stage's own log says."""
        st = self.status(job)
        if st.status != "failed":
            return None
        facts = job_facts(job.job_id) or {}
        stage = st.stage or "?"
        log_path = self.log_path(job, stage)
        log_text = read_tail(log_path, 256 * 1024)
        end = last_end_event(RunDir(job.run_dir).progress, stage)
        summary = diagnosis.summarize(stage, st.exit_code, log_text,
                                      end_reason=end_reason(end))
        state = st.scheduler_state or ""
        if st.exit_code == STOPPED_EXIT and TIME_NEAR_LINE in log_text:
            state = "TIMEOUT"  # ended by --signal=TERM before the limit, its state saved
        found = scheduler_diagnosis(state, facts, self.options, exit_code=st.exit_code,
                                    job=job.job_id)
        if found is not None:
            # SLURM's account of a kill replaces the generic "killed from outside" one.
            summary["diagnoses"] = [found.to_dict()] + [
                d for d in summary["diagnoses"]
                if not (found.kind == "slurm_killed" and d.get("kind") == "killed")]
            summary["headline"] = Msg("diagnosis.headline_title", stage=stage,
                                      how=summary["exit_text"], title=found.title)
        summary.update(job_id=job.job_id, run_id=job.run_id, scheduler_state=st.scheduler_state,
                       reason=st.text, log_path=str(log_path))
        return summary
