"""Training images and captions: reading, checking and resizing.

A dataset is either
- ``dataset_metadata_path``: metadata.csv (columns ``image,prompt``), .json (a list of
  objects) or .jsonl (one object per line), image paths relative to ``dataset_base_path``; or
- no metadata: every image in ``dataset_base_path`` with a same-named ``.txt`` caption.

``trigger_word`` is prepended to every caption. Sizes follow the reference trainer: with
``height`` and ``width`` set, scale to cover and centre-crop; otherwise cap the area at
``max_pixels`` (dividing both sides by sqrt(area / max_pixels), truncated), floor both sides
to the model's multiple (``size_multiple``: 16, or what the family or its variant declares,
e.g. 32 for a VAE that downsamples 16x under 2x2 patches; the schema refuses a fixed size
that is not one), never upscale, then cover-resize and centre-crop. Pixels map to [-1, 1].

Images are read as shown: EXIF orientation applied, 16-bit images scaled (not clipped) to 8
bits, transparency composited on white. An image upscaled to a fixed ``height`` x ``width``
or composited is a warning (``validate_dataset``, and the stage log through
``check_dataset(cfg, log)``), naming the file and row.

``check_dataset(cfg)`` raises ``DatasetError`` listing every bad file and row before any model
is loaded; ``validate_dataset(cfg)`` returns the same findings as dicts for the UI, and
``dataset_bucket_plan(cfg)`` the batches they make. (Images or clips, by the family:
``backend.data.video.check_stage_dataset`` and ``validate_any_dataset``.)

Every file is opened through the run's read gate (``backend.core.readgate.for_config(cfg)``): with
``read_roots`` set, a metadata file, caption or image outside them reads as missing, and the
messages name files as the dataset names them, never where a refused path leads.
"""
from __future__ import annotations

import csv
import json
import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from backend.core import readgate
from backend.core.messages import Msg
from backend.core.media_types import IMAGE_EXTS
from backend.config.schema import RunConfig, resolution_multiple
from backend.families import get_family
from backend.data.buckets import bucket_plan, bucket_size, plan_text

PROMPT_KEY = "prompt"
IMAGE_KEY = "image"
DIVISOR = 16
# The version of how images are read (part of a stage-1 cache key): 2 applies EXIF
# orientation, scales 16-bit images to 8 bits and composites transparency on white.
IMAGE_LOADING = 2


class DatasetError(ValueError):
    """Every problem of a dataset, one per line, naming the file and row (a message:
    ``backend.core.messages``); ``line_msg`` says it on one line, as a stage's ``end``
    reason (the problems that fit in 500 characters, and how many more)."""

    def __init__(self, problems: list[str]):
        self.problems = list(problems)
        shown, size = [], len("Dataset problems:")
        for p in self.problems:
            size += 1 + len(" ".join(str(p).split()))
            if shown and size > 480:
                break
            shown.append(p)
        more = len(self.problems) - len(shown)
        self.line_msg = (Msg("diagnosis.dataset_problems_more", problems=shown, more=more)
                         if more else Msg("diagnosis.dataset_problems_line", problems=shown))
        super().__init__(Msg("diagnosis.dataset_problems", problems=self.problems))


@dataclass
class Record:
    image: Path            # absolute path
    prompt: str            # caption with the trigger word
    where: str             # "metadata.csv row 3" or "cat.png" (for messages)
    row: int | None = None  # 1-based data row / item of the metadata file
    name: str = ""         # the image as the dataset names it (for messages)
    # Edit models: the row's input images (absolute paths), filled by check_input_images.
    inputs: tuple[Path, ...] = ()
    # masked_loss: the sample's mask, a path or "alpha" (None: weight 1), filled by
    # backend.data.masks.check_masks.
    mask: Any = None
    # An audio-video run (extra_inputs: input_audio): the file the clip's sound is read from
    # (the row's input_audio, or the clip itself; None: silence), filled by
    # backend.data.video.check_clip_sound.
    sound: Any = None
    # IC-LoRA (extra_inputs: in_context_videos): the row's reference video, a
    # ``backend.data.video.ReferenceVideo`` filled by check_reference_videos.
    reference: Any = None
    # A window of a clip (frame_extraction other than head): a
    # ``backend.data.video.Window``, filled by backend.data.video.check_video_dataset.
    window: Any = None


