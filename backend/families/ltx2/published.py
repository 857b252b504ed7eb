"""The released LTX-2 component configs (the diffusers layout of ``Lightricks/LTX-2``), used
by the estimator and the export check before the model's own config.json files are on disk.
Plain data: no imports.

The transformer, video VAE and vocoder are the "2.0" configs of diffusers' conversion script
(``scripts/convert_ltx2_to_diffusers.py``), keys it leaves out at the classes' defaults; the
connectors are that script's text-encoder connector config; the text encoder is Gemma 3 12B
(``google/gemma-3-12b-it``, the model the reference trainer names as
``google/gemma-3-12b-it-qat-q4_0-unquantized``); the scheduler is the settings
``LTX2Pipeline`` reads (dynamic shift 0.95 -> 2.05 over 1024 -> 4096 tokens) with the
terminal sigma 0.1 of the reference trainer's LTX-2 schedule.

LTX-2.3 (``Lightricks/LTX-2.3``, the ``ltx2_3`` variant: ``VARIANT_CONFIGS``) has its own
transformer, video VAE, connectors and vocoder: the "2.3" configs of the same script
(huggingface/diffusers ``scripts/convert_ltx2_to_diffusers.py``, added with "Add Support for
LTX-2.3 Models", #13217). Its transformer has LTX-2's sizes (48 blocks; video 32 heads of 128,
cross-attention 4096; audio 32 heads of 64, cross-attention 2048; captions 3840) with gated
attention and cross-attention modulation in both streams, the prompt projections moved to
the connectors (``use_prompt_embeddings`` false) and perturbed attention; the reference
trainer builds the same model (DiffSynth-Studio ``diffsynth/configs/model_configs.py``:
``LTXModel`` with ``apply_gated_attention`` and ``cross_attention_adaln``, ``caption_channels``
None). Its audio VAE and text encoder are LTX-2's.
"""
from typing import Any

