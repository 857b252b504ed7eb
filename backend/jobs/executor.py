"""Executors: where a run's stages run, behind one interface.

A run is planned the same way whatever runs it (``backend.planning.plan.plan_run`` writes the
run folder and returns its ``StagePlan`` list); an executor takes those stages and the run
folder and carries them out, one after another, the next starting only when the one before
succeeded. Two exist:

- ``LocalExecutor`` (the default): today's local supervisor, ``backend.jobs.runner.Runner``
  (a detached supervisor per run on the machine that serves the page, the per-GPU queue, the
  SQLite history). A thin adapter: the runner is unchanged.
- ``SlurmExecutor`` (``backend.jobs.slurm``): an ``sbatch`` job on a SLURM cluster; the
  scheduler's queue replaces the local one. The app's runner sends runs there and follows
  them in its history through ``backend.jobs.slurm_runs.SlurmRunner`` (``launch.py
  --executor slurm``).

The interface (``Executor``), which a Kubernetes Jobs or Ray executor would implement as one
more module of ``backend/jobs/``:

``submit(stages, run_dir, *, run_id)`` -> ``Job``
    Queue the stages (refusing before anything is queued, as ``ExecutorError`` with every
    problem, when the request cannot run there). Returns a handle: the executor's name, its
    own job id (the run id locally, SLURM's job id), the run id and the run folder.
``status(job)`` -> ``JobStatus``
    Where it stands, in the history's words (``queued`` / ``running`` / ``succeeded`` /
    ``failed`` / ``stopped``) plus the scheduler's own facts: its state word, why it waits,
    the nodes it runs on, its exit code, the current stage, how often the scheduler
    restarted it (a job requeued by preemption resumes from its saved state by itself).
``log_path(job, stage)`` -> ``Path``
    The stage's log. Every executor writes the stage's output to the run folder's
    ``RunDir.log(stage)`` (on storage the nodes share), so tailing, progress and diagnosis
    read the same files whatever ran the stage.
``stop(job, wait=False)``
    SIGTERM to the stage (training saves its full state), a grace period, then a hard stop.
``resume(job)`` -> ``Job``
    Run a stopped or failed run again from its saved state: stages that succeeded are not
    run again, training continues from ``output/state``. The handle may change (SLURM
    submits a new job; locally the run id stays).
``failure(job)`` -> ``dict | None``
    For a failed job, the failure facts in the shape of ``Runner.failure_summary`` (stage,
    exit code and its words, headline, diagnoses with what to change, last log lines, log
    path), plus ``scheduler_state`` where a scheduler ended it (``TIMEOUT`` ...).

Executors never import the UI and start processes only through ``backend.jobs.processes``.
"""
from __future__ import annotations

import abc
import socket
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from backend.core.messages import Msg
from backend.core.rundir import RunDir
from backend.jobs.runner import Runner, RunnerError
from backend.planning.plan import StagePlan

# The history's words for where a run stands (``backend.jobs.history``).
STATUSES = ("queued", "running", "succeeded", "failed", "stopped")


class ExecutorError(RuntimeError):
    """A request an executor refuses; ``problems`` holds every reason (messages, each
    naming its field where one is to blame)."""

    def __init__(self, problems: list[Any]):
        self.problems = list(problems)
        super().__init__("; ".join(str(p) for p in self.problems))


@dataclass(frozen=True)
class Job:
    """A run handed to an executor."""

    executor: str   # "local", "slurm", ...
    job_id: str     # the executor's own id (local: the run id; SLURM: the job id)
    run_id: str
    run_dir: Path


@dataclass
class JobStatus:
    """Where a job stands."""

    job_id: str
    status: str                            # one of STATUSES
    scheduler_state: str | None = None     # the scheduler's word (SLURM: PENDING, TIMEOUT...)
    reason: str | None = None              # why it waits, in the scheduler's words
    nodes: list[str] = field(default_factory=list)
    exit_code: int | None = None
    signal: int | None = None              # the signal that ended it, where one did
    stage: str | None = None               # the stage running now, or the last one that ran
    text: Msg | None = None                # one line for people
    restarts: int = 0                      # times the scheduler restarted it (requeued)

    @property
    def ended(self) -> bool:
        return self.status in ("succeeded", "failed", "stopped")


class Executor(abc.ABC):
    """Runs a run's stages somewhere (see the module docstring for the contract)."""

    name: str = ""

    @abc.abstractmethod
    def submit(self, stages: list[StagePlan], run_dir: Path, *, run_id: str) -> Job: ...

    @abc.abstractmethod
    def status(self, job: Job) -> JobStatus: ...

    def log_path(self, job: Job, stage: str) -> Path:
        return RunDir(job.run_dir).log(stage)

    @abc.abstractmethod
    def stop(self, job: Job, wait: bool = False) -> None: ...

    @abc.abstractmethod
    def resume(self, job: Job) -> Job: ...

    @abc.abstractmethod
    def failure(self, job: Job) -> dict | None: ...


class LocalExecutor(Executor):
    """Today's local supervisor (``Runner``) behind the executor interface."""

    name = "local"

    def __init__(self, runner: Runner):
        self.runner = runner

    def submit(self, stages: list[StagePlan], run_dir: Path, *, run_id: str,
               config_yaml: str = "", owner: str | None = None, gpu_ids: str = "all") -> Job:
        if not config_yaml:
            yaml_file = RunDir(Path(run_dir)).run_yaml
            config_yaml = yaml_file.read_text(encoding="utf-8") if yaml_file.is_file() else ""
        try:
            rid = self.runner.submit_stages(stages, Path(run_dir), config_yaml, owner=owner,
                                            gpu_ids=gpu_ids, run_id=run_id)
        except RunnerError as e:
            raise ExecutorError([e.args[0] if e.args else str(e)]) from e
        return Job(self.name, rid, rid, Path(run_dir).expanduser().resolve())

    def status(self, job: Job) -> JobStatus:
        run = self.runner.get_run(job.run_id)
        ran = [s for s in run["stages"] if s["status"] not in ("queued", "skipped")]
        last = ran[-1] if ran else None
        code = last["exit_code"] if last and run["status"] in ("failed", "stopped") else None
        if run["status"] == "succeeded":
            code = 0
        return JobStatus(
            job_id=job.job_id, status=run["status"], exit_code=code,
            signal=-code if code is not None and code < 0 else None,
            stage=run["current_stage"] or (last["name"] if last else None),
            nodes=[socket.gethostname()] if run["status"] == "running" else [])

    def stop(self, job: Job, wait: bool = False) -> None:
        self.runner.stop(job.run_id, wait=wait)

    def resume(self, job: Job) -> Job:
        try:
            self.runner.resume(job.run_id)
        except RunnerError as e:
            raise ExecutorError([e.args[0] if e.args else str(e)]) from e
        return job

    def failure(self, job: Job) -> dict | None:
        return self.runner.failure_summary(job.run_id)