# ------------------------------------------------------------------------------------------
# Sizes
# ------------------------------------------------------------------------------------------
def size_multiple(cfg: RunConfig) -> int:
    """The multiple every side is resized to for ``cfg``'s model: what its family, or its
    variant, declares (``backend.config.schema.resolution_multiple``; ``DIVISOR`` for most)."""
    return resolution_multiple({"model_family": cfg.model_family,
                                "model_id_with_origin_paths": cfg.model_id_with_origin_paths,
                                "model_paths": cfg.model_paths})[0]


def target_size(width: int, height: int, cfg: RunConfig,
                multiple: int | None = None) -> tuple[int, int]:
    """(width, height) a ``width`` x ``height`` image is trained at; ``multiple``:
    ``size_multiple(cfg)`` when the caller has it already."""
    if cfg.height is not None and cfg.width is not None:
        return cfg.width, cfg.height
    m = multiple or size_multiple(cfg)
    if getattr(cfg, "aspect_buckets", False):  # the nearest bucket at the pixel budget
        return bucket_size(width, height, cfg.max_pixels, m)
    w, h = width, height
    if w * h > cfg.max_pixels:
        scale = math.sqrt(w * h / cfg.max_pixels)  # as the reference: divide, then truncate
        w, h = int(w / scale), int(h / scale)
    return w // m * m, h // m * m


def cover_crop(image, width: int, height: int):
    """Scale a PIL image to cover ``width`` x ``height`` and centre-crop it."""
    from PIL import Image

    w, h = image.size
    scale = max(width / w, height / h)
    nw, nh = max(width, round(w * scale)), max(height, round(h * scale))
    if (nw, nh) != (w, h):
        image = image.resize((nw, nh), Image.BILINEAR)
    left, top = (nw - width) // 2, (nh - height) // 2
    return image.crop((left, top, left + width, top + height))


def upright_size(im) -> tuple[int, int]:
    """(width, height) of a PIL image as shown, its EXIF orientation applied."""
    w, h = im.size
    return (h, w) if im.getexif().get(0x0112, 1) in (5, 6, 7, 8) else (w, h)


def header_size(im) -> tuple[int, int]:
    """(width, height) of an opened image from its header, nothing decoded: as shown where
    the header holds the EXIF orientation (JPEG, WebP, TIFF), as stored for a PNG (whose
    eXIf chunk may follow the pixels, so Pillow decodes them to find it). Either way the
    checks it serves -- an image too small, frames of one size -- come out the same."""
    return im.size if im.format == "PNG" else upright_size(im)


def _to_rgb(im) -> tuple[Any, list[str]]:
    """A PIL image as 8-bit RGB, upright, and what was done to get there (for warnings):
    EXIF orientation applied; 16-bit and 32-bit greyscale scaled to 8 bits (not clipped);
    transparency composited on white."""
    import numpy as np
    from PIL import Image, ImageOps

    notes: list[str] = []
    orientation = im.getexif().get(0x0112, 1)
    upright = ImageOps.exif_transpose(im)
    if orientation not in (1, None):
        notes.append(Msg("data.exif_applied", orientation=orientation))
    im = upright if upright is not None else im
    if im.mode in ("I;16", "I;16L", "I;16B", "I;16N", "I"):
        arr = np.asarray(im).astype(np.float64)
        if im.mode == "I" and arr.size and (arr.max() > 65535 or arr.min() < 0):
            lo, hi = float(arr.min()), float(arr.max())
            arr = (arr - lo) / max(hi - lo, 1.0) * 255.0
        else:  # 16-bit: 0..65535 -> 0..255
            arr = arr / 257.0
        im = Image.fromarray(np.clip(np.rint(arr), 0, 255).astype(np.uint8), "L")
        notes.append(Msg("data.scaled_16bit"))
    elif im.mode == "F":
        arr = np.asarray(im).astype(np.float64)
        scale = 255.0 if arr.size and arr.max() <= 1.0 else 1.0
        im = Image.fromarray(np.clip(np.rint(arr * scale), 0, 255).astype(np.uint8), "L")
    if im.mode == "P" and "transparency" in im.info:
        im = im.convert("RGBA")
    if im.mode in ("RGBA", "LA", "PA", "La", "RGBa"):
        rgba = im.convert("RGBA")
        if rgba.getextrema()[3][0] < 255:
            notes.append(Msg("data.composited"))
        white = Image.new("RGBA", rgba.size, (255, 255, 255, 255))
        im = Image.alpha_composite(white, rgba)
    return im.convert("RGB"), notes


