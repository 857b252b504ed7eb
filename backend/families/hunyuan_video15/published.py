"""The released HunyuanVideo 1.5 component configs (the diffusers layout of
``hunyuanvideo-community/HunyuanVideo-1.5-480p_t2v`` and its siblings), used by the estimator
and the export check before the model's own config.json files are on disk. Plain data: no
imports.

The transformer, scheduler and guider settings are those of diffusers' conversion script
(``scripts/convert_hunyuan_video1_5_to_diffusers.py``: one 8.3B transformer of 54 blocks of
width 2048 for every resolution and task; ``target_size`` 640 at 480p and 960 at 720p; flow
shift 5 at 480p, 9 for 720p text-to-video and 7 for 720p image-to-video; guidance 6); the
VAE is ``AutoencoderKLHunyuanVideo15``'s defaults (32 latent channels, 16x in space, 4x in
time); the text encoders are Qwen2.5-VL-7B-Instruct's text model (``Qwen/Qwen2.5-VL-7B-
Instruct``, 28 layers of width 3584) and Glyph-SDXL-v2's ByT5-small encoder (width 1472);
the image encoder is SigLIP so400m at 384 px (``google/siglip-so400m-patch14-384``'s vision
tower, 729 tokens of width 1152).
"""
from typing import Any

# The pipeline's system message (HunyuanVideo15Pipeline.system_message, as written there:
# the line continuations keep their indentation).
SYSTEM_MESSAGE = (
    "You are a helpful assistant. Describe the video by detailing the following aspects: "
    "        1. The main content and theme of the video.         2. The color, shape, size, "
    "texture, quantity, text, and spatial relationships of the objects.         3. Actions, "
    "events, behaviors temporal relationships, physical movement changes of the objects. "
    "        4. background environment, light, style and atmosphere.         5. camera "
    "angles, movements, and transitions used in the video.")

TRANSFORMER: dict[str, Any] = {
    "_class_name": "HunyuanVideo15Transformer3DModel",
    "in_channels": 65,
    "out_channels": 32,
    "num_attention_heads": 16,
    "attention_head_dim": 128,
    "num_layers": 54,
    "num_refiner_layers": 2,
    "mlp_ratio": 4.0,
    "patch_size": 1,
    "patch_size_t": 1,
    "qk_norm": "rms_norm",
    "text_embed_dim": 3584,
    "text_embed_2_dim": 1472,
    "image_embed_dim": 1152,
    "rope_theta": 256.0,
    "rope_axes_dim": [16, 56, 56],
    "use_meanflow": False,
    "target_size": 640,
    "task_type": "t2v",
}
VAE: dict[str, Any] = {
    "_class_name": "AutoencoderKLHunyuanVideo15",
    "in_channels": 3,
    "out_channels": 3,
    "latent_channels": 32,
    "block_out_channels": [128, 256, 512, 1024, 1024],
    "layers_per_block": 2,
    "spatial_compression_ratio": 16,
    "temporal_compression_ratio": 4,
    "downsample_match_channel": True,
    "upsample_match_channel": True,
    "scaling_factor": 1.03682,
}
TEXT_ENCODER: dict[str, Any] = {
    "architectures": ["Qwen2_5_VLTextModel"],
    "model_type": "qwen2_5_vl_text",
    "hidden_size": 3584,
    "intermediate_size": 18944,
    "num_hidden_layers": 28,
    "num_attention_heads": 28,
    "num_key_value_heads": 4,
    "max_position_embeddings": 128000,
    "rms_norm_eps": 1e-06,
    "vocab_size": 152064,
}
TEXT_ENCODER_2: dict[str, Any] = {
    "architectures": ["T5EncoderModel"],
    "model_type": "t5",
    "d_model": 1472,
    "d_ff": 3584,
    "d_kv": 64,
    "num_heads": 6,
    "num_layers": 12,
    "vocab_size": 1510,
    "feed_forward_proj": "gated-gelu",
}
IMAGE_ENCODER: dict[str, Any] = {
    "architectures": ["SiglipVisionModel"],
    "model_type": "siglip_vision_model",
    "hidden_size": 1152,
    "intermediate_size": 4304,
    "num_hidden_layers": 27,
    "num_attention_heads": 16,
    "image_size": 384,
    "patch_size": 14,
}
# scheduler/scheduler_config.json (480p): a static shift, no dynamic shifting.
SCHEDULER: dict[str, Any] = {"num_train_timesteps": 1000, "shift": 5.0}
# guider/guider_config.json: classifier-free guidance 6 (the distilled models' is 1).
GUIDER: dict[str, Any] = {"guidance_scale": 6.0}
# The flow shift of each variant's scheduler (the training schedule uses the same).
SHIFTS = {"480p_t2v": 5.0, "480p_i2v": 5.0, "720p_t2v": 9.0, "720p_i2v": 7.0}
# Tokens the transformer reads beside the video: 1000 prompt tokens (Qwen2.5-VL, after the
# 108-token system prefix the pipeline drops), 256 glyph tokens (ByT5) and 729 image tokens
# (SigLIP; zeros and masked out in text-to-video).
PROMPT_TOKENS, GLYPH_TOKENS, IMAGE_TOKENS = 1000, 256, 729

CONFIGS = {"transformer": TRANSFORMER, "vae": VAE, "text_encoder": TEXT_ENCODER,
           "text_encoder_2": TEXT_ENCODER_2}
# The 720p models' transformer differs only in its target size.
VARIANT_CONFIGS = {
    "hunyuan_video15_720p_t2v": {**CONFIGS, "transformer": {**TRANSFORMER, "target_size": 960}},
    "hunyuan_video15_480p_i2v": {**CONFIGS, "transformer": {**TRANSFORMER, "task_type": "i2v"},
                                 "image_encoder": IMAGE_ENCODER},
    "hunyuan_video15_720p_i2v": {**CONFIGS, "transformer": {**TRANSFORMER, "task_type": "i2v",
                                                            "target_size": 960},
                                 "image_encoder": IMAGE_ENCODER},
}
