"""Masked loss: a mask per image, read, checked and reduced to the latent grid.

With ``masked_loss`` each sample's loss is weighted per latent cell by a mask (grey levels
as weights, black 0 ... white 1). An image's mask is the first of:

1. its file in ``mask_path`` (the image's file name, or its stem with any image suffix);
2. the metadata row's ``mask`` column (a path relative to ``dataset_base_path``);
3. its own alpha channel, with ``alpha_mask`` (sd-scripts' ``alpha_mask``).

An image with none of them trains with weight 1 everywhere (``mask_missing: weight_one``) or
is refused before any stage (``refuse``); so is a ``mask`` cell naming a file that is not
there. A mask whose size differs from its image's is always refused, naming the row. A
mask is read as shown (EXIF orientation applied, 16-bit scaled), as grey levels, and
resized and cropped exactly as its image (``backend.data.dataset.cover_crop`` at the image's
``target_size``). Stage 1 reduces it to the latent grid (``latent_mask``: the area average
over each latent cell; for a clip, the frames the VAE groups into one latent frame -- the
first alone, then groups of 4 -- averaged too) and caches it as ``loss_mask`` beside the
latents; a cache written with masks is keyed apart from one without (``mask_key``). The
loss is ``backend.families.common.weighted_mse``. A clip's mask is an image (the whole clip)
or a video or frames folder read as the clip is (per frame): ``backend.data.video``.

Every file is opened through the run's read gate: a mask outside ``read_roots`` reads as
missing.
"""
from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Any

from backend.core import readgate
from backend.core.media_types import IMAGE_EXTS, VIDEO_EXTS
from backend.core.messages import Msg
from backend.config.schema import RunConfig
from backend.data.dataset import (DatasetError, Record, _to_rgb, cover_crop, header_size,
                                  load_image, read_metadata_rows, target_size, upright_size)

MASK_KEY = "mask"
ALPHA = "alpha"
# The version of how masks are read and reduced (part of a stage-1 cache key).
MASK_LOADING = 1
ALPHA_MODES = ("RGBA", "LA", "PA", "La", "RGBa")


def mask_rows(cfg: RunConfig) -> list[Any]:
    """The metadata rows (for their ``mask`` column), or [] without a metadata file."""
    if not cfg.dataset_metadata_path:
        return []
    try:
        return read_metadata_rows(Path(cfg.dataset_metadata_path).expanduser(),
                                  readgate.for_config(cfg))
    except (DatasetError, OSError, ValueError):
        return []  # the dataset's own check names it


def _cell(rows: list[Any], rec: Record) -> str:
    row = rows[rec.row - 1] if rec.row and rec.row <= len(rows) else None
    value = row.get(MASK_KEY) if isinstance(row, dict) else None
    if isinstance(value, list) and len(value) == 1:
        value = value[0]
    return str(value).strip() if isinstance(value, str) and value.strip() else ""


def _in_folder(folder: Path, rec: Record, gate: readgate.ReadGate,
               extra: tuple[str, ...] = ()) -> Path | None:
    """The mask of ``rec`` in ``folder``: its file name, else its stem with an image suffix
    (``extra``: more suffixes, and a frames folder of that stem, for clips)."""
    same = folder / rec.image.name
    if gate.is_file(same) or (extra and gate.is_dir(same)):
        return same
    for ext in IMAGE_EXTS + extra:
        p = folder / (rec.image.stem + ext)
        if gate.is_file(p):
            return p
    if extra and gate.is_dir(folder / rec.image.stem):
        return folder / rec.image.stem
    return None


def find_mask(rec: Record, cfg: RunConfig, rows: list[Any], gate: readgate.ReadGate,
              extra: tuple[str, ...] = ()) -> tuple[Path | str | None, str | None]:
    """(the record's mask: a path, ``ALPHA`` or None, what a missing one was given as:
    the ``mask`` cell naming no file, else None)."""
    if cfg.mask_path:
        found = _in_folder(Path(cfg.mask_path).expanduser(), rec, gate, extra)
        if found is not None:
            return found, None
    cell = _cell(rows, rec)
    if cell:
        path = Path(os.path.abspath(Path(cfg.dataset_base_path).expanduser() / cell))
        if gate.is_file(path) or (extra and gate.is_dir(path)):
            return path, None
        if not cfg.alpha_mask:
            return None, cell
    if cfg.alpha_mask:
        return ALPHA, None
    return None, cell or None


