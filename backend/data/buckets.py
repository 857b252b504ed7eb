"""Aspect-ratio buckets and batches drawn from one bucket.

A batch stacks images of one size. Without ``aspect_buckets`` each image keeps its own
training size (its size within ``max_pixels``, sides cut to the multiple, as the reference
trainer), so images of one size form a bucket. With ``aspect_buckets`` every image is
resized (cover-resize, centre crop) to the nearest of a fixed set of sizes at the pixel
budget: for each aspect ratio from 1:4 to 4:1 the largest ``w x h`` with sides multiples of
the resolution multiple and ``w * h <= max_pixels``; "nearest" compares log aspect ratios.

``BucketBatchSampler`` draws each epoch's batches from a permutation fixed by (seed, epoch):
indices are grouped by size, shuffled within their bucket and cut into ``batch_size``
batches; a bucket's last, incomplete batch is padded with images of the same bucket
(``bucket_remainder: pad``) or left out for that epoch (``drop``); the batches are then
shuffled. With several processes that accelerate does not shard for us, each takes every
``world``-th batch (the list wrapped so every process gets as many).

Clips (video families) are keyed by (width, height, frames): each clip trains at the
largest of ``frame_buckets`` it fills (``backend.data.video.bucket_frames``), so a batch never
mixes frame counts any more than sizes. A clip cut into windows (``frame_extraction``) is one
key per window, each at the clip's count. A key is a (width, height) or (width, height,
frames) tuple; everything here takes either.

``bucket_plan`` is the summary the Dataset tab's check shows: per bucket the images, the
batches per epoch and how many images are padded or dropped (for a config's dataset:
``backend.data.dataset.dataset_bucket_plan``). It imports only the messages.
"""
from __future__ import annotations

import math
from typing import Any, Iterable, Iterator

from backend.core.messages import Msg

# Aspect ratios (width / height) of the buckets: 1:4 ... 4:1.
RATIOS = (1 / 4, 1 / 3, 2 / 5, 1 / 2, 4 / 7, 2 / 3, 3 / 4, 4 / 5, 1.0, 5 / 4, 4 / 3, 3 / 2,
          7 / 4, 2.0, 5 / 2, 3.0, 4.0)


def bucket_sizes(max_pixels: int, multiple: int = 16) -> list[tuple[int, int]]:
    """(width, height) of every bucket at the pixel budget, narrowest first."""
    out: list[tuple[int, int]] = []
    for r in RATIOS:
        h = int(math.sqrt(max_pixels / r)) // multiple * multiple
        w = int(h * r) // multiple * multiple
        while h >= multiple and w >= multiple and w * h > max_pixels:
            h -= multiple
            w = int(h * r) // multiple * multiple
        if w >= multiple and h >= multiple and (w, h) not in out:
            out.append((w, h))
    return out


def nearest_bucket(width: int, height: int, sizes: Iterable[tuple[int, int]]
                   ) -> tuple[int, int]:
    """The bucket whose aspect ratio is closest (in log ratio) to ``width / height``."""
    ratio = math.log(width / height)
    return min(sizes, key=lambda s: (abs(math.log(s[0] / s[1]) - ratio), -s[0] * s[1]))


def bucket_size(width: int, height: int, max_pixels: int, multiple: int = 16
                ) -> tuple[int, int]:
    """The training size of a ``width`` x ``height`` image with ``aspect_buckets`` on."""
    return nearest_bucket(width, height, bucket_sizes(max_pixels, multiple))


def group_by_size(sizes: list[tuple[int, ...]]) -> dict[tuple[int, ...], list[int]]:
    """Indices by bucket key: (width, height), or (width, height, frames) for clips."""
    groups: dict[tuple[int, ...], list[int]] = {}
    for i, s in enumerate(sizes):
        groups.setdefault(tuple(s), []).append(i)
    return groups


def bucket_plan(sizes: list[tuple[int, ...]], batch_size: int, remainder: str = "pad"
                ) -> list[dict[str, Any]]:
    """One row per bucket, largest first (then fewest frames, smallest): size [w, h],
    frames (clips' buckets only), images, batches (per epoch), padded (images repeated to
    fill the last batch), dropped (images left out)."""
    rows = []
    for key, idx in sorted(group_by_size(sizes).items(),
                           key=lambda kv: (-len(kv[1]), kv[0][2:], kv[0][:2])):
        n = len(idx)
        full, rest = divmod(n, batch_size)
        if remainder == "pad" and rest:
            batches, padded, dropped = full + 1, batch_size - rest, 0
        else:
            batches, padded, dropped = full, 0, rest
        rows.append({"size": list(key[:2]), **({"frames": key[2]} if len(key) > 2 else {}),
                     "images": n, "batches": batches, "padded": padded, "dropped": dropped})
    return rows


