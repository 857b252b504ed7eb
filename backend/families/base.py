"""The model-family contract: what a family folder provides, and nothing the rest may assume.

A family is one folder ``backend/families/<name>/`` holding everything that depends on an
architecture. Two parts, so that reading a config never imports torch:

- ``<name>/__init__.py`` defines ``SPEC``, a ``FamilySpec``: plain data (component names,
  classes and default sources, how the family is recognised from model files, the schema
  values it changes, the reference trainer's target spellings, its presets). The registry
  (``backend.families``) reads it when the schema is built.
- ``SPEC.adapter`` names a module whose ``Adapter`` class subclasses ``Family`` below and
  implements every abstract member (the trained component's class, the noise schedule and
  the loss at one of its entries, rendering a sample, the published configs, the tiny test
  models) and names what the defaults build on (``encoder``, ``pipeline``, ``loaders``).
  Everything else is a default that a family overrides only where its architecture differs
  (a video family's clips, a second expert, an edit model's processor).

Everything else (stages, hub, estimator, export, UI, presets) asks the registry:
``family_spec(name)`` for data, ``get_family(name)`` for the adapter; nothing outside the
folder names a family, its classes or its model ids (``tests/test_layering.py``).

Variants. Models that share an architecture (an image model and its edit models, two
releases of one video model) are variants of one family: each ``Variant`` lists the model
ids it recognises and the schema values it changes on top of the family's ``defaults``
(e.g. other default sources, a flag the loss reads). A config names its family in
``model_family``; its variant follows from its model sources (``recognise``: a model id, or
a local pipeline's ``_class_name`` listed in ``Variant.classes``). A variant that behaves
differently with the same trained component (an edit model: input images beside the
target, its own pipeline class) is bound by ``Family.for_config(cfg)``, which the stages
call: the spec names the adapter classes that bind a run (``FamilySpec.run_adapters``,
subclasses of the family's adapter in modules of their own), so the adapter never imports
them. ``Variant.input_images`` / ``Family.input_images`` say how many input images a
sample takes. A model that needs another trained component is a family of its own.

Adding a family: copy a folder, write its ``SPEC`` and ``Adapter``, add presets in
``presets/`` and tests; the registry finds the folder by itself.
"""
from __future__ import annotations

import abc
import importlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Literal, Mapping, Protocol

from backend.core import writegate
from backend.core.messages import Msg
from backend.families import checkpoint_names

# Component kinds the hub knows how to recognise (by config files) and resolve.
MODEL, TOKENIZER, SCHEDULER, PROCESSOR = "model", "tokenizer", "scheduler", "processor"
# The stages that need components; "train" is stage 2 reading the stage-1 cache.
Stage = Literal["data_process", "train", "sample"]


@dataclass(frozen=True)
class Component:
    """One component of a family's pipeline.

    ``name`` is the pipeline's attribute and folder name (``transformer``, ``vae``...);
    ``classes`` the class names that identify its folder (``_class_name`` of a diffusers
    config, ``architectures`` of a transformers config); ``trained`` marks the component
    that gets the LoRA; ``source`` the default ``model_id:glob`` (a trailing ``/`` means a
    whole folder); ``stages`` the stages that load it; ``kind`` how the hub recognises it.
    """
    name: str
    classes: tuple[str, ...] = ()
    trained: bool = False
    source: str | None = None
    stages: tuple[Stage, ...] = ()
    kind: str = MODEL


@dataclass(frozen=True)
class Variant:
    """A model of the family's architecture: the ids that name it and what it changes."""
    name: str
    title: str
    model_ids: tuple[str, ...]
    defaults: Mapping[str, Any] = field(default_factory=dict)
    # Pipeline ``_class_name`` values (a local pipeline folder's model_index.json) that name
    # this variant when no known model id does.
    classes: tuple[str, ...] = ()
    # Other model_index.json values that name this variant (a flag only its pipeline sets),
    # for a local folder whose pipeline class it shares with other variants.
    index_values: Mapping[str, Any] = field(default_factory=dict)
    # Input images one sample takes beside its target (edit models); 0: text-to-image.
    input_images: int = 0
    # Values of a component's config.json that name this variant, ``{component: {key:
    # value}}``, for a local folder whose pipeline class it shares with other variants and
    # whose model_index.json says nothing more (a flag only its transformer's config sets).
    # A variant is named by value when all its ``index_values`` or all its
    # ``config_values`` match.
    config_values: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    # The multiple every image side is resized to, when it differs from the family's (a
    # VAE that downsamples more, times the transformer's patch); None: the family's.
    resolution_multiple: int | None = None
    # A step-distilled model (few steps, no guidance): the name of the undistilled variant
    # to train on instead (its LoRA applies to this one). Training this one directly wears
    # the distillation off, so it is refused unless the run merges a de-distillation adapter
    # (``preset_lora_path``) or says so (``train_distilled``; backend/config/rules.py
    # ``distilled_problems``). None: not distilled.
    distilled_from: str | None = None


