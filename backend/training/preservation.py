"""Regularization against drift: prior preservation and differential output preservation.

Two ways to keep a LoRA from changing what the base model does outside its subject, each
an extra term of every micro-step's loss (``Preservation.loss``, called by the train
stage's ``Trainer.micro_step`` after the training loss):

- **Prior preservation** (``prior_preservation``; SimpleTuner's, sd-scripts' regularization
  images): a class dataset (``class_data_path``: images of the class with their captions,
  without the trigger word) is cached by stage 1 as a cache of its own in the training
  cache's ``class/`` subfolder (``backend.data.cache.build_cache``, with the class folder as
  the dataset). Each micro-step adds ``prior_loss_weight`` x the family's training loss on
  one class sample, the next of a fixed permutation per pass over the class set (seed and
  micro-step decide which, and its noise: a resumed run draws what an uninterrupted one
  would). With ``class_prompt`` the base model renders the class images ``class_data_path``
  lacks of ``num_class_images`` (all of them without it) into the run folder, in a stage of
  its own before stage 1 (``backend/training/class_images.py``); stage 1 caches them with
  the folder's.
- **Differential output preservation** (``diff_output_preservation``; ai-toolkit's): each
  sample's DOP caption is its caption with ``trigger_word`` replaced by ``dop_class``.
  Stage 1 encodes every DOP caption (stage 2 loads no text encoder) into the cache's
  ``dop/`` subfolder, one file per caption named by its hash. Each micro-step the
  transformer runs on the batch's noisy latents (the same timestep and noise as the
  training loss: the step's generator replayed) with the DOP captions twice: once with the
  LoRA switched off and no gradient (the base model's prediction), once with it on; it
  adds ``dop_weight`` x mse(LoRA prediction, base prediction). The LoRA is switched off by
  peft's own flag on each tuner layer (``adapter_off``; the transformer is a diffusers
  model with peft's layers injected, not a ``PeftModel``, so peft's ``disable_adapter()``
  context is not there; diffusers' ``disable_adapters()`` would also set the adapter's
  ``requires_grad`` off and on again, which the flag alone avoids). No second model is
  held. The predictions are the transformer's whole output, read by a forward hook
  (``captured``), so the term is the same for every family, unweighted by the family's
  timestep weights and by ``loss_mask``.

A weight of 0 computes nothing: the run is a plain run, step for step. Both need a split
run (stage 1 writes what they read); one-shot ``sft`` refuses them. DOP needs a LoRA
(a full fine-tune has no "off"). Edit models' DOP captions would need their input images
encoded beside them: not supported yet.
"""
from __future__ import annotations

import contextlib
import hashlib
import json
from pathlib import Path
from typing import Any

from backend.config.schema import RunConfig
from backend.core.messages import Msg
from backend.core.readgate import for_config as read_gate
from backend.data.batches import empty_prompt, to_device
from backend.data.cache import (CachedDataset, CacheError, build_cache, load_sample,
                                read_manifest_gated, save_sample)
from backend.data.dataset import DatasetError
from backend.data.video import check_stage_dataset
from backend.training import timesteps
from backend.training.loop import StageError

CLASS_CACHE = "class"  # <cache>/class/: the class dataset's own stage-1 cache
DOP_CACHE = "dop"      # <cache>/dop/<hash>.safetensors: one DOP caption's embedding
DOP_PREFIX = "dop_"    # a batch's DOP caption tensors: dop_prompt_emb, dop_prompt_emb_mask...
METADATA_NAMES = ("metadata.csv", "metadata.json", "metadata.jsonl")


def enabled(cfg: RunConfig) -> bool:
    return bool(cfg.prior_preservation or cfg.diff_output_preservation)


# ------------------------------------------------------------------------------------------
# Stage 1: the class dataset's cache and the DOP captions' embeddings
# ------------------------------------------------------------------------------------------
def class_config(cfg: RunConfig, folder: str | Path | None = None) -> RunConfig:
    """The run's options with the class dataset (``folder``: another folder of class
    images, the rendered ones) as the dataset and ``<cache>/class`` as the output: no
    trigger word, no masks, nothing held out."""
    source = cfg.class_data_path if folder is None else folder
    folder = Path(str(source)) if source else None  # None: only rendered class images
    gate = read_gate(cfg)
    meta = next((folder / n for n in METADATA_NAMES if gate.is_file(folder / n)),
                None) if folder else None
    return cfg.model_copy(update={
        "dataset_base_path": str(folder or cfg.dataset_base_path),
        "dataset_metadata_path": str(meta) if meta else None,
        "output_path": str(Path(cfg.output_path) / CLASS_CACHE), "trigger_word": "",
        "masked_loss": False, "mask_path": None, "alpha_mask": False,
        "validation_samples": 0})


