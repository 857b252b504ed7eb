"""Rendering samples: checkpoints to images with the family's pipeline, and their index.

Shared by the sample stage (``backend/stages/sample.py``, its runbook and file layout) and
by training's samples every N steps; neither stage imports the other.

    render_samples(cfg, [checkpoint], output_dir, progress, step)
"""
from __future__ import annotations

import json
import os
import shutil
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable

from backend.core import messages, readgate, rundir, writegate
from backend.core.messages import Msg
from backend.config.errors import ConfigError
from backend.config.schema import RunConfig
from backend.core.rundir import list_checkpoints
from backend.core.progress import ProgressWriter
from backend.families import family_spec, get_family
from backend.families.common import weight_files
from backend.models.hub import resolve_component_dirs
from backend.models.lora import load_lora, lora_type_of, read_lora
from backend.models.quantize import quantize_frozen
from backend.data.dataset import DatasetError, check_input_images, load_input_image, read_records
from backend.data.video import (check_reference_videos, kind_of, read_frames,
                                read_video_records)

INDEX_NAME = rundir.SAMPLES_INDEX
INDEX_VERSION = 1


# ------------------------------------------------------------------------------------------
# Checkpoints
# ------------------------------------------------------------------------------------------
def resolve_checkpoints(paths: Iterable[str | os.PathLike], all_checkpoints: bool = False,
                        gate=None) -> list[Path]:
    """Files as given; a folder gives its latest checkpoint (or all of them). With a read
    gate (``backend.core.readgate``), a path outside the run's read roots is not found."""
    out: list[Path] = []
    problems: list[str] = []
    for raw in paths:
        p = Path(raw).expanduser()
        if gate is not None and not gate.allows(p):
            problems.append(f"checkpoints: not found (got {str(p)!r}; allowed an existing "
                            f"LoRA file or folder)")
        elif rundir.is_full_checkpoint(p):  # a full fine-tune's checkpoint folder
            out.append(p)
        elif p.is_dir():
            found = list_checkpoints(p)
            if not found:
                problems.append(f"checkpoints: no step-N/epoch-N .safetensors in folder (got "
                                f"{str(p)!r}; allowed a LoRA file or a folder of checkpoints)")
            found = [f for f in found if gate is None or gate.allows(f)]
            out += found if all_checkpoints else found[-1:]
        elif p.is_file():
            if p.suffix != ".safetensors":
                problems.append(f"checkpoints: not a .safetensors file (got {str(p)!r}; "
                                f"allowed LoRA .safetensors files or folders)")
            out.append(p)
        else:
            problems.append(f"checkpoints: not found (got {str(p)!r}; allowed an existing "
                            f"LoRA file or folder)")
    if problems:
        raise ConfigError(problems)
    unique: list[Path] = []
    for p in out:
        if p.resolve() not in [u.resolve() for u in unique]:
            unique.append(p)
    return unique


def with_ema(checkpoints: Iterable[Path], mode: str) -> list[Path]:
    """The checkpoints samples use (``sample_use_ema``): ``raw`` as given; ``ema`` each
    one's EMA twin instead (``step-N-ema``; a checkpoint without one is refused); ``both``
    each followed by its twin where it has one (a checkpoint saved before the EMA began has
    none). A twin given itself stays as it is."""
    checkpoints = list(checkpoints)
    if mode == "raw":
        return checkpoints
    out: list[Path] = []
    missing: list[str] = []
    for p in checkpoints:
        twin = rundir.ema_twin(p)
        if twin.exists():
            out += [twin] if mode == "ema" else [p, twin]
        elif mode == "ema":
            missing.append(str(p))
        else:
            out.append(p)
    if missing:
        raise ConfigError([f"sample_use_ema: no EMA twin of {', '.join(missing)} (got "
                           f"{mode!r}; allowed raw or both, or checkpoints of a run trained "
                           f"with ema_decay)"])
    return list(dict.fromkeys(out))


