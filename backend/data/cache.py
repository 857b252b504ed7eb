"""Stage-1 cache: one safetensors file per sample plus ``manifest.json``.

A sample's file is named by a hash of everything that determines it: the image bytes, the
caption (with trigger word), the resize settings and the size they give, the encoder model
files (path + size + mtime) and the cache format. Re-running with nothing changed encodes
nothing; a changed caption or image re-encodes only that sample; files the previous
manifest listed that are no longer needed are removed (nothing else in the folder is
touched). Files are written atomically, so a stopped run leaves only complete files and the
next run reuses them. Never pickles.

manifest.json::

    {"format": 1, "family": "<model_family>", "model": [[path, size, mtime_ns], ...],
     "samples": [{"key", "file", "image", "prompt", "width", "height"}, ...]}

(``"masked": true`` on each sample written with ``masked_loss``; such a sample holds
``loss_mask``, ``backend.data.masks``.)

Stage 2 reads the samples in manifest order (``load_cached_samples`` / ``CachedDataset``).
Images are read through the run's read gate (``backend.core.readgate``), and so are the cached
samples when stage 2 passes its ``gate``; a manifest may name only plain file names inside
its own folder.
"""
from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path
from typing import Any

from backend.core import readgate, writegate
from backend.core.messages import Msg
from backend.core.diskspace import writing
from backend.config.schema import RunConfig
from backend.models.lora import write_json_atomic
from backend.data.dataset import (IMAGE_LOADING, Record, load_input_image, load_pixels, target_size,
                                  upright_size)
from backend.data.masks import latent_mask, load_image_mask, mask_key

FORMAT = 1
MANIFEST = "manifest.json"
# The empty caption's embedding, for caption_dropout (backend/data/batches.py).
EMPTY_PROMPT = "empty_prompt.safetensors"
SAMPLE_FILE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}\.safetensors$")


class CacheError(RuntimeError):
    pass


def _file_sha256(path: Path, gate: readgate.ReadGate = readgate.UNRESTRICTED) -> str:
    h = hashlib.sha256()
    with gate.open(path, "image") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def sample_key(rec: Record, cfg: RunConfig, size: tuple[int, int], model_fp: list) -> str:
    payload = {
        "format": FORMAT, "family": cfg.model_family,
        "image": _file_sha256(rec.image, readgate.for_config(cfg)),
        "prompt": rec.prompt, "size": list(size),
        "resize": [cfg.height, cfg.width, cfg.max_pixels], "model": model_fp,
        # How images are read (2: EXIF orientation, 16-bit scaled, alpha on white): a
        # sample cached by older loading is encoded again.
        "loading": IMAGE_LOADING,
    }
    if rec.inputs:  # an edit sample: its input images too (text-to-image keys unchanged)
        gate = readgate.for_config(cfg)
        payload["inputs"] = [_file_sha256(p, gate) for p in rec.inputs]
    return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()


def plan(cfg: RunConfig, records: list[Record], model_fp: list) -> list[dict[str, Any]]:
    """Manifest entries for ``records`` (key, file, image, prompt, width, height)."""
    from PIL import Image

    gate = readgate.for_config(cfg)
    entries = []
    for rec in records:
        with gate.open(rec.image, "image") as f, Image.open(f) as im:
            size = target_size(*upright_size(im), cfg)
        key = sample_key(rec, cfg, size, model_fp)
        entries.append({"key": key, "file": f"{key[:32]}.safetensors", "image": str(rec.image),
                        "prompt": rec.prompt, "width": size[0], "height": size[1]})
        if rec.inputs:
            entries[-1]["inputs"] = [str(p) for p in rec.inputs]
    return entries


def read_manifest(cache_dir: str | Path) -> dict[str, Any] | None:
    p = Path(cache_dir) / MANIFEST
    if not p.is_file():
        return None
    return json.loads(p.read_text(encoding="utf-8"))


def write_manifest(cache_dir: str | Path, entries: list[dict], model_fp: list,
                   family: str) -> Path:
    return write_json_atomic(Path(cache_dir) / MANIFEST, {
        "format": FORMAT, "family": family, "model": model_fp, "samples": entries})


