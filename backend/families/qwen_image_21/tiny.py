"""Tiny real-architecture Qwen-Image-2.1 pipeline, built locally in seconds.

The real classes at toy sizes with random weights from fixed seeds, in the hub layout::

    OUT_DIR/model_index.json  (QwenImage21Pipeline)
    OUT_DIR/transformer/  text_encoder/  vae/  processor/  scheduler/

- transformer: ``QwenImage21Transformer2DModel``, 2 blocks of 2 heads x 16 over a text width
  of 16 and 16 latent channels;
- text encoder: ``Qwen3VLForConditionalGeneration`` with a text model of hidden 16 and two
  layers, and a one-layer vision tower;
- VAE: ``AutoencoderKLQwenImage21`` with 16 pixels per latent cell, as the real one;
- processor: the tokenizer only (``Qwen3VLProcessor`` needs torchvision): a byte-level BPE
  trained here on the caption words and the pipeline's prompt template, with Qwen's control
  tokens and a chat template reduced to text and image blocks (the captioner's prompt);
- scheduler: ``FlowMatchEulerDiscreteScheduler`` with the pipeline's shift settings.

The model_index.json is written here (the pipeline's ``save_pretrained`` would need the
processor class). Random weights render noise.

Run:
    python -m backend.families.tiny OUT_DIR --family qwen_image_21 [--seed 0]
"""
from __future__ import annotations

import json
from pathlib import Path

from backend.families import qwen3_vl
from backend.families.qwen_image_21.published import SCHEDULER

VOCAB_SENTENCES = [
    "system user assistant Comprehend and analyze the provided prompt.",
    "a red circle on a white background", "a green square on a white background",
    "a blue triangle on a white background", "a yellow circle on a black background",
    "a photo of a cat, a small big large tiny shape in the center, zlr style, zerolora",
    "red green blue yellow purple magenta orange black white gray circle square triangle",
    "0 1 2 3 4 5 6 7 8 9 . , : ; ! ? ' \" ( ) - _",
]
TEXT_HIDDEN = qwen3_vl.TINY_TEXT_HIDDEN
LATENT_CHANNELS = 16
TRANSFORMER_CONFIG = dict(
    patch_size=1, in_channels=LATENT_CHANNELS, out_channels=LATENT_CHANNELS, num_layers=2,
    attention_head_dim=16, num_attention_heads=2, context_in_dim=TEXT_HIDDEN, mlp_ratio=3,
    axes_dims_rope=(4, 6, 6), causal_condition=True,
)
VAE_CONFIG = dict(
    base_dim=8, decoder_base_dim=8, z_dim=LATENT_CHANNELS, dim_mult=[1, 1, 1, 1, 1],
    num_res_blocks=1, temperal_downsample=[False, True, True, True],
    latents_mean=[0.0] * LATENT_CHANNELS, latents_std=[1.0] * LATENT_CHANNELS,
)


def build_tokenizer():
    return qwen3_vl.build_tiny_tokenizer(VOCAB_SENTENCES)


def build_text_encoder(tokenizer, seed: int):
    return qwen3_vl.build_tiny_text_encoder(
        tokenizer, seed, model_class="Qwen3VLForConditionalGeneration", num_hidden_layers=2,
        tie_word_embeddings=False)


def build_transformer(seed: int):
    """The transformer with its zero-initialised norms drawn too, so that every weight
    depends on the seed (the released ones are trained values)."""
    import torch
    from diffusers import QwenImage21Transformer2DModel

    torch.manual_seed(seed)
    model = QwenImage21Transformer2DModel(**TRANSFORMER_CONFIG).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight") or name.endswith("text_norm.weight"):
                p.normal_(0.0, 0.1)
    return model


def build_components(seed: int = 0) -> dict:
    """The pipeline's components, random-init from ``seed`` (float32); the processor is
    its tokenizer."""
    import torch
    from diffusers import AutoencoderKLQwenImage21, FlowMatchEulerDiscreteScheduler

    tokenizer = build_tokenizer()
    text_encoder = build_text_encoder(tokenizer, seed * 1000 + 1)
    torch.manual_seed(seed * 1000 + 2)
    vae = AutoencoderKLQwenImage21(**VAE_CONFIG).eval()
    transformer = build_transformer(seed * 1000 + 3)
    scheduler = FlowMatchEulerDiscreteScheduler(**SCHEDULER)
    return dict(transformer=transformer, vae=vae, text_encoder=text_encoder,
                processor=tokenizer, scheduler=scheduler)


def build_tiny_qwen_image_21(out_dir: str | Path, seed: int = 0) -> Path:
    """Write a random-init tiny Qwen-Image-2.1 pipeline to ``out_dir``; return its path."""
    import diffusers
    import transformers

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    parts = build_components(seed)
    index = {"_class_name": "QwenImage21Pipeline", "_diffusers_version": diffusers.__version__,
             "sample_sigmas": None}
    for name, obj in parts.items():
        if name == "processor":
            obj.save_pretrained(out / name)
            index[name] = ["transformers", "Qwen3VLProcessor"]
            continue
        kwargs = {} if name == "scheduler" else {"safe_serialization": True}
        obj.save_pretrained(out / name, **kwargs)
        lib = "transformers" if isinstance(obj, transformers.PreTrainedModel) else "diffusers"
        index[name] = [lib, type(obj).__name__]
    (out / "model_index.json").write_text(json.dumps(index, indent=2), encoding="utf-8")
    leftovers = [p for p in out.rglob("*") if p.suffix in (".bin", ".pt", ".pth", ".pkl")]
    if leftovers:
        raise RuntimeError(f"non-safetensors weights written: {leftovers}")
    return out
