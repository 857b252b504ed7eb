"""Tiny real-architecture HunyuanVideo 1.5 pipelines, built locally in seconds.

The components are the real classes at toy sizes with random weights from fixed seeds:
diffusers' ``HunyuanVideo15Transformer3DModel`` (65 -> 2C + 1 input channels: the noisy
latents, the first-frame condition and its mask), ``AutoencoderKLHunyuanVideo15`` in the
released layout (five levels: 16x in space, 4x in time, so clips take 4k+1 frames and sides
multiples of 16), ``FlowMatchEulerDiscreteScheduler`` and ``ClassifierFreeGuidance`` with the
released settings; transformers' ``Qwen2_5_VLTextModel`` (three layers: the pipeline reads
the third hidden state from the end) with a ``Qwen2Tokenizer`` (a byte-level BPE trained on
the pipeline's system message and a few captions, with Qwen's chat template), and the
glyph encoder ``T5EncoderModel`` with ``ByT5Tokenizer`` (bytes: no vocabulary file).
``build_tiny_i2v`` adds the image-to-video layout's ``SiglipVisionModel`` and
``SiglipImageProcessor`` (``HunyuanVideo15ImageToVideoPipeline``). Saved in the hub layout
of ``hunyuanvideo-community/HunyuanVideo-1.5-480p_t2v``::

    OUT_DIR/model_index.json
    OUT_DIR/transformer/  text_encoder/  tokenizer/  text_encoder_2/  tokenizer_2/
    OUT_DIR/vae/  scheduler/  guider/  [image_encoder/  feature_extractor/]

so ``HunyuanVideo15Pipeline.from_pretrained(OUT_DIR)`` loads it. Weights are safetensors only.

Run:
    python -m backend.families.tiny OUT_DIR --family hunyuan_video15 [--variant NAME]
"""
from __future__ import annotations

from pathlib import Path

from backend.families.common import (CLIP_SENTENCES, bpe_vocab_and_merges, quiet_image_processor,
                                     save_tiny_pipeline, train_byte_level_bpe)
from backend.families.hunyuan_video15.published import GUIDER, SCHEDULER, SYSTEM_MESSAGE

SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
TOKENIZER_VOCAB_SIZE = 600
# Qwen2.5's chat template for text messages (what the pipeline's apply_chat_template renders).
CHAT_TEMPLATE = (
    "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' + "
    "message['content'] + '<|im_end|>' + '\\n' }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}")
# Three layers: the pipeline takes hidden_states[-3] (two layers skipped). head_dim 16 with
# the multimodal rope's sections (2, 3, 3).
TEXT_CONFIG = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=3,
                   num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=2048,
                   rope_parameters={"rope_type": "default", "rope_theta": 1000000.0,
                                    "mrope_section": [2, 3, 3]})
# The glyph encoder: a one-layer T5 encoder over ByT5's 384 byte ids.
GLYPH_CONFIG = dict(vocab_size=384, d_model=16, d_kv=8, d_ff=32, num_layers=1, num_heads=2,
                    relative_attention_num_buckets=8, relative_attention_max_distance=32,
                    feed_forward_proj="gated-gelu", is_encoder_decoder=False,
                    pad_token_id=0, eos_token_id=1, decoder_start_token_id=0)
# The released layout (five levels, 16x in space, 4x in time) at toy widths, 8 latent
# channels; the released scaling factor.
VAE_CONFIG = dict(latent_channels=8, block_out_channels=(8, 8, 16, 16, 16), layers_per_block=1,
                  spatial_compression_ratio=16, temporal_compression_ratio=4)
# 2 heads x 16 (rope axes 4 + 6 + 6), two double-stream blocks and one refiner block; text
# widths of the tiny encoders; target_size 32: the image-to-video pipeline sizes its clip
# from the image within 32x32's area.
TRANSFORMER_CONFIG = dict(in_channels=2 * 8 + 1, out_channels=8, num_attention_heads=2,
                          attention_head_dim=16, num_layers=2, num_refiner_layers=1,
                          text_embed_dim=32, text_embed_2_dim=16, image_embed_dim=16,
                          rope_axes_dim=(4, 6, 6), target_size=32, task_type="t2v")
# SigLIP at toy size: 32x32 images in 8x8 patches, 16 tokens of width 16.
SIGLIP_CONFIG = dict(hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                     num_attention_heads=2, image_size=32, patch_size=8)
SIGLIP_PROCESSOR = dict(size={"height": 32, "width": 32}, image_mean=[0.5, 0.5, 0.5],
                        image_std=[0.5, 0.5, 0.5], resample=2, do_resize=True,
                        do_normalize=True, do_rescale=True)


