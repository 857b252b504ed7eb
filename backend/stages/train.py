"""Training stage: stage 1 (cache), stage 2 (LoRA from the cache) and one-shot ``sft``.

Runbook (GPU, the low-VRAM recipe: stage 1 plain, stage 2 under ZeRO-3 CPU offload)::

    accelerate launch -m backend.stages.train --task sft:data_process \\
      --dataset_base_path data/example_image_dataset \\
      --dataset_metadata_path data/example_image_dataset/metadata.csv \\
      --model_id_with_origin_paths "Qwen/Qwen-Image:text_encoder/model*.safetensors,Qwen/Qwen-Image:vae/diffusion_pytorch_model.safetensors" \\
      --output_path ./models/train/Qwen-Image_lora-splited-cache
    accelerate launch --config_file deepspeed_zero3_cpuoffload.yaml -m backend.stages.train \\
      --task sft:train --dataset_base_path ./models/train/Qwen-Image_lora-splited-cache \\
      --model_id_with_origin_paths "Qwen/Qwen-Image:transformer/diffusion_pytorch_model*.safetensors" \\
      --lora_rank 32 --learning_rate 1e-4 --num_epochs 5 --dataset_repeat 50 \\
      --use_gradient_checkpointing --initialize_model_on_cpu \\
      --output_path ./models/train/Qwen-Image_lora

(the reference trainer's flags; ``--config run.yaml`` reads a run config first, flags win).
Stage 1 holds the text encoder and VAE on the GPU together (~19 GB); on a smaller GPU add
``--data_process_offload model`` (one at a time, ~17 GB) or ``sequential`` (weights stream
from host RAM module by module, ~3 GB). The cache is the same either way.

Tiny CPU run from the repository root (the committed demo model and data set; seconds)::

    accelerate launch --cpu -m backend.stages.train --task sft:data_process \\
      --model_id_with_origin_paths backend/assets/tiny-qwen-image \\
      --dataset_base_path backend/assets/demo_dataset \\
      --dataset_metadata_path backend/assets/demo_dataset/metadata.csv \\
      --output_path /tmp/zl/cache
    accelerate launch --cpu -m backend.stages.train --task sft:train \\
      --model_id_with_origin_paths backend/assets/tiny-qwen-image \\
      --dataset_base_path /tmp/zl/cache --lora_rank 4 --learning_rate 1e-3 \\
      --num_epochs 5 --save_steps 10 --output_path /tmp/zl/out

(any folder from ``python -m backend.models.tiny DIR`` works as the model too).

Writes (stage 2 / sft) into ``output_path``: ``epoch-{i}.safetensors`` (no ``save_steps``)
or ``step-{N}.safetensors`` (every ``save_steps`` plus a final one), ``training_args.json``,
``state/`` (full resume state: LoRA, optimizer, step; ``--resume_from <output>/state``),
``tensorboard/``, and progress events to ``progress_file`` (default
``output_path/progress.jsonl``; rank 0 only). Stage 1 writes the cache (backend/cache.py).

Exit codes: 0 succeeded; 1 failed (final event ``end`` status failed with a one-line
reason; traceback in the log); 2 invalid options (nothing started); 143 stopped by SIGTERM
(SIGINT too): training finishes the current optimizer step, saves ``state/`` and a LoRA
``step-{N}.safetensors``, writes ``end`` status stopped, and exits 143. Stage 1 stops
between samples (with ``data_process_offload model``, between two prompts or two images);
finished samples stay cached.
"""
from __future__ import annotations

import json
import math
import os
import shutil
import signal
import sys
import time
import traceback
import warnings
from pathlib import Path
from typing import Any

from backend.config import ConfigError, RunConfig, parse_stage_args, resolve_paths
from backend.progress import ProgressWriter

EXIT_FAILED, EXIT_USAGE, EXIT_STOPPED = 1, 2, 143
STAGE_OF_TASK = {"sft:data_process": "data_process", "sft:train": "train", "sft": "train"}
STATE_DIR = "state"
TRAINER_STATE = "trainer_state.json"


class StageError(RuntimeError):
    """A problem the user can fix; reported as one message without a traceback."""


class Stopper:
    """SIGTERM/SIGINT set a flag; the stage acts on it at the next safe point."""

    def __init__(self):
        self.signal: int | None = None

    def install(self) -> None:
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, self._handle)

    def _handle(self, signum, frame) -> None:
        self.signal = signum

    def is_set(self) -> bool:
        return self.signal is not None


