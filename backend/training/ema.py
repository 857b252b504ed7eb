"""An exponential moving average (EMA) of the trained weights (``ema_decay``).

What is averaged: the tensors that train -- a LoRA's adapter tensors, or in a full
fine-tune (``trainable_models``) every trainable parameter of the component -- kept in
float32 on ``ema_device`` (``gpu``: the training device; ``cpu``: host RAM, for low VRAM).

The schedule, exactly (``ema_decay`` d, ``ema_update_every`` N, ``ema_start_step`` S): the
EMA begins as a copy of the weights after optimizer step S (S = 0: the weights before the
first step), then after steps S + N, S + 2N, ... it becomes

    ema <- d * ema + (1 - d) * w

with the same d every time (no warm-up). A run resumed from a state without an EMA (the
option turned on later) begins one at the first of those steps it reaches. The EMA and its
first and last step are saved in the resume state and loaded back, so a resumed run's EMA is
an uninterrupted run's.

Under ZeRO-3:

- a LoRA: the LoRA parameters are gathered for each update, as for saving (they are small),
  and every rank keeps the EMA of the whole LoRA; rank 0 writes it;
- a full fine-tune: every rank keeps the EMA of its own partition of each parameter
  (``p.ds_tensor``, the flat shard DeepSpeed updates), so the EMA is partitioned as the
  weights are; a checkpoint's twin gathers it one parameter at a time (``whole``, every rank
  calls it) and the resume state holds one file per rank (``ema-rank<r>.safetensors``).

Why not diffusers' ``training_utils.EMAModel``: its first update copies the weights and its
decay then warms up as ``min(decay, (1 + k) / (10 + k))`` (``min_decay`` can pin it), its
``step`` copies outright every tensor that does not require grad, it subtracts the live
weights from the shadow on one device (no EMA in host RAM of weights on the GPU), and under
ZeRO-3 it gathers only when transformers' global DeepSpeed flag is set, into shadows
cloned from the (empty) local partitions. The update itself is one ``lerp_`` a tensor.
"""
from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any, Callable, ContextManager

from backend.core import rundir
from backend.models import lora

FORMAT = "zerolora-ema"


