"""The released Wan 2.1 / 2.2 component configs, used by the estimator and the export
check before the model's own config.json files are on disk. Plain data: no imports.

From the ``config.json`` files of ``Wan-AI/Wan2.1-T2V-1.3B-Diffusers`` and
``Wan-AI/Wan2.1-T2V-14B-Diffusers`` (transformer/, text_encoder/, vae/, scheduler/). The
two share the text encoder (UMT5-XXL encoder), the VAE and the scheduler.
"""
from typing import Any

TRANSFORMER_1_3B: dict[str, Any] = {
    "_class_name": "WanTransformer3DModel",
    "added_kv_proj_dim": None,
    "attention_head_dim": 128,
    "cross_attn_norm": True,
    "eps": 1e-06,
    "ffn_dim": 8960,
    "freq_dim": 256,
    "image_dim": None,
    "in_channels": 16,
    "num_attention_heads": 12,
    "num_layers": 30,
    "out_channels": 16,
    "patch_size": [1, 2, 2],
    "qk_norm": "rms_norm_across_heads",
    "rope_max_seq_len": 1024,
    "text_dim": 4096,
}
TRANSFORMER_14B: dict[str, Any] = {**TRANSFORMER_1_3B, "ffn_dim": 13824,
                                   "num_attention_heads": 40, "num_layers": 40}
TEXT_ENCODER: dict[str, Any] = {
    "architectures": ["UMT5EncoderModel"],
    "model_type": "umt5",
    "d_ff": 10240,
    "d_kv": 64,
    "d_model": 4096,
    "dense_act_fn": "gelu_new",
    "feed_forward_proj": "gated-gelu",
    "is_gated_act": True,
    "num_heads": 64,
    "num_layers": 24,
    "relative_attention_max_distance": 128,
    "relative_attention_num_buckets": 32,
    "vocab_size": 256384,
}
VAE: dict[str, Any] = {
    "_class_name": "AutoencoderKLWan",
    "attn_scales": [],
    "base_dim": 96,
    "dim_mult": [1, 2, 4, 4],
    "dropout": 0.0,
    "num_res_blocks": 2,
    "temperal_downsample": [False, True, True],
    "z_dim": 16,
    "latents_mean": [-0.7571, -0.7089, -0.9113, 0.1075, -0.1745, 0.9653, -0.1517, 1.5508,
                     0.4134, -0.0715, 0.5517, -0.3632, -0.1922, -0.9497, 0.2503, -0.2921],
    "latents_std": [2.8184, 1.4541, 2.3275, 2.6558, 1.2196, 1.7708, 2.6052, 2.0743,
                    3.2687, 2.1526, 2.8652, 1.5579, 1.6382, 1.1253, 2.8251, 1.916],
}
# scheduler/scheduler_config.json (UniPCMultistepScheduler, flow prediction, shift 3).
SCHEDULER: dict[str, Any] = {"num_train_timesteps": 1000, "flow_shift": 3.0,
                             "prediction_type": "flow_prediction", "use_flow_sigmas": True,
                             "solver_order": 2, "predict_x0": True, "solver_type": "bh2",
                             "lower_order_final": True}
# Wan2.1-I2V-14B-480P/720P-Diffusers transformer/ (the two share it): the 14B with 36 input
# channels (noisy latents + first-frame mask and latents) and the CLIP image cross-attention.
TRANSFORMER_I2V_14B: dict[str, Any] = {**TRANSFORMER_14B, "in_channels": 36,
                                       "image_dim": 1280, "added_kv_proj_dim": 5120}
# image_encoder/ (open-clip XLM-RoBERTa ViT-H/14's vision tower as CLIPVisionModel).
IMAGE_ENCODER: dict[str, Any] = {
    "architectures": ["CLIPVisionModel"], "model_type": "clip_vision_model",
    "hidden_size": 1280, "image_size": 224, "intermediate_size": 5120,
    "num_attention_heads": 16, "num_hidden_layers": 32, "patch_size": 14,
    "projection_dim": 1024,
}
CONFIGS = {"transformer": TRANSFORMER_1_3B, "text_encoder": TEXT_ENCODER, "vae": VAE}
CONFIGS_14B = {**CONFIGS, "transformer": TRANSFORMER_14B}
CONFIGS_I2V_14B = {**CONFIGS, "transformer": TRANSFORMER_I2V_14B,
                   "image_encoder": IMAGE_ENCODER}
# Wan2.2-T2V-A14B / -I2V-A14B-Diffusers: each expert (transformer/, transformer_2/) is the
# 14B architecture; the I2V experts take the 36 condition channels but no CLIP embedding.
CONFIGS_I2V_A14B = {**CONFIGS, "transformer": {**TRANSFORMER_14B, "in_channels": 36}}
VARIANT_CONFIGS = {"wan_t2v_14b": CONFIGS_14B, "wan_i2v_14b_480p": CONFIGS_I2V_14B,
                   "wan_i2v_14b_720p": CONFIGS_I2V_14B, "wan22_t2v_a14b": CONFIGS_14B,
                   "wan22_i2v_a14b": CONFIGS_I2V_A14B}
