"""The training loop's parts, shared by nothing but the train stage: reading the model for
training (LoRA attached, partitioned under ZeRO-3), the optimizer and schedule, the epoch
sampler and per-step noise, checkpoints and the resume state, stopping and logging.

``backend/stages/train.py`` reads top to bottom with these: args, data, model, loop, save.
"""
from __future__ import annotations

import json
import math
import os
import shutil
import signal
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from backend.config.lowvram import entries_for
from backend.config.schema import RunConfig
from backend.core import rundir
from backend.core.diskspace import writing
from backend.core.progress import ProgressWriter
from backend.core.readgate import for_config as read_gate
from backend.families.common import block_checkpointing_func, load_partitioned
from backend.models import full, layer_offload, lora
from backend.models.quantize import quantize_component
from backend.training import samples

STATE_DIR = rundir.STATE
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


def one_line(e: BaseException, with_type: bool = False) -> str:
    text = " ".join(str(e).split()) or type(e).__name__
    text = f"{type(e).__name__}: {text}" if with_type else text
    return text[:500]



def weight_dtype(mixed_precision: str):
    import torch
    return {"bf16": torch.bfloat16, "fp16": torch.float16}.get(str(mixed_precision),
                                                              torch.float32)


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
            f"run's {rundir.COMMANDS} does.")


@dataclass(frozen=True)
class StepPlan:
    """How many optimizer steps a run trains: ``max_train_steps`` sets the target (the
    epochs follow from it), else ``num_epochs``; ``max_steps`` caps either."""
    per_epoch: int
    total: int
    epochs: int
    accum: int  # micro-batches per optimizer step

    @classmethod
    def of(cls, cfg: RunConfig, batches_per_epoch: int, accum: int) -> "StepPlan":
        per_epoch = max(1, math.ceil(batches_per_epoch / accum))
        if cfg.max_train_steps:  # a step target: the epochs follow from it
            total = cfg.max_train_steps
            epochs = math.ceil(total / per_epoch)
        else:
            epochs = cfg.num_epochs
            total = epochs * per_epoch
        if cfg.max_steps:  # a cap: never more steps than the epochs give
            total = min(total, cfg.max_steps)
        return cls(per_epoch=per_epoch, total=total, epochs=epochs, accum=accum)


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


# Options that decide what the resume state holds (the trained tensors, the optimizer's
# parameter groups, an EMA): a resumed run must keep them (recorded in trainer_state.json).
STATE_SHAPING = ("trainable_models", "lora_rank", "lora_type", "lora_target_modules",
                 "loraplus_lr_ratio", "ema_decay")


def state_shaping(cfg: RunConfig) -> dict[str, Any]:
    return {name: getattr(cfg, name, None) for name in STATE_SHAPING}


def check_resume_options(state: dict[str, Any], cfg: RunConfig) -> None:
    """Before the model loads: refuse a state saved with other ``STATE_SHAPING`` options."""
    saved = state.get("options") or {}
    _refuse_resume([f"{name} {saved[name]!r} -> {value!r}"
                    for name, value in state_shaping(cfg).items()
                    if name in saved and saved[name] != value])


def _refuse_resume(problems: list[str]) -> None:
    if problems:
        raise StageError("resume_from: the saved state was trained with different settings: "
                         + "; ".join(problems))


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
    _refuse_resume(problems)


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


