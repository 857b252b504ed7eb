"""Helpers every family shares: block checkpointing (torch or DeepSpeed's), partitioned
loading under ZeRO-3, a model folder's weight files, the parts of a tiny pipeline builder, a
pipeline's five components, stage 1's offloading encoder and the component loaders more than
one family uses. Nothing here depends on an architecture; importing it is cheap (torch is
imported inside the functions).
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

from backend.core.media import frame_strip, write_video
from backend.core.messages import Msg
from backend.families.base import SCHEDULER, TOKENIZER, Component


def any_requires_grad(args: tuple[Any, ...]) -> bool:
    """Whether any tensor among ``args`` (looking inside tuples/lists) requires grad."""
    import torch

    for a in args:
        if isinstance(a, torch.Tensor) and a.requires_grad:
            return True
        if isinstance(a, (tuple, list)) and any_requires_grad(tuple(a)):
            return True
    return False


def block_checkpointing_func(offload: bool = False) -> Callable[..., Any]:
    """The per-block checkpoint function plugged into a diffusers model.

    Called as ``fn(block, *args)`` by the model's block loop (diffusers'
    ``enable_gradient_checkpointing(gradient_checkpointing_func=fn)``).

    - When DeepSpeed's activation checkpointing is configured (the DeepSpeed config has an
      ``activation_checkpointing`` block; see ``configure_deepspeed_checkpointing``): a block
      none of whose tensor inputs requires grad runs plainly (the first block in LoRA
      training: reentrant checkpointing would cut its LoRA gradients), every other block
      goes through ``deepspeed.checkpointing.checkpoint`` (reentrant, positional inputs).
    - Otherwise torch checkpointing (``use_reentrant=False``), inside
      ``torch.autograd.graph.save_on_cpu()`` when ``offload`` is on.
    """
    import torch
    import torch.utils.checkpoint

    def checkpoint_block(block, *args):
        try:
            import deepspeed
            ds_on = deepspeed.checkpointing.is_configured()
        except ImportError:
            ds_on = False
        if ds_on:
            if not any_requires_grad(args):
                return block(*args)
            return deepspeed.checkpointing.checkpoint(block, *args)
        if offload:
            with torch.autograd.graph.save_on_cpu(pin_memory=torch.cuda.is_available()):
                return torch.utils.checkpoint.checkpoint(block, *args, use_reentrant=False)
        return torch.utils.checkpoint.checkpoint(block, *args, use_reentrant=False)

    return checkpoint_block


def configure_deepspeed_checkpointing(ds_config: dict | None) -> bool:
    """Configure DeepSpeed's activation checkpointing from the config's
    ``activation_checkpointing`` block (call after ``accelerator.prepare``).
    Returns whether it was configured."""
    if not ds_config or "activation_checkpointing" not in ds_config:
        return False
    import deepspeed

    act = ds_config["activation_checkpointing"] or {}
    deepspeed.checkpointing.configure(
        mpu_=None,
        partition_activations=bool(act.get("partition_activations", False)),
        checkpoint_in_cpu=bool(act.get("cpu_checkpointing", False)),
        contiguous_checkpointing=bool(act.get("contiguous_memory_optimization", False)),
    )
    return True


def frozen(model, device):
    """A loaded component on ``device``, in eval mode, with no gradients: what every family
    loads its text encoders, VAEs and other components it does not train as."""
    return model.to(device).eval().requires_grad_(False)


def quiet_image_processor(cls, folder=None, **config):
    """transformers' image processor ``cls`` from ``folder`` (else built from ``config``).
    Where torchvision is absent transformers picks the processor's PIL form, which computes
    the same pixels, and warns that it did: the warning is dropped."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return cls.from_pretrained(str(folder)) if folder is not None else cls(**config)


def first_frame_image(images: list | None):
    """An image-to-video sample's first frame (``images[0]``, PIL RGB); none is refused."""
    if not images:
        raise ValueError(Msg("data.sample_first_frame_missing"))
    return images[0].convert("RGB")