def is_main_process() -> bool:
    return int(os.environ.get("RANK", "0")) == 0


def log(msg: str) -> None:
    if is_main_process():
        print(msg, flush=True)


def _user_errors() -> tuple[type, ...]:
    from backend.cache import CacheError
    from backend.data import DatasetError
    from backend.hub import HubError
    return (ConfigError, StageError, DatasetError, CacheError, HubError)


# ------------------------------------------------------------------------------------------
# Entry point
# ------------------------------------------------------------------------------------------
def main(argv: list[str] | None = None) -> int:
    try:
        cfg, _ = parse_stage_args(argv, prog="backend.stages.train")
        cfg = resolve_paths(cfg)
    except ConfigError as e:
        print(e, file=sys.stderr)
        return EXIT_USAGE
    stage = STAGE_OF_TASK[cfg.task]
    progress_path = cfg.progress_file or str(Path(cfg.output_path) / "progress.jsonl")
    progress = ProgressWriter(progress_path, stage, enabled=is_main_process())
    stopper = Stopper()
    stopper.install()
    try:
        if cfg.task == "sft:data_process":
            status, fields = run_data_process(cfg, progress, stopper)
        else:
            status, fields = run_train(cfg, progress, stopper)
    except _user_errors() as e:
        print(f"error: {e}", file=sys.stderr, flush=True)
        progress.emit("end", status="failed", reason=_one_line(e))
        return EXIT_FAILED
    except BaseException as e:  # noqa: BLE001 - the stage must always end with an event
        traceback.print_exc()
        progress.emit("end", status="failed", reason=_one_line(e, with_type=True))
        return EXIT_FAILED
    progress.emit("end", status=status, **fields)
    return EXIT_STOPPED if status == "stopped" else 0


def _one_line(e: BaseException, with_type: bool = False) -> str:
    text = " ".join(str(e).split()) or type(e).__name__
    text = f"{type(e).__name__}: {text}" if with_type else text
    return text[:500]


# ------------------------------------------------------------------------------------------
# Stage 1
# ------------------------------------------------------------------------------------------
def run_data_process(cfg: RunConfig, progress: ProgressWriter, stopper: Stopper
                     ) -> tuple[str, dict[str, Any]]:
    if os.environ.get("ACCELERATE_USE_DEEPSPEED", "").lower() == "true":
        raise StageError(
            "task sft:data_process runs without DeepSpeed (it trains nothing, and ZeRO "
            "wrapping breaks it). Launch it plainly: accelerate launch -m "
            "backend.stages.train --task sft:data_process ... (no DeepSpeed --config_file).")
    from backend.data import check_dataset
    from backend.hub import fingerprint, resolve_component_dirs
    from backend.models import get_adapter

    adapter = get_adapter(cfg.model_family)
    records = check_dataset(cfg)  # before any model is touched
    dirs = resolve_component_dirs(cfg, adapter.STAGE1_COMPONENTS)
    model_fp = fingerprint(dirs[c] for c in adapter.STAGE1_COMPONENTS)

    from accelerate import Accelerator

    from backend.cache import build_cache

    accelerator = Accelerator()
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
        lambda: adapter.load_encoder(dirs, dtype, accelerator.device, offload=offload),
        model_fp, rank=rank, world=world,
        barrier=accelerator.wait_for_everyone, progress=progress, should_stop=stopper.is_set,
        log=log)
    accelerator.end_training()  # tear the process group down before the interpreter exits
    fields = {k: result[k] for k in ("total", "encoded", "reused")}
    if result["stopped"]:
        return "stopped", {"reason": f"stopped by signal {stopper.signal}; "
                           f"{result['encoded']} samples cached", **fields}
    return "succeeded", fields


def weight_dtype(mixed_precision: str):
    import torch
    return {"bf16": torch.bfloat16, "fp16": torch.float16}.get(str(mixed_precision),
                                                              torch.float32)


# ------------------------------------------------------------------------------------------
# Stage 2 and one-shot sft
# ------------------------------------------------------------------------------------------
class EpochSampler:
    """A fixed permutation per epoch from (seed, epoch): resuming reproduces the order.
    The epoch is set by the loop (``use_epoch``), not by accelerate. With ``world`` > 1
    this process takes every ``world``-th index from ``rank`` (padded by wrapping so every
    process gets as many) -- only where accelerate does not shard the loader itself."""

    def __init__(self, n: int, seed: int, rank: int = 0, world: int = 1):
        self.n, self.seed, self.epoch = n, seed, 0
        self.rank, self.world = rank, world

    def use_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def __len__(self) -> int:
        return math.ceil(self.n / self.world)

    def __iter__(self):
        import torch
        g = torch.Generator().manual_seed(self.seed * 1_000_003 + self.epoch)
        order = torch.randperm(self.n, generator=g).tolist()
        if self.world > 1:
            order += order[:len(self) * self.world - self.n]
            order = order[self.rank::self.world]
        return iter(order)


