"""The train stage's data options: held-out validation samples, batches from one size
bucket, and caption dropout.

- ``validation_samples`` N: the last N samples of the data set (the cache's manifest order,
  or the dataset's records) are left out of training; ``Validation.loss`` is the family's
  ``eval_loss`` on them (fixed timesteps, noise fixed by the seed), logged as a
  ``validation`` progress event ``{"step", "val_loss", "samples"}`` beside the ``step``
  events' ``loss``, and as ``validation/loss`` in TensorBoard.
- ``batch_size`` > 1: ``backend.data.buckets.BucketBatchSampler`` over the samples' training
  sizes (the cache manifest's, or each image's ``target_size``); the plan is logged.
- ``caption_dropout`` p: with probability p (drawn from the step's generator) a sample
  trains on the empty caption's embedding instead of its own: the cache's
  ``empty_prompt.safetensors`` (stage 1 writes it when ``caption_dropout`` > 0), or the
  encoder's in one-shot ``sft``.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

from backend.core import readgate
from backend.core.messages import Msg
from backend.data.buckets import collate
from backend.data.cache import EMPTY_PROMPT, load_sample, read_manifest_gated, save_sample
from backend.data.dataset import target_size, upright_size

# Keys of a cached sample that belong to the image, not the caption.
IMAGE_KEYS = ("latents", "height", "width", "loss_mask")


class DataOptionError(RuntimeError):
    """A data option that does not fit the data set; the message names the field."""


def hold_out(items: list, n: int, what: str) -> tuple[list, list]:
    """(training items, the last ``n`` held out); ``what`` they are: sample or image."""
    if n and n >= len(items):
        raise DataOptionError(Msg("data.nothing_to_train", n=n, count=len(items), what=what,
                                  most=len(items) - 1))
    return (items[:-n], items[-n:]) if n else (items, [])


def cached_sizes(cache_dir: str | Path, files: list[Path], gate) -> list[tuple[int, ...]]:
    """Bucket of each cached sample file, from the manifest: its training size (width,
    height), and a clip's frame count after them (width, height, frames)."""
    manifest = read_manifest_gated(Path(cache_dir), gate) or {}
    by_file = {str(e.get("file")): (int(e["width"]), int(e["height"]))
               + ((int(e["frames"]),) if "frames" in e else ())
               for e in manifest.get("samples", []) if "width" in e and "height" in e}
    missing = [p.name for p in files if p.name not in by_file]
    if missing:
        raise DataOptionError(Msg("data.no_size_in_manifest", names=", ".join(missing[:3])))
    return [by_file[p.name] for p in files]


def record_sizes(records: list, cfg) -> list[tuple[int, int]]:
    """Training size of each dataset record (one-shot ``sft``)."""
    from PIL import Image

    gate = readgate.for_config(cfg)
    out = []
    for rec in records:
        with gate.open(rec.image, "image") as f, Image.open(f) as im:
            out.append(target_size(*upright_size(im), cfg))
    return out


class Validation:
    """Held-out samples and their loss at fixed noise and timesteps."""

    def __init__(self, samples: list[dict[str, Any]], family, seed: int):
        self.samples, self.family, self.seed = samples, family, seed

    def __bool__(self) -> bool:
        return bool(self.samples)

    def loss(self, model, accelerator) -> float:
        """The family's ``eval_loss`` in eval mode (dropout off), under the run's autocast;
        every process computes it (ZeRO-3 gathers weights collectively)."""
        import torch

        was_training = model.training
        model.eval()
        try:
            with torch.no_grad(), accelerator.autocast():
                return float(self.family.eval_loss(model, self.samples, seed=self.seed))
        finally:
            model.train(was_training)


def to_device(sample: dict[str, Any], device) -> dict[str, Any]:
    import torch
    return {k: v.to(device) if isinstance(v, torch.Tensor) else v for k, v in sample.items()}


def empty_prompt(tensors: dict[str, Any]) -> dict[str, Any]:
    """The caption part of an encoded sample (everything but the image's tensors)."""
    return {k: v for k, v in tensors.items() if k not in IMAGE_KEYS}


def drop_captions(batch: dict[str, Any], empty: dict[str, Any] | None, p: float,
                  generator) -> dict[str, Any]:
    """``batch`` with each sample's caption replaced by ``empty`` with probability ``p``
    (the draw from ``generator``); batched captions are padded to one length as in
    ``backend.data.buckets.collate``."""
    import torch

    if not p or empty is None:
        return batch
    n = batch["latents"].shape[0]
    drop = (torch.rand((n,), generator=generator) < p).tolist()
    if not any(drop):
        return batch
    rows = []
    for i in range(n):
        row = {k: (v[i:i + 1] if isinstance(v, torch.Tensor) and v.ndim and v.shape[0] == n
                   else v) for k, v in batch.items()}
        if drop[i]:
            row.update({k: v.to(row[k].device) if isinstance(v, torch.Tensor) else v
                        for k, v in empty.items() if k in row})
        rows.append(row)
    return collate(rows) if n > 1 else rows[0]


def write_empty_prompt(cfg, encoder_factory, model_fp: list, log=print) -> Path:
    """Stage 1 with ``caption_dropout``: the empty caption's embedding in the cache folder
    (encoded again only when the encoder's files changed)."""
    import json

    path = Path(cfg.output_path) / EMPTY_PROMPT
    stamp = json.dumps(model_fp, sort_keys=True, default=str)
    if path.is_file():
        from safetensors import safe_open
        with safe_open(str(path), framework="pt") as f:
            if (f.metadata() or {}).get("model") == stamp:
                return path
    import torch

    tensors = encoder_factory().encode_sample(torch.zeros(1, 3, 16, 16), "")
    save_sample(path, empty_prompt(tensors), {"prompt": "", "model": stamp})
    log(f"[cache] empty caption encoded for caption_dropout: {path.name}")
    return path


def read_empty_prompt(cache_dir: str | Path, gate) -> dict[str, Any]:
    """Stage 2 with ``caption_dropout``: the cache's empty-caption embedding."""
    path = Path(cache_dir) / EMPTY_PROMPT
    if not gate.is_file(path):
        raise DataOptionError(Msg("data.no_empty_prompt", path=path))
    return load_sample(path, gate)
