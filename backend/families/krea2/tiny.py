"""Tiny real-architecture Krea 2 pipeline, built locally in seconds.

The real classes at toy sizes with random weights from fixed seeds, in the hub layout::

    OUT_DIR/model_index.json  (Krea2Pipeline; ``is_distilled`` for Turbo)
    OUT_DIR/transformer/  text_encoder/  vae/  tokenizer/  scheduler/

- transformer: ``Krea2Transformer2DModel``, 2 blocks of 2 heads x 16, a text fusion of one
  layerwise and one refiner block over the 12 tapped text layers;
- text encoder: ``Qwen3VLModel`` with a text model of hidden 16 and 36 layers, so that the
  pipeline's default taps (hidden states 2, 5, ..., 35) exist as in the real 4B model, and a
  one-layer vision tower (the family captions with it);
- VAE: ``AutoencoderKLQwenImage`` (8 pixels per latent cell, 16 latent channels, as the
  real one);
- tokenizer: a byte-level BPE trained here on the caption words and the pipeline's prompt
  template, with Qwen's control tokens and a chat template reduced from Qwen3-VL's;
- scheduler: ``FlowMatchEulerDiscreteScheduler`` with Krea 2's settings.

Random weights render noise.

Run:
    python -m backend.families.tiny OUT_DIR --family krea2 [--seed 0]
"""
from __future__ import annotations

from pathlib import Path

from backend.families import qwen3_vl
from backend.families.common import save_tiny_pipeline
from backend.families.krea2.published import SCHEDULER

VOCAB_SENTENCES = [
    "system user assistant",
    "Describe the image by detailing the color, shape, size, texture, quantity, text, "
    "spatial relationships of the objects and background:",
    "a red circle on a white background", "a green square on a white background",
    "a blue triangle on a white background", "a yellow circle on a black background",
    "a photo of a cat, a small big large tiny shape in the center, zlr style, zerolora",
    "red green blue yellow purple magenta orange black white gray circle square triangle",
    "0 1 2 3 4 5 6 7 8 9 . , : ; ! ? ' \" ( ) - _",
]

TEXT_HIDDEN = qwen3_vl.TINY_TEXT_HIDDEN
TEXT_LAYERS = 36           # the pipeline taps hidden_states[2], [5], ..., [35]
TRANSFORMER_CONFIG = dict(
    in_channels=64, num_layers=2, attention_head_dim=16, num_attention_heads=2,
    num_key_value_heads=1, intermediate_size=32, timestep_embed_dim=32,
    text_hidden_dim=TEXT_HIDDEN, num_text_layers=12, text_num_attention_heads=2,
    text_num_key_value_heads=2, text_intermediate_size=32, num_layerwise_text_blocks=1,
    num_refiner_text_blocks=1, axes_dims_rope=(4, 6, 6), rope_theta=1000.0,
)
VAE_CONFIG = dict(
    base_dim=16, z_dim=16, dim_mult=[1, 2, 2, 2], num_res_blocks=1,
    temperal_downsample=[False, True, True], latents_mean=[0.0] * 16, latents_std=[1.0] * 16,
)


def build_tokenizer():
    return qwen3_vl.build_tiny_tokenizer(VOCAB_SENTENCES)


def build_text_encoder(tokenizer, seed: int):
    return qwen3_vl.build_tiny_text_encoder(
        tokenizer, seed, model_class="Qwen3VLModel", num_hidden_layers=TEXT_LAYERS,
        tie_word_embeddings=True)


def build_transformer(seed: int):
    """The transformer with its zero-initialised norms and modulation tables drawn too, so
    that every weight depends on the seed (the released ones are trained values)."""
    import torch
    from diffusers import Krea2Transformer2DModel

    torch.manual_seed(seed)
    model = Krea2Transformer2DModel(**TRANSFORMER_CONFIG).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("scale_shift_table") or name.endswith("norm.weight"):
                p.normal_(0.0, 0.1)
    return model


def build_components(seed: int = 0) -> dict:
    """The pipeline's components, random-init from ``seed`` (float32)."""
    import torch
    from diffusers import AutoencoderKLQwenImage, FlowMatchEulerDiscreteScheduler

    tokenizer = build_tokenizer()
    text_encoder = build_text_encoder(tokenizer, seed * 1000 + 1)
    torch.manual_seed(seed * 1000 + 2)
    vae = AutoencoderKLQwenImage(**VAE_CONFIG).eval()
    transformer = build_transformer(seed * 1000 + 3)
    scheduler = FlowMatchEulerDiscreteScheduler(**SCHEDULER)
    return dict(transformer=transformer, vae=vae, text_encoder=text_encoder,
                tokenizer=tokenizer, scheduler=scheduler)


def build_tiny_krea2(out_dir: str | Path, seed: int = 0, distilled: bool = False) -> Path:
    """Write a random-init tiny Krea 2 pipeline to ``out_dir`` (Turbo's with
    ``distilled``); return its path."""
    from diffusers import Krea2Pipeline

    pipe = Krea2Pipeline(**build_components(seed), is_distilled=distilled)
    return save_tiny_pipeline(pipe, out_dir)
