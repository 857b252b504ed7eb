"""Tiny real-architecture LTX-2 pipeline, built locally in seconds.

The components are the real classes at toy sizes with random weights from fixed seeds:
diffusers' ``LTX2VideoTransformer3DModel`` (video and audio streams), ``AutoencoderKLLTX2Video``
in the released layout (4x4 pixel patches, then spatial, temporal and two spatiotemporal
downsamplings: 32x in space, 8x in time, so clips take 8k+1 frames),
``AutoencoderKLLTX2Audio`` (4x in time and in mel bands, as released),
``LTX2TextConnectors`` (with the released 128 learnable registers) and ``LTX2Vocoder`` (one
hop of sound per mel frame, as released); transformers' ``Gemma3ForConditionalGeneration`` (a
two-layer text model and a one-layer SigLIP vision tower) and a Gemma tokenizer (a unigram
model trained on a few sentences, ``<bos>`` first, padded on the left); the released
scheduler settings. With ``bwe`` the vocoder is LTX-2.3's ``LTX2VocoderWithBWE`` instead
(``build_bwe_vocoder``: the same vocoder writing 16 kHz, then a bandwidth extension to 48
kHz). Saved in the hub layout of ``Lightricks/LTX-2``::

    OUT_DIR/model_index.json
    OUT_DIR/transformer/  text_encoder/  tokenizer/  connectors/  vae/  audio_vae/
    OUT_DIR/vocoder/  scheduler/

so ``LTX2Pipeline.from_pretrained(OUT_DIR)`` loads it. Weights are safetensors only.

Run:
    python -m backend.families.tiny OUT_DIR --family ltx2 [--seed 0]
"""
from __future__ import annotations

from pathlib import Path

from backend.families.common import CLIP_SENTENCES, save_tiny_pipeline, train_unigram
from backend.families.ltx2.audio import MelSettings, mel_filterbank
from backend.families.ltx2.published import SCHEDULER

VOCAB_SENTENCES = CLIP_SENTENCES
TOKENIZER_VOCAB_SIZE = 160
SPECIAL_TOKENS = ["<pad>", "<eos>", "<bos>", "<unk>"]
MAX_LENGTH = 1024  # the pipeline's max_sequence_length (its prompts are padded to it)

TEXT_CONFIG = dict(hidden_size=16, intermediate_size=32, num_hidden_layers=2,
                   num_attention_heads=2, num_key_value_heads=1, head_dim=8,
                   sliding_window=64, max_position_embeddings=MAX_LENGTH,
                   query_pre_attn_scalar=8)
VISION_CONFIG = dict(hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                     num_attention_heads=2, image_size=28, patch_size=14)
# The released layout (4x4 patches; spatial, temporal, spatiotemporal x2 downsampling:
# 32x in space, 8x in time) at 1/32 of its widths, 8 latent channels; the decoder pads with
# zeros.
VAE_CONFIG = dict(latent_channels=8, block_out_channels=(8, 16, 32, 64),
                  decoder_block_out_channels=(8, 16, 32), layers_per_block=(1, 1, 1, 1, 1),
                  decoder_layers_per_block=(1, 1, 1, 1), patch_size=4, patch_size_t=1,
                  encoder_causal=True, decoder_causal=False,
                  spatial_compression_ratio=32, temporal_compression_ratio=8,
                  # The released decoder pads by reflection, which a 1x1 latent (a 32x32
                  # test clip) cannot take.
                  decoder_spatial_padding_mode="zeros")
# The released audio VAE's layout (two causal downsamplings: 4x in time and in mel bands) at
# toy widths, 8 mel bands of 16 kHz sound at a hop of 160 samples; its latents pack 2
# channels x 2 bands, the size of its per-channel statistics (``base_channels``).
AUDIO_VAE_CONFIG = dict(base_channels=4, output_channels=2, ch_mult=(1, 2, 4),
                        num_res_blocks=1, attn_resolutions=None, in_channels=2, resolution=32,
                        latent_channels=2, mel_bins=8, sample_rate=16000, mel_hop_length=160)
# One mel frame becomes 8 x 5 x 4 = 160 samples at 16 kHz: one hop of the audio VAE, as the
# released vocoder's 240 samples at 24 kHz are.
VOCODER_CONFIG = dict(hidden_channels=32, out_channels=2, upsample_kernel_sizes=[16, 10, 8],
                      upsample_factors=[8, 5, 4], resnet_kernel_sizes=[3],
                      resnet_dilations=[[1, 3, 5]], output_sampling_rate=16000)