@dataclass(frozen=True)
class FamilySpec:
    """A family's data: read when the schema is built, so no heavy imports."""
    name: str                                # registry key and ``model_family`` value
    title: str                               # shown in the form
    adapter: str                             # module holding ``class Adapter(Family)``
    components: tuple[Component, ...]
    defaults: Mapping[str, Any]              # schema values this family changes
    recognise_classes: tuple[str, ...]       # pipeline / transformer ``_class_name`` values
    variants: tuple[Variant, ...] = ()
    target_aliases: Mapping[str, str] = field(default_factory=dict)  # reference -> module
    keywords: tuple[str, ...] = ()           # words that name the family (layering test)
    presets_by_vram: tuple[str, ...] = ()    # its presets, most GPU memory first
    is_default: bool = False                 # the family of a config that names none
    # The reference trainer's files of an original repository -> the same component in the
    # repository ``<id><reference_repo_suffix>`` (e.g. a pickled .pth -> a safetensors
    # folder): {file pattern: component glob}. Never read, only renamed.
    reference_files: Mapping[str, str] = field(default_factory=dict)
    reference_repo_suffix: str = ""
    # The multiple every image side is resized to (the VAE's downsampling times the
    # transformer's patch size); a variant may declare its own (``Variant``).
    resolution_multiple: int = 16
    # A video family's clip lengths: frame counts of k * frame_multiple + 1 (the VAE keeps
    # the first frame and groups the rest by this many).
    frame_multiple: int = 4
    # Adapters that bind one run, ``"module:Class"``, tried in order by
    # ``Family.for_config``: subclasses of the family's adapter whose classmethod
    # ``for_run(base, cfg)`` returns one bound to the run (an edit model, image-to-video),
    # or None when the run is not theirs. Named here, not imported by the adapter, so that
    # no adapter imports its own subclasses.
    run_adapters: tuple[str, ...] = ()

    def component(self, name: str) -> Component:
        for c in self.components:
            if c.name == name:
                return c
        raise KeyError(f"{self.name}: no component {name!r}")

    @property
    def trained_component(self) -> str:
        return next(c.name for c in self.components if c.trained)

    def stage_components(self, stage: Stage, split: bool = True) -> tuple[str, ...]:
        """Components ``stage`` loads; unsplit training also encodes, so it loads the
        stage-1 components too."""
        names = [c.name for c in self.components if stage in c.stages]
        if stage == "train" and not split:
            names += [c.name for c in self.components
                      if "data_process" in c.stages and c.name not in names]
        return tuple(names)

    def class_map(self) -> dict[str, str]:
        """{class name: component name} for recognising component folders."""
        return {cls: c.name for c in self.components for cls in c.classes}

    def default_source(self, component: str) -> str | None:
        return self.component(component).source

    def model_ids(self) -> tuple[str, ...]:
        ids = [v for var in self.variants for v in var.model_ids]
        for c in self.components:
            if c.source and ":" in c.source:
                ids.append(c.source.rsplit(":", 1)[0])
        return tuple(dict.fromkeys(ids))

    def map_reference_sources(self, sources: str | None) -> tuple[str | None, list[Msg]]:
        """(``sources`` with each reference-trainer file of an original repository renamed to
        the same component of the ``reference_repo_suffix`` repository, one note per
        renamed entry). Entries this family does not know stay as they are."""
        if not sources or not self.reference_files:
            return sources, []
        ids = set(self.model_ids())
        out, notes = [], []
        for entry in (e.strip() for e in sources.split(",")):
            if not entry:
                continue
            repo, _, pattern = entry.rpartition(":")
            target = self.reference_files.get(pattern) if repo in ids else None
            if target is None or repo.endswith(self.reference_repo_suffix):
                out.append(entry)
                continue
            new = f"{repo}{self.reference_repo_suffix}:{target}"
            notes.append(Msg("import.mapped_pickle", entry=entry, new=new)
                         if pattern.endswith((".pth", ".pt", ".bin")) else
                         Msg("import.mapped_source", entry=entry, new=new))
            if new not in out:
                out.append(new)
        return ",".join(out), notes

    def variant(self, name: str | None) -> Variant | None:
        """The variant called ``name``; None for None or a name the family has not."""
        return next((v for v in self.variants if v.name == name), None)

    def size_multiple(self, variant: str | None = None) -> tuple[int, str]:
        """(the multiple every image side is resized to, the model's title) for the family,
        or for its variant ``variant`` when that declares its own."""
        var = self.variant(variant)
        if var is not None and var.resolution_multiple:
            return var.resolution_multiple, var.title
        return self.resolution_multiple, self.title

    def variant_of(self, model_id: str) -> Variant | None:
        for var in self.variants:
            if model_id in var.model_ids:
                return var
        return None