def check_first_frame_inputs(sample: dict[str, Any], keys: tuple[str, ...]) -> None:
    """Refuse a cached sample without an image-to-video model's first-frame ``keys`` (a
    cache written for text-to-video)."""
    if any(k not in sample for k in keys):
        raise ValueError(Msg("data.cache_without_first_frame"))


def weight_files(folder) -> list:
    """The safetensors weight files of a model folder (from its index when sharded)."""
    import json
    from pathlib import Path

    folder = Path(folder)
    index = sorted(folder.glob("*.safetensors.index.json"))
    if index:
        shards = sorted(set(json.loads(index[0].read_text())["weight_map"].values()))
        return [folder / s for s in shards]
    return sorted(p for p in folder.glob("*.safetensors") if not p.name.startswith("."))


def load_partitioned(model_cls, folder, dtype, remote_device: str | None = None):
    """Build a diffusers model partitioned from the start (DeepSpeed ZeRO-3 with
    ``zero3_init_flag``) and fill it from its safetensors files.

    The model is created under ``deepspeed.zero.Init`` with the DeepSpeed config accelerate
    registered (no random init), so no process ever holds the whole model; then each
    parameter is gathered in turn, rank 0 copies its tensor in from the file and the
    parameter is partitioned again. ``remote_device="cpu"`` keeps the partitions in host
    memory (``initialize_model_on_cpu``).
    """
    import deepspeed
    import torch
    from diffusers.models.modeling_utils import no_init_weights
    from safetensors import safe_open
    from transformers.integrations import deepspeed_config

    ds_config = deepspeed_config()
    if ds_config is None:
        raise RuntimeError("load_partitioned needs accelerate's DeepSpeed plugin with "
                           "zero3_init_flag (no DeepSpeed config is registered)")
    config = model_cls.load_config(str(folder))
    # The precision goes in through the config, not ``dtype``: DeepSpeed (0.19) takes its
    # accelerator's half type over a float32 ``dtype``, but reads the config's flags as given.
    import copy

    init_config = copy.deepcopy(ds_config)
    init_config.setdefault("bf16", {})["enabled"] = dtype == torch.bfloat16
    init_config.setdefault("fp16", {})["enabled"] = dtype == torch.float16
    init_kwargs = {"config_dict_or_path": init_config, "dtype": None}
    if remote_device:
        init_kwargs["remote_device"] = remote_device
    with deepspeed.zero.Init(**init_kwargs), no_init_weights():
        model = model_cls.from_config(config)
    params = dict(model.named_parameters())
    buffers = dict(model.named_buffers())
    main = not torch.distributed.is_initialized() or torch.distributed.get_rank() == 0
    loaded = set()
    for file in weight_files(folder):
        with safe_open(str(file), framework="pt") as f:
            for key in sorted(f.keys()):
                if key in buffers:
                    buffers[key].data.copy_(f.get_tensor(key))
                    loaded.add(key)
                    continue
                param = params.get(key)
                if param is None:
                    continue
                with deepspeed.zero.GatheredParameters([param], modifier_rank=0):
                    if main:
                        param.data.copy_(f.get_tensor(key).to(param.dtype))
                loaded.add(key)
    missing = sorted(set(params) - loaded)
    if missing:
        raise RuntimeError(f"{folder}: weights missing for {len(missing)} parameters, e.g. "
                           f"{', '.join(missing[:3])}")
    return model.eval()


# ------------------------------------------------------------------------------------------
# Tiny pipelines (``build_tiny``): the parts every family's builder writes the same way
# ------------------------------------------------------------------------------------------
# What the tiny video families' tokenizers are trained on (clips' captions of the tests).
CLIP_SENTENCES = [
    "a red ball rolls from left to right on a white floor",
    "a blue square slides up and down over a black background",
    "a green dot moves in a circle, zlr style, zerolora",
    "the camera pans slowly across a yellow field at sunset",
    "red green blue yellow purple orange black white gray ball square dot circle",
    "0 1 2 3 4 5 6 7 8 9 . , : ; ! ? ' \" ( ) - _",
]


