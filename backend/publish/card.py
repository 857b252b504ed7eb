"""The model card of a finished run, built with huggingface_hub's ``ModelCard`` /
``ModelCardData`` from the run folder alone (``backend.core.rundir`` names its files):

- ``run.yaml``: the base model, the trigger word, the sample prompts, the LoRA's shape and
  the training settings (published without any server path: ``backend.publish.scrub``);
- ``progress.jsonl``: the figures (steps, epochs, training time, dataset size, last loss);
- the samples' index: the grid of base model vs LoRA at the same seed, and the Hub
  widget's examples;
- the base model's own card in the models folder, when it is there: its license.

Never read or published: the dataset, the logs, the training state, ``training_args.json``
(it holds the resolved model folders), any path of the server.

One card, two hubs (``destination``): the Hugging Face Hub's metadata (``ModelCardData``:
``base_model``, ``base_model_relation``, ``pipeline_tag``, the widget) or ModelScope's
(its README front matter: ``frameworks``, ``tasks``, ``license``, ``base_model``,
``base_model_relation``, ``tags``), the body's links and download code for that hub. A
full fine-tune's checkpoint is a ``finetune`` of its base model, a LoRA an ``adapter``.

The card is English content for the Hub, so its text is a template here, not a message.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from backend.config.files import read_yaml
from backend.config.schema import family_defaults
from backend.core.diskspace import size_text
from backend.core.progress import read_events
from backend.core.rundir import RunDir
from backend.families import default_family, family_names, family_spec, get_family
from backend.publish.scrub import Secret, is_local_path, public_settings
from backend.training.samples import read_index

IMAGES = "images"  # the card's sample images, in the repository
HUGGINGFACE, MODELSCOPE = "huggingface", "modelscope"
# Where a model's page is, per hub.
MODEL_PAGES = {HUGGINGFACE: "https://huggingface.co/{id}",
               MODELSCOPE: "https://modelscope.cn/models/{id}"}
# ModelScope's task names (``modelscope.utils.constant.Tasks``) for the card's ``tasks``.
MS_TASKS = {"text-to-image": "text-to-image-synthesis",
            "text-to-video": "text-to-video-synthesis"}
SHOWN_SUFFIXES = (".png", ".jpg", ".jpeg", ".webp", ".gif")
# Settings of how this machine ran it, not of the training: left out of the card.
NOT_TRAINING = ("schema_version", "offline", "download_source")


@dataclass
class SampleRow:
    """One prompt of the grid: the base model's render and the LoRA's, at the same seed."""
    index: int
    prompt: str
    base: Path | None = None
    lora: Path | None = None
    scale: float | None = None
    seed: int | None = None

    def repo_path(self, role: str) -> str:
        """Where the ``role`` (base | lora) image goes in the repository."""
        src = self.base if role == "base" else self.lora
        return f"{IMAGES}/p{self.index:02d}-{role}{src.suffix.lower()}"

    def images(self) -> list[tuple[Path, str]]:
        """(file in the run folder, path in the repository) of each image of the row."""
        return [(src, self.repo_path(role)) for role, src in
                (("base", self.base), ("lora", self.lora)) if src is not None]


@dataclass
class Figures:
    steps: int | None = None
    epochs: int | None = None
    seconds: float | None = None
    dataset_size: int | None = None
    batch_size: int | None = None
    processes: int | None = None
    last_loss: float | None = None
    last_val_loss: float | None = None


@dataclass
class RunFacts:
    """What the card says of one run."""
    run_id: str
    settings: dict[str, Any]  # run.yaml with its family's defaults under it
    family: str
    checkpoint: str  # the published checkpoint's name (step-N.safetensors)
    figures: Figures
    rows: list[SampleRow] = field(default_factory=list)
    samples_of: str | None = None  # the checkpoint the LoRA column shows, when another
    license: str | None = None


# ---------------------------------------------------------------------------- reading
def read_settings(rd: RunDir) -> dict[str, Any]:
    """run.yaml over its family's defaults (a run written by an older version keeps what it
    wrote)."""
    raw = read_yaml(rd.run_yaml, "run")
    family = raw.get("model_family") or default_family()
    base = family_defaults(family) if family in family_names() else {}
    return {**base, **raw}


def changed_settings(settings: dict[str, Any]) -> dict[str, Any]:
    """The options that differ from their family's defaults (and the family itself)."""
    family = settings.get("model_family") or default_family()
    if family not in family_names():
        return dict(settings)
    defaults = family_defaults(family)
    return {k: v for k, v in settings.items()
            if k == "model_family" or (k in defaults and defaults[k] != v)}


