"""Captions of a dataset, as a vision-language model writes them: which images, read and
written how, and the captioning model.

What a caption job (``backend/planning/caption_job.py``) writes (``caption_target``):
``txt`` -- one same-named ``.txt`` per image in ``dataset_base_path``; ``metadata`` -- the
``prompt`` column of ``dataset_metadata_path`` (its other columns kept). An image that
already has a caption keeps it unless ``caption_overwrite``; ``trigger_word`` is put in front
of every new caption (as ``backend.data.dataset.with_trigger`` reads it back: never twice).
Each caption is one line of at most ``caption_max_length`` tokens of the captioning model,
answering ``caption_template``.

The model: ``captioner_path`` (a local Qwen2.5-VL / Qwen3-VL folder, or ``model_id:folder/``
resolved as the model sources are; its ``config.json`` read through the read gate picks the
class with transformers' Auto classes), else the family's own captioner
(``Family.load_captioner``: a family whose text encoder is a vision-language model). Images go through in
batches of ``caption_batch_size``; ``caption_offload: sequential`` keeps the weights in host
RAM and streams them to the GPU module by module (accelerate's ``cpu_offload``).

    problems = caption_problems(cfg)           # before anything starts: field: problem
    items = to_caption(dataset_items(cfg), cfg.caption_overwrite)
    write_captions(cfg, {item.key: caption})   # through the run's write gate

The stage (``backend/stages/caption.py``) captions ``to_caption``'s items batch by batch
with ``load_captioner``'s model and writes each batch with ``write_captions``.
"""
from __future__ import annotations

import csv
import io
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from backend.core import messages, readgate, writegate
from backend.core.media_types import IMAGE_EXTS
from backend.core.messages import Msg
from backend.families import get_family
from backend.families.captioner import VLMCaptioner, image_only_processor_class
from backend.config.errors import field_problem
from backend.config.schema import RunConfig
from backend.models.hub import parse_spec, resolve_component_dirs, resolve_source
from backend.data.dataset import DatasetError, read_metadata_rows

IMAGE_KEY, PROMPT_KEY = "image", "prompt"
# model_type values of the captioning model folders we load (config.json).
VL_MODEL_TYPES = ("qwen2_5_vl", "qwen3_vl", "qwen2_vl")


class CaptionError(ValueError):
    """Every problem with a captioning job, one ``field: problem`` per line."""

    def __init__(self, problems: list[str]):
        self.problems = list(problems)
        super().__init__("\n".join(self.problems))


@dataclass
class Item:
    """One image of the dataset: its path, its name as the dataset writes it (the .txt
    stem's image or the metadata's ``image`` cell) and its caption now."""
    path: Path
    key: str
    caption: str


# ------------------------------------------------------------------------------------------
# The dataset
# ------------------------------------------------------------------------------------------
def _folder(cfg: RunConfig, gate: readgate.ReadGate) -> Path:
    base = cfg.dataset_base_path
    folder = Path(base or "").expanduser()
    if not base or not gate.is_dir(folder):
        raise CaptionError([Msg("data.caption_no_folder", got=base)])
    return folder


def read_metadata(meta: Path, gate: readgate.ReadGate) -> list[dict[str, Any]]:
    try:
        rows = read_metadata_rows(meta, gate)
    except DatasetError as e:
        raise CaptionError([field_problem("dataset_metadata_path", Msg(
            "validation.problems_joined", problems=list(e.problems)))]) from None
    return [r for r in rows if isinstance(r, dict)]


def dataset_items(cfg: RunConfig, gate: readgate.ReadGate | None = None) -> list[Item]:
    """The images ``cfg`` captions, with their captions now. ``CaptionError`` when the
    folder (or the metadata file of ``caption_target: metadata``) cannot be read or holds
    no images."""
    gate = gate or readgate.for_config(cfg)
    folder = _folder(cfg, gate)
    items: list[Item] = []
    if cfg.caption_target == "metadata":
        meta = cfg.dataset_metadata_path
        if not meta or not gate.is_file(Path(meta).expanduser()):
            raise CaptionError([Msg("data.caption_no_meta", got=meta)])
        for row in read_metadata(Path(meta).expanduser(), gate):
            key = str(row.get(IMAGE_KEY) or "")
            if not key or isinstance(row.get(IMAGE_KEY), list):
                continue
            path = folder / key
            if path.suffix.lower() in IMAGE_EXTS and gate.is_file(path):
                items.append(Item(path, key, "" if row.get(PROMPT_KEY) is None
                                  else str(row.get(PROMPT_KEY)).strip()))
    else:
        for path in sorted(gate.list_dir(folder, "dataset_base_path"), key=lambda p: p.name):
            if path.suffix.lower() not in IMAGE_EXTS or not gate.is_file(path):
                continue
            txt = path.with_suffix(".txt")
            caption = gate.read_text(txt, "caption").strip() if gate.is_file(txt) else ""
            items.append(Item(path, path.name, caption))
    if not items:
        got, exts = cfg.dataset_base_path, ", ".join(IMAGE_EXTS)
        raise CaptionError([
            Msg("data.caption_nothing_rows", meta=cfg.dataset_metadata_path, got=got,
                exts=exts) if cfg.caption_target == "metadata" else
            Msg("data.caption_nothing_folder", got=got, exts=exts)])
    return items