def upscale_note(w: int, h: int, tw: int, th: int) -> Msg | None:
    """What cover-resizing a ``w`` x ``h`` image to ``tw`` x ``th`` upscales, or None."""
    scale = max(tw / w, th / h)
    if scale <= 1.0:
        return None
    return Msg("data.upscaled", scale=scale, w=w, h=h, tw=tw, th=th)


def load_image(path: str | Path, cfg: RunConfig):
    """(PIL RGB image at its training size, notes on what loading changed) of an image,
    opened through the run's read gate."""
    from PIL import Image

    with readgate.for_config(cfg).open(path, "image") as f, Image.open(f) as im:
        im.load()
        rgb, notes = _to_rgb(im)
    w, h = target_size(*rgb.size, cfg)
    up = upscale_note(*rgb.size, w, h)
    if up:
        notes.append(up)
    return cover_crop(rgb, w, h), notes


def load_pixels(path: str | Path, cfg: RunConfig):
    """The training tensor of an image: [1, 3, H, W] float32 in [-1, 1] (opened through the
    run's read gate; see ``load_image``)."""
    import numpy as np
    import torch

    im, _ = load_image(path, cfg)
    arr = torch.from_numpy(np.asarray(im, dtype=np.float32).copy())
    return (arr / 127.5 - 1.0).permute(2, 0, 1).unsqueeze(0).contiguous()


def with_trigger(caption: str, trigger: str) -> str:
    caption, trigger = caption.strip(), trigger.strip()
    if not trigger or caption.startswith(trigger):
        return caption
    return f"{trigger}, {caption}" if caption else trigger


# ------------------------------------------------------------------------------------------
# Reading
# ------------------------------------------------------------------------------------------
def read_metadata_rows(meta: Path, gate: readgate.ReadGate = readgate.UNRESTRICTED
                       ) -> list[Any]:
    """The rows of a metadata file (.csv with a header, a .json list, .jsonl lines), as
    written: the one reader of metadata files (the stages, the Dataset tab, the path
    checks). Read through ``gate``; a file that is not one of the formats is a
    ``DatasetError`` naming it."""
    suffix = meta.suffix.lower()
    if suffix == ".csv":
        with gate.open_text(meta, "dataset_metadata_path", encoding="utf-8-sig",
                            newline="") as f:
            return list(csv.DictReader(f))
    if suffix == ".json":
        data = json.loads(gate.read_text(meta, "dataset_metadata_path"))
        if not isinstance(data, list):
            raise DatasetError([Msg("data.json_not_list", meta=meta, got=type(data).__name__)])
        return data
    if suffix == ".jsonl":
        rows = []
        for i, line in enumerate(gate.read_text(meta, "dataset_metadata_path").splitlines(),
                                 1):
            if line.strip():
                try:
                    rows.append(json.loads(line))
                except ValueError as e:
                    raise DatasetError([Msg("data.jsonl_bad", meta=meta, line=i,
                                            why=str(e))]) from e
        return rows
    raise DatasetError([Msg("data.meta_format", meta=meta)])


def _read_metadata(meta: Path, gate: readgate.ReadGate = readgate.UNRESTRICTED
                   ) -> list[dict[str, Any]]:
    rows = read_metadata_rows(meta, gate)
    if meta.suffix.lower() == ".csv":
        columns = list(rows[0]) if rows else _csv_header(meta, gate)
        for key in (IMAGE_KEY, PROMPT_KEY):
            if key not in columns:
                raise DatasetError([Msg("data.missing_column", meta=meta, key=key,
                                        columns=", ".join(columns) or Msg("data.none"))])
    return rows