def figures(rd: RunDir) -> Figures:
    """The run's figures from its progress events."""
    events, _ = read_events(rd.progress)
    out = Figures()
    started = None
    seconds = 0.0
    for e in events:
        stage, kind = e.get("stage"), e.get("event")
        if stage == "data_process" and kind == "start" and e.get("total") is not None:
            out.dataset_size = int(e["total"])
        if stage != "train":
            continue
        if kind == "start":
            started = e.get("time")
            out.epochs = e.get("epochs", out.epochs)
            out.batch_size = e.get("batch_size", out.batch_size)
            out.processes = e.get("num_processes", out.processes)
        elif kind == "step":
            out.steps = max(out.steps or 0, int(e.get("step") or 0))
            if e.get("loss") is not None:
                out.last_loss = float(e["loss"])
        elif kind == "validation" and e.get("val_loss") is not None:
            out.last_val_loss = float(e["val_loss"])
        elif kind == "checkpoint" and e.get("step") is not None:
            out.steps = max(out.steps or 0, int(e["step"]))
        elif kind == "end" and started is not None and e.get("time") is not None:
            seconds += float(e["time"]) - float(started)
            started = None
    out.seconds = seconds or None
    return out


def _stem(name: str) -> str:
    return name[: -len(".safetensors")] if name.endswith(".safetensors") else name


def _usable(image: Path, folder: Path) -> bool:
    """An image the card may show: a plain file of the sample set, of a shown type."""
    return (image.is_file() and not image.is_symlink()
            and image.suffix.lower() in SHOWN_SUFFIXES
            and image.resolve().is_relative_to(folder.resolve()))


def sample_rows(rd: RunDir, checkpoint: str) -> tuple[list[SampleRow], str | None]:
    """(one row per sample prompt with the base image and the LoRA's, the checkpoint(s)
    the LoRA images come from when not ``checkpoint``). The newest sample set with renders
    of the published checkpoint is taken, else the newest with any LoRA render; per prompt
    the published checkpoint's render first, then the latest step's, scale 1 first. Edit
    runs' input images come from the dataset and are never taken."""
    want = _stem(checkpoint)
    best: tuple[int, dict[int, SampleRow], set[str]] | None = None
    for folder in rd.sample_sets():
        rows: dict[int, SampleRow] = {}
        picked: dict[int, tuple[tuple, str]] = {}
        for e in read_index(folder):
            image = folder / str(e.get("image", ""))
            if not _usable(image, folder):
                continue
            i = int(e.get("prompt_index", 0))
            row = rows.setdefault(i, SampleRow(i, str(e.get("prompt", "")),
                                               seed=e.get("seed")))
            name = str(e.get("checkpoint_name") or "")
            if e.get("checkpoint") is None or name == "base":
                row.base = image
                continue
            scale = float(e.get("scale", 1.0))
            rank = (name == want, int(e.get("step") or _step_of(name)), -abs(scale - 1.0))
            if i not in picked or rank > picked[i][0]:
                picked[i] = (rank, name)
                row.lora, row.scale = image, scale
        names = {name for _, name in picked.values()}
        score = (2 if want in names else 0) + (1 if names else 0)
        if rows and (best is None or score > best[0]):
            best = (score, rows, names)
        if score == 3:
            break
    if best is None:
        return [], None
    _, rows, names = best
    other = None if want in names or not names else ", ".join(sorted(names))
    return [rows[i] for i in sorted(rows)], other


def _step_of(name: str) -> int:
    m = re.search(r"(\d+)", name)
    return int(m.group(1)) if m else 0


def base_model_id(settings: dict[str, Any], family: str) -> str | None:
    """The Hub id of the model the LoRA was trained on: the source of its trained
    component (None for a local folder)."""
    sources = str(settings.get("model_id_with_origin_paths") or "")
    trained = family_spec(family).trained_component if family in family_names() else None
    ids = []
    for entry in (s.strip() for s in sources.split(",") if s.strip()):
        if is_local_path(entry) or ":" not in entry:
            continue
        repo, _, pattern = entry.rpartition(":")
        head = pattern.strip("/").split("/")[0]
        ids.append((head != trained, repo))
    return min(ids)[1] if ids else None


def base_license(settings: dict[str, Any], base: str | None) -> str | None:
    """The license the base model's own card declares, when that card is in the models
    folder."""
    if not base or not settings.get("models_dir"):
        return None
    readme = Path(str(settings["models_dir"])).expanduser() / base / "README.md"
    if not readme.is_file():
        return None
    try:
        from huggingface_hub import ModelCard

        value = ModelCard.load(readme).data.get("license")
    except Exception:  # noqa: BLE001 - a card we cannot read names no license
        return None
    return str(value) if value else None


