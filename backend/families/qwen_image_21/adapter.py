"""Qwen-Image-2.1 family adapter: components, prompt/image encoding, the training loss,
samples, captions.

Components are diffusers' ``QwenImage21Transformer2DModel`` and ``AutoencoderKLQwenImage21``,
transformers' ``Qwen3VLForConditionalGeneration`` and the tokenizer of the ``processor/``
folder (``common.load_chat_tokenizer``: ``Qwen3VLProcessor`` needs torchvision). The pipeline
calls its processor only for text here, so ``TextProcessor`` hands it the tokenizer.

Stage 1 encodes through ``QwenImage21Pipeline.encode_prompt`` itself (its raw template, the
last decoder layer before the final norm, the system prompt dropped) on a pipeline holding
only the encoders. Images reach the VAE as the pipeline's do: RGBA (opaque: alpha 1 in
[-1, 1]); latents are the posterior mode normalised as the pipeline does,
``(z - latents_mean) / latents_std``, kept unpacked [1, 64, H/16, W/16].

The loss: a uniform index into 1000 sigmas of the pipeline's grid (linear 1 … 1/1000, shifted
by its resolution-aware ``mu`` at 1024², 4096 image tokens), x_t = (1 - s) x0 + s noise, the
transformer at time s (the pipeline's ``timestep / 1000``) predicting the velocity
noise - x0 for the target tokens appended after the text (one text-sequence slot per 2x2
latent tokens).

Samples: ``QwenImage21Pipeline`` with ``true_cfg_scale = sample_cfg`` (1 = no guidance, the
pipeline's default) and the negative prompt only when guiding.

Captions: the text encoder with its vision tower and a ``Qwen3VLProcessor`` built without
torchvision from the ``processor/`` folder's tokenizer and image settings
(``qwen3_vl.load_captioner``).

Exports: diffusers' module names in every format (``transformer.`` for diffusers'
``QwenImageLoraLoaderMixin``, ``diffusion_model.`` for ComfyUI).
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from backend.families import qwen3_vl
from backend.families.base import Family, Schedule
from backend.families.common import (OffloadingEncoder, cached_sample, frozen,
                                     load_chat_tokenizer, masked_flow_loss, pipeline_loaders)
from backend.families.qwen_image_21 import checkpoint
from backend.families.qwen_image_21.published import CONFIGS, SCHEDULER
from backend.families.qwen_image_21.tiny import build_tiny_qwen_image_21

PIPELINE = "QwenImage21Pipeline"
NUM_TRAIN_TIMESTEPS = 1000
TRAIN_SEQ_LEN = (1024 // 16) ** 2  # latent tokens at 1024x1024: the schedule's shift
SLOT = 4                           # latent tokens per image slot of the text sequence (2x2)


# ------------------------------------------------------------------------------------------
# Loading
# ------------------------------------------------------------------------------------------
def transformer_class():
    from diffusers import QwenImage21Transformer2DModel
    return QwenImage21Transformer2DModel


def load_text_encoder(folder: str | Path, dtype=None, device: Any = "cpu"):
    from transformers import Qwen3VLForConditionalGeneration

    model = Qwen3VLForConditionalGeneration.from_pretrained(str(folder), dtype=dtype)
    return frozen(model, device)


def load_vae(folder: str | Path, dtype=None, device: Any = "cpu"):
    from diffusers import AutoencoderKLQwenImage21

    model = AutoencoderKLQwenImage21.from_pretrained(str(folder), torch_dtype=dtype)
    return frozen(model, device)


class TextProcessor:
    """What ``QwenImage21Pipeline`` asks of its ``Qwen3VLProcessor`` for text prompts, from the
    tokenizer alone: ``tokenizer``, ``apply_chat_template`` (batched, as the processor's) and
    ``__call__`` on text. Condition images need the real processor (torchvision)."""

    def __init__(self, tokenizer):
        self.tokenizer = tokenizer

    def apply_chat_template(self, messages, **kwargs):
        out = self.tokenizer.apply_chat_template(messages, **kwargs)
        return [out] if out and isinstance(out[0], int) else out

    def __call__(self, text, images=None, **kwargs):
        if images is not None:
            raise ValueError("condition images need Qwen3VLProcessor (pip install torchvision)")
        return self.tokenizer(text, **kwargs)


# ------------------------------------------------------------------------------------------
# Stage 1
# ------------------------------------------------------------------------------------------
class Encoder(OffloadingEncoder):
    """Text encoder + VAE (+ tokenizer), frozen: prompts → embeddings, images → latents, as
    ``QwenImage21Pipeline`` computes them; ``offload`` as ``common.OffloadingEncoder``."""

    def __init__(self, text_encoder, tokenizer, vae, device=None, offload: str = "none"):
        from diffusers import QwenImage21Pipeline

        self.pipe = QwenImage21Pipeline(scheduler=None, vae=vae, text_encoder=text_encoder,
                                        processor=TextProcessor(tokenizer), transformer=None)
        super().__init__(text_encoder, vae, device, offload)

    def encode_prompt(self, prompt: str):
        """(prompt_emb [1, L, D], prompt_emb_mask [1, L]): the pipeline's embedding (one
        prompt: no padding, so every position is valid)."""
        import torch

        with self.on_device("text_encoder"), torch.no_grad():
            emb, _, _ = self.pipe.encode_prompt([prompt], device=self.device)
        return emb, torch.ones(emb.shape[:2], dtype=torch.bool, device=emb.device)

    def encode_image(self, pixels):
        """Pixels [B, 3, H, W] in [-1, 1] → normalised latents [B, 64, H/16, W/16]: the
        VAE reads RGBA, opaque as the pipeline's RGBA conversion makes an RGB image."""
        import torch

        vae = self.vae
        with self.on_device("vae"), torch.no_grad():
            x = pixels.to(device=self.device, dtype=vae.dtype)
            x = torch.cat([x, torch.ones_like(x[:, :1])], dim=1).unsqueeze(2)
            z = vae.encode(x).latent_dist.mode()[:, :, 0]
            mean = torch.tensor(vae.config.latents_mean).view(1, -1, 1, 1).to(z)
            std = torch.tensor(vae.config.latents_std).view(1, -1, 1, 1).to(z)
            return (z - mean) / std

    def prompt_parts(self, prompt: str) -> tuple:
        return self.encode_prompt(prompt)

    def make_sample(self, parts: tuple, latents, pixels) -> dict[str, Any]:
        emb, mask = parts
        return cached_sample(latents, pixels, prompt_emb=emb, prompt_emb_mask=mask)