def train_unigram(sentences: list[str], special_tokens: list[str], vocab_size: int = 160):
    """A ``tokenizers`` unigram model (as a sentencepiece one: NFKC, Metaspace), trained on
    ``sentences`` (four times over) up to ``vocab_size`` tokens, ``<unk>`` the unknown
    token; the caller adds its post-processor and wraps it as its family's tokenizer."""
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers

    tok = Tokenizer(models.Unigram())
    tok.normalizer = normalizers.NFKC()
    tok.pre_tokenizer = pre_tokenizers.Metaspace()
    tok.decoder = decoders.Metaspace()
    trainer = trainers.UnigramTrainer(vocab_size=vocab_size, special_tokens=special_tokens,
                                      unk_token="<unk>", show_progress=False)
    tok.train_from_iterator(list(sentences) * 4, trainer=trainer)
    return tok


def train_byte_level_bpe(sentences: list[str], vocab_size: int):
    """A ``tokenizers`` byte-level BPE with Qwen2's pre-tokenizer, trained on ``sentences``
    (four times over) up to ``vocab_size`` tokens; no special tokens added."""
    from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers
    from transformers.models.qwen2.tokenization_qwen2 import PRETOKENIZE_REGEX

    tok = Tokenizer(models.BPE())
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(PRETOKENIZE_REGEX), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, min_frequency=1, special_tokens=[],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    tok.train_from_iterator(list(sentences) * 4, trainer=trainer)
    return tok


def bpe_vocab_and_merges(tok, special_tokens: list[str]) -> tuple[dict[str, int], list]:
    """A trained BPE's vocabulary (``special_tokens`` appended after it) and merges, as a
    ``Qwen2Tokenizer`` takes them."""
    import json

    state = json.loads(tok.to_str())["model"]
    vocab = dict(sorted(state["vocab"].items(), key=lambda kv: kv[1]))
    merges = [tuple(m) if isinstance(m, list) else tuple(m.split(" ")) for m in state["merges"]]
    n = len(vocab)
    for i, sp in enumerate(special_tokens):
        vocab[sp] = n + i
    return vocab, merges


def save_tiny_pipeline(pipeline, out_dir):
    """Write a diffusers ``pipeline`` in the hub layout (safetensors only: a pickled weight
    file is refused); return its folder."""
    from pathlib import Path

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    pipeline.save_pretrained(out, safe_serialization=True)
    leftovers = [p for p in out.rglob("*") if p.suffix in (".bin", ".pt", ".pth", ".pkl")]
    if leftovers:
        raise RuntimeError(f"non-safetensors weights written: {leftovers}")
    return out


# ------------------------------------------------------------------------------------------
# Family specs
# ------------------------------------------------------------------------------------------
def pipeline_components(transformer: tuple[tuple[str, ...], str],
                        text_encoder: tuple[tuple[str, ...], str],
                        vae: tuple[tuple[str, ...], str], tokenizer: str,
                        scheduler: str) -> tuple[Component, ...]:
    """The five components of a text-to-image (or video) diffusers pipeline, each given as
    (class names, default source) or, for the tokenizer and scheduler, its source folder:
    the transformer is trained (stage 2) and renders (samples); the text encoder, VAE and
    tokenizer encode the dataset (stage 1) and render; the scheduler renders."""
    render = ("data_process", "sample")
    return (
        Component("transformer", transformer[0], trained=True, source=transformer[1],
                  stages=("train", "sample")),
        Component("text_encoder", text_encoder[0], source=text_encoder[1], stages=render),
        Component("vae", vae[0], source=vae[1], stages=render),
        Component("tokenizer", source=tokenizer, stages=render, kind=TOKENIZER),
        Component("scheduler", source=scheduler, stages=("sample",), kind=SCHEDULER),
    )


# ------------------------------------------------------------------------------------------
# Stage 1: the frozen encoders and their offload modes
# ------------------------------------------------------------------------------------------
OFFLOAD_MODES = ("none", "model", "sequential")