def check_class_dataset(cfg: RunConfig, family, log=None, headers_only: bool = False) -> list:
    """The class dataset's records (stage 1; the preflight with ``headers_only``), its
    problems refused naming ``class_data_path``; [] without prior preservation or without
    a class folder (``class_prompt`` alone). A ``class_prompt`` for a model that does not
    render a still image from a prompt alone (a video or edit model) is refused."""
    if not cfg.prior_preservation:
        return []
    if cfg.class_prompt.strip() and (family.media == "video" or family.input_images):
        raise DatasetError([Msg("note.class_prompt_family", model=family.title)])
    if not cfg.class_data_path:
        return []
    try:
        return check_stage_dataset(class_config(cfg), family, log, headers_only=headers_only)
    except DatasetError as e:
        raise DatasetError([Msg("note.class_data_problem", problem=p)
                            for p in e.problems]) from None


def dop_caption(caption: str, cfg: RunConfig) -> str:
    """A caption with every ``trigger_word`` replaced by ``dop_class``."""
    return caption.replace(cfg.trigger_word.strip(), cfg.dop_class.strip())


def dop_file(folder: Path, caption: str) -> Path:
    return folder / DOP_CACHE / f"{hashlib.sha256(caption.encode()).hexdigest()[:32]}.safetensors"


def cache_stage1(cfg: RunConfig, family, class_records: list, encoder_factory, model_fp: list,
                 *, rank: int, world: int, barrier, progress, should_stop, log,
                 media: dict[str, Any]) -> dict[str, int]:
    """After the training set's cache: the class dataset's (prior preservation) and the
    DOP captions' embeddings (rank 0; the others wait). Returns {"class", "dop"}: samples
    cached and captions encoded."""
    done = {"class": 0, "dop": 0}
    if cfg.prior_preservation and not should_stop():
        ccfg = class_config(cfg)
        log(f"[data_process] prior preservation: {len(class_records)} class samples -> "
            f"{ccfg.output_path}")
        media = {k: v for k, v in media.items() if k != "mask_loader"}
        result = build_cache(ccfg, class_records, encoder_factory, model_fp, rank=rank,
                             world=world, barrier=barrier, progress=None,
                             should_stop=should_stop, log=log, **media)
        done["class"] = result["total"]
    if cfg.diff_output_preservation and not should_stop():
        if rank == 0:
            done["dop"] = write_dop_captions(cfg, encoder_factory, model_fp, should_stop, log)
        if barrier is not None:
            barrier()
    return done


def write_dop_captions(cfg: RunConfig, encoder_factory, model_fp: list, should_stop,
                       log) -> int:
    """Each cached sample's DOP caption encoded once into ``<cache>/dop/`` (again only when
    the encoder's files changed); files of captions no longer used are removed. Returns how
    many were encoded."""
    import torch
    from safetensors import safe_open

    out = Path(cfg.output_path)
    manifest = read_manifest_gated(out, read_gate(cfg)) or {}
    prompts = [str(e.get("prompt", "")) for e in manifest.get("samples", [])
               if isinstance(e, dict)]
    captions = sorted({dop_caption(p, cfg) for p in prompts})
    without = sum(1 for p in prompts if cfg.trigger_word.strip() not in p)
    if without:
        log(f"[data_process] DOP: {without} of {len(prompts)} captions hold no trigger word "
            f"{cfg.trigger_word.strip()!r}; their DOP caption is the caption itself")
    stamp = json.dumps(model_fp, sort_keys=True, default=str)
    todo = []
    for caption in captions:
        path = dop_file(out, caption)
        if path.is_file():
            with safe_open(str(path), framework="pt") as f:
                if (f.metadata() or {}).get("model") == stamp:
                    continue
        todo.append(caption)
    keep = {dop_file(out, c).name for c in captions}
    folder = out / DOP_CACHE
    for old in (folder.glob("*.safetensors") if folder.is_dir() else ()):
        if old.name not in keep:
            old.unlink(missing_ok=True)
    encoder = encoder_factory() if todo else None
    for i, caption in enumerate(todo):
        if should_stop():
            return i
        folder.mkdir(parents=True, exist_ok=True)
        tensors = encoder.encode_sample(torch.zeros(1, 3, 16, 16), caption)
        save_sample(dop_file(out, caption), empty_prompt(tensors),
                    {"prompt": caption, "model": stamp})
    log(f"[data_process] DOP: {len(captions)} captions ({cfg.trigger_word.strip()!r} -> "
        f"{cfg.dop_class.strip()!r}), {len(todo)} encoded, in {folder}")
    return len(todo)


