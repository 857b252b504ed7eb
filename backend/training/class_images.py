"""Class images rendered by the base model from ``class_prompt`` (prior preservation).

With ``prior_preservation`` and a ``class_prompt``, the class set holds at least
``num_class_images`` images: those of ``class_data_path`` (none without it) and, for the
rest, images the base model renders from the prompt (SimpleTuner's and sd-scripts' class
images). They are rendered with the family's pipeline (``Family.load_pipeline``, no LoRA)
and the run's sample settings (``sample_height`` x ``sample_width``, ``sample_steps``,
``sample_cfg``, ``sample_negative_prompt``, the offload and tiling options), image ``k``
from seed ``sample_seed + k``, into the run folder (``RunDir.classes``), never into the
user's ``class_data_path``::

    classes/class-0000-seed0.png    image 0, its settings in a PNG text chunk
    classes/class-0000-seed0.txt    its caption: the class prompt

A rerun over the same run folder renders only what is not there: an image whose caption and
recorded settings (prompt, seed, size, steps, guidance, negative prompt, base model) are
this run's is kept; one rendered with other settings is rendered again. Stage 1 caches the
folder's images and the first ``num_class_images`` minus those of ``class_data_path`` of
the rendered ones (``rendered_records``) as one class set (``backend/training/preservation.py``).

**A stage of its own, not a step of stage 1** (``class_images``, run by the run plan before
``data_process``; ``backend/planning/plan.py`` plans it whenever stage 1 is planned and
``class_prompt`` is set, and gives stage 1 the folder with ``--class_images_dir``):

- rendering needs the whole pipeline, the transformer with it, which stage 1 never loads:
  stage 1 is sized for the text encoder and VAE (the memory estimate,
  ``data_process_offload``); in a process of its own the pipeline's memory is given back
  before stage 1 loads its encoder;
- it runs as one plain process, as the sample stage does (stage 1 runs under ``accelerate
  launch``, a process per GPU, which would each load a pipeline);
- it shows in the run as a stage of its own, with its log (``logs/class_images.log``), its
  progress (one step per image) and its own exit status, and a failed or stopped render is
  resumed from the next image without encoding anything again.

Stage 1 refuses a class set that lacks rendered images (naming ``--class_images_dir`` and
the command that renders them); stage 2 reads only the class cache.

Runbook (the commands the run plan writes in ``commands.sh``; the tiny CPU model renders an
image in a second)::

    python -m backend.stages.class_images --config runs/<id>/run.yaml \\
        --output_dir runs/<id>/classes
    accelerate launch -m backend.stages.train --config runs/<id>/run.yaml \\
        --task sft:data_process --output_path runs/<id>/cache \\
        --class_images_dir runs/<id>/classes
    accelerate launch -m backend.stages.train --config runs/<id>/run.yaml --task sft:train \\
        --dataset_base_path runs/<id>/cache --output_path runs/<id>/output

Video models and edit models (which render from input images) take a class dataset in
``class_data_path`` only: a ``class_prompt`` is refused for them.
"""
from __future__ import annotations

import argparse
import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from backend.config.schema import RunConfig
from backend.core import writegate
from backend.core.messages import Msg
from backend.core.readgate import for_config as read_gate
from backend.data.dataset import Record
from backend.data.video import check_stage_dataset
from backend.training.loop import StageError
from backend.training.preservation import check_class_dataset, class_config
from backend.training.samples import component_dirs, load_pipeline

STAGE = "class_images"
DIR_FLAG = "--class_images_dir"  # stage 1's flag: the folder this stage rendered into
SETTINGS_KEY = "zerolora_class_image"  # the PNG text chunk holding an image's settings


def wanted(cfg: RunConfig) -> bool:
    """Whether the run renders class images (prior preservation with a class prompt)."""
    return bool(cfg.prior_preservation and cfg.class_prompt.strip())


@dataclass(frozen=True)
class ClassImage:
    """Rendered class image ``index``, from ``seed``."""
    index: int
    seed: int

    @property
    def stem(self) -> str:
        return f"class-{self.index:04d}-seed{self.seed}"

    def image(self, folder: Path) -> Path:
        return Path(folder) / f"{self.stem}.png"

    def caption(self, folder: Path) -> Path:
        return Path(folder) / f"{self.stem}.txt"


def to_render(cfg: RunConfig, given: int) -> list[ClassImage]:
    """The class images to render when ``class_data_path`` holds ``given``: the first
    ``num_class_images - given``, image k from seed ``sample_seed + k``."""
    if not wanted(cfg):
        return []
    return [ClassImage(k, cfg.sample_seed + k)
            for k in range(max(0, cfg.num_class_images - given))]


def given_count(cfg: RunConfig, family, log=None) -> int:
    """How many class images ``class_data_path`` holds (0 without it), checked as stage 1
    checks them (its problems refused naming ``class_data_path``)."""
    return len(check_class_dataset(cfg, family, log, headers_only=True))


def settings(cfg: RunConfig, base_model: str) -> dict[str, Any]:
    """What a rendered image depends on besides its seed."""
    return {"prompt": cfg.class_prompt.strip(), "negative_prompt": cfg.sample_negative_prompt,
            "steps": cfg.sample_steps, "cfg": cfg.sample_cfg, "height": cfg.sample_height,
            "width": cfg.sample_width, "base_model": base_model}