def load_trainable_transformer(cfg: RunConfig, family, folder: Path, dtype, accelerator,
                               ds_plugin, zero_stage: int):
    """The transformer with a fresh (or ``lora_checkpoint``) LoRA, ready for ``prepare``."""
    import torch

    quantized = bool(entries_for(cfg, "transformer"))
    on_cpu = (cfg.initialize_model_on_cpu or zero_stage == 3 or cfg.enable_model_cpu_offload
              or quantized)  # low VRAM: quantized and offloaded block by block from the host
    device = "cpu" if on_cpu else accelerator.device
    if ds_plugin is not None and zero_stage == 3 and ds_plugin.zero3_init_flag:
        model = load_partitioned(family.transformer_class(), folder, dtype,
                                 remote_device="cpu" if cfg.initialize_model_on_cpu else None)
        log("[train] transformer built partitioned (ZeRO-3 zero3_init_flag)")
    else:
        model = family.load_transformer(folder, dtype, device)
    if cfg.preset_lora_path:

        # Through the run's read gate: a signed-in user's run reads only their own files.
        if not read_gate(cfg).is_file(cfg.preset_lora_path):
            raise StageError(f"preset_lora_path: file not found (got {cfg.preset_lora_path!r})")
        merged = lora.merge_lora_file(model, cfg.preset_lora_path)
        log(f"[train] preset_lora_path {cfg.preset_lora_path} merged into {merged} modules "
            f"(not part of the saved LoRA)")
    if quantized:  # a quantized frozen base (backend/models/quantize.py); the LoRA stays float32
        quantize_component(cfg, model, "transformer", family.quantize_skip, dtype,
                           device=accelerator.device, log=log,
                           defer=cfg.enable_model_cpu_offload)
    if cfg.full_training:  # every weight trains; no LoRA
        model.requires_grad_(True)
    else:
        lora.add_lora(model, cfg.lora_rank, family.target_modules(cfg.target_modules()),
                      **lora.adapter_options(cfg))
    if cfg.lora_checkpoint:
        lora.init_from_checkpoint(model, cfg.lora_checkpoint, gate=read_gate(cfg))
    if ds_plugin is None:
        # Trainable weights (the LoRA's, or all in a full fine-tune) stay float32 under
        # autocast; DeepSpeed keeps its own fp32 master copy.
        for p in model.parameters():
            if p.requires_grad:
                p.data = p.data.to(torch.float32)
    if cfg.use_gradient_checkpointing:
        model.enable_gradient_checkpointing(gradient_checkpointing_func=block_checkpointing_func(
            cfg.use_gradient_checkpointing_offload))
    if cfg.enable_model_cpu_offload:  # layer-wise offload (backend/models/layer_offload.py)
        model._layer_offload = layer_offload.attach(cfg, family, model, accelerator.device, log=log)
    return model


def load_frozen_encoder(family, dirs, dtype, device, ds_plugin, offload: str = "none"):
    """Text encoder + VAE for one-shot sft: frozen, never partitioned by ZeRO-3 init;
    ``offload`` "model" (``offload_models``) keeps each in host RAM between uses."""
    if ds_plugin is not None:
        with ds_plugin.zero3_init_context_manager(enable=False):
            return family.load_encoder(dirs, dtype, device, offload=offload)
    return family.load_encoder(dirs, dtype, device, offload=offload)


def make_optimizer(cfg: RunConfig, params: list, ds_config: dict | None):
    """AdamW, or accelerate's ``DummyOptim`` when the DeepSpeed config defines its own
    optimizer.

    With the optimizer offloaded, accelerate hands DeepSpeed its CPU Adam built from the
    optimizer it is given, in AdamW mode only when that optimizer is ``torch.optim.AdamW``
    (anything else, DeepSpeed's own CPU Adam included, becomes Adam with L2 weight decay,
    which shrinks every LoRA weight by the learning rate each step). So the optimizer given
    is always ``torch.optim.AdamW``, and the schedule is built on the prepared optimizer
    (``backend.training.optimizers.make_lr_scheduler``), the one that steps."""
    import torch

    if cfg.enable_optimizer_cpu_offload:  # low VRAM without DeepSpeed
        return layer_offload.make_optimizer(cfg, params, log=log)
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
        log("[train] optimizer AdamW, stepped on the CPU by DeepSpeed's CPU Adam (AdamW mode) "
            "beside the offloaded optimizer states")
    return torch.optim.AdamW(params, lr=cfg.learning_rate, weight_decay=cfg.weight_decay)


def current_lr(lr_scheduler, cfg: RunConfig) -> float:
    if hasattr(lr_scheduler, "get_last_lr"):
        return float(lr_scheduler.get_last_lr()[0])
    return cfg.learning_rate


def prune_checkpoints(out: Path, keep: int | None) -> None:
    """Keep the newest ``keep`` step checkpoints: LoRA files, or full checkpoint folders
    (each with its EMA twin)."""
    if not keep:
        return
    found = [(rundir.checkpoint_of(p), p) for p in rundir.list_checkpoints(out)]
    steps = [p for of, p in sorted(found, key=lambda t: t[0][1]) if of[0] == "step"]
    for p in (q for old in steps[:-keep] for q in (old, rundir.ema_twin(old))):
        if p.is_dir():
            shutil.rmtree(p, ignore_errors=True)
        else:
            p.unlink(missing_ok=True)