def bucket_name(row: dict[str, Any]) -> str:
    """A plan row's bucket as the log and the Dataset tab write it: ``WxH``, or
    ``F×WxH`` (frames first) for clips."""
    size = f"{row['size'][0]}x{row['size'][1]}"
    return f"{row['frames']}×{size}" if "frames" in row else size


def plan_text(rows: list[dict[str, Any]], batch_size: int) -> str:
    """The plan as lines for the log and the Dataset tab (clips' buckets as frames×size)."""
    lines = [f"{bucket_name(r)}: {r['images']} {'clip' if 'frames' in r else 'image'}(s), "
             f"{r['batches']} "
             f"batch(es) of {batch_size}" + (f", {r['padded']} padded" if r["padded"] else "")
             + (f", {r['dropped']} dropped" if r["dropped"] else "") for r in rows]
    total = sum(r["batches"] for r in rows)
    return "\n".join(lines + [f"{total} batch(es) per epoch"])


class BucketBatchSampler:
    """Batches of dataset indices, each from one size bucket; see the module docstring."""

    def __init__(self, sizes: list[tuple[int, ...]], batch_size: int, seed: int,
                 remainder: str = "pad", rank: int = 0, world: int = 1):
        self.sizes = [tuple(s) for s in sizes]
        self.batch_size, self.seed, self.remainder = batch_size, seed, remainder
        self.rank, self.world, self.epoch = rank, world, 0
        self.groups = group_by_size(self.sizes)
        self.n_batches = sum(r["batches"] for r in bucket_plan(self.sizes, batch_size,
                                                              remainder))
        if self.n_batches == 0:
            raise ValueError(Msg("data.no_full_batch", batch_size=batch_size,
                                 sizes=str(sorted(len(v) for v in self.groups.values()))))

    def use_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def __len__(self) -> int:
        return math.ceil(self.n_batches / self.world)

    def batches(self) -> list[list[int]]:
        """Every batch of the current epoch (all processes)."""
        import torch

        g = torch.Generator().manual_seed(self.seed * 1_000_003 + self.epoch)
        out: list[list[int]] = []
        for size in sorted(self.groups):
            idx = self.groups[size]
            order = [idx[i] for i in torch.randperm(len(idx), generator=g).tolist()]
            for start in range(0, len(order), self.batch_size):
                batch = order[start:start + self.batch_size]
                if len(batch) < self.batch_size:
                    if self.remainder == "drop":
                        continue
                    while len(batch) < self.batch_size:  # repeat images of this bucket
                        batch += order[: self.batch_size - len(batch)]
                out.append(batch)
        return [out[i] for i in torch.randperm(len(out), generator=g).tolist()]

    def __iter__(self) -> Iterator[list[int]]:
        batches = self.batches()
        if self.world > 1:
            batches += batches[: len(self) * self.world - len(batches)]
            batches = batches[self.rank::self.world]
        return iter(batches)


def collate(samples: list[dict[str, Any]]) -> dict[str, Any]:
    """Samples of one bucket as one batch: tensors concatenated along the batch dimension.
    Prompt embeddings of different lengths are padded with zeros at the end, and their
    ``<key>_mask`` with False; a tensor whose lengths differ and that has no mask is an
    error (its family cannot batch it)."""
    import torch

    if len(samples) == 1:
        return samples[0]
    out: dict[str, Any] = {}
    for key in samples[0]:
        values = [s[key] for s in samples]
        if not isinstance(values[0], torch.Tensor):
            out[key] = values
            continue
        shapes = {tuple(v.shape[1:]) for v in values}
        if len(shapes) > 1:
            if values[0].ndim < 2 or {tuple(v.shape[2:]) for v in values}.__len__() > 1:
                raise ValueError(Msg("data.bucket_shapes", key=key, shapes=str(sorted(shapes))))
            if not key.endswith("_mask") and f"{key}_mask" not in samples[0]:
                raise ValueError(Msg("data.no_pad_mask", key=key))
            longest = max(v.shape[1] for v in values)
            values = [torch.nn.functional.pad(
                v, (0, 0) * (v.ndim - 2) + (0, longest - v.shape[1])) for v in values]
        out[key] = torch.cat(values, dim=0)
    return out
