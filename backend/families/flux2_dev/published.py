"""FLUX.2 [dev] component configs, for the estimator and the export check before the
model's own config.json files are on disk. Plain data.

Where the values come from (the released config.json files were not reachable from where
this was written; replace these with them when they are):
- transformer: diffusers' ``Flux2Transformer2DModel`` defaults, which are FLUX.2 [dev]'s
  (diffusers 0.42 ``models/transformers/transformer_flux2.py``): 8 double + 48 single
  blocks (the reference's FLUX.2-dev LoRA script names single blocks 0..47), 48 heads x 128,
  MLP ratio 3, guidance embedding on; ``joint_attention_dim`` 15360 is 3 x the text
  encoder's hidden size (the pipeline stacks hidden states 10, 20 and 30). 32 B parameters.
- text encoder: Mistral Small 3.1 24B (``Mistral3ForConditionalGeneration``), the values of
  ``mistralai/Mistral-Small-3.1-24B-Instruct-2503``'s config.json (a Mistral text model of
  40 layers x 5120, a Pixtral vision tower of 24 layers x 1024).
- VAE and scheduler: FLUX.2's, the same files in every FLUX.2 repository
  (``backend/families/flux2.py``).
"""
from typing import Any

from backend.families.flux2 import VAE

TRANSFORMER: dict[str, Any] = {
    "_class_name": "Flux2Transformer2DModel",
    "attention_head_dim": 128,
    "axes_dims_rope": [32, 32, 32, 32],
    "eps": 1e-06,
    "guidance_embeds": True,
    "in_channels": 128,
    "joint_attention_dim": 15360,
    "mlp_ratio": 3.0,
    "num_attention_heads": 48,
    "num_layers": 8,
    "num_single_layers": 48,
    "out_channels": None,
    "patch_size": 1,
    "rope_theta": 2000,
    "timestep_guidance_channels": 256,
}
TEXT_ENCODER: dict[str, Any] = {
    "architectures": ["Mistral3ForConditionalGeneration"],
    "model_type": "mistral3",
    "image_token_index": 10,
    "multimodal_projector_bias": False,
    "projector_hidden_act": "gelu",
    "spatial_merge_size": 2,
    "vision_feature_layer": -1,
    "tie_word_embeddings": False,
    "text_config": {
        "model_type": "mistral",
        "head_dim": 128,
        "hidden_act": "silu",
        "hidden_size": 5120,
        "intermediate_size": 32768,
        "max_position_embeddings": 131072,
        "num_attention_heads": 32,
        "num_hidden_layers": 40,
        "num_key_value_heads": 8,
        "rms_norm_eps": 1e-05,
        "rope_theta": 1000000000.0,
        "sliding_window": None,
        "tie_word_embeddings": False,
        "vocab_size": 131072,
    },
    "vision_config": {
        "model_type": "pixtral",
        "head_dim": 64,
        "hidden_act": "silu",
        "hidden_size": 1024,
        "image_size": 1540,
        "intermediate_size": 4096,
        "num_attention_heads": 16,
        "num_channels": 3,
        "num_hidden_layers": 24,
        "patch_size": 14,
        "rope_theta": 10000.0,
    },
}
CONFIGS = {"transformer": TRANSFORMER, "text_encoder": TEXT_ENCODER, "vae": VAE}
