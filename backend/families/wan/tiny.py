"""Tiny real-architecture Wan 2.1 text-to-video pipeline, built locally in seconds.

The components are the real classes (diffusers' ``WanTransformer3DModel``,
``AutoencoderKLWan`` and ``UniPCMultistepScheduler`` with the released flow settings;
transformers' ``UMT5EncoderModel`` and a T5 tokenizer: a unigram model trained on a few
sentences) at toy sizes, with random weights from fixed seeds, saved in the hub layout of
the ``-Diffusers`` repositories::

    OUT_DIR/model_index.json
    OUT_DIR/transformer/  text_encoder/  vae/  tokenizer/  scheduler/

so ``WanPipeline.from_pretrained(OUT_DIR)`` loads it. Weights are safetensors only.
``build_tiny_wan_i2v`` writes the image-to-video layout (``WanImageToVideoPipeline``): the
transformer with 36 input channels and image cross-attention (``image_dim``,
``added_kv_proj_dim``), plus ``image_encoder/`` (transformers' ``CLIPVisionModel``) and
``image_processor/`` (``CLIPImageProcessor``) at toy sizes; ``build_tiny_wan_a14b`` the
two-expert layout of Wan 2.2 A14B (``transformer/``, ``transformer_2/``, ``boundary_ratio``);
``build_tiny_wan_ti2v`` the Wan2.2-TI2V-5B layout (the Wan 2.2 VAE: 2x2 pixel patches,
residual sampling, 16x spatial compression to 48 channels; a transformer over 48 channels;
``expand_timesteps`` in model_index.json).

Run:
    python -m backend.families.tiny OUT_DIR --family wan [--seed 0]
"""
from __future__ import annotations

from pathlib import Path

import torch

from backend.families.common import CLIP_SENTENCES, quiet_image_processor, train_unigram
from backend.families.wan.published import VAE_22

VOCAB_SENTENCES = CLIP_SENTENCES
TOKENIZER_VOCAB_SIZE = 160
SPECIAL_TOKENS = ["<pad>", "</s>", "<unk>"]

TRANSFORMER_CONFIG = dict(
    patch_size=(1, 2, 2), num_attention_heads=2, attention_head_dim=12, in_channels=16,
    out_channels=16, text_dim=32, freq_dim=32, ffn_dim=32, num_layers=2, cross_attn_norm=True,
    qk_norm="rms_norm_across_heads", eps=1e-6, rope_max_seq_len=32,
)
# The released VAE's layout (3 downsamplings in space, 2 in time, 16 latent channels) at toy
# width; its latents_mean / latents_std are the class defaults, which are the released ones.
VAE_CONFIG = dict(base_dim=3, z_dim=16, dim_mult=[1, 1, 1, 1], num_res_blocks=1,
                  temperal_downsample=[False, True, True])
# The released scheduler config (Wan-AI/Wan2.1-T2V-1.3B-Diffusers scheduler/).
SCHEDULER_CONFIG = dict(num_train_timesteps=1000, flow_shift=3.0,
                        prediction_type="flow_prediction", use_flow_sigmas=True,
                        solver_order=2, predict_x0=True, solver_type="bh2",
                        lower_order_final=True)


def build_tokenizer():
    """A unigram tokenizer (as UMT5's sentencepiece model) wrapped as ``T5TokenizerFast``:
    pads with ``<pad>`` (id 0) and ends every prompt with ``</s>``."""
    from tokenizers import processors
    from transformers import T5TokenizerFast

    tok = train_unigram(VOCAB_SENTENCES, SPECIAL_TOKENS, TOKENIZER_VOCAB_SIZE)
    eos = tok.token_to_id("</s>")
    tok.post_processor = processors.TemplateProcessing(single="$A </s>",
                                                       special_tokens=[("</s>", eos)])
    return T5TokenizerFast(tokenizer_object=tok, pad_token="<pad>", eos_token="</s>",
                           unk_token="<unk>", extra_ids=0, model_max_length=512)


def build_text_encoder(tokenizer, seed: int):
    """A two-layer ``UMT5EncoderModel`` (the pipeline reads its last hidden state)."""
    from transformers import UMT5Config, UMT5EncoderModel

    config = UMT5Config(vocab_size=max(TOKENIZER_VOCAB_SIZE, len(tokenizer)), d_model=32,
                        d_kv=8, d_ff=64, num_layers=2, num_heads=4,
                        relative_attention_num_buckets=8, relative_attention_max_distance=32,
                        feed_forward_proj="gated-gelu", pad_token_id=0, eos_token_id=1,
                        decoder_start_token_id=0, is_encoder_decoder=False)
    torch.manual_seed(seed)
    return UMT5EncoderModel(config).eval()


def build_transformer(seed: int, overrides: dict | None = None):
    from diffusers import WanTransformer3DModel

    torch.manual_seed(seed)
    return WanTransformer3DModel(**{**TRANSFORMER_CONFIG, **(overrides or {})}).eval()


def build_components(seed: int = 0, transformer_config: dict | None = None,
                     vae_config: dict | None = None, scheduler_config: dict | None = None
                     ) -> dict:
    """The five pipeline components, random-init from ``seed`` (float32)."""
    from diffusers import AutoencoderKLWan, UniPCMultistepScheduler

    tokenizer = build_tokenizer()
    text_encoder = build_text_encoder(tokenizer, seed * 1000 + 1)
    torch.manual_seed(seed * 1000 + 2)
    vae = AutoencoderKLWan(**(vae_config or VAE_CONFIG)).eval()
    transformer = build_transformer(seed * 1000 + 3, transformer_config)
    scheduler = UniPCMultistepScheduler(**(scheduler_config or SCHEDULER_CONFIG))
    return dict(transformer=transformer, vae=vae, text_encoder=text_encoder,
                tokenizer=tokenizer, scheduler=scheduler)