class Encoder(Protocol):
    """Stage 1's frozen encoders: raw samples in, the tensors a cache file holds out.

    An item of ``encode_samples`` is ``(load_pixels, prompt)``; for a model that takes input
    images (``Family.input_images`` > 0) it is ``(load_pixels, prompt, load_inputs)``,
    ``load_inputs()`` giving the row's input images (PIL RGB, as stored, upright).
    """

    def encode_sample(self, pixels: Any, prompt: str) -> dict[str, Any]:
        """One training sample: pixels [1, 3, H, W] in [-1, 1] and its caption."""

    def encode_samples(self, items: list[tuple[Callable[[], Any], str]],
                       should_stop: Callable[[], bool] = lambda: False,
                       log: Callable[[str], None] = print) -> Iterator[dict[str, Any]]:
        """Each (load_pixels, prompt) item's sample, in order; stops when asked."""


class Captioner(Protocol):
    """A vision-language model that writes captions (``backend/families/captioner.py``'s
    ``VLMCaptioner``; the caption job is ``backend/data/captions.py``'s)."""

    def caption(self, images: list[Any], instruction: str, max_new_tokens: int) -> list[str]:
        """One caption per image (PIL RGB), answering ``instruction``; at most
        ``max_new_tokens`` tokens each."""


# ------------------------------------------------------------------------------------------
# Flow-matching loss around a family's ``loss_at(transformer, sample, schedule, index, noise,
# dtype)``: the draws every family makes the same way (``Family.training_loss``, ``eval_loss``).
# ------------------------------------------------------------------------------------------
EVAL_INDICES = (100, 300, 500, 700, 900)


@dataclass
class Schedule:
    """A family's training noise schedule (``Family.training_schedule``), index 0 the
    noisiest: ``sigmas`` [1000]; ``timesteps`` [1000] where the loss or a log reads them;
    ``weights`` [1000] where the loss weights an index (None: unweighted)."""
    sigmas: Any
    timesteps: Any = None
    weights: Any = None


def uniform_index_loss(loss_at: Callable[..., Any], transformer, sample: dict[str, Any],
                       schedule, generator, dtype, indices: tuple[int, int] | None = None,
                       log: str | None = None):
    """One training step's loss: a uniform index into ``schedule.sigmas`` (into [lo, hi) of
    ``indices`` when given, e.g. one expert's range) and fresh noise, both drawn from
    ``generator`` (a CPU ``torch.Generator``, so a step's draw depends only on its seed).
    With ``indices`` and ``log`` (a line prefix) the timestep drawn is printed."""
    import torch

    lo, hi = indices or (0, len(schedule.sigmas))
    index = int(torch.randint(lo, hi, (1,), generator=generator))
    if indices is not None and log:
        print(f"{log} timestep {float(schedule.timesteps[index]):.2f} (schedule index "
              f"{index} of [{lo}, {hi}))", flush=True)
    noise = torch.randn(sample["latents"].shape, generator=generator)
    return loss_at(transformer, sample, schedule, index, noise, dtype)


def fixed_noise_loss(loss_at: Callable[..., Any], schedule, transformer,
                     samples: list[dict[str, Any]], seed: int = 0,
                     indices: tuple[int, ...] = EVAL_INDICES) -> float:
    """Mean ``loss_at`` over ``samples`` × schedule ``indices`` with noise fixed by ``seed``
    (the same draws on every call: a LoRA's loss compares with the base model's), in the
    transformer's dtype, without gradients."""
    import torch

    dtype = next(transformer.parameters()).dtype
    total, n = 0.0, 0
    with torch.no_grad():
        for si, sample in enumerate(samples):
            for index in indices:
                g = torch.Generator().manual_seed(seed * 100003 + si * 1009 + index)
                noise = torch.randn(sample["latents"].shape, generator=g)
                total += float(loss_at(transformer, sample, schedule, index, noise, dtype))
                n += 1
    return total / max(n, 1)


