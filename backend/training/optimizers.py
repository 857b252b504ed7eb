"""Optimizers and learning-rate schedules of the train stage.

``optimizer`` (or the reference's ``customized_optimizer``, mapped onto the same fixed list
by the schema; nothing is imported from a user-given path):

- ``adamw``      ``torch.optim.AdamW`` (betas, eps, weight_decay); with optimizer offload
                 accelerate turns it into DeepSpeed's CPU Adam in AdamW mode (learning rate
                 and weight decay carried over), the one optimizer that runs on offloaded
                 states.
- ``adamw8bit``  ``bitsandbytes.optim.AdamW8bit`` (8-bit states; also runs on the CPU).
- ``adafactor``  ``transformers.optimization.Adafactor`` at the given learning rate
                 (``relative_step`` and ``scale_parameter`` off, so ``learning_rate`` and the
                 schedule decide the step, as for the others).
- ``prodigy``    ``prodigyopt.Prodigy``: estimates the step size itself; ``learning_rate`` is
                 a multiplier of it (1.0 as its authors advise).

The schema refuses every optimizer but adamw with optimizer offload (DeepSpeed's
``offload_optimizer_device`` and ``enable_optimizer_cpu_offload`` alike), and so does
``make_optimizer``: the log's ``optimizer <name> (<class>)`` always names what steps.
Under DeepSpeed without offload the optimizer is handed to ZeRO as a client optimizer (the
DeepSpeed JSON then carries ``zero_allow_untested_optimizer``, see ``backend/planning/plan.py``).

Schedules (``lr_scheduler``) come from diffusers' ``get_scheduler`` with
``lr_warmup_steps`` of linear warm-up; ``constant`` keeps the warm-up the stage always had
(step k of the warm-up at (k + 1) / warmup of the rate, never 0) and is diffusers'
``constant`` without one. The schedule is stepped once per optimizer step by the loop.

LoRA+ (``loraplus_lr_ratio``): ``param_groups`` splits the trainable tensors into two
parameter groups as peft's ``create_loraplus_optimizer`` does (lora_B and every 1-D tensor,
such as DoRA's magnitude, at ratio x ``learning_rate``; the rest, lora_A, at
``learning_rate``), and every optimizer above is built on the groups: torch's AdamW (and so
DeepSpeed's CPU Adam, which accelerate builds from its ``param_groups``, and torchao's
CPU-offload AdamW), the 8-bit AdamW and Adafactor. Prodigy learns one step size for all
groups and refuses unequal learning rates, so the schema refuses it with LoRA+. The
schedule scales each group's own initial rate, so the ratio holds through warm-up and decay.
"""
from __future__ import annotations

from typing import Any

from backend.config.schema import RunConfig, effective_optimizer
from backend.training import loop

# Where each optimizer comes from, for the message when its package is missing.
PACKAGES = {"adamw8bit": "bitsandbytes", "adafactor": "transformers", "prodigy": "prodigyopt"}


class OptimizerError(RuntimeError):
    """A chosen optimizer that cannot run here (its package is missing)."""


def optimizer_name(cfg: RunConfig) -> str:
    return effective_optimizer(cfg.model_dump())


def offloaded(ds_config: dict | None) -> bool:
    device = ((ds_config or {}).get("zero_optimization", {}).get("offload_optimizer") or {}
              ).get("device", "none")
    return bool(ds_config) and device not in (None, "none")


def param_groups(cfg: RunConfig, model) -> list:
    """What the optimizer steps: the trainable tensors of ``model`` (the LoRA's, or the
    component's in a full fine-tune); with ``loraplus_lr_ratio``, LoRA+'s two parameter
    groups, split as peft's ``create_loraplus_optimizer`` splits them (lora_B and every 1-D
    tensor at ratio x ``learning_rate``, lora_A first at ``learning_rate``). peft's function
    builds the optimizer itself, from a class, with its own weight decay; the offloaded paths
    (accelerate's swap for DeepSpeed's CPU Adam, torchao's CPU-offload wrapper) and
    ``weight_decay`` do not fit it, so the groups are made here the same way."""
    named = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
    ratio = cfg.loraplus_lr_ratio
    if not ratio:
        return [p for _, p in named]
    # A tensor partitioned by ZeRO-3 is empty here; its shape is kept in ds_shape.
    b = [p for n, p in named if "lora_B" in n or len(getattr(p, "ds_shape", p.shape)) == 1]
    ids = {id(p) for p in b}
    a = [p for _, p in named if id(p) not in ids]
    groups = [{"params": a, "lr": cfg.learning_rate},
              {"params": b, "lr": cfg.learning_rate * ratio}]
    return [g for g in groups if g["params"]]


