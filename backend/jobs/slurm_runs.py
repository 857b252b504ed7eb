"""The app's runner with runs sent to SLURM: the same history, owners, logs and buttons.

    runner = SlurmRunner(workspace, executor="slurm",      # launch.py --executor slurm
                         server=SlurmOptions(partition="gpu"))
    run_id = runner.submit(cfg, owner="alice")   # one sbatch job; its id in the history
    runner.get_run(run_id)["slurm_job_id"]       # status followed from squeue / sacct
    runner.tail_log(run_id, "train", 0)          # logs and progress: the run folder
    runner.stop(run_id)                          # scancel --signal=TERM: the stage saves
    runner.resume(run_id)                        # a new job from the saved state

``SlurmRunner`` is ``backend.jobs.runner.Runner`` for every local run (unchanged: the local
supervisor, the per-GPU queue). A run whose ``executor`` is ``slurm`` (every run, on a
server started with ``--executor slurm``: a run's ``local`` is then written down as
``slurm`` in its run.yaml, and an empty ``slurm_partition`` as the server's) is planned into
its run folder as a local one is, then handed to ``backend.jobs.slurm.SlurmExecutor``: its
``sbatch`` script (``slurm.sbatch``) runs the stages as one job. The history records it as
any run (owner, name, stages, log paths, the resolved config with the owner's read roots)
plus ``slurm_job_id``; SLURM's queue replaces the local one for it (``backend.jobs.queue``
and the supervisor's recovery leave such rows alone).

Followed from SLURM: each look (``reattach``: the app's watcher every few seconds, the Run
tab's timer; ``get_run``/``list_runs`` at most every ``SYNC_EVERY_S``; ``wait``) asks
``SlurmExecutor.status`` and writes what it says into the history: queued with SLURM's
reason, running on which nodes with the stage that runs (``logs/slurm.log``), ended with
SLURM's state and exit code; the stages before the current one succeeded, the ones after
it skipped once the job ended. A failed run's failure facts (``failure_summary``) put a
scheduler's end state (TIMEOUT ...) first. Stop: the history records the request, then
``SlurmExecutor.stop`` (``scancel --signal=TERM``: training saves its state, then the job is
cancelled after the grace period). Resume: the history's resume (the same run id, an
attempt more), then a new job from the same script: finished stages are skipped and
training continues from ``output/state`` (``backend.jobs.slurm_launch``).

Refused for a run sent to SLURM: a token typed for that run alone (it would have to be
written into the job); shell set-up lines from a user whose run has read roots (a
signed-in non-admin: the server's ``--slurm-setup`` lines apply) and NCCL variables other
than ``NCCL_*`` from such a user.
"""
from __future__ import annotations

import shutil
import threading
import time
from pathlib import Path
from typing import Any

import yaml

from backend.config.schema import RunConfig
from backend.core.messages import Msg
from backend.core.rundir import RunDir, new_run_id
from backend.jobs.executor import Job, JobStatus
from backend.jobs.history import TERMINAL, msg_json, transaction
from backend.jobs.queue import disk_refusal
from backend.jobs.runner import Runner, RunnerError, check_before_start
from backend.jobs.slurm import SlurmError, SlurmExecutor, SlurmOptions, run_tool, write_sbatch
from backend.planning.plan import StagePlan, plan_run

EXECUTORS = ("local", "slurm")
# How often get_run / list_runs ask SLURM about a run that has not ended (seconds).
SYNC_EVERY_S = 2.0


def sends_to_slurm(runner: Runner) -> bool:
    """Whether the server sends every run to SLURM (``launch.py --executor slurm``)."""
    return isinstance(runner, SlurmRunner) and runner.executor == "slurm"


def form_defaults(runner: Runner) -> dict[str, Any]:
    """What the run form starts from on this server, over the schema's defaults: on a
    ``--executor slurm`` server, ``executor: slurm`` (so the ``slurm_*`` fields show) and
    the server's partition."""
    if not sends_to_slurm(runner):
        return {}
    out: dict[str, Any] = {"executor": "slurm"}
    if runner.server.partition:
        out["slurm_partition"] = runner.server.partition
    return out


def executor_problems(runner: Runner, cfg: RunConfig) -> list[Msg]:
    """Why this server cannot run ``cfg`` where it asks to run (the form shows it under
    ``executor`` as soon as it is chosen): SLURM on a server that runs the stages itself,
    or on one without ``sbatch`` on its PATH."""
    if cfg.executor != "slurm":
        return []
    if not isinstance(runner, SlurmRunner):
        return [Msg("slurm.local_runner", executor=cfg.executor)]
    missing = SlurmExecutor.available()
    return [missing] if missing else []


