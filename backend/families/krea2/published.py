"""Krea 2 component configs, for the estimator and the export check before the model's own
config.json files are on disk. Plain data; the Qwen3-VL values every size shares come from
``backend.families.qwen3_vl``.

Where the values come from (the released config.json files were not reachable from where
this was written; replace these with them when they are):
- transformer: diffusers' ``Krea2Transformer2DModel`` defaults, which its docstring gives as
  Krea 2's (diffusers 0.42 ``models/transformers/transformer_krea2.py``): 28 single-stream
  blocks of 48 heads x 128 (hidden 6144, 12 key/value heads), SwiGLU 16384, a text fusion of
  2 layerwise + 2 refiner blocks over the 12 tapped text-encoder layers of width 2560. Raw
  and Turbo share the architecture (Turbo is a distilled copy: ``Krea2Pipeline``'s
  ``is_distilled`` changes only the sampling shift).
- text encoder: Qwen3-VL-4B-Instruct (``Qwen3VLModel``; ``Krea2Pipeline``'s docstring names
  it and taps hidden states 2, 5, ..., 35 of its 36 layers), the values of
  ``Qwen/Qwen3-VL-4B-Instruct``'s config.json.
- VAE: ``AutoencoderKLQwenImage`` (the pipeline's class; the reference loads it from the
  repository of the image model whose VAE it is), the values of its released config.json.
- scheduler: ``Krea2Pipeline``'s docstring: dynamic shifting with base_shift 0.5,
  max_shift 1.15, base_image_seq_len 256, max_image_seq_len 6400.
"""
from typing import Any

from backend.families import qwen3_vl

TRANSFORMER: dict[str, Any] = {
    "_class_name": "Krea2Transformer2DModel",
    "in_channels": 64,
    "num_layers": 28,
    "attention_head_dim": 128,
    "num_attention_heads": 48,
    "num_key_value_heads": 12,
    "intermediate_size": 16384,
    "timestep_embed_dim": 256,
    "text_hidden_dim": 2560,
    "num_text_layers": 12,
    "text_num_attention_heads": 20,
    "text_num_key_value_heads": 20,
    "text_intermediate_size": 6912,
    "num_layerwise_text_blocks": 2,
    "num_refiner_text_blocks": 2,
    "axes_dims_rope": [32, 48, 48],
    "rope_theta": 1000.0,
    "norm_eps": 1e-05,
}
TEXT_ENCODER: dict[str, Any] = qwen3_vl.published_config(
    tie_word_embeddings=True,
    text={"hidden_size": 2560, "intermediate_size": 9728, "tie_word_embeddings": True},
    vision={"deepstack_visual_indexes": [5, 11, 17], "depth": 24, "hidden_size": 1024,
                "intermediate_size": 4096, "out_hidden_size": 2560},
)
VAE: dict[str, Any] = {
    "_class_name": "AutoencoderKLQwenImage",
    "attn_scales": [],
    "base_dim": 96,
    "dim_mult": [1, 2, 4, 4],
    "dropout": 0.0,
    "latents_mean": [-0.7571, -0.7089, -0.9113, 0.1075, -0.1745, 0.9653, -0.1517, 1.5508,
                     0.4134, -0.0715, 0.5517, -0.3632, -0.1922, -0.9497, 0.2503, -0.2921],
    "latents_std": [2.8184, 1.4541, 2.3275, 2.6558, 1.2196, 1.7708, 2.6052, 2.0743,
                    3.2687, 2.1526, 2.8652, 1.5579, 1.6382, 1.1253, 2.8251, 1.916],
    "num_res_blocks": 2,
    "temperal_downsample": [False, True, True],
    "z_dim": 16,
}
SCHEDULER: dict[str, Any] = {
    "num_train_timesteps": 1000,
    "use_dynamic_shifting": True,
    "base_shift": 0.5,
    "max_shift": 1.15,
    "base_image_seq_len": 256,
    "max_image_seq_len": 6400,
    "time_shift_type": "exponential",
}
CONFIGS = {"transformer": TRANSFORMER, "text_encoder": TEXT_ENCODER, "vae": VAE}