def maybe_render_samples(cfg: RunConfig, checkpoint: Path, step: int,
                         progress: ProgressWriter) -> list[tuple[Path, dict]]:
    """Samples during training (``sample_every_n_steps``), on the main process, through the
    sample stage's ``render_samples``; a failure is logged, never fatal. Returns each
    image file with its index entry (for the trackers; none on the other processes)."""
    if not is_main_process():
        return []
    folder = Path(cfg.output_path).parent / rundir.SAMPLES
    try:
        entries = samples.render_samples(cfg, [checkpoint], folder, progress=progress,
                                         step=step)
    except Exception as e:  # noqa: BLE001
        log(f"[train] samples at step {step} failed: {one_line(e, with_type=True)}")
        return []
    return [(folder / e["image"], e) for e in entries]



class Checkpointer:
    """The checkpoints (LoRA files, or full components) and resume state of one run.

    ``save_weights`` writes the checkpoint ``<output>/<stem>``: a LoRA file
    ``<stem>.safetensors`` (``save_lora``), or with ``trainable_models`` the trained
    component as a diffusers folder ``<stem>/`` (``backend.models.full``); rank 0 writes,
    the others wait (and gather under ZeRO-3), and it is announced;
    ``save_state`` writes the full resume state (LoRA, optimizer, step) to
    ``<output>/state`` through a temporary folder, so a crash never leaves half a state;
    ``resume`` loads it back and returns the step to continue from. Without DeepSpeed the
    state keeps only the LoRA weights, never the frozen base. With an EMA (``ema``, a
    ``backend.training.ema.WeightEMA``) every checkpoint gets its EMA twin beside it
    (``rundir.ema_twin``: ``step-N-ema.safetensors``, or a full fine-tune's ``step-N-ema/``)
    and the state keeps the EMA (``ema.safetensors``), loaded back by ``resume``.
    """

    def __init__(self, cfg: RunConfig, accelerator, model, out: Path, progress: ProgressWriter,
                 *, is_main: bool, gather: bool, deepspeed: bool, base_model_path: Any,
                 save_dtype: Any = None):
        self.cfg, self.accelerator, self.model, self.out = cfg, accelerator, model, out
        self.save_dtype = save_dtype  # a full checkpoint's weights (the run's precision)
        self.progress, self.is_main, self.gather = progress, is_main, gather
        self.deepspeed, self.base_model_path = deepspeed, base_model_path
        self.totals: dict[str, Any] = {}
        self.ema: Any = None  # the run's WeightEMA, when ema_decay is set
        self.rank = int(os.environ.get("RANK", "0"))  # as torch.distributed numbers it
        if not deepspeed and not cfg.full_training:
            def keep_lora_only(models, weights, output_dir):
                for i, w in enumerate(weights):
                    weights[i] = {k: v for k, v in w.items() if "lora_" in k}
            accelerator.register_save_state_pre_hook(keep_lora_only)

    def set_totals(self, **totals: Any) -> None:
        """Step counts and the process layout, stored with every state (resume checks)."""
        self.totals = dict(totals)

    def weights_path(self, stem: str) -> Path:
        """Where the checkpoint ``stem`` is (or would be) written."""
        return self.out / (stem if self.cfg.full_training else f"{stem}.safetensors")

    def save_weights(self, stem: str, step: int) -> Path:
        """The checkpoint of this step (see the class) and its EMA twin; returns its path."""
        path = (self.save_full(stem, step) if self.cfg.full_training
                else self.save_lora(f"{stem}.safetensors", step))
        if self.ema is not None:
            self.save_ema_twin(path, step)
        return path

    def save_ema_twin(self, path: Path, step: int) -> None:
        """The EMA beside the checkpoint ``path`` (every rank; nothing before it began)."""
        ema = self.ema
        if ema.shadow is None:
            log(f"[train] no EMA twin of {path.name}: the EMA begins at step "
                f"{ema.start_step}")
            return
        extra = {"ema_decay": ema.decay, "ema_update_every": ema.update_every,
                 "ema_start_step": ema.start_step, "ema_began_at": ema.began_at,
                 "ema_of": path.name}
        twin = rundir.ema_twin(path)
        if self.cfg.full_training:
            self.save_full(twin.name, step, values=ema.whole, extra=extra)
        else:
            self.save_lora(twin.name, step, tensors=ema.tensors(), extra=extra)

    def save_full(self, stem: str, step: int, values=None,
                  extra: dict[str, Any] | None = None) -> Path:
        """A full fine-tune's checkpoint folder ``<output>/<stem>`` (``values``: the weights
        to write instead of the model's, an EMA's)."""
        cfg = self.cfg
        path = full.save_component(
            self.model, self.weights_path(stem), dtype=self.save_dtype, is_main=self.is_main,
            gather=self.gather, barrier=self.accelerator.wait_for_everyone, values=values,
            info={"step": step, "model_family": cfg.model_family,
                  "trainable_models": cfg.trainable_models,
                  "base_model_path": str(self.base_model_path), **(extra or {})})
        if self.is_main:
            self.progress.emit("checkpoint", step=step, path=str(path))
            prune_checkpoints(self.out, cfg.keep_last_n_checkpoints)
            log(f"[train] saved {path} (the whole {full.WEIGHTS_NAME} in "
                f"{str(self.save_dtype).replace('torch.', '')})")
        self.accelerator.wait_for_everyone()
        return path

    def save_lora(self, name: str, step: int, tensors: dict[str, Any] | None = None,
                  extra: dict[str, Any] | None = None) -> Path:
        """The LoRA file ``<output>/<name>`` (``tensors``: others than the model's, an EMA's,
        written without a checkpoint event)."""
        cfg = self.cfg
        own = tensors is None
        if own:
            tensors = lora.collect_lora_state(self.model, cfg.remove_prefix_in_ckpt,
                                              gather=self.gather)
        path = self.out / name
        if self.is_main:
            lora.save_lora(path, tensors, rank=cfg.lora_rank,
                           target_modules=cfg.target_modules(), base_model=cfg.lora_base_model,
                           model_family=cfg.model_family,
                           extra={"step": step, "base_model_path": self.base_model_path,
                                  **(extra or {})},
                           alpha=cfg.lora_alpha)
            if own:
                self.progress.emit("checkpoint", step=step, path=str(path))
            prune_checkpoints(self.out, cfg.keep_last_n_checkpoints)
            log(f"[train] saved {path}")
        self.accelerator.wait_for_everyone()
        return path

    def save_state(self, step: int, epoch: int) -> None:
        acc = self.accelerator
        final, tmp = self.out / STATE_DIR, self.out / f".{STATE_DIR}.tmp"
        if self.is_main and tmp.exists():
            shutil.rmtree(tmp)
        acc.wait_for_everyone()
        kwargs = {"exclude_frozen_parameters": True} if self.deepspeed else {}
        with writing(tmp, partial=tmp if self.is_main else None):
            acc.save_state(str(tmp), **kwargs)
            acc.wait_for_everyone()
            if self.ema is not None:
                self.ema.save_state(tmp, self.rank)
        acc.wait_for_everyone()
        if self.is_main:
            t = self.totals
            lora.write_json_atomic(tmp / TRAINER_STATE, {
                "global_step": step, "epoch": epoch, "total_steps": t.get("total_steps"),
                "steps_per_epoch": t.get("steps_per_epoch"), "num_processes": t.get("world"),
                "gradient_accumulation_steps": t.get("accum"),
                "zero_stage": t.get("zero_stage"), "options": state_shaping(self.cfg),
                "time": time.time()})
            if final.exists():
                shutil.rmtree(final)
            os.replace(tmp, final)
        acc.wait_for_everyone()

    def resume(self, state: dict[str, Any], lr_scheduler) -> int:
        """Load ``cfg.resume_from``; step the schedule to where it was; return the step."""
        kwargs = {"load_module_strict": False} if self.deepspeed else {"strict": False}
        read_gate(self.cfg).check_tree(self.cfg.resume_from, "resume_from")
        self.accelerator.load_state(self.cfg.resume_from, **kwargs)
        step = int(state["global_step"])
        for _ in range(step):
            lr_scheduler.step()
        log(f"[train] resumed from {self.cfg.resume_from} at step {step}")
        if self.ema is not None:
            try:
                found = self.ema.load_state(Path(self.cfg.resume_from), self.rank)
            except ValueError as e:
                raise StageError(str(e)) from None
            log(f"[train] EMA resumed (began at step {self.ema.began_at})" if found else
                "[train] the state holds no EMA: it begins at its next update")
        return step