def save_sample(path: Path, tensors: dict[str, Any], meta: dict[str, str]) -> None:
    """One cached sample, written atomically; a full disk or a file past the process's
    file-size limit names this file (``backend.core.diskspace.writing``)."""
    from safetensors.torch import save

    data = save({k: v.detach().cpu().contiguous() for k, v in tensors.items()}, metadata=meta)
    with writing(path, len(data)):
        writegate.atomic_write(path, data)


def load_sample(path: str | Path, gate: readgate.ReadGate = readgate.UNRESTRICTED
                ) -> dict[str, Any]:
    from safetensors.torch import load

    return load(gate.read_bytes(path, "cached sample"))


def cached_files(cache_dir: str | Path, gate: readgate.ReadGate = readgate.UNRESTRICTED
                 ) -> list[Path]:
    """Sample files of a cache, in manifest order (else sorted); a manifest entry that is
    not a plain file name of this folder is an error."""
    cache_dir = Path(cache_dir)
    manifest = read_manifest_gated(cache_dir, gate)
    if manifest is not None:
        names = [str(e.get("file", "")) if isinstance(e, dict) else ""
                 for e in manifest.get("samples", [])]
        bad = [n for n in names if not SAMPLE_FILE.match(n)]
        if bad:
            raise CacheError(Msg("data.cache_bad_sample", manifest=MANIFEST, got=bad[0]))
        return [cache_dir / n for n in names]
    return [p for p in gate.list_dir(cache_dir, "cache folder")
            if p.name.endswith(".safetensors") and not p.name.startswith(".")
            and p.name != EMPTY_PROMPT]


def read_manifest_gated(cache_dir: Path, gate: readgate.ReadGate) -> dict[str, Any] | None:
    """The cache's manifest read through ``gate`` (None when there is none)."""
    p = cache_dir / MANIFEST
    if not gate.is_file(p):
        return None
    try:
        data = json.loads(gate.read_text(p, MANIFEST))
    except ValueError as e:
        raise CacheError(Msg("data.cache_bad_json", manifest=MANIFEST, why=str(e))) from None
    if not isinstance(data, dict):
        raise CacheError(Msg("data.cache_not_mapping", manifest=MANIFEST,
                             got=type(data).__name__))
    return data


def check_cache(cache_dir: str | Path, gate: readgate.ReadGate = readgate.UNRESTRICTED
                ) -> list[Path]:
    """The sample files of a stage-1 cache; raises ``CacheError`` naming what is wrong.

    ``gate`` (stage 2: ``readgate.for_config(cfg)``): a cache folder or sample outside the
    run's read roots reads as missing."""
    cache_dir = Path(cache_dir)
    if not gate.is_dir(cache_dir):
        raise CacheError(Msg("data.cache_not_found", got=str(cache_dir), folder=cache_dir))
    files = cached_files(cache_dir, gate)
    if not files:
        raise CacheError(Msg("data.cache_empty", folder=cache_dir))
    missing = [p.name for p in files if not gate.is_file(p)]
    if missing:
        raise CacheError(Msg("data.cache_incomplete", folder=cache_dir,
                             names=", ".join(missing[:5])))
    return files


def load_cached_samples(cache_dir: str | Path,
                        gate: readgate.ReadGate = readgate.UNRESTRICTED) -> list[dict[str, Any]]:
    return [load_sample(p, gate) for p in check_cache(cache_dir, gate)]


class CachedDataset:
    """Cached samples repeated ``repeat`` times (stage 2), read through ``gate``."""

    def __init__(self, cache_dir: str | Path, repeat: int = 1,
                 gate: readgate.ReadGate = readgate.UNRESTRICTED):
        self.files = check_cache(cache_dir, gate)
        self.repeat = repeat
        self.gate = gate

    def __len__(self) -> int:
        return len(self.files) * self.repeat

    def __getitem__(self, i: int) -> dict[str, Any]:
        return load_sample(self.files[i % len(self.files)], self.gate)


