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

Checked before submission (``time_limit_check``): a ``slurm_time_limit`` shorter than the
run needs is refused, naming the field and the figures. The estimator has no seconds per
step of its own, so the figure is measured: the newest earlier SLURM run in the history with
the same family, resolution and DeepSpeed setting (``speed_key``) whose progress file has
timed steps gives its seconds per step, its stage-1, samples and start-up times; the run's
steps (``planned_steps``) times that, plus those. Without such a run the limit is accepted
with a note on the run's train stage saying it could not be checked.

Shared storage (``StorageProbe``): on the first run sent to SLURM (or when the server
starts with ``--executor slurm``: ``probe_storage``) a tiny job writes a line (a token, the
node, the time) into ``runs/.storage_probe/`` and the server reads it back, in the
background; the page shows ``pending`` while it waits in the queue and a warning when it
ran but its file is not visible here. Runs are never held back for it.

Refused for a run sent to SLURM: a token typed for that run alone (it would have to be
written into the job); shell set-up lines from a user whose run has read roots (a
signed-in non-admin: the server's ``--slurm-setup`` lines apply) and NCCL variables other
than ``NCCL_*`` from such a user.
"""
from __future__ import annotations

import math
import secrets
import shutil
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from backend.config.schema import RunConfig
from backend.core.messages import Msg
from backend.core.progress import read_events
from backend.core.rundir import ProbeFiles, RunDir, new_run_id
from backend.data.dataset import dataset_bucket_plan
from backend.families import family_of
from backend.jobs.executor import Job, JobStatus
from backend.jobs.history import TERMINAL, connect, msg_json, transaction
from backend.jobs.queue import disk_refusal
from backend.jobs.runner import Runner, RunnerError, check_before_start
from backend.jobs.slurm import (QUEUED_STATES, RUNNING_STATES, SlurmError, SlurmExecutor,
                                SlurmOptions, job_facts, probe_script, run_tool,
                                slurm_seconds, write_sbatch)
from backend.planning.estimator import resolution
from backend.planning.plan import StagePlan, plan_run
from backend.training.loop import StepPlan

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


def probe_state(runner: Runner) -> dict[str, Any] | None:
    """The shared-storage probe's state (``StorageProbe.state``) for the page: on a server
    that sends runs to SLURM, or once a run went there; None otherwise."""
    if not isinstance(runner, SlurmRunner):
        return None
    state = runner.probe.state()
    return state if sends_to_slurm(runner) or state["state"] != "idle" else None


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


# ----------------------------------------------------------------------------- time limit
def speed_key(cfg: RunConfig) -> tuple:
    """What makes one run's seconds per step another's: the family, the training
    resolution, the DeepSpeed setting (ZeRO stage, where parameters and optimizer states
    live), the processes and GPUs per node, and the images per process and step."""
    h, w = resolution(cfg)
    return (family_of(cfg.to_dict())[0], h, w, cfg.zero_stage, cfg.offload_param_device,
            cfg.offload_optimizer_device, cfg.num_processes, cfg.slurm_gpus_per_node,
            cfg.batch_size * cfg.gradient_accumulation_steps)


def planned_steps(cfg: RunConfig) -> int | None:
    """The optimizer steps the train stage will take: ``max_train_steps`` (capped by
    ``max_steps``), else from the dataset's bucket plan split over the processes (as the
    train stage's ``StepPlan``); None when the dataset cannot be read here."""
    if cfg.max_train_steps:
        return min(cfg.max_train_steps, cfg.max_steps or cfg.max_train_steps)
    try:
        batches = sum(r["batches"] for r in dataset_bucket_plan(cfg)["rows"])
    except (OSError, ValueError, KeyError):
        return None
    if not batches:
        return None
    per_process = math.ceil(batches / max(1, cfg.num_processes))
    return StepPlan.of(cfg, per_process, cfg.gradient_accumulation_steps).total


@dataclass(frozen=True)
class StepTime:
    """Seconds per step measured by an earlier run, and its other stages' seconds."""

    run_id: str
    s_per_step: float
    steps: int             # the steps the figure is measured over
    startup_s: float       # train: from its start to its first step
    stage1_s: float        # data_process, start to end (0: not measured)
    sample_s: float        # sample, start to end (0: not measured)


def measured_step_time(run_id: str, run_dir: Path) -> StepTime | None:
    """The step time a run's progress file shows (its train stage's ``step`` events, each
    start of the stage on its own), with its stage-1 and sample durations."""
    events, _ = read_events(RunDir(run_dir).progress)
    starts: dict[str, float] = {}
    took: dict[str, float] = {}
    timed: list[list[tuple[int, float]]] = []
    startup: list[float] = []
    for ev in events:
        stage, kind, at = ev.get("stage"), ev.get("event"), ev.get("time")
        if not isinstance(at, (int, float)):
            continue
        if kind == "start":
            starts[stage] = at
            if stage == "train":
                timed.append([])
        elif kind == "end" and stage in starts:
            took[stage] = at - starts.pop(stage)
        elif kind == "step" and stage == "train" and timed and isinstance(ev.get("step"), int):
            if not timed[-1] and "train" in starts:
                startup.append(at - starts["train"])
            timed[-1].append((ev["step"], at))
    steps, seconds = 0, 0.0
    for attempt in timed:
        if len(attempt) >= 2:
            steps += attempt[-1][0] - attempt[0][0]
            seconds += attempt[-1][1] - attempt[0][1]
    if steps <= 0 or seconds <= 0:
        return None
    return StepTime(run_id, seconds / steps, steps, max(startup, default=0.0),
                    took.get("data_process", 0.0), took.get("sample", 0.0))


def step_time_like(workspace: Path, cfg: RunConfig) -> StepTime | None:
    """The newest measurement of an earlier SLURM run in the history with ``cfg``'s
    ``speed_key``: the cluster's own seconds per step (a local run's are this machine's)."""
    want = speed_key(cfg)
    conn = connect(workspace)
    try:
        rows = conn.execute("SELECT id, run_dir, config_yaml FROM runs WHERE slurm_job_id IS "
                            "NOT NULL ORDER BY seq DESC").fetchall()
    finally:
        conn.close()
    for row in rows:
        try:
            data = yaml.safe_load(row["config_yaml"] or "") or {}
            data.pop("schema_version", None)
            other = RunConfig.model_validate(data)
        except (yaml.YAMLError, ValueError, AttributeError):
            continue
        if speed_key(other) != want:
            continue
        found = measured_step_time(row["id"], Path(row["run_dir"]))
        if found is not None:
            return found
    return None


def slurm_time_text(seconds: float) -> str:
    """Seconds as SLURM writes a time: ``D-HH:MM:SS`` (``HH:MM:SS`` under a day)."""
    s = int(math.ceil(seconds))
    days, s = divmod(s, 86400)
    text = f"{s // 3600:02d}:{s % 3600 // 60:02d}:{s % 60:02d}"
    return f"{days}-{text}" if days else text


def time_limit_check(workspace: Path, cfg: RunConfig) -> tuple[Msg | None, Msg | None]:
    """(refusal, note) for the run's ``slurm_time_limit``: refused when shorter than its
    steps times the measured seconds per step plus stage 1, samples and start-up (as the
    measuring run took them); a note when it cannot be checked or when it was."""
    limit = slurm_seconds(cfg.slurm_time_limit)
    if limit is None or "train" not in cfg.stages:
        return None, None
    got = cfg.slurm_time_limit
    steps = planned_steps(cfg)
    if steps is None:
        return None, Msg("slurm.time_unchecked_steps", got=got)
    measured = step_time_like(Path(workspace), cfg)
    if measured is None:
        return None, Msg("slurm.time_unchecked", got=got, steps=steps)
    extra = measured.startup_s + (measured.stage1_s if "data_process" in cfg.stages else 0.0) \
        + (measured.sample_s if "sample" in cfg.stages else 0.0)
    need = steps * measured.s_per_step + extra
    figures = dict(got=got, limit_s=limit, need=slurm_time_text(need), need_s=round(need),
                   steps=steps, s_per_step=round(measured.s_per_step, 3),
                   extra_s=round(extra), run=measured.run_id, measured=measured.steps)
    if limit < need:
        return Msg("slurm.time_too_short", **figures), None
    return None, Msg("slurm.time_checked", **figures)


# ----------------------------------------------------------------------------- storage probe
class StorageProbe:
    """A tiny job that shows whether the nodes and this server share the runs folder.

    ``start()`` (once; later calls do nothing) submits ``runs/.storage_probe/probe.sbatch``
    in a thread: the job writes ``<token> <node> <time>`` into ``answer-<token>.txt``, and
    the server reads it back once the job has ended. ``state()``: ``{"state": ...,
    "text": Msg, "job_id", "node", "path"}`` where state is ``idle`` (not started),
    ``pending`` (submitted, waiting in the queue), ``running``, ``ok`` (read back),
    ``missing`` (the job ended but its file is not visible here, or it could not write it:
    a warning) or ``refused`` (SLURM refused the job)."""

    def __init__(self, workspace: Path, options: SlurmOptions, *, poll_s: float = 2.0,
                 visible_wait_s: float = 10.0, give_up_s: float = 24 * 3600.0):
        self.files = ProbeFiles.of(workspace)
        self.options = options
        self.poll_s = poll_s
        self.visible_wait_s = visible_wait_s  # shared file systems cache a folder briefly
        self.give_up_s = give_up_s
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._state: dict[str, Any] = {"state": "idle", "text": Msg("slurm.probe_idle")}

    def start(self) -> "StorageProbe":
        with self._lock:
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="slurm-storage-probe",
                                                daemon=True)
                self._thread.start()
        return self

    def state(self) -> dict[str, Any]:
        with self._lock:
            return dict(self._state)

    def wait(self, timeout: float) -> dict[str, Any]:
        """The state once the probe has an answer (``ok``, ``missing``, ``refused``) or
        ``timeout`` seconds passed."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and self.state()["state"] not in \
                ("ok", "missing", "refused"):
            time.sleep(0.2)
        return self.state()

    def _set(self, state: str, text: Msg, **facts: Any) -> None:
        with self._lock:
            self._state = {**self._state, **facts, "state": state, "text": text}

    def _run(self) -> None:
        token = secrets.token_hex(8)
        answer = self.files.answer(token)
        try:
            self.files.folder.mkdir(parents=True, exist_ok=True)
            self.files.script.write_text(probe_script(self.options, answer, self.files.log,
                                                      token), encoding="utf-8")
            rc, out = run_tool(["sbatch", "--parsable", str(self.files.script)])
        except (SlurmError, OSError) as e:
            why = e.problems[0] if isinstance(e, SlurmError) and e.problems else str(e)
            self._set("refused", Msg("slurm.probe_refused", why=why))
            return
        job = out.strip().split(";")[0] if rc == 0 else ""
        if not job.isdigit():
            self._set("refused", Msg("slurm.probe_refused", why=out.strip()[-300:]))
            return
        self._set("pending", Msg("slurm.probe_pending", job=job, reason="submitted"),
                  job_id=job, path=str(answer))
        deadline = time.monotonic() + self.give_up_s
        facts: dict[str, str] = {}
        while time.monotonic() < deadline:
            try:
                facts = job_facts(job) or {}
            except SlurmError:
                facts = {}
            state = facts.get("State", "").rstrip("+")
            if state in QUEUED_STATES:
                self._set("pending", Msg("slurm.probe_pending", job=job,
                                         reason=facts.get("Reason") or state))
            elif state in RUNNING_STATES:
                self._set("running", Msg("slurm.probe_running", job=job))
            elif state:
                break
            time.sleep(self.poll_s)
        node = facts.get("NodeList") or "?"
        seen = time.monotonic() + self.visible_wait_s
        while True:
            try:
                said = answer.read_text(encoding="utf-8").split()
            except OSError:
                said = []
            if said[:1] == [token]:
                where = said[1] if len(said) > 1 else node
                self._set("ok", Msg("slurm.probe_ok", job=job, node=where,
                                    written=said[2] if len(said) > 2 else "?"),
                          node=where)
                answer.unlink(missing_ok=True)
                return
            if time.monotonic() > seen:
                break
            time.sleep(0.5)
        self._set("missing", Msg("slurm.probe_missing", job=job, node=node,
                                 state=facts.get("State") or "?", path=str(answer),
                                 folder=str(self.files.folder.parent)), node=node)


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
        self.probe = StorageProbe(self.workspace, self.server)

    def probe_storage(self) -> dict[str, Any]:
        """Start the shared-storage probe (once; in the background) and say where it stands."""
        if SlurmExecutor.available() is None:
            self.probe.start()
        return self.probe.state()

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
        too_short, time_note = time_limit_check(self.workspace, cfg)
        if too_short is not None:
            problems.append(too_short)
        if problems:
            raise refused(problems)
        refusal = disk_refusal(self.workspace, self.min_free_disk_bytes)
        if refusal:
            raise RunnerError(refusal)
        check_before_start(cfg)
        self.probe_storage()
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
                self.submit_stages(
                    stages, run_dir, config_yaml, owner=owner,
                    name=name or cfg.run_name or None, gpu_ids="all", run_id=run_id,
                    slurm_job_id=job.job_id)
            except BaseException:
                run_tool(["scancel", job.job_id])
                raise
            if time_note is not None:
                self._stage_note(run_id, "train", time_note)
            return run_id
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
            except SlurmError as e:
                if not any(getattr(p, "code", "") == "slurm.unknown_job" for p in e.problems):
                    return  # a client command failed or timed out (a busy slurmctld): later
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
        if not st.ended:  # running, or back in the queue (requeued)
            return ("running" if st.status == "running" else "queued"), None
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

    def _stage_note(self, run_id: str, stage: str, note: Msg) -> None:
        """A note on one stage of the run (the Run tab's stage table shows it)."""
        conn = self._db()
        try:
            with transaction(conn):
                conn.execute("UPDATE stages SET note = ?, note_msg = ? WHERE run_id = ? AND "
                             "name = ?", (note, msg_json(note), run_id, stage))
        finally:
            conn.close()

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
