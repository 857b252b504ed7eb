"""How a training step draws its noise level (``timestep_sampling``).

``reference`` leaves the draw to the family (``Family.training_loss``: the reference
trainer's schedule, e.g. a uniform index into a family's shifted sigmas). The others draw
a noise level sigma in (0, 1) and train at the family's schedule entry nearest to it
(``Family.loss_at``), so the timestep, the sigma and any loss weighting of the family stay
those of its own schedule:

- ``uniform``       sigma = u, u ~ U(0, 1)
- ``logit_normal``  sigma = sigmoid(n), n ~ N(logit_mean, logit_std) (SD3's default)
- ``shifted``       sigma = s·u / (1 + (s - 1)·u), s = ``timestep_shift`` (towards noise
                    for s > 1, as flow-matching schedulers' ``shift``)

Every draw comes from the step's generator, so a resumed run draws what an uninterrupted
one would.
"""
from __future__ import annotations

from typing import Any

MODES = ("reference", "uniform", "logit_normal", "shifted")


def draw_sigma(cfg, generator) -> float:
    import torch

    mode = cfg.timestep_sampling
    if mode == "uniform":
        return float(torch.rand((1,), generator=generator))
    if mode == "logit_normal":
        n = torch.randn((1,), generator=generator) * cfg.logit_std + cfg.logit_mean
        return float(torch.sigmoid(n))
    if mode == "shifted":
        u = float(torch.rand((1,), generator=generator))
        s = cfg.timestep_shift
        return s * u / (1 + (s - 1) * u)
    raise ValueError(f"timestep_sampling: no sigma to draw for {mode!r} (allowed "
                     f"{' | '.join(MODES[1:])})")


def nearest_index(sigmas, sigma: float) -> int:
    """The index of the schedule sigma closest to ``sigma``."""
    import torch

    return int(torch.argmin((sigmas.float() - sigma).abs()))


def training_loss(cfg, family, transformer, batch: dict[str, Any], schedule, generator,
                  dtype):
    """One step's loss with the configured sampling (the family's own for ``reference``)."""
    import torch

    if cfg.timestep_sampling == "reference":
        return family.training_loss(transformer, batch, schedule, generator, dtype)
    index = nearest_index(schedule.sigmas, draw_sigma(cfg, generator))
    noise = torch.randn(batch["latents"].shape, generator=generator)
    return family.loss_at(transformer, batch, schedule, index, noise, dtype)