def build_cache(cfg: RunConfig, records: list[Record], encoder_factory, model_fp: list,
                *, rank: int = 0, world: int = 1, barrier=None, progress=None,
                should_stop=lambda: False, log=print, planner=None, loader=None,
                mask_loader=None) -> dict[str, int]:
    """Encode what is not cached yet into ``cfg.output_path``.

    ``encoder_factory()`` loads the encoder (only called when something needs encoding);
    its ``encode_samples(items, should_stop, log)`` yields one sample's tensors per
    ``(load_pixels, prompt)`` item, in order, in whatever order of work its offload mode
    needs (the files do not depend on it). Each rank encodes its share; rank 0 writes the
    manifest and removes stale files.
    ``planner(cfg, records, model_fp)`` and ``loader(rec, cfg)`` replace ``plan`` and
    ``backend.data.dataset.load_pixels`` of ``rec.image`` for other media (video families:
    ``backend.data.video``, which reads a record's window of its clip),
    and ``mask_loader(rec, cfg)`` ``backend.data.masks.load_image_mask`` (``masked_loss``: each
    sample holds ``loss_mask`` at its latents' grid, and its key and manifest entry say so).
    Returns {"total", "encoded", "reused", "stopped"}.
    """
    import time

    out = Path(cfg.output_path)
    out.mkdir(parents=True, exist_ok=True)
    previous = read_manifest(out) or {"samples": []}
    entries = (planner or plan)(cfg, records, model_fp)
    if cfg.masked_loss:  # the mask in the key: a cache with masks is another cache
        for rec, e in zip(records, entries):
            e["key"] = mask_key(e["key"], rec, cfg)
            e["file"], e["masked"] = f"{e['key'][:32]}.safetensors", True
    load = loader or (lambda rec, cfg: load_pixels(rec.image, cfg))
    load_mask = mask_loader or load_image_mask
    todo, seen = [], set()
    for rec, e in zip(records, entries):
        if not (out / e["file"]).is_file() and e["key"] not in seen:
            todo.append((rec, e))
            seen.add(e["key"])
    total, reused = len(entries), len(entries) - len(todo)
    log(f"[cache] {total} samples: {len(todo)} to encode, {reused} reused")
    if progress:
        progress.emit("start", total=total, encode=len(todo), reused=reused)
    mine = todo[rank::world]
    stopped = False
    if mine:
        encoder = encoder_factory()
        overflow = getattr(encoder, "prompt_overflow", None)
        for rec, _ in mine if overflow is not None else ():
            cut = overflow(rec.prompt)
            if cut:
                log(f"[data] warning: {rec.where}: {cut}")
        items = [(lambda rec=rec: load(rec, cfg), rec.prompt) for rec, _ in mine]
        if any(rec.inputs for rec, _ in mine):  # edit samples: their input images too
            items = [(pixels, prompt, lambda rec=rec: [load_input_image(p, cfg)
                                                      for p in rec.inputs])
                     for (pixels, prompt), (rec, _) in zip(items, mine)]
        sound = getattr(encoder, "load_sound", None)
        if sound is not None:  # an audio-video model: each clip's sound beside its pixels
            items = [(pixels, prompt, lambda rec=rec: sound(rec, cfg))
                     for (pixels, prompt), (rec, _) in zip(items, mine)]
        t0 = time.time()
        i = 0
        for i, tensors in enumerate(encoder.encode_samples(items, should_stop, log), 1):
            rec, e = mine[i - 1]
            if cfg.masked_loss:  # at the latents' grid (None: weight 1)
                tensors = {**tensors, "loss_mask": latent_mask(load_mask(rec, cfg),
                                                               tensors["latents"])}
            save_sample(out / e["file"], tensors, {"image": e["image"], "prompt": e["prompt"],
                                                  "format": str(FORMAT)})
            if progress:
                rate = i / max(time.time() - t0, 1e-9)
                progress.emit("step", step=reused + i * world, total=total, epoch=0, loss=None,
                              lr=None, samples_per_s=round(rate * world, 3),
                              eta_s=round((len(mine) - i) / rate, 1), encoded=i * world,
                              reused=reused)
        stopped = i < len(mine)
    if barrier is not None:
        barrier()
    done = [e for e in entries if (out / e["file"]).is_file()]
    if rank == 0:
        if not stopped:  # only files this cache listed before, never anything else
            keep = {e["file"] for e in entries}
            for old in {e["file"] for e in previous["samples"]} - keep:
                if SAMPLE_FILE.match(str(old)):  # a plain name of this folder, nothing else
                    (out / old).unlink(missing_ok=True)
        write_manifest(out, done, model_fp, cfg.model_family)
    encoded = len(todo) if not stopped else sum(1 for _, e in todo
                                                if (out / e["file"]).is_file())
    log(f"[cache] encoded {encoded}, reused {reused}, {total} in {out}")
    return {"total": total, "encoded": encoded, "reused": reused, "stopped": int(stopped)}
