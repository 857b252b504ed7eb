"""Training stage: stage 1 (cache), stage 2 (LoRA from the cache) and one-shot ``sft``.

Runbook (GPU, the low-VRAM recipe: stage 1 plain, stage 2 under ZeRO-3 CPU offload; the
reference trainer's flags, ``$TEXT_AND_VAE`` / ``$TRANSFORMER`` the ``model_id:glob``
sources of the family's components; each family's folder docstring gives its own)::

    accelerate launch -m backend.stages.train --task sft:data_process \\
      --dataset_base_path data/example_image_dataset \\
      --dataset_metadata_path data/example_image_dataset/metadata.csv \\
      --model_id_with_origin_paths "$TEXT_AND_VAE" --output_path ./models/train/cache
    accelerate launch --config_file deepspeed_zero3_cpuoffload.yaml -m backend.stages.train \\
      --task sft:train --dataset_base_path ./models/train/cache \\
      --model_id_with_origin_paths "$TRANSFORMER" \\
      --lora_rank 32 --learning_rate 1e-4 --num_epochs 5 --dataset_repeat 50 \\
      --use_gradient_checkpointing --initialize_model_on_cpu \\
      --output_path ./models/train/lora

(``--config run.yaml`` reads a run config first, flags win; the family is recognised from
the sources, or named with ``--model_family``). Stage 1 holds the text encoder and VAE on
the GPU together; on a smaller GPU add ``--data_process_offload model`` (one at a time) or
``sequential`` (weights stream from host RAM module by module). The cache is the same
either way.

Tiny CPU run from the repository root (the committed demo model and data set; seconds)::

    accelerate launch --cpu -m backend.stages.train --task sft:data_process \\
      --model_id_with_origin_paths $DEMO_MODEL \\
      --dataset_base_path backend/assets/demo_dataset \\
      --dataset_metadata_path backend/assets/demo_dataset/metadata.csv \\
      --output_path /tmp/zl/cache
    accelerate launch --cpu -m backend.stages.train --task sft:train \\
      --model_id_with_origin_paths $DEMO_MODEL \\
      --dataset_base_path /tmp/zl/cache --lora_rank 4 --learning_rate 1e-3 \\
      --num_epochs 5 --save_steps 10 --output_path /tmp/zl/out

(``$DEMO_MODEL``: the ``model_id_with_origin_paths`` of ``presets/cpu_demo.yaml``; any
folder from ``python -m backend.families.tiny DIR`` works as the model too).

Writes (stage 2 / sft) into ``output_path``: ``epoch-{i}.safetensors`` (no ``save_steps``)
or ``step-{N}.safetensors`` (every ``save_steps`` plus a final one) -- with
``--trainable_models dit`` (a full fine-tune, no LoRA) the folders ``epoch-{i}/`` /
``step-{N}/``, the transformer in diffusers layout (``backend/models/full.py``) --, with
``--ema_decay`` each one's EMA twin beside it (``step-{N}-ema.safetensors`` / ``step-{N}-ema/``,
``backend/training/ema.py``),
``training_args.json``,
``state/`` (full resume state: LoRA, optimizer, step; ``--resume_from <output>/state``),
``tensorboard/`` (and the trackers the run asks for: ``metrics.csv``, ``wandb/``, ``swanlab/``;
backend/training/tracking.py), and progress events to ``progress_file`` (default
``output_path/progress.jsonl``; rank 0 only). Stage 1 writes the cache (backend/data/cache.py).

Options the launch decides: ``--mixed_precision`` given here (or in ``--config``) is
applied over the launch config's; ``--zero_stage`` and the offload devices come from the
launch (its DeepSpeed JSON), so a value given here that differs from what was launched is
refused, naming the launch config and the ``accelerate launch --use_deepspeed ...`` flags
that give it. ``training_args.json`` records what ran. ``--max_train_steps N`` trains N
optimizer steps (the epochs follow from it); ``--max_steps`` only caps the epochs' steps.

Exit codes: 0 succeeded; 1 failed (final event ``end`` status failed with a one-line
reason; traceback in the log; a full disk names the file and the space left); 2 invalid
options, also those that contradict the launch (nothing trained); 143 stopped by SIGTERM
(SIGINT too): training finishes the current optimizer step, saves ``state/`` and a LoRA
``step-{N}.safetensors``, writes ``end`` status stopped, and exits 143. Stage 1 stops
between samples (with ``data_process_offload model``, between two prompts or two images);
finished samples stay cached.
"""
from __future__ import annotations