TRANSFORMER: dict[str, Any] = {
    "_class_name": "LTX2VideoTransformer3DModel",
    "in_channels": 128,
    "out_channels": 128,
    "patch_size": 1,
    "patch_size_t": 1,
    "num_attention_heads": 32,
    "attention_head_dim": 128,
    "cross_attention_dim": 4096,
    "vae_scale_factors": [8, 32, 32],
    "pos_embed_max_pos": 20,
    "base_height": 2048,
    "base_width": 2048,
    "audio_in_channels": 128,
    "audio_out_channels": 128,
    "audio_patch_size": 1,
    "audio_patch_size_t": 1,
    "audio_num_attention_heads": 32,
    "audio_attention_head_dim": 64,
    "audio_cross_attention_dim": 2048,
    "audio_scale_factor": 4,
    "audio_pos_embed_max_pos": 20,
    "audio_sampling_rate": 16000,
    "audio_hop_length": 160,
    "num_layers": 48,
    "activation_fn": "gelu-approximate",
    "qk_norm": "rms_norm_across_heads",
    "norm_elementwise_affine": False,
    "norm_eps": 1e-06,
    "caption_channels": 3840,
    "attention_bias": True,
    "attention_out_bias": True,
    "rope_theta": 10000.0,
    "causal_offset": 1,
}
VAE: dict[str, Any] = {
    "_class_name": "AutoencoderKLLTX2Video",
    "in_channels": 3,
    "out_channels": 3,
    "latent_channels": 128,
    "block_out_channels": [256, 512, 1024, 2048],
    "down_block_types": ["LTX2VideoDownBlock3D"] * 4,
    "decoder_block_out_channels": [256, 512, 1024],
    "layers_per_block": [4, 6, 6, 2, 2],
    "decoder_layers_per_block": [5, 5, 5, 5],
    "spatio_temporal_scaling": [True, True, True, True],
    "decoder_spatio_temporal_scaling": [True, True, True],
    "decoder_inject_noise": [False, False, False, False],
    "downsample_type": ["spatial", "temporal", "spatiotemporal", "spatiotemporal"],
    "upsample_residual": [True, True, True],
    "upsample_factor": [2, 2, 2],
    "timestep_conditioning": False,
    "patch_size": 4,
    "patch_size_t": 1,
    "resnet_norm_eps": 1e-06,
    "encoder_causal": True,
    "decoder_causal": False,
    "encoder_spatial_padding_mode": "zeros",
    "decoder_spatial_padding_mode": "reflect",
    "spatial_compression_ratio": 32,
    "temporal_compression_ratio": 8,
}
CONNECTORS: dict[str, Any] = {
    "_class_name": "LTX2TextConnectors",
    "caption_channels": 3840,
    "text_proj_in_factor": 49,
    "video_connector_num_attention_heads": 30,
    "video_connector_attention_head_dim": 128,
    "video_connector_num_layers": 2,
    "video_connector_num_learnable_registers": 128,
    "audio_connector_num_attention_heads": 30,
    "audio_connector_attention_head_dim": 128,
    "audio_connector_num_layers": 2,
    "audio_connector_num_learnable_registers": 128,
    "connector_rope_base_seq_len": 4096,
    "rope_theta": 10000.0,
    "rope_double_precision": True,
    "causal_temporal_positioning": False,
}
TEXT_ENCODER: dict[str, Any] = {
    "architectures": ["Gemma3ForConditionalGeneration"],
    "model_type": "gemma3",
    "boi_token_index": 255999,
    "eoi_token_index": 256000,
    "image_token_index": 262144,
    "mm_tokens_per_image": 256,
    "text_config": {
        "model_type": "gemma3_text",
        "hidden_size": 3840,
        "intermediate_size": 15360,
        "num_hidden_layers": 48,
        "num_attention_heads": 16,
        "num_key_value_heads": 8,
        "head_dim": 256,
        "query_pre_attn_scalar": 256,
        "sliding_window": 1024,
        "max_position_embeddings": 131072,
        "rope_theta": 1000000.0,
        "rope_local_base_freq": 10000.0,
        "rope_scaling": {"factor": 8.0, "rope_type": "linear"},
        "vocab_size": 262208,
    },
    "vision_config": {
        "model_type": "siglip_vision_model",
        "hidden_size": 1152,
        "image_size": 896,
        "intermediate_size": 4304,
        "num_attention_heads": 16,
        "num_hidden_layers": 27,
        "patch_size": 14,
        "vision_use_head": False,
    },
}
VOCODER: dict[str, Any] = {
    "_class_name": "LTX2Vocoder",
    "in_channels": 128,
    "hidden_channels": 1024,
    "out_channels": 2,
    "upsample_kernel_sizes": [16, 15, 8, 4, 4],
    "upsample_factors": [6, 5, 2, 2, 2],
    "resnet_kernel_sizes": [3, 7, 11],
    "resnet_dilations": [[1, 3, 5], [1, 3, 5], [1, 3, 5]],
    "leaky_relu_negative_slope": 0.1,
    "output_sampling_rate": 24000,
}
# scheduler/scheduler_config.json (FlowMatchEulerDiscreteScheduler): what LTX2Pipeline reads.
SCHEDULER: dict[str, Any] = {
    "num_train_timesteps": 1000,
    "shift": 1.0,
    "use_dynamic_shifting": True,
    "base_shift": 0.95,
    "max_shift": 2.05,
    "base_image_seq_len": 1024,
    "max_image_seq_len": 4096,
    "shift_terminal": 0.1,
    "time_shift_type": "exponential",
}
CONFIGS = {"transformer": TRANSFORMER, "text_encoder": TEXT_ENCODER, "vae": VAE,
           "connectors": CONNECTORS, "vocoder": VOCODER}