# ------------------------------------------------------------------------------------------
# Model folders
# ------------------------------------------------------------------------------------------
def component_dirs(cfg: RunConfig, components: Iterable[str] | None = None) -> dict[str, Path]:
    """Folders of the pipeline components (backend.models.hub: local, or downloaded when
    missing); by default those the run's adapter loads for samples (a variant bound by
    ``for_config`` may load more, e.g. an image-to-video model's image encoder)."""
    if components is None:
        family = get_family(cfg.model_family).for_config(cfg)
        components = family.spec.stage_components("sample")
    return {k: Path(v) for k, v in resolve_component_dirs(cfg, list(components)).items()}


def pick_device() -> tuple[str, Any]:
    import torch

    if torch.cuda.is_available():
        return "cuda", torch.bfloat16
    return "cpu", torch.float32


def load_pipeline(cfg: RunConfig, device: str | None = None, dtype: Any = None,
                  dirs: dict[str, Path] | None = None):
    """The family's pipeline from the resolved component folders, on ``device`` (auto) in
    ``dtype``, with the config's offload and tiling."""
    auto_device, auto_dtype = pick_device()
    device, dtype = device or auto_device, dtype or auto_dtype
    dirs = dirs or component_dirs(cfg)
    pipe = get_family(cfg.model_family).for_config(cfg).load_pipeline(dirs, dtype)
    quantize_frozen(cfg, pipe)  # quant_options for the text encoder / VAE (low VRAM)
    offload = cfg.sample_cpu_offload
    if offload == "none":
        pipe.to(device)
    else:
        if device != "cuda":
            print(f"[sample] sample_cpu_offload {offload} saves no memory without a GPU "
                  f"(weights and compute are both in host RAM); it runs all the same",
                  flush=True)
        enable_offload(pipe, offload, device)
    if cfg.sample_vae_tiling:
        pipe.vae.enable_tiling()
    pipe.set_progress_bar_config(disable=True)
    return pipe, dirs


def enable_offload(pipe, mode: str, device: str) -> None:
    """diffusers' model (``enable_model_cpu_offload``) or sequential
    (``enable_sequential_cpu_offload``) CPU offload, computing on ``device``.

    Loading a LoRA takes the hooks off and calls the method again with no device, which on
    a machine without an accelerator is an error; so the pipeline's method is replaced by
    one that always uses ``device``. diffusers names the device ``cpu:0`` on a CPU, and
    ``.to("cpu:0")`` copies even a CPU tensor (accelerate's hooks then turn parameters into
    plain tensors and fail): on a CPU the hooks are pointed at plain ``cpu``.
    """
    import torch

    name = "enable_model_cpu_offload" if mode == "model" else "enable_sequential_cpu_offload"
    method = getattr(type(pipe), name)

    def enable(*args, **kwargs):  # noqa: ARG001 - diffusers may pass gpu_id / device
        method(pipe, device=device)
        if torch.device(device).type == "cpu":
            cpu = torch.device("cpu")
            pipe._offload_device = cpu
            for component in pipe.components.values():
                if not isinstance(component, torch.nn.Module):
                    continue
                for module in component.modules():
                    hook = getattr(module, "_hf_hook", None)
                    for h in getattr(hook, "hooks", None) or ([hook] if hook else []):
                        if getattr(h, "execution_device", None) is not None:
                            h.execution_device = cpu

    setattr(pipe, name, enable)
    enable()


# ------------------------------------------------------------------------------------------
# Plan and render
# ------------------------------------------------------------------------------------------
@dataclass
class Job:
    prompt_index: int
    prompt: str
    checkpoint: Path | None  # None: base model
    checkpoint_name: str
    scale: float
    image: str  # relative to output_dir
    inputs: tuple[str, ...] = ()  # edit models: the prompt's input images

    @property
    def key(self) -> tuple:
        return (self.prompt, str(self.checkpoint) if self.checkpoint else None, self.scale)


def _checkpoint_names(checkpoints: list[Path]) -> list[str]:
    names: list[str] = []
    for p in checkpoints:
        stem = p.name[: -len(".safetensors")] if p.name.endswith(".safetensors") else p.stem
        name = re.sub(r"[^A-Za-z0-9_.\-]", "_", stem)
        if name in names or name == "base":
            name = f"{re.sub(r'[^A-Za-z0-9_.-]', '_', p.parent.name)}-{name}"
        while name in names:
            name += "_"
        names.append(name)
    return names