def _csv_header(meta: Path, gate: readgate.ReadGate) -> list[str]:
    with gate.open_text(meta, "dataset_metadata_path", encoding="utf-8-sig",
                        newline="") as f:
        return csv.DictReader(f).fieldnames or []


def read_records(cfg: RunConfig) -> tuple[list[Record], list[str]]:
    """(records, problems) of the dataset without opening images (the metadata file and the
    captions are read through the run's read gate)."""
    return dataset_records(cfg, "image", IMAGE_EXTS, _image_column, _read_metadata,
                           lambda gate, p: p.is_symlink() or gate.is_file(p))


def _image_column(row: dict) -> tuple[str | None, str]:
    missing = [k for k in (IMAGE_KEY, PROMPT_KEY) if k not in row]
    return (None, lambda where: Msg("data.row_missing", where=where, keys=missing)
            ) if missing else (IMAGE_KEY, None)


def dataset_records(cfg: RunConfig, noun: str, exts, column: Callable[[dict], tuple],
                    read_rows: Callable[..., list], keep: Callable[..., bool] | None = None
                    ) -> tuple[list[Record], list[str]]:
    """(records, problems) of a dataset of ``noun`` files (suffixes ``exts``), without
    opening them: the rows of ``dataset_metadata_path`` (read by ``read_rows``; ``column(row)``
    gives the row's file column and None, or None and the problem as a function of where
    the row is), else every such file in
    ``dataset_base_path`` (that ``keep(gate, path)``) with a ``.txt`` caption beside it. The
    metadata file and the captions are read through the run's read gate."""
    gate = readgate.for_config(cfg)
    base = Path(cfg.dataset_base_path).expanduser()
    if not cfg.dataset_base_path or not gate.is_dir(base):
        return [], [Msg("data.base_not_found", got=cfg.dataset_base_path)]
    problems: list[str] = []
    records: list[Record] = []
    if cfg.dataset_metadata_path:
        meta = Path(cfg.dataset_metadata_path).expanduser()
        if not gate.is_file(meta):
            return [], [Msg("data.meta_not_found", got=str(meta))]
        try:
            rows = read_rows(meta, gate)
        except DatasetError as e:
            return [], e.problems
        except (OSError, ValueError) as e:
            return [], [Msg("data.meta_unreadable", meta=meta, why=str(e))]
        for i, row in enumerate(rows, 1):
            where = Msg("data.where_row", file=meta.name, row=i)
            if not isinstance(row, dict):
                problems.append(Msg("data.row_not_object", where=where, noun=noun))
                continue
            key, missing = column(row)
            if key is None:
                problems.append(missing(where))
                continue
            name, prompt = row[key], row[PROMPT_KEY]
            if isinstance(name, list):
                if len(name) != 1:
                    problems.append(Msg("data.one_path", where=where, noun=noun, n=len(name)))
                    continue
                name = name[0]
            prompt = "" if prompt is None else str(prompt)
            # The path as the row names it, made absolute without following links: the
            # gate resolves links when the file is opened.
            records.append(Record(Path(os.path.abspath(base / str(name))),
                                  with_trigger(prompt, cfg.trigger_word) if prompt.strip()
                                  else "", where, i, str(name)))
    else:
        files = [p for p in gate.list_dir(base, "dataset_base_path")
                 if p.suffix.lower() in exts and (keep is None or keep(gate, p))]
        if not files:
            problems.append(Msg("data.no_files", noun=noun, exts=", ".join(exts), base=base))
        for p in files:
            txt = p.with_suffix(".txt")
            if not gate.is_file(txt):
                problems.append(Msg("data.no_caption_file", name=p.name, txt=txt.name))
                continue
            caption = gate.read_text(txt, "caption file", errors="replace")
            records.append(Record(Path(os.path.abspath(p)),
                                  with_trigger(caption, cfg.trigger_word)
                                  if caption.strip() else "", p.name, None, p.name))
    if cfg.dataset_metadata_path and not records and not problems:
        problems.append(Msg("data.no_rows", meta=cfg.dataset_metadata_path))
    return records, problems