def source_problems(cfg: RunConfig, rows: list[Any], clips: bool = False) -> list[str]:
    """Dataset-level problems of the mask options: no source of masks at all (no
    ``mask_path``, no ``alpha_mask``, no ``mask`` column), ``alpha_mask`` for clips."""
    if not cfg.masked_loss:
        return []
    p: list[str] = []
    if clips and cfg.alpha_mask:
        p.append(Msg("diagnosis.mask_alpha_clips"))
    has_column = any(isinstance(r, dict) and MASK_KEY in r for r in rows)
    if not cfg.mask_path and not cfg.alpha_mask and not has_column:
        p.append(Msg("diagnosis.mask_no_source",
                     meta=str(cfg.dataset_metadata_path or "none")))
    return p


def missing_problem(rec: Record, cfg: RunConfig, given: str | None) -> tuple[Any, bool]:
    """(the message for ``rec`` without a mask, whether it is an error: ``mask_missing``
    refuse, or a ``mask`` cell naming no file)."""
    got = repr(given) if given else "none"
    refuse = cfg.mask_missing == "refuse"
    return Msg("diagnosis.mask_missing", name=rec.name or rec.image.name, got=got,
               then=cfg.mask_missing), refuse


def _alpha(im):
    """The alpha channel of an opened PIL image as L, or None without one."""
    if im.mode == "P" and "transparency" in im.info:
        im = im.convert("RGBA")
    if im.mode not in ALPHA_MODES:
        return None
    return im.convert("RGBA").getchannel("A")


def _upright(im):
    from PIL import ImageOps

    return ImageOps.exif_transpose(im) or im


def inspect_mask(rec: Record, cfg: RunConfig, mask: Path | str | None,
                 size: tuple[int, int] | None, *, headers_only: bool = False
                 ) -> tuple[bool, list, list]:
    """(whether ``rec`` has a mask, errors, warnings) of an image's mask against the image's
    upright ``size`` (None: the image itself is unreadable; nothing to compare)."""
    from PIL import Image, UnidentifiedImageError

    gate = readgate.for_config(cfg)
    if mask is None or size is None:
        return False, [], []
    try:
        if mask == ALPHA:
            with gate.open(rec.image, "image") as f, Image.open(f) as im:
                has = im.mode in ALPHA_MODES or (im.mode == "P" and "transparency" in im.info)
            return has, [], []
        with gate.open(mask, "mask") as f, Image.open(f) as im:
            if headers_only:
                got = header_size(im)
            else:
                im.load()
                got = _to_rgb(im)[0].size
    except (UnidentifiedImageError, OSError, ValueError) as e:
        return False, [Msg("diagnosis.mask_unreadable", name=Path(mask).name,
                           why=" ".join(str(e).split()))], []
    if tuple(got) != tuple(size):
        return False, [Msg("diagnosis.mask_size", name=Path(mask).name, mw=got[0], mh=got[1],
                           w=size[0], h=size[1])], []
    return True, [], []


def load_image_mask(rec: Record, cfg: RunConfig):
    """The mask of an image record at its training size: [1, H, W] float32 in [0, 1], or
    None without one (weight 1). ``rec.mask``: a path or ``ALPHA``
    (``check_masks`` sets it)."""
    import numpy as np
    import torch
    from PIL import Image

    if rec.mask is None:
        return None
    gate = readgate.for_config(cfg)
    with gate.open(rec.image, "image") as f, Image.open(f) as im:
        im.load()
        shown = _upright(im)
        image_size = _to_rgb(im)[0].size
        grey = _alpha(shown) if rec.mask == ALPHA else None
    if rec.mask == ALPHA and grey is None:
        return None
    if grey is None:
        with gate.open(rec.mask, "mask") as f, Image.open(f) as im:
            im.load()
            grey = _to_rgb(im)[0].convert("L")
    grey = cover_crop(grey, *target_size(*image_size, cfg))
    arr = torch.from_numpy(np.asarray(grey, dtype=np.float32).copy()) / 255.0
    return arr.unsqueeze(0)