def plan_samples(cfg: RunConfig, checkpoints: list[Path], log=None) -> list[Job]:
    """Every image to render: base once per prompt, then checkpoint × non-zero scale × prompt.
    ``log``: where the choice of each prompt's inputs is said (``checked_sample_inputs``)."""
    scales = list(dict.fromkeys(float(s) for s in cfg.sample_lora_scales))
    lora_scales = [s for s in scales if s != 0.0]
    if lora_scales and not checkpoints:
        raise ConfigError([f"checkpoints: LoRA scales {lora_scales} need a LoRA checkpoint (got "
                           f"none; allowed --checkpoints FILE_OR_FOLDER, or sample_lora_scales "
                           f"[0] for base images only)"])

    seed = cfg.sample_seed
    ext = get_family(cfg.model_family).for_config(cfg).sample_suffix
    inputs = checked_sample_inputs(cfg, log)
    jobs: list[Job] = []
    if 0.0 in scales:
        for i, prompt in enumerate(cfg.sample_prompts):
            jobs.append(Job(i, prompt, None, "base", 0.0, f"base/p{i:02d}-seed{seed}{ext}",
                            inputs[i]))
    for ckpt, name in zip(checkpoints, _checkpoint_names(checkpoints)):
        # A fine-tuned component has no scale: it replaces the base at 1.
        for scale in ([1.0] if rundir.is_full_checkpoint(ckpt) else lora_scales):
            for i, prompt in enumerate(cfg.sample_prompts):
                jobs.append(Job(i, prompt, ckpt, name, scale,
                                f"{name}/p{i:02d}-x{scale:g}-seed{seed}{ext}", inputs[i]))
    return jobs


def checked_sample_inputs(cfg: RunConfig, log=None) -> list[tuple[str, ...]]:
    """``sample_inputs``, checked against what the model takes: a model that renders from
    input images (edit, image-to-video) needs them on every prompt's line, a text-to-image
    model none; one that renders from a reference video (IC-LoRA) takes each prompt's clip
    (``sample_references``; ``log`` is told which dataset row gave one) and no
    ``sample_images``; any other refuses ``sample_videos``. Run before a run starts too
    (``jobs.runner.check_before_start``), so a missing line is refused before training, not
    after it. Raises ``ConfigError``."""
    family = get_family(cfg.model_family).for_config(cfg)
    if family.takes_reference_video:
        return sample_references(cfg, family, log)
    if cfg.sample_videos:
        raise ConfigError([Msg("data.takes_no_sample_videos", model=family.title,
                               n=len(cfg.sample_videos))])
    inputs = sample_inputs(cfg)
    takes = family.input_images
    missing = [str(i + 1) for i, paths in enumerate(inputs) if takes and not paths]
    too_many = [str(i + 1) for i, paths in enumerate(inputs) if len(paths) > takes]
    if missing or too_many:
        allowed = Msg("data.sample_images_at_most", n=takes) if takes else \
            Msg("data.sample_images_none")
        raise ConfigError(
            ([Msg("data.sample_images_missing", lines=missing, takes=takes)] if missing
             else []) +
            ([Msg("data.sample_images_over", lines=too_many, allowed=allowed)] if too_many
             else []))
    return inputs


def sample_inputs(cfg: RunConfig) -> list[tuple[str, ...]]:
    """Each sample prompt's input images (edit and image-to-video models), from
    ``sample_images``: one line per prompt, images separated by ``|``; every file is
    checked through the run's read gate. A ``ConfigError`` names what is wrong. With no
    ``sample_images`` at all, a model that renders from input images takes them from the
    dataset's rows in turn (``dataset_inputs``)."""
    lines = list(cfg.sample_images)
    if not lines and cfg.sample_prompts:
        from_rows = dataset_inputs(cfg, len(cfg.sample_prompts))
        if from_rows:
            return from_rows
    if len(lines) > len(cfg.sample_prompts):
        raise ConfigError([Msg("data.sample_images_too_many", n=len(lines),
                               prompts=len(cfg.sample_prompts))])
    gate = readgate.for_config(cfg)
    out, problems = [], []
    for i, line in enumerate(lines + [""] * (len(cfg.sample_prompts) - len(lines))):
        paths = tuple(p.strip() for p in line.split("|") if p.strip())
        for p in paths:
            if not gate.is_file(Path(p).expanduser()):
                problems.append(Msg("data.sample_image_not_found", line=i + 1, got=p))
        out.append(paths)
    if problems:
        raise ConfigError(problems)
    return out


