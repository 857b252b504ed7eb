"""Tiny real-architecture Z-Image pipeline, built locally in seconds.

The components are the real classes (diffusers' ``ZImageTransformer2DModel``,
``AutoencoderKL`` and ``FlowMatchEulerDiscreteScheduler``; transformers' ``Qwen3Model``
and a ``Qwen2Tokenizer`` with a Qwen3-style chat template) at toy sizes, with random
weights from fixed seeds, saved in the hub layout::

    OUT_DIR/model_index.json
    OUT_DIR/transformer/  text_encoder/  vae/  tokenizer/  scheduler/

so ``ZImagePipeline.from_pretrained(OUT_DIR)`` and each component's own
``from_pretrained(OUT_DIR, subfolder=...)`` load it. Weights are safetensors only.

The transformer's padding tokens (``x_pad_token``, ``cap_pad_token``) are filled from the
seed like every other weight: the released model's are trained values, and a model whose
pad tokens were never written (``torch.empty`` in some diffusers versions) renders NaN.

Run:
    python -m backend.families.tiny OUT_DIR --family z_image [--seed 0]
"""
from __future__ import annotations

from pathlib import Path

import torch

from backend.families.common import bpe_vocab_and_merges, save_tiny_pipeline, train_byte_level_bpe

SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<think>", "</think>"]
# The released tokenizer's chat template, reduced to what ``ZImagePipeline._encode_prompt``
# uses: one user message, the generation prompt, and the empty thinking block that Qwen3's
# template adds only when ``enable_thinking`` is false (the pipeline passes true).
CHAT_TEMPLATE = (
    "{%- for message in messages %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}"
    "{%- if enable_thinking is defined and enable_thinking is false %}"
    "{{- '<think>\\n\\n</think>\\n\\n' }}{%- endif %}{%- endif %}"
)
VOCAB_SENTENCES = [
    "user assistant system",
    "a red circle on a white background",
    "a green square on a white background",
    "a blue triangle on a white background",
    "a yellow circle on a black background",
    "a photo of a cat, a small big large tiny shape in the center, zlr style, zerolora",
    "red green blue yellow purple magenta orange black white gray circle square triangle",
    "0 1 2 3 4 5 6 7 8 9 . , : ; ! ? ' \" ( ) - _",
]
TOKENIZER_VOCAB_SIZE = 512

# The released scheduler config (Tongyi-MAI/Z-Image-Turbo scheduler/scheduler_config.json).
SCHEDULER_CONFIG = dict(num_train_timesteps=1000, shift=3.0, use_dynamic_shifting=False)

TRANSFORMER_CONFIG = dict(
    all_patch_size=(2,),
    all_f_patch_size=(1,),
    in_channels=16,
    dim=32,
    n_layers=2,
    n_refiner_layers=1,
    n_heads=2,
    n_kv_heads=2,
    norm_eps=1e-5,
    qk_norm=True,
    cap_feat_dim=16,            # the text encoder's hidden size
    rope_theta=256.0,
    t_scale=1000.0,
    axes_dims=[8, 4, 4],        # sums to the head dim (32 / 2)
    axes_lens=[1024, 64, 64],
)

# The released VAE's layout (4 blocks: 8x downsampling, 16 latent channels, no quant convs)
# at toy widths, with its scaling and shift factors.
VAE_CONFIG = dict(
    in_channels=3,
    out_channels=3,
    down_block_types=["DownEncoderBlock2D"] * 4,
    up_block_types=["UpDecoderBlock2D"] * 4,
    block_out_channels=[8, 16, 16, 16],
    layers_per_block=1,
    latent_channels=16,
    norm_num_groups=4,
    sample_size=64,
    scaling_factor=0.3611,
    shift_factor=0.1159,
    use_quant_conv=False,
    use_post_quant_conv=False,
    mid_block_add_attention=True,
    force_upcast=True,
)


def build_tokenizer():
    """A byte-level BPE trained on a few sentences, as a ``Qwen2Tokenizer`` with the chat
    template the pipeline applies."""
    from transformers import Qwen2Tokenizer

    tok = train_byte_level_bpe(VOCAB_SENTENCES, TOKENIZER_VOCAB_SIZE - len(SPECIAL_TOKENS))
    vocab, merges = bpe_vocab_and_merges(tok, SPECIAL_TOKENS)
    tokenizer = Qwen2Tokenizer(
        vocab=vocab, merges=merges, unk_token=None, eos_token="<|im_end|>",
        pad_token="<|endoftext|>", additional_special_tokens=SPECIAL_TOKENS[1:],
        model_max_length=1024, clean_up_tokenization_spaces=False)
    tokenizer.chat_template = CHAT_TEMPLATE
    return tokenizer


def build_text_encoder(tokenizer, seed: int):
    """A two-layer ``Qwen3Model`` (the pipeline reads its second-to-last hidden state)."""
    from transformers import Qwen3Config, Qwen3Model

    ids = tokenizer.convert_tokens_to_ids
    config = Qwen3Config(
        vocab_size=max(TOKENIZER_VOCAB_SIZE, len(tokenizer)), hidden_size=16,
        intermediate_size=32, num_hidden_layers=2, num_attention_heads=2,
        num_key_value_heads=1, head_dim=8, max_position_embeddings=1024, rms_norm_eps=1e-6,
        bos_token_id=ids("<|endoftext|>"), eos_token_id=ids("<|im_end|>"),
        pad_token_id=ids("<|endoftext|>"), tie_word_embeddings=True)
    torch.manual_seed(seed)
    return Qwen3Model(config).eval()


def build_transformer(seed: int, overrides: dict | None = None):
    """The transformer with every weight, the pad tokens included, drawn from ``seed``."""
    from diffusers import ZImageTransformer2DModel

    torch.manual_seed(seed)
    model = ZImageTransformer2DModel(**{**TRANSFORMER_CONFIG, **(overrides or {})}).eval()
    with torch.no_grad():
        for name in ("x_pad_token", "cap_pad_token"):
            getattr(model, name).normal_(0.0, 0.02)
    return model


def build_components(seed: int = 0, transformer_config: dict | None = None) -> dict:
    """The five pipeline components, random-init from ``seed`` (float32)."""
    from diffusers import AutoencoderKL, FlowMatchEulerDiscreteScheduler

    tokenizer = build_tokenizer()
    text_encoder = build_text_encoder(tokenizer, seed * 1000 + 1)
    torch.manual_seed(seed * 1000 + 2)
    vae = AutoencoderKL(**VAE_CONFIG).eval()
    transformer = build_transformer(seed * 1000 + 3, transformer_config)
    scheduler = FlowMatchEulerDiscreteScheduler(**SCHEDULER_CONFIG)
    return dict(transformer=transformer, vae=vae, text_encoder=text_encoder,
                tokenizer=tokenizer, scheduler=scheduler)


def save_pipeline(components: dict, out_dir: str | Path) -> Path:
    """Write the components in the hub layout with ``ZImagePipeline.save_pretrained``."""
    from diffusers import ZImagePipeline

    return save_tiny_pipeline(ZImagePipeline(**components), out_dir)


def build_tiny_z_image(out_dir: str | Path, seed: int = 0) -> Path:
    """Write a random-init tiny Z-Image pipeline to ``out_dir``; return its path."""
    return save_pipeline(build_components(seed), out_dir)