def plan_as_run(runner: Runner, cfg: RunConfig, run_dir: Path, *, cuda: bool,
                run_id: str) -> list[StagePlan]:
    """The run folder as this server would start ``cfg`` (the Training tab's preview):
    ``plan_run``, and for a run sent to SLURM its ``sbatch`` script too (planned for the
    nodes' GPUs, ``slurm_gpus_per_node``, rather than this machine's)."""
    if isinstance(runner, SlurmRunner):
        cfg = runner.resolved(cfg)
        if cfg.executor == "slurm":
            stages = plan_run(cfg, run_dir, cuda=cfg.slurm_gpus_per_node > 0)
            write_sbatch(stages, run_dir, runner.options(cfg), run_id)
            return stages
    return plan_run(cfg, run_dir, cuda=cuda)


def refused(problems: list[Any]) -> RunnerError:
    """A ``RunnerError`` carrying every problem (the page lists them; ``said``)."""
    err = RunnerError(problems[0] if len(problems) == 1 else "; ".join(map(str, problems)))
    err.problems = list(problems)
    return err


class SlurmRunner(Runner):
    """``Runner`` plus runs sent to SLURM (see the module docstring)."""

    def __init__(self, workspace: Path, *, executor: str = "local",
                 server: SlurmOptions | None = None, **kwargs: Any):
        if executor not in EXECUTORS:
            raise ValueError(f"executor: one of {', '.join(EXECUTORS)} (got {executor!r})")
        self.executor = executor
        self.server = server or SlurmOptions()
        self._slurm_lock = threading.RLock()
        self._synced: dict[str, float] = {}
        super().__init__(workspace, **kwargs)

    # ------------------------------------------------------------------ helpers
    def resolved(self, cfg: RunConfig) -> RunConfig:
        """``cfg`` as this server runs it: on a SLURM server every run goes to SLURM, and an
        empty partition is the server's (written into the run's run.yaml)."""
        update: dict[str, Any] = {}
        if self.executor == "slurm" and cfg.executor != "slurm":
            update["executor"] = "slurm"
        if (update.get("executor") or cfg.executor) == "slurm" and not cfg.slurm_partition \
                and self.server.partition:
            update["slurm_partition"] = self.server.partition
        return cfg.model_copy(update=update) if update else cfg

    def options(self, cfg: RunConfig) -> SlurmOptions:
        opts = SlurmOptions.from_config(cfg, self.server)
        opts.stop_grace_s = self.stop_grace_s
        return opts

    def _executor_of(self, run: dict) -> SlurmExecutor:
        """The executor with the options the run was submitted with (its run.yaml)."""
        try:
            data = yaml.safe_load(run.get("config_yaml") or "") or {}
            data.pop("schema_version", None)
            cfg = RunConfig.model_validate(data)
        except (yaml.YAMLError, ValueError, AttributeError):
            cfg = None  # an unreadable config: the server's options
        opts = self.options(cfg) if cfg is not None else SlurmOptions(
            **{**self.server.__dict__, "stop_grace_s": self.stop_grace_s})
        return SlurmExecutor(opts)

    @staticmethod
    def _job(run: dict) -> Job:
        return Job("slurm", str(run["slurm_job_id"]), run["id"], Path(run["run_dir"]))

    @staticmethod
    def user_problems(cfg: RunConfig) -> list[Msg]:
        """What a signed-in non-admin (a run with read roots) may not ask of SLURM."""
        if cfg.read_roots is None:
            return []
        found = []
        if cfg.slurm_setup_lines:
            found.append(Msg("slurm.setup_admins_only", n=len(cfg.slurm_setup_lines)))
        found += [Msg("slurm.nccl_only", got=line.split("=", 1)[0])
                  for line in cfg.slurm_nccl_env if not line.startswith("NCCL_")]
        return found

    # ------------------------------------------------------------------ submit
    def submit(self, cfg: RunConfig, owner: str | None = None, name: str | None = None,
               secret_env: dict[str, str] | None = None) -> str:
        cfg = self.resolved(cfg)
        if cfg.executor != "slurm":
            return super().submit(cfg, owner=owner, name=name, secret_env=secret_env)
        if secret_env:
            raise refused([Msg("slurm.no_secret_env", keys=sorted(secret_env))])
        problems: list[Any] = self.user_problems(cfg)
        missing = SlurmExecutor.available()
        if missing:
            problems.insert(0, missing)
        if problems:
            raise refused(problems)
        refusal = disk_refusal(self.workspace, self.min_free_disk_bytes)
        if refusal:
            raise RunnerError(refusal)
        check_before_start(cfg)
        run_id = new_run_id()
        run_dir = RunDir.new(self.workspace, run_id).run_dir
        run_dir.mkdir(parents=True)
        try:
            stages = plan_run(cfg, run_dir, cuda=cfg.slurm_gpus_per_node > 0)
            config_yaml = RunDir(run_dir).run_yaml.read_text(encoding="utf-8")
            try:
                job = SlurmExecutor(self.options(cfg)).submit(stages, run_dir, run_id=run_id)
            except SlurmError as e:
                raise refused(e.problems) from None
            try:
                return self.submit_stages(
                    stages, run_dir, config_yaml, owner=owner,
                    name=name or cfg.run_name or None, gpu_ids="all", run_id=run_id,
                    slurm_job_id=job.job_id)
            except BaseException:
                run_tool(["scancel", job.job_id])
                raise
        except BaseException:
            shutil.rmtree(run_dir, ignore_errors=True)
            raise

    # ------------------------------------------------------------------ follow
    def _active_slurm_runs(self) -> list[str]:
        conn = self._db()
        try:
            return [r["id"] for r in conn.execute(
                "SELECT id FROM runs WHERE slurm_job_id IS NOT NULL AND status IN "
                "('queued', 'running')")]
        finally:
            conn.close()

    def sync(self, run_id: str) -> None:
        """Write what SLURM says of the run's job into the history (a run that has not
        ended; nothing for a local one)."""
        with self._slurm_lock:
            run = Runner.get_run(self, run_id)
            self._synced[run_id] = time.monotonic()
            if not run.get("slurm_job_id") or run["status"] in TERMINAL:
                return
            job = self._job(run)
            ex = self._executor_of(run)
            try:
                st = ex.status(job)
            except SlurmError:
                st = JobStatus(job.job_id, "failed", text=Msg("slurm.job_lost", job=job.job_id))
            failure = None
            if st.status == "failed":
                try:
                    facts = ex.failure(job)
                except SlurmError:
                    facts = None
                failure = (facts or {}).get("headline") or st.text
            self._record(run, st, failure)

    def _record(self, run: dict, st: JobStatus, failure: Any) -> None:
        now = time.time()
        names = [s["name"] for s in run["stages"]]
        at = names.index(st.stage) if st.stage in names else None
        conn = self._db()
        try:
            with transaction(conn):
                fresh = self._row(conn, run["id"])
                if fresh["status"] in TERMINAL or fresh["slurm_job_id"] != run["slurm_job_id"]:
                    return  # settled or resubmitted meanwhile
                for i, stage in enumerate(run["stages"]):
                    status, code = self._stage_status(i, at, st, stage["status"])
                    if status == stage["status"] and code is None:
                        continue
                    conn.execute(
                        "UPDATE stages SET status = ?, exit_code = COALESCE(?, exit_code), "
                        "started_at = CASE WHEN ? IN ('running', 'succeeded', 'failed', "
                        "'stopped') THEN COALESCE(started_at, ?) ELSE started_at END, "
                        "ended_at = CASE WHEN ? IN ('succeeded', 'failed', 'stopped', "
                        "'skipped') THEN COALESCE(ended_at, ?) ELSE ended_at END "
                        "WHERE run_id = ? AND idx = ?",
                        (status, code, status, now, status, now, run["id"], i))
                if not st.ended:
                    conn.execute(
                        "UPDATE runs SET status = ?, note = ?, note_msg = ?, started_at = "
                        "CASE WHEN ? = 'running' THEN COALESCE(started_at, ?) ELSE started_at "
                        "END WHERE id = ?",
                        (st.status, st.text, msg_json(st.text), st.status, now, run["id"]))
                    return
                stop = run.get("stop_reason") or Msg("status.stopped")
                note = st.text if st.status != "stopped" else stop
                conn.execute(
                    "UPDATE runs SET status = ?, ended_at = ?, started_at = COALESCE("
                    "started_at, ?), failure_reason = ?, failure_reason_msg = ?, note = ?, "
                    "note_msg = ? WHERE id = ?",
                    (st.status, now, now, failure, msg_json(failure), note, msg_json(note),
                     run["id"]))
        finally:
            conn.close()

    @staticmethod
    def _stage_status(i: int, at: int | None, st: JobStatus, now: str
                      ) -> tuple[str, int | None]:
        """(status, exit code) of stage ``i`` when the job's current or last stage is
        ``at`` (None: no stage started yet)."""
        if now == "succeeded":
            return now, None
        if st.status == "succeeded":
            return "succeeded", 0 if at is not None and i <= at else None
        if at is None or i > at:
            return ("skipped" if st.ended else "queued"), None
        if i < at:
            return "succeeded", 0
        if not st.ended:
            return "running", None
        if st.status == "stopped" and st.exit_code == 0:
            return "succeeded", 0  # stopped between two stages
        return st.status, st.exit_code

    def _sync_due(self, run_id: str) -> None:
        if time.monotonic() - self._synced.get(run_id, 0.0) >= SYNC_EVERY_S:
            self.sync(run_id)

    def reattach(self, wait: bool = False) -> None:
        for run_id in self._active_slurm_runs():
            try:
                self.sync(run_id)
            except (RunnerError, SlurmError):
                pass  # the next look tries again
        super().reattach(wait=wait)

    def get_run(self, run_id: str) -> dict:
        run = super().get_run(run_id)
        if run.get("slurm_job_id") and run["status"] not in TERMINAL:
            self._sync_due(run_id)
            run = super().get_run(run_id)
        return run

    def list_runs(self, owner: str | None = None) -> list[dict]:
        for run_id in self._active_slurm_runs():
            self._sync_due(run_id)
        return super().list_runs(owner)

    def wait(self, run_id: str, timeout: float | None = None, poll_s: float = 0.2) -> dict:
        if not Runner.get_run(self, run_id).get("slurm_job_id"):
            return super().wait(run_id, timeout=timeout, poll_s=poll_s)
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            self.sync(run_id)
            run = Runner.get_run(self, run_id)
            if run["status"] in TERMINAL:
                return run
            if deadline is not None and time.monotonic() > deadline:
                raise TimeoutError(f"run {run_id} is still {run['status']} after {timeout:g} s")
            time.sleep(max(poll_s, 0.5))

    # ------------------------------------------------------------------ stop / resume
    def stop(self, run_id: str, wait: bool = False, reason: Any = None) -> None:
        run = Runner.get_run(self, run_id)
        if not run.get("slurm_job_id"):
            if reason is None:
                return super().stop(run_id, wait=wait)
            return super().stop(run_id, wait=wait, reason=reason)
        if run["status"] in TERMINAL:
            return
        reason = reason or Msg("note.stopped_on_request")
        conn = self._db()
        try:
            with transaction(conn):
                conn.execute(
                    "UPDATE runs SET stop_requested = 1, stop_requested_at = ?, "
                    "stop_reason_msg = CASE WHEN stop_reason IS NULL THEN ? "
                    "ELSE stop_reason_msg END, stop_reason = COALESCE(stop_reason, ?) "
                    "WHERE id = ?", (time.time(), msg_json(reason), reason, run_id))
        finally:
            conn.close()
        try:
            self._executor_of(run).stop(self._job(run), wait=wait)
        except SlurmError as e:
            raise refused(e.problems) from None
        if wait:
            self.wait(run_id, timeout=self.stop_grace_s + 180.0)

    def resume(self, run_id: str, secret_env: dict[str, str] | None = None) -> str:
        run = Runner.get_run(self, run_id)
        if not run.get("slurm_job_id"):
            return super().resume(run_id, secret_env=secret_env)
        if secret_env:
            raise refused([Msg("slurm.no_secret_env", keys=sorted(secret_env))])
        with self._slurm_lock:
            self.sync(run_id)
            missing = SlurmExecutor.available()
            if missing:
                raise refused([missing])
            super().resume(run_id)  # the history's books: an attempt more, queued
            run = Runner.get_run(self, run_id)
            try:
                job = self._executor_of(run).resume(self._job(run))
            except SlurmError as e:
                why = Msg("slurm.resubmit_failed", why=e.problems[0] if e.problems else "")
                self._fail(run_id, why)
                raise refused(e.problems) from None
            conn = self._db()
            try:
                with transaction(conn):
                    conn.execute("UPDATE runs SET slurm_job_id = ?, note = NULL, "
                                 "note_msg = NULL WHERE id = ?", (job.job_id, run_id))
            finally:
                conn.close()
            self._synced.pop(run_id, None)
        return run_id

    def _fail(self, run_id: str, why: Msg) -> None:
        conn = self._db()
        try:
            with transaction(conn):
                conn.execute("UPDATE runs SET status = 'failed', ended_at = ?, "
                             "failure_reason = ?, failure_reason_msg = ? WHERE id = ?",
                             (time.time(), why, msg_json(why), run_id))
                conn.execute("UPDATE stages SET status = 'skipped' WHERE run_id = ? AND "
                             "status = 'queued'", (run_id,))
        finally:
            conn.close()

    def failure_summary(self, run_id: str) -> dict | None:
        """A failed SLURM run: the scheduler's end state explained first
        (``SlurmExecutor.failure``), else what the history and the stage's log say."""
        run = self.get_run(run_id)
        if run.get("slurm_job_id") and run["status"] == "failed":
            try:
                facts = self._executor_of(run).failure(self._job(run))
            except SlurmError:
                facts = None
            if facts:
                return facts
        return super().failure_summary(run_id)

    def delete(self, run_id: str, remove_files: bool = True) -> None:
        """A queued SLURM run leaves SLURM's queue first (a running one is refused)."""
        run = Runner.get_run(self, run_id)
        if run.get("slurm_job_id") and run["status"] == "queued":
            run_tool(["scancel", str(run["slurm_job_id"])])
        super().delete(run_id, remove_files=remove_files)