# LTX-2.3: the script's "2.3" configs (the module docstring).
TRANSFORMER_2_3: dict[str, Any] = {
    **TRANSFORMER,
    "gated_attn": True,
    "cross_attn_mod": True,
    "audio_gated_attn": True,
    "audio_cross_attn_mod": True,
    "rope_double_precision": True,
    "timestep_scale_multiplier": 1000,
    "cross_attn_timestep_scale_multiplier": 1000,
    "rope_type": "split",
    "use_prompt_embeddings": False,
    "perturbed_attn": True,
}
VAE_2_3: dict[str, Any] = {
    **VAE,
    "block_out_channels": [256, 512, 1024, 1024],
    "decoder_block_out_channels": [256, 512, 512, 1024],
    "layers_per_block": [4, 6, 4, 2, 2],
    "decoder_layers_per_block": [4, 6, 4, 2, 2],
    "decoder_spatio_temporal_scaling": [True, True, True, True],
    "decoder_inject_noise": [False, False, False, False, False],
    "upsample_type": ["spatiotemporal", "spatiotemporal", "temporal", "spatial"],
    "upsample_residual": [False, False, False, False],
    "upsample_factor": [2, 2, 1, 2],
    "decoder_spatial_padding_mode": "zeros",
}
CONNECTORS_2_3: dict[str, Any] = {
    **CONNECTORS,
    "video_connector_num_attention_heads": 32,
    "video_connector_attention_head_dim": 128,
    "video_connector_num_layers": 8,
    "video_gated_attn": True,
    "audio_connector_num_attention_heads": 32,
    "audio_connector_attention_head_dim": 64,
    "audio_connector_num_layers": 8,
    "audio_gated_attn": True,
    "rope_type": "split",
    "per_modality_projections": True,
    "video_hidden_dim": 4096,
    "audio_hidden_dim": 2048,
    "proj_bias": True,
}
# The vocoder with its bandwidth extension (16 -> 48 kHz).
VOCODER_2_3: dict[str, Any] = {
    "_class_name": "LTX2VocoderWithBWE",
    "in_channels": 128,
    "hidden_channels": 1536,
    "out_channels": 2,
    "upsample_kernel_sizes": [11, 4, 4, 4, 4, 4],
    "upsample_factors": [5, 2, 2, 2, 2, 2],
    "resnet_kernel_sizes": [3, 7, 11],
    "resnet_dilations": [[1, 3, 5], [1, 3, 5], [1, 3, 5]],
    "act_fn": "snakebeta",
    "leaky_relu_negative_slope": 0.1,
    "antialias": True,
    "antialias_ratio": 2,
    "antialias_kernel_size": 12,
    "final_act_fn": None,
    "final_bias": False,
    "bwe_in_channels": 128,
    "bwe_hidden_channels": 512,
    "bwe_out_channels": 2,
    "bwe_upsample_kernel_sizes": [12, 11, 4, 4, 4],
    "bwe_upsample_factors": [6, 5, 2, 2, 2],
    "bwe_resnet_kernel_sizes": [3, 7, 11],
    "bwe_resnet_dilations": [[1, 3, 5], [1, 3, 5], [1, 3, 5]],
    "bwe_act_fn": "snakebeta",
    "bwe_leaky_relu_negative_slope": 0.1,
    "bwe_antialias": True,
    "bwe_antialias_ratio": 2,
    "bwe_antialias_kernel_size": 12,
    "bwe_final_act_fn": None,
    "bwe_final_bias": False,
    "filter_length": 512,
    "hop_length": 80,
    "window_length": 512,
    "num_mel_channels": 64,
    "input_sampling_rate": 16000,
    "output_sampling_rate": 48000,
}
# By the spec's ``Variant.name`` (``Family.published_by_variant``).
VARIANT_CONFIGS = {
    "ltx2_3": {"transformer": TRANSFORMER_2_3, "text_encoder": TEXT_ENCODER, "vae": VAE_2_3,
               "connectors": CONNECTORS_2_3, "vocoder": VOCODER_2_3},
}
