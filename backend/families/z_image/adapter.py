"""Z-Image family adapter: components, prompt/image encoding, the training loss, samples.

Components are diffusers' ``ZImageTransformer2DModel`` and ``AutoencoderKL``, transformers'
``Qwen3Model`` text encoder and its tokenizer. Prompt encoding is diffusers'
``ZImagePipeline._encode_prompt`` (chat template, padding to 512 tokens, the second-to-last
hidden state, padding dropped), run through a pipeline object holding only the encoders, so
the cached embedding is exactly what the pipeline feeds the transformer. Latents are the VAE
posterior mean normalised as the pipeline undoes it before decoding:
``(z - shift_factor) * scaling_factor``.

The loss is diffusers' Z-Image LoRA example (``train_dreambooth_lora_z_image.py``) with its
default uniform weighting: the 1000 training sigmas of the released scheduler
(``FlowMatchEulerDiscreteScheduler``, shift 3.0), a uniform index, x_t = (1 - s) x0 + s noise;
the transformer takes the time as (1000 - t) / 1000 = 1 - s and predicts x0 - noise (the
pipeline negates it), so the loss is MSE(-pred, noise - x0).

Cached sample tensors (one safetensors file per sample, see backend/data/cache.py):
``prompt_emb`` [1, L, D] (L the prompt's own tokens: lengths differ between samples, as
in the pipeline; stage 2 reads one sample per step), ``prompt_emb_mask`` [1, L] (all true),
``latents`` [1, 16, H/8, W/8], ``height``, ``width``.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

from backend.families.base import Family, Schedule
from backend.families.common import (OffloadingEncoder, cached_sample, frozen, masked_flow_loss,
                                     pipeline_loaders)
from backend.families.z_image import checkpoint
from backend.families.z_image.published import CONFIGS, SCHEDULER

NUM_TRAIN_TIMESTEPS = 1000
MAX_SEQUENCE_LENGTH = 512          # ZImagePipeline's default


# ------------------------------------------------------------------------------------------
# Loading
# ------------------------------------------------------------------------------------------
def transformer_class():
    from diffusers import ZImageTransformer2DModel
    return ZImageTransformer2DModel


def load_text_encoder(folder: str | Path, dtype=None, device: str | Any = "cpu"):
    """The text encoder as the pipeline holds it: a ``Qwen3Model`` (the released folder says
    ``Qwen3ForCausalLM``; the base model's weights load into it without the LM head)."""
    from transformers import Qwen3Model

    model = Qwen3Model.from_pretrained(str(folder), dtype=dtype)
    return frozen(model, device)


def load_vae(folder: str | Path, dtype=None, device: str | Any = "cpu"):
    from diffusers import AutoencoderKL

    model = AutoencoderKL.from_pretrained(str(folder), torch_dtype=dtype)
    return frozen(model, device)


class Encoder(OffloadingEncoder):
    """Text encoder + VAE (+ tokenizer), frozen: prompts → embeddings, images → latents, as
    ``ZImagePipeline`` computes them; ``offload`` as ``common.OffloadingEncoder``."""

    def __init__(self, text_encoder, tokenizer, vae, device=None, offload: str = "none"):
        from diffusers import ZImagePipeline

        self.pipe = ZImagePipeline(scheduler=None, vae=vae, text_encoder=text_encoder,
                                   tokenizer=tokenizer, transformer=None)
        super().__init__(text_encoder, vae, device, offload)

    def encode_prompt(self, prompt: str):
        """(prompt_emb [1, L, D], prompt_emb_mask [1, L]) as ``ZImagePipeline`` computes the
        embedding (L: the prompt's tokens under the chat template, padding dropped)."""
        import torch

        with torch.no_grad():
            emb = self.pipe._encode_prompt([prompt], device=self.device,
                                           max_sequence_length=MAX_SEQUENCE_LENGTH)[0]
        emb = emb.unsqueeze(0)
        return emb, torch.ones(emb.shape[:2], dtype=torch.bool, device=emb.device)

    def encode_image(self, pixels):
        """Pixels [B, 3, H, W] in [-1, 1] → normalised latents [B, 16, H/8, W/8]."""
        import torch

        vae = self.vae
        with torch.no_grad():
            z = vae.encode(pixels.to(device=self.device, dtype=vae.dtype)).latent_dist.mean
            return (z - vae.config.shift_factor) * vae.config.scaling_factor

    def prompt_parts(self, prompt: str) -> tuple:
        return self.encode_prompt(prompt)

    def make_sample(self, parts: tuple, latents, pixels) -> dict[str, Any]:
        emb, mask = parts
        return cached_sample(latents, pixels, prompt_emb=emb, prompt_emb_mask=mask)


# ------------------------------------------------------------------------------------------
# Training loss
# ------------------------------------------------------------------------------------------
def training_schedule() -> Schedule:
    """The released scheduler's 1000 training sigmas (1 down to about 0.003, shift 3), their
    timesteps (1000 sigma) and uniform weights (all 1)."""
    import torch
    from diffusers import FlowMatchEulerDiscreteScheduler

    sched = FlowMatchEulerDiscreteScheduler(**SCHEDULER)
    sigmas = sched.sigmas[:NUM_TRAIN_TIMESTEPS].float()
    timesteps = sched.timesteps[:NUM_TRAIN_TIMESTEPS].float()
    return Schedule(sigmas, timesteps, torch.ones_like(sigmas))


def pack_latents(latents):
    """[B, C, h, w] → the transformer's input: a list of B tensors [C, 1, h, w] (one frame
    each; the model patchifies them itself)."""
    return list(latents.unsqueeze(2).unbind(0))


def predict(transformer, noisy_latents, sigma, prompt_emb, prompt_mask=None):
    """The flow (noise - x0) the transformer predicts for [B, C, h, w] latents at noise level
    ``sigma`` (a 0-d tensor), as the pipeline computes it (time 1 - sigma, output negated).
    ``prompt_emb`` [B, L, D]; ``prompt_mask`` [B, L] drops padding (none in a cache)."""
    import torch

    b = noisy_latents.shape[0]
    caps = [prompt_emb[i] if prompt_mask is None else prompt_emb[i][prompt_mask[i].bool()]
            for i in range(b)]
    t = (1 - sigma).to(noisy_latents.dtype).expand(b)
    out = transformer(pack_latents(noisy_latents), t, caps, return_dict=False)[0]
    return -torch.stack(out, dim=0).squeeze(2)


flow_matching_loss = masked_flow_loss(predict)


# ------------------------------------------------------------------------------------------
# Samples
# ------------------------------------------------------------------------------------------
def render(pipe, prompt: str, *, negative_prompt: str, generator, steps: int, cfg: float,
           height: int, width: int):
    """One image. ``cfg`` counts as in the schema (1 = no guidance); ZImagePipeline's
    ``guidance_scale`` counts only the push away from the negative prompt (0 = none), so it
    gets ``cfg - 1``."""
    import torch

    guidance = max(0.0, float(cfg) - 1.0)
    with torch.inference_mode():
        return pipe(prompt=prompt, negative_prompt=negative_prompt if guidance > 0 else None,
                    guidance_scale=guidance, num_inference_steps=steps, height=height,
                    width=width, generator=generator).images[0]


# ------------------------------------------------------------------------------------------
# The contract
# ------------------------------------------------------------------------------------------
class Adapter(Family):
    """Z-Image (Base and Turbo) through the family contract (``backend/families/base.py``)."""

    # ComfyUI maps diffusers' Z-Image names under ``diffusion_model.`` onto its own fused
    # qkv weights (comfy/lora.py, the Lumina2 branch, through z_image_to_diffusers); the
    # base class's prefixes are exactly that, restated here because the family relies on it.
    export_prefixes = {"reference": "", "diffusers": "transformer.",
                       "comfyui": "diffusion_model."}
    offload_blocks = ("layers", "noise_refiner", "context_refiner")
    # Embedders, the final layer and the modulation stay in full precision (diffusers keeps
    # t_embedder and cap_embedder out of layerwise casting for the same reason).
    quantize_skip = ("all_x_embedder", "all_final_layer", "t_embedder", "cap_embedder",
                     "*.adaLN_modulation.*")

    # Stage 1 and samples (``Family.load_encoder`` / ``load_pipeline``).
    encoder = Encoder
    pipeline = "ZImagePipeline"
    loaders = pipeline_loaders(load_text_encoder, load_vae)

    # The contract's members are this module's functions.
    transformer_class = staticmethod(transformer_class)
    training_schedule = staticmethod(training_schedule)
    loss_at = staticmethod(flow_matching_loss)
    render = staticmethod(render)

    def full_checkpoint_names(self, shapes, fmt):
        """The single-file names of a full checkpoint (``checkpoint.py``)."""
        return checkpoint.names(shapes, fmt)

    published = CONFIGS

    def transformer_shape(self, config):
        """(main blocks, hidden size): Z-Image names them ``n_layers`` and ``dim``."""
        return int(config["n_layers"]), int(config["dim"])

    def build_tiny(self, out_dir, seed=0, variant=None):  # Turbo: other weights, same classes
        from backend.families.z_image.tiny import build_tiny_z_image
        return build_tiny_z_image(out_dir, seed)