def save_pipeline(components: dict, out_dir: str | Path, pipeline_class=None) -> Path:
    """Write the components in the hub layout with the pipeline's ``save_pretrained``
    (default ``WanPipeline``)."""
    from diffusers import WanPipeline

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    (pipeline_class or WanPipeline)(**components).save_pretrained(out, safe_serialization=True)
    leftovers = [p for p in out.rglob("*") if p.suffix in (".bin", ".pt", ".pth", ".pkl")]
    if leftovers:
        raise RuntimeError(f"non-safetensors weights written: {leftovers}")
    return out


def build_tiny_wan(out_dir: str | Path, seed: int = 0) -> Path:
    """Write a random-init tiny Wan 2.1 T2V pipeline to ``out_dir``; return its path."""
    return save_pipeline(build_components(seed), out_dir)


# Image-to-video: the first frame's mask (4) and latents (16) after the noisy latents (16),
# CLIP embeddings of width CLIP_CONFIG["hidden_size"] projected to the attention width.
I2V_TRANSFORMER = dict(in_channels=36, image_dim=16, added_kv_proj_dim=24)
CLIP_CONFIG = dict(hidden_size=16, intermediate_size=32, num_hidden_layers=2,
                   num_attention_heads=2, image_size=32, patch_size=8, projection_dim=16)
# The released processor's settings (CLIP's mean and std) at the toy image size.
CLIP_PROCESSOR = dict(size={"shortest_edge": 32}, crop_size={"height": 32, "width": 32},
                      do_center_crop=True, do_normalize=True, do_resize=True,
                      image_mean=[0.48145466, 0.4578275, 0.40821073],
                      image_std=[0.26862954, 0.26130258, 0.27577711], resample=3)


def build_image_encoder(seed: int):
    from transformers import CLIPVisionConfig, CLIPVisionModel

    torch.manual_seed(seed)
    return CLIPVisionModel(CLIPVisionConfig(**CLIP_CONFIG)).eval()


def build_image_processor():
    from transformers import CLIPImageProcessor

    return quiet_image_processor(CLIPImageProcessor, **CLIP_PROCESSOR)


def build_tiny_wan_i2v(out_dir: str | Path, seed: int = 0) -> Path:
    """Write a random-init tiny Wan 2.1 I2V pipeline to ``out_dir``; return its path."""
    from diffusers import WanImageToVideoPipeline

    components = build_components(seed, I2V_TRANSFORMER)
    components.update(image_encoder=build_image_encoder(seed * 1000 + 4),
                      image_processor=build_image_processor())
    return save_pipeline(components, out_dir, WanImageToVideoPipeline)


def build_tiny_wan_a14b(out_dir: str | Path, seed: int = 0, boundary_ratio: float = 0.875
                        ) -> Path:
    """Write a random-init tiny two-expert pipeline (the Wan2.2-T2V-A14B layout: ``transformer``
    the high-noise expert, ``transformer_2`` the low-noise one, ``boundary_ratio`` in
    model_index.json) to ``out_dir``; return its path. The encoders are those of
    ``build_tiny_wan`` with the same seed."""
    components = build_components(seed)
    components.update(transformer_2=build_transformer(seed * 1000 + 5),
                      boundary_ratio=boundary_ratio)
    return save_pipeline(components, out_dir)


# Wan2.2-I2V-A14B: two experts over the first-frame condition channels, no CLIP image
# encoder (no image cross-attention).
I2V_A14B_TRANSFORMER = dict(in_channels=36)


def build_tiny_wan_i2v_a14b(out_dir: str | Path, seed: int = 0, boundary_ratio: float = 0.9
                            ) -> Path:
    """Write a random-init tiny Wan2.2-I2V-A14B pipeline (``WanImageToVideoPipeline``,
    ``transformer`` the high-noise expert and ``transformer_2`` the low-noise one, no image
    encoder) to ``out_dir``; return its path. Encoders as ``build_tiny_wan``'s."""
    from diffusers import WanImageToVideoPipeline

    components = build_components(seed, I2V_A14B_TRANSFORMER)
    components.update(transformer_2=build_transformer(seed * 1000 + 5, I2V_A14B_TRANSFORMER),
                      boundary_ratio=boundary_ratio, image_encoder=None, image_processor=None)
    return save_pipeline(components, out_dir, WanImageToVideoPipeline)


# Wan2.2-TI2V-5B: the Wan 2.2 VAE's layout (the released one's patching, residual sampling,
# compression and latents_mean / latents_std) at toy width; the transformer over its 48
# channels; the released scheduler's shift 5.
def _ti2v_vae_config() -> dict:
    keep = ("in_channels", "out_channels", "is_residual", "patch_size", "scale_factor_spatial",
            "scale_factor_temporal", "temperal_downsample", "z_dim", "latents_mean",
            "latents_std")
    return {**{k: VAE_22[k] for k in keep}, "base_dim": 8, "decoder_base_dim": 8,
            "dim_mult": [1, 1, 1, 1], "num_res_blocks": 1}


TI2V_TRANSFORMER = dict(in_channels=48, out_channels=48)


def build_tiny_wan_ti2v(out_dir: str | Path, seed: int = 0) -> Path:
    """Write a random-init tiny Wan2.2-TI2V-5B pipeline (``WanPipeline`` with
    ``expand_timesteps``) to ``out_dir``; return its path. The text encoder and tokenizer
    are those of ``build_tiny_wan`` with the same seed."""
    components = build_components(seed, TI2V_TRANSFORMER, _ti2v_vae_config(),
                                  {**SCHEDULER_CONFIG, "flow_shift": 5.0})
    components["expand_timesteps"] = True
    return save_pipeline(components, out_dir)