import json
import os
import sys
import time
import traceback
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from backend.config.cli import parse_stage_args
from backend.config.errors import ConfigError
from backend.config.lowvram import entries_for
from backend.config.paths import resolve_paths
from backend.config.schema import RunConfig
from backend.core import exits, rundir
from backend.core.messages import Msg
from backend.core.diskspace import (DiskFullError, FileSizeLimitError, disk_full_in,
                                    file_too_large_in, is_disk_full, is_file_too_large)
from backend.core.progress import ProgressWriter
from backend.core.readgate import for_config as read_gate
from backend.data.batches import (DataOptionError, Validation, drop_captions, to_device,
                                  write_empty_prompt)
from backend.data.cache import CacheError, build_cache
from backend.data.dataset import DatasetError
from backend.data.video import check_stage_dataset, load_clip_mask, load_clip_record, plan_clips
from backend.families import get_family
from backend.families.common import configure_deepspeed_checkpointing
from backend.models.hub import HubError, fingerprint, resolve_component_dirs
from backend.models.lora import shown_model_file, target_module_problems, write_json_atomic
from backend.models.quantize import keep_out_unneeded, quantize_frozen
from backend.training import class_images, optimizers, preservation, timesteps
from backend.training.ema import make_ema
from backend.training.launched import (accelerator_kwargs, launch_description, launch_problems,
                                       what_ran)
from backend.training.loop import (STATE_DIR, Checkpointer, StageError, StepPlan, Stopper,
                                   check_processes, check_resume, check_resume_options,
                                   current_lr, is_main_process, load_trainable_transformer, log,
                                   maybe_render_samples, one_line,
                                   process_info, read_trainer_state, step_generator,
                                   stop_requested, weight_dtype)
from backend.training.tracking import Trackers, check_trackers, device_metrics
from backend.training.optimizers import OptimizerError
from backend.training.sources import DataSource, data_source
from backend.stages import end_fields, reason_of

STAGE_OF_TASK = {"sft:data_process": "data_process", "sft:train": "train", "sft": "train"}
# Problems the user can fix: one message, no traceback.
USER_ERRORS = (ConfigError, StageError, DatasetError, CacheError, HubError, DiskFullError,
               FileSizeLimitError, DataOptionError, OptimizerError)


# ------------------------------------------------------------------------------------------
# Entry point
# ------------------------------------------------------------------------------------------
def _flag_value(argv: list[str], flag: str) -> str | None:
    """A flag's value in a command line that did not parse (to record why it failed)."""
    for i, a in enumerate(argv):
        if a == flag and i + 1 < len(argv):
            return argv[i + 1]
        if a.startswith(flag + "="):
            return a.split("=", 1)[1]
    return None


