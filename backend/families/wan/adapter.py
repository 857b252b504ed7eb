"""Wan 2.1 text-to-video adapter: components, prompt/clip encoding, the training loss, samples.

Components are diffusers' ``WanTransformer3DModel`` and ``AutoencoderKLWan``, transformers'
``UMT5EncoderModel`` and its tokenizer (the ``-Diffusers`` layout). Prompt encoding is
``WanPipeline.encode_prompt`` (512 tokens, the last hidden state, the prompt's own tokens
kept and the rest zeroed), run through a pipeline holding only the encoders; the cache
keeps the prompt's own rows and stage 2 pads them back with zeros to 512, so the
transformer sees exactly what the pipeline feeds it. Latents are the VAE posterior mean
normalised as the pipeline undoes it before decoding: ``(z - latents_mean) / latents_std``.

The loss is the reference trainer's Wan flow matching: 1000 sigmas from
linspace(1, 0, 1001)[:-1] shifted with shift 5 (s' = 5 s / (1 + 4 s)), timestep 1000 s',
x_t = (1 - s') x0 + s' noise, target noise - x0 (what the transformer predicts: diffusers'
scheduler uses it as the flow), MSE weighted by exp(-2 ((t - 500) / 1000)^2) shifted to 0
and normalised to mean 1.

Cached sample tensors (one safetensors file per clip, see backend/data/cache.py):
``prompt_emb`` [1, L, 4096] (L the prompt's tokens, at most 512), ``latents``
[1, 16, (F - 1) / 4 + 1, H / 8, W / 8], ``height``, ``width``, ``frames``; image-to-video
adds ``image_embeds`` and ``condition`` (``i2v.py``).
"""
from __future__ import annotations

import json
from contextlib import ExitStack
from pathlib import Path
from typing import Any, Callable, Iterator

from backend.families.base import Family, Schedule, uniform_index_loss
from backend.families.common import (OffloadingEncoder, VideoClips, cached_sample, frozen,
                                     noised, pipeline_loaders, weighted_mse)
from backend.families.wan import checkpoint
from backend.families.wan.native import from_native, to_native
from backend.families.wan.published import CONFIGS, VARIANT_CONFIGS

NUM_TRAIN_TIMESTEPS = 1000
MAX_SEQUENCE_LENGTH = 512          # WanPipeline's default
TRAIN_SHIFT = 5.0                  # the reference trainer's Wan scheduler


# ------------------------------------------------------------------------------------------
# Loading
# ------------------------------------------------------------------------------------------
def transformer_class():
    from diffusers import WanTransformer3DModel
    return WanTransformer3DModel


def load_text_encoder(folder: str | Path, dtype=None, device: str | Any = "cpu"):
    from transformers import UMT5EncoderModel

    model = UMT5EncoderModel.from_pretrained(str(folder), dtype=dtype)
    return frozen(model, device)


def load_vae(folder: str | Path, dtype=None, device: str | Any = "cpu"):
    """The VAE, in float32 as the pipeline's model card runs it (its 3D convolutions lose
    detail in bf16); ``dtype`` is accepted for the contract's sake."""
    import torch
    from diffusers import AutoencoderKLWan

    model = AutoencoderKLWan.from_pretrained(str(folder), torch_dtype=torch.float32)
    return frozen(model, device)


def load_scheduler(folder: str | Path):
    from diffusers import UniPCMultistepScheduler

    return UniPCMultistepScheduler.from_pretrained(str(folder))