# ------------------------------------------------------------------------------------------
# Training loss
# ------------------------------------------------------------------------------------------
def training_schedule() -> Schedule:
    """1000 sigmas of the pipeline's grid (1 down to 1/1000) with its exponential shift at
    ``mu`` for 1024² (4096 latent tokens); timesteps 1000 sigma; uniform weights."""
    import numpy as np
    import torch
    from diffusers import FlowMatchEulerDiscreteScheduler
    from diffusers.pipelines.qwenimage21.pipeline_qwenimage21 import calculate_shift

    sched = FlowMatchEulerDiscreteScheduler(**SCHEDULER)
    mu = calculate_shift(TRAIN_SEQ_LEN, SCHEDULER["base_image_seq_len"],
                         SCHEDULER["max_image_seq_len"], SCHEDULER["base_shift"],
                         SCHEDULER["max_shift"])
    grid = np.linspace(1.0, 1.0 / NUM_TRAIN_TIMESTEPS, NUM_TRAIN_TIMESTEPS)
    sched.set_timesteps(sigmas=grid, mu=mu)
    sigmas = sched.sigmas[:NUM_TRAIN_TIMESTEPS].float()
    return Schedule(sigmas, sigmas * NUM_TRAIN_TIMESTEPS, torch.ones_like(sigmas))


def pack_latents(latents):
    """[B, C, h, w] → [B, h·w, C], as ``QwenImage21Pipeline._pack_latents`` (unpatched)."""
    b, c, h, w = latents.shape
    return latents.reshape(b, c, h * w).transpose(1, 2)