def not_opened(gate: readgate.ReadGate, path: Path, name: str, what: str = "image") -> Msg:
    """Why ``path`` (named ``name`` in the dataset) did not open as an image file: a folder
    the run may read is called a folder; anything else -- missing, or outside the read
    roots (a folder there too) -- is "not found", so nothing outside them shows."""
    if gate.is_dir(path):
        return Msg("data.is_folder", what=what, name=name)
    return Msg("data.not_found", what=what, name=name)


def inspect_record(rec: Record, cfg: RunConfig, *, headers_only: bool = False
                   ) -> dict[str, Any]:
    """One finding per record: level ok | warning | error, message, sizes before/after
    resize. Warnings: an image upscaled to the training size, transparency composited on
    white. ``headers_only``: the image's size from its header, nothing decoded (the same
    errors for a missing, empty, unidentifiable or too small image; a check before a run
    is accepted, ``backend.planning.preflight``).

    An image outside the run's read roots is "not found", worded as for a missing file."""
    from PIL import Image, UnidentifiedImageError

    info: dict[str, Any] = {"level": "ok", "file": str(rec.image), "row": rec.row,
                            "where": rec.where, "caption": rec.prompt, "message": "",
                            "original_size": None, "size": None}
    errs: list[str] = []
    warns: list[str] = []
    if not rec.prompt.strip():
        errs.append(Msg("data.empty_caption"))
    gate = readgate.for_config(cfg)
    try:
        f = gate.open(rec.image, "image")
    except OSError:  # missing or refused: one answer; a readable folder: said
        errs.append(not_opened(gate, rec.image, rec.name or rec.image.name))
    else:
        try:
            with f, Image.open(f) as im:
                if headers_only:  # the size from the header: nothing decoded
                    (w, h), notes = header_size(im), []
                else:
                    im.load()
                    rgb, notes = _to_rgb(im)
                    w, h = rgb.size
            info["original_size"] = [w, h]
            m = size_multiple(cfg)
            tw, th = target_size(w, h, cfg, m)
            if tw < m or th < m:
                errs.append(Msg("data.too_small", w=w, h=h, m=m))
            else:
                info["size"] = [tw, th]
                up = upscale_note(w, h, tw, th)
                warns += [n for n in notes if n.code == "data.composited"] + (
                    [up] if up else [])
        except (UnidentifiedImageError, OSError, ValueError) as e:
            text = " ".join(str(e).replace(repr(f), repr(rec.image.name)).split())
            errs.append(Msg("diagnosis.cannot_read_image", name=rec.image.name, why=text))
    return with_findings(info, rec, errs, warns)


def with_findings(info: dict[str, Any], rec: Record, errs: list[str], warns: list[str]
                  ) -> dict[str, Any]:
    """``info`` (one record's finding) with its level and message from ``errs`` and
    ``warns``: an image's or a clip's, worded alike."""
    if errs:
        info["level"] = "error"
        info["message"] = Msg("data.record_errors", where=rec.where, errs=errs)
    elif warns:
        info["level"] = "warning"
        info["message"] = Msg("data.record_warnings", where=rec.where,
                              name=rec.name or rec.image.name, warns=warns)
    return info


def validate_dataset(cfg: RunConfig) -> list[dict[str, Any]]:
    """Findings for the UI: one dict per record (level ok | warning | error, file, row, where,
    caption, message, original_size [w, h], size [w, h] after resize), plus dataset-level
    errors (file/row None)."""
    records, problems = read_records(cfg)
    out = [{"level": "error", "file": None, "row": None, "where": "", "caption": "",
            "message": p, "original_size": None, "size": None} for p in problems]
    out += [inspect_record(r, cfg) for r in records]
    return out