def process_info(accelerator) -> tuple[int, int]:
    """(rank, world size) of this process. On CPU-only machines accelerate sees a DeepSpeed
    launch as one process; torch.distributed knows the truth."""
    import torch.distributed as dist
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return accelerator.process_index, accelerator.num_processes


def check_processes(accelerator, world: int) -> None:
    """Refuse a launch where torch.distributed has several processes but accelerate sees
    one (a CPU launch without ``ACCELERATE_USE_CPU=true``): accelerate would neither sync
    gradients nor wait between processes, and every process would write the same files."""
    from accelerate.utils import DistributedType

    if world > accelerator.num_processes and accelerator.distributed_type == DistributedType.NO:
        raise StageError(
            f"num_processes: {world} processes were launched but accelerate runs them as "
            f"independent single processes (got distributed_type NO; allowed a distributed "
            f"launch). Without a GPU set ACCELERATE_USE_CPU=true in the environment, as the "
            f"run's commands.sh does.")


def first_item(batch: list) -> Any:
    return batch[0]


def step_generator(seed: int, rank: int, micro_step: int):
    """The noise/timestep generator of one micro-step: depends only on its seed, so a
    resumed run draws what an uninterrupted one would."""
    import numpy as np
    import torch
    s = int(np.random.SeedSequence([seed, rank, micro_step]).generate_state(1)[0])
    return torch.Generator().manual_seed(s)


def read_trainer_state(state_dir: Path) -> dict[str, Any]:
    p = state_dir / TRAINER_STATE
    if not p.is_file():
        raise StageError(f"resume_from: no saved training state in {state_dir} (missing "
                         f"{TRAINER_STATE}; point it at an output folder's state/)")
    return json.loads(p.read_text(encoding="utf-8"))


