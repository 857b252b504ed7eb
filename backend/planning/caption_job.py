"""The caption job: a run whose only stage is ``caption`` (``backend/stages/caption.py``).

    problems = caption_problems(cfg)             # backend.data.captions: field: problem
    run_id = submit_caption(runner, cfg, owner)  # the runner's run "caption · <folder>"
    active_caption_runs(runner, folder)          # queued/running caption runs on a folder

``runner`` is the job runner (``backend.jobs.runner.Runner``, which sits above this layer
and is passed in): what is used of it is ``workspace``, ``submit_stages`` and
``list_runs``. The job's folder holds its run.yaml, commands.sh and the journal
(``RunDir.caption_journal``) its stage appends to, so a resumed job skips the images it
captioned.
"""
from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Iterable

import yaml

from backend.core.rundir import RunDir, new_run_id
from backend.config.schema import RunConfig
from backend.data.captions import CaptionError, caption_problems
from backend.planning.plan import StagePlan, commands_script, resolved_config, stage_env

STAGE = "caption"
MODULE = "backend.stages.caption"
ACTIVE = ("queued", "running")


def job_name(cfg: RunConfig) -> str:
    return f"caption · {Path(cfg.dataset_base_path or '').name or cfg.dataset_base_path}"


def plan_caption(cfg: RunConfig, job_dir: str | os.PathLike):
    """Write a caption job's run.yaml and commands.sh into ``job_dir``; returns (its one
    stage, the resolved config)."""
    files = RunDir(Path(job_dir).resolve())
    files.run_dir.mkdir(parents=True, exist_ok=True)
    cfg = resolved_config(cfg, files.run_dir)
    cfg.save(files.run_yaml)
    argv = [sys.executable, "-m", MODULE, "--config", str(files.run_yaml),
            "--journal", str(files.caption_journal)]
    plan = StagePlan(STAGE, argv, stage_env(cfg, STAGE, cuda=False))
    files.commands.write_text(commands_script([plan], [], files.run_dir), encoding="utf-8")
    return plan, cfg


def submit_caption(runner, cfg: RunConfig, owner: str | None = None,
                   secret_env: dict[str, str] | None = None) -> str:
    """Queue a caption job for ``cfg`` (checked first: ``CaptionError`` names every
    problem, nothing is queued); returns its run id. A folder another caption job is
    writing is refused."""
    problems = caption_problems(cfg)
    busy = active_caption_runs(runner, cfg.dataset_base_path)
    if busy:
        problems.append(f"dataset_base_path: caption run {busy[0]['id']} is writing this "
                        f"folder's captions (got {cfg.dataset_base_path!r}; allowed wait for "
                        f"it or stop it)")
    if problems:
        raise CaptionError(problems)
    job_id = new_run_id()
    job_dir = RunDir.new(runner.workspace, job_id).run_dir
    plan, cfg = plan_caption(cfg, job_dir)
    kwargs = {"secret_env": secret_env} if secret_env else {}
    return runner.submit_stages([plan], job_dir, cfg.to_yaml(), owner=owner,
                                name=cfg.run_name or job_name(cfg), gpu_ids=cfg.gpu_ids,
                                run_id=job_id, **kwargs)


def is_caption_run(run: dict) -> bool:
    return [s["name"] for s in run.get("stages", [])] == [STAGE]


def _same_folder(a: str | None, b: str | None) -> bool:
    if not a or not b:
        return False
    try:
        return os.path.realpath(os.path.expanduser(a)) == os.path.realpath(os.path.expanduser(b))
    except (OSError, ValueError):
        return False


def active_caption_runs(runner, folder: str | None,
                        runs: Iterable[dict] | None = None) -> list[dict]:
    """Queued or running caption runs that write ``folder``'s captions."""
    out = []
    for run in (runs if runs is not None else runner.list_runs()):
        if run.get("status") not in ACTIVE or not is_caption_run(run):
            continue
        data = yaml.safe_load(run.get("config_yaml") or "") or {}
        if _same_folder(data.get("dataset_base_path"), folder):
            out.append(run)
    return out
