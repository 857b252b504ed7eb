"""Where the train stage's batches come from: one object, two kinds.

- ``FromCache`` (task ``sft:train``): the samples stage 1 cached (latents and prompt
  embeddings), read as they are.
- ``EncodeEachStep`` (one-shot ``sft``): the images or clips of the dataset, encoded with the
  frozen text encoder and VAE every step.

A source checks its input when it is built (before any heavy import or model load), says
which model components the stage loads, loads what it needs beside the transformer, builds
its dataset and held-out samples, the empty caption of ``caption_dropout``, its sampler and
loader, and turns one loader item into the batch a step trains on.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

from backend.config.lowvram import offloaded_models
from backend.config.schema import RunConfig
from backend.core.readgate import for_config as read_gate
from backend.data import batches as data_options
from backend.data import buckets
from backend.data.cache import (CachedDataset, cached_files, check_cache, load_sample,
                                read_manifest_gated)
from backend.data.dataset import IMAGE_EXTS, ImageDataset, PairDataset
from backend.data.masks import latent_mask, load_image_mask
from backend.data.video import (VIDEO_EXTS, ClipDataset, check_stage_dataset, clip_buckets,
                                load_clip_mask)
from backend.models.quantize import quantize_frozen
from backend.training.loop import EpochSampler, StageError, first_item, load_frozen_encoder, log


def data_source(cfg: RunConfig, family) -> "DataSource":
    """The source of ``cfg.task``, its input checked."""
    return (EncodeEachStep if cfg.task == "sft" else FromCache)(cfg, family)


class DataSource:
    """The training batches of one run. Subclasses say where the samples come from."""

    split = True  # the stage loads only the components it trains (not the encoders)

    def __init__(self, cfg: RunConfig, family):
        self.cfg, self.family = cfg, family

    @property
    def components(self) -> tuple[str, ...]:
        """The model components the train stage loads."""
        return self.family.spec.stage_components("train", split=self.split)

    def load(self, dirs: dict[str, Path], dtype, device, ds_plugin) -> None:
        """Load what the source needs beside the transformer (nothing, by default)."""

    def datasets(self) -> tuple[Any, list[dict[str, Any]]]:
        """(the training dataset, the held-out samples as encoded tensors)."""
        raise NotImplementedError

    def empty_caption(self) -> dict[str, Any]:
        """The encoded empty caption (``caption_dropout``): its caption tensors only."""
        raise NotImplementedError

    def sizes(self, dataset) -> list[tuple[int, int]]:
        """The training size (width, height) of each distinct sample of ``dataset``."""
        raise NotImplementedError

    # One size bucket's loader items as one loader batch.
    collate = staticmethod(buckets.collate)

    def batch(self, item: Any) -> dict[str, Any]:
        """The batch one step trains on, from one loader item."""
        return item

    def loader(self, dataset, *, rank: int, shard: int, ds_plugin):
        """(sampler, loader): with ``batch_size`` > 1 batches of one size bucket each (the
        plan logged), else one sample per step; a fixed order per epoch either way. With
        ``shard`` > 1 this process takes its ``rank``'s share (where accelerate does not
        shard the loader)."""
        from torch.utils.data import DataLoader

        cfg = self.cfg
        if cfg.batch_size <= 1:
            sampler = EpochSampler(len(dataset), cfg.seed, rank if shard > 1 else 0, shard)
            return sampler, DataLoader(
                dataset, batch_size=1, sampler=sampler, collate_fn=first_item,
                num_workers=cfg.dataset_num_workers)
        base = self.sizes(dataset)
        sizes = [base[i % len(base)] for i in range(len(dataset))]
        try:
            sampler = buckets.BucketBatchSampler(sizes, cfg.batch_size, cfg.seed,
                                                 cfg.bucket_remainder,
                                                 rank if shard > 1 else 0, shard)
        except ValueError as e:
            raise StageError(str(e)) from None
        log("[train] batches of " + str(cfg.batch_size) + " from one size bucket each:\n"
            + buckets.plan_text(buckets.bucket_plan(sizes, cfg.batch_size,
                                                    cfg.bucket_remainder), cfg.batch_size))
        loader = DataLoader(dataset, batch_sampler=sampler, collate_fn=self.collate,
                                  num_workers=cfg.dataset_num_workers)
        if ds_plugin is not None and ds_plugin.is_auto("train_micro_batch_size_per_gpu"):
            ds_plugin.deepspeed_config["train_micro_batch_size_per_gpu"] = cfg.batch_size
        return sampler, loader


class FromCache(DataSource):
    """Task ``sft:train``: the samples of the stage-1 cache in ``dataset_base_path``."""

    def __init__(self, cfg: RunConfig, family):
        super().__init__(cfg, family)
        check_not_raw_dataset(cfg)
        check_cache(cfg.dataset_base_path, read_gate(cfg))
        check_cache_masks(cfg)
        if cfg.dataset_metadata_path:
            log(f"[train] sft:train reads the stage-1 cache in {cfg.dataset_base_path}; "
                f"dataset_metadata_path is not used")

    def datasets(self):
        cfg = self.cfg
        dataset = CachedDataset(cfg.dataset_base_path, repeat=cfg.dataset_repeat,
                                gate=read_gate(cfg))
        dataset.files, held_files = data_options.hold_out(dataset.files,
                                                          cfg.validation_samples, "sample")
        return dataset, [self.batch(load_sample(p, read_gate(cfg))) for p in held_files]

    def empty_caption(self):
        return data_options.empty_prompt(
            data_options.read_empty_prompt(self.cfg.dataset_base_path, read_gate(self.cfg)))

    def sizes(self, dataset):
        return data_options.cached_sizes(self.cfg.dataset_base_path, dataset.files,
                                         read_gate(self.cfg))

    def batch(self, item):
        """The cached batch; a cache's ``loss_mask`` only with ``masked_loss`` on."""
        if not self.cfg.masked_loss and "loss_mask" in item:
            item = {k: v for k, v in item.items() if k != "loss_mask"}
        return item