class Encoder(OffloadingEncoder):
    """Text encoder + VAE (+ tokenizer), frozen: prompts -> embeddings, clips -> latents.

    ``offload`` (``data_process_offload``): none | model | sequential, as for the image
    families (``OffloadingEncoder``); every mode computes the same tensors.
    """

    def __init__(self, text_encoder, tokenizer, vae, device=None, offload: str = "none"):
        from diffusers import WanPipeline

        self.pipe = WanPipeline(tokenizer=tokenizer, text_encoder=text_encoder, vae=vae,
                                scheduler=None, transformer=None)
        super().__init__(text_encoder, vae, device=device, offload=offload)

    def encode_prompt(self, prompt: str):
        """prompt_emb [1, L, D]: ``WanPipeline``'s embedding with its zero padding cut off
        (L: the prompt's tokens, ``</s>`` included)."""
        import torch

        with torch.no_grad():
            emb = self.pipe.encode_prompt(prompt, do_classifier_free_guidance=False,
                                          max_sequence_length=MAX_SEQUENCE_LENGTH,
                                          device=self.device,
                                          dtype=self.text_encoder.dtype)[0]
        used = emb[0].abs().sum(dim=-1).nonzero()
        length = int(used[-1]) + 1 if len(used) else 1
        return emb[:, :length]

    def encode_clip(self, pixels):
        """Pixels [B, 3, F, H, W] in [-1, 1] -> normalised latents [B, 16, F', H/8, W/8]."""
        import torch

        vae = self.vae
        with torch.no_grad():
            z = vae.encode(pixels.to(device=self.device, dtype=vae.dtype)).latent_dist.mean
            mean = torch.tensor(vae.config.latents_mean, device=z.device,
                                dtype=z.dtype).view(1, -1, 1, 1, 1)
            std = torch.tensor(vae.config.latents_std, device=z.device,
                               dtype=z.dtype).view(1, -1, 1, 1, 1)
            return (z - mean) / std

    # What goes on the device for the clips after the prompts (model offload).
    clip_modules: tuple[str, ...] = ("vae",)

    def clip_sample(self, prompt_emb, pixels) -> dict[str, Any]:
        """One cached sample from its prompt embedding and clip [1, 3, F, H, W]."""
        import torch

        return {**cached_sample(self.encode_clip(pixels), pixels, prompt_emb=prompt_emb),
                "frames": torch.tensor([pixels.shape[2]])}

    def encode_sample(self, pixels, prompt: str) -> dict[str, Any]:
        if pixels.ndim == 4:  # an image: a one-frame clip
            pixels = pixels.unsqueeze(2)
        return self.clip_sample(self.encode_prompt(prompt), pixels)

    def encode_samples(self, items: list[tuple[Callable[[], Any], str]],
                       should_stop: Callable[[], bool] = lambda: False, log=print
                       ) -> Iterator[dict[str, Any]]:
        """Each (load_pixels, prompt) item's sample, in order; with ``model`` offload every
        prompt first, then every clip. Returns early once ``should_stop()``."""
        if self.offload != "model":
            for load, prompt in items:
                if should_stop():
                    return
                yield self.encode_sample(load(), prompt)
            return
        prompts = []
        with self.on_device("text_encoder"):
            for _, prompt in items:
                if should_stop():
                    return
                prompts.append(self.encode_prompt(prompt).cpu())
        log(f"[encoder] model offload: {len(prompts)} prompt(s) encoded; text encoder back "
            f"in host RAM, {' and '.join(self.clip_modules)} to {self.device}")
        with ExitStack() as stack:
            for name in self.clip_modules:
                stack.enter_context(self.on_device(name))
            for (load, _), emb in zip(items, prompts):
                if should_stop():
                    return
                pixels = load()
                if pixels.ndim == 4:
                    pixels = pixels.unsqueeze(2)
                yield self.clip_sample(emb, pixels)


# ------------------------------------------------------------------------------------------
# Training loss
# ------------------------------------------------------------------------------------------
def training_schedule() -> Schedule:
    """The reference's 1000 sigmas (1 down to about 0.005, shift 5), their timesteps (1000
    sigma) and its weights (mean 1)."""
    import torch

    s = torch.linspace(1.0, 0.0, NUM_TRAIN_TIMESTEPS + 1)[:-1]
    sigmas = TRAIN_SHIFT * s / (1 + (TRAIN_SHIFT - 1) * s)
    timesteps = sigmas * NUM_TRAIN_TIMESTEPS
    y = torch.exp(-2 * ((timesteps - NUM_TRAIN_TIMESTEPS / 2) / NUM_TRAIN_TIMESTEPS) ** 2)
    y = y - y.min()
    return Schedule(sigmas, timesteps, y * (NUM_TRAIN_TIMESTEPS / y.sum()))


def padded_prompt(prompt_emb, length: int = MAX_SEQUENCE_LENGTH):
    """[B, L, D] -> [B, 512, D] with zero rows, as ``WanPipeline.encode_prompt`` pads."""
    import torch

    b, n, d = prompt_emb.shape
    if n >= length:
        return prompt_emb[:, :length]
    return torch.cat([prompt_emb, prompt_emb.new_zeros(b, length - n, d)], dim=1)