def dataset_inputs(cfg: RunConfig, count: int) -> list[tuple[str, ...]] | None:
    """``count`` prompts' input images from the dataset's rows in turn (prompt 1 from row 1,
    and round again when there are fewer rows): an edit row's input images, an
    image-to-video row's clip (its first frame conditions the sample, as in training).
    None for a model that takes no input images, or when the rows cannot be read (a
    train-only run whose dataset is the cache): ``sample_images`` must name them then."""
    family = get_family(cfg.model_family)
    takes = family.for_config(cfg).input_images
    if not takes or count < 1:
        return None
    try:
        if family.media == "video":
            records, problems = read_video_records(cfg)
            rows = [(str(r.image),) for r in records[:count]]
        else:
            records, problems = read_records(cfg)
            rows = [tuple(str(p) for p in r.inputs)
                    for r in check_input_images(cfg, records[:count], takes)]
    except (DatasetError, OSError, ValueError):
        return None
    if problems or not rows:
        return None
    return [rows[i % len(rows)] for i in range(count)]


# ------------------------------------------------------------------------------------------
# Reference videos (IC-LoRA: the family's ``takes_reference_video``)
# ------------------------------------------------------------------------------------------
def reference_config(cfg: RunConfig) -> RunConfig:
    """The config a sample's reference clip is read with (``read_frames``): the run's frame
    settings (``video_fps`` or ``frame_stride``) at the sample's size and frame count."""
    return cfg.model_copy(update={"height": cfg.sample_height, "width": cfg.sample_width,
                                  "num_frames": cfg.sample_num_frames, "frame_buckets": []})


def reference_frames(cfg: RunConfig, path: str | os.PathLike) -> list:
    """A sample's reference clip: its PIL frames at the sample's size, through the run's
    read gate (``reference_config``); a clip too short for the sample raises ``ValueError``."""
    return read_frames(Path(path).expanduser(), reference_config(cfg))[0]


def _reference_problem(path: Path, cfg: RunConfig) -> Msg | None:
    """Why ``path`` cannot condition a sample (too short, unreadable), from headers; None
    when it can."""
    try:
        read_frames(path, reference_config(cfg), headers_only=True)
    except (OSError, ValueError) as e:
        said = messages.said(e)
        return said if isinstance(said, Msg) else Msg(
            "data.cannot_read_clip", name=path.name, why=" ".join(str(e).split()))
    return None


def dataset_references(cfg: RunConfig, family) -> list | None:
    """The dataset's rows with their reference videos (``check_reference_videos``), or None
    when they cannot be read (a train-only run whose dataset is the cache) or a row has
    none."""
    try:
        records, problems = read_video_records(cfg)
        if problems:
            return None
        return check_reference_videos(cfg, records, family) or None
    except (DatasetError, OSError, ValueError):
        return None