def facts(rd: RunDir, checkpoint: str) -> RunFacts:
    settings = read_settings(rd)
    family = settings.get("model_family") or default_family()
    rows, other = sample_rows(rd, checkpoint)
    return RunFacts(run_id=rd.run_dir.name, settings=settings, family=family,
                    checkpoint=checkpoint, figures=figures(rd), rows=rows, samples_of=other,
                    license=base_license(settings, base_model_id(settings, family)))


# ---------------------------------------------------------------------------- writing
def _duration(seconds: float | None) -> str:
    if not seconds:
        return "—"
    s = int(round(seconds))
    h, m = divmod(s // 60, 60)
    return f"{h} h {m:02d} min" if h else (f"{m} min {s % 60:02d} s" if m else f"{s} s")


def _cell(text: str) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def _media(family: str) -> str:
    try:
        return get_family(family).media
    except Exception:  # noqa: BLE001 - a family this version lacks: images
        return "image"


def build_card(f: RunFacts, repo_id: str, weights: dict[str, str], sizes: dict[str, int],
               secrets: list[Secret], destination: str = HUGGINGFACE, full: bool = False
               ) -> str:
    """The card's text: ``weights`` maps each published format to its file (a folder,
    ending in ``/``, for a full checkpoint's diffusers layout) in the repository, ``sizes``
    each file to its size; ``full``: a full fine-tune's checkpoint, not a LoRA."""
    s = f.settings
    base = base_model_id(s, f.family)
    trigger = str(s.get("trigger_word") or "").strip()
    media = _media(f.family)
    task = "text-to-video" if media == "video" else "text-to-image"
    lora_type = str(s.get("lora_type") or "lora")
    tags = ["full-finetune" if full else "lora", "zerolora", task,
            f.family.replace("_", "-")]
    if "diffusers" in weights:
        tags += ["diffusers", "diffusers-training"]
    if lora_type != "lora" and not full:
        tags.append(lora_type)
    if "comfyui" in weights:
        tags.append("comfyui")
    relation = "finetune" if full else "adapter"
    if destination == MODELSCOPE:
        head = _modelscope_metadata(f, base, relation, task, tags, weights)
    else:
        head = _hub_metadata(f, base, relation, task, tags, weights, trigger)

    name = repo_id.split("/")[-1]
    page = MODEL_PAGES.get(destination, MODEL_PAGES[HUGGINGFACE])
    what = "full fine-tune" if full else lora_type_title(lora_type)
    lines = [f"# {name}", ""]
    lines.append(f"A {what} of " if full else f"A {what} for ")
    lines[-1] += ((f"[{base}]({page.format(id=base)})" if base else "its base model")
                  + f", trained with ZeroLoRA (run `{f.run_id}`, checkpoint "
                  f"`{f.checkpoint}`).")
    lines.append("")
    if trigger:
        lines += ["## Trigger word", "", f"Put `{trigger}` in the prompt.", ""]
    lines += _grid(f, full)
    lines += (_usage_full(f, repo_id, base, weights, destination) if full
              else _usage(f, repo_id, base, weights, trigger, destination))
    lines += _training(f, secrets, full)
    titles = FULL_FORMAT_TITLES if full else FORMAT_TITLES
    lines += ["## Files", "", "| file | format | size |", "|---|---|---|"]
    for fmt, path in weights.items():
        size = sum(n for p, n in sizes.items() if p.startswith(path)) if path.endswith("/") \
            else sizes.get(path, 0)
        lines.append(f"| `{path}` | {titles.get(fmt, fmt)} | {size_text(size)} |")
    lines.append("")
    return f"---\n{head}\n---\n\n" + "\n".join(lines)


def _hub_metadata(f: RunFacts, base: str | None, relation: str, task: str, tags: list[str],
                  weights: dict[str, str], trigger: str) -> str:
    """The Hugging Face Hub's card metadata (YAML, without its ``---`` lines)."""
    from huggingface_hub import ModelCardData

    widget = [{"text": r.prompt, "output": {"url": r.repo_path("lora")}}
              for r in f.rows if r.lora is not None]
    return ModelCardData(
        base_model=base, base_model_relation=relation if base else None,
        library_name="diffusers" if "diffusers" in weights else None,
        license=f.license, tags=tags, pipeline_tag=task,
        instance_prompt=trigger or None, widget=widget or None).to_yaml()


def _modelscope_metadata(f: RunFacts, base: str | None, relation: str, task: str,
                         tags: list[str], weights: dict[str, str]) -> str:
    """ModelScope's README front matter (YAML, without its ``---`` lines): the framework,
    ModelScope's task name, the license, the base model and how this one relates to it."""
    data: dict[str, Any] = {"frameworks": ["Pytorch"], "tasks": [MS_TASKS[task]]}
    if f.license:
        data["license"] = f.license
    if base:
        data["base_model"] = [base]
        data["base_model_relation"] = relation
    if "diffusers" in weights:
        data["library_name"] = "diffusers"
    data["tags"] = tags
    return yaml.safe_dump(data, sort_keys=False, allow_unicode=True).rstrip()


FORMAT_TITLES = {"diffusers": "diffusers (`transformer.` keys)",
                 "comfyui": "ComfyUI (`diffusion_model.` keys, with alpha)",
                 "reference": "DiffSynth-Studio (the reference trainer's keys)"}


FULL_FORMAT_TITLES = {
    "diffusers": "diffusers folder (`from_pretrained`, the trained component)",
    "comfyui": "ComfyUI (one file for **Load Diffusion Model**)",
    "reference": "DiffSynth-Studio (the reference trainer's full checkpoint)"}


def lora_type_title(lora_type: str) -> str:
    return {"dora": "DoRA (LoRA with magnitudes)", "lokr": "LoKr (Kronecker LoRA)"}.get(
        lora_type, "LoRA")


def _grid(f: RunFacts, full: bool = False) -> list[str]:
    rows = [r for r in f.rows if r.base is not None or r.lora is not None]
    if not rows:
        return []
    out = ["## Samples", ""]
    what = f"`{f.samples_of}`" if f.samples_of else "this checkpoint"
    model = "fine-tuned model" if full else "LoRA"
    out.append(f"Each row is one prompt at one seed: the base model, then the {model} of "
               f"{what}.")
    out += ["", f"| prompt | base model | with this {'checkpoint' if full else 'LoRA'} |",
            "|---|---|---|"]
    for r in rows:
        cells = []
        for role, src in (("base", r.base), ("lora", r.lora)):
            cells.append(f"![{role}]({r.repo_path(role)})" if src is not None else "—")
        scale = f" (scale {r.scale:g})" if r.lora is not None and r.scale not in (None, 1.0) \
            else ""
        out.append(f"| {_cell(r.prompt)}{scale} | {cells[0]} | {cells[1]} |")
    return out + [""]


def _usage(f: RunFacts, repo_id: str, base: str | None, weights: dict[str, str],
           trigger: str, destination: str = HUGGINGFACE) -> list[str]:
    prompt = (f.rows[0].prompt if f.rows else "") or (trigger or "a photo")
    ms = destination == MODELSCOPE
    out = ["## Use it", ""]
    if "diffusers" in weights:
        out += ["### diffusers", "", "```py", "import torch",
                "from diffusers import DiffusionPipeline"]
        if ms:
            out += ["from modelscope import snapshot_download", "",
                    f"base = snapshot_download({base or 'BASE_MODEL'!r})",
                    f"lora = snapshot_download({repo_id!r})",
                    "pipe = DiffusionPipeline.from_pretrained(base, "
                    "torch_dtype=torch.bfloat16).to(\"cuda\")",
                    f"pipe.load_lora_weights(lora, weight_name={weights['diffusers']!r})"]
        else:
            out += ["", f"pipe = DiffusionPipeline.from_pretrained({base or 'BASE_MODEL'!r}, "
                    "torch_dtype=torch.bfloat16).to(\"cuda\")",
                    f"pipe.load_lora_weights({repo_id!r}, "
                    f"weight_name={weights['diffusers']!r})"]
        out += [f"image = pipe({prompt!r}).images[0]", "```", ""]
    if "comfyui" in weights:
        out += ["### ComfyUI", "",
                f"Download `{weights['comfyui']}` into `ComfyUI/models/loras/` and apply it "
                "with a **LoraLoaderModelOnly** node (strength 1.0) after the base model's "
                "loader.", ""]
    if "reference" in weights:
        out += ["### DiffSynth-Studio (the reference trainer)", "",
                "The file has the keys training writes; load it into the pipeline of the base "
                "model:", "", "```py"] + _download(repo_id, weights["reference"], ms) + [
                "pipe.load_lora(pipe.dit, path, alpha=1)  # pipe: DiffSynth-Studio's pipeline",
                "```", ""]
    return out


def _download(repo_id: str, file: str, ms: bool) -> list[str]:
    """Code that downloads one file of the repository to ``path``."""
    if ms:
        return ["import os", "from modelscope import snapshot_download", "",
                f"path = os.path.join(snapshot_download({repo_id!r}), {file!r})"]
    return ["from huggingface_hub import hf_hub_download", "",
            f"path = hf_hub_download({repo_id!r}, {file!r})"]


def _usage_full(f: RunFacts, repo_id: str, base: str | None, weights: dict[str, str],
                destination: str = HUGGINGFACE) -> list[str]:
    """How to use a full fine-tune's checkpoint in each published format."""
    trigger = str(f.settings.get("trigger_word") or "").strip()
    prompt = (f.rows[0].prompt if f.rows else "") or (trigger or "a photo")
    ms = destination == MODELSCOPE
    out = ["## Use it", ""]
    if "diffusers" in weights:
        sub = weights["diffusers"].rstrip("/")
        out += ["### diffusers", "", f"The fine-tuned `{sub}` replaces the base model's:", "",
                "```py", "import torch", "from diffusers import AutoModel, DiffusionPipeline"]
        if ms:
            out += ["from modelscope import snapshot_download", "",
                    f"base = snapshot_download({base or 'BASE_MODEL'!r})",
                    f"tuned = snapshot_download({repo_id!r})"]
        else:
            out += ["", f"base, tuned = {base or 'BASE_MODEL'!r}, {repo_id!r}"]
        out += [f"{sub} = AutoModel.from_pretrained(tuned, subfolder={sub!r}, "
                "torch_dtype=torch.bfloat16)",
                f"pipe = DiffusionPipeline.from_pretrained(base, {sub}={sub}, "
                "torch_dtype=torch.bfloat16).to(\"cuda\")",
                f"image = pipe({prompt!r}).images[0]", "```", ""]
    if "comfyui" in weights:
        out += ["### ComfyUI", "",
                f"Download `{weights['comfyui']}` into `ComfyUI/models/diffusion_models/` and "
                "load it with a **Load Diffusion Model** node in place of the base model's.",
                ""]
    if "reference" in weights:
        out += ["### DiffSynth-Studio (the reference trainer)", "",
                "The file is the trained model's state dict under the reference trainer's "
                "names; load it into the pipeline of the base model:", "", "```py",
                "from diffsynth import load_state_dict"] + \
            _download(repo_id, weights["reference"], ms) + [
                "pipe.dit.load_state_dict(load_state_dict(path))  # pipe: DiffSynth-Studio's "
                "pipeline", "```", ""]
    return out


def _training(f: RunFacts, secrets: list[Secret], full: bool = False) -> list[str]:
    s, g = f.settings, f.figures
    alpha = s.get("lora_alpha")
    size = (f"{s.get('width')}x{s.get('height')}" if s.get("width") and s.get("height")
            else f"up to {s.get('max_pixels')} pixels" if s.get("max_pixels") else "—")
    facts_rows = [
        ("steps", g.steps), ("epochs", g.epochs), ("training time", _duration(g.seconds)),
        ("dataset size", f"{g.dataset_size} items" if g.dataset_size is not None else None),
        ("batch size per GPU", g.batch_size), ("GPUs", g.processes),
        ("LoRA rank / alpha", f"{s.get('lora_rank')} / {alpha or s.get('lora_rank')}"
         if s.get("lora_rank") and not full else None),
        ("learning rate", s.get("learning_rate")), ("optimizer", s.get("optimizer")),
        ("resolution", size), ("mixed precision", s.get("mixed_precision")),
        ("last training loss", f"{g.last_loss:.4f}" if g.last_loss is not None else None),
        ("last validation loss",
         f"{g.last_val_loss:.4f}" if g.last_val_loss is not None else None)]
    out = ["## Training", "", "| | |", "|---|---|"]
    out += [f"| {k} | {_cell(v)} |" for k, v in facts_rows if v not in (None, "", "—")
            or k == "training time"]
    kept, removed = public_settings(changed_settings(s), secrets)
    for name in NOT_TRAINING:
        kept.pop(name, None)
    out += ["", "The run's settings that differ from the defaults"
            + (f" (left out: {', '.join(f'`{r}`' for r in removed)}, which name places on the "
               "training machine)" if removed else "") + ":", "", "```yaml",
            yaml.safe_dump(kept, sort_keys=True, allow_unicode=True).rstrip(), "```", ""]
    return out