class OffloadingEncoder:
    """Text encoder + VAE, frozen, with ``data_process_offload``: ``none`` (both on
    ``device``), ``model`` (weights in host RAM; the text encoder on ``device`` for every
    prompt, then the VAE for every image), ``sequential`` (accelerate's ``cpu_offload`` hooks
    stream each module's weights to ``device`` for its forward). Every mode runs the same
    operations on the same inputs.

    A family's encoder gives ``prompt_parts(prompt)`` (the prompt's tensors: its embedding,
    and its mask where the family has one), ``encode_image(pixels)`` and
    ``make_sample(parts, latents, pixels)`` (the cached sample)."""

    # Modules that go to the device with the text encoder (its connectors, a second text
    # encoder): attributes of the encoder, offloaded as it is.
    with_text_encoder: tuple[str, ...] = ()

    def __init__(self, text_encoder, vae, device=None, offload: str = "none"):
        import torch

        if offload not in OFFLOAD_MODES:
            raise ValueError(f"offload: unknown mode (got {offload!r}; allowed "
                             f"{' | '.join(OFFLOAD_MODES)})")
        self.text_encoder, self.vae = text_encoder, vae
        self.device = torch.device(device) if device is not None else text_encoder.device
        self.offload = offload
        if offload == "sequential":
            from accelerate import cpu_offload

            for module in (text_encoder, vae, *(getattr(self, m) for m in self.with_text_encoder)):
                cpu_offload(module, execution_device=self.device)

    def prompt_parts(self, prompt: str) -> tuple:
        raise NotImplementedError

    def encode_image(self, pixels):
        raise NotImplementedError

    def make_sample(self, parts: tuple, latents, pixels) -> dict[str, Any]:
        raise NotImplementedError

    def on_device(self, name: str):
        """A context in which the ``name`` module (with the text encoder, the modules of
        ``with_text_encoder``) sits on ``device`` (``model`` offload: moved there and back to
        host RAM after; the other modes: where it is)."""
        from contextlib import contextmanager

        @contextmanager
        def moved():
            if self.offload != "model":
                yield
                return
            import torch

            names = (name, *self.with_text_encoder) if name == "text_encoder" else (name,)
            modules = [getattr(self, n) for n in names]
            for module in modules:
                module.to(self.device)
            try:
                yield
            finally:
                for module in modules:
                    module.to("cpu")
                if self.device.type == "cuda":
                    torch.cuda.empty_cache()
        return moved()

    # The modules the second pass of ``model`` offload (the images) needs on the device.
    image_modules: tuple[str, ...] = ("vae",)

    def encode_sample(self, pixels, prompt: str) -> dict[str, Any]:
        return self.make_sample(self.prompt_parts(prompt), self.encode_image(pixels), pixels)

    def item_prompt(self, item: tuple) -> tuple:
        """The prompt's tensors of one ``encode_samples`` item (``(load_pixels, prompt)``;
        a family whose prompt is encoded with input images reads them from the item)."""
        return self.prompt_parts(item[1])

    def item_sample(self, parts: tuple, item: tuple) -> dict[str, Any]:
        """One item's sample from its prompt's tensors: its pixels loaded and encoded."""
        pixels = item[0]()
        return self.make_sample(parts, self.encode_image(pixels), pixels)

    def encode_samples(self, items: list[tuple], should_stop: Callable[[], bool] = lambda: False,
                       log=print):
        """Each item's sample, in order; ``model`` offload encodes every prompt first (the
        text encoder on the device), then every image (``image_modules`` on the device).
        Stops between two encodings when asked."""
        from contextlib import ExitStack

        if self.offload != "model":
            for item in items:
                if should_stop():
                    return
                yield self.item_sample(self.item_prompt(item), item)
            return
        prompts = []
        with self.on_device("text_encoder"):
            for item in items:
                if should_stop():
                    return
                prompts.append(tuple(t.cpu() for t in self.item_prompt(item)))
        log(f"[encoder] model offload: {len(prompts)} prompt(s) encoded; text encoder back "
            f"in host RAM, {' and '.join(self.image_modules)} to {self.device}")
        with ExitStack() as stack:
            for name in self.image_modules:
                stack.enter_context(self.on_device(name))
            for item, parts in zip(items, prompts):
                if should_stop():
                    return
                yield self.item_sample(parts, item)