def main(argv: list[str] | None = None) -> int:
    try:
        cfg, ns = parse_stage_args(argv, prog="backend.stages.train",
                                   extra=class_images.stage1_parser())
        cfg = resolve_paths(cfg)
    except ConfigError as e:
        print(e, file=sys.stderr, flush=True)
        args = sys.argv[1:] if argv is None else list(argv)
        early = _flag_value(args, "--progress_file")
        if early:  # the runner reads the reason from here
            stage = STAGE_OF_TASK.get(_flag_value(args, "--task") or "sft", "train")
            ProgressWriter(early, stage, enabled=is_main_process()).emit(
                "end", **end_fields("failed", reason_of(e)))
        return exits.REFUSED
    if argv is None:  # this process is the stage: keep unused optional packages out
        keep_out_unneeded(cfg)
    given = ns.option_sources
    stage = STAGE_OF_TASK[cfg.task]
    progress_path = cfg.progress_file or str(Path(cfg.output_path) / rundir.PROGRESS)
    progress = ProgressWriter(progress_path, stage, enabled=is_main_process())
    stopper = Stopper()
    stopper.install()
    try:
        if cfg.task == "sft:data_process":
            status, fields = run_data_process(cfg, progress, stopper, given,
                                              classes_dir=ns.class_images_dir)
        else:
            status, fields = run_train(cfg, progress, stopper, given)
    except ConfigError as e:  # an option that contradicts the launch: nothing was trained
        print(e, file=sys.stderr, flush=True)
        progress.emit("end", **end_fields("failed", reason_of(e)))
        return exits.REFUSED
    except USER_ERRORS as e:
        print(f"error: {e}", file=sys.stderr, flush=True)
        progress.emit("end", **end_fields("failed", reason_of(e)))
        return exits.REFUSED
    except BaseException as e:  # noqa: BLE001 - the stage must always end with an event
        # A write not wrapped where it happens (e.g. a cache file): a full disk, or a file
        # past the process's file-size limit (ulimit -f), said as such.
        if is_disk_full(e) or is_file_too_large(e):
            e = (disk_full_in if is_disk_full(e) else file_too_large_in)(cfg.output_path, e)
            print(f"error: {e}", file=sys.stderr, flush=True)
            progress.emit("end", **end_fields("failed", reason_of(e)))
            return exits.RESOURCES
        traceback.print_exc()
        progress.emit("end", **end_fields("failed", reason_of(e, with_type=True)))
        return exits.of_unexpected(e)
    progress.emit("end", **end_fields(status, fields.pop("reason", None), **fields))
    return exits.STOPPED if status == "stopped" else exits.OK


# ------------------------------------------------------------------------------------------
# Stage 1
# ------------------------------------------------------------------------------------------
def run_data_process(cfg: RunConfig, progress: ProgressWriter, stopper: Stopper,
                     given: dict[str, str] | None = None,
                     classes_dir: str | None = None) -> tuple[str, dict[str, Any]]:
    if os.environ.get("ACCELERATE_USE_DEEPSPEED", "").lower() == "true":
        raise StageError(Msg("note.data_process_deepspeed"))
    family = get_family(cfg.model_family).for_config(cfg)
    media: dict[str, Any] = {}
    records = check_stage_dataset(cfg, family, log)  # before any model is touched
    class_records = preservation.check_class_dataset(cfg, family, log)
    class_records += class_images.rendered_records(cfg, family, classes_dir,  # class_prompt
                                                   len(class_records), log)
    if family.media == "video":  # clips decoded with PyAV (backend/data/video.py)
        media = {"planner": plan_clips, "loader": load_clip_record,
                 "mask_loader": load_clip_mask}
        log("[data_process] video clips: "
            + (f"frame_buckets {sorted(cfg.frame_buckets)}, " if cfg.frame_buckets
               else f"num_frames {cfg.num_frames}, ")
            + (f"video_fps {cfg.video_fps:g}" if cfg.video_fps
               else f"frame_stride {cfg.frame_stride}")
            + f", frame_extraction {cfg.frame_extraction}")
    components = family.spec.stage_components("data_process")
    dirs = resolve_component_dirs(cfg, components)
    model_fp = fingerprint(dirs[c] for c in components)
    # A quantized encoder writes other values: its cache is another cache.
    model_fp += [["quantized", e.component, e.method, list(e.skip or ())]
                 for c in ("text_encoder", "vae") for e in entries_for(cfg, c)]

    from accelerate import Accelerator

    accelerator = Accelerator(**accelerator_kwargs(cfg, given or {}))
    rank, world = process_info(accelerator)
    check_processes(accelerator, world)
    dtype = weight_dtype(accelerator.mixed_precision)
    offload = cfg.data_process_offload
    log(f"[data_process] {len(records)} samples -> {cfg.output_path} "
        f"({world} process(es), {accelerator.device}, {dtype}, offload {offload})")
    if offload != "none" and accelerator.device.type != "cuda":
        log(f"[data_process] data_process_offload {offload} saves no memory without a GPU "
            f"(weights and compute are both in host RAM); it runs all the same")
    encoder = preservation.SharedEncoder(  # loaded once for every cache this stage writes
        lambda: quantize_frozen(cfg, family.load_encoder(dirs, dtype, accelerator.device,
                                                         offload=offload), log=log))
    result = build_cache(
        cfg, records, encoder,
        model_fp, rank=rank, world=world,
        barrier=accelerator.wait_for_everyone, progress=progress, should_stop=stopper.is_set,
        log=log, **media)
    if preservation.enabled(cfg) and not result["stopped"]:  # the class set, DOP captions
        preservation.cache_stage1(cfg, family, class_records, encoder, model_fp, rank=rank,
                                  world=world, barrier=accelerator.wait_for_everyone,
                                  progress=progress, should_stop=stopper.is_set, log=log,
                                  media=media)
        result["stopped"] = int(stopper.is_set())
    encoder.drop()
    if cfg.caption_dropout and rank == 0 and not result["stopped"]:
        write_empty_prompt(cfg, lambda: family.load_encoder(dirs, dtype, accelerator.device,
                                                            offload=offload), model_fp, log)
    accelerator.end_training()  # tear the process group down before the interpreter exits
    fields = {k: result[k] for k in ("total", "encoded", "reused")}
    if result["stopped"]:
        return "stopped", {"reason": Msg("note.stopped_cached", signal=stopper.signal,
                                         n=result["encoded"]), **fields}
    return "succeeded", fields


