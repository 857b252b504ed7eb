"""The released Wan 2.1 / 2.2 component configs, used by the estimator and the export
check before the model's own config.json files are on disk. Plain data: no imports.

From the ``config.json`` files of ``Wan-AI/Wan2.1-T2V-1.3B-Diffusers`` and
``Wan-AI/Wan2.1-T2V-14B-Diffusers`` (transformer/, text_encoder/, vae/, scheduler/). The
two share the text encoder (UMT5-XXL encoder), the VAE and the scheduler. Wan2.2-TI2V-5B
(``Wan-AI/Wan2.2-TI2V-5B-Diffusers``) has its own transformer and VAE (the Wan 2.2 VAE).
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
# Wan2.2-TI2V-5B-Diffusers transformer/: 30 blocks of 24 heads x 128 (width 3072) over the
# Wan 2.2 VAE's 48 latent channels.
TRANSFORMER_TI2V_5B: dict[str, Any] = {**TRANSFORMER_1_3B, "ffn_dim": 14336,
                                       "num_attention_heads": 24, "in_channels": 48,
                                       "out_channels": 48}
# vae/ (the Wan 2.2 VAE): 2x2 pixel patches in (12 channels), residual down/up-sampling,
# 16x spatial and 4x temporal compression to 48 channels; the decoder is wider (256).
VAE_22: dict[str, Any] = {
    "_class_name": "AutoencoderKLWan",
    "attn_scales": [],
    "base_dim": 160,
    "decoder_base_dim": 256,
    "dim_mult": [1, 2, 4, 4],
    "dropout": 0.0,
    "in_channels": 12,
    "out_channels": 12,
    "is_residual": True,
    "num_res_blocks": 2,
    "patch_size": 2,
    "scale_factor_spatial": 16,
    "scale_factor_temporal": 4,
    "temperal_downsample": [False, True, True],
    "z_dim": 48,
    "latents_mean": [-0.2289, -0.0052, -0.1323, -0.2339, -0.2799, 0.0174, 0.1838, 0.1557,
                     -0.1382, 0.0542, 0.2813, 0.0891, 0.1570, -0.0098, 0.0375, -0.1825,
                     -0.2246, -0.1207, -0.0698, 0.5109, 0.2665, -0.2108, -0.2158, 0.2502,
                     -0.2055, -0.0322, 0.1109, 0.1567, -0.0729, 0.0899, -0.2799, -0.1230,
                     -0.0313, -0.1649, 0.0117, 0.0723, -0.2839, -0.2083, -0.0520, 0.3748,
                     0.0152, 0.1957, 0.1433, -0.2944, 0.3573, -0.0548, -0.1681, -0.0667],
    "latents_std": [0.4765, 1.0364, 0.4514, 1.1677, 0.5313, 0.4990, 0.4818, 0.5013,
                    0.8158, 1.0344, 0.5894, 1.0901, 0.6885, 0.6165, 0.8454, 0.4978,
                    0.5759, 0.3523, 0.7135, 0.6804, 0.5833, 1.4146, 0.8986, 0.5659,
                    0.7069, 0.5338, 0.4889, 0.4917, 0.4069, 0.4999, 0.6866, 0.4093,
                    0.5709, 0.6065, 0.6415, 0.4944, 0.5726, 1.2042, 0.5458, 1.6887,
                    0.3971, 1.0600, 0.3943, 0.5537, 0.5444, 0.4089, 0.7468, 0.7744],
}
# scheduler/ of the TI2V-5B: the family's UniPC with shift 5 (the model card's sample_shift).
SCHEDULER_TI2V_5B: dict[str, Any] = {**SCHEDULER, "flow_shift": 5.0}
CONFIGS_TI2V_5B = {**CONFIGS, "transformer": TRANSFORMER_TI2V_5B, "vae": VAE_22}
VARIANT_CONFIGS = {"wan22_ti2v_5b": CONFIGS_TI2V_5B, "wan_t2v_14b": CONFIGS_14B,
                   "wan_i2v_14b_480p": CONFIGS_I2V_14B,
                   "wan_i2v_14b_720p": CONFIGS_I2V_14B, "wan22_t2v_a14b": CONFIGS_14B,
                   "wan22_i2v_a14b": CONFIGS_I2V_A14B}