class VideoClips:
    """What every video family's adapter does alike (a mixin before ``Family``): the
    tokens a clip becomes, and a sample written as a clip beside its frame strip.
    ``latent_patch``: latent cells per side of one token (the transformer's patch)."""
    latent_patch = 1

    def video_tokens(self, height: int, width: int, frames: int) -> int:
        """Latent frames ((F - 1) / temporal factor + 1) x latent area / patch area."""
        cell = self.vae_scale_factor * self.latent_patch
        latent_frames = (max(int(frames), 1) - 1) // self.vae_temporal_factor + 1
        return latent_frames * (height // cell) * (width // cell)

    def save_sample(self, result, path, cfg) -> list[Path]:
        """A sample clip and its frame strip (``<name>.strip.png``)."""
        path = Path(path)
        write_video(result, path, fps=cfg.sample_fps)
        strip = path.with_name(path.name[: -len(path.suffix)] + ".strip.png")
        frame_strip(result, 4).save(strip)
        return [path, strip]


def frame_to_pil(frame):
    """A frame [3, H, W] in [-1, 1] (as decoded from uint8) -> the same PIL RGB image."""
    import torch
    from PIL import Image

    arr = ((frame.detach().float().cpu() + 1) * 127.5).round().clamp(0, 255)
    return Image.fromarray(arr.to(torch.uint8).permute(1, 2, 0).numpy())


def cached_sample(latents, pixels, **prompt) -> dict[str, Any]:
    """One training sample as a cache file holds it: the prompt's tensors (``prompt_emb``,
    and ``prompt_emb_mask`` where the family has one), the latents, and the pixel size of
    the image or clip ``pixels`` (``height``, ``width``)."""
    import torch

    return {**prompt, "latents": latents, "height": torch.tensor([pixels.shape[-2]]),
            "width": torch.tensor([pixels.shape[-1]])}


# ------------------------------------------------------------------------------------------
# Stage 2: the noisy latents of flow matching
# ------------------------------------------------------------------------------------------
def noised(sample: dict[str, Any], schedule, index: int, noise, dtype):
    """(x0, noise, sigma, x_t) of a cached ``sample`` at schedule entry ``index``: its
    latents in ``dtype``, ``noise`` there too, the entry's sigma on their device, and
    x_t = (1 - sigma) x0 + sigma noise."""
    x0 = sample["latents"].to(dtype)
    sigma = schedule.sigmas[index].to(x0.device)
    noise = noise.to(device=x0.device, dtype=dtype)
    return x0, noise, sigma, (1 - sigma) * x0 + sigma * noise


def weighted_mse(pred, target, sample: dict[str, Any], latents,
                 pack: Callable[[Any], Any] | None = None):
    """The MSE of ``pred`` against ``target`` (float32), weighted per latent cell by the
    sample's ``loss_mask`` when it has one (``masked_loss``, ``backend.data.masks``): the
    mask ([B, h, w], a clip's [B, F, h, w]) is broadcast over the channels of ``latents``
    (the unpacked latents [B, C, h, w] / [B, C, F, h, w]) and laid out as ``pred`` is by
    ``pack`` (the family's packing into tokens; None: ``pred`` is latent-shaped).

    Normalised as mean(w * err), computed as ``mse_loss(sqrt(w) pred, sqrt(w) target)``; a
    mask of ones is the unweighted MSE itself (the loss and its gradients, bit for bit: a
    weighted sum over a sliced prediction may add up in another order), a cell of weight
    0 gives its prediction no gradient,
    and a half-masked image's loss is about half its unmasked one (as sd-scripts'
    masked loss, which also takes the mean over every element)."""
    import torch
    import torch.nn.functional as F

    mask = sample.get("loss_mask")
    if mask is None or not bool((mask != 1).any()):  # no mask, or all ones: unweighted
        return F.mse_loss(pred.float(), target.float())
    w = mask.to(device=latents.device, dtype=torch.float32).unsqueeze(1)
    w = w.expand(latents.shape).contiguous()
    if pack is not None:
        w = pack(w)
    root = w.sqrt()  # mean(w * err) through mse_loss: ones multiply nothing, bit for bit
    return F.mse_loss(root * pred.float(), root * target.float())


def masked_flow_loss(predict: Callable[..., Any]) -> Callable[..., Any]:
    """``Family.loss_at`` of a family whose ``predict(transformer, x_t, sigma, prompt_emb,
    prompt_mask)`` returns the flow (noise - x0): the MSE against that flow for one cached
    sample at schedule ``index`` with ``noise`` (``weighted_mse``: by its ``loss_mask``),
    times the index's schedule weight."""
    def flow_matching_loss(transformer, sample: dict[str, Any], schedule, index: int, noise,
                           dtype):
        x0, noise, sigma, x_t = noised(sample, schedule, index, noise, dtype)
        device = x0.device
        pred = predict(transformer, x_t.to(dtype), sigma.to(dtype),
                       sample["prompt_emb"].to(device, dtype), sample.get("prompt_emb_mask"))
        loss = weighted_mse(pred, noise - x0, sample, x0)
        return loss * schedule.weights[index].to(device)

    return flow_matching_loss


# ------------------------------------------------------------------------------------------
# Component loaders (``Family.loaders``) more than one family uses
# ------------------------------------------------------------------------------------------
def pipeline_loaders(text_encoder: Callable[..., Any], vae: Callable[..., Any],
                     scheduler: Callable[..., Any] | None = None) -> dict[str, Callable]:
    """``Family.loaders`` of the five components of ``pipeline_components``: the family's
    text encoder and VAE loaders, the ``AutoTokenizer``, and its scheduler's loader
    (default ``FlowMatchEulerDiscreteScheduler``'s)."""
    return {"text_encoder": text_encoder, "vae": vae, "tokenizer": load_tokenizer,
            "scheduler": scheduler or load_flow_match_scheduler}


def load_tokenizer(folder):
    """A tokenizer folder, through ``AutoTokenizer``."""
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(folder))


