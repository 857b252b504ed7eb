"""HunyuanVideo 1.5 text-to-video adapter: components, prompt/clip encoding, the training loss,
samples.

Components are diffusers' ``HunyuanVideo15Transformer3DModel`` and
``AutoencoderKLHunyuanVideo15``, transformers' ``Qwen2_5_VLTextModel`` (and its tokenizer) and
``T5EncoderModel`` (the glyph encoder, with ``ByT5Tokenizer``), the scheduler and the
classifier-free guider of the ``hunyuanvideo-community/HunyuanVideo-1.5-*`` layout.

Prompt encoding is ``HunyuanVideo15Pipeline.encode_prompt``, run through a pipeline holding
only the encoders: the prompt in Qwen's chat template after the pipeline's system message,
padded to 1108 tokens, the third hidden state from the end with the first 108 tokens (the
system prefix) dropped: ``prompt_emb`` [1, 1000, 3584] and its mask ``prompt_emb_mask``; the
text in quotes (if any) through ByT5: ``prompt_emb_2`` [1, 256, 1472] and
``prompt_emb_mask_2`` (zeros when the prompt quotes nothing, as the pipeline gives). Latents
are the VAE posterior's mode times the VAE's ``scaling_factor`` (what the pipeline divides by
before decoding): [1, 32, (F - 1) / 4 + 1, H / 16, W / 16].

The loss is flow matching on the pipeline's own schedule: ``FlowMatchEulerDiscreteScheduler``
with the model's static shift (5 at 480p; 9 / 7 for the 720p text- / image-to-video models,
bound per run by ``for_config``), sigmas from linspace(1, 0, 1001)[:-1] shifted as
s' = shift s / (1 + (shift - 1) s), timestep 1000 s', x_t = (1 - s') x0 + s' noise, target
noise - x0 (the velocity the scheduler steps along), plain MSE (no per-timestep weights:
the model has no reference trainer whose weighting to follow). The transformer is called
as the pipeline calls it: the noisy latents beside a zero condition and mask (text-to-video;
``i2v.py`` gives the first frame's) and 729 zero image tokens.
"""
from __future__ import annotations

import copy
from functools import lru_cache
from pathlib import Path
from typing import Any

from backend.families import family_of
from backend.families.base import Family, Schedule
from backend.families.common import (OffloadingEncoder, VideoClips, cached_sample, frozen,
                                     load_flow_match_scheduler, load_tokenizer, noised,
                                     weighted_mse)
from backend.families.hunyuan_video15 import tiny
from backend.families.hunyuan_video15.native import FUSED, from_native, to_native
from backend.families.hunyuan_video15.published import (CONFIGS, IMAGE_TOKENS, SHIFTS,
                                                        VARIANT_CONFIGS)

NUM_TRAIN_TIMESTEPS = 1000
TEMPORAL_COMPRESSION = 4     # pixel frames per latent frame after the first (the VAE)
PIPELINE = "HunyuanVideo15Pipeline"


# ------------------------------------------------------------------------------------------
# Loading
# ------------------------------------------------------------------------------------------
def transformer_class():
    from diffusers import HunyuanVideo15Transformer3DModel
    return HunyuanVideo15Transformer3DModel


def load_text_encoder(folder: str | Path, dtype=None, device: str | Any = "cpu"):
    from transformers import Qwen2_5_VLTextModel

    return frozen(Qwen2_5_VLTextModel.from_pretrained(str(folder), dtype=dtype), device)


def load_text_encoder_2(folder: str | Path, dtype=None, device: str | Any = "cpu"):
    from transformers import T5EncoderModel

    return frozen(T5EncoderModel.from_pretrained(str(folder), dtype=dtype), device)


def load_vae(folder: str | Path, dtype=None, device: str | Any = "cpu"):
    from diffusers import AutoencoderKLHunyuanVideo15

    return frozen(AutoencoderKLHunyuanVideo15.from_pretrained(str(folder), torch_dtype=dtype),
                  device)


def load_tokenizer_2(folder: str | Path):
    from transformers import ByT5Tokenizer

    return ByT5Tokenizer.from_pretrained(str(folder))


def load_guider(folder: str | Path):
    from diffusers import ClassifierFreeGuidance

    return ClassifierFreeGuidance.from_pretrained(str(folder))


@lru_cache(maxsize=None)
def lora_pipeline(name: str):
    """diffusers' pipeline class ``name`` with diffusers' LoRA loading
    (``load_lora_weights``, ``set_adapters``, ``delete_adapters``...: the HunyuanVideo LoRA
    mixin, which reads ``transformer.``-prefixed diffusers keys as they are). diffusers'
    HunyuanVideo 1.5 pipelines have none of their own; the class keeps the pipeline's
    name, so a saved pipeline is diffusers' own."""
    import diffusers
    from diffusers.loaders import HunyuanVideoLoraLoaderMixin

    base = getattr(diffusers, name)
    return type(name, (HunyuanVideoLoraLoaderMixin, base), {"__module__": __name__})


