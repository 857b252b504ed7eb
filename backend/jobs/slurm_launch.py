"""The per-node launcher of a stage under SLURM: ``srun`` starts it once per node.

    srun --nodes=2 --ntasks=2 --ntasks-per-node=1 --job-name=train \\
        python -m backend.jobs.slurm_launch --run-dir /shared/runs/<id> --stage train -- \\
        python -m accelerate.commands.launch --config_file .../accelerate_train.yaml \\
        -m backend.stages.train --config .../run.yaml ...

    # what it would run, without running it (one JSON line per task):
    srun -n 2 python -m backend.jobs.slurm_launch --dry-run --run-dir R --stage train -- ...

It reads ``SLURM_PROCID`` (this task's rank in the step: the machine rank, one task per
node, or one of the tasks packed onto a node: ``SlurmOptions.machines_per_node``),
``SLURM_NTASKS`` (the machines), ``SLURM_NODEID`` / ``SLURM_LOCALID`` (reported, one line per
task in the stage's log) and
the step's node list (``SLURM_STEP_NODELIST``, else ``SLURM_JOB_NODELIST``, expanded with
``scontrol show hostnames``: the first host is the main process's address). The port is
the same on every node without talking: ``20000 + (job id x 16 + step id) mod 40000``.
An ``accelerate launch`` argv gets ``--num_machines``, ``--machine_rank``,
``--main_process_ip`` and ``--main_process_port`` right after ``launch`` (any earlier ones
removed); another argv (samples) runs as it is. The stage runs as an argv list through
``backend.jobs.processes.start_stage`` with its output on this task's output (``srun``
gathers it into the stage's log), never through a shell.

Requeued or resumed jobs: a stage whose progress file already says ``end{succeeded}`` is
skipped (exit 0), and the ``train`` stage continues from ``output/state`` when a state was
saved (``--resume_from``), so a job requeued after preemption picks up where it was.

SIGTERM / SIGINT (``scancel --signal=TERM``; ``--signal=TERM@N`` before the time limit, then
the launcher says so in the log: ``TIME_NEAR_LINE``) are passed to the stage's process
group: the stage saves and ends, and the launcher exits with the stage's code (143 when stopped) once
every process of the group has ended (the training process outlives ``accelerate launch``
while it saves).
"""
from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import sys
import time
from pathlib import Path

from backend.core.messages import Msg
from backend.core.rundir import RunDir
from backend.jobs.processes import become_subreaper, child_env, group_alive, start_stage
from backend.jobs.runner import with_resume_from
from backend.jobs.slurm import (TIME_NEAR_LINE, TIME_NEAR_S, SlurmError, hostnames,
                                is_accelerate_launch, time_left)
from backend.jobs.watch import LOG_PREFIX, STAGE_HEADER, last_end_event
from backend.planning.plan import LAUNCH

RANK_FLAGS = ("--num_machines", "--machine_rank", "--main_process_ip", "--main_process_port")
PORT_BASE = 20000
PORT_SPAN = 40000
LEFTOVER_S = 10.0  # what a stage that ended by itself left running, before SIGKILL


def step_facts(environ: dict[str, str]) -> dict:
    """This task's place in the SLURM step (raises ``SlurmError`` outside one)."""
    for name in ("SLURM_PROCID", "SLURM_NTASKS", "SLURM_JOB_ID"):
        if not environ.get(name):
            raise SlurmError([Msg("slurm.not_in_step", name=name)])
    nodelist = environ.get("SLURM_STEP_NODELIST") or environ.get("SLURM_JOB_NODELIST")
    if not nodelist:
        raise SlurmError([Msg("slurm.not_in_step", name="SLURM_JOB_NODELIST")])
    job, step = int(environ["SLURM_JOB_ID"]), int(environ.get("SLURM_STEP_ID") or 0)
    hosts = hostnames(nodelist)
    return {"job_id": job, "step_id": step, "rank": int(environ["SLURM_PROCID"]),
            "num_machines": int(environ["SLURM_NTASKS"]),
            "node_id": int(environ.get("SLURM_NODEID") or 0),
            "local_id": int(environ.get("SLURM_LOCALID") or 0),
            "restart": int(environ.get("SLURM_RESTART_COUNT") or 0),
            "hosts": hosts, "main_process_ip": hosts[0],
            "main_process_port": PORT_BASE + (job * 16 + step) % PORT_SPAN}


def with_rank_flags(argv: list[str], facts: dict) -> list[str]:
    """An accelerate launch argv with this task's machine flags after ``launch``."""
    at = next((i + 2 for i in range(len(argv) - 1) if tuple(argv[i:i + 2]) == LAUNCH), None)
    if at is None:
        at = 2  # `accelerate launch ...`
    head, rest = argv[:at], argv[at:]
    kept: list[str] = []
    skip = False
    for i, arg in enumerate(rest):
        if skip:
            skip = False
            continue
        if arg in ("-m", "--module") or arg.endswith(".py"):
            kept += rest[i:]  # the training script and its own arguments
            break
        if arg in RANK_FLAGS:
            skip = True
            continue
        if arg.split("=", 1)[0] in RANK_FLAGS:
            continue
        kept.append(arg)
    flags = ["--num_machines", str(facts["num_machines"]),
             "--machine_rank", str(facts["rank"]),
             "--main_process_ip", facts["main_process_ip"],
             "--main_process_port", str(facts["main_process_port"])]
    return head + flags + kept