class WeightEMA:
    """The EMA of the tensors ``live()`` yields (a context manager giving {name: tensor},
    every rank entering it together: under ZeRO-3 it may gather)."""

    def __init__(self, live: Callable[[], ContextManager[dict[str, Any]]], *, decay: float,
                 update_every: int = 1, start_step: int = 0, device: Any = "cpu",
                 sharded: bool = False, params: dict[int, tuple[str, Any]] | None = None):
        if not 0 < decay < 1:
            raise ValueError(f"ema_decay: outside (0, 1) (got {decay!r})")
        self.live, self.decay = live, float(decay)
        self.update_every, self.start_step = int(update_every), int(start_step)
        self.device, self.sharded = device, sharded
        self.params = params or {}  # id(parameter) -> (name, parameter): full fine-tunes
        self.shadow: dict[str, Any] | None = None
        self.began_at: int | None = None
        self.last_step: int | None = None

    def due(self, step: int) -> bool:
        """Whether the EMA takes the weights after optimizer step ``step``."""
        return step >= self.start_step and (step - self.start_step) % self.update_every == 0

    def step(self, step: int) -> bool:
        """After optimizer step ``step`` (every rank): begin or update the EMA when due;
        True when it did."""
        import torch

        if not self.due(step):
            return False
        with torch.no_grad(), self.live() as tensors:
            if self.shadow is None:
                self.shadow = {k: v.detach().to(self.device, torch.float32, copy=True)
                               for k, v in tensors.items()}
                self.began_at = step
            else:
                weight = 1.0 - self.decay
                for k, s in self.shadow.items():  # one temporary at a time
                    s.lerp_(tensors[k].detach().to(s.device, torch.float32), weight)
        self.last_step = step
        return True

    # -- saving
    def whole(self, param) -> Any:
        """The EMA of ``param`` (a full fine-tune's parameter) as a whole tensor, or None for
        a tensor the EMA does not hold. Sharded (ZeRO-3): every rank must call it, for the
        same parameters in the same order (it gathers the ranks' shards)."""
        entry = self.params.get(id(param))
        if entry is None or self.shadow is None:
            return None
        value = self.shadow[entry[0]]
        if not self.sharded:
            return value
        import torch
        import torch.distributed as dist

        device = torch.device("cuda", torch.cuda.current_device()) \
            if dist.get_backend() == "nccl" else torch.device("cpu")
        shard = value.to(device)
        parts = [torch.empty_like(shard) for _ in range(dist.get_world_size())]
        dist.all_gather(parts, shard)
        full = torch.cat(parts)[: param.ds_numel]
        return full.view(tuple(param.ds_shape)).cpu()

    def tensors(self) -> dict[str, Any]:
        """The EMA tensors on the CPU (a LoRA's, for its twin file)."""
        return {k: v.detach().cpu() for k, v in (self.shadow or {}).items()}

    def meta(self) -> dict[str, str]:
        return {"format": FORMAT, "decay": repr(self.decay),
                "update_every": str(self.update_every), "start_step": str(self.start_step),
                "began_at": str(self.began_at), "last_step": str(self.last_step)}

    def state_file(self, folder: Path, rank: int) -> Path | None:
        """This rank's file of the resume state (None: this rank writes none)."""
        if self.sharded:
            return folder / rundir.EMA_STATE_SHARD.format(rank=rank)
        return folder / rundir.EMA_STATE if rank == 0 else None

    def save_state(self, folder: Path, rank: int) -> None:
        """The EMA into the resume state folder (nothing before it began)."""
        from safetensors.torch import save_file

        path = self.state_file(folder, rank)
        if path is None or self.shadow is None:
            return
        path.parent.mkdir(parents=True, exist_ok=True)
        save_file({k: v.contiguous() for k, v in self.tensors().items()}, str(path),
                  metadata=self.meta())

    def load_state(self, folder: Path, rank: int) -> bool:
        """The EMA from a resume state folder; False when the state has none."""
        from safetensors import safe_open

        path = folder / (rundir.EMA_STATE_SHARD.format(rank=rank) if self.sharded
                         else rundir.EMA_STATE)
        if not path.is_file():
            return False
        with safe_open(str(path), framework="pt") as f:
            meta = f.metadata() or {}
            shadow = {k: f.get_tensor(k) for k in f.keys()}
        with self.live() as live:  # the names and shapes must be this run's
            expected = {k: tuple(v.shape) for k, v in live.items()}
        got = {k: tuple(v.shape) for k, v in shadow.items()}
        if got != expected:
            raise ValueError(f"resume_from: the saved EMA ({path}) holds other tensors than "
                             f"this run trains")
        self.shadow = {k: v.to(self.device) for k, v in shadow.items()}
        self.began_at = _int_or_none(meta.get("began_at"))
        self.last_step = _int_or_none(meta.get("last_step"))
        return True


def _int_or_none(text: str | None) -> int | None:
    return int(text) if text not in (None, "None", "") else None


def ema_device(cfg, accelerator_device) -> Any:
    """Where the EMA lives: the training device (``gpu``; the CPU on a machine without
    one), or host RAM (``cpu``)."""
    import torch

    device = torch.device(accelerator_device)
    return device if cfg.ema_device == "gpu" and device.type != "cpu" else torch.device("cpu")


def make_ema(cfg, model, accelerator_device, *, zero_stage: int) -> WeightEMA | None:
    """The run's EMA (None without ``ema_decay``): of the LoRA (gathered under ZeRO-3), or
    of a full fine-tune's trainable parameters (each rank its shard under ZeRO-3)."""
    if not cfg.ema_decay:
        return None
    options = dict(decay=cfg.ema_decay, update_every=cfg.ema_update_every,
                   start_step=cfg.ema_start_step, device=ema_device(cfg, accelerator_device))
    if not cfg.full_training:
        return WeightEMA(lambda: lora.gathered_lora(model, cfg.remove_prefix_in_ckpt,
                                                    gather=zero_stage == 3), **options)
    named = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
    sharded = zero_stage == 3 and any(hasattr(p, "ds_tensor") for _, p in named)

    @contextlib.contextmanager
    def live_full():
        yield {n: (p.ds_tensor if sharded else p) for n, p in named}

    return WeightEMA(live_full, sharded=sharded,
                     params={id(p): (n, p) for n, p in named}, **options)
