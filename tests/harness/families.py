"""Every registered family and variant as a test case, from the registry alone.

A ``Case`` is one variant of one family: the model ids its default sources name, the media it
trains on and the inputs it needs. ``build_models`` writes the variant's tiny
real-architecture pipeline (``Family.build_tiny``) under each of those ids in a models
folder, so the variant's own default sources resolve offline; ``run_config`` is the variant's
run (family defaults, then the variant's) on a dataset; ``run_stage_here`` runs a stage's
``main(argv)`` in this process, for single-process runs without DeepSpeed, where a
subprocess would add only the ~12 s of importing torch again.

A family added to ``backend/families/`` is a case here with no test code of its own.
"""
from __future__ import annotations

import contextlib
import json
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from backend.families import family_names, family_spec, get_family
from backend.models.lora import matches
from tests.harness import stages


@dataclass(frozen=True)
class Case:
    family: str
    variant: str | None
    sources: str  # the variant's default model_id_with_origin_paths
    media: str  # "image" | "video"
    input_images: int  # edit inputs (image families) or a first frame (video families)
    defaults: tuple[tuple[str, Any], ...]  # the variant's own defaults

    @property
    def id(self) -> str:
        return self.variant or self.family

    @property
    def model_ids(self) -> list[str]:
        """The model ids (``owner/name``) the sources name, in order, each once."""
        ids = [e.split(":", 1)[0] for e in self.sources.split(",") if ":" in e]
        return list(dict.fromkeys(ids))

    @property
    def multiple(self) -> int:
        return family_spec(self.family).size_multiple(self.variant)[0]


def cases() -> list[Case]:
    """One case per variant of every registered family (one per family without variants)."""
    out = []
    for name in family_names():
        spec = family_spec(name)
        family = get_family(name)
        for variant in spec.variants or (None,):
            defaults = dict(spec.defaults) | dict(variant.defaults if variant else {})
            out.append(Case(name, variant.name if variant else None,
                            defaults["model_id_with_origin_paths"], family.media,
                            variant.input_images if variant else family.input_images,
                            tuple(sorted((variant.defaults if variant else {}).items()))))
    return out


def build_models(root: Path, case: Case) -> Path:
    """The case's tiny pipeline under every model id its sources name (one build, copies:
    the same seed gives the same encoders, as a released pair shares them)."""
    ids = case.model_ids
    first = root / ids[0]
    get_family(case.family).build_tiny(first, seed=0, variant=case.variant)
    for other in ids[1:]:
        if not (root / other).exists():
            shutil.copytree(first, root / other)
    return root


def tiny_targets(case: Case, models: Path) -> str:
    """The variant's default LoRA targets that its tiny model has: a default that names
    blocks by number (the released model's) keeps the blocks the tiny one has."""
    family = get_family(case.family)
    targets = dict(family_spec(case.family).defaults | dict(case.defaults))[
        "lora_target_modules"]
    repo, path = next(e.split(":", 1) for e in case.sources.split(",")
                      if e.split(":", 1)[1].startswith("transformer"))
    config = json.loads((models / repo / path.split("/")[0] / "config.json").read_text())
    names = family.lora_module_map(config)
    return ",".join(t for t in targets.split(",") if any(matches(n, t) for n in names))


def run_config(case: Case, models: Path, dataset: Path, out: Path, **changes) -> dict:
    """The variant's run as the form would start it: family and variant defaults (targets
    the tiny model has), the dataset, offline from ``models``; ``changes`` on top."""
    cfg = {"model_family": case.family, **dict(case.defaults),
           "model_id_with_origin_paths": case.sources, "models_dir": str(models),
           "lora_target_modules": tiny_targets(case, models),
           "offline": True, "dataset_base_path": str(dataset), "output_path": str(out)}
    metadata = next((p for p in (dataset / "metadata.json", dataset / "metadata.csv")
                     if p.is_file()), None)
    if metadata is not None:
        cfg["dataset_metadata_path"] = str(metadata)
    cfg.update(changes)
    return cfg


def write_run_config(path: Path, cfg: dict) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(cfg, sort_keys=False), encoding="utf-8")
    return path


def run_stage_here(stage: str, argv: list[Any]) -> tuple[int, str]:
    """``backend.stages.<stage>.main(argv)`` in this process: (exit code, what it printed)."""
    code, out, err = stages.run_stage_here(stage, argv)
    return code, out + err


# ------------------------------------------------------------------------------------------
# Data whose sizes are no multiple of any family's: a 100x58 image, a 16:9 clip of 96x54
# ------------------------------------------------------------------------------------------
ODD_IMAGE = (100, 58)
ODD_INPUT = (90, 70)
ODD_CLIP = (96, 54)
CLIP_FRAMES = 9
PROMPT = "a red square on a white background, zlr style"


