"""Memory estimator: peak GPU memory and host RAM of each stage of a run, before launch.

``estimate_memory(cfg, model_config=None)`` returns an ``Estimate`` with, for each stage
(data_process, train, sample), the bytes predicted on one GPU and on the host, split into
named parts so the UI can say *what* takes the memory. ``fits(estimate, gpu_gb)`` turns it
into a verdict line (naming the setting to change for a stage that does not fit);
``recommend_preset(gpu_gb)`` names the fastest bundled preset whose every stage fits.

Importing this module is light (standard library only); torch, diffusers, transformers and
accelerate are imported inside the functions that count parameters.

Units: bytes; figures are printed in GB = 10^9 bytes (a "24 GB" card holds 24 GiB =
25.8 GB, so comparing against the number printed on the card errs on the safe side).

Where the numbers come from
---------------------------
Parameter counts come from the model's own ``config.json`` files: each component class
(the diffusers / transformers class its config names) is instantiated on the meta device
(``accelerate.init_empty_weights()``), so no weight is read or allocated. When the config
files are not on disk yet (nothing downloaded), the family's published configs
(``Family.published_configs``) are used. The LoRA size is counted on the same meta transformer: every
``nn.Linear`` whose name equals a target or ends with ``.<target>`` (peft's rule) adds
``rank * (in_features + out_features)`` parameters.

Notation: P transformer parameters, L LoRA parameters, n blocks, D = heads * head_dim,
b bytes of the compute dtype (2 for bf16/fp16 mixed precision, 4 for ``no``),
W processes (GPUs), N = N_img + N_txt tokens with N_img = (H/16)(W/16) image tokens
(VAE /8, patch 2) and N_txt text tokens (default 256), "unit" = N * D * b bytes (one
hidden-state tensor).

Train stage, GPU::

    base weights    P*b                      ZeRO 0-2 (every GPU holds the frozen model)
                    P*b/W + live + persist   ZeRO-3; with parameter offload: live + persist
        live    = (stage3_max_live_parameters + stage3_prefetch_bucket_size) * b
        persist = base and LoRA tensors smaller than
                  stage3_param_persistence_threshold (kept whole on every GPU), * b
    LoRA + AdamW    no DeepSpeed: 16 L       (fp32 weights, fp32 grads, 2 fp32 moments)
                    DeepSpeed:    L*b weights (/W at ZeRO-3) + L*b grads (/W at ZeRO>=2)
                                  + 12 L / W (fp32 master + 2 fp32 moments, ZeRO>=1)
                                  + 4 L / W (fp32 gradient partition); the last two go to
                                  the host with optimizer offload (so do the 16-bit
                                  grads at ZeRO>=2, bucket by bucket)
                    + reduce bucket (DeepSpeed: reduce_bucket_size * b), DDP: 4 L
    EMA             4 L (ema_decay; float32): on the host with ema_device cpu; a full
                    fine-tune's / W at ZeRO-3 (each rank its shard)
    activations     U = 20.4 units saved per block for backward (all in the compute dtype),
                    + 4.0 units when 16-bit (fp32 upcasts in RoPE and RMSNorm),
                    + 4.1 units for fp32 LoRA weights under autocast (peft casts each
                      target's input); measured on a real block with
                      ``bench/activation_units.py`` (autograd saved-tensor hooks)
                    + T = 8 units of gradients alive inside one block's backward
                      (derived: the MLP's 4D-wide input and output gradients)
        none        n*U + T
        torch       n*1 (each block's checkpointed input) + U (the block recomputed) + T
        offload     U + 1 + T on GPU; n units on the host (``save_on_cpu``)
        deepspeed   n*1 + 2U + T (the first block runs plainly: nothing entering it needs
                    grad, so its activations stay saved); ``cpu_checkpointing`` moves the
                    n units to the host
    The attention adds no N^2 term: batch size 1 drops the all-ones text mask, and
    PyTorch's fused SDPA kernels (flash / memory-efficient on CUDA, flash on CPU) keep only
    the output and its log-sum-exp.

Train stage, host::

    loading         P*b per process on the machine (the transformer is read on the host
                    in the compute dtype, then moved); under ZeRO-3 with zero3_init_flag
                    it is built partitioned, so only one tensor at a time passes through
    offloads        P*b (parameter offload), 16 L (optimizer offload: master, moments,
                    fp32 grads), n units per process (checkpoint offload)
    peak            max(loading, offloads)

data_process (stage 1; never under DeepSpeed). Prompts and images are encoded one after
the other, so the peak is the larger of two phases::

    prompt phase   text encoder weights + N_p * ((layers + 1) * hidden + intermediate
                   + 4 hidden + vocab) * b  (every layer's hidden state is returned, plus
                   one layer's temporaries and the LM head's logits; N_p = N_txt + 64
                   template tokens)
    image phase    VAE weights + VAE encoder activations (11.8 * base_dim * H * W * b,
                   measured on the real VAE with no_grad)
    GPU, by ``data_process_offload``:
        none        both weights + the larger phase's activations
        model       the larger phase (each encoder's weights only in its own phase)
        sequential  the larger phase with only the largest module's own weights in place
                    of the encoder's (accelerate's hooks hold one module's weights at a
                    time; counted on the meta-device model: for the default family the text encoder's
                    embedding or LM head, 545 M parameters, and a 4 M-parameter VAE conv)
    host  the weights (none: while loading, per process; offload: for the whole stage)

sample (renders in bf16 on CUDA, float32 on a CPU, whatever mixed_precision says). Three
phases -- the prompt (text encoder), denoising (transformer + LoRA, 6 units of inference
activations at the sample size), decoding (VAE decoder: 21.5 * base_dim * H * W * b,
measured on the real VAE with no_grad; with ``sample_vae_tiling`` one 256x256 tile at a
time plus the decoded tiles and the image, 9 * H * W * b)::

    GPU, by ``sample_cpu_offload``:
        none        every weight (transformer, text encoder, VAE, LoRA) + the largest
                    phase's activations
        model       the largest phase with its own component's weights (diffusers moves
                    one component at a time; the transformer still goes whole)
        sequential  the largest phase with that component's largest module's weights
    host  every component while loading; with CPU offload they stay there

On a CPU-only run (``device="cpu"``) offload saves nothing, so both stages are counted as
``none``.

Offload traffic (``Estimate.h2d_bytes_per_step``): ZeRO-3 parameter offload fetches every
weight for the forward and again for the backward, 2 P b per micro-step, plus L b of
updated LoRA weights with optimizer offload; divided by the host-to-device bandwidth it
bounds the step time from below (the GPU bench script measures the bandwidth).

A CPU-only run (``device="cpu"``) puts every GPU part in host RAM and counts the loaded
weights once (on a CPU the stage computes with the tensors it loaded; diffusers maps the
float32 file, so the frozen weights are page-cache pages of that file). The test
``tests/test_estimator.py`` measures the train stage's host RAM on a small model in a
subprocess and checks this within 25% (bench/host_ram_probe.py says what is measured).

Low VRAM without DeepSpeed (``quant_options``, ``enable_model_cpu_offload``,
``enable_optimizer_cpu_offload``; ``compare_methods`` sets the methods side by side)::

    quantized base  each quantized linear weight at its method's bits (nf4: 4 bits + the
                    double-quantized absmax, 4.127 bits; int8 / fp8: 8 bits + one float32
                    scale per output row), the skip list and every other parameter at b
                    bytes; + one dequantized weight (the largest linear, b bytes) while it
                    computes
    layer offload   GPU: everything outside the blocks + two blocks (the running one and
                    the prefetched one), at their stored size; host: every block in the
                    pinned arena (+ the model read in full precision while loading);
                    bus: every block's weights in the forward and again in the backward
                    (the recompute, or the reload of a block whose weights backward
                    unpacks), 2 x blocks' bytes per micro-step
    optimizer offload  GPU 8 L (fp32 LoRA weights + grads); host 16 L (master, grads,
                    two moments); bus 4 L up (the updated LoRA) per step
    transfer-bound step time = bus bytes per step / host-to-device bandwidth

What is not modelled: the CUDA context (~0.3-0.6 GB per GPU, outside PyTorch's allocator;
``fits`` adds ``CUDA_CONTEXT_GB`` for it), allocator fragmentation, the Python / library
baseline of each process (a few GB of host RAM with CUDA libraries), the page cache of
memory-mapped weight files, and data-loader workers. GPU figures are what
``torch.cuda.max_memory_allocated`` reports; host figures are the increase of resident
memory over a process that has imported its libraries.
"""
from __future__ import annotations