# ------------------------------------------------------------------------------------------
# Stage 2 and one-shot sft
# ------------------------------------------------------------------------------------------
def run_train(cfg: RunConfig, progress: ProgressWriter, stopper: Stopper,
              given: dict[str, str] | None = None) -> tuple[str, dict[str, Any]]:
    # --- data source: the cache (sft:train) or the dataset encoded each step (sft), its
    # input checked before any heavy import or model load ---
    family = get_family(cfg.model_family).for_config(cfg)
    trained = family.spec.trained_component
    source = data_source(cfg, family)
    preservation.check_task(cfg)
    resume_state = read_trainer_state(Path(cfg.resume_from)) if cfg.resume_from else None
    if resume_state is not None:
        check_resume_options(resume_state, cfg)
    if cfg.lora_checkpoint and not read_gate(cfg).is_file(cfg.lora_checkpoint):
        raise StageError(Msg("note.lora_checkpoint_missing", got=repr(cfg.lora_checkpoint)))
    dirs = resolve_component_dirs(cfg, source.components)
    check_target_modules(cfg, dirs[trained] / "config.json")
    check_trackers(cfg)  # a tracker's package missing: refused before any model loads
    launch = Launch.start(cfg, given or {})
    accelerator, ds_plugin, ds_config = launch.accelerator, launch.ds_plugin, launch.ds_config
    out = Path(cfg.output_path)
    out.mkdir(parents=True, exist_ok=True)
    log(f"[train] task {cfg.task}, {launch.world} process(es) on {accelerator.device}, "
        f"{'ZeRO-%d' % launch.zero_stage if ds_config else 'no DeepSpeed'}, weights "
        f"{launch.dtype}, mixed precision {launch.ran['mixed_precision']}; launched with "
        f"{launch.description}")
    # TensorBoard, the CSV, W&B, SwanLab (backend/training/tracking.py): rank 0 logs; a
    # tracker that does not start refuses the run before the model loads
    trackers = Trackers.start(cfg, out) if launch.rank == 0 else Trackers()

    # --- model ---
    transformer = load_trainable_transformer(cfg, family, dirs[trained], launch.dtype,
                                             accelerator, ds_plugin, launch.zero_stage)
    source.load(dirs, launch.dtype, accelerator.device, ds_plugin)
    params = [p for p in transformer.parameters() if p.requires_grad]
    count = sum(getattr(p, "ds_numel", 0) or p.numel() for p in params)
    if cfg.full_training:
        log(f"[train] full fine-tune of the {trained} (trainable_models "
            f"{cfg.trainable_models}): {len(params)} tensors, {count} parameters")
    else:
        log(f"[train] LoRA rank {cfg.lora_rank} on {len(cfg.target_modules())} module names: "
            f"{len(params)} tensors, {count} parameters")

    # --- optimizer, data ---
    optimizer = optimizers.make_optimizer(cfg, optimizers.param_groups(cfg, transformer),
                                          ds_config)
    log(f"[train] {optimizers.describe(cfg, optimizer)}")
    dataset, held_out = source.datasets()
    extra = preservation.Preservation.of(cfg, family, transformer, family.training_schedule(),
                                         launch.dtype, accelerator.device, launch.rank)
    if extra is not None:  # prior preservation, DOP (backend/training/preservation.py)
        dataset = extra.with_dop_captions(dataset)
        log(f"[train] regularization against drift: {extra.describe()}")
    validation = Validation([to_device(s, accelerator.device) for s in held_out], family,
                            cfg.seed)
    empty_caption = source.empty_caption() if cfg.caption_dropout else None
    # accelerate shards the loader across the processes it knows of; the rest we do here.
    sampler, dataloader = source.loader(dataset, rank=launch.rank, ds_plugin=ds_plugin,
                                        shard=launch.world // accelerator.num_processes)
    transformer, optimizer, dataloader = accelerator.prepare(transformer, optimizer, dataloader)
    if cfg.loraplus_lr_ratio:  # what steps after prepare (DeepSpeed may have replaced it)
        log(f"[train] LoRA+ stepping: {optimizers.describe_groups(optimizer)}")
    if configure_deepspeed_checkpointing(ds_config):
        log("[train] DeepSpeed activation checkpointing configured")
    elif ds_config is not None and cfg.use_gradient_checkpointing:
        log("[train] no activation_checkpointing block in the DeepSpeed config: "
            "using torch checkpointing")
    # The accumulation from accelerate: a DeepSpeed config may set it.
    steps = StepPlan.of(cfg, len(dataloader), accelerator.gradient_accumulation_steps)
    # On the prepared optimizer: with the optimizer offloaded, accelerate replaced ours.
    lr_scheduler = optimizers.make_lr_scheduler(
        cfg, optimizer, steps.total, deepspeed_owns=bool(ds_config and "optimizer" in ds_config))
    schedule = family.training_schedule()
    unwrapped = accelerator.unwrap_model(transformer)

    # --- saving and resuming ---
    ckpt = Checkpointer(cfg, accelerator, unwrapped, out, progress, is_main=launch.rank == 0,
                        gather=launch.zero_stage == 3, deepspeed=bool(ds_config),
                        base_model_path=dirs[trained], save_dtype=launch.dtype)
    ckpt.set_totals(total_steps=steps.total, steps_per_epoch=steps.per_epoch,
                    world=launch.world, accum=steps.accum, zero_stage=launch.zero_stage)
    ckpt.ema = make_ema(cfg, unwrapped, accelerator.device, zero_stage=launch.zero_stage)
    global_step = 0
    if resume_state is not None:
        check_resume(resume_state, steps.per_epoch, launch.world, steps.accum)
        global_step = ckpt.resume(resume_state, lr_scheduler)
    elif cfg.lora_checkpoint:
        log(f"[train] LoRA initialised from {cfg.lora_checkpoint}")
    if ckpt.ema is not None:
        if resume_state is None:
            ckpt.ema.step(0)  # ema_start_step 0: the weights before the first step
        log(f"[train] EMA of the trained weights: decay {cfg.ema_decay:g} every "
            f"{cfg.ema_update_every} step(s) from step {cfg.ema_start_step}, on "
            f"{ckpt.ema.device}" + (" (each rank its shard)" if ckpt.ema.sharded else ""))
    if launch.rank == 0:
        write_json_atomic(out / rundir.TRAINING_ARGS, launch.training_args(cfg, dirs))

    # --- loop ---
    trainer = Trainer(
        cfg=cfg, launch=launch, family=family, source=source, transformer=transformer,
        unwrapped=unwrapped, params=params, optimizer=optimizer, lr_scheduler=lr_scheduler,
        schedule=schedule, dataloader=dataloader, sampler=sampler, validation=validation,
        empty_caption=empty_caption, ckpt=ckpt, steps=steps, progress=progress,
        trackers=trackers,
        stopper=stopper, step=global_step, preservation=extra)
    trainer.begin(samples=len(dataset))
    stopped = trainer.train()

    # --- save ---
    trainer.save_last()
    accelerator.wait_for_everyone()
    accelerator.end_training()
    fields = {"step": trainer.step, "total": steps.total}
    if stopped:
        fields["reason"] = Msg("note.stopped_at_step", signal=stopper.signal,
                               step=trainer.step, path=str(out / STATE_DIR))
        log(f"[train] {fields['reason']}")
        return "stopped", fields
    log(f"[train] done: {trainer.step} steps in {time.time() - trainer.t_start:.1f} s")
    return "succeeded", fields


def check_target_modules(cfg: RunConfig, model_config: Path) -> None:
    """The LoRA's target modules against the trained model's config (when there is one),
    before peft would fail on them, deep in the model load."""
    problems = target_module_problems(
        cfg, json.loads(model_config.read_text(encoding="utf-8")),
        shown_model_file(cfg, model_config)
    ) if model_config.is_file() else target_module_problems(cfg)
    if problems:
        raise ConfigError(problems)


@dataclass
class Launch:
    """The accelerate launch this stage runs under, and what it decides: the process layout,
    precision, DeepSpeed config and ZeRO stage."""
    accelerator: Any
    description: str  # how it was launched, for the log and the refusals
    ran: dict[str, Any]  # what runs (training_args.json)
    ds_plugin: Any
    ds_config: dict | None
    zero_stage: int
    dtype: Any
    rank: int
    world: int

    @classmethod
    def start(cls, cfg: RunConfig, given: dict[str, str]) -> "Launch":
        """The Accelerator of the run, seeded; an option that contradicts the launch is
        refused (ConfigError) naming what to change."""
        from accelerate import Accelerator
        from accelerate.utils import DistributedDataParallelKwargs, set_seed

        # torch.distributed repeats this FutureWarning for every ZeRO collective.
        warnings.filterwarnings("ignore", category=FutureWarning,
                                message=r".*torch\.distributed\.\w+` is deprecated")
        # DeepSpeed steps the optimizer itself; torch cannot see it and warns once, wrongly.
        warnings.filterwarnings("ignore", message=r"Detected call of `lr_scheduler\.step\(\)`")
        launch = launch_description()
        try:
            accelerator = Accelerator(
                gradient_accumulation_steps=cfg.gradient_accumulation_steps,
                kwargs_handlers=[DistributedDataParallelKwargs(
                    find_unused_parameters=cfg.find_unused_parameters)],
                **accelerator_kwargs(cfg, given))
        except ValueError as e:  # accelerate: the DeepSpeed JSON enables the other precision
            if "mixed_precision" not in str(e):
                raise
            raise ConfigError([Msg("note.launch_precision_refused", error=one_line(e),
                                   got=cfg.mixed_precision,
                                   where=given.get("mixed_precision"))],
                              f"this launch ({launch})") from None
        # The options the launch decides: what runs, or a refusal naming what to change.
        ran = what_ran(accelerator)
        problems = launch_problems(cfg, given, ran)
        if problems:
            raise ConfigError(problems, f"this launch ({launch})")
        ds_plugin = accelerator.state.deepspeed_plugin
        ds_config = ds_plugin.deepspeed_config if ds_plugin is not None else None
        zero_stage = int((ds_config or {}).get("zero_optimization", {}).get("stage", 0) or 0)
        dtype = weight_dtype(accelerator.mixed_precision)
        set_seed(cfg.seed)
        rank, world = process_info(accelerator)
        check_processes(accelerator, world)
        return cls(accelerator=accelerator, description=launch, ran=ran, ds_plugin=ds_plugin,
                   ds_config=ds_config, zero_stage=zero_stage, dtype=dtype, rank=rank,
                   world=world)

    def training_args(self, cfg: RunConfig, dirs: dict[str, Path]) -> dict[str, Any]:
        """What ran: the config, with what accelerate's state and its DeepSpeed config
        decided, and the model files read."""
        args = cfg.to_dict()
        args.update(self.ran)
        args.update({"num_processes": self.world, "launch": self.description,
                     "resolved_components": {k: str(v) for k, v in dirs.items()}})
        return args


@dataclass
class Trainer:
    """The loop of one run: micro-steps, what follows each optimizer step (progress,
    the trackers, checkpoints, validation, samples), epoch ends, stopping. ``step`` is the
    optimizer steps done (from the resume state at first)."""
    cfg: RunConfig
    launch: Launch
    family: Any
    source: DataSource
    transformer: Any  # as prepared by accelerate
    unwrapped: Any
    params: list
    optimizer: Any
    lr_scheduler: Any
    schedule: Any
    dataloader: Any
    sampler: Any
    validation: Validation
    empty_caption: dict[str, Any] | None
    ckpt: Checkpointer
    steps: StepPlan
    progress: ProgressWriter
    trackers: Trackers  # every metric goes through its log (backend/training/tracking.py)
    stopper: Stopper
    step: int = 0
    preservation: Any = None  # the extra loss terms (backend/training/preservation.py)

    def __post_init__(self) -> None:
        self.epoch = self.step // self.steps.per_epoch
        self.last_saved = self.validated_at = self.step
        self.t_start, self.steps_timed, self.loss_sum = time.time(), 0, None

    def begin(self, samples: int) -> None:
        """The start event, the first validation and the step plan, logged."""
        cfg, steps = self.cfg, self.steps
        self.progress.emit("start", total=steps.total, epochs=steps.epochs, step=self.step,
                           steps_per_epoch=steps.per_epoch, num_processes=self.launch.world,
                           batch_size=cfg.batch_size)
        self.validate()
        log(f"[train] {steps.total} steps ({steps.per_epoch} per epoch, {samples} samples x "
            f"{steps.epochs} epochs{' from max_train_steps' if cfg.max_train_steps else ''}, "
            f"{self.launch.world} process(es), accumulation {steps.accum})")

    def train(self) -> bool:
        """Train to the planned step; True when stopped by a signal."""
        import torch

        self.transformer.train()
        self.t_start, self.steps_timed = time.time(), 0
        self.t_step = self.t_start  # when the current optimizer step's micro-steps began
        self.loss_sum = torch.zeros((), dtype=torch.float32)
        for epoch in range(self.epoch, self.steps.epochs):
            self.epoch = epoch
            if self.step >= self.steps.total:
                break
            if self.train_epoch(epoch):
                return True
            self.end_epoch(epoch)
        return False

    def train_epoch(self, epoch: int) -> bool:
        """One epoch (from where a resumed run left it); True when stopped by a signal."""
        accelerator, steps = self.launch.accelerator, self.steps
        self.sampler.use_epoch(epoch)
        skip = (self.step - epoch * steps.per_epoch) * steps.accum
        loader = accelerator.skip_first_batches(self.dataloader, skip) if skip \
            else self.dataloader
        for i, item in enumerate(loader, start=skip):
            loss = self.micro_step(item, micro=epoch * len(self.dataloader) + i)
            self.loss_sum += loss.detach().float().cpu()
            if not accelerator.sync_gradients:
                continue
            self.after_optimizer_step(epoch)
            if stop_requested(self.stopper, self.launch.world):
                return True
            if self.step >= steps.total:
                break
        return False

    def micro_step(self, item: Any, micro: int):
        """Forward and backward of one loader item (the optimizer steps at accumulation's
        end); returns the loss. The noise depends only on (seed, rank, micro)."""
        cfg, accelerator = self.cfg, self.launch.accelerator
        with accelerator.accumulate(self.transformer):
            batch = self.source.batch(item)
            generator = step_generator(cfg.seed, self.launch.rank, micro)
            batch = drop_captions(batch, self.empty_caption, cfg.caption_dropout, generator)
            drawn = generator.get_state()  # DOP replays the training loss's draw
            loss = timesteps.training_loss(cfg, self.family, self.transformer, batch,
                                           self.schedule, generator, self.launch.dtype)
            if self.preservation is not None:
                loss = loss + self.preservation.loss(self.transformer, batch, drawn, micro)
            accelerator.backward(loss)
            if accelerator.sync_gradients and cfg.gradient_clipping and not self.launch.ds_config:
                accelerator.clip_grad_norm_(self.params, cfg.gradient_clipping)
            self.optimizer.step()
            self.optimizer.zero_grad()
        return loss

    def after_optimizer_step(self, epoch: int) -> None:
        """The step event and the metrics (to every tracker); then what is due at this step:
        the EMA's update, a checkpoint (``save_steps``), validation, samples."""
        cfg, steps = self.cfg, self.steps
        step_time = time.time() - self.t_step
        lr = current_lr(self.lr_scheduler, cfg)
        self.lr_scheduler.step()
        self.step += 1
        self.steps_timed += 1
        step_loss = float(self.loss_sum) / steps.accum
        self.loss_sum.zero_()
        per_step = (time.time() - self.t_start) / self.steps_timed
        self.progress.emit(
            "step", step=self.step, total=steps.total, epoch=epoch, loss=round(step_loss, 6),
            lr=lr, samples_per_s=round(steps.accum * self.launch.world * cfg.batch_size
                                       / per_step, 3),
            eta_s=round(per_step * (steps.total - self.step), 1))
        self.trackers.log({"train/loss": step_loss, "train/lr": lr,
                           "train/step_time_s": step_time,
                           **device_metrics(self.launch.accelerator.device)}, self.step)
        if self.ckpt.ema is not None:  # every rank (under ZeRO-3 it may gather the LoRA)
            self.ckpt.ema.step(self.step)
        if cfg.save_steps and self.step % cfg.save_steps == 0:
            self.save(f"step-{self.step}", epoch)
        if (cfg.validation_every_n_steps and self.step % cfg.validation_every_n_steps == 0) \
                or (not cfg.validation_every_n_steps and self.last_saved == self.step):
            self.validate()
        if cfg.sample_every_n_steps and self.step % cfg.sample_every_n_steps == 0:
            path = self.ckpt.weights_path(f"step-{self.step}")
            if self.last_saved != self.step or not cfg.save_steps:
                path = self.ckpt.save_weights(f"step-{self.step}", self.step)
            self.trackers.log_samples(maybe_render_samples(cfg, path, self.step, self.progress),
                                      self.step)
            self.launch.accelerator.wait_for_everyone()
        self.t_step = time.time()  # the next step's time leaves out what was due at this one

    def end_epoch(self, epoch: int) -> None:
        """Without ``save_steps``, a finished epoch saves ``epoch-{i}`` (and validates)."""
        if self.cfg.save_steps is None and self.step == (epoch + 1) * self.steps.per_epoch:
            self.save(f"epoch-{epoch}", epoch + 1)
            if not self.cfg.validation_every_n_steps and self.validated_at != self.step:
                self.validate()

    def save(self, stem: str, epoch: int) -> None:
        """A checkpoint (a LoRA file, or the full component) and the resume state at this
        step."""
        self.ckpt.save_weights(stem, self.step)
        self.ckpt.save_state(self.step, epoch)
        self.last_saved = self.step

    def save_last(self) -> None:
        """The final step's LoRA, state and validation where no save or validation had it
        yet; the trackers finished."""
        if self.last_saved != self.step:
            self.save(f"step-{self.step}", self.epoch)
        if self.validated_at != self.step:
            self.validate()
        self.trackers.close()

    def validate(self) -> None:
        """The held-out loss at this step (event, trackers, log); nothing without
        held-out samples."""
        self.validated_at = self.step
        validation = self.validation
        if not validation:
            return
        value = validation.loss(self.unwrapped, self.launch.accelerator)
        self.progress.emit("validation", step=self.step, val_loss=round(value, 6),
                           samples=len(validation.samples))
        self.trackers.log({"validation/loss": value}, self.step)
        log(f"[train] validation loss at step {self.step}: {value:.6f} "
            f"({len(validation.samples)} held-out samples)")


if __name__ == "__main__":
    sys.exit(main())