def sample_references(cfg: RunConfig, family, log=None) -> list[tuple[str, ...]]:
    """Each sample prompt's reference clip (one path each) for a model that renders from a
    reference video: its line of ``sample_videos``, else (no line, or a blank one) the
    reference video of the dataset row whose caption is the prompt, else of the first row,
    said to ``log``. Every clip is checked through the run's read gate, from headers, to
    fill ``sample_num_frames`` at the run's frame settings (``reference_config``). A
    ``ConfigError`` names the field, the line or row and the file."""
    if cfg.sample_images:
        raise ConfigError([Msg("data.sample_images_with_reference", model=family.title,
                               n=len(cfg.sample_images))])
    lines = [str(x).strip() for x in cfg.sample_videos]
    prompts = list(cfg.sample_prompts)
    if len(lines) > len(prompts):
        raise ConfigError([Msg("data.sample_videos_too_many", n=len(lines),
                               prompts=len(prompts))])
    gate = readgate.for_config(cfg)
    rows: list | None = None
    out: list[tuple[str, ...]] = []
    problems: list[Msg] = []
    notes: list[Msg] = []
    missing: list[str] = []
    for i, prompt in enumerate(prompts):
        given = lines[i] if i < len(lines) else ""
        if given:
            path = Path(given).expanduser()
            if not (gate.is_file(path) or gate.is_dir(path)):
                problems.append(Msg("data.sample_video_not_found", line=i + 1, got=given))
                continue
            why = _reference_problem(path, cfg)
            if why is not None:
                problems.append(Msg("data.sample_video_unusable", line=i + 1, name=path.name,
                                    frames=cfg.sample_num_frames, why=why))
            out.append((given,))
            continue
        if rows is None:
            rows = dataset_references(cfg, family) or []
        if not rows:
            missing.append(str(i + 1))
            continue
        rec = next((r for r in rows if r.prompt.strip() == str(prompt).strip()), None)
        first = rec is None
        rec = rows[0] if first else rec
        path = rec.reference.path
        why = _reference_problem(path, cfg)
        if why is not None:
            problems.append(Msg("data.row_reference_unusable", line=i + 1, where=rec.where,
                                name=path.name, frames=cfg.sample_num_frames, why=why))
        said = dict(line=i + 1, where=rec.where, name=path.name)
        notes.append(Msg("data.sample_reference_first_row", **said) if first
                     else Msg("data.sample_reference_caption", **said))
        out.append((str(path),))
    if missing:
        problems.insert(0, Msg("data.no_sample_reference", lines=missing))
    if problems:
        raise ConfigError(problems)
    for note in notes if log is not None else ():
        log(f"[sample] {note}")
    return out


def _input_images(cfg: RunConfig, paths: tuple[str, ...]) -> list:
    """PIL images of a prompt's inputs: an image as it is, a clip (a video dataset's row)
    by its first frame at the training size; a reference clip (IC-LoRA) by its first frame
    at the sample's size."""
    if get_family(cfg.model_family).for_config(cfg).takes_reference_video:
        return [reference_frames(cfg, p)[0] for p in paths]
    gate = readgate.for_config(cfg)
    out = []
    for p in paths:
        path = Path(p).expanduser()
        if kind_of(path, gate) == "image":
            out.append(load_input_image(path, cfg))
        else:
            out.append(read_frames(path, cfg)[0][0])
    return out