import copy
import json
import math
import os
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

from backend.core import libraries
from backend.core.messages import Msg
from backend.config.lowvram import entries_for
from backend.config.presets import load_preset
from backend.config.rules import LORA_ONLY
from backend.config.schema import family_defaults
from backend.families import default_family, family_of, family_spec, get_family
from backend.models.hub import models_dir
from backend.models.lora import matches
from backend.models.quantize import _skipped

GB = 1e9
CUDA_CONTEXT_GB = 0.5          # added by fits(): driver context + cuBLAS workspace
DEFAULT_TEXT_TOKENS = 256      # cached prompt length assumed for training (after the template)
SAMPLE_TEXT_TOKENS = 256

# Activation constants (see the module docstring and bench/activation_units.py).
ACT_UNITS_SAVED = 20.4         # per block, tensors saved for backward, in compute-dtype units
ACT_UNITS_UPCAST = 4.0         # extra when computing in 16 bits (fp32 copies in RoPE, RMSNorm)
ACT_UNITS_LORA_CAST = 4.1      # extra for fp32 LoRA weights on a 16-bit base under autocast
ACT_UNITS_BACKWARD = 8.0       # gradients alive while one block runs backward
ACT_UNITS_INFERENCE = 6.0      # no-grad forward: a block's largest live temporaries
VAE_ENCODE_UNITS = 11.8        # VAE encoder peak / (base_dim * H * W * bytes), no_grad
VAE_DECODE_UNITS = 21.5        # VAE decoder peak / (base_dim * H * W * bytes), no_grad
VAE_TILE = 256                 # diffusers' tile size (pixels) of the VAE's tiled decode
PROMPT_TEMPLATE_TOKENS = 64    # the prompt template's tokens (34 dropped after encoding) + margin
ADAM_BYTES_NO_DS = 16          # fp32 LoRA weight + fp32 grad + 2 fp32 moments
ADAM_STATE_BYTES_DS = 12       # fp32 master + 2 fp32 moments (DeepSpeed)
GRAD_PARTITION_BYTES_DS = 4    # fp32 gradient partition (DeepSpeed)

CPU_PRESET = "cpu_demo"


# ------------------------------------------------------------------------------------------
# Results
# ------------------------------------------------------------------------------------------
@dataclass
class StageEstimate:
    """Predicted peak memory of one stage: named parts in bytes, on one GPU and the host."""

    stage: str
    gpu: dict[str, float] = field(default_factory=dict)
    host: dict[str, float] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    @property
    def gpu_bytes(self) -> float:
        return float(sum(self.gpu.values()))

    @property
    def host_bytes(self) -> float:
        return float(sum(self.host.values()))

    @property
    def gpu_gb(self) -> float:
        return self.gpu_bytes / GB

    @property
    def host_gb(self) -> float:
        return self.host_bytes / GB


@dataclass
class Estimate:
    """Per-stage predictions plus the figures they were computed from."""

    stages: dict[str, StageEstimate]
    device: str                       # "cuda" (GPU + host) or "cpu" (everything on the host)
    height: int
    width: int
    image_tokens: int
    text_tokens: int
    checkpointing: str                # none | torch | offload | deepspeed
    params: dict[str, int]            # transformer, text_encoder, vae, lora
    planned: list[str]                # stages the run will execute
    h2d_bytes_per_step: float = 0.0   # train: host->device traffic per optimizer step
    sources: dict[str, str] = field(default_factory=dict)  # component -> given|local|published
    full_training: bool = False       # trainable_models: the transformer trains in full
    checkpoint_bytes: float = 0.0     # disk for one checkpoint (a LoRA file, or the component)

    def peak_stage(self, on: str = "gpu") -> StageEstimate:
        """The planned stage with the largest GPU (``on="gpu"``) or host figure."""
        stages = [self.stages[s] for s in self.planned if s in self.stages] or list(
            self.stages.values())
        key = (lambda s: s.gpu_bytes) if on == "gpu" else (lambda s: s.host_bytes)
        return max(stages, key=key)

    @property
    def peak_gpu_gb(self) -> float:
        return self.peak_stage("gpu").gpu_gb

    @property
    def peak_host_gb(self) -> float:
        return self.peak_stage("host").host_gb

    def to_dict(self) -> dict[str, Any]:
        return {
            "device": self.device, "height": self.height, "width": self.width,
            "image_tokens": self.image_tokens, "text_tokens": self.text_tokens,
            "checkpointing": self.checkpointing, "params": dict(self.params),
            "planned": list(self.planned),
            "h2d_gb_per_step": round(self.h2d_bytes_per_step / GB, 3),
            "sources": dict(self.sources), "full_training": self.full_training,
            "checkpoint_gb": round(self.checkpoint_bytes / GB, 4),
            "stages": {name: {"gpu_gb": round(s.gpu_gb, 3), "host_gb": round(s.host_gb, 3),
                              "gpu": {k: round(v / GB, 4) for k, v in s.gpu.items()},
                              "host": {k: round(v / GB, 4) for k, v in s.host.items()},
                              "notes": list(s.notes)}
                       for name, s in self.stages.items()},
        }

    def summary(self) -> str:
        """A few lines for people: per stage GPU and host, the largest parts first."""
        return "\n".join(self.summary_lines())

    def summary_lines(self) -> list[Msg]:
        """``summary``'s lines as messages (the page shows each in its language)."""
        shape = dict(height=self.height, width=self.width, image_tokens=self.image_tokens,
                     text_tokens=self.text_tokens, checkpointing=self.checkpointing)
        lines = [Msg("estimate.shape_full", **shape, trained_m=self.params["trained"] / 1e6,
                     disk=self.checkpoint_bytes / GB) if self.full_training else
                 Msg("estimate.shape", **shape, lora_m=self.params["lora"] / 1e6)]
        published = [c for c, src in self.sources.items() if src == "published"]
        if published:
            lines.append(Msg("estimate.published", components=published))
        for name in self.planned or list(self.stages):
            s = self.stages.get(name)
            if s is None:
                continue
            top = sorted(s.gpu.items(), key=lambda kv: -kv[1])[:3]
            parts = [Msg("estimate.part", name=k, gb=v / GB) for k, v in top if v > 0]
            shown = Msg("estimate.parts", parts=parts) if parts else ""
            if self.device == "cuda":
                lines.append(Msg("estimate.stage_gpu", stage=name, gpu=s.gpu_gb, parts=shown,
                                 host=s.host_gb))
            else:
                lines.append(Msg("estimate.stage_cpu", stage=name, gpu=s.gpu_gb, parts=shown,
                                 host=s.host_gb))
        return lines


