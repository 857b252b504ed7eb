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
or ``step-{N}.safetensors`` (every ``save_steps`` plus a final one), ``training_args.json``,
``state/`` (full resume state: LoRA, optimizer, step; ``--resume_from <output>/state``),
``tensorboard/``, and progress events to ``progress_file`` (default
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
import math
import os
import sys
import time
import traceback
import warnings
from pathlib import Path
from typing import Any

from backend.core import exits, rundir
from backend.config.schema import ConfigError, RunConfig, parse_stage_args, resolve_paths
from backend.core.progress import ProgressWriter
from backend.core.readgate import for_config as read_gate
from backend.training.loop import (STATE_DIR, Checkpointer, EpochSampler, StageError, Stopper,
                              check_processes, check_resume, current_lr, first_item,
                              is_main_process, load_frozen_encoder, load_trainable_transformer,
                              log, make_tensorboard,
                              maybe_render_samples, one_line, process_info, read_trainer_state,
                              step_generator, stop_requested, weight_dtype)

STAGE_OF_TASK = {"sft:data_process": "data_process", "sft:train": "train", "sft": "train"}
def _user_errors() -> tuple[type, ...]:
    from backend.data.cache import CacheError
    from backend.data.dataset import DatasetError
    from backend.core.diskspace import DiskFullError, FileSizeLimitError
    from backend.models.hub import HubError
    from backend.data.batches import DataOptionError
    from backend.training.optimizers import OptimizerError
    return (ConfigError, StageError, DatasetError, CacheError, HubError, DiskFullError,
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
        cfg, ns = parse_stage_args(argv, prog="backend.stages.train")
        cfg = resolve_paths(cfg)
    except ConfigError as e:
        print(e, file=sys.stderr, flush=True)
        args = sys.argv[1:] if argv is None else list(argv)
        early = _flag_value(args, "--progress_file")
        if early:  # the runner reads the reason from here
            stage = STAGE_OF_TASK.get(_flag_value(args, "--task") or "sft", "train")
            ProgressWriter(early, stage, enabled=is_main_process()).end("failed", str(e))
        return exits.REFUSED
    if argv is None:  # this process is the stage: keep unused optional packages out
        from backend.models.quantize import keep_out_unneeded
        keep_out_unneeded(cfg)
    given = ns.option_sources
    stage = STAGE_OF_TASK[cfg.task]
    progress_path = cfg.progress_file or str(Path(cfg.output_path) / rundir.PROGRESS)
    progress = ProgressWriter(progress_path, stage, enabled=is_main_process())
    stopper = Stopper()
    stopper.install()
    try:
        if cfg.task == "sft:data_process":
            status, fields = run_data_process(cfg, progress, stopper, given)
        else:
            status, fields = run_train(cfg, progress, stopper, given)
    except ConfigError as e:  # an option that contradicts the launch: nothing was trained
        print(e, file=sys.stderr, flush=True)
        progress.emit("end", status="failed", reason=one_line(e))
        return exits.REFUSED
    except _user_errors() as e:
        print(f"error: {e}", file=sys.stderr, flush=True)
        progress.emit("end", status="failed", reason=one_line(e))
        return exits.REFUSED
    except BaseException as e:  # noqa: BLE001 - the stage must always end with an event
        from backend.core.diskspace import (disk_full_in, file_too_large_in, is_disk_full,
                                       is_file_too_large)

        # A write not wrapped where it happens (e.g. a cache file): a full disk, or a file
        # past the process's file-size limit (ulimit -f), said as such.
        if is_disk_full(e) or is_file_too_large(e):
            e = (disk_full_in if is_disk_full(e) else file_too_large_in)(cfg.output_path, e)
            print(f"error: {e}", file=sys.stderr, flush=True)
            progress.emit("end", status="failed", reason=one_line(e))
            return exits.RESOURCES
        traceback.print_exc()
        progress.emit("end", status="failed", reason=one_line(e, with_type=True))
        return exits.of_unexpected(e)
    progress.emit("end", status=status, **fields)
    return exits.STOPPED if status == "stopped" else exits.OK


# ------------------------------------------------------------------------------------------
# Stage 1
# ------------------------------------------------------------------------------------------
def run_data_process(cfg: RunConfig, progress: ProgressWriter, stopper: Stopper,
                     given: dict[str, str] | None = None) -> tuple[str, dict[str, Any]]:
    if os.environ.get("ACCELERATE_USE_DEEPSPEED", "").lower() == "true":
        raise StageError(
            "task sft:data_process runs without DeepSpeed (it trains nothing, and ZeRO "
            "wrapping breaks it). Launch it plainly: accelerate launch -m "
            "backend.stages.train --task sft:data_process ... (no DeepSpeed --config_file).")
    from backend.data.video import check_stage_dataset
    from backend.families import get_family
    from backend.models.hub import fingerprint, resolve_component_dirs
    from backend.models.quantize import quantize_frozen

    family = get_family(cfg.model_family).for_config(cfg)
    media: dict[str, Any] = {}
    records = check_stage_dataset(cfg, family, log)  # before any model is touched
    if family.media == "video":  # clips decoded with PyAV (backend/data/video.py)
        from backend.data.video import load_clip, plan_clips
        media = {"planner": plan_clips, "loader": load_clip}
        log(f"[data_process] video clips: num_frames {cfg.num_frames}, "
            + (f"video_fps {cfg.video_fps:g}" if cfg.video_fps
               else f"frame_stride {cfg.frame_stride}"))
    components = family.spec.stage_components("data_process")
    dirs = resolve_component_dirs(cfg, components)
    model_fp = fingerprint(dirs[c] for c in components)
    from backend.config.lowvram import entries_for
    # A quantized encoder writes other values: its cache is another cache.
    model_fp += [["quantized", e.component, e.method, list(e.skip or ())]
                 for c in ("text_encoder", "vae") for e in entries_for(cfg, c)]

    from accelerate import Accelerator

    from backend.data.cache import build_cache
    from backend.training.launched import accelerator_kwargs

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
    result = build_cache(
        cfg, records,
        lambda: quantize_frozen(cfg, family.load_encoder(dirs, dtype, accelerator.device,
                                                         offload=offload), log=log),
        model_fp, rank=rank, world=world,
        barrier=accelerator.wait_for_everyone, progress=progress, should_stop=stopper.is_set,
        log=log, **media)
    if cfg.caption_dropout and rank == 0 and not result["stopped"]:
        from backend.data.batches import write_empty_prompt
        write_empty_prompt(cfg, lambda: family.load_encoder(dirs, dtype, accelerator.device,
                                                            offload=offload), model_fp, log)
    accelerator.end_training()  # tear the process group down before the interpreter exits
    fields = {k: result[k] for k in ("total", "encoded", "reused")}
    if result["stopped"]:
        return "stopped", {"reason": f"stopped by signal {stopper.signal}; "
                           f"{result['encoded']} samples cached", **fields}
    return "succeeded", fields


# ------------------------------------------------------------------------------------------
# Stage 2 and one-shot sft
# ------------------------------------------------------------------------------------------
def check_not_raw_dataset(cfg: RunConfig) -> None:
    """sft:train reads a stage-1 cache: a folder of images instead is refused with the two
    commands that fit, the cache written to a folder of its own (never into the dataset)."""
    from backend.data.cache import cached_files
    from backend.data.dataset import IMAGE_EXTS
    from backend.data.video import VIDEO_EXTS

    folder = Path(cfg.dataset_base_path)
    if not folder.is_dir() or cached_files(folder):
        return
    raw = [p for p in folder.iterdir() if p.is_file() and (
        p.suffix.lower() in IMAGE_EXTS + VIDEO_EXTS or p.name.startswith("metadata."))]
    if not raw:
        return
    cache = folder.parent / f"{folder.name}_cache"
    n = 2
    while cache.exists():
        cache = folder.parent / f"{folder.name}_cache{n}"
        n += 1
    meta = (f" --dataset_metadata_path {cfg.dataset_metadata_path}"
            if cfg.dataset_metadata_path else "")
    raise StageError(
        f"dataset_base_path: task sft:train trains from a stage-1 cache, not a raw dataset "
        f"(got {folder}: {len(raw)} image, video or metadata files, no cache; allowed a cache "
        f"folder). Write the cache to a folder of its own, e.g. {cache}, then train from it: "
        f"accelerate launch -m backend.stages.train --task sft:data_process "
        f"--dataset_base_path {folder}{meta} --output_path {cache} ...; then --task "
        f"sft:train --dataset_base_path {cache}. Or train from the images directly "
        f"(encoding every step): --task sft --dataset_base_path {folder}{meta}.")


def run_train(cfg: RunConfig, progress: ProgressWriter, stopper: Stopper,
              given: dict[str, str] | None = None) -> tuple[str, dict[str, Any]]:
    from backend.families import get_family
    from backend.models.hub import resolve_component_dirs

    family = get_family(cfg.model_family).for_config(cfg)
    trained = family.spec.trained_component
    one_shot = cfg.task == "sft"
    components = family.spec.stage_components("train", split=not one_shot)
    # --- check inputs before any heavy import or model load ---
    if one_shot and family.media == "video":
        from backend.data.video import ClipDataset as ImageDataset, check_stage_dataset
        records = check_stage_dataset(cfg, family, log)
    elif one_shot:
        from backend.data.dataset import ImageDataset, PairDataset
        from backend.data.video import check_stage_dataset
        records = check_stage_dataset(cfg, family, log)
    else:
        from backend.data.cache import CachedDataset, check_cache
        check_not_raw_dataset(cfg)
        check_cache(cfg.dataset_base_path, read_gate(cfg))
        if cfg.dataset_metadata_path:
            log(f"[train] sft:train reads the stage-1 cache in {cfg.dataset_base_path}; "
                f"dataset_metadata_path is not used")
    resume_state = None
    if cfg.resume_from:
        resume_state = read_trainer_state(Path(cfg.resume_from))
    if cfg.lora_checkpoint and not read_gate(cfg).is_file(cfg.lora_checkpoint):
        raise StageError(f"lora_checkpoint: file not found (got {cfg.lora_checkpoint!r})")
    dirs = resolve_component_dirs(cfg, components)
    from backend.models.lora import shown_model_file, target_module_problems
    model_config = dirs[trained] / "config.json"
    problems = target_module_problems(
        cfg, json.loads(model_config.read_text(encoding="utf-8")),
        shown_model_file(cfg, model_config)
    ) if model_config.is_file() else target_module_problems(cfg)
    if problems:  # before peft would fail on them, deep in the model load
        raise ConfigError(problems)

    import torch
    from accelerate import Accelerator
    from accelerate.utils import DistributedDataParallelKwargs, set_seed

    # torch.distributed repeats this FutureWarning for every ZeRO collective.
    warnings.filterwarnings("ignore", category=FutureWarning,
                            message=r".*torch\.distributed\.\w+` is deprecated")
    # DeepSpeed steps the optimizer itself; torch cannot see it and warns once, wrongly.
    warnings.filterwarnings("ignore", message=r"Detected call of `lr_scheduler\.step\(\)`")

    from backend.models import lora
    from backend.families.common import configure_deepspeed_checkpointing

    from backend.training.launched import (accelerator_kwargs, launch_description, launch_problems,
                                  what_ran)

    given = given or {}
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
        raise ConfigError([f"mixed_precision: {one_line(e)} (got {cfg.mixed_precision} from "
                           f"{given.get('mixed_precision')}; allowed what the launch's "
                           f"DeepSpeed config enables, or \"auto\" there)"],
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
    is_main = rank == 0
    out = Path(cfg.output_path)
    out.mkdir(parents=True, exist_ok=True)
    log(f"[train] task {cfg.task}, {world} process(es) on {accelerator.device}, "
        f"{'ZeRO-%d' % zero_stage if ds_config else 'no DeepSpeed'}, weights {dtype}, "
        f"mixed precision {ran['mixed_precision']}; launched with {launch}")

    # --- model ---
    transformer = load_trainable_transformer(cfg, family, dirs[trained], dtype,
                                             accelerator, ds_plugin, zero_stage)
    encoder = None
    if one_shot:
        from backend.config.lowvram import offloaded_models
        from backend.models.quantize import quantize_frozen
        encoder = quantize_frozen(cfg, load_frozen_encoder(
            family, dirs, dtype, accelerator.device, ds_plugin,
            "model" if offloaded_models(cfg) else "none"), log=log)
    params = [p for p in transformer.parameters() if p.requires_grad]
    n_params = sum(p.numel() for p in params)
    log(f"[train] LoRA rank {cfg.lora_rank} on {len(cfg.target_modules())} module names: "
        f"{len(params)} tensors, {n_params} parameters")

    # --- optimizer, data ---
    from backend.data import batches as data_options
    from backend.data import buckets
    from backend.training import optimizers, timesteps

    optimizer = optimizers.make_optimizer(cfg, params, ds_config)
    log(f"[train] {optimizers.describe(cfg, optimizer)}")
    held_out: list = []
    if one_shot:
        records, held_records = data_options.hold_out(records, cfg.validation_samples,
                                                      "images")
        dataset_cls = PairDataset if family.input_images else ImageDataset
        dataset = dataset_cls(records, cfg, repeat=cfg.dataset_repeat)
        held = dataset_cls(held_records, cfg)
        held_out = [encoder.encode_sample(item["pixels"], item["prompt"],
                                          *item.get("inputs", ()))
                    for item in (held[i] for i in range(len(held_records)))]
    else:
        dataset = CachedDataset(cfg.dataset_base_path, repeat=cfg.dataset_repeat,
                                gate=read_gate(cfg))
        dataset.files, held_files = data_options.hold_out(dataset.files,
                                                          cfg.validation_samples, "samples")
        from backend.data.cache import load_sample
        held_out = [load_sample(p, read_gate(cfg)) for p in held_files]
    validation = data_options.Validation(
        [data_options.to_device(s, accelerator.device) for s in held_out], family, cfg.seed)
    empty_caption = None
    if cfg.caption_dropout:
        empty_caption = data_options.empty_prompt(
            encoder.encode_sample(torch.zeros(1, 3, 16, 16), "") if one_shot else
            data_options.read_empty_prompt(cfg.dataset_base_path, read_gate(cfg)))
    # accelerate shards the loader across the processes it knows of; the rest we do here.
    shard = world // accelerator.num_processes
    if cfg.batch_size > 1:
        n_items = len(dataset)
        base = (data_options.record_sizes(dataset.records, cfg) if one_shot else
                data_options.cached_sizes(cfg.dataset_base_path, dataset.files, read_gate(cfg)))
        sizes = [base[i % len(base)] for i in range(n_items)]
        try:
            sampler = buckets.BucketBatchSampler(sizes, cfg.batch_size, cfg.seed,
                                                 cfg.bucket_remainder,
                                                 rank if shard > 1 else 0, shard)
        except ValueError as e:
            raise StageError(str(e)) from None
        log("[train] batches of " + str(cfg.batch_size) + " from one size bucket each:\n"
            + buckets.plan_text(buckets.bucket_plan(sizes, cfg.batch_size,
                                                    cfg.bucket_remainder), cfg.batch_size))
        dataloader = torch.utils.data.DataLoader(
            dataset, batch_sampler=sampler,
            collate_fn=(lambda items: items) if one_shot else buckets.collate,
            num_workers=cfg.dataset_num_workers)
        if ds_plugin is not None and ds_plugin.is_auto("train_micro_batch_size_per_gpu"):
            ds_plugin.deepspeed_config["train_micro_batch_size_per_gpu"] = cfg.batch_size
    else:
        sampler = EpochSampler(len(dataset), cfg.seed, rank if shard > 1 else 0, shard)
        dataloader = torch.utils.data.DataLoader(
            dataset, batch_size=1, sampler=sampler, collate_fn=first_item,
            num_workers=cfg.dataset_num_workers)
    transformer, optimizer, dataloader = accelerator.prepare(transformer, optimizer, dataloader)
    if configure_deepspeed_checkpointing(ds_config):
        log("[train] DeepSpeed activation checkpointing configured")
    elif ds_config is not None and cfg.use_gradient_checkpointing:
        log("[train] no activation_checkpointing block in the DeepSpeed config: "
            "using torch checkpointing")

    accum = accelerator.gradient_accumulation_steps  # a DeepSpeed config may set it
    steps_per_epoch = max(1, math.ceil(len(dataloader) / accum))
    if cfg.max_train_steps:  # a step target: the epochs follow from it
        total_steps = cfg.max_train_steps
        num_epochs = math.ceil(total_steps / steps_per_epoch)
    else:
        num_epochs = cfg.num_epochs
        total_steps = num_epochs * steps_per_epoch
    if cfg.max_steps:  # a cap: never more steps than the epochs give
        total_steps = min(total_steps, cfg.max_steps)
    # On the prepared optimizer: with the optimizer offloaded, accelerate replaced ours.
    lr_scheduler = optimizers.make_lr_scheduler(
        cfg, optimizer, total_steps, deepspeed_owns=bool(ds_config and "optimizer" in ds_config))
    schedule = family.training_schedule()
    unwrapped = accelerator.unwrap_model(transformer)

    # --- saving and resuming ---
    ckpt = Checkpointer(cfg, accelerator, unwrapped, out, progress, is_main=is_main,
                        gather=zero_stage == 3, deepspeed=bool(ds_config),
                        base_model_path=dirs[trained])
    ckpt.set_totals(total_steps=total_steps, steps_per_epoch=steps_per_epoch, world=world,
                    accum=accum, zero_stage=zero_stage)
    global_step = 0
    if resume_state is not None:
        check_resume(resume_state, steps_per_epoch, world, accum)
        global_step = ckpt.resume(resume_state, lr_scheduler)
    elif cfg.lora_checkpoint:
        log(f"[train] LoRA initialised from {cfg.lora_checkpoint}")

    if is_main:
        args = cfg.to_dict()
        args.update(ran)  # what ran, from accelerate's state and its DeepSpeed config
        args.update({"num_processes": world, "launch": launch,
                     "resolved_components": {k: str(v) for k, v in dirs.items()}})
        lora.write_json_atomic(out / rundir.TRAINING_ARGS, args)
    tb = make_tensorboard(out / rundir.TENSORBOARD) if is_main else None

    start_epoch = global_step // steps_per_epoch
    progress.emit("start", total=total_steps, epochs=num_epochs, step=global_step,
                  steps_per_epoch=steps_per_epoch, num_processes=world,
                  batch_size=cfg.batch_size)

    def validate_now(step: int) -> None:
        if not validation:
            return
        value = validation.loss(unwrapped, accelerator)
        progress.emit("validation", step=step, val_loss=round(value, 6),
                      samples=len(validation.samples))
        if tb is not None:
            tb.add_scalar("validation/loss", value, step)
        log(f"[train] validation loss at step {step}: {value:.6f} "
            f"({len(validation.samples)} held-out samples)")

    validated_at = global_step
    validate_now(global_step)
    log(f"[train] {total_steps} steps ({steps_per_epoch} per epoch, {len(dataset)} samples x "
        f"{num_epochs} epochs{' from max_train_steps' if cfg.max_train_steps else ''}, "
        f"{world} process(es), accumulation {accum})")

    # --- loop ---
    transformer.train()
    t_start, steps_timed = time.time(), 0
    loss_sum = torch.zeros((), dtype=torch.float32)
    stopped = False
    last_saved_step = global_step
    epoch = start_epoch
    for epoch in range(start_epoch, num_epochs):
        if global_step >= total_steps:
            break
        sampler.use_epoch(epoch)
        skip = (global_step - epoch * steps_per_epoch) * accum
        loader = accelerator.skip_first_batches(dataloader, skip) if skip else dataloader
        for i, batch in enumerate(loader, start=skip):
            micro = epoch * len(dataloader) + i
            with accelerator.accumulate(transformer):
                if one_shot and isinstance(batch, list):
                    batch = buckets.collate([encoder.encode_sample(b["pixels"], b["prompt"],
                                                                   *b.get("inputs", ()))
                                             for b in batch])
                elif one_shot:
                    batch = encoder.encode_sample(batch["pixels"], batch["prompt"],
                                                  *batch.get("inputs", ()))
                generator = step_generator(cfg.seed, rank, micro)
                batch = data_options.drop_captions(batch, empty_caption, cfg.caption_dropout,
                                                   generator)
                loss = timesteps.training_loss(cfg, family, transformer, batch, schedule,
                                               generator, dtype)
                accelerator.backward(loss)
                if (accelerator.sync_gradients and cfg.gradient_clipping and not ds_config):
                    accelerator.clip_grad_norm_(params, cfg.gradient_clipping)
                optimizer.step()
                optimizer.zero_grad()
            loss_sum += loss.detach().float().cpu()
            if not accelerator.sync_gradients:
                continue
            lr = current_lr(lr_scheduler, cfg)
            lr_scheduler.step()
            global_step += 1
            steps_timed += 1
            step_loss = float(loss_sum) / accum
            loss_sum.zero_()
            elapsed = time.time() - t_start
            per_step = elapsed / steps_timed
            progress.emit("step", step=global_step, total=total_steps, epoch=epoch,
                          loss=round(step_loss, 6), lr=lr,
                          samples_per_s=round(accum * world * cfg.batch_size / per_step, 3),
                          eta_s=round(per_step * (total_steps - global_step), 1))
            if tb is not None:
                tb.add_scalar("train/loss", step_loss, global_step)
                tb.add_scalar("train/lr", lr, global_step)
            if cfg.save_steps and global_step % cfg.save_steps == 0:
                ckpt.save_lora(f"step-{global_step}.safetensors", global_step)
                ckpt.save_state(global_step, epoch)
                last_saved_step = global_step
            if (cfg.validation_every_n_steps and global_step % cfg.validation_every_n_steps
                    == 0) or (not cfg.validation_every_n_steps and last_saved_step ==
                              global_step):
                validate_now(global_step)
                validated_at = global_step
            if cfg.sample_every_n_steps and global_step % cfg.sample_every_n_steps == 0:
                path = out / f"step-{global_step}.safetensors"
                if last_saved_step != global_step or not cfg.save_steps:
                    path = ckpt.save_lora(path.name, global_step)
                maybe_render_samples(cfg, path, global_step, progress)
                accelerator.wait_for_everyone()
            if stop_requested(stopper, world):
                stopped = True
                break
            if global_step >= total_steps:
                break
        if stopped:
            break
        epoch_done = global_step == (epoch + 1) * steps_per_epoch
        if cfg.save_steps is None and epoch_done:
            ckpt.save_lora(f"epoch-{epoch}.safetensors", global_step)
            ckpt.save_state(global_step, epoch + 1)
            last_saved_step = global_step
            if not cfg.validation_every_n_steps and validated_at != global_step:
                validate_now(global_step)
                validated_at = global_step

    # --- end ---
    if last_saved_step != global_step:
        ckpt.save_lora(f"step-{global_step}.safetensors", global_step)
        ckpt.save_state(global_step, epoch)
    if validated_at != global_step:
        validate_now(global_step)
    if tb is not None:
        tb.close()
    accelerator.wait_for_everyone()
    accelerator.end_training()
    fields = {"step": global_step, "total": total_steps}
    if stopped:
        fields["reason"] = (f"stopped by signal {stopper.signal} at step {global_step}; "
                            f"resume with --resume_from {out / STATE_DIR}")
        log(f"[train] {fields['reason']}")
        return "stopped", fields
    log(f"[train] done: {global_step} steps in {time.time() - t_start:.1f} s")
    return "succeeded", fields


if __name__ == "__main__":
    sys.exit(main())