def load_chat_tokenizer(folder):
    """The tokenizer of a vision-language processor's folder, with the processor's chat
    template: what encoding text prompts needs of a processor whose class cannot be built
    without torchvision (``PixtralProcessor``). ``AutoTokenizer`` reads a
    ``chat_template.jinja`` beside the tokenizer; a template kept in a processor's older
    files (``chat_template.json``, or ``processor_config.json``'s ``chat_template``) is read
    from there. For text-only messages the tokenizer's ``apply_chat_template`` gives the
    processor's ids: both render the same template, and neither adds special tokens to a
    prompt the template starts with its own BOS."""
    import json
    from pathlib import Path

    tokenizer = load_tokenizer(folder)
    if tokenizer.chat_template is None:
        for name in ("chat_template.json", "processor_config.json"):
            try:
                data = json.loads((Path(folder) / name).read_text(encoding="utf-8"))
            except (OSError, ValueError):
                continue
            if isinstance(data, dict) and isinstance(data.get("chat_template"), str):
                tokenizer.chat_template = data["chat_template"]
                break
    if tokenizer.chat_template is None:
        raise ValueError(f"{folder}: no chat template (chat_template.jinja, "
                         f"chat_template.json or processor_config.json)")
    return tokenizer


def load_flow_match_scheduler(folder):
    """A ``FlowMatchEulerDiscreteScheduler`` scheduler folder (the image families' samples)."""
    from diffusers import FlowMatchEulerDiscreteScheduler

    return FlowMatchEulerDiscreteScheduler.from_pretrained(str(folder))