# LTX-2.3's vocoder with its bandwidth extension (``published.VOCODER_2_3``) at toy widths:
# the vocoder writes 8 x 5 x 4 = 160 samples a mel frame at 16 kHz (one hop of the audio
# VAE, as released), the extension takes the log-mel of that sound (8 bands, a hop of 80
# samples, as released) and writes 6 x 5 x 8 = 240 samples a frame at 48 kHz, added to the
# vocoder's sound resampled 3x. Snake activations with anti-aliasing, as released.
BWE_VOCODER_CONFIG = dict(hidden_channels=32, out_channels=2, upsample_kernel_sizes=[16, 15, 8],
                          upsample_factors=[8, 5, 4], resnet_kernel_sizes=[3],
                          resnet_dilations=[[1, 3, 5]], act_fn="snakebeta", antialias=True,
                          final_act_fn=None, final_bias=False, bwe_hidden_channels=32,
                          bwe_out_channels=2, bwe_upsample_kernel_sizes=[12, 15, 16],
                          bwe_upsample_factors=[6, 5, 8], bwe_resnet_kernel_sizes=[3],
                          bwe_resnet_dilations=[[1, 3, 5]], bwe_act_fn="snakebeta",
                          bwe_antialias=True, bwe_final_act_fn=None, bwe_final_bias=False,
                          filter_length=128, hop_length=80, window_length=128,
                          num_mel_channels=8, input_sampling_rate=16000,
                          output_sampling_rate=48000)
# Video stream 2 x 8 wide, audio stream 2 x 4; the audio latents pack 2 channels x 2 mel bins.
TRANSFORMER_CONFIG = dict(in_channels=8, out_channels=8, num_attention_heads=2,
                          attention_head_dim=8, cross_attention_dim=16, audio_in_channels=4,
                          audio_out_channels=4, audio_num_attention_heads=2,
                          audio_attention_head_dim=4, audio_cross_attention_dim=8,
                          num_layers=2, caption_channels=16)
CONNECTORS_CONFIG = dict(caption_channels=16, text_proj_in_factor=3,
                         video_connector_num_attention_heads=2,
                         video_connector_attention_head_dim=8, video_connector_num_layers=1,
                         audio_connector_num_attention_heads=2,
                         audio_connector_attention_head_dim=8, audio_connector_num_layers=1)


def build_tokenizer():
    """A unigram tokenizer wrapped as ``GemmaTokenizerFast``: ``<bos>`` before every prompt,
    ``<pad>`` (id 0) as the pad token."""
    from tokenizers import processors
    from transformers import GemmaTokenizerFast

    tok = train_unigram(VOCAB_SENTENCES, SPECIAL_TOKENS, TOKENIZER_VOCAB_SIZE)
    bos = tok.token_to_id("<bos>")
    tok.post_processor = processors.TemplateProcessing(single="<bos> $A",
                                                       special_tokens=[("<bos>", bos)])
    return GemmaTokenizerFast(tokenizer_object=tok, pad_token="<pad>", eos_token="<eos>",
                              bos_token="<bos>", unk_token="<unk>", padding_side="left",
                              model_max_length=MAX_LENGTH)


def build_text_encoder(tokenizer, seed: int):
    """A two-layer ``Gemma3ForConditionalGeneration`` (the pipeline stacks every hidden
    state of its text model) with a one-layer vision tower it never runs."""
    import torch
    from transformers import Gemma3Config, Gemma3ForConditionalGeneration

    vocab = max(TOKENIZER_VOCAB_SIZE, len(tokenizer)) + 3
    config = Gemma3Config(
        text_config={**TEXT_CONFIG, "vocab_size": vocab, "pad_token_id": 0,
                     "bos_token_id": tokenizer.bos_token_id,
                     "eos_token_id": tokenizer.eos_token_id},
        vision_config=VISION_CONFIG, mm_tokens_per_image=4, boi_token_index=vocab - 3,
        eoi_token_index=vocab - 2, image_token_index=vocab - 1)
    torch.manual_seed(seed)
    return Gemma3ForConditionalGeneration(config).eval()


