"""The extract job: a run whose only stage is ``extract`` (``backend/stages/extract.py``): a
LoRA from one full checkpoint of a fine-tune run, written into that run's ``output/export/``.

    path = extraction_target(run_dir, "step-100", rank=64)        # where it will be written
    run_id = submit_extract(runner, run, "step-100", rank=64)      # "extract · step-100"

``runner`` is the job runner (``backend.jobs.runner.Runner``, which sits above this layer
and is passed in): what is used of it is ``workspace`` and ``submit_stages``. The base model
is the one the checkpoint records (``base_model_path`` of its own record), so nothing the
user types names a folder to read.
"""
from __future__ import annotations

import os
import sys
from pathlib import Path

from backend.config.errors import ConfigError, field_problem
from backend.config.schema import RunConfig
from backend.core.messages import Msg
from backend.core.rundir import RunDir, is_full_checkpoint, list_checkpoints, new_run_id
from backend.models.full import checkpoint_info
from backend.planning.plan import StagePlan, commands_script, stage_env

STAGE = "extract"
MODULE = "backend.stages.extract"


def rule_name(rank: int | None, energy: float | None) -> str:
    """``r64`` for a rank, ``e90`` for a share of the energy (as a file name part)."""
    return f"r{int(rank)}" if rank else f"e{round(float(energy) * 100):d}"


def full_checkpoint(run_dir: str | os.PathLike, name: str) -> Path:
    """The full checkpoint folder ``name`` of a run; ConfigError naming ``checkpoint``."""
    found = {p.name: p for p in list_checkpoints(RunDir(Path(run_dir)).output)}
    path = found.get(name)
    if path is None or not is_full_checkpoint(path):
        full = [n for n, p in found.items() if is_full_checkpoint(p)]
        raise ConfigError([field_problem("checkpoint", Msg(
            "extract.job.not_full", got=repr(name), allowed=", ".join(full) or "-"))])
    return path


def extraction_target(run_dir: str | os.PathLike, name: str, rank: int | None = None,
                      energy: float | None = None) -> Path:
    return RunDir(Path(run_dir)).extracted_lora(name, rule_name(rank, energy))


def plan_extract(cfg: RunConfig, job_dir: str | os.PathLike, base: Path, tuned: Path,
                 out: Path, rank: int | None, energy: float | None):
    """Write an extract job's commands.sh into ``job_dir``; returns its one stage."""
    files = RunDir(Path(job_dir).resolve())
    files.run_dir.mkdir(parents=True, exist_ok=True)
    argv = [sys.executable, "-m", MODULE, "--base", str(base), "--tuned", str(tuned),
            "--out", str(out), "--model_family", cfg.model_family,
            "--progress_file", str(files.progress)]
    argv += ["--rank", str(int(rank))] if rank else ["--energy", repr(float(energy))]
    plan = StagePlan(STAGE, argv, stage_env(cfg, STAGE, cuda=False))
    files.commands.write_text(commands_script([plan], [], files.run_dir), encoding="utf-8")
    return plan


def submit_extract(runner, run: dict, cfg: RunConfig, name: str, *, rank: int | None = None,
                   energy: float | None = None, owner: str | None = None) -> str:
    """Queue the extraction of checkpoint ``name`` of ``run`` (a full fine-tune; ``cfg`` its
    config); returns the job's run id. Refused (ConfigError, naming the field) before
    anything is queued: no such full checkpoint, neither or both of rank and energy, a
    rank below 1, an energy outside (0, 1]."""
    problems = []
    if (rank is None) == (energy is None):
        problems.append(field_problem("rank", Msg("extract.job.rank_or_energy")))
    elif rank is not None and int(rank) < 1:
        problems.append(field_problem("rank", Msg("extract.job.rank", got=rank)))
    elif energy is not None and not 0 < float(energy) <= 1:
        problems.append(field_problem("energy", Msg("extract.job.energy", got=energy)))
    if problems:
        raise ConfigError(problems)
    tuned = full_checkpoint(run["run_dir"], name)
    base = Path(str(checkpoint_info(tuned).get("base_model_path") or ""))
    out = extraction_target(run["run_dir"], name, rank, energy)
    job_id = new_run_id()
    job_dir = RunDir.new(runner.workspace, job_id).run_dir
    plan = plan_extract(cfg, job_dir, base, tuned, out, rank, energy)
    return runner.submit_stages([plan], job_dir, cfg.to_yaml(), owner=owner,
                                name=f"extract · {run.get('name') or run['id']} {name}",
                                gpu_ids=cfg.gpu_ids, run_id=job_id)