def stage_argv(argv: list[str], stage: str, run_dir: Path, facts: dict) -> list[str]:
    """What this task runs: ``train`` from the saved state when there is one, an
    accelerate launch with this task's machine flags, the Python of this environment."""
    files = RunDir(run_dir)
    if stage == "train" and files.has_state():
        argv = with_resume_from(argv, files.state)
    if is_accelerate_launch(argv):
        argv = with_rank_flags(argv, facts)
    return argv


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if "--" not in args:
        print("usage: python -m backend.jobs.slurm_launch --run-dir DIR --stage NAME "
              "[--env K=V ...] [--dry-run] -- <stage argv>", file=sys.stderr)
        return 2
    cut = args.index("--")
    p = argparse.ArgumentParser(prog="python -m backend.jobs.slurm_launch", allow_abbrev=False)
    p.add_argument("--run-dir", required=True, type=Path)
    p.add_argument("--stage", required=True)
    p.add_argument("--env", action="append", default=[], metavar="K=V")
    p.add_argument("--dry-run", action="store_true",
                   help="print what would run (one JSON line) and exit")
    opts = p.parse_args(args[:cut])
    command = args[cut + 1:]
    if not command:
        p.error("no stage argv after --")
    try:
        facts = step_facts(dict(os.environ))
    except SlurmError as e:
        print(f"{LOG_PREFIX} {e}", file=sys.stderr, flush=True)
        return 2
    first = facts["rank"] == 0
    files = RunDir(opts.run_dir)
    ended = last_end_event(files.progress, opts.stage)
    if ended and ended.get("status") == "succeeded":
        if first:
            print(f"{LOG_PREFIX} stage {opts.stage!r} already succeeded (an earlier job): "
                  f"skipped", flush=True)
        return 0
    run = stage_argv(command, opts.stage, opts.run_dir, facts)
    extra = dict(kv.split("=", 1) for kv in opts.env if "=" in kv)
    if opts.dry_run:
        print(json.dumps({**{k: v for k, v in facts.items() if k != "hosts"},
                          "hosts": facts["hosts"], "argv": run, "env": extra}), flush=True)
        return 0
    # Every task says where it is and which machine it is (two tasks packed onto one node
    # differ in SLURM_PROCID and SLURM_LOCALID, two nodes in SLURM_NODEID).
    print(f"{LOG_PREFIX} task SLURM_PROCID={facts['rank']} SLURM_LOCALID={facts['local_id']} "
          f"SLURM_NODEID={facts['node_id']} on {socket.gethostname()}: machine_rank "
          f"{facts['rank']} of {facts['num_machines']}", flush=True)
    if first:
        print(f"{STAGE_HEADER} '{opts.stage}' (SLURM job {facts['job_id']} step "
              f"{facts['step_id']}, restart {facts['restart']}) started "
              f"{time.strftime('%Y-%m-%d %H:%M:%S')} on {', '.join(facts['hosts'])}: "
              f"{' '.join(run)}", flush=True)
    sys.stdout.flush()
    become_subreaper()  # the stage's orphans (accelerate's workers) stay ours to wait for
    proc = start_stage(run, child_env(extra), sys.stdout.buffer)
    stopping: list[int] = []

    def forward(signum, _frame) -> None:
        stopping.append(signum)
        try:
            os.killpg(proc.pid, signum)
        except ProcessLookupError:
            pass

    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGUSR1):
        signal.signal(sig, forward)
    rc = proc.wait()
    # accelerate launch ends at once on SIGTERM while its training process, in the same
    # group, saves the state: wait for the whole group (the step ends when we do, and SLURM
    # kills what is left), as the local supervisor does. Leftovers of a stage that ended by
    # itself get LEFTOVER_S.
    since = time.monotonic()
    while group_alive(proc.pid):
        if not stopping and time.monotonic() - since > LEFTOVER_S:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            break
        time.sleep(0.2)
    if first and stopping:
        left = time_left(str(facts["job_id"]))
        if left is not None and left <= TIME_NEAR_S:
            print(f"{LOG_PREFIX} {TIME_NEAR_LINE} ({left} s left, --signal=TERM): the "
                  f"stage saved its state; Resume continues from it", flush=True)
    if first:
        print(f"{LOG_PREFIX} stage {opts.stage!r} exit code {rc}", flush=True)
    return 128 - rc if rc < 0 else rc


if __name__ == "__main__":
    sys.exit(main())