def as_clip(pixels):
    """Pixels [B, 3, F, H, W]; an image [B, 3, H, W] as a one-frame clip."""
    return pixels.unsqueeze(2) if pixels.ndim == 4 else pixels


def pipeline_for_encoding(name: str, text_encoder, tokenizer, text_encoder_2, tokenizer_2, vae,
                          **more):
    """diffusers' pipeline ``name`` holding only the encoders (no transformer, scheduler or
    guider): its ``encode_prompt`` and image helpers are the ones stage 1 runs."""
    import diffusers

    return getattr(diffusers, name)(text_encoder=text_encoder, tokenizer=tokenizer,
                                    transformer=None, vae=vae, scheduler=None,
                                    text_encoder_2=text_encoder_2, tokenizer_2=tokenizer_2,
                                    guider=None, **more)


class Encoder(OffloadingEncoder):
    """Qwen2.5-VL + the glyph encoder + VAE (+ tokenizers), frozen: prompts -> the two
    prompt embeddings and their masks, clips -> latents.

    ``offload`` (``data_process_offload``): none | model | sequential, as for every family
    (``OffloadingEncoder``); the glyph encoder goes with the text encoder. Every mode computes
    the same tensors.
    """

    with_text_encoder = ("text_encoder_2",)

    def __init__(self, text_encoder, tokenizer, text_encoder_2, tokenizer_2, vae, device=None,
                 offload: str = "none"):
        self.text_encoder_2 = text_encoder_2
        self.pipe = pipeline_for_encoding(PIPELINE, text_encoder, tokenizer, text_encoder_2,
                                          tokenizer_2, vae)
        super().__init__(text_encoder, vae, device=device, offload=offload)

    def prompt_parts(self, prompt: str) -> tuple:
        """(prompt_emb, its mask, the glyph embedding, its mask): ``encode_prompt``'s."""
        import torch

        with torch.no_grad():
            return tuple(self.pipe.encode_prompt(prompt, device=self.device))

    def encode_image(self, pixels):
        """Pixels [B, 3, F, H, W] in [-1, 1] -> latents [B, C, F', H/16, W/16] times the VAE's
        scaling factor."""
        import torch

        vae = self.vae
        with torch.no_grad():
            z = vae.encode(as_clip(pixels).to(device=self.device, dtype=vae.dtype)
                           ).latent_dist.mode()
            return z * vae.config.scaling_factor

    def make_sample(self, parts: tuple, latents, pixels) -> dict[str, Any]:
        import torch

        emb, mask, emb_2, mask_2 = parts
        pixels = as_clip(pixels)
        return {**cached_sample(latents, pixels, prompt_emb=emb, prompt_emb_mask=mask,
                                prompt_emb_2=emb_2, prompt_emb_mask_2=mask_2),
                "frames": torch.tensor([pixels.shape[2]])}


# ------------------------------------------------------------------------------------------
# Training loss
# ------------------------------------------------------------------------------------------
def training_schedule(shift: float = SHIFTS["480p_t2v"]) -> Schedule:
    """The pipeline scheduler's sigmas at 1000 steps (1 down to about 0.005 with shift 5)
    and their timesteps (1000 sigma); unweighted."""
    import torch

    s = torch.linspace(1.0, 0.0, NUM_TRAIN_TIMESTEPS + 1)[:-1]
    sigmas = shift * s / (1 + (shift - 1) * s)
    return Schedule(sigmas, sigmas * NUM_TRAIN_TIMESTEPS)


def model_config(transformer):
    """The transformer's own config, through any wrapper (DeepSpeed's engine, DDP)."""
    while hasattr(transformer, "module"):
        transformer = transformer.module
    return transformer.config


def predict(transformer, x_t, timestep, sample: dict[str, Any], dtype):
    """The flow (noise - x0) the transformer predicts for latents ``x_t`` [B, C, F, H, W] at
    ``timestep``, called as the pipeline calls it: the latents beside the sample's
    ``condition`` (the first frame's latents and mask, image-to-video; zeros otherwise) and
    its ``image_embeds`` (SigLIP's; 729 zero tokens otherwise)."""
    import torch

    config = model_config(transformer)
    b, c, f, h, w = x_t.shape
    device = x_t.device
    condition = sample.get("condition")
    condition = (condition.to(device, dtype) if condition is not None
                 else x_t.new_zeros(b, c + 1, f, h, w, dtype=dtype))
    image_embeds = sample.get("image_embeds")
    image_embeds = (image_embeds.to(device, dtype) if image_embeds is not None else
                    torch.zeros(b, IMAGE_TOKENS, config.image_embed_dim, device=device,
                                dtype=dtype))
    hidden = torch.cat([x_t.to(dtype), condition], dim=1)
    t = timestep.to(device=device, dtype=dtype).expand(b)
    return transformer(
        hidden_states=hidden, image_embeds=image_embeds, timestep=t,
        encoder_hidden_states=sample["prompt_emb"].to(device, dtype),
        encoder_attention_mask=sample["prompt_emb_mask"].to(device, dtype),
        encoder_hidden_states_2=sample["prompt_emb_2"].to(device, dtype),
        encoder_attention_mask_2=sample["prompt_emb_mask_2"].to(device, dtype),
        return_dict=False)[0]