# ------------------------------------------------------------------------------------------
# Model statistics (meta-device instantiation)
# ------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class TransformerStats:
    params: int
    num_layers: int
    dim: int
    largest_module: int                       # params of the largest leaf module
    linears: tuple[tuple[str, int, int], ...]  # (name, in_features, out_features)
    param_numels: tuple[int, ...]             # every parameter's size (ZeRO-3 persistence)

    def lora_params(self, rank: int, targets: list[str]) -> int:
        return sum(rank * (i + o) for n, i, o in self.linears if _matches(n, targets))

    def lora_numels(self, rank: int, targets: list[str]) -> list[int]:
        out = []
        for n, i, o in self.linears:
            if _matches(n, targets):
                out += [rank * i, rank * o]
        return out


@dataclass(frozen=True)
class ComponentStats:
    params: int
    hidden: int = 0
    intermediate: int = 0
    base_dim: int = 0
    largest_module: int = 0    # params of the module with the most parameters of its own
    layers: int = 0
    vocab: int = 0


def _largest_own(model) -> int:
    """Parameters of the module holding the most parameters directly (not through children):
    what sequential offload (accelerate's ``cpu_offload`` hooks) puts on the GPU at once."""
    return max(sum(p.numel() for p in m.parameters(recurse=False)) for m in model.modules())


def _matches(name: str, targets: list[str]) -> bool:
    return any(matches(name, t) for t in targets)


def _key(config: dict[str, Any]) -> str:
    return json.dumps(config, sort_keys=True, default=str)


@lru_cache(maxsize=16)
def _transformer_stats(key: str, family: str) -> TransformerStats:
    libraries.ready()
    import torch
    from accelerate import init_empty_weights

    config = json.loads(key)
    cls = libraries.model_class(config["_class_name"], ("diffusers",))
    with init_empty_weights():
        model = cls.from_config(config)
    linears, largest = [], 0
    for name, mod in model.named_modules():
        own = sum(p.numel() for p in mod.parameters(recurse=False))
        largest = max(largest, own)
        if isinstance(mod, torch.nn.Linear):
            linears.append((name, mod.in_features, mod.out_features))
    numels = tuple(p.numel() for p in model.parameters())
    num_layers, dim = get_family(family).transformer_shape(dict(model.config))
    return TransformerStats(params=sum(numels), num_layers=num_layers, dim=dim,
                            largest_module=largest, linears=tuple(linears),
                            param_numels=numels)


@lru_cache(maxsize=16)
def _text_encoder_stats(key: str) -> ComponentStats:
    libraries.ready()
    import transformers
    from accelerate import init_empty_weights

    config = json.loads(key)
    cls = libraries.model_class(config["architectures"][0], ("transformers",))
    kwargs = {k: v for k, v in config.items() if not k.startswith("_")}
    kwargs.pop("architectures", None)
    model_type = kwargs.pop("model_type")
    conf = transformers.AutoConfig.for_model(model_type, **kwargs)
    with init_empty_weights():
        model = cls(conf)
    text = getattr(conf, "text_config", conf)
    return ComponentStats(params=sum(p.numel() for p in model.parameters()),
                          hidden=int(text.hidden_size),
                          # T5-style encoders name it d_ff.
                          intermediate=int(getattr(text, "intermediate_size", None)
                                           or getattr(text, "d_ff")),
                          largest_module=_largest_own(model),
                          layers=int(text.num_hidden_layers), vocab=int(text.vocab_size))


@lru_cache(maxsize=16)
def _vae_stats(key: str) -> ComponentStats:
    libraries.ready()
    import diffusers
    from accelerate import init_empty_weights

    config = json.loads(key)
    cls = getattr(diffusers, config["_class_name"])
    with init_empty_weights():
        model = cls.from_config(config)
    return ComponentStats(params=sum(p.numel() for p in model.parameters()),
                          base_dim=int(getattr(model.config, "base_dim", 96)),
                          largest_module=_largest_own(model))


def _read_json(path: Path) -> dict[str, Any] | None:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def _component_of(config: dict[str, Any]) -> str | None:
    names = [config.get("_class_name")] + list(config.get("architectures") or [])
    for name in names:
        if not name:
            continue
        if "Transformer" in name:
            return "transformer"
        if name.startswith("Autoencoder"):
            return "vae"
        if "ForConditionalGeneration" in name or "Model" in name:
            return "text_encoder"
    return None


def local_model_configs(cfg) -> dict[str, dict[str, Any]]:
    """The config.json of each component found on disk for ``cfg`` (never downloads)."""
    folders: list[Path] = []
    try:
        if cfg.model_paths:
            for entry in json.loads(cfg.model_paths):
                for p in (entry if isinstance(entry, list) else [entry]):
                    folders.append(Path(str(p)).expanduser().parent)
        else:
            base = models_dir(cfg)
            for spec in (cfg.model_id_with_origin_paths or "").split(","):
                spec = spec.strip()
                if not spec:
                    continue
                local = Path(spec).expanduser()
                if local.exists():
                    folders += [local] if local.is_dir() else [local.parent]
                    if local.is_dir() and (local / "model_index.json").is_file():
                        folders += [d for d in local.iterdir() if d.is_dir()]
                    continue
                model_id, pattern = spec.rsplit(":", 1)
                folder = base / model_id / os.path.dirname(pattern.rstrip("/"))
                folders.append(folder if os.path.dirname(pattern.rstrip("/")) else
                               base / model_id / pattern.rstrip("/"))
    except (ValueError, TypeError, ImportError):
        return {}
    found: dict[str, dict[str, Any]] = {}
    for folder in folders:
        data = _read_json(folder / "config.json")
        comp = _component_of(data) if data else None
        if comp and comp not in found:
            found[comp] = data
    return found


def model_configs(cfg, model_config: dict[str, Any] | None = None
                  ) -> tuple[dict[str, dict[str, Any]], dict[str, str]]:
    """(configs by component, where each came from: given | local | published)."""
    given: dict[str, dict[str, Any]] = {}
    if model_config:
        if any(k in model_config for k in ("transformer", "text_encoder", "vae")):
            given = {k: v for k, v in model_config.items() if isinstance(v, dict)}
        else:
            comp = _component_of(model_config) or "transformer"
            given = {comp: model_config}
    local = local_model_configs(cfg) if cfg is not None else {}
    family = get_family(cfg.model_family if cfg is not None else default_family())
    variant = family_of(cfg.to_dict())[1] if cfg is not None else None
    published = family.variant_configs(variant)
    out, source = {}, {}
    for comp in ("transformer", "text_encoder", "vae"):
        if comp in given:
            out[comp], source[comp] = dict(given[comp]), "given"
        elif comp in local:
            out[comp], source[comp] = local[comp], "local"
        else:
            out[comp], source[comp] = published[comp], "published"
        # A partial config (e.g. only the sizes) takes its class from the published one.
        for key in ("_class_name", "architectures", "model_type"):
            if key in published[comp] and key not in out[comp]:
                out[comp][key] = published[comp][key]
    return out, source