def build_bwe_vocoder(seed: int = 0):
    """LTX-2.3's ``LTX2VocoderWithBWE`` at toy sizes (``BWE_VOCODER_CONFIG``, reading the
    tiny audio VAE's mel bands), random-init from ``seed``; the extension's STFT and mel
    buffers (which the released weights carry) are a Hann-windowed DFT and the Slaney mel
    filterbank of ``audio.mel_filterbank``, so its mel is a real one."""
    import math

    import torch
    from diffusers.pipelines.ltx2.vocoder import LTX2VocoderWithBWE

    channels = AUDIO_VAE_CONFIG["output_channels"]
    cfg = BWE_VOCODER_CONFIG
    torch.manual_seed(seed * 1000 + 6)
    vocoder = LTX2VocoderWithBWE(in_channels=channels * AUDIO_VAE_CONFIG["mel_bins"],
                                 bwe_in_channels=channels * cfg["num_mel_channels"],
                                 **cfg).eval()
    n, freqs = cfg["filter_length"], cfg["filter_length"] // 2 + 1
    t = torch.arange(n, dtype=torch.float64)
    k = torch.arange(freqs, dtype=torch.float64).unsqueeze(1)
    window = torch.hann_window(cfg["window_length"], periodic=True, dtype=torch.float64)
    angle = 2 * math.pi * k * t / n
    basis = torch.cat([torch.cos(angle), -torch.sin(angle)]) * window
    stft = vocoder.mel_stft
    stft.stft_fn.forward_basis.copy_(basis.unsqueeze(1).float())
    stft.mel_basis.copy_(mel_filterbank(MelSettings(
        cfg["input_sampling_rate"], cfg["hop_length"], cfg["num_mel_channels"], 1, n_fft=n)))
    return vocoder


def build_sound_components(seed: int = 0, bwe: bool = False) -> tuple:
    """(audio VAE, vocoder), random-init from ``seed`` as ``build_components`` makes them;
    the VAE's per-channel statistics other than zeros and ones, so that the audio latents'
    normalisation shows. With ``bwe`` the vocoder is LTX-2.3's (``build_bwe_vocoder``)."""
    import torch
    from diffusers import AutoencoderKLLTX2Audio
    from diffusers.pipelines.ltx2.vocoder import LTX2Vocoder

    torch.manual_seed(seed * 1000 + 5)
    audio_vae = AutoencoderKLLTX2Audio(**AUDIO_VAE_CONFIG).eval()
    audio_vae.latents_mean.copy_(torch.randn(AUDIO_VAE_CONFIG["base_channels"]) * 0.1)
    audio_vae.latents_std.copy_(torch.rand(AUDIO_VAE_CONFIG["base_channels"]) + 0.5)
    if bwe:
        return audio_vae, build_bwe_vocoder(seed)
    torch.manual_seed(seed * 1000 + 6)
    vocoder = LTX2Vocoder(in_channels=AUDIO_VAE_CONFIG["output_channels"]
                          * AUDIO_VAE_CONFIG["mel_bins"], **VOCODER_CONFIG).eval()
    return audio_vae, vocoder


def build_components(seed: int = 0, bwe: bool = False) -> dict:
    """The eight pipeline components, random-init from ``seed`` (float32); with ``bwe``
    LTX-2.3's vocoder."""
    import torch
    from diffusers import (AutoencoderKLLTX2Video, FlowMatchEulerDiscreteScheduler,
                           LTX2VideoTransformer3DModel)
    from diffusers.pipelines.ltx2 import LTX2TextConnectors

    tokenizer = build_tokenizer()
    text_encoder = build_text_encoder(tokenizer, seed * 1000 + 1)
    torch.manual_seed(seed * 1000 + 2)
    vae = AutoencoderKLLTX2Video(**VAE_CONFIG).eval()
    # Per-channel statistics other than the class's zeros and ones, so that the latents'
    # normalisation shows (the released VAE has its own).
    vae.latents_mean.copy_(torch.randn(VAE_CONFIG["latent_channels"]) * 0.1)
    vae.latents_std.copy_(torch.rand(VAE_CONFIG["latent_channels"]) + 0.5)
    torch.manual_seed(seed * 1000 + 3)
    transformer = LTX2VideoTransformer3DModel(**TRANSFORMER_CONFIG).eval()
    torch.manual_seed(seed * 1000 + 4)
    connectors = LTX2TextConnectors(**CONNECTORS_CONFIG).eval()
    audio_vae, vocoder = build_sound_components(seed, bwe)
    scheduler = FlowMatchEulerDiscreteScheduler(**SCHEDULER)
    return dict(transformer=transformer, vae=vae, audio_vae=audio_vae, text_encoder=text_encoder,
                tokenizer=tokenizer, connectors=connectors, vocoder=vocoder,
                scheduler=scheduler)


def build_tiny_ltx2(out_dir: str | Path, seed: int = 0, bwe: bool = False) -> Path:
    """Write a random-init tiny LTX-2 pipeline to ``out_dir`` (with ``bwe`` LTX-2.3's
    vocoder); return its path."""
    from diffusers import LTX2Pipeline

    return save_tiny_pipeline(LTX2Pipeline(**build_components(seed, bwe)), out_dir)