def flow_matching_loss(transformer, sample: dict[str, Any], schedule: Schedule, index: int,
                       noise, dtype):
    """Flow-matching MSE of one clip (weighted by its ``loss_mask``: ``weighted_mse``)."""
    x0, noise, _, x_t = noised(sample, schedule, index, noise, dtype)
    pred = predict(transformer, x_t, schedule.timesteps[index], sample, dtype)
    return weighted_mse(pred, noise - x0, sample, x0)


# ------------------------------------------------------------------------------------------
# Samples
# ------------------------------------------------------------------------------------------
def guided(pipe, cfg: float):
    """``pipe`` with its guider's scale set to ``cfg`` (the guider's other settings kept;
    1 = no guidance, one pass per step)."""
    pipe.guider = pipe.guider.new(guidance_scale=float(cfg))
    return pipe


def render(pipe, prompt: str, *, negative_prompt: str, generator, steps: int, cfg: float,
           height: int, width: int, num_frames: int = 121):
    """One clip: frames [F, H, W, 3] floats in [0, 1]. ``cfg`` is the guider's
    ``guidance_scale`` (the released 6: the same count as sample_cfg's)."""
    import torch

    with torch.inference_mode():
        return guided(pipe, cfg)(
            prompt=prompt, negative_prompt=negative_prompt or None, height=height,
            width=width, num_frames=num_frames, num_inference_steps=steps,
            generator=generator, output_type="np").frames[0]


# ------------------------------------------------------------------------------------------
# The contract
# ------------------------------------------------------------------------------------------
def shift_of(cfg) -> float:
    """The flow shift of the run's model (its variant's scheduler; 480p's when the sources
    name none)."""
    _, variant = family_of(cfg.to_dict())
    key = (variant or "").removeprefix("hunyuan_video15_")
    return SHIFTS.get(key, SHIFTS["480p_t2v"])


class Adapter(VideoClips, Family):
    """HunyuanVideo 1.5 text-to-video through the family contract
    (``backend/families/base.py``)."""

    media = "video"
    vae_scale_factor = 16
    vae_temporal_factor = TEMPORAL_COMPRESSION
    offload_blocks = ("transformer_blocks",)
    quantize_skip = ("x_embedder", "image_embedder", "context_embedder", "context_embedder_2",
                     "time_embed", "cond_type_embed", "norm_out", "proj_out")
    # ComfyUI's model fuses each attention's query, key and value (``native.py``).
    fused_modules = {"comfyui": FUSED}
    # The training schedule's flow shift (the run's model's: ``for_config``).
    train_shift = SHIFTS["480p_t2v"]

    # Stage 1 and samples (``Family.load_encoder``; ``load_pipeline`` below).
    encoder = Encoder
    pipeline = PIPELINE
    loaders = {"text_encoder": load_text_encoder, "tokenizer": load_tokenizer,
               "text_encoder_2": load_text_encoder_2, "tokenizer_2": load_tokenizer_2,
               "vae": load_vae, "scheduler": load_flow_match_scheduler,
               "guider": load_guider}

    transformer_class = staticmethod(transformer_class)
    loss_at = staticmethod(flow_matching_loss)
    render = staticmethod(render)

    def training_schedule(self) -> Schedule:
        return training_schedule(self.train_shift)

    def for_config(self, cfg):
        """The image-to-video adapter (``i2v.py``) for an I2V model, as ``SPEC.run_adapters``
        names it, else this one; bound to the run's model's flow shift."""
        bound = super().for_config(cfg)
        shift = shift_of(cfg)
        if shift != bound.train_shift:
            bound = copy.copy(bound)
            bound.train_shift = shift
        return bound

    def load_pipeline(self, dirs, dtype=None):
        """The ``pipeline`` class with diffusers' LoRA loading (``lora_pipeline``) from the
        resolved component folders, on the CPU in ``dtype``."""
        return lora_pipeline(self.pipeline)(**self.load_components(dirs, "sample", dtype))

    native_names = (to_native, from_native)

    published = CONFIGS
    published_by_variant = VARIANT_CONFIGS

    def build_tiny(self, out_dir, seed=0, variant=None):
        if variant is not None and variant.endswith("_i2v"):
            return tiny.build_tiny_i2v(out_dir, seed)
        return tiny.build_tiny_t2v(out_dir, seed)