def _square(size: tuple[int, int], shift: int = 0):
    from PIL import Image, ImageDraw

    w, h = size
    im = Image.new("RGB", size, (255, 255, 255))
    x = (w // 4 + shift) % (w // 2)
    ImageDraw.Draw(im).rectangle((x, h // 4, x + w // 3, 3 * h // 4), fill=(220, 30, 30))
    return im


def odd_dataset(folder: Path, case: Case) -> Path:
    """One sample of the case's media at a size no family's multiple divides: a 100x58
    image (with a 90x70 input image per edit input), or a 16:9 clip of 96x54."""
    import numpy as np

    from backend.core.media import write_video

    folder.mkdir(parents=True, exist_ok=True)
    if case.media == "video":
        frames = [np.asarray(_square(ODD_CLIP, 2 * t)) for t in range(CLIP_FRAMES)]
        write_video(frames, folder / "clip.mp4", fps=8)
        (folder / "metadata.csv").write_text(f'video,prompt\nclip.mp4,"{PROMPT}"\n',
                                             encoding="utf-8")
    elif case.input_images:
        _square(ODD_IMAGE).save(folder / "target.png")
        _square(ODD_INPUT, 9).save(folder / "input.png")
        (folder / "metadata.json").write_text(
            '[{"image": "target.png", "edit_image": "input.png", "prompt": "%s"}]' % PROMPT,
            encoding="utf-8")
    else:
        _square(ODD_IMAGE).save(folder / "odd.png")
        (folder / "metadata.csv").write_text(f'image,prompt\nodd.png,"{PROMPT}"\n',
                                             encoding="utf-8")
    return folder


def clip_frames(case: Case) -> int:
    """The shortest clip length above one frame the case's family takes (4k+1: 5)."""
    return family_spec(case.family).frame_multiple + 1


def adjusted(size: tuple[int, int], multiple: int) -> tuple[int, int]:
    """A side cut down to the multiple, as training sizes a sample within its budget."""
    return size[0] // multiple * multiple, size[1] // multiple * multiple


# ------------------------------------------------------------------------------------------
# One model, one cache and one trained LoRA per family, built once per session
# ------------------------------------------------------------------------------------------
RANK = 4
TRAIN_REPEAT = 3  # 4 images (3 clips + a still) x 3 repeats: 12 steps


def family_cases() -> list[Case]:
    """Each family's own model (its first variant, or the family without variants)."""
    seen: dict[str, Case] = {}
    for case in cases():
        seen.setdefault(case.family, case)
    return list(seen.values())


class FamilyRuns:
    """Per case, built on first use and shared read-only by every test of the session:
    ``models`` (the tiny pipeline), ``dataset`` (4 shapes at 64x64, or 3 clips and a still
    at 32x32), ``cache`` (stage 1, in this process), ``trained`` (stage 2 under DeepSpeed
    ZeRO-3 with parameter and optimizer offload, a real ``accelerate launch``)."""

    def __init__(self, root: Path):
        self.root = root
        self._built: dict[tuple[str, str], Any] = {}

    def _once(self, what: str, case: Case, build):
        key = (what, case.id)
        if key not in self._built:
            self._built[key] = build(self.root / case.id)
        return self._built[key]

    def models(self, case: Case) -> Path:
        return self._once("models", case, lambda d: build_models(d / "models", case))

    def dataset(self, case: Case) -> Path:
        from tests.harness.clips import make_video_dataset
        from tests.harness.stages import make_dataset

        return self._once("dataset", case, lambda d: (
            make_video_dataset(d / "clips") if case.media == "video" else
            make_dataset(d / "images")))

    def config(self, case: Case, out: Path, **changes) -> dict:
        """The case's run on its dataset at the test sizes, ``changes`` on top."""
        frames = clip_frames(case)
        sizes = ({"num_frames": frames, "height": 32, "width": 32, "sample_num_frames": frames}
                 if case.media == "video" else {})
        return run_config(case, self.models(case), self.dataset(case), out, lora_rank=RANK,
                          seed=0, mixed_precision="no", dataset_num_workers=0,
                          sample_height=32 if case.media == "video" else 64,
                          sample_width=32 if case.media == "video" else 64, sample_steps=2,
                          **sizes) | changes

    def cache(self, case: Case) -> Path:
        def build(folder: Path) -> Path:
            raw = self.config(case, folder / "cache", task="sft:data_process")
            code, log = run_stage_here("train", ["--config",
                                                 write_run_config(folder / "stage1.yaml", raw)])
            assert code == 0, log[-6000:]
            return folder / "cache"
        return self._once("cache", case, build)

    def trained(self, case: Case) -> tuple[Path, dict, str]:
        """(the LoRA of the last step, the run's config, the stage's output)."""
        from tests.harness.seeds import SEED_ZERO3
        from tests.harness.stages import assert_ok, run_stage, write_accelerate_config

        def build(folder: Path):
            raw = self.config(case, folder / "out", task="sft:train",
                              dataset_base_path=str(self.cache(case)), learning_rate=5e-3,
                              dataset_repeat=TRAIN_REPEAT, save_steps=6,
                              use_gradient_checkpointing=True, initialize_model_on_cpu=True)
            raw.pop("dataset_metadata_path", None)
            acc = write_accelerate_config(folder, "z3", ds_config=SEED_ZERO3,
                                          zero3_init_flag=True)
            proc = run_stage(["--config", write_run_config(folder / "train.yaml", raw)],
                             config_file=acc)
            assert_ok(proc)
            from backend.core.rundir import list_checkpoints
            return list_checkpoints(folder / "out")[-1], raw, proc.stdout
        return self._once("trained", case, build)


@contextlib.contextmanager
def sigterm_after_step(step: int):
    """A SIGTERM to this process right after the stage writes its ``step`` event, as the
    job runner's stop sends it: the stage's own handler takes it, and the run stops at its
    next safe point (for ``run_stage_here``; a subprocess is stopped with ``os.killpg``)."""
    import os
    import signal

    from backend.core.progress import ProgressWriter

    emit = ProgressWriter.emit

    def emit_then_stop(self, event, **fields):
        emit(self, event, **fields)
        if event == "step" and fields.get("step") == step:
            os.kill(os.getpid(), signal.SIGTERM)

    ProgressWriter.emit = emit_then_stop
    try:
        yield
    finally:
        ProgressWriter.emit = emit