class Family(abc.ABC):
    """The adapter of one family: every architecture-specific step of the stages.

    Members with a body are defaults that hold for diffusers models in general; abstract
    members have no sensible default. ``spec`` is the family's ``FamilySpec``.
    """

    spec: FamilySpec
    # Key prefix of the trained component per export format (``backend.models.export``).
    export_prefixes: Mapping[str, str] = {"reference": "", "diffusers": "transformer.",
                                          "comfyui": "diffusion_model."}
    # Layers an export format's tool keeps fused that diffusers keeps apart, per format:
    # ``{fmt: {fused name: (part names, stacked in this order along the output)}}``, names
    # relative to their block. Exported, the parts' LoRAs become one LoRA on the fused layer
    # (``backend.models.export.fuse_modules``); read back, it is split into theirs.
    fused_modules: Mapping[str, Mapping[str, tuple[str, ...]]] = {}
    # Pixels per latent cell (the estimator's token count, ``video_tokens``). The multiple
    # every side is resized to is the spec's (``FamilySpec.size_multiple``), not the adapter's.
    vae_scale_factor: int = 8
    # Layer offload and quantization: the trained component's repeated blocks (attribute
    # names of its ModuleLists) and module names left unquantized.
    offload_blocks: tuple[str, ...] = ()
    quantize_skip: tuple[str, ...] = ()
    # What a sample is: "image" (PNG files) or "video" (clips: datasets of videos decoded by
    # ``backend.data.video``, samples written as WebM with a frame strip beside each).
    media: Literal["image", "video"] = "image"
    # Input images one sample takes beside its target (edit models; 0: text-to-image). A
    # dataset's ``edit_image`` column is checked against it before any model loads.
    input_images: int = 0
    # A model conditioned on a reference video (IC-LoRA): each row's ``in_context_videos``
    # is checked before any model loads, and samples render from a reference clip
    # (``sample_videos``). Set by ``for_config`` from the run's ``extra_inputs``.
    takes_reference_video: bool = False
    # A model that trains a clip's sound beside its frames: ``probe_sound(file)`` gives the
    # audio stream's sample rate (None: the file has none); None: the model makes no sound.
    probe_sound: Callable[[Any], int | None] | None = None

    # What ``load_encoder`` and ``load_pipeline`` build from the spec's components: stage 1's
    # encoder class (``Encoder``; called with the ``data_process`` components by name, and
    # ``device`` and ``offload``), the diffusers class name of the sample pipeline (called
    # with the ``sample`` components by name), and the loader of every component other than
    # the trained one, {component: fn}: a model's is ``fn(folder, dtype, device)``, a
    # tokenizer's, processor's or scheduler's ``fn(folder)``.
    encoder: type
    pipeline: str
    loaders: Mapping[str, Callable[..., Any]] = {}

    @property
    def title(self) -> str:
        """The model's name in messages (the dataset checks): the family's title; an adapter
        bound to a variant (``for_config``) gives the variant's."""
        return self.spec.title

    def for_config(self, cfg: Any) -> "Family":
        """The adapter for one run's config: a family whose variants behave differently
        (an edit model's encoder, a flag its loss reads) returns one bound to them, the
        first of ``spec.run_adapters`` whose ``for_run`` takes the run. Default: the
        adapter itself."""
        for name in self.spec.run_adapters:
            module, _, cls = name.partition(":")
            bound = getattr(importlib.import_module(module), cls).for_run(self, cfg)
            if bound is not None:
                return bound
        return self

    # --- components ------------------------------------------------------------------------
    @abc.abstractmethod
    def transformer_class(self) -> type:
        """The trained component's class (diffusers ``ModelMixin`` with peft support)."""

    def load_transformer(self, folder: str | Path, dtype=None, device: Any = "cpu"):
        """The trained component from its folder, in ``dtype`` on ``device``."""
        model = self.transformer_class().from_pretrained(str(folder), torch_dtype=dtype)
        return model.to(device)

    def load_components(self, dirs: Mapping[str, Path], stage: Stage, dtype=None,
                        device: Any = "cpu", skip: tuple[str, ...] = ()) -> dict[str, Any]:
        """{component: loaded} of the components ``stage`` loads (``spec.stage_components``)
        but ``skip``, from their resolved folders, in the spec's order: the trained one by
        ``load_transformer``, the others by ``loaders``; models in ``dtype`` on ``device``."""
        out = {}
        for name in self.spec.stage_components(stage):
            if name in skip:
                continue
            if name == self.spec.trained_component:
                out[name] = self.load_transformer(dirs[name], dtype, device)
            elif self.spec.component(name).kind == MODEL:
                out[name] = self.loaders[name](dirs[name], dtype, device)
            else:
                out[name] = self.loaders[name](dirs[name])
        return out

    # --- stage 1 ---------------------------------------------------------------------------
    def load_encoder(self, dirs: Mapping[str, Path], dtype=None, device: Any = "cpu",
                     offload: str = "none") -> Encoder:
        """Stage 1's encoders from the resolved component folders; ``offload`` is
        ``data_process_offload`` (none | model | sequential) and never changes a result:
        with model or sequential the weights are read into host RAM and reach ``device`` as
        the encoder moves them. Default: ``encoder`` built from the ``data_process``
        components."""
        place = device if offload == "none" else "cpu"
        return self.encoder(**self.load_components(dirs, "data_process", dtype, place),
                            device=device, offload=offload)

    # --- stage 2 ---------------------------------------------------------------------------
    @abc.abstractmethod
    def training_schedule(self) -> Any:
        """The noise schedule of training (sigmas, timesteps, loss weights)."""

    @abc.abstractmethod
    def loss_at(self, transformer, sample: Mapping[str, Any], schedule: Any, index: int,
                noise, dtype):
        """The loss of ``sample`` at schedule entry ``index`` with ``noise`` (the latents'
        shape), weighted as the family weights it: what ``training_loss`` and ``eval_loss``
        evaluate, and the train stage's other ``timestep_sampling`` modes call."""

    def training_loss(self, transformer, sample: Mapping[str, Any], schedule: Any,
                      generator, dtype):
        """One step's loss for a cached ``sample``; timestep and noise drawn from
        ``generator`` (a CPU ``torch.Generator``), so a step depends only on its seed.
        Default: ``loss_at`` a uniform schedule index with fresh noise."""
        return uniform_index_loss(self.loss_at, transformer, sample, schedule, generator,
                                  dtype)

    def eval_loss(self, transformer, samples: list[Mapping[str, Any]], seed: int = 0) -> float:
        """Mean loss over ``samples`` at fixed timesteps and noise (held-out checks):
        ``loss_at`` the ``EVAL_INDICES`` of the training schedule."""
        return fixed_noise_loss(self.loss_at, self.training_schedule(), transformer, samples,
                                seed)

    # --- samples ---------------------------------------------------------------------------
    def load_pipeline(self, dirs: Mapping[str, Path], dtype=None):
        """The family's diffusers pipeline from the resolved folders (on the CPU). Default:
        the ``pipeline`` class built from the ``sample`` components."""
        import diffusers

        return getattr(diffusers, self.pipeline)(**self.load_components(dirs, "sample", dtype))

    @abc.abstractmethod
    def render(self, pipe, prompt: str, *, negative_prompt: str, generator, steps: int,
               cfg: float, height: int, width: int):
        """One sample image (PIL) with the schema's sample settings; a ``video`` family's
        also takes ``num_frames`` and returns the clip's frames."""

    @property
    def sample_suffix(self) -> str:
        """The file suffix of one rendered sample."""
        return ".webm" if self.media == "video" else ".png"

    def save_sample(self, result, path: str | Path, cfg: Any) -> list[Path]:
        """Write what ``render`` returned to ``path`` (atomically); return the files written.
        Default: an image saved as PNG."""
        path = Path(path)
        with writegate.UNRESTRICTED.replacing(path, "sample", parents=True) as out:
            result.save(out, format="PNG")
        return [path]

    # --- LoRA ------------------------------------------------------------------------------
    # A family whose tools load the original checkpoint's module names: (diffusers' name ->
    # the original, the original -> diffusers'; KeyError for a name it has none for), and
    # the export formats that use them.
    native_names: "tuple[Callable[[str], str], Callable[[str], str]] | None" = None
    native_formats: tuple[str, ...] = ("comfyui",)

    def export_module_name(self, module: str, fmt: str) -> str:
        """A trained module's name in export format ``fmt`` (default: diffusers' name in
        every format; ``native_names`` in ``native_formats``)."""
        if self.native_names is None or fmt not in self.native_formats:
            return module
        return self.native_names[0](module)

    def import_module_name(self, name: str, fmt: str) -> str:
        """The inverse of ``export_module_name``, for reading an export back (a name the
        map does not know stays as it is)."""
        if self.native_names is None or fmt not in self.native_formats:
            return name
        try:
            return self.native_names[1](name)
        except KeyError:
            return name

    def full_checkpoint_names(self, shapes: Mapping[str, tuple[int, ...]], fmt: str
                              ) -> "checkpoint_names.Names | None":
        """A full checkpoint of the trained component as one file of export format ``fmt``
        (``comfyui``: the names ComfyUI's diffusion-model loader reads, fused where its
        model fuses; ``reference``: the reference trainer's own checkpoint names), from the
        checkpoint's ``{key: shape}``: ``{output key: Named}``
        (``backend/families/checkpoint_names.py``). A key left out has no name in ``fmt``
        (the export is refused, naming it). None: no names known for ``fmt`` at all."""
        return None

    def lora_module_map(self, config: Mapping[str, Any] | None = None
                        ) -> dict[str, tuple[int, int]]:
        """{module name: (in_features, out_features)} of every Linear of the trained
        component, built from ``config`` (default: the published one) on the meta device."""
        import torch

        config = dict(config if config is not None else
                      self.published_configs()[self.spec.trained_component])
        with torch.device("meta"):
            model = self.transformer_class().from_config(config)
        return {name: (m.in_features, m.out_features) for name, m in model.named_modules()
                if isinstance(m, torch.nn.Linear)}

    def target_modules(self, names: Iterable[str]) -> list[str]:
        """LoRA target names with the reference trainer's spellings mapped to modules."""
        return [self.spec.target_aliases.get(n, n) for n in names]

    # --- captioning (optional) -------------------------------------------------------------
    # Components a captioner loads from the model sources (the text encoder of a family
    # whose text encoder is a vision-language model, and its tokenizer); empty: the family
    # cannot caption a dataset by itself (a captioning model folder is named instead).
    captioner_components: tuple[str, ...] = ()

    def load_captioner(self, dirs: Mapping[str, Path], dtype=None, device: Any = "cpu",
                       offload: str = "none") -> Captioner:
        """A ``Captioner`` from the resolved ``captioner_components`` folders; ``offload``
        is ``caption_offload`` (none | sequential)."""
        raise NotImplementedError(f"{self.spec.name}: no captioner of its own")

    # --- estimator -------------------------------------------------------------------------
    # The released model's {component: config.json contents} (the family's ``published.py``),
    # and, by ``Variant.name``, those of a variant with other sizes.
    published: Mapping[str, Mapping[str, Any]] = {}
    published_by_variant: Mapping[str, Mapping[str, Mapping[str, Any]]] = {}

    def published_configs(self) -> dict[str, dict[str, Any]]:
        """{component: config.json contents} of the released model, for estimates made
        before anything is downloaded (copies of ``published``)."""
        if not self.published:
            raise NotImplementedError(f"{self.spec.name}: no published configs")
        return {k: dict(v) for k, v in self.published.items()}

    def variant_configs(self, variant: str | None) -> dict[str, dict[str, Any]]:
        """``published_configs`` of one of the spec's variants (by ``Variant.name``; None:
        the family's default model): its ``published_by_variant`` entry, else the published
        sizes."""
        chosen = self.published_by_variant.get(variant or "")
        if not chosen:
            return self.published_configs()
        return {k: dict(v) for k, v in chosen.items()}

    def transformer_shape(self, config: Mapping[str, Any]) -> tuple[int, int]:
        """(blocks, hidden size) of the trained component from its config: the estimator's
        activation model counts hidden-state tensors of blocks x tokens x hidden size."""
        return (int(config["num_layers"]),
                int(config["num_attention_heads"]) * int(config["attention_head_dim"]))

    def video_tokens(self, height: int, width: int, frames: int) -> int:
        """Tokens one clip of ``frames`` frames becomes in the trained component (image
        families: one image, latent cells of 2x2)."""
        cell = self.vae_scale_factor * 2
        return (height // cell) * (width // cell)

    # --- tests and the demo ----------------------------------------------------------------
    @abc.abstractmethod
    def build_tiny(self, out_dir: str | Path, seed: int = 0, variant: str | None = None
                   ) -> Path:
        """Write a random-init tiny pipeline of the real classes (hub layout) to ``out_dir``:
        the family's default model's, or ``variant``'s where its architecture differs."""
