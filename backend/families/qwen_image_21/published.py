"""Qwen-Image-2.1 component configs, for the estimator and the export check before the
model's own config.json files are on disk. Plain data; the Qwen3-VL values every size shares come from
``backend.families.qwen3_vl``.

Where the values come from (the released config.json files were not reachable from where
this was written; replace these with them when they are):
- transformer: diffusers' ``QwenImage21Transformer2DModel`` defaults, which its docstring
  documents as 2.1's (diffusers 0.42.1 ``models/transformers/transformer_qwenimage21.py``):
  32 blocks of 32 heads x 128 (hidden 4096), SwiGLU ratio 3, text width 4096, unpatched
  64-channel latents.
- text encoder: Qwen3-VL-8B-Instruct (``QwenImage21Pipeline``'s ``Qwen3VLForConditionalGeneration``
  with a context width of 4096), the values of ``Qwen/Qwen3-VL-8B-Instruct``'s config.json
  as recalled (36 layers, 32 heads, 8 key/value heads).
- VAE: diffusers' ``AutoencoderKLQwenImage21`` defaults (0.42.1
  ``models/autoencoders/autoencoder_kl_qwenimage21.py``; the latents' mean/std are not
  needed by the estimator and are left to the class).
- scheduler: ``QwenImage21Pipeline``'s fallbacks for the shift (``calculate_shift``'s
  base_shift 0.5, max_shift 1.15, base_image_seq_len 256, max_image_seq_len 4096).
"""
from typing import Any

from backend.families import qwen3_vl

TRANSFORMER: dict[str, Any] = {
    "_class_name": "QwenImage21Transformer2DModel",
    "patch_size": 1,
    "in_channels": 64,
    "out_channels": 64,
    "num_layers": 32,
    "attention_head_dim": 128,
    "num_attention_heads": 32,
    "context_in_dim": 4096,
    "mlp_ratio": 3,
    "axes_dims_rope": [16, 56, 56],
    "eps": 1e-06,
    "causal_condition": True,
}
TEXT_ENCODER: dict[str, Any] = qwen3_vl.published_config(
    tie_word_embeddings=False,
    text={"hidden_size": 4096, "intermediate_size": 12288},
    vision={"deepstack_visual_indexes": [8, 16, 24], "depth": 27, "hidden_size": 1152,
                "intermediate_size": 4304, "out_hidden_size": 4096},
)
VAE: dict[str, Any] = {
    "_class_name": "AutoencoderKLQwenImage21",
    "base_dim": 96,
    "decoder_base_dim": 144,
    "z_dim": 64,
    "dim_mult": [1, 2, 4, 8, 8],
    "num_res_blocks": 2,
    "attn_scales": [],
    "temperal_downsample": [False, True, True, True],
    "dropout": 0.0,
}
SCHEDULER: dict[str, Any] = {
    "num_train_timesteps": 1000,
    "use_dynamic_shifting": True,
    "base_shift": 0.5,
    "max_shift": 1.15,
    "base_image_seq_len": 256,
    "max_image_seq_len": 4096,
    "time_shift_type": "exponential",
}
CONFIGS = {"transformer": TRANSFORMER, "text_encoder": TEXT_ENCODER, "vae": VAE}