def rendered_with(path: Path) -> dict[str, Any] | None:
    """The settings a class image was rendered with (its PNG text chunk); None if it has
    none or cannot be read."""
    from PIL import Image

    try:
        with Image.open(path) as im:
            return json.loads(getattr(im, "text", {}).get(SETTINGS_KEY, "null"))
    except (OSError, ValueError):
        return None


def is_rendered(folder: Path, item: ClassImage, want: dict[str, Any], gate) -> bool:
    """Whether ``item`` is in ``folder`` as ``want`` would render it, with its caption."""
    image, caption = item.image(folder), item.caption(folder)
    if not (gate.is_file(image) and gate.is_file(caption)):
        return False
    if caption.read_text(encoding="utf-8").strip() != want["prompt"]:
        return False
    return rendered_with(image) == {**want, "seed": item.seed}


def save(cfg: RunConfig, image, folder: Path, item: ClassImage, want: dict[str, Any]) -> None:
    """The image (its settings in a text chunk), then its caption: an image without its
    caption is rendered again."""
    from PIL.PngImagePlugin import PngInfo

    info = PngInfo()
    info.add_text(SETTINGS_KEY, json.dumps({**want, "seed": item.seed}, sort_keys=True))
    gate = writegate.for_config(cfg)
    with gate.replacing(item.image(folder), "class image", parents=True) as out:
        image.save(out, format="PNG", pnginfo=info)
    gate.write_text(item.caption(folder), want["prompt"] + "\n", "caption")


def render_missing(cfg: RunConfig, family, folder: str | Path, *, log: Callable = print,
                   on_start: Callable | None = None, on_image: Callable | None = None,
                   should_stop: Callable = lambda: False) -> dict[str, int]:
    """Render into ``folder`` the class images the run lacks and ``folder`` does not hold
    yet (the pipeline is loaded only when one is missing). ``on_start(total)`` before the
    first, ``on_image(done, total)`` after each. Returns {"total", "rendered", "reused",
    "given", "stopped"}."""
    import torch

    folder = Path(folder)
    given = given_count(cfg, family, log)
    items = to_render(cfg, given)
    dirs = component_dirs(cfg)
    want = settings(cfg, str(dirs[family.spec.trained_component]))
    gate = read_gate(cfg)
    todo = [it for it in items if not is_rendered(folder, it, want, gate)]
    log(f"[class_images] {cfg.num_class_images} class images wanted, {given} in "
        f"class_data_path, {len(items)} rendered from {want['prompt']!r}: {len(todo)} to "
        f"render, {len(items) - len(todo)} already in {folder}")
    if on_start is not None:
        on_start(len(todo))
    done = {"total": len(items), "rendered": 0, "reused": len(items) - len(todo),
            "given": given, "stopped": 0}
    if not todo:
        return done
    pipe, _ = load_pipeline(cfg, dirs=dirs)
    for item in todo:
        if should_stop():
            done["stopped"] = 1
            break
        generator = torch.Generator(device="cpu").manual_seed(item.seed)
        image = family.render(pipe, want["prompt"], negative_prompt=cfg.sample_negative_prompt,
                              generator=generator, steps=cfg.sample_steps, cfg=cfg.sample_cfg,
                              height=cfg.sample_height, width=cfg.sample_width)
        save(cfg, image, folder, item, want)
        done["rendered"] += 1
        log(f"[class_images] wrote {item.image(folder)}")
        if on_image is not None:
            on_image(done["rendered"], len(todo))
    return done


# ------------------------------------------------------------------------------------------
# Stage 1
# ------------------------------------------------------------------------------------------
def stage1_parser() -> argparse.ArgumentParser:
    """Stage 1's own flag: the folder the ``class_images`` stage rendered into."""
    p = argparse.ArgumentParser(add_help=False)
    g = p.add_argument_group("class images (prior preservation with class_prompt)")
    g.add_argument(DIR_FLAG, dest="class_images_dir", default=None,
                   help="The folder the class_images stage rendered the class images into "
                        "(python -m backend.stages.class_images --output_dir).")
    return p


def rendered_records(cfg: RunConfig, family, folder: str | Path | None, given: int,
                     log=None) -> list[Record]:
    """Stage 1: the rendered class images the class set takes (the first
    ``num_class_images - given``), checked as a dataset; [] without a class prompt. One
    not there is refused, naming the folder and the command that renders it."""
    items = to_render(cfg, given)
    if not items:
        return []
    if folder is None:
        raise StageError(Msg("note.class_images_dir_missing", n=len(items), flag=DIR_FLAG))
    folder = Path(folder)
    gate = read_gate(cfg)
    missing = [it for it in items if not (gate.is_file(it.image(folder))
                                          and gate.is_file(it.caption(folder)))]
    if missing:
        raise StageError(Msg("note.class_images_missing", n=len(missing), total=len(items),
                             folder=str(folder), first=missing[0].image(folder).name))
    names = {it.image(folder).name for it in items}
    records = check_stage_dataset(class_config(cfg, folder), family, log)
    return sorted((r for r in records if Path(r.image).name in names),
                  key=lambda r: Path(r.image).name)


def elapsed(t0: float, done: int, total: int) -> float:
    """Seconds left at the pace so far."""
    return round((time.time() - t0) / max(done, 1) * max(0, total - done), 1)
