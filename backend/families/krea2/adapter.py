"""Krea 2 family adapter: components, prompt/image encoding, the training loss, samples,
exports, captions.

Components are diffusers' ``Krea2Transformer2DModel`` and ``AutoencoderKLQwenImage``,
transformers' ``Qwen3VLModel`` and the tokenizer of its processor folder
(``common.load_chat_tokenizer``: ``Qwen3VLProcessor`` needs torchvision; the pipeline's
prompts need only the tokenizer). Stage 1 encodes through ``Krea2Pipeline.encode_prompt``
itself (its fixed-length template ``[prefix | prompt | PAD | suffix]``, the 12 tapped hidden
states) on a pipeline holding only the encoders; the cache keeps the valid tokens only
(padding is masked out of every attention, so the transformer's output is the same).
Latents are the VAE posterior mean normalised as the pipeline undoes it before decoding:
``(z - latents_mean) / latents_std``, kept unpacked [1, 16, H/8, W/8].

The loss: a uniform index into 1000 sigmas of the released scheduler (the linear grid
``Krea2Pipeline`` uses, shifted by its resolution-aware ``mu`` at 1024², the training
resolution of the reference), x_t = (1 - s) x0 + s noise, the transformer at time s
predicting the velocity noise - x0 (the pipeline steps with it as it is).

Samples: ``Krea2Pipeline`` with ``guidance_scale = sample_cfg - 1`` (its guidance counts
only the push away from the negative prompt), ``is_distilled`` as the model folder says.

Captions: the text encoder folder loaded whole, as ``Qwen3VLForConditionalGeneration``
(its LM head is the tied embeddings), with a ``Qwen3VLProcessor`` built without torchvision
(``qwen3_vl.load_captioner``).

Exports: diffusers loads ``transformer.<module>``; the reference trainer and ComfyUI take
the original checkpoint's module names (``blocks.N.attn.wq``, ``first``, ``last.linear``,
...), ComfyUI under ``diffusion_model.`` (the form diffusers' own Krea 2 LoRA converter
reads as the reference's and ComfyUI's).
"""
from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from backend.families import qwen3_vl
from backend.families.base import Family, Schedule
from backend.families.common import (OffloadingEncoder, cached_sample, frozen,
                                     load_chat_tokenizer, masked_flow_loss, pipeline_loaders)
from backend.families.krea2 import checkpoint
from backend.families.krea2.published import CONFIGS, SCHEDULER
from backend.families.krea2.tiny import build_tiny_krea2