# ------------------------------------------------------------------------------------------
# The estimate
# ------------------------------------------------------------------------------------------
def checkpointing_mode(cfg) -> str:
    """none | torch | offload | deepspeed, as the train stage will checkpoint."""
    if not cfg.use_gradient_checkpointing:
        return "none"
    if cfg.zero_stage > 0 and cfg.ds_activation_checkpointing:
        return "deepspeed"
    if cfg.use_gradient_checkpointing_offload:
        return "offload"
    return "torch"


def resolution(cfg) -> tuple[int, int]:
    """Training size: fixed height/width, else the largest square under max_pixels."""
    if cfg.height and cfg.width:
        return int(cfg.height), int(cfg.width)
    side = int(math.sqrt(cfg.max_pixels)) // 16 * 16
    return side, side


def image_tokens(height: int, width: int) -> int:
    return (height // 16) * (width // 16)


def train_frames(cfg) -> int:
    """The frames of the longest training clip: the largest of ``frame_buckets``, else
    ``num_frames`` (the peak memory is the longest clip's)."""
    return max(cfg.frame_buckets, default=cfg.num_frames)


def clip_tokens(cfg, height: int, width: int, frames: int) -> int:
    """Tokens of one training item: an image's, or for a video family a clip's (latent
    frames x latent area, the family's count)."""
    family = get_family(cfg.model_family)
    if family.media == "video":  # the variant's own VAE factors
        return family.for_config(cfg).video_tokens(height, width, frames)
    return image_tokens(height, width)


# An edit model's input image as the estimate counts it: one, at the target's size, plus
# its vision tokens in the prompt (a 384x384 view: 27 x 27 patches of 14, merged 2 x 2).
VISION_TOKENS_PER_INPUT = (384 // 28) ** 2


def input_image_tokens(cfg, h: int, w: int) -> int:
    """Tokens an edit model's input image adds to a training step (0 for text-to-image,
    and for image-to-video: its first frame enters through the condition channels of the
    clip's own tokens)."""
    try:
        family = get_family(cfg.model_family)
        takes = 0 if family.media == "video" else family.for_config(cfg).input_images
    except Exception:  # noqa: BLE001 - an estimate never fails on a config it cannot bind
        takes = 0
    return image_tokens(h, w) + VISION_TOKENS_PER_INPUT if takes else 0


def compute_bytes(cfg) -> int:
    return 2 if cfg.mixed_precision in ("bf16", "fp16") else 4


def estimate_memory(cfg, model_config: dict[str, Any] | None = None, *,
                    device: str = "cuda", text_tokens: int = DEFAULT_TEXT_TOKENS
                    ) -> Estimate:
    """Predict peak GPU memory and host RAM of each stage of ``cfg`` (a ``RunConfig``).

    ``model_config``: a transformer ``config.json`` mapping, or ``{"transformer": ...,
    "text_encoder": ..., "vae": ...}``; missing components are read from the local model
    folders of ``cfg`` or, failing that, the family's published configs.
    ``device="cpu"`` predicts a CPU-only run: what would sit on the GPU sits in host RAM.
    """
    configs, sources = model_configs(cfg, model_config)
    tr = _transformer_stats(_key(configs["transformer"]), cfg.model_family)
    te = _text_encoder_stats(_key(configs["text_encoder"]))
    vae = _vae_stats(_key(configs["vae"]))
    targets = cfg.target_modules()
    full = bool(getattr(cfg, "full_training", False))
    # What trains: the LoRA's parameters, or in a full fine-tune the whole transformer.
    lora = 0 if full else tr.lora_params(cfg.lora_rank, targets)
    trained = tr.params if full else lora
    h, w = resolution(cfg)
    stages = {
        "data_process": _data_process(cfg, te, vae, h, w, text_tokens, device),
        "train": _lowvram_train(cfg, tr, lora,
                                _train(cfg, tr, trained, h, w, text_tokens, full=full)),
        "sample": _sample(cfg, tr, te, vae, lora, device),
    }
    if device == "cpu":
        for s in stages.values():
            for k, v in s.gpu.items():
                s.host[k] = s.host.get(k, 0.0) + v
            s.gpu = {}
            _cpu_dedupe(s)
    planned = [s for s in cfg.stages if s in stages]
    if not cfg.split_training:
        planned = [s for s in planned if s != "data_process"]
    return Estimate(stages=stages, device=device, height=h, width=w,
                    image_tokens=clip_tokens(cfg, h, w, train_frames(cfg)),
                    text_tokens=text_tokens,
                    checkpointing=checkpointing_mode(cfg),
                    params={"transformer": tr.params, "text_encoder": te.params,
                            "vae": vae.params, "lora": lora, "trained": trained},
                    planned=planned, h2d_bytes_per_step=_h2d_per_step(cfg, tr, trained),
                    sources=sources, full_training=full,
                    checkpoint_bytes=trained * (compute_bytes(cfg) if full else 4))


def _h2d_per_step(cfg, tr: TransformerStats, lora: int) -> float:
    """Host-to-device bytes per optimizer step under offload (0 without): ZeRO-3 parameter
    offload fetches every weight for the forward and again for the backward (the
    checkpointed recompute reuses the backward fetch), per micro-step; optimizer offload
    sends the updated LoRA weights back once per step."""
    b = compute_bytes(cfg)
    moved = 0.0
    if cfg.zero_stage == 3 and cfg.offload_param_device != "none":
        moved += 2 * tr.params * b * cfg.gradient_accumulation_steps
    if cfg.zero_stage > 0 and cfg.offload_optimizer_device != "none":
        moved += lora * b
    if getattr(cfg, "enable_model_cpu_offload", False):
        moved += 2 * _base_layout(cfg, tr).block_bytes * cfg.gradient_accumulation_steps
    if getattr(cfg, "enable_optimizer_cpu_offload", False):
        moved += lora * 4
    return moved


def _cpu_dedupe(s: StageEstimate) -> None:
    # On a CPU-only run the weights are loaded once, in place: the "loading" copy is the
    # same memory as the weights the stage then computes with.
    load = s.host.pop("loading", 0.0)
    resident = sum(v for k, v in s.host.items() if k in _WEIGHT_PARTS)
    if load > resident:
        s.host["loading (not reused)"] = load - resident


_WEIGHT_PARTS = ("base weights", "base weights (offloaded)", "text encoder weights",
                 "vae weights", "transformer weights", "lora weights")


def _train(cfg, tr: TransformerStats, lora: int, h: int, w: int, text_tokens: int,
           full: bool = False) -> StageEstimate:
    """The train stage; ``lora`` is the trained parameter count (with ``full``: the whole
    transformer, whose weights are then the trained ones, not a frozen base beside them)."""
    s = StageEstimate("train")
    b = compute_bytes(cfg)
    world = max(1, cfg.num_processes)
    procs = max(1, cfg.processes_per_machine)
    ds = cfg.zero_stage > 0
    zs = cfg.zero_stage
    p_off = zs == 3 and cfg.offload_param_device != "none"
    o_off = ds and cfg.offload_optimizer_device != "none"
    n_tok = (clip_tokens(cfg, h, w, train_frames(cfg)) + text_tokens
             + input_image_tokens(cfg, h, w))
    unit = n_tok * tr.dim * b * cfg.batch_size  # activations grow with the micro-batch
    n = tr.num_layers

    # Frozen base weights.
    if zs == 3:
        thr = cfg.stage3_param_persistence_threshold
        persist = sum(x for x in tr.param_numels if x < thr)
        if not full:
            persist += sum(x for x in tr.lora_numels(cfg.lora_rank, cfg.target_modules())
                           if x < thr)
        live = min(tr.params, max(cfg.stage3_max_live_parameters, tr.largest_module)
                   + cfg.stage3_prefetch_bucket_size)
        s.gpu["gathered parameters"] = live * b
        s.gpu["persistent parameters"] = persist * b
        if p_off:
            s.host["base weights (offloaded)"] = tr.params * b / cfg.num_machines
        else:
            s.gpu["base weights"] = tr.params * b / world
    elif not (full and not ds):  # without DeepSpeed a full fine-tune's weights are fp32
        s.gpu["base weights"] = tr.params * b

    # Trained weights (the LoRA's; in a full fine-tune the base weights above), gradients,
    # AdamW.
    if not ds:
        s.gpu["weights + grads + adamw" if full else "lora + adamw"] = lora * ADAM_BYTES_NO_DS
        if world > 1:
            s.gpu["ddp buckets"] = lora * 4
    else:
        lw = lora * b / (world if zs == 3 else 1)
        if full:
            pass
        elif zs == 3 and p_off:
            s.host["lora weights"] = lora * b / cfg.num_machines
        else:
            s.gpu["lora weights"] = lw
        if not (o_off and zs >= 2):  # offloaded ZeRO-2/3 grads go to the host per bucket
            s.gpu["grads" if full else "lora grads"] = lora * b / (world if zs >= 2 else 1)
        opt = lora * (ADAM_STATE_BYTES_DS + GRAD_PARTITION_BYTES_DS) / world
        if o_off:
            s.host["adamw (offloaded)"] = opt * procs
        else:
            s.gpu["adamw"] = opt
        s.gpu["reduce bucket"] = min(lora, cfg.reduce_bucket_size) * b
    if getattr(cfg, "ema_decay", None):  # float32; a full fine-tune's in shards at ZeRO-3
        ema = lora * 4 / (world if full and zs == 3 else 1)
        if cfg.ema_device == "cpu":
            s.host["ema"] = ema * procs
        else:
            s.gpu["ema"] = ema

    # Activations.
    units = ACT_UNITS_SAVED
    if b == 2:
        units += ACT_UNITS_UPCAST
        if not ds:
            units += ACT_UNITS_LORA_CAST
    mode = checkpointing_mode(cfg)
    if mode == "none":
        s.gpu["activations"] = n * units * unit
    elif mode == "torch":
        s.gpu["checkpointed inputs"] = n * unit
        s.gpu["activations"] = units * unit
    elif mode == "offload":
        s.host["checkpointed inputs (offloaded)"] = n * unit * procs
        s.gpu["activations"] = (units + 1) * unit
    else:  # deepspeed
        if cfg.cpu_checkpointing:
            s.host["checkpointed inputs (offloaded)"] = n * unit * procs
            s.gpu["activations"] = (2 * units + 1) * unit
        else:
            s.gpu["checkpointed inputs"] = n * unit
            s.gpu["activations"] = 2 * units * unit
        s.notes.append("DeepSpeed checkpointing runs the first block plainly")
    s.gpu["backward buffers"] = ACT_UNITS_BACKWARD * unit

    # Host: the transformer passes through host memory while loading, except under ZeRO-3
    # with zero3_init_flag, where it is built partitioned and filled one tensor at a time.
    if zs == 3 and cfg.zero3_init_flag:
        load = tr.largest_module * b * procs
    else:
        load = tr.params * b * procs
        if procs > 1:
            s.notes.append(f"each of the {procs} processes reads the whole transformer "
                           f"on the host")
    steady = sum(s.host.values())
    if load > steady:
        s.host["loading"] = load - steady
    return s


def _text_encode(te: ComponentStats, tokens: int, b: int) -> float:
    """Prompt encoding activations: every layer's hidden state (the pipeline asks for all
    of them), one layer's temporaries and the LM head's logits, per token."""
    return tokens * ((te.layers + 1) * te.hidden + te.intermediate + 4 * te.hidden
                     + te.vocab) * b


def _vae_decode(vae: ComponentStats, h: int, w: int, b: int, tiled: bool) -> float:
    """VAE decoder peak; tiled: one tile at a time, plus the decoded tiles and the image."""
    if not tiled:
        return VAE_DECODE_UNITS * vae.base_dim * h * w * b
    th, tw = min(h, VAE_TILE), min(w, VAE_TILE)
    return VAE_DECODE_UNITS * vae.base_dim * th * tw * b + 3 * 3 * h * w * b


def _peak_phase(s: StageEstimate, phases: list[tuple[str, dict[str, float]]]) -> None:
    """Put the phase with the largest sum on the GPU; name the others in a note."""
    name, parts = max(phases, key=lambda ph: sum(ph[1].values()))
    s.gpu.update(parts)
    others = ", ".join(f"{n} {sum(p.values()) / GB:.1f} GB" for n, p in phases if n != name)
    s.notes.append(f"peak while {name}" + (f" (then: {others})" if others else ""))


def _data_process(cfg, te: ComponentStats, vae: ComponentStats, h: int, w: int,
                  text_tokens: int, device: str = "cuda") -> StageEstimate:
    s = StageEstimate("data_process")
    b = compute_bytes(cfg)
    procs = max(1, cfg.processes_per_machine)
    mode = cfg.data_process_offload if device == "cuda" else "none"
    te_w, vae_w = _encoder_bytes(cfg, "text_encoder", te, b), vae.params * b
    text = {"text encode": _text_encode(te, text_tokens + PROMPT_TEMPLATE_TOKENS, b)}
    image = {"vae encode": VAE_ENCODE_UNITS * vae.base_dim * h * w * b}
    if mode == "none":
        s.gpu["text encoder weights"] = te_w
        s.gpu["vae weights"] = vae_w
        _peak_phase(s, [("encoding a prompt", text), ("encoding an image", image)])
        s.host["loading"] = (te_w + vae_w) * procs
    elif mode == "model":
        _peak_phase(s, [("the text encoder is on the GPU", {"text encoder weights": te_w,
                                                          **text}),
                        ("the VAE is on the GPU", {"vae weights": vae_w, **image})])
        s.host["text encoder weights"] = te_w * procs
        s.host["vae weights"] = vae_w * procs
        s.notes.append("model offload: every prompt with the text encoder, then every "
                       "image with the VAE")
    else:
        _peak_phase(s, [("encoding a prompt", {
                            "text encoder: largest module": te.largest_module * b, **text}),
                        ("encoding an image", {
                            "vae: largest module": vae.largest_module * b, **image})])
        s.host["text encoder weights"] = te_w * procs
        s.host["vae weights"] = vae_w * procs
        s.notes.append(f"sequential offload: {(te_w + vae_w) / GB:.1f} GB of weights move "
                       f"host->device per sample")
    if device != "cuda" and cfg.data_process_offload != "none":
        s.notes.append("data_process_offload saves no memory without a GPU")
    return s


def _sample(cfg, tr: TransformerStats, te: ComponentStats, vae: ComponentStats, lora: int,
            device: str) -> StageEstimate:
    s = StageEstimate("sample")
    b = 2 if device == "cuda" else 4  # the sample stage renders in bf16 on CUDA, else fp32
    h, w = int(cfg.sample_height), int(cfg.sample_width)
    unit = (clip_tokens(cfg, h, w, cfg.sample_num_frames) + SAMPLE_TEXT_TOKENS) * tr.dim * b
    mode = cfg.sample_cpu_offload if device == "cuda" else "none"
    weights = {"transformer weights": tr.params * b,
               "text encoder weights": _encoder_bytes(cfg, "text_encoder", te, b),
               "vae weights": vae.params * b, "lora weights": lora * b}
    text = {"text encode": _text_encode(te, SAMPLE_TEXT_TOKENS + PROMPT_TEMPLATE_TOKENS, b)}
    denoise = {"denoise": ACT_UNITS_INFERENCE * unit}
    decode = {"vae decode" + (" (tiled)" if cfg.sample_vae_tiling else ""):
              _vae_decode(vae, h, w, b, cfg.sample_vae_tiling)}
    if mode == "none":
        s.gpu.update(weights)
        _peak_phase(s, [("encoding the prompt", text), ("denoising", denoise),
                        ("decoding", decode)])
        s.host["loading"] = sum(weights.values())
    elif mode == "model":
        _peak_phase(s, [
            ("the text encoder is on the GPU",
             {"text encoder weights": weights["text encoder weights"], **text}),
            ("the transformer is on the GPU",
             {"transformer weights": weights["transformer weights"],
              "lora weights": weights["lora weights"], **denoise}),
            ("the VAE is on the GPU", {"vae weights": weights["vae weights"], **decode})])
        s.host.update(weights)
        s.notes.append("model CPU offload: one component on the GPU at a time")
    else:
        _peak_phase(s, [
            ("encoding the prompt",
             {"text encoder: largest module": te.largest_module * b, **text}),
            ("denoising", {"transformer: largest module": tr.largest_module * b, **denoise}),
            ("decoding", {"vae: largest module": vae.largest_module * b, **decode})])
        s.host.update(weights)
        s.notes.append(f"sequential CPU offload: {(tr.params + lora) * b / GB:.0f} GB of "
                       f"weights move host->device per denoising step")
    if device != "cuda" and cfg.sample_cpu_offload != "none":
        s.notes.append("sample_cpu_offload saves no memory without a GPU")
    return s


# ------------------------------------------------------------------------------------------
# Verdicts
# ------------------------------------------------------------------------------------------
def fits(estimate: Estimate, gpu_gb: float | None, host_gb: float | None = None
         ) -> tuple[bool, Msg]:
    """(fits, text for people) for one GPU of ``gpu_gb`` GB (and optionally the host RAM).

    Every planned stage must fit: its GPU figure plus ``CUDA_CONTEXT_GB``. The text names
    the stages that do not fit, their largest part, and a preset to try.
    """
    stages = [estimate.stages[s] for s in estimate.planned if s in estimate.stages] or list(
        estimate.stages.values())
    host = max(stages, key=lambda s: s.host_bytes)
    host_ok = host_gb is None or host.host_gb <= host_gb
    host_text = (Msg("estimate.host_of", gb=host.host_gb, stage=host.stage, total=host_gb)
                 if host_gb else Msg("estimate.host", gb=host.host_gb, stage=host.stage))
    if estimate.device == "cpu" or not gpu_gb:
        return host_ok, (Msg("estimate.cpu_fits", host=host_text) if host_ok
                         else Msg("estimate.cpu_no_fit", host=host_text))
    bad, good = [], []
    for s in stages:
        need = s.gpu_gb + CUDA_CONTEXT_GB
        top = max(s.gpu.items(), key=lambda kv: kv[1])[0] if s.gpu else "-"
        (bad if need > gpu_gb else good).append((s.stage, need, top))
    if bad:
        needs = [Msg("estimate.needs", stage=st, gb=need, part=top) for st, need, top in bad]
        within = (Msg("estimate.within",
                      stages=[Msg("estimate.stage_gb", stage=st, gb=need) for st, need, _ in good])
                  if good else "")
        hints: list[Msg] = []
        bad_stages = {st for st, _, _ in bad}
        if "data_process" in bad_stages:
            gpu = estimate.stages["data_process"].gpu
            if "text encoder weights" in gpu and "vae weights" in gpu:
                hints.append(Msg("estimate.hint_stage1_both"))
            elif "text encoder weights" in gpu or "vae weights" in gpu:
                hints.append(Msg("estimate.hint_stage1_one"))
            else:
                hints.append(Msg("estimate.hint_stage1_streams"))
        if "train" in bad_stages:
            hints.append(Msg("estimate.hint_preset", preset=recommend_preset(gpu_gb)))
        if "sample" in bad_stages:
            gpu = estimate.stages["sample"].gpu
            if any(k.endswith("weights") for k in gpu):
                hints.append(Msg("estimate.hint_sample_weights"))
            elif "vae decode" in gpu:
                hints.append(Msg("estimate.hint_sample_decode"))
            else:
                hints.append(Msg("estimate.hint_sample_size"))
        return False, Msg("estimate.no_fit_gpu", gpu=gpu_gb, needs=needs, within=within,
                          hints=[Msg("estimate.hint", hint=h) for h in hints], host=host_text)
    if not host_ok:
        return False, Msg("estimate.no_fit_host", host=host_text)
    peak = max(good, key=lambda g: g[1])
    tight = Msg("estimate.tight") if peak[1] > 0.9 * gpu_gb else ""
    return True, Msg("estimate.fits_gpu", gpu=gpu_gb, stage=peak[0], gb=peak[1], tight=tight,
                     host=host_text)


def _preset_config(name: str):
    return load_preset(name)


def recommend_preset(gpu_gb: float | None, num_gpus: int = 1,
                     model_config: dict[str, Any] | None = None,
                     family: str | None = None) -> str:
    """The fastest of the family's bundled presets whose every stage (cache, train,
    sample) fits ``gpu_gb`` (per GPU).

    The family lists its presets from the most GPU memory to the least
    (``FamilySpec.presets_by_vram``); a preset that trains on several processes is tried
    only with ``num_gpus`` > 1, with that many. No GPU (None or 0) → the CPU demo. When none
    fits the last (the smallest footprint there is) is returned.
    """
    if not gpu_gb or gpu_gb <= 0:
        return CPU_PRESET
    order = family_spec(family or default_family()).presets_by_vram
    for name in order:
        try:
            cfg = _preset_config(name)
        except Exception:
            continue
        if cfg.num_processes > 1:
            if num_gpus < 2:
                continue
            cfg = cfg.model_copy(update={"num_processes": num_gpus})
        est = estimate_memory(cfg, model_config)
        if all(est.stages[st].gpu_gb + CUDA_CONTEXT_GB <= gpu_gb for st in est.planned):
            return name
    return order[-1]


def estimate_for_preset(name: str, model_config: dict[str, Any] | None = None,
                        **overrides: Any) -> Estimate:
    cfg = _preset_config(name)
    if overrides:
        cfg = cfg.model_copy(update=overrides)
    return estimate_memory(cfg, copy.deepcopy(model_config) if model_config else None)


# ------------------------------------------------------------------------------------------
# Low VRAM without DeepSpeed: a quantized base, layer offload, optimizer offload
# ------------------------------------------------------------------------------------------
# Stored bits per quantized weight, scales included (see the module docstring).
QUANT_BITS = {"bitsandbytes_nf4": 4 + 8 / 64 + 32 / (64 * 256),
              "bitsandbytes_fp4": 4 + 8 / 64 + 32 / (64 * 256),  # nf4's blocks and scales
              "bitsandbytes_int8": 8, "torchao_int8": 8, "torchao_fp8": 8}
# Relative compute time of a step on a resident quantized base against bf16 (dequantizing
# every weight on the fly): published figures for the default family (SimpleTuner, H100): int8
# 2.64 s vs bf16 1.20 s per step; nf4 and fp8 weight-only dequantize the same way.
QUANT_COMPUTE_FACTOR = 2.2


@dataclass(frozen=True)
class BaseLayout:
    """The frozen transformer's bytes as stored for a run: in the offloaded blocks (total
    and the largest block) and outside them; quantized weights at their method's size."""

    block_bytes: float
    largest_block: float
    resident_bytes: float
    largest_linear: float
    quantized_params: int


def _base_layout(cfg, tr: TransformerStats) -> BaseLayout:
    b = compute_bytes(cfg)
    family = get_family(cfg.model_family)
    entry = next(iter(entries_for(cfg, "transformer")), None)
    skip = (entry.skip if entry.skip is not None else tuple(family.quantize_skip)
            ) if entry else ()
    blocks: dict[str, float] = {}
    resident = float(tr.params - sum(i * o for _, i, o in tr.linears)) * b
    largest, quantized = 0.0, 0
    for name, i, o in tr.linears:
        parts = name.split(".")
        block = ".".join(parts[:2]) if parts[0] in family.offload_blocks and len(parts) > 2 \
            else None
        if entry and not _skipped(name, skip):
            size = i * o * QUANT_BITS[entry.method] / 8 + (o * 4 if entry.bits == 8 else 0)
            quantized += i * o
        else:
            size = i * o * b
        largest = max(largest, i * o * b)
        if block is None:
            resident += size
        else:
            blocks[block] = blocks.get(block, 0.0) + size
    return BaseLayout(block_bytes=sum(blocks.values()),
                      largest_block=max(blocks.values(), default=0.0),
                      resident_bytes=resident, largest_linear=largest,
                      quantized_params=quantized)


def _lowvram_train(cfg, tr: TransformerStats, lora: int, s: StageEstimate) -> StageEstimate:
    """The train stage with the low-VRAM options applied (unchanged without them)."""
    quant = bool(entries_for(cfg, "transformer"))
    offload = bool(getattr(cfg, "enable_model_cpu_offload", False))
    opt_off = bool(getattr(cfg, "enable_optimizer_cpu_offload", False))
    if cfg.zero_stage > 0 or not (quant or offload or opt_off):
        return s
    b = compute_bytes(cfg)
    layout = _base_layout(cfg, tr)
    s.gpu.pop("base weights", None)
    if offload:
        s.gpu["base weights (resident)"] = layout.resident_bytes
        s.gpu["offloaded blocks (running + prefetched)"] = 2 * layout.largest_block
        s.host["base weights (pinned, offloaded)"] = layout.block_bytes
        s.notes.append(f"layer offload moves {2 * layout.block_bytes / GB:.1f} GB host->device "
                       f"per micro-step")
    else:
        s.gpu["base weights" + (" (quantized)" if quant else "")] = (
            layout.resident_bytes + layout.block_bytes)
    if quant:
        s.gpu["dequantized weight"] = layout.largest_linear
    if opt_off:
        s.gpu.pop("lora + adamw", None)
        s.gpu["lora weights + grads"] = lora * 8
        s.host["adamw (offloaded)"] = lora * 16
    # The transformer is read on the host in the compute dtype, then quantized / moved.
    load = tr.params * b
    s.host.pop("loading", None)
    steady = sum(s.host.values())
    if load > steady:
        s.host["loading"] = load - steady
    return s


def _encoder_bytes(cfg, component: str, stats: ComponentStats, b: int) -> float:
    """A frozen encoder's weight bytes; with a ``quant_options`` entry for it, every linear
    layer at the method's size (counted as all parameters but the token embedding and the
    LM head, vocab x hidden each; the skip list is taken as small)."""
    entry = next(iter(entries_for(cfg, component)), None)
    if entry is None:
        return stats.params * b
    kept = min(stats.params, 2 * stats.vocab * stats.hidden)
    return (stats.params - kept) * QUANT_BITS[entry.method] / 8 + kept * b


@dataclass
class MethodRow:
    """One way to train the run on a single GPU, for the side-by-side comparison."""

    name: str
    label: Msg
    changes: dict[str, Any]            # the fields to set (one click applies them)
    gpu_bytes: float                   # train stage, + CUDA_CONTEXT_GB when compared
    host_bytes: float
    bus_bytes_per_step: float
    transfer_bound_s: float            # bus bytes / bandwidth: no step is faster
    compute_factor: float              # relative compute per step (1: bf16 resident)
    fits: bool
    why: Msg

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "label": self.label, "changes": dict(self.changes),
                "gpu_gb": round(self.gpu_bytes / GB, 2),
                "host_gb": round(self.host_bytes / GB, 2),
                "bus_gb_per_step": round(self.bus_bytes_per_step / GB, 2),
                "transfer_bound_s": round(self.transfer_bound_s, 3),
                "compute_factor": self.compute_factor, "fits": self.fits, "why": self.why}


def _trained_source(cfg) -> str:
    family = get_family(cfg.model_family)
    trained = family.spec.trained_component
    for entry in str(cfg.model_id_with_origin_paths or "").split(","):
        entry = entry.strip()
        if ":" in entry and entry.split(":", 1)[1].startswith(trained + "/"):
            return entry
    return family.spec.default_source(trained) or f"model:{trained}/*.safetensors"


def method_changes(cfg) -> list[tuple[str, Msg, dict[str, Any]]]:
    """(name, label, field changes) of every single-GPU method, from the plain one to the
    least GPU memory: the LoRA's, then a full fine-tune's (``full_*``). The changes are
    complete: applying one row's changes to ``cfg`` gives that method whatever was set
    before."""
    src = _trained_source(cfg)
    off = {"zero_stage": 0, "offload_param_device": "none", "offload_optimizer_device": "none",
           "num_processes": 1, "use_gradient_checkpointing": True}
    plain = {**off, "enable_model_cpu_offload": False, "enable_optimizer_cpu_offload": False,
             "quant_options": None, "fp8_models": None}

    def q(method: str) -> dict[str, Any]:
        return {**plain, "quant_options": f"{src}:{method}"}

    layer = {**plain, "enable_model_cpu_offload": True, "enable_optimizer_cpu_offload": True}
    plain = {**plain, "trainable_models": None}
    # A full fine-tune (trainable_models): the LoRA's own options back at their defaults,
    # which the rules ask of it; nothing that needs a frozen base.
    defaults = family_defaults(*family_of(cfg.to_dict()))
    whole = {**plain, **{k: defaults[k] for k in LORA_ONLY}, "trainable_models": "dit",
             "preset_lora_path": None}
    lora_rows = [
        ("plain", Msg("method.plain"), plain),
        ("fp8", Msg("method.fp8"), q("torchao_fp8")),
        ("int8", Msg("method.int8"), q("torchao_int8")),
        ("nf4", Msg("method.nf4"), q("bitsandbytes_nf4")),
        ("layer_offload", Msg("method.layer_offload"), layer),
        ("layer_offload_int8", Msg("method.layer_offload_int8"),
         {**layer, "quant_options": f"{src}:bitsandbytes_int8"}),
        ("layer_offload_nf4", Msg("method.layer_offload_nf4"),
         {**layer, "quant_options": f"{src}:bitsandbytes_nf4"}),
        ("zero3_offload", Msg("method.zero3_offload"),
         {**plain, "zero_stage": 3, "offload_param_device": "cpu",
          "offload_optimizer_device": "cpu", "zero3_init_flag": True}),
    ]
    full_rows = [
        ("full_plain", Msg("method.full_plain"), whole),
        ("full_zero2_offload", Msg("method.full_zero2_offload"),
         {**whole, "zero_stage": 2, "offload_optimizer_device": "cpu"}),
        ("full_zero3_offload", Msg("method.full_zero3_offload"),
         {**whole, "zero_stage": 3, "offload_param_device": "cpu",
          "offload_optimizer_device": "cpu", "zero3_init_flag": True}),
    ]
    return lora_rows + full_rows


def compare_methods(cfg, gpu_bytes: float | None, bandwidth: float = 25e9,
                    model_config: dict[str, Any] | None = None,
                    host_bytes: float | None = None) -> tuple[list[MethodRow], str | None]:
    """Every single-GPU method for ``cfg``'s model, LoRA and resolution side by side: the
    train stage's GPU bytes (+ the CUDA context), host RAM, bytes crossing the bus per
    optimizer step, and the transfer-bound step time at ``bandwidth`` bytes/s host->device
    (PCIe 4.0 x16 moves about 25 GB/s, 5.0 about 50). Returns (rows, the name of the
    recommended row or None when none fits): the fitting method with the smallest
    transfer bound, then the least compute (bf16 before a quantized base, which
    dequantizes every weight each step). A suggestion: nothing is applied here; a row's
    ``changes`` are the fields the user sets with one click."""
    rows: list[MethodRow] = []
    for name, label, changes in method_changes(cfg):
        c = cfg.model_copy(update=changes)
        est = estimate_memory(c, copy.deepcopy(model_config) if model_config else None)
        tr = est.stages["train"]
        gpu = tr.gpu_bytes + CUDA_CONTEXT_GB * GB
        bus = est.h2d_bytes_per_step
        quant = bool(changes.get("quant_options"))
        factor = QUANT_COMPUTE_FACTOR if quant else 1.0
        ok = (gpu_bytes is None or gpu <= gpu_bytes) and (
            host_bytes is None or tr.host_bytes <= host_bytes)
        t = bus / bandwidth if bandwidth else 0.0
        why = Msg("method.why", gpu=gpu / GB,
                  of=Msg("method.of", total=gpu_bytes / GB) if gpu_bytes else "",
                  host=tr.host_bytes / GB,
                  bus=(Msg("method.bus", gb=bus / GB, seconds=t, bandwidth=bandwidth / 1e9)
                       if bus else Msg("method.no_bus")),
                  quant=Msg("method.quant", factor=factor) if quant else "")
        rows.append(MethodRow(name, label, changes, gpu, tr.host_bytes, bus, t, factor, ok,
                              why))
    # Recommended: a way of the kind the run trains (a LoRA, or a full fine-tune).
    kind = "full_" if getattr(cfg, "full_training", False) else ""
    fitting = [r for r in rows if r.fits and r.name.startswith("full_") == bool(kind)]
    best = min(fitting, key=lambda r: (r.transfer_bound_s, r.compute_factor),
               default=None)
    return rows, best.name if best else None


# ------------------------------------------------------------------------------------------
# Captioning (backend/data/captions.py): what the captioning model needs
# ------------------------------------------------------------------------------------------
# Tokens of one captioned image besides its caption: the image at the caption area
# (backend.families.captioner.IMAGE_AREA, 28x28 pixels a token after the 2x2 merge) and the prompt.
CAPTION_IMAGE_TOKENS = 768 * 768 // (28 * 28)
CAPTION_PROMPT_TOKENS = 64
CAPTION_OVERHEAD = 1.1  # the allocator's slack over what the tensors need


def caption_estimate(cfg, config: dict[str, Any] | None = None) -> dict[str, Any]:
    """What captioning needs, before anything loads: {"params", "weights_gb" (bf16),
    "gpu_gb": {"none", "sequential"}, "host_gb": {"none", "sequential"}, "batch",
    "source"}. ``config``: the captioning model's config.json (a ``captioner_path``
    folder's, read by the caller through its read gate); None: the family's text encoder
    (found on disk, else the published one). GPU: weights (bf16; sequential: the largest
    module at a time) + per image of a batch the KV cache and one layer's prefill
    activations over image, prompt and caption tokens."""
    source = "captioner_path"
    if config is None:
        configs, where = model_configs(cfg)
        config, source = configs["text_encoder"], where["text_encoder"]
    stats = _text_encoder_stats(_key(config))
    text = config.get("text_config") or config
    heads = int(text.get("num_attention_heads") or 1)
    kv_dim = int(text.get("num_key_value_heads") or heads) * (stats.hidden // heads)
    b = 2  # bf16 on a GPU
    tokens = CAPTION_IMAGE_TOKENS + CAPTION_PROMPT_TOKENS + int(cfg.caption_max_length)
    per_image = tokens * (2 * stats.layers * kv_dim + 4 * stats.hidden
                          + 2 * stats.intermediate) * b + stats.vocab * 4
    activations = int(cfg.caption_batch_size) * per_image
    weights = stats.params * b
    gpu = {"none": (weights + activations) * CAPTION_OVERHEAD,
           "sequential": (stats.largest_module * b + activations) * CAPTION_OVERHEAD}
    return {"params": stats.params, "weights_gb": round(weights / GB, 2),
            "gpu_gb": {k: round(v / GB, 2) for k, v in gpu.items()},
            "host_gb": {"none": round(weights / GB, 2), "sequential": round(weights / GB, 2)},
            "batch": int(cfg.caption_batch_size), "source": source}


def caption_estimate_line(est: dict[str, Any]) -> str:
    """The estimate as one line for the Dataset tab (``webui.messages`` has its Chinese)."""
    return (f"Captioning model: {est['params'] / 1e9:.2f} B parameters, "
            f"{est['weights_gb']:.1f} GB in bf16. GPU at batch {est['batch']}: about "
            f"{est['gpu_gb']['none']:.1f} GB (none), {est['gpu_gb']['sequential']:.1f} GB "
            f"(sequential, weights in host RAM).")