def to_caption(items: list[Item], overwrite: bool, done: set[str] = frozenset()
               ) -> list[Item]:
    """The items a job captions: without a caption (all with ``overwrite``), less those it
    already captioned (``done``, from its journal)."""
    return [it for it in items if (overwrite or not it.caption) and it.key not in done]


def captioner_problems(cfg: RunConfig, gate: readgate.ReadGate | None = None) -> list[str]:
    """Why the captioning model cannot be loaded, found without loading it: a
    ``captioner_path`` folder that is not there or holds no vision-language model, or a
    family with no captioner of its own."""
    gate = gate or readgate.for_config(cfg)
    path = (cfg.captioner_path or "").strip()
    if not path:
        if not get_family(cfg.model_family).captioner_components:
            return [f"captioner_path: model family {cfg.model_family} has no captioner of "
                    f"its own (got empty; allowed a Qwen2.5-VL or Qwen3-VL model folder)"]
        return []
    local = Path(path).expanduser()
    if not local.exists() and ":" in path:
        return []  # model_id:folder/: resolved (and downloaded) by the stage
    config = local / "config.json"
    if not gate.is_file(config):
        return [f"captioner_path: no readable config.json in the folder (got {path!r}; "
                f"allowed a Qwen2.5-VL or Qwen3-VL model folder)"]
    try:
        data = json.loads(gate.read_text(config, "captioner_path"))
    except (ValueError, OSError) as e:
        return [f"captioner_path: config.json cannot be read ({e})"]
    if data.get("model_type") not in VL_MODEL_TYPES:
        return [f"captioner_path: not a vision-language model this app captions with (got "
                f"model_type {data.get('model_type')!r}; allowed "
                f"{' | '.join(VL_MODEL_TYPES)})"]
    return []


def caption_problems(cfg: RunConfig, gate: readgate.ReadGate | None = None) -> list[str]:
    """Everything a caption job needs, checked before it is queued (``field: problem``)."""
    gate = gate or readgate.for_config(cfg)
    problems: list[str] = []
    try:
        items = dataset_items(cfg, gate)
    except CaptionError as e:
        problems += e.problems
    except readgate.ReadRefused as e:
        problems.append(Msg("data.base_refused", why=messages.said(e)))
    else:
        problems += image_problems(to_caption(items, cfg.caption_overwrite), gate)
    problems += captioner_problems(cfg, gate)
    return problems


def image_problems(items: list[Item], gate: readgate.ReadGate) -> list[str]:
    """The images of ``items`` that do not open as images (a text file named ``.png``, an
    empty file), each naming its file. Only the header is read (format and size), so a
    large folder is checked in a moment; a file that fails later is named by the stage."""
    problems = []
    for it in items:
        why = unreadable_image(it.path, gate)
        if why:
            problems.append(Msg("data.caption_not_image", name=it.key, why=why,
                                exts=", ".join(IMAGE_EXTS)))
    return problems


def unreadable_image(path: Path, gate: readgate.ReadGate) -> str | None:
    """Why ``path`` does not open as an image (its header read through ``gate``), or None."""
    from PIL import Image

    try:
        with gate.open(path, "image") as f:
            if os.fstat(f.fileno()).st_size == 0:
                return "an empty file"
            with Image.open(f) as im:
                w, h = im.size
    except (OSError, ValueError, SyntaxError) as e:  # PIL raises SyntaxError for bad headers
        return not_image_reason(e)
    return None if w > 0 and h > 0 else f"a {w}x{h} image"


def not_image_reason(e: BaseException) -> str:
    """An image's open error in words, without the file object PIL puts in its message."""
    from PIL import UnidentifiedImageError

    if isinstance(e, UnidentifiedImageError):
        return "not an image format PIL reads"
    return f"{type(e).__name__}: {' '.join(str(e).split())}"


