"""A fully fine-tuned component (``trainable_models``) saved as diffusers saves a model:
``config.json`` and safetensors shards with an index (``from_pretrained`` loads the folder).

The shards are written one at a time. Under ZeRO-3 each parameter is gathered on its own
and copied to host memory by rank 0 only, so no process ever holds the whole model on its
device, and rank 0 holds at most one shard in host memory. The folder is written under a
temporary name beside its final one and renamed into place, so a crash or a full disk never
leaves half a checkpoint under a checkpoint's name; the free space is checked before the
first byte is written.
"""
from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any, Callable

from backend.core import bounded
from backend.core.diskspace import disk_full, writing
from backend.core.rundir import FULL_CHECKPOINT_INFO

WEIGHTS_NAME = "diffusion_pytorch_model"
INDEX_NAME = f"{WEIGHTS_NAME}.safetensors.index.json"
# The checkpoint's own record: what it is and where it came from (read by the stages that
# use a checkpoint, never needed by ``from_pretrained``).
INFO_NAME = FULL_CHECKPOINT_INFO
FORMAT = "zerolora-full"
SHARD_BYTES = 5 * 2**30
# Room left on the disk beyond the checkpoint itself.
DISK_MARGIN = 256 * 2**20


def _shape_of(tensor) -> tuple[int, ...]:
    """A tensor's full shape, also for a ZeRO-3 partitioned parameter (``ds_shape``)."""
    return tuple(getattr(tensor, "ds_shape", None) or tensor.shape)


def weight_entries(model) -> list[tuple[str, Any]]:
    """(name, tensor) of every weight ``state_dict`` holds (parameters and persistent
    buffers), in its order; a partitioned parameter stays partitioned."""
    return list(model.state_dict(keep_vars=True).items())


def checkpoint_bytes(model, dtype) -> int:
    """Bytes of the model's weights in ``dtype`` (the size of its checkpoint)."""
    import math

    import torch

    size = torch.empty((), dtype=dtype).element_size()
    return sum(math.prod(_shape_of(t)) * (size if t.is_floating_point() else t.element_size())
               for _, t in weight_entries(model))


def plan_shards(model, dtype, max_bytes: int = SHARD_BYTES) -> list[list[tuple[str, Any]]]:
    """The weights in groups of at most ``max_bytes`` (a larger tensor is a group alone)."""
    import math

    import torch

    size = torch.empty((), dtype=dtype).element_size()
    groups: list[list[tuple[str, Any]]] = [[]]
    used = 0
    for name, tensor in weight_entries(model):
        n = math.prod(_shape_of(tensor)) * (size if tensor.is_floating_point()
                                            else tensor.element_size())
        if groups[-1] and used + n > max_bytes:
            groups.append([])
            used = 0
        groups[-1].append((name, tensor))
        used += n
    return groups


def _gathered(tensor, gather: bool):
    """``tensor`` whole: under ZeRO-3 (``gather``) a parameter is gathered for the block."""
    import contextlib

    if gather and hasattr(tensor, "ds_id"):
        import deepspeed

        return deepspeed.zero.GatheredParameters([tensor], modifier_rank=None)
    return contextlib.nullcontext()


def save_component(model, folder: str | os.PathLike, *, dtype, is_main: bool = True,
                   gather: bool = False, info: dict[str, Any] | None = None,
                   max_shard_bytes: int = SHARD_BYTES, barrier=None,
                   values: Callable[[Any], Any] | None = None) -> Path:
    """Write ``model`` (a diffusers ``ModelMixin``) to ``folder`` in diffusers layout, its
    floating-point weights in ``dtype``. Every process calls it (``gather``: ZeRO-3); rank
    0 (``is_main``) writes. ``barrier`` (every process) runs once the folder is in place.
    ``values(tensor)``: other weights to write for a tensor of the model (whole; None: the
    tensor's own), called on every process for each tensor in order (an EMA's twin).
    A disk without room for it raises ``DiskFullError`` before anything is written."""
    from safetensors.torch import save_file

    final = Path(folder)
    tmp = final.parent / f".{final.name}.tmp"
    needed = checkpoint_bytes(model, dtype)
    final.parent.mkdir(parents=True, exist_ok=True)
    free = shutil.disk_usage(final.parent).free
    if free < needed + DISK_MARGIN:
        raise disk_full(final, needed)
    groups = plan_shards(model, dtype, max_shard_bytes)
    names = ([f"{WEIGHTS_NAME}.safetensors"] if len(groups) == 1 else
             [f"{WEIGHTS_NAME}-{i + 1:05d}-of-{len(groups):05d}.safetensors"
              for i in range(len(groups))])
    if is_main:
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
    weight_map: dict[str, str] = {}
    with writing(final, needed, partial=tmp if is_main else None):
        for group, name in zip(groups, names):
            shard: dict[str, Any] = {}
            for key, tensor in group:
                other = values(tensor) if values is not None else None
                with _gathered(tensor, gather and other is None):
                    if is_main:
                        value = (tensor if other is None else other).detach()
                        if value.is_floating_point():
                            value = value.to(dtype)
                        shard[key] = value.to("cpu", copy=True).contiguous()
                weight_map[key] = name
            if is_main:
                save_file(shard, str(tmp / name), metadata={"format": "pt"})
            del shard
        if is_main:
            model.save_config(str(tmp))
            if len(groups) > 1:
                (tmp / INDEX_NAME).write_text(json.dumps(
                    {"metadata": {"total_size": needed}, "weight_map": weight_map},
                    indent=2, sort_keys=True), encoding="utf-8")
            (tmp / INFO_NAME).write_text(json.dumps(  # last: it marks the folder whole
                {"format": FORMAT, "dtype": str(dtype).replace("torch.", ""),
                 **(info or {})}, indent=2, default=str), encoding="utf-8")
            if final.exists():
                shutil.rmtree(final)
            os.replace(tmp, final)
    if barrier is not None:
        barrier()
    return final


def checkpoint_info(path: str | os.PathLike) -> dict[str, Any]:
    """The record a full checkpoint folder keeps of itself ({} when unreadable)."""
    try:
        data = bounded.load_json((Path(path) / INFO_NAME).read_text(encoding="utf-8"),
                                 INFO_NAME)
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}
