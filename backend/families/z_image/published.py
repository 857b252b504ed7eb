"""The released Z-Image's component configs, used by the estimator and the export check when
the model's own config.json files are not on disk yet. Plain data: no imports.

Where they come from: the ``config.json`` files of ``Tongyi-MAI/Z-Image`` and
``Tongyi-MAI/Z-Image-Turbo`` (transformer/, text_encoder/, vae/) as published on the model
hub, read through public mirrors of those folders (their ``_name_or_path`` names the
Tongyi-MAI snapshot). Base and Turbo share every value below: Turbo is a step-distilled
copy of the same architecture; the text encoder and VAE are the same files.
"""
from typing import Any

TRANSFORMER: dict[str, Any] = {
    "_class_name": "ZImageTransformer2DModel",
    "_diffusers_version": "0.36.0",
    "all_f_patch_size": [1],
    "all_patch_size": [2],
    "axes_dims": [32, 48, 48],
    "axes_lens": [1536, 512, 512],
    "cap_feat_dim": 2560,
    "dim": 3840,
    "in_channels": 16,
    "n_heads": 30,
    "n_kv_heads": 30,
    "n_layers": 30,
    "n_refiner_layers": 2,
    "norm_eps": 1e-05,
    "qk_norm": True,
    "rope_theta": 256.0,
    "siglip_feat_dim": None,
    "t_scale": 1000.0,
}
TEXT_ENCODER: dict[str, Any] = {
    "architectures": ["Qwen3ForCausalLM"],
    "model_type": "qwen3",
    "attention_bias": False,
    "attention_dropout": 0.0,
    "bos_token_id": 151643,
    "eos_token_id": 151645,
    "head_dim": 128,
    "hidden_act": "silu",
    "hidden_size": 2560,
    "intermediate_size": 9728,
    "max_position_embeddings": 40960,
    "max_window_layers": 36,
    "num_attention_heads": 32,
    "num_hidden_layers": 36,
    "num_key_value_heads": 8,
    "rms_norm_eps": 1e-06,
    "rope_theta": 1000000,
    "tie_word_embeddings": True,
    "use_sliding_window": False,
    "vocab_size": 151936,
}
VAE: dict[str, Any] = {
    "_class_name": "AutoencoderKL",
    "act_fn": "silu",
    "block_out_channels": [128, 256, 512, 512],
    "down_block_types": ["DownEncoderBlock2D"] * 4,
    "up_block_types": ["UpDecoderBlock2D"] * 4,
    "force_upcast": True,
    "in_channels": 3,
    "out_channels": 3,
    "latent_channels": 16,
    "layers_per_block": 2,
    "mid_block_add_attention": True,
    "norm_num_groups": 32,
    "sample_size": 1024,
    "scaling_factor": 0.3611,
    "shift_factor": 0.1159,
    "use_post_quant_conv": False,
    "use_quant_conv": False,
}
# scheduler/scheduler_config.json of Tongyi-MAI/Z-Image-Turbo.
SCHEDULER: dict[str, Any] = {"num_train_timesteps": 1000, "shift": 3.0,
                             "use_dynamic_shifting": False}
CONFIGS = {"transformer": TRANSFORMER, "text_encoder": TEXT_ENCODER, "vae": VAE}