def predict(transformer, noisy_latents, timestep, prompt_emb, condition=None,
            image_embeds=None):
    """The flow (noise - x0) the transformer predicts at ``timestep`` (a 0-d tensor, or one
    per token [B, tokens] as Wan2.2-TI2V-5B's pipeline passes it: ``ti2v.py``). An
    image-to-video sample's ``condition`` goes after the noisy latents' channels and its
    ``image_embeds`` to the image cross-attention, as ``WanImageToVideoPipeline`` does."""
    import torch

    t = timestep.to(noisy_latents.dtype)
    if t.ndim == 0:
        t = t.expand(noisy_latents.shape[0])
    if condition is not None:
        noisy_latents = torch.cat([noisy_latents, condition.to(noisy_latents)], dim=1)
    if image_embeds is not None:
        image_embeds = image_embeds.to(noisy_latents)
    return transformer(hidden_states=noisy_latents, timestep=t,
                       encoder_hidden_states=padded_prompt(prompt_emb),
                       encoder_hidden_states_image=image_embeds, return_dict=False)[0]


def flow_matching_loss(transformer, sample: dict[str, Any], schedule: Schedule,
                       index: int, noise, dtype):
    """Weighted flow-matching MSE of one clip (and by its ``loss_mask``: ``weighted_mse``)."""
    x0, noise, sigma, x_t = noised(sample, schedule, index, noise, dtype)
    device = x0.device
    pred = predict(transformer, x_t.to(dtype), schedule.timesteps[index].to(device),
                   sample["prompt_emb"].to(device, dtype), sample.get("condition"),
                   sample.get("image_embeds"))
    loss = weighted_mse(pred, noise - x0, sample, x0)
    return loss * schedule.weights[index].to(device)


def boundary_indices(cfg, n: int = NUM_TRAIN_TIMESTEPS) -> tuple[int, int]:
    """The schedule indices [lo, hi) a step draws from: the reference's
    ``--min_timestep_boundary`` / ``--max_timestep_boundary``, fractions of the schedule's
    timesteps in its order (index 0 the noisiest), ``int(fraction * 1000)`` each."""
    lo = int(float(getattr(cfg, "min_timestep_boundary", 0.0)) * n)
    hi = int(float(getattr(cfg, "max_timestep_boundary", 1.0)) * n)
    return lo, hi


# ------------------------------------------------------------------------------------------
# Samples
# ------------------------------------------------------------------------------------------
EXPERTS = ("transformer", "transformer_2")  # Wan 2.2 A14B: high-noise, low-noise expert


def load_experts(load: Callable[..., Any], folder: str | Path, dtype=None) -> dict[str, Any]:
    """The pipeline's transformer arguments for the trained component's ``folder``, each
    loaded by ``load(folder, dtype)``: one transformer (Wan 2.1); for a two-expert model
    (Wan 2.2 A14B: ``transformer/`` and ``transformer_2/`` beside a ``model_index.json``
    with ``boundary_ratio``) both experts and the ratio, whichever of the two ``folder`` is."""
    folder = Path(folder)
    index = folder.parent / "model_index.json"
    ratio = None
    if index.is_file() and folder.name in EXPERTS:
        ratio = json.loads(index.read_text(encoding="utf-8")).get("boundary_ratio")
    if ratio is None or not all((folder.parent / e).is_dir() for e in EXPERTS):
        return {"transformer": load(folder, dtype)}
    out = {e: load(folder.parent / e, dtype) for e in EXPERTS}
    return {**out, "boundary_ratio": float(ratio)}


def route_lora(pipe, expert: str):
    """Make ``pipe.load_lora_weights`` put a LoRA on ``expert``: diffusers loads Wan LoRAs
    (``transformer.`` keys) into ``transformer_2`` with ``load_into_transformer_2=True``."""
    if expert != "transformer_2":
        return pipe
    method = type(pipe).load_lora_weights

    def load_lora_weights(*args, **kwargs):
        kwargs.setdefault("load_into_transformer_2", True)
        return method(pipe, *args, **kwargs)

    pipe.load_lora_weights = load_lora_weights
    return pipe


def read_json(path: Path) -> dict:
    """A JSON file's object; {} when it is missing or unreadable."""
    try:
        return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}
    except (OSError, ValueError):
        return {}


def is_wan22_vae(config: dict) -> bool:
    """Whether a VAE config.json is the Wan 2.2 VAE's (the TI2V-5B's: 48 channels)."""
    return bool(config.get("is_residual")) and config.get("z_dim") == 48


def dirs_are_ti2v(dirs) -> bool:
    """Whether resolved component folders are a TI2V-5B's (its pipeline's model_index.json
    beside the transformer, or the Wan 2.2 VAE)."""
    if "transformer" in dirs:
        index = read_json(Path(dirs["transformer"]).parent / "model_index.json")
        if "expand_timesteps" in index:
            return bool(index["expand_timesteps"])
    return "vae" in dirs and is_wan22_vae(read_json(Path(dirs["vae"]) / "config.json"))