# ------------------------------------------------------------------------------------------
# Writing captions
# ------------------------------------------------------------------------------------------
def one_line(text: str) -> str:
    """A generated caption as one line: whitespace and control characters collapsed."""
    text = "".join(ch if ch.isprintable() else " " for ch in str(text))
    return " ".join(text.split()).strip()


def write_metadata_rows(meta: Path, rows: list[dict[str, Any]],
                        gate: writegate.WriteGate = writegate.UNRESTRICTED) -> None:
    """Rows back into a metadata file in its own format (.csv, .json, .jsonl), atomically
    and through ``gate`` (never through a link)."""
    suffix = meta.suffix.lower()
    if suffix == ".csv":
        columns = list(dict.fromkeys([IMAGE_KEY, PROMPT_KEY] + [k for r in rows for k in r]))
        buf = io.StringIO()
        writer = csv.DictWriter(buf, fieldnames=columns, lineterminator="\n")
        writer.writeheader()
        writer.writerows(rows)
        text = buf.getvalue()
    elif suffix == ".json":
        text = json.dumps(rows, ensure_ascii=False, indent=1)
    else:
        text = "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows)
    gate.write_text(meta, text, "dataset_metadata_path")


def write_captions(cfg: RunConfig, captions: dict[str, str],
                   gate: readgate.ReadGate | None = None,
                   wgate: writegate.WriteGate | None = None) -> None:
    """Write ``{item key: caption}`` where ``caption_target`` says (the caption text as
    given: trigger word already in front), through the run's write gate: inside its
    ``write_roots`` only, never through a link planted before or during the job."""
    gate = gate or readgate.for_config(cfg)
    wgate = wgate or writegate.for_config(cfg)
    if not captions:
        return
    folder = _folder(cfg, gate)
    if cfg.caption_target == "metadata":
        meta = Path(cfg.dataset_metadata_path).expanduser()
        rows = read_metadata(meta, gate)
        for row in rows:
            key = row.get(IMAGE_KEY)
            if isinstance(key, str) and key in captions:
                row[PROMPT_KEY] = captions[key]
        write_metadata_rows(meta, rows, wgate)
        return
    for key, caption in captions.items():
        wgate.write_text((folder / key).with_suffix(".txt"), caption + "\n", "caption")


# ------------------------------------------------------------------------------------------
# The model
# ------------------------------------------------------------------------------------------
def image_only_processor(folder: Path):
    """The processor of a vision-language model folder. AutoProcessor where it loads; where
    the video processor needs torchvision (absent), the model's own processor class built
    from the PIL image processor and the tokenizer alone, skipping only the absent video
    processor's class check."""
    from transformers import AutoImageProcessor, AutoProcessor, AutoTokenizer

    try:
        return AutoProcessor.from_pretrained(str(folder))
    except Exception as first:  # noqa: BLE001 - e.g. no torchvision for the video processor
        from transformers.models.auto.processing_auto import PROCESSOR_MAPPING_NAMES

        model_type = json.loads((folder / "config.json").read_text(encoding="utf-8")
                                ).get("model_type")
        name = PROCESSOR_MAPPING_NAMES.get(model_type)
        if not name:
            raise first
        cls = image_only_processor_class(name)
        image_processor = AutoImageProcessor.from_pretrained(str(folder), backend="pil")
        return cls(image_processor=image_processor,
                   tokenizer=AutoTokenizer.from_pretrained(str(folder)), video_processor=None)


def captioner_folder(cfg: RunConfig) -> Path:
    """``captioner_path`` as a local folder (a ``model_id:folder/`` is fetched as the model
    sources are)."""
    found = resolve_source(cfg, parse_spec(cfg.captioner_path.strip()))
    return found[0] if found[0].is_dir() else found[0].parent


def load_captioner(cfg: RunConfig, device: Any = "cpu", dtype=None, log=print):
    """The captioning model of ``cfg`` (see the module's docstring)."""
    if cfg.captioner_path:
        from transformers import AutoModelForImageTextToText

        folder = captioner_folder(cfg)
        log(f"[caption] captioning model {folder}")
        model = AutoModelForImageTextToText.from_pretrained(str(folder), dtype=dtype)
        return VLMCaptioner(model, image_only_processor(folder), device=device,
                            offload=cfg.caption_offload)
    family = get_family(cfg.model_family).for_config(cfg)
    dirs = resolve_component_dirs(cfg, family.captioner_components)
    log(f"[caption] captioning with {cfg.model_family}'s own model: "
        + ", ".join(f"{k}={v}" for k, v in dirs.items()))
    return family.load_captioner(dirs, dtype, device, offload=cfg.caption_offload)