def latent_mask(mask, latents):
    """``mask`` ([1, H, W], or a clip's [1, F, H, W]; None: ones) reduced to the latent
    grid of ``latents`` ([B, C, h, w], or [B, C, F', h, w]): the area average over each
    latent cell, and for a clip over the frames each latent frame holds (the first alone,
    then the rest split evenly, as the VAE groups 4 after the first). float32
    [1, h, w] or [1, F', h, w], on the CPU."""
    import torch
    import torch.nn.functional as F

    video = latents.ndim == 5
    grid = tuple(latents.shape[-2:])
    lat_frames = latents.shape[2] if video else 1
    if mask is None:
        return torch.ones((1, lat_frames, *grid) if video else (1, *grid))
    mask = mask.detach().float().cpu()
    if mask.ndim == 3:  # one mask [1, H, W]
        mask = mask.unsqueeze(1)  # [1, 1, H, W]: one frame
    frames = mask.shape[1]
    if video and frames > 1 and lat_frames > 1:
        rest = torch.tensor_split(mask[:, 1:], lat_frames - 1, dim=1)
        mask = torch.cat([mask[:, :1]] + [g.mean(dim=1, keepdim=True) for g in rest], dim=1)
    elif frames > 1:  # more mask frames than latent frames to hold them: their mean
        mask = mask.mean(dim=1, keepdim=True)
    out = F.adaptive_avg_pool2d(mask, grid)  # [1, F', h, w]: whole cells, an area average
    if video:
        return out.expand(1, lat_frames, *grid).contiguous() if out.shape[1] == 1 \
            else out.contiguous()
    return out[:, 0].contiguous()


def _digest(path: Path, gate: readgate.ReadGate) -> str:
    files = (sorted(p for p in gate.list_dir(path, "mask") if p.suffix.lower() in IMAGE_EXTS)
             if gate.is_dir(path) else [path])
    return gate.digest(files, "mask")


def mask_key(key: str, rec: Record, cfg: RunConfig) -> str:
    """A stage-1 cache key with the record's mask in it (its bytes, or the alpha of the
    image whose bytes the key holds already, or none), so a cache written with masks is
    another cache than one without."""
    gate = readgate.for_config(cfg)
    mask = rec.mask
    ident = (None if mask is None else ALPHA if mask == ALPHA
             else _digest(Path(mask), gate))
    payload = f"{key}|masked_loss|{MASK_LOADING}|{ident}"
    return hashlib.sha256(payload.encode()).hexdigest()


def check_masks(cfg: RunConfig, records: list[Record], log=None, *, clips: bool = False,
                sizes: list[tuple[int, int] | None] | None = None,
                inspect=None, headers_only: bool = False) -> list[Record]:
    """``records`` with each one's mask set (``Record.mask``) when ``masked_loss`` is on;
    raises ``DatasetError`` listing every problem, each naming the row and the field:
    no source of masks, a mask missing (``mask_missing: refuse``, or a ``mask`` cell
    naming no file), a mask of another size than its image, one that cannot be read.
    Images without a mask (``weight_one``) are counted in ``log``. ``sizes``: each
    record's upright size (None: read here); ``inspect(rec, cfg, mask, size,
    headers_only=)``: the check of one mask (``inspect_mask``; clips: the video module's)."""
    if not cfg.masked_loss:
        return records
    report = mask_report(cfg, records, clips=clips, sizes=sizes, inspect=inspect,
                         headers_only=headers_only)
    problems = report["problems"] + [m for _, errs, _ in report["per_record"] for m in errs]
    if problems:
        raise DatasetError(problems)
    if log is not None:
        for _, _, warns in report["per_record"]:
            for w in warns:
                log(f"[data] warning: {w}")
        if report["without"]:
            log(f"[data] masked_loss: {report['without']} of {len(records)} sample(s) "
                f"without a mask (weight 1)")
    return report["records"]