def predict(transformer, noisy_latents, sigma, prompt_emb, prompt_mask=None):
    """The velocity (noise - x0) the transformer predicts for [B, C, h, w] latents at noise
    level ``sigma`` (a 0-d tensor), called as the pipeline calls it for text-to-image: the
    text's slots (none an image's) then one slot per 2x2 target tokens."""
    import torch

    b, c, h, w = noisy_latents.shape
    device = noisy_latents.device
    text = torch.zeros(b, prompt_emb.shape[1], dtype=torch.bool, device=device)
    img_mask = torch.cat([text, text.new_ones(b, h * w // SLOT)], dim=1)
    mask = None
    if prompt_mask is not None and not bool(prompt_mask.all()):
        mask = prompt_mask.to(device).bool()
    out = transformer(hidden_states=pack_latents(noisy_latents),
                      timestep=sigma.to(noisy_latents.dtype).expand(b),
                      encoder_hidden_states=prompt_emb, encoder_hidden_states_mask=mask,
                      img_shapes=[[(1, h, w)]] * b, img_mask=img_mask,
                      return_dict=False)[0]
    return out[:, -h * w:].transpose(1, 2).reshape(b, c, h, w)


flow_matching_loss = masked_flow_loss(predict)


# ------------------------------------------------------------------------------------------
# Samples
# ------------------------------------------------------------------------------------------
def render(pipe, prompt: str, *, negative_prompt: str, generator, steps: int, cfg: float,
           height: int, width: int):
    """One image. ``cfg`` is the pipeline's ``true_cfg_scale`` (1 = no guidance), with the
    negative prompt only above 1."""
    import torch

    guide = float(cfg) > 1.0
    with torch.inference_mode():
        return pipe(prompt=prompt, negative_prompt=negative_prompt if guide else None,
                    true_cfg_scale=float(cfg), num_inference_steps=steps, height=height,
                    width=width, generator=generator).images[0]


# ------------------------------------------------------------------------------------------
# The contract
# ------------------------------------------------------------------------------------------
class Adapter(qwen3_vl.Captions, Family):
    """Qwen-Image-2.1 through the family contract (``backend/families/base.py``)."""

    vae_scale_factor = 16
    offload_blocks = ("transformer_blocks",)
    # Inputs, the time embedding, the shared modulation and the output stay in full precision.
    quantize_skip = ("img_in", "txt_in", "time_text_embed", "modulation", "norm_out",
                     "proj_out")
    # ComfyUI's Qwen-Image-2.1 model (0.37.0 on, comfy/ldm/qwen_image21) fuses the SwiGLU's
    # gate and up projections into one ``img_mlp.gate_up`` (gate rows first), where
    # diffusers has ``img_mlp.gate_layer`` and ``img_mlp.proj``.
    fused_modules = {"comfyui": {"img_mlp.gate_up": ("img_mlp.gate_layer", "img_mlp.proj")}}

    encoder = Encoder
    pipeline = PIPELINE
    loaders = {**pipeline_loaders(load_text_encoder, load_vae),
               "tokenizer": load_chat_tokenizer}

    transformer_class = staticmethod(transformer_class)
    training_schedule = staticmethod(training_schedule)
    loss_at = staticmethod(flow_matching_loss)
    render = staticmethod(render)

    def load_pipeline(self, dirs, dtype=None):
        """``QwenImage21Pipeline`` from the resolved folders, the tokenizer as its processor,
        with the ``sample_sigmas`` the model folder's model_index.json sets."""
        import diffusers

        parts = self.load_components(dirs, "sample", dtype)
        parts["processor"] = TextProcessor(parts.pop("tokenizer"))
        index = Path(dirs["transformer"]).parent / "model_index.json"
        if index.is_file():
            data = json.loads(index.read_text(encoding="utf-8"))
            if data.get("sample_sigmas") is not None:
                parts["sample_sigmas"] = data["sample_sigmas"]
        return getattr(diffusers, self.pipeline)(**parts)

    def full_checkpoint_names(self, shapes, fmt):
        """The single-file names of a full checkpoint (``checkpoint.py``)."""
        return checkpoint.names(shapes, fmt)

    published = CONFIGS

    def build_tiny(self, out_dir, seed=0, variant=None):
        return build_tiny_qwen_image_21(out_dir, seed)