def dataset_bucket_plan(cfg: RunConfig, findings: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """The Dataset tab's bucket plan for ``cfg``: ``rows`` (``bucket_plan``), ``text``,
    ``batch_size`` and ``held_out`` (the last ``validation_samples`` images, not trained).
    ``findings``: ``validate_dataset(cfg)`` (or the video check's) when the tab has it
    already; images with an error are left out, as training would refuse them."""
    if findings is None:
        findings = validate_dataset(cfg)
    sizes = [tuple(f["size"]) + ((f["frames"],) if f.get("frames") else ())  # clips: frames
             for f in findings if f.get("file") and f.get("size") and f.get("level") != "error"
             for _ in range(f.get("windows") or 1)]  # a clip's windows (frame_extraction)
    held = min(cfg.validation_samples, max(len(sizes) - 1, 0))
    train = sizes[: len(sizes) - held] * cfg.dataset_repeat
    rows = bucket_plan(train, cfg.batch_size, cfg.bucket_remainder)
    return {"rows": rows, "text": plan_text(rows, cfg.batch_size), "batch_size": cfg.batch_size,
            "held_out": held}


def check_dataset(cfg: RunConfig, log=None, *, headers_only: bool = False) -> list[Record]:
    """The dataset's records; raises ``DatasetError`` listing every problem. Warnings
    (an image upscaled, transparency composited on white) go to ``log``, one a line.
    ``headers_only``: images are read up to their headers (``inspect_record``)."""
    records, problems = read_records(cfg)
    findings = [inspect_record(r, cfg, headers_only=headers_only) for r in records]
    return checked(records, problems, findings, log)


def checked(records: list[Record], problems: list[str], findings: list[dict[str, Any]],
            log=None) -> list[Record]:
    """``records`` when neither ``problems`` nor the findings hold an error (else
    ``DatasetError`` listing them all); the findings' warnings go to ``log``."""
    problems = problems + [i["message"] for i in findings if i["level"] == "error"]
    if problems:
        raise DatasetError(problems)
    if log is not None:
        for i in findings:
            if i["level"] == "warning":
                log(f"[data] warning: {i['message']}")
    return records


class ImageDataset:
    """Records as training items {"pixels": [1,3,H,W], "prompt": str} (one-shot ``sft``),
    repeated ``repeat`` times; ``load`` reads one record's pixels (a subclass reads clips).
    ``mask_loader(rec, cfg)`` (``masked_loss``): each item's ``mask`` at its training size
    too (``backend.data.masks``; None: weight 1)."""
    load = staticmethod(load_pixels)

    def __init__(self, records: list[Record], cfg: RunConfig, repeat: int = 1,
                 mask_loader: Callable[..., Any] | None = None):
        self.records, self.cfg, self.repeat = records, cfg, repeat
        self.mask_loader = mask_loader

    def __len__(self) -> int:
        return len(self.records) * self.repeat

    def __getitem__(self, i: int) -> dict[str, Any]:
        rec = self.records[i % len(self.records)]
        item = {"pixels": self.load(rec.image, self.cfg), "prompt": rec.prompt}
        if self.mask_loader is not None:
            item["mask"] = self.mask_loader(rec, self.cfg)
        return item


# ------------------------------------------------------------------------------------------
# Edit models: input images beside the target (``extra_inputs: edit_image``)
# ------------------------------------------------------------------------------------------
EDIT_IMAGE_KEY = "edit_image"


def _input_names(value: Any) -> list[str] | None:
    """A row's ``edit_image`` as names: one path, or a JSON list of paths (None: neither)."""
    if isinstance(value, str):
        value = value.strip()
        if value.startswith("["):  # a CSV cell holding a JSON list
            try:
                value = json.loads(value)
            except ValueError:
                return None
        else:
            return [value] if value else []
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return [v.strip() for v in value]
    return None


def check_input_images(cfg: RunConfig, records: list[Record], takes: int,
                       model: str = "this model", *, headers_only: bool = False
                       ) -> list[Record]:
    """``records`` with each row's input images (``edit_image``) filled in, every one
    opened through the run's read gate and read as an image; raises ``DatasetError``
    listing every problem, naming the row: a missing column or cell, an image missing or
    unreadable, more images than the model takes (``takes``; 0: a text-to-image model,
    which takes none). ``cfg.extra_inputs`` empty and ``takes`` 0: nothing to check.
    ``headers_only``: each input image is read up to its header."""
    from PIL import Image, UnidentifiedImageError

    wanted = EDIT_IMAGE_KEY in (cfg.extra_inputs or "")
    if not wanted and not takes:
        return records
    if not takes:
        raise DatasetError([Msg("data.takes_no_inputs", model=model, got=cfg.extra_inputs)])
    if not wanted:
        raise DatasetError([Msg("data.needs_inputs", model=model)])
    if not cfg.dataset_metadata_path:
        raise DatasetError([Msg("data.edit_needs_meta")])
    gate = readgate.for_config(cfg)
    base = Path(cfg.dataset_base_path).expanduser()
    meta = Path(cfg.dataset_metadata_path).expanduser()
    rows = read_metadata_rows(meta, gate)
    problems: list[str] = []
    out: list[Record] = []
    for rec in records:
        row = rows[rec.row - 1] if rec.row and rec.row <= len(rows) else {}
        names = _input_names(row.get(EDIT_IMAGE_KEY)) if isinstance(row, dict) else None
        if not names:
            got = Msg("data.missing") if not isinstance(row, dict) or (
                EDIT_IMAGE_KEY not in row) else repr(row.get(EDIT_IMAGE_KEY))
            problems.append(Msg("data.no_input_image", where=rec.where, got=got, takes=takes))
            continue
        if len(names) > takes:
            problems.append(Msg("data.too_many_inputs", where=rec.where, n=len(names),
                                model=model, takes=takes))
            continue
        paths, bad = [], []
        for name in names:
            path = Path(os.path.abspath(base / name))
            try:
                f = gate.open(path, "image")
            except OSError:  # missing or refused: one answer; a readable folder: said
                bad.append(not_opened(gate, path, name, "input_image"))
                continue
            try:
                with f, Image.open(f) as im:
                    if not headers_only:  # else the header alone says it is an image
                        im.load()
            except (UnidentifiedImageError, OSError, ValueError) as e:
                bad.append(Msg("data.cannot_read_input", name=name, why=" ".join(
                    str(e).replace(repr(f), repr(name)).split())))
                continue
            paths.append(path)
        if bad:
            problems.append(Msg("data.record_errors", where=rec.where, errs=bad))
            continue
        out.append(Record(rec.image, rec.prompt, rec.where, rec.row, rec.name, tuple(paths)))
    if problems:
        raise DatasetError(problems)
    return out


def validate_input_images(cfg: RunConfig) -> list[dict[str, Any]]:
    """The Dataset tab's findings for an edit dataset's input images (``check_input_images``
    against the config's model), in ``validate_dataset``'s form; [] for a text-to-image
    config or a dataset whose own rows are already wrong."""
    family = get_family(cfg.model_family).for_config(cfg)
    if not family.input_images and not cfg.extra_inputs:
        return []
    records, problems = read_records(cfg)
    if problems or not records:
        return []
    try:
        check_input_images(cfg, records, family.input_images, family.title)
    except DatasetError as e:
        return [{"level": "error", "file": None, "row": None, "where": "", "caption": "",
                 "message": p, "original_size": None, "size": None} for p in e.problems]
    return []


def load_input_image(path: str | Path, cfg: RunConfig):
    """An input image of an edit sample: PIL RGB as shown (EXIF orientation applied, 16-bit
    scaled, transparency on white), at its own size (the model's encoder resizes it),
    opened through the run's read gate."""
    from PIL import Image

    with readgate.for_config(cfg).open(path, "image") as f, Image.open(f) as im:
        im.load()
        return _to_rgb(im)[0]


class PairDataset(ImageDataset):
    """Edit records as training items {"pixels", "prompt", "inputs": ([PIL images],)}
    (one-shot ``sft`` of an edit model), repeated ``repeat`` times."""

    def __getitem__(self, i: int) -> dict[str, Any]:
        rec = self.records[i % len(self.records)]
        item = super().__getitem__(i)
        item["inputs"] = ([load_input_image(p, self.cfg) for p in rec.inputs],)
        return item