def run_train(cfg: RunConfig, progress: ProgressWriter, stopper: Stopper
              ) -> tuple[str, dict[str, Any]]:
    from backend.hub import resolve_component_dirs
    from backend.models import get_adapter

    adapter = get_adapter(cfg.model_family)
    one_shot = cfg.task == "sft"
    # --- check inputs before any heavy import or model load ---
    if one_shot:
        from backend.data import ImageDataset, check_dataset
        records = check_dataset(cfg)
        components = adapter.STAGE2_COMPONENTS + adapter.STAGE1_COMPONENTS
    else:
        from backend.cache import CachedDataset, check_cache
        from backend.readgate import for_config as read_gate
        check_cache(cfg.dataset_base_path, read_gate(cfg))
        components = adapter.STAGE2_COMPONENTS
        if cfg.dataset_metadata_path:
            log(f"[train] sft:train reads the stage-1 cache in {cfg.dataset_base_path}; "
                f"dataset_metadata_path is not used")
    resume_state = None
    if cfg.resume_from:
        resume_state = read_trainer_state(Path(cfg.resume_from))
    if cfg.lora_checkpoint and not Path(cfg.lora_checkpoint).is_file():
        raise StageError(f"lora_checkpoint: file not found (got {cfg.lora_checkpoint!r})")
    dirs = resolve_component_dirs(cfg, components)

    import torch
    from accelerate import Accelerator
    from accelerate.utils import DistributedDataParallelKwargs, set_seed

    # torch.distributed repeats this FutureWarning for every ZeRO collective.
    warnings.filterwarnings("ignore", category=FutureWarning,
                            message=r".*torch\.distributed\.\w+` is deprecated")
    # DeepSpeed steps the optimizer itself; torch cannot see it and warns once, wrongly.
    warnings.filterwarnings("ignore", message=r"Detected call of `lr_scheduler\.step\(\)`")

    from backend import lora
    from backend.models import configure_deepspeed_checkpointing

    accelerator = Accelerator(
        gradient_accumulation_steps=cfg.gradient_accumulation_steps,
        kwargs_handlers=[DistributedDataParallelKwargs(
            find_unused_parameters=cfg.find_unused_parameters)])
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
        f"{'ZeRO-%d' % zero_stage if ds_config else 'no DeepSpeed'}, weights {dtype}")

    # --- model ---
    transformer = load_trainable_transformer(cfg, adapter, dirs["transformer"], dtype,
                                             accelerator, ds_plugin, zero_stage)
    encoder = None
    if one_shot:
        encoder = load_frozen_encoder(adapter, dirs, dtype, accelerator.device, ds_plugin)
    params = [p for p in transformer.parameters() if p.requires_grad]
    n_params = sum(p.numel() for p in params)
    log(f"[train] LoRA rank {cfg.lora_rank} on {len(cfg.target_modules())} module names: "
        f"{len(params)} tensors, {n_params} parameters")

    # --- optimizer, data ---
    optimizer = make_optimizer(cfg, params, ds_config)
    lr_scheduler = make_lr_scheduler(cfg, optimizer)  # on the optimizer DeepSpeed wraps
    if one_shot:
        dataset = ImageDataset(records, cfg, repeat=cfg.dataset_repeat)
    else:
        dataset = CachedDataset(cfg.dataset_base_path, repeat=cfg.dataset_repeat,
                                gate=read_gate(cfg))
    # accelerate shards the loader across the processes it knows of; the rest we do here.
    shard = world // accelerator.num_processes
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
    total_steps = cfg.num_epochs * steps_per_epoch
    if cfg.max_steps:
        total_steps = min(total_steps, cfg.max_steps)
    schedule = adapter.training_schedule()
    unwrapped = accelerator.unwrap_model(transformer)
    gather = zero_stage == 3

    # --- saving ---
    if not ds_config:
        # Non-DeepSpeed resume state keeps only the LoRA weights, never the frozen base.
        def keep_lora_only(models, weights, output_dir):
            for i, w in enumerate(weights):
                weights[i] = {k: v for k, v in w.items() if "lora_" in k}
        accelerator.register_save_state_pre_hook(keep_lora_only)

    def save_lora(name: str, step: int) -> Path:
        tensors = lora.collect_lora_state(unwrapped, cfg.remove_prefix_in_ckpt, gather=gather)
        path = out / name
        if is_main:
            lora.save_lora(path, tensors, rank=cfg.lora_rank, target_modules=cfg.target_modules(),
                           base_model=cfg.lora_base_model, model_family=cfg.model_family,
                           extra={"step": step, "base_model_path": dirs["transformer"]})
            progress.emit("checkpoint", step=step, path=str(path))
            prune_checkpoints(out, cfg.keep_last_n_checkpoints)
            log(f"[train] saved {path}")
        accelerator.wait_for_everyone()
        return path

    def save_state(step: int, epoch: int) -> None:
        final, tmp = out / STATE_DIR, out / f".{STATE_DIR}.tmp"
        if is_main and tmp.exists():
            shutil.rmtree(tmp)
        accelerator.wait_for_everyone()
        kwargs = {"exclude_frozen_parameters": True} if ds_config else {}
        accelerator.save_state(str(tmp), **kwargs)
        accelerator.wait_for_everyone()
        if is_main:
            lora.write_json_atomic(tmp / TRAINER_STATE, {
                "global_step": step, "epoch": epoch, "total_steps": total_steps,
                "steps_per_epoch": steps_per_epoch, "num_processes": world,
                "gradient_accumulation_steps": accum, "zero_stage": zero_stage,
                "time": time.time()})
            if final.exists():
                shutil.rmtree(final)
            os.replace(tmp, final)
        accelerator.wait_for_everyone()

    # --- resume ---
    global_step = 0
    if resume_state is not None:
        check_resume(resume_state, steps_per_epoch, world, accum)
        kwargs = {"load_module_strict": False} if ds_config else {"strict": False}
        accelerator.load_state(cfg.resume_from, **kwargs)
        global_step = int(resume_state["global_step"])
        for _ in range(global_step):
            lr_scheduler.step()
        log(f"[train] resumed from {cfg.resume_from} at step {global_step}")
    elif cfg.lora_checkpoint:
        log(f"[train] LoRA initialised from {cfg.lora_checkpoint}")

    if is_main:
        args = cfg.to_dict()
        args.update({"num_processes": world, "zero_stage": zero_stage,
                     "mixed_precision": accelerator.mixed_precision,
                     "resolved_components": {k: str(v) for k, v in dirs.items()}})
        lora.write_json_atomic(out / "training_args.json", args)
    tb = make_tensorboard(out / "tensorboard") if is_main else None

    start_epoch = global_step // steps_per_epoch
    progress.emit("start", total=total_steps, epochs=cfg.num_epochs, step=global_step,
                  steps_per_epoch=steps_per_epoch, num_processes=world)
    log(f"[train] {total_steps} steps ({steps_per_epoch} per epoch, {len(dataset)} samples x "
        f"{cfg.num_epochs} epochs, {world} process(es), accumulation {accum})")

    # --- loop ---
    transformer.train()
    t_start, steps_timed = time.time(), 0
    loss_sum = torch.zeros((), dtype=torch.float32)
    stopped = False
    last_saved_step = global_step
    epoch = start_epoch
    for epoch in range(start_epoch, cfg.num_epochs):
        if global_step >= total_steps:
            break
        sampler.use_epoch(epoch)
        skip = (global_step - epoch * steps_per_epoch) * accum
        loader = accelerator.skip_first_batches(dataloader, skip) if skip else dataloader
        for i, batch in enumerate(loader, start=skip):
            micro = epoch * len(dataloader) + i
            with accelerator.accumulate(transformer):
                if one_shot:
                    batch = encoder.encode_sample(batch["pixels"], batch["prompt"])
                loss = adapter.training_loss(transformer, batch, schedule,
                                             step_generator(cfg.seed, rank, micro), dtype)
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
                          samples_per_s=round(accum * world / per_step, 3),
                          eta_s=round(per_step * (total_steps - global_step), 1))
            if tb is not None:
                tb.add_scalar("train/loss", step_loss, global_step)
                tb.add_scalar("train/lr", lr, global_step)
            if cfg.save_steps and global_step % cfg.save_steps == 0:
                save_lora(f"step-{global_step}.safetensors", global_step)
                save_state(global_step, epoch)
                last_saved_step = global_step
            if cfg.sample_every_n_steps and global_step % cfg.sample_every_n_steps == 0:
                path = out / f"step-{global_step}.safetensors"
                if last_saved_step != global_step or not cfg.save_steps:
                    path = save_lora(path.name, global_step)
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
            save_lora(f"epoch-{epoch}.safetensors", global_step)
            save_state(global_step, epoch + 1)
            last_saved_step = global_step

    # --- end ---
    if last_saved_step != global_step:
        save_lora(f"step-{global_step}.safetensors", global_step)
        save_state(global_step, epoch)
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


