"""FLUX.2 [klein] component configs, for the estimator and the export check before the
model's own config.json files are on disk. Plain data.

Where the values come from (the released config.json files were not reachable from where
this was written; replace these with them when they are):
- transformer: diffusers' ``Flux2Transformer2DModel`` arguments for klein. Block counts from
  the reference's klein LoRA scripts (their target lists name single blocks 0..19 for 4B,
  0..23 for 9B) and published architecture notes (4B: 5 double + 20 single blocks, 24
  heads x 128, MLP ratio 3); ``joint_attention_dim`` is 3 x the text encoder's hidden size
  (the pipeline stacks three hidden-state layers). The parameter counts these give, 3.9 B
  and 9.1 B, match the names.
- text encoder: Qwen3-4B / Qwen3-8B (``Qwen3ForCausalLM``), the klein models' encoders.
- VAE and scheduler: FLUX.2's, the same files in every FLUX.2 repository
  (``backend/families/flux2.py``).
"""
from typing import Any

from backend.families.flux2 import VAE

TRANSFORMER_4B: dict[str, Any] = {
    "_class_name": "Flux2Transformer2DModel",
    "attention_head_dim": 128,
    "axes_dims_rope": [32, 32, 32, 32],
    "eps": 1e-06,
    "guidance_embeds": False,
    "in_channels": 128,
    "joint_attention_dim": 7680,
    "mlp_ratio": 3.0,
    "num_attention_heads": 24,
    "num_layers": 5,
    "num_single_layers": 20,
    "out_channels": None,
    "patch_size": 1,
    "rope_theta": 2000,
    "timestep_guidance_channels": 256,
}
TRANSFORMER_9B: dict[str, Any] = {**TRANSFORMER_4B, "joint_attention_dim": 12288,
                                  "num_attention_heads": 32, "num_layers": 8,
                                  "num_single_layers": 24}

_QWEN3: dict[str, Any] = {
    "architectures": ["Qwen3ForCausalLM"],
    "model_type": "qwen3",
    "head_dim": 128,
    "hidden_act": "silu",
    "max_position_embeddings": 40960,
    "rms_norm_eps": 1e-06,
    "rope_theta": 1000000,
    "vocab_size": 151936,
}
TEXT_ENCODER_4B: dict[str, Any] = {**_QWEN3, "hidden_size": 2560, "intermediate_size": 9728,
                                   "num_attention_heads": 32, "num_hidden_layers": 36,
                                   "num_key_value_heads": 8, "tie_word_embeddings": True}
TEXT_ENCODER_9B: dict[str, Any] = {**_QWEN3, "hidden_size": 4096, "intermediate_size": 12288,
                                   "num_attention_heads": 32, "num_hidden_layers": 36,
                                   "num_key_value_heads": 8, "tie_word_embeddings": False}
CONFIGS = {"transformer": TRANSFORMER_4B, "text_encoder": TEXT_ENCODER_4B, "vae": VAE}
CONFIGS_9B = {"transformer": TRANSFORMER_9B, "text_encoder": TEXT_ENCODER_9B, "vae": VAE}