def _save_inputs(cfg: RunConfig, job: Job, output_dir: Path) -> str:
    """A prompt's input images side by side in the sample set (``inputs/pNN.png``), so the
    set shows what each sample was edited from without reading the data set again."""
    from PIL import Image

    rel = f"inputs/p{job.prompt_index:02d}.png"
    path = output_dir / rel
    if not path.is_file():
        images = [im.convert("RGB") for im in _input_images(cfg, job.inputs)]
        height = max(im.height for im in images)
        strip = Image.new("RGB", (sum(im.width for im in images), height), "white")
        x = 0
        for im in images:
            strip.paste(im, (x, (height - im.height) // 2))
            x += im.width
        path.parent.mkdir(parents=True, exist_ok=True)
        strip.save(path)
    return rel


def _settings(cfg: RunConfig) -> dict[str, Any]:
    out = {"seed": cfg.sample_seed, "steps": cfg.sample_steps, "cfg": cfg.sample_cfg,
           "height": cfg.sample_height, "width": cfg.sample_width,
           "negative_prompt": cfg.sample_negative_prompt}
    if get_family(cfg.model_family).media == "video":
        out.update(num_frames=cfg.sample_num_frames, fps=cfg.sample_fps)
    return out


def read_index(output_dir: str | os.PathLike) -> list[dict]:
    p = Path(output_dir) / INDEX_NAME
    if not p.is_file():
        return []
    try:
        return list(json.loads(p.read_text(encoding="utf-8")).get("images", []))
    except (json.JSONDecodeError, AttributeError):
        return []


def _write_index(output_dir: Path, images: list[dict]) -> Path:
    p = output_dir / INDEX_NAME
    writegate.atomic_write(p, json.dumps({"version": INDEX_VERSION, "images": images},
                                         indent=1))
    return p


def _entry_key(e: dict) -> tuple:
    return (e.get("prompt"), e.get("checkpoint"), float(e.get("scale", 0.0)), e.get("seed"),
            tuple(e.get("inputs") or ()))


def _reusable_base(job: Job, old: list[dict], settings: dict, base_model: str,
                   output_dir: Path) -> dict | None:
    for e in old:
        if (e.get("checkpoint") is None and e.get("prompt") == job.prompt
                and e.get("base_model") == base_model
                and list(e.get("inputs") or []) == list(job.inputs)
                and all(e.get(k) == v for k, v in settings.items())
                and (output_dir / e.get("image", "")).is_file()):
            return e
    return None


def _render(pipe, cfg: RunConfig, prompt: str, inputs: tuple[str, ...] = ()):
    import torch

    generator = torch.Generator(device="cpu").manual_seed(cfg.sample_seed)
    family = get_family(cfg.model_family).for_config(cfg)
    extra = {"num_frames": cfg.sample_num_frames} if family.media == "video" else {}
    if inputs and family.takes_reference_video:  # the whole clip conditions it
        extra["images"] = reference_frames(cfg, inputs[0])
    elif inputs:
        extra["images"] = _input_images(cfg, inputs)
    return family.render(
        pipe, prompt, negative_prompt=cfg.sample_negative_prompt, generator=generator,
        steps=cfg.sample_steps, cfg=cfg.sample_cfg, height=cfg.sample_height,
        width=cfg.sample_width, **extra)


def load_weights_into(module, folder: str | os.PathLike) -> int:
    """Copy a component folder's safetensors weights into ``module`` in place (its dtype
    and device kept, offload hooks untouched), one tensor at a time; returns how many."""
    import torch
    from safetensors import safe_open

    own = module.state_dict()
    n = 0
    with torch.no_grad():
        for file in weight_files(folder):
            with safe_open(str(file), framework="pt") as f:
                for key in f.keys():
                    if key in own:
                        own[key].copy_(f.get_tensor(key).to(own[key].dtype))
                        n += 1
    return n


def attach_lora(pipe, ckpt, adapter: str) -> None:
    """Put the LoRA file ``ckpt`` on ``pipe`` as ``adapter`` (scaled with
    ``pipe.set_adapters``, removed with ``pipe.delete_adapters``): LoRA and DoRA through
    diffusers' ``load_lora_weights``, a LoKr (no diffusers keys exist for it) through peft
    onto the trained component."""
    from backend.models.export import load_as_diffusers

    tensors, _ = read_lora(ckpt)
    if lora_type_of(tensors) == "lokr":
        load_lora(pipe.transformer, ckpt, adapter_name=adapter)
        return
    pipe.load_lora_weights(load_as_diffusers(ckpt), adapter_name=adapter)


def render_samples(cfg: RunConfig, checkpoints: Iterable[str | os.PathLike], output_dir: str | os.PathLike,
                   progress: ProgressWriter | None = None, step: int | None = None,
                   pipe=None, on_start=None, on_image=None,
                   reuse_from: Iterable[str | os.PathLike] = ()) -> list[dict]:
    """Render the sample grid into ``output_dir``; return this call's index entries.

    ``checkpoints``: LoRA files or folders (a folder: its latest checkpoint), and their EMA
    twins as ``sample_use_ema`` says (``with_ema``). Emits one
    ``sample`` event per image (with ``step`` when given) and one for index.json, but no
    start/end: the caller's stage owns those. Base images already in ``output_dir`` with the
    same prompt, settings and base model are reused (samples during training). Entries are
    merged into an existing index.json. ``pipe``: an already loaded pipeline to reuse;
    ``on_start(total)`` is called with the number of images to render, before the first;
    ``on_image(entry)`` after each image rendered (not for reused ones), so the sample stage
    can report its steps. ``reuse_from``: other sample folders whose base images (same
    prompt, settings and base model) are copied instead of rendered again.
    """

    output_dir = Path(output_dir)
    ckpts = with_ema(resolve_checkpoints(checkpoints), cfg.sample_use_ema)
    jobs = plan_samples(cfg, ckpts, log=lambda line: print(line, flush=True))
    if pipe is None:
        dirs = component_dirs(cfg)
        base_model = str(dirs[family_spec(cfg.model_family).trained_component])
    else:
        base_model = str(getattr(pipe.transformer.config, "_name_or_path", ""))
    settings = _settings(cfg)
    old = read_index(output_dir)
    output_dir.mkdir(parents=True, exist_ok=True)
    index = list(old)
    done: list[dict] = []
    reuse = {id(j): _reusable_base(j, old, settings, base_model, output_dir)
             for j in jobs if j.checkpoint is None}
    for folder in map(Path, reuse_from):  # copied into this set, which stays self-contained
        found = read_index(folder)
        for j in jobs:
            if j.checkpoint is None and reuse[id(j)] is None:
                e = _reusable_base(j, found, settings, base_model, folder)
                if e is not None:
                    dest = output_dir / j.image
                    dest.parent.mkdir(parents=True, exist_ok=True)
                    shutil.copyfile(folder / e["image"], dest)
                    reuse[id(j)] = dict(e, image=j.image)
    if on_start is not None:
        on_start(len(jobs) - sum(1 for r in reuse.values() if r is not None))
    if pipe is None:
        pipe, _ = load_pipeline(cfg, dirs=dirs)

    def record(job: Job, image=None, reused: dict | None = None) -> None:
        if reused is not None:
            entry = dict(reused, prompt_index=job.prompt_index)
        else:
            path = output_dir / job.image
            path.parent.mkdir(parents=True, exist_ok=True)
            written = get_family(cfg.model_family).for_config(cfg).save_sample(image, path, cfg)
            entry = {"prompt": job.prompt, "prompt_index": job.prompt_index,
                     "checkpoint": str(job.checkpoint.resolve()) if job.checkpoint else None,
                     "checkpoint_name": job.checkpoint_name, "scale": job.scale,
                     "image": job.image, **settings, "base_model": base_model}
            if len(written) > 1:  # a clip's frame strip
                entry["strip"] = str(written[1].relative_to(output_dir))
            if job.inputs:
                entry["inputs"] = list(job.inputs)
                entry["input_image"] = _save_inputs(cfg, job, output_dir)
            if step is not None:
                entry["step"] = step
        index[:] = [e for e in index if _entry_key(e) != _entry_key(entry)] + [entry]
        _write_index(output_dir, index)
        done.append(entry)
        if progress is not None and reused is None:
            fields = {"path": str(output_dir / job.image)}
            if step is not None:
                fields["step"] = step
            progress.emit("sample", **fields)
        if on_image is not None and reused is None:
            on_image(entry)
        print(f"[sample] {'reused' if reused else 'wrote'} {output_dir / entry['image']} "
              f"({job.checkpoint_name}, scale {job.scale:g}, prompt {job.prompt_index})", flush=True)

    # Base images first, before any adapter exists: exactly the base pipeline's output.
    for job in (j for j in jobs if j.checkpoint is None):
        reused = reuse[id(job)]
        record(job, None if reused else _render(pipe, cfg, job.prompt, job.inputs), reused)

    by_ckpt: dict[Path, list[Job]] = {}
    for job in jobs:
        if job.checkpoint is not None:
            by_ckpt.setdefault(job.checkpoint, []).append(job)
    for n, (ckpt, ckpt_jobs) in enumerate(by_ckpt.items()):
        if rundir.is_full_checkpoint(ckpt):  # the fine-tuned weights, then the base's again
            load_weights_into(pipe.transformer, ckpt)
            try:
                for job in ckpt_jobs:
                    record(job, _render(pipe, cfg, job.prompt, job.inputs))
            finally:
                load_weights_into(pipe.transformer, base_model)
            continue
        adapter = f"zerolora_{n}"
        attach_lora(pipe, ckpt, adapter)
        try:
            for job in ckpt_jobs:
                pipe.set_adapters([adapter], adapter_weights=[job.scale])
                record(job, _render(pipe, cfg, job.prompt, job.inputs))
        finally:
            pipe.delete_adapters(adapter)

    if progress is not None and jobs:
        fields = {"path": str(output_dir / INDEX_NAME)}
        if step is not None:
            fields["step"] = step
        progress.emit("sample", **fields)
    return done