class SharedEncoder:
    """An encoder factory that loads once for the whole of stage 1 (the training set, the
    class set, the DOP captions); ``drop`` lets it go."""

    def __init__(self, factory):
        self.factory, self.encoder = factory, None

    def __call__(self):
        if self.encoder is None:
            self.encoder = self.factory()
        return self.encoder

    def drop(self) -> None:
        self.encoder = None


# ------------------------------------------------------------------------------------------
# Stage 2
# ------------------------------------------------------------------------------------------
class WithDopCaptions:
    """A cached dataset whose items also hold their DOP caption's tensors (``dop_*``);
    every other attribute (``files``, ``repeat``) is the dataset's."""

    def __init__(self, dataset, captions: dict[str, Path], gate):
        self.dataset, self.captions, self.gate = dataset, captions, gate

    def __getattr__(self, name: str):
        if name in ("dataset", "captions", "gate"):  # not set yet (unpickling)
            raise AttributeError(name)
        return getattr(self.dataset, name)

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitem__(self, i: int) -> dict[str, Any]:
        item = self.dataset[i]
        name = self.dataset.files[i % len(self.dataset.files)].name
        dop = load_sample(self.captions[name], self.gate)
        return {**item, **{DOP_PREFIX + k: v for k, v in dop.items()}}


def dop_sample(batch: dict[str, Any]) -> dict[str, Any]:
    """The batch with its DOP captions in place of its captions (no loss mask)."""
    out = {k: v for k, v in batch.items() if not k.startswith(DOP_PREFIX) and k != "loss_mask"}
    out.update({k[len(DOP_PREFIX):]: v for k, v in batch.items() if k.startswith(DOP_PREFIX)})
    return out


def tuner_layers(model) -> list:
    from peft.tuners.tuners_utils import BaseTunerLayer

    return [m for m in model.modules() if isinstance(m, BaseTunerLayer)]


@contextlib.contextmanager
def adapter_off(model):
    """The model with its LoRA switched off (peft's ``disable_adapters`` flag of each tuner
    layer, nothing else touched), put back as it was."""
    layers = tuner_layers(model)
    before = [layer._disable_adapters for layer in layers]
    for layer in layers:
        layer._disable_adapters = True
    try:
        yield model
    finally:
        for layer, was in zip(layers, before):
            layer._disable_adapters = was


@contextlib.contextmanager
def captured(model):
    """The list of ``model``'s outputs (its first output: the prediction) while inside."""
    outputs: list = []

    def hook(module, args, output):
        outputs.append(output[0] if isinstance(output, (tuple, list)) else
                       getattr(output, "sample", output))

    handle = model.register_forward_hook(hook)
    try:
        yield outputs
    finally:
        handle.remove()


def replayed(state):
    """A CPU generator at ``state`` (a step generator's state before its loss drew)."""
    import torch

    g = torch.Generator()
    g.set_state(state)
    return g


def check_task(cfg: RunConfig) -> None:
    """One-shot ``sft`` has no stage 1 to cache the class set and the DOP captions."""
    if cfg.task == "sft" and enabled(cfg):
        raise StageError(Msg("note.preservation_one_shot"))


def class_generator(seed: int, rank: int, micro: int):
    """The class sample's noise generator of one micro-step (apart from the step's)."""
    import numpy as np
    import torch

    s = int(np.random.SeedSequence([seed, rank, micro, 1]).generate_state(1)[0])
    return torch.Generator().manual_seed(s)