class EncodeEachStep(DataSource):
    """One-shot ``sft``: the images (or clips) and captions of the dataset, encoded by the
    frozen text encoder and VAE each step; loader batches stay raw items until then."""

    split = False  # the encoders load too

    def __init__(self, cfg: RunConfig, family):
        super().__init__(cfg, family)
        self.records = check_stage_dataset(cfg, family, log)
        self.encoder = None

    def load(self, dirs, dtype, device, ds_plugin):
        cfg = self.cfg
        self.encoder = quantize_frozen(cfg, load_frozen_encoder(
            self.family, dirs, dtype, device, ds_plugin,
            "model" if offloaded_models(cfg) else "none"), log=log)

    def datasets(self):
        cfg, family = self.cfg, self.family
        records, held_records = data_options.hold_out(self.records, cfg.validation_samples,
                                                      "image")
        dataset_class = (ClipDataset if family.media == "video" else
                         PairDataset if family.input_images else ImageDataset)
        masks = ((load_clip_mask if family.media == "video" else load_image_mask)
                 if cfg.masked_loss else None)
        dataset = dataset_class(records, cfg, repeat=cfg.dataset_repeat, mask_loader=masks)
        held = dataset_class(held_records, cfg, mask_loader=masks)
        return dataset, [self.encode(held[i]) for i in range(len(held_records))]

    def empty_caption(self):
        import torch

        return data_options.empty_prompt(self.encoder.encode_sample(torch.zeros(1, 3, 16, 16),
                                                                    ""))

    def sizes(self, dataset):
        if self.family.media == "video":  # (width, height, frames) of each clip
            return clip_buckets(dataset.records, self.cfg)
        return data_options.record_sizes(dataset.records, self.cfg)

    collate = staticmethod(list)  # raw items, encoded in the step (on the device)

    def batch(self, item):
        if isinstance(item, list):
            return buckets.collate([self.encode(i) for i in item])
        return self.encode(item)

    def encode(self, item: dict[str, Any]) -> dict[str, Any]:
        sample = self.encoder.encode_sample(item["pixels"], item["prompt"],
                                            *item.get("inputs", ()))
        if "mask" in item:  # masked_loss: at the latents' grid, as stage 1 caches it
            sample["loss_mask"] = latent_mask(item["mask"], sample["latents"]).to(
                sample["latents"].device)
        return sample


def check_cache_masks(cfg: RunConfig) -> None:
    """With ``masked_loss`` every cached sample was written with its mask (its manifest
    entry says ``masked``); a cache written without is refused, naming the field."""
    if not cfg.masked_loss:
        return
    manifest = read_manifest_gated(Path(cfg.dataset_base_path), read_gate(cfg)) or {}
    entries = [e for e in manifest.get("samples", []) if isinstance(e, dict)]
    if not entries or not all(e.get("masked") for e in entries):
        raise StageError(f"masked_loss: the cache in {cfg.dataset_base_path} was written "
                         f"without masks (got masked_loss on; allowed masked_loss off, or "
                         f"run --task sft:data_process again with masked_loss on)")


def check_not_raw_dataset(cfg: RunConfig) -> None:
    """sft:train reads a stage-1 cache: a folder of images instead is refused with the two
    commands that fit, the cache written to a folder of its own (never into the dataset)."""
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