def check_resume(state: dict[str, Any], steps_per_epoch: int, world: int, accum: int) -> None:
    problems = []
    if state.get("num_processes") != world:
        problems.append(f"num_processes {state.get('num_processes')} -> {world}")
    if state.get("gradient_accumulation_steps") != accum:
        problems.append(f"gradient_accumulation_steps {state.get('gradient_accumulation_steps')}"
                        f" -> {accum}")
    if state.get("steps_per_epoch") != steps_per_epoch:
        problems.append(f"steps per epoch {state.get('steps_per_epoch')} -> {steps_per_epoch} "
                        f"(dataset or dataset_repeat changed)")
    if problems:
        raise StageError("resume_from: the saved state was trained with different settings: "
                         + "; ".join(problems))


def stop_requested(stopper: Stopper, world: int) -> bool:
    """Whether any rank got a stop signal (all ranks agree, so they stop at the same step)."""
    if world == 1:
        return stopper.is_set()
    import torch
    import torch.distributed as dist
    flag = torch.tensor([1.0 if stopper.is_set() else 0.0])
    if dist.get_backend() == "nccl":
        flag = flag.cuda()
    dist.all_reduce(flag)
    return bool(flag.item() > 0)


def load_trainable_transformer(cfg: RunConfig, adapter, folder: Path, dtype, accelerator,
                               ds_plugin, zero_stage: int):
    """The transformer with a fresh (or ``lora_checkpoint``) LoRA, ready for ``prepare``."""
    import torch

    from backend import lora
    from backend.models import block_checkpointing_func, load_partitioned

    on_cpu = cfg.initialize_model_on_cpu or zero_stage == 3
    device = "cpu" if on_cpu else accelerator.device
    if ds_plugin is not None and zero_stage == 3 and ds_plugin.zero3_init_flag:
        model = load_partitioned(adapter.transformer_class(), folder, dtype,
                                 remote_device="cpu" if cfg.initialize_model_on_cpu else None)
        log("[train] transformer built partitioned (ZeRO-3 zero3_init_flag)")
    else:
        model = adapter.load_transformer(folder, dtype, device)
    lora.add_lora(model, cfg.lora_rank, cfg.target_modules())
    if cfg.lora_checkpoint:
        lora.init_from_checkpoint(model, cfg.lora_checkpoint)
    if ds_plugin is None:
        # Trainable LoRA weights stay float32 under autocast; DeepSpeed keeps its own
        # fp32 master copy.
        for p in model.parameters():
            if p.requires_grad:
                p.data = p.data.to(torch.float32)
    if cfg.use_gradient_checkpointing:
        model.enable_gradient_checkpointing(gradient_checkpointing_func=block_checkpointing_func(
            cfg.use_gradient_checkpointing_offload))
    return model


