"""Preflight: what a run's stages would read, checked before the run is accepted.

The stages refuse bad inputs themselves (stage 1 before any model loads), but only once the
run has waited its turn in the queue. These functions ask the stages' own questions before
the run is queued -- ``backend.jobs.runner.check_before_start`` calls them from
``Runner.submit``, so the API's ``/start_run`` and the Run tab's Start alike -- with the
stages' own check functions, so a refusal reads word for word as the stage would say it:

- ``dataset_problems(cfg)``: what stage 1 (or one-shot training) reads from the dataset,
  ``backend.data.video.check_stage_dataset`` (images and an edit model's input images, or clips),
  in its ``headers_only`` mode: an image's header, a clip's packets and first frame, never
  a full decode; then the ``validation_samples`` the train stage holds out
  (``backend.data.batches.hold_out``) against the samples stage 1 will cache (one per record),
  or against a train-only run's cache;
- ``sample_problems(cfg)``: a sample stage's prompts and their input images
  (``backend.training.samples.checked_sample_inputs``) and, without a train stage to make them, the
  checkpoints it renders (``resolve_checkpoints`` and ``plan_samples``).

Every file is opened through the run's read gate (``backend.core.readgate.for_config``): a
non-admin's run carries its read policy by now, so its preflight reads only what the run
may, and a file outside it reads as missing, as in the stage.

    problems = dataset_problems(cfg) + sample_problems(cfg)   # [] or one line per problem
"""
from __future__ import annotations

from pathlib import Path

from backend.core import messages, readgate
from backend.config.errors import ConfigError
from backend.config.schema import RunConfig
from backend.families import get_family
from backend.data.batches import DataOptionError, hold_out
from backend.data.cache import CacheError, check_cache
from backend.data.dataset import DatasetError
from backend.data.video import check_stage_dataset
from backend.training.preservation import check_class_dataset
from backend.training.samples import checked_sample_inputs, plan_samples, resolve_checkpoints


def _reads(cfg: RunConfig) -> tuple[bool, bool]:
    """(reads the raw dataset, reads a stage-1 cache) for the planned stages."""
    stages = list(cfg.stages)
    raw = "data_process" in stages or ("train" in stages and not cfg.split_training)
    cache = "train" in stages and cfg.split_training and "data_process" not in stages
    return raw, cache


def dataset_problems(cfg: RunConfig) -> list[str]:
    """What the planned stages would refuse in the dataset they read, in their words."""
    raw, cache = _reads(cfg)
    count, what = None, "sample"
    if raw:
        family = get_family(cfg.model_family).for_config(cfg)
        try:
            records = check_stage_dataset(cfg, family, headers_only=True)
            check_class_dataset(cfg, family, headers_only=True)  # prior preservation's
        except DatasetError as e:
            return list(e.problems)
        # Stage 1 caches one sample per record; one-shot training holds out images.
        count = len(records)
        what = "sample" if cfg.split_training else "image"
    elif cache:
        try:
            count = len(check_cache(Path(cfg.dataset_base_path).expanduser(),
                                    readgate.for_config(cfg)))
        except CacheError:
            return []  # said already by the runner's input check
    if "train" in cfg.stages and count is not None:
        try:
            hold_out(list(range(count)), cfg.validation_samples, what)
        except DataOptionError as e:
            return [messages.said(e)]
    return []


def sample_problems(cfg: RunConfig) -> list[str]:
    """What a planned sample stage would refuse before it loads a model."""
    if "sample" not in cfg.stages or not cfg.sample_prompts:
        return []
    try:
        if "train" in cfg.stages:  # its checkpoints do not exist yet
            checked_sample_inputs(cfg)
        else:  # it renders the LoRA the run names (backend.planning.plan.stage_argv)
            given = [cfg.lora_checkpoint] if cfg.lora_checkpoint else []
            plan_samples(cfg, resolve_checkpoints(given, False, readgate.for_config(cfg)))
    except ConfigError as e:
        return list(e.problems)
    return []