def render(pipe, prompt: str, *, negative_prompt: str, generator, steps: int, cfg: float,
           height: int, width: int, num_frames: int = 81):
    """One clip: frames [F, H, W, 3] floats in [0, 1]. ``cfg`` counts as WanPipeline's
    ``guidance_scale`` does (1 = no guidance)."""
    import torch

    with torch.inference_mode():
        return pipe(prompt=prompt, negative_prompt=negative_prompt or None,
                    guidance_scale=float(cfg), num_inference_steps=steps, height=height,
                    width=width, num_frames=num_frames, generator=generator,
                    output_type="np").frames[0]


# ------------------------------------------------------------------------------------------
# The contract
# ------------------------------------------------------------------------------------------
class Adapter(VideoClips, Family):
    """Wan 2.1 text-to-video through the family contract (``backend/families/base.py``)."""
    latent_patch = 2  # the transformer's 2x2 patch of latent cells

    # ComfyUI loads Wan LoRAs under the original model's names only (``native.py``).
    export_prefixes = {"reference": "", "diffusers": "transformer.",
                       "comfyui": "diffusion_model."}
    media = "video"
    vae_temporal_factor = 4
    offload_blocks = ("blocks",)
    quantize_skip = ("patch_embedding", "condition_embedder", "proj_out")

    # Schedule indices a training step draws from (a Wan 2.2 expert's range: for_config).
    timestep_range: tuple[int, int] | None = None

    # Per-token timesteps in the sample pipeline (Wan2.2-TI2V-5B, ``ti2v.py``; folders of a
    # TI2V-5B set it too, ``dirs_are_ti2v``).
    expand_timesteps = False

    # Stage 1 and samples (``Family.load_encoder``; ``load_pipeline`` below).
    encoder = Encoder
    pipeline = "WanPipeline"
    loaders = pipeline_loaders(load_text_encoder, load_vae, load_scheduler)

    transformer_class = staticmethod(transformer_class)
    training_schedule = staticmethod(training_schedule)
    loss_at = staticmethod(flow_matching_loss)
    render = staticmethod(render)

    def training_loss(self, transformer, sample, schedule, generator, dtype):
        """The default's uniform index, within ``timestep_range`` when the run is bound to
        one (one expert's range, the timestep drawn logged)."""
        return uniform_index_loss(self.loss_at, transformer, sample, schedule, generator, dtype,
                                  self.timestep_range, log="[wan]")

    def load_pipeline(self, dirs, dtype=None):
        """The ``pipeline`` class from the resolved component folders, on the CPU in ``dtype``
        (the VAE in float32). A two-expert model loads both experts; a LoRA then goes on the
        one the trained folder is (``route_lora``)."""
        import diffusers

        pipe = getattr(diffusers, self.pipeline)(
            **load_experts(self.load_transformer, dirs["transformer"], dtype),
            **self.load_components(dirs, "sample", dtype, skip=("transformer",)),
            expand_timesteps=self.expand_timesteps or dirs_are_ti2v(dirs))
        return route_lora(pipe, Path(dirs["transformer"]).name)

    def for_config(self, cfg):
        """The TI2V-5B adapter (``ti2v.py``) or the image-to-video adapter for an I2V model
        (``i2v.py``), as ``SPEC.run_adapters`` names them, else this one; bound to the run's
        timestep range when ``min/max_timestep_boundary`` narrow it."""
        import copy

        bound = super().for_config(cfg)
        lo, hi = boundary_indices(cfg)
        if (lo, hi) != (0, NUM_TRAIN_TIMESTEPS):
            bound = copy.copy(bound)
            bound.timestep_range = (lo, hi)
        return bound

    native_names = (to_native, from_native)

    def full_checkpoint_names(self, shapes, fmt):
        """The single-file names of a full checkpoint (``checkpoint.py``)."""
        return checkpoint.names(shapes, fmt)

    published = CONFIGS
    published_by_variant = VARIANT_CONFIGS

    def build_tiny(self, out_dir, seed=0, variant=None):
        from backend.families.wan import tiny
        builder = {"wan_i2v_14b_480p": tiny.build_tiny_wan_i2v,
                   "wan_i2v_14b_720p": tiny.build_tiny_wan_i2v,
                   "wan22_t2v_a14b": tiny.build_tiny_wan_a14b,
                   "wan22_i2v_a14b": tiny.build_tiny_wan_i2v_a14b,
                   "wan22_ti2v_5b": tiny.build_tiny_wan_ti2v}.get(variant, tiny.build_tiny_wan)
        return builder(out_dir, seed)