def build_tokenizer():
    """A byte-level BPE trained on the pipeline's system message and the test captions, as a
    ``Qwen2Tokenizer`` with Qwen's chat template, padded with ``<|endoftext|>``."""
    from transformers import Qwen2Tokenizer

    corpus = [f"system {SYSTEM_MESSAGE} user"] + CLIP_SENTENCES
    tok = train_byte_level_bpe(corpus, TOKENIZER_VOCAB_SIZE - len(SPECIAL_TOKENS))
    vocab, merges = bpe_vocab_and_merges(tok, SPECIAL_TOKENS)
    tokenizer = Qwen2Tokenizer(vocab=vocab, merges=merges, unk_token=None,
                               eos_token="<|im_end|>", pad_token="<|endoftext|>",
                               additional_special_tokens=SPECIAL_TOKENS[1:],
                               model_max_length=2048, clean_up_tokenization_spaces=False)
    tokenizer.chat_template = CHAT_TEMPLATE
    return tokenizer


def build_text_encoder(tokenizer, seed: int):
    import torch
    from transformers import Qwen2_5_VLTextConfig, Qwen2_5_VLTextModel

    config = Qwen2_5_VLTextConfig(**TEXT_CONFIG, vocab_size=len(tokenizer),
                                  pad_token_id=tokenizer.pad_token_id,
                                  bos_token_id=tokenizer.pad_token_id,
                                  eos_token_id=tokenizer.eos_token_id)
    torch.manual_seed(seed)
    return Qwen2_5_VLTextModel(config).eval()


def build_glyph_encoder(seed: int):
    import torch
    from transformers import T5Config, T5EncoderModel

    torch.manual_seed(seed)
    return T5EncoderModel(T5Config(**GLYPH_CONFIG)).eval()


def build_components(seed: int = 0, task_type: str = "t2v") -> dict:
    """The eight pipeline components, random-init from ``seed`` (float32)."""
    import torch
    from diffusers import (AutoencoderKLHunyuanVideo15, ClassifierFreeGuidance,
                           FlowMatchEulerDiscreteScheduler, HunyuanVideo15Transformer3DModel)
    from transformers import ByT5Tokenizer

    tokenizer = build_tokenizer()
    text_encoder = build_text_encoder(tokenizer, seed * 1000 + 1)
    text_encoder_2 = build_glyph_encoder(seed * 1000 + 2)
    torch.manual_seed(seed * 1000 + 3)
    vae = AutoencoderKLHunyuanVideo15(**VAE_CONFIG).eval()
    torch.manual_seed(seed * 1000 + 4)
    transformer = HunyuanVideo15Transformer3DModel(
        **{**TRANSFORMER_CONFIG, "task_type": task_type}).eval()
    return dict(transformer=transformer, vae=vae, text_encoder=text_encoder,
                tokenizer=tokenizer, text_encoder_2=text_encoder_2,
                tokenizer_2=ByT5Tokenizer(),
                scheduler=FlowMatchEulerDiscreteScheduler(**SCHEDULER),
                guider=ClassifierFreeGuidance(**GUIDER))


def build_image_encoder(seed: int):
    import torch
    from transformers import SiglipVisionConfig, SiglipVisionModel

    torch.manual_seed(seed)
    return SiglipVisionModel(SiglipVisionConfig(**SIGLIP_CONFIG)).eval()


def build_image_processor():
    from transformers import SiglipImageProcessor

    return quiet_image_processor(SiglipImageProcessor, **SIGLIP_PROCESSOR)


def build_tiny_t2v(out_dir: str | Path, seed: int = 0) -> Path:
    """Write a random-init tiny text-to-video pipeline to ``out_dir``; return its path."""
    from diffusers import HunyuanVideo15Pipeline

    return save_tiny_pipeline(HunyuanVideo15Pipeline(**build_components(seed)), out_dir)


def build_tiny_i2v(out_dir: str | Path, seed: int = 0) -> Path:
    """Write a random-init tiny image-to-video pipeline (the text-to-video one's encoders
    with the same seed, the transformer's ``task_type`` i2v, plus SigLIP) to ``out_dir``."""
    from diffusers import HunyuanVideo15ImageToVideoPipeline

    components = build_components(seed, task_type="i2v")
    components.update(image_encoder=build_image_encoder(seed * 1000 + 5),
                      feature_extractor=build_image_processor())
    return save_tiny_pipeline(HunyuanVideo15ImageToVideoPipeline(**components), out_dir)