def make_optimizer(cfg: RunConfig, params: list, ds_config: dict | None = None):
    """The optimizer over ``params`` (the trainable tensors, or ``param_groups``' LoRA+
    groups); accelerate's ``DummyOptim`` when the DeepSpeed config defines its own optimizer
    block."""
    import torch

    name = optimizer_name(cfg)
    lr, wd = cfg.learning_rate, cfg.weight_decay
    if cfg.loraplus_lr_ratio and name == "prodigy":  # the schema refuses it
        raise OptimizerError(f"loraplus_lr_ratio: prodigy learns one step size for every "
                             f"parameter group (got {cfg.loraplus_lr_ratio:g} with optimizer "
                             f"prodigy; allowed empty, or another optimizer)")
    if cfg.loraplus_lr_ratio and ds_config and "optimizer" in ds_config:
        raise OptimizerError(f"loraplus_lr_ratio: the DeepSpeed config defines its own "
                             f"optimizer, whose schedule sets one learning rate for every "
                             f"group (got {cfg.loraplus_lr_ratio:g}; allowed empty, or a "
                             f"DeepSpeed config without an optimizer block)")
    if cfg.enable_optimizer_cpu_offload:  # low VRAM without DeepSpeed (backend.models.layer_offload)
        if name != "adamw":  # the schema refuses it; never train another optimizer instead
            raise OptimizerError(f"optimizer: enable_optimizer_cpu_offload steps adamw only "
                                 f"(got {name}; allowed adamw, or enable_optimizer_cpu_offload "
                                 f"false)")
        return loop.make_optimizer(cfg, params, ds_config)  # the offloaded AdamW
    if ds_config and "optimizer" in ds_config:
        return loop.make_optimizer(cfg, params, ds_config)  # DummyOptim, with its note
    if offloaded(ds_config):
        if name != "adamw":  # the schema refuses it; a hand-written launch may not have
            raise OptimizerError(f"optimizer: with optimizer offload only adamw runs (got "
                                 f"{name}; allowed adamw, or no optimizer offload)")
        # accelerate swaps it for DeepSpeed's CPU Adam, in AdamW mode only because it is
        # torch's AdamW (backend.training.loop.make_optimizer says more).
        return loop.make_optimizer(cfg, params, ds_config)
    if name == "adamw":
        return torch.optim.AdamW(params, lr=lr, weight_decay=wd,
                                 betas=(cfg.adam_beta1, cfg.adam_beta2), eps=cfg.adam_epsilon)
    try:
        if name == "adamw8bit":
            from bitsandbytes.optim import AdamW8bit
            return AdamW8bit(params, lr=lr, weight_decay=wd,
                             betas=(cfg.adam_beta1, cfg.adam_beta2), eps=cfg.adam_epsilon)
        if name == "adafactor":
            from transformers.optimization import Adafactor
            return Adafactor(params, lr=lr, weight_decay=wd, scale_parameter=False,
                             relative_step=False, warmup_init=False,
                             decay_rate=cfg.adafactor_decay_rate,
                             clip_threshold=cfg.adafactor_clip_threshold)
        if name == "prodigy":
            from prodigyopt import Prodigy
            return Prodigy(params, lr=lr, weight_decay=wd, d_coef=cfg.prodigy_d_coef,
                           use_bias_correction=cfg.prodigy_use_bias_correction,
                           safeguard_warmup=cfg.prodigy_safeguard_warmup)
    except ImportError as e:
        raise OptimizerError(f"optimizer: {name} needs the `{PACKAGES[name]}` package (pip "
                             f"install {PACKAGES[name]}): {e}") from None
    raise OptimizerError(f"optimizer: unknown (got {name!r})")


class NoScheduler:
    """The DeepSpeed config owns the optimizer (and any schedule)."""

    def step(self) -> None:
        pass


def make_lr_scheduler(cfg: RunConfig, optimizer, total_steps: int, *,
                      deepspeed_owns: bool = False):
    """``lr_scheduler`` over ``total_steps`` optimizer steps with ``lr_warmup_steps`` of
    warm-up, on the optimizer ``accelerator.prepare`` returned (under DeepSpeed with the
    optimizer offloaded it is not the one ``make_optimizer`` built). ``deepspeed_owns``:
    the DeepSpeed config defines the optimizer (and so its schedule)."""
    import torch
    from diffusers.optimization import get_scheduler

    if deepspeed_owns or not hasattr(optimizer, "param_groups"):
        return NoScheduler()
    warmup = cfg.lr_warmup_steps
    if cfg.lr_scheduler == "constant" and warmup > 0:
        return torch.optim.lr_scheduler.LambdaLR(
            optimizer, lambda step: min(1.0, (step + 1) / warmup))
    return get_scheduler(cfg.lr_scheduler, optimizer, num_warmup_steps=warmup,
                         num_training_steps=max(1, total_steps),
                         num_cycles=cfg.lr_num_cycles, power=cfg.lr_power)


def describe(cfg: RunConfig, optimizer: Any) -> str:
    """One log line: the optimizer class, the schedule, and LoRA+'s groups."""
    line = (f"optimizer {optimizer_name(cfg)} ({type(optimizer).__name__}), lr "
            f"{cfg.learning_rate:g}, schedule {cfg.lr_scheduler} with "
            f"{cfg.lr_warmup_steps} warm-up steps")
    if cfg.loraplus_lr_ratio:
        line += f", LoRA+ ratio {cfg.loraplus_lr_ratio:g} ({describe_groups(optimizer)})"
    return line


def describe_groups(optimizer: Any) -> str:
    """The learning rate and tensor count of each parameter group of ``optimizer``, and the
    class that steps them (under DeepSpeed the innermost of the wrappers ``prepare``
    returns: DeepSpeed's CPU Adam with the optimizer offloaded)."""
    inner = optimizer
    while hasattr(getattr(inner, "optimizer", None), "param_groups"):
        inner = inner.optimizer
    groups = ", ".join(f"lr {g['lr']:g} x {len(g['params'])} tensors"
                       for g in getattr(optimizer, "param_groups", []))
    return f"{type(inner).__name__} parameter groups: {groups or 'none'}"