PIPELINE = "Krea2Pipeline"
NUM_TRAIN_TIMESTEPS = 1000
MAX_SEQUENCE_LENGTH = 512          # Krea2Pipeline's default
TRAIN_SEQ_LEN = (1024 // 16) ** 2  # image tokens at 1024x1024: the schedule's shift


# ------------------------------------------------------------------------------------------
# Loading
# ------------------------------------------------------------------------------------------
def transformer_class():
    from diffusers import Krea2Transformer2DModel
    return Krea2Transformer2DModel


def load_text_encoder(folder: str | Path, dtype=None, device: Any = "cpu"):
    """The text encoder as the pipeline holds it: a ``Qwen3VLModel`` (a folder saved as
    ``Qwen3VLForConditionalGeneration`` loads into it without the LM head)."""
    from transformers import Qwen3VLModel

    model = Qwen3VLModel.from_pretrained(str(folder), dtype=dtype)
    return frozen(model, device)


def load_vae(folder: str | Path, dtype=None, device: Any = "cpu"):
    from diffusers import AutoencoderKLQwenImage

    model = AutoencoderKLQwenImage.from_pretrained(str(folder), torch_dtype=dtype)
    return frozen(model, device)


# ------------------------------------------------------------------------------------------
# Stage 1
# ------------------------------------------------------------------------------------------
class Encoder(OffloadingEncoder):
    """Text encoder + VAE (+ tokenizer), frozen: prompts → tapped hidden states, images →
    latents, as ``Krea2Pipeline`` computes them; ``offload`` as ``common.OffloadingEncoder``."""

    def __init__(self, text_encoder, tokenizer, vae, device=None, offload: str = "none"):
        from diffusers import Krea2Pipeline

        self.pipe = Krea2Pipeline(scheduler=None, vae=vae, text_encoder=text_encoder,
                                  tokenizer=tokenizer, transformer=None)
        super().__init__(text_encoder, vae, device, offload)

    def encode_prompt(self, prompt: str):
        """(prompt_emb [1, L, 12, D], prompt_emb_mask [1, L]): the pipeline's embedding with
        its padding dropped (L: the prompt's tokens and the template's suffix)."""
        import torch

        with self.on_device("text_encoder"), torch.no_grad():
            emb, mask = self.pipe.encode_prompt([prompt], device=self.device,
                                                max_sequence_length=MAX_SEQUENCE_LENGTH)
        keep = mask[0].bool()
        emb = emb[:, keep]
        return emb, torch.ones(emb.shape[:2], dtype=torch.bool, device=emb.device)

    def encode_image(self, pixels):
        """Pixels [B, 3, H, W] in [-1, 1] → normalised latents [B, 16, H/8, W/8]."""
        import torch

        vae = self.vae
        with self.on_device("vae"), torch.no_grad():
            x = pixels.to(device=self.device, dtype=vae.dtype).unsqueeze(2)
            z = vae.encode(x).latent_dist.mean[:, :, 0]
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
    """1000 sigmas of the released scheduler: the pipeline's linear grid (1 down to 1/1000)
    with its exponential shift at ``mu`` for 1024² (image tokens 4096); timesteps 1000
    sigma; uniform weights."""
    import numpy as np
    import torch
    from diffusers import FlowMatchEulerDiscreteScheduler
    from diffusers.pipelines.krea2.pipeline_krea2 import calculate_shift

    sched = FlowMatchEulerDiscreteScheduler(**SCHEDULER)
    mu = calculate_shift(TRAIN_SEQ_LEN, SCHEDULER["base_image_seq_len"],
                         SCHEDULER["max_image_seq_len"], SCHEDULER["base_shift"],
                         SCHEDULER["max_shift"])
    grid = np.linspace(1.0, 1.0 / NUM_TRAIN_TIMESTEPS, NUM_TRAIN_TIMESTEPS)
    sched.set_timesteps(sigmas=grid, mu=mu)
    sigmas = sched.sigmas[:NUM_TRAIN_TIMESTEPS].float()
    return Schedule(sigmas, sigmas * NUM_TRAIN_TIMESTEPS, torch.ones_like(sigmas))


def pack_latents(latents):
    """[B, C, h, w] → [B, h/2 · w/2, 4C] (2x2 patches), as ``Krea2Pipeline._pack_latents``."""
    b, c, h, w = latents.shape
    x = latents.view(b, c, h // 2, 2, w // 2, 2).permute(0, 2, 4, 1, 3, 5)
    return x.reshape(b, (h // 2) * (w // 2), c * 4)


def unpack_latents(packed, h: int, w: int):
    b, _, ch = packed.shape
    c = ch // 4
    x = packed.view(b, h // 2, w // 2, c, 2, 2).permute(0, 3, 1, 4, 2, 5)
    return x.reshape(b, c, h, w)


def predict(transformer, noisy_latents, sigma, prompt_emb, prompt_mask=None):
    """The velocity (noise - x0) the transformer predicts for [B, C, h, w] latents at noise
    level ``sigma`` (a 0-d tensor), as the pipeline calls it (time = sigma, the text at the
    origin of the rotary grid, the image at its latent-grid coordinates)."""
    from diffusers import Krea2Pipeline

    b, _, h, w = noisy_latents.shape
    position_ids = Krea2Pipeline.prepare_position_ids(prompt_emb.shape[1], h // 2, w // 2,
                                                      noisy_latents.device)
    t = sigma.to(noisy_latents.dtype).expand(b)
    out = transformer(hidden_states=pack_latents(noisy_latents),
                      encoder_hidden_states=prompt_emb, timestep=t,
                      position_ids=position_ids,
                      encoder_attention_mask=None if prompt_mask is None else
                      prompt_mask.to(noisy_latents.device).bool(),
                      return_dict=False)[0]
    return unpack_latents(out, h, w)


flow_matching_loss = masked_flow_loss(predict)


# ------------------------------------------------------------------------------------------
# Samples
# ------------------------------------------------------------------------------------------
def render(pipe, prompt: str, *, negative_prompt: str, generator, steps: int, cfg: float,
           height: int, width: int):
    """One image. ``cfg`` counts as in the schema (1 = no guidance); Krea2Pipeline's
    ``guidance_scale`` counts only the push away from the negative prompt, so it gets
    ``cfg - 1``."""
    import torch

    guidance = max(0.0, float(cfg) - 1.0)
    with torch.inference_mode():
        return pipe(prompt=prompt, negative_prompt=negative_prompt if guidance > 0 else None,
                    guidance_scale=guidance, num_inference_steps=steps, height=height,
                    width=width, generator=generator).images[0]


# ------------------------------------------------------------------------------------------
# Export names: diffusers' module names <-> the original checkpoint's
# ------------------------------------------------------------------------------------------
ATTN = {"to_q": "wq", "to_k": "wk", "to_v": "wv", "to_out.0": "wo", "to_gate": "gate"}
OTHER = {"img_in": "first", "final_layer.linear": "last.linear",
         "time_embed.linear_1": "tmlp.0", "time_embed.linear_2": "tmlp.2",
         "time_mod_proj": "tproj.1", "txt_in.linear_1": "txtmlp.1",
         "txt_in.linear_2": "txtmlp.3", "text_fusion.projector": "txtfusion.projector"}
_BLOCK = re.compile(r"^(transformer_blocks|text_fusion\.(?:layerwise|refiner)_blocks)\.(\d+)\."
                    r"(attn\.(?:to_q|to_k|to_v|to_out\.0|to_gate)|ff\.(?:gate|up|down))$")
_ORIG_BLOCK = re.compile(r"^(blocks|txtfusion\.(?:layerwise|refiner)_blocks)\.(\d+)\."
                         r"(attn\.(?:wq|wk|wv|wo|gate)|mlp\.(?:gate|up|down))$")
_BACK_ATTN = {v: k for k, v in ATTN.items()}
_BACK_OTHER = {v: k for k, v in OTHER.items()}


def to_original(module: str) -> str:
    """diffusers' module name -> the original Krea 2 name (KeyError for one it has not)."""
    m = _BLOCK.match(module)
    if m:
        where = "blocks" if m[1] == "transformer_blocks" else m[1].replace("text_fusion",
                                                                           "txtfusion")
        kind, _, sub = m[3].partition(".")
        inner = f"attn.{ATTN[sub]}" if kind == "attn" else f"mlp.{sub}"
        return f"{where}.{m[2]}.{inner}"
    return OTHER[module]


def from_original(name: str) -> str:
    """The original Krea 2 module name -> diffusers' (KeyError for an unknown one)."""
    m = _ORIG_BLOCK.match(name)
    if m:
        where = ("transformer_blocks" if m[1] == "blocks" else
                 m[1].replace("txtfusion", "text_fusion"))
        kind, _, sub = m[3].partition(".")
        inner = f"attn.{_BACK_ATTN[sub]}" if kind == "attn" else f"ff.{sub}"
        return f"{where}.{m[2]}.{inner}"
    return _BACK_OTHER[name]


# ------------------------------------------------------------------------------------------
# The contract
# ------------------------------------------------------------------------------------------
class Adapter(qwen3_vl.Captions, Family):
    """Krea 2 (Raw and Turbo) through the family contract (``backend/families/base.py``)."""

    export_prefixes = {"reference": "", "diffusers": "transformer.",
                       "comfyui": "diffusion_model."}
    offload_blocks = ("transformer_blocks",)
    # Inputs, the time embedding and modulation, the text fusion and the output stay in full
    # precision (diffusers keeps time_embed and the norms out of layerwise casting).
    quantize_skip = ("img_in", "time_embed", "time_mod_proj", "text_fusion", "txt_in",
                     "final_layer")

    # Stage 1 and samples (``Family.load_encoder`` / ``load_pipeline``).
    encoder = Encoder
    pipeline = PIPELINE
    loaders = {**pipeline_loaders(load_text_encoder, load_vae),
               "tokenizer": load_chat_tokenizer}

    transformer_class = staticmethod(transformer_class)
    training_schedule = staticmethod(training_schedule)
    loss_at = staticmethod(flow_matching_loss)
    render = staticmethod(render)

    def load_pipeline(self, dirs, dtype=None):
        """``Krea2Pipeline`` from the resolved folders, distilled (Turbo's fixed shift) and
        with the taps that the transformer's pipeline folder says (model_index.json)."""
        import diffusers

        index = Path(dirs["transformer"]).parent / "model_index.json"
        extra = {}
        if index.is_file():
            data = json.loads(index.read_text(encoding="utf-8"))
            for key in ("is_distilled", "text_encoder_select_layers", "patch_size"):
                if key in data:
                    extra[key] = data[key]
        return getattr(diffusers, self.pipeline)(**self.load_components(dirs, "sample", dtype),
                                                 **extra)

    def target_modules(self, names):
        """The reference's spellings mapped to modules; its ``gate`` names both gates (the
        attention's ``to_gate`` and the feed-forward's ``gate``), as in the reference."""
        out: list[str] = []
        for n in names:
            for m in (("gate", "to_gate") if n == "gate" else (self.spec.target_aliases.get(n, n),)):
                if m not in out:
                    out.append(m)
        return out

    native_names = (to_original, from_original)
    native_formats = ("comfyui", "reference")

    def full_checkpoint_names(self, shapes, fmt):
        """The single-file names of a full checkpoint (``checkpoint.py``)."""
        return checkpoint.names(shapes, fmt)

    published = CONFIGS

    def build_tiny(self, out_dir, seed=0, variant=None):
        return build_tiny_krea2(out_dir, seed, distilled=variant == "krea2_turbo")