def load_frozen_encoder(adapter, dirs, dtype, device, ds_plugin):
    """Text encoder + VAE for one-shot sft: frozen, never partitioned by ZeRO-3 init."""
    if ds_plugin is not None:
        with ds_plugin.zero3_init_context_manager(enable=False):
            return adapter.load_encoder(dirs, dtype, device)
    return adapter.load_encoder(dirs, dtype, device)


def make_optimizer(cfg: RunConfig, params: list, ds_config: dict | None):
    """AdamW; DeepSpeed's CPU Adam when the optimizer is offloaded; accelerate's
    ``DummyOptim`` when the DeepSpeed config defines its own optimizer."""
    import torch

    if ds_config and "optimizer" in ds_config:
        from accelerate.utils import DummyOptim
        kind = ds_config["optimizer"].get("type", "?")
        log(f"[train] optimizer {kind} from the DeepSpeed config (lr and weight_decay 'auto' "
            f"take learning_rate and weight_decay)" + (
                "; lr_warmup_steps is not applied: DeepSpeed owns the optimizer, so give its "
                "config a scheduler block for warm-up" if cfg.lr_warmup_steps else ""))
        return DummyOptim(params, lr=cfg.learning_rate, weight_decay=cfg.weight_decay)
    offload = ((ds_config or {}).get("zero_optimization", {}).get("offload_optimizer") or {}
               ).get("device", "none")
    if ds_config and offload not in (None, "none"):
        from deepspeed.ops.adam import DeepSpeedCPUAdam
        return DeepSpeedCPUAdam(params, lr=cfg.learning_rate, weight_decay=cfg.weight_decay,
                                adamw_mode=True)
    return torch.optim.AdamW(params, lr=cfg.learning_rate, weight_decay=cfg.weight_decay)


def make_lr_scheduler(cfg: RunConfig, optimizer):
    """Linear warm-up over ``lr_warmup_steps`` optimizer steps, then constant. Stepped once
    per optimizer step by the loop (not by accelerate, which would step it once per
    process)."""
    import torch

    warmup = cfg.lr_warmup_steps

    def factor(step: int) -> float:
        return min(1.0, (step + 1) / warmup) if warmup > 0 else 1.0

    if not hasattr(optimizer, "param_groups"):  # DummyOptim: DeepSpeed owns the optimizer
        return _NoScheduler()
    return torch.optim.lr_scheduler.LambdaLR(optimizer, factor)


class _NoScheduler:
    def step(self) -> None:
        pass


def current_lr(lr_scheduler, cfg: RunConfig) -> float:
    if hasattr(lr_scheduler, "get_last_lr"):
        return float(lr_scheduler.get_last_lr()[0])
    return cfg.learning_rate


def prune_checkpoints(out: Path, keep: int | None) -> None:
    if not keep:
        return
    steps = sorted(out.glob("step-*.safetensors"),
                   key=lambda p: int(p.stem.split("-", 1)[1]) if p.stem.split("-", 1)[1]
                   .isdigit() else -1)
    for p in steps[:-keep]:
        p.unlink(missing_ok=True)


def make_tensorboard(folder: Path):
    try:
        from torch.utils.tensorboard import SummaryWriter
    except ImportError:
        log("[train] TensorBoard logging off: install the `tensorboard` package")
        return None
    return SummaryWriter(log_dir=str(folder))


def maybe_render_samples(cfg: RunConfig, checkpoint: Path, step: int,
                         progress: ProgressWriter) -> None:
    """Samples during training (``sample_every_n_steps``), on the main process, through the
    sample stage's ``render_samples``; a failure is logged, never fatal."""
    if not is_main_process():
        return
    try:
        from backend.stages.sample import render_samples
    except ImportError:
        return
    try:
        render_samples(cfg, [checkpoint], Path(cfg.output_path).parent / "samples",
                       progress=progress, step=step)
    except Exception as e:  # noqa: BLE001
        log(f"[train] samples at step {step} failed: {_one_line(e, with_type=True)}")


if __name__ == "__main__":
    sys.exit(main())