def image_sizes(records: list[Record], cfg: RunConfig, headers_only: bool = False
                ) -> list[tuple[int, int] | None]:
    """Each image's size as shown (``headers_only``: as its header gives it, the way
    ``inspect_mask`` reads a mask then); None: unreadable (its own check names it)."""
    from PIL import Image

    gate = readgate.for_config(cfg)
    out: list[tuple[int, int] | None] = []
    for rec in records:
        try:
            with gate.open(rec.image, "image") as f, Image.open(f) as im:
                out.append(tuple(header_size(im) if headers_only else upright_size(im)))
        except Exception:  # noqa: BLE001 - the image's own check names it
            out.append(None)
    return out


def mask_report(cfg: RunConfig, records: list[Record], *, clips: bool = False,
                sizes: list | None = None, inspect=None, headers_only: bool = False
                ) -> dict[str, Any]:
    """The mask of every record: ``records`` (with ``mask`` set), ``problems``
    (dataset-level), ``per_record`` [(has a mask, errors, warnings)] each message naming
    the row, ``without`` (how many have none)."""
    from dataclasses import replace

    gate = readgate.for_config(cfg)
    rows = mask_rows(cfg)
    problems = source_problems(cfg, rows, clips)
    extra = VIDEO_EXTS if clips else ()
    sizes = sizes if sizes is not None else image_sizes(records, cfg, headers_only)
    inspect = inspect or inspect_mask
    out, per, without = [], [], 0
    for rec, size in zip(records, sizes):
        mask, given = find_mask(rec, cfg, rows, gate, extra)
        errs, warns = [], []
        if mask is not None:
            has, errs, warns = inspect(rec, cfg, mask, size, headers_only=headers_only)
            if mask == ALPHA and not has:
                mask = None
        else:
            has = False
        if not has and not errs and size is not None:
            text, refused = missing_problem(rec, cfg, given)
            if refused or given:  # a cell naming no file is said, refused or not
                (errs if refused else warns).append(text)
        if not has:
            without += 1
        where = [Msg("diagnosis.mask_where", where=rec.where, problem=m) for m in errs]
        warned = [Msg("diagnosis.mask_where", where=rec.where, problem=m) for m in warns]
        per.append((has, where, warned))
        out.append(replace(rec, mask=mask if has else None))
    return {"records": out, "problems": problems, "per_record": per, "without": without}


# ------------------------------------------------------------------------------------------
# Masks over their images (the Dataset tab)
# ------------------------------------------------------------------------------------------
# What a weight-0 pixel is blended toward in a preview, and how far.
MASKED_TINT = (220, 30, 60)
MASKED_BLEND = 0.65


def overlay(rec: Record, cfg: RunConfig):
    """``rec``'s image at its training size with its mask over it (``rec.mask`` set), as
    the trainer sees them: a pixel of weight 1 as it is, one of weight 0 blended
    ``MASKED_BLEND`` of the way toward ``MASKED_TINT``, grey levels in between. None when
    the record has no mask (it trains with weight 1) or its alpha channel is opaque."""
    from PIL import Image

    weights = load_image_mask(rec, cfg)
    if weights is None:
        return None
    image, _ = load_image(rec.image, cfg)
    tinted = Image.blend(image, Image.new("RGB", image.size, MASKED_TINT), MASKED_BLEND)
    grey = Image.fromarray((weights[0].numpy() * 255.0).round().astype("uint8"), "L")
    return Image.composite(image, tinted, grey)


def mask_previews(cfg: RunConfig, records: list[Record], limit: int = 24) -> list[tuple]:
    """(image with its mask over it, the record's name) of the first ``limit`` records of an
    image dataset that have a mask (``check_masks``'s records)."""
    out = []
    for rec in records:
        if len(out) >= limit:
            break
        shown = overlay(rec, cfg)
        if shown is not None:
            out.append((shown, rec.name or rec.image.name))
    return out