class Preservation:
    """The extra loss terms of one run (see the module docstring)."""

    def __init__(self, cfg: RunConfig, family, model, schedule, dtype, device, rank: int = 0):
        self.cfg, self.family, self.model = cfg, family, model
        self.schedule, self.dtype, self.device, self.rank = schedule, dtype, device, rank
        self.classes = None
        if cfg.prior_preservation:
            folder = Path(cfg.dataset_base_path) / CLASS_CACHE
            try:
                self.classes = CachedDataset(folder, gate=read_gate(cfg))
            except CacheError:
                raise StageError(Msg("note.class_cache_missing", folder=str(folder))) from None
        self.dop = bool(cfg.diff_output_preservation)
        if self.dop and not tuner_layers(model):
            raise StageError(Msg("note.dop_needs_lora"))

    @classmethod
    def of(cls, cfg: RunConfig, *args, **kwargs) -> "Preservation | None":
        """The run's terms; None when neither method is on."""
        check_task(cfg)
        return cls(cfg, *args, **kwargs) if enabled(cfg) else None

    def describe(self) -> str:
        parts = []
        if self.classes is not None:
            parts.append(f"prior preservation on {len(self.classes)} class samples at weight "
                         f"{self.cfg.prior_loss_weight:g}")
        if self.dop:
            parts.append(f"DOP ({self.cfg.trigger_word.strip()!r} -> "
                         f"{self.cfg.dop_class.strip()!r}) at weight {self.cfg.dop_weight:g}")
        return "; ".join(parts)

    def with_dop_captions(self, dataset):
        """The training set with each sample's DOP caption (cached by stage 1); a sample
        without one is refused, naming the cache to write again."""
        if not self.dop:
            return dataset
        cfg = self.cfg
        folder = Path(cfg.dataset_base_path)
        gate = read_gate(cfg)
        manifest = read_manifest_gated(folder, gate) or {}
        prompts = {str(e.get("file")): str(e.get("prompt", ""))
                   for e in manifest.get("samples", []) if isinstance(e, dict)}
        captions, missing = {}, []
        for p in dataset.files:
            path = dop_file(folder, dop_caption(prompts.get(p.name, ""), cfg))
            if p.name in prompts and gate.is_file(path):
                captions[p.name] = path
            else:
                missing.append(p.name)
        if missing:
            raise StageError(Msg("note.dop_cache_missing", folder=str(folder / DOP_CACHE),
                                 n=len(missing), first=missing[0]))
        return WithDopCaptions(dataset, captions, gate)

    def class_sample(self, micro: int) -> dict[str, Any]:
        """Micro-step ``micro``'s class sample: a fixed permutation per pass."""
        import torch

        n = len(self.classes)
        g = torch.Generator().manual_seed(self.cfg.seed * 1_000_003 + micro // n)
        index = torch.randperm(n, generator=g)[micro % n].item()
        return to_device(self.classes[index], self.device)

    def prior_loss(self, transformer, micro: int):
        return timesteps.training_loss(self.cfg, self.family, transformer,
                                       self.class_sample(micro), self.schedule,
                                       class_generator(self.cfg.seed, self.rank, micro),
                                       self.dtype)

    def dop_loss(self, transformer, batch: dict[str, Any], state):
        """mse(LoRA prediction, base prediction) on the batch's noisy latents with its DOP
        captions; ``state``: the step generator's state before the training loss drew."""
        import torch
        import torch.nn.functional as F

        sample = dop_sample(batch)
        with adapter_off(self.model), torch.no_grad(), captured(self.model) as base:
            timesteps.training_loss(self.cfg, self.family, transformer, sample,
                                    self.schedule, replayed(state), self.dtype)
        with captured(self.model) as tuned:
            timesteps.training_loss(self.cfg, self.family, transformer, sample,
                                    self.schedule, replayed(state), self.dtype)
        terms = [F.mse_loss(a.float(), b.detach().float()) for a, b in zip(tuned, base)]
        return sum(terms) / len(terms)

    def loss(self, transformer, batch: dict[str, Any], state, micro: int):
        """The extra terms of one micro-step (a 0-d tensor; 0 when every weight is 0)."""
        cfg = self.cfg
        total = 0.0
        if self.classes is not None and cfg.prior_loss_weight:
            total = total + cfg.prior_loss_weight * self.prior_loss(transformer, micro)
        if self.dop and cfg.dop_weight:
            total = total + cfg.dop_weight * self.dop_loss(transformer, batch, state)
        return total
