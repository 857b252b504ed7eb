"""Qwen3-VL as a text encoder, for the families that condition on it: the values its
released config.json files share across sizes, and the pieces of a tiny one (tokenizer and
model) that a family's ``tiny.py`` builds with its own vocabulary sentences and layer count.
Heavy libraries are imported inside the functions.
"""
from __future__ import annotations

from typing import Any

from backend.families.common import bpe_vocab_and_merges, train_byte_level_bpe

# ------------------------------------------------------------------------------------------
# Published config values (``Qwen/Qwen3-VL-*-Instruct`` config.json)
# ------------------------------------------------------------------------------------------
_PUBLISHED_TOP: dict[str, Any] = {
    "architectures": ["Qwen3VLForConditionalGeneration"],
    "model_type": "qwen3_vl",
    "image_token_id": 151655,
    "video_token_id": 151656,
    "vision_start_token_id": 151652,
    "vision_end_token_id": 151653,
}
_PUBLISHED_TEXT: dict[str, Any] = {
    "model_type": "qwen3_vl_text",
    "attention_bias": False,
    "head_dim": 128,
    "hidden_act": "silu",
    "max_position_embeddings": 262144,
    "num_attention_heads": 32,
    "num_hidden_layers": 36,
    "num_key_value_heads": 8,
    "rms_norm_eps": 1e-06,
    "rope_scaling": {"mrope_interleaved": True, "mrope_section": [24, 20, 20],
                     "rope_type": "default"},
    "rope_theta": 5000000,
    "vocab_size": 151936,
}
_PUBLISHED_VISION: dict[str, Any] = {
    "model_type": "qwen3_vl",
    "hidden_act": "gelu_pytorch_tanh",
    "in_channels": 3,
    "num_heads": 16,
    "num_position_embeddings": 2304,
    "patch_size": 16,
    "spatial_merge_size": 2,
    "temporal_patch_size": 2,
}


def published_config(*, tie_word_embeddings: bool, text: dict[str, Any],
                     vision: dict[str, Any]) -> dict[str, Any]:
    """One Qwen3-VL checkpoint's config.json values: those every size shares, with the
    size's own ``text`` and ``vision`` values (widths, depths) added."""
    return {**_PUBLISHED_TOP, "tie_word_embeddings": tie_word_embeddings,
            "text_config": {**_PUBLISHED_TEXT, **text},
            "vision_config": {**_PUBLISHED_VISION, **vision}}


# ------------------------------------------------------------------------------------------
# A tiny Qwen3-VL: tokenizer and text encoder
# ------------------------------------------------------------------------------------------
SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|vision_start|>",
                  "<|vision_end|>", "<|image_pad|>", "<|video_pad|>"]
# Qwen3-VL's chat template reduced to text messages (a pipeline writes its own template;
# the tokenizer folder keeps one, as a processor folder does).
CHAT_TEMPLATE = (
    "{%- for message in messages %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' }}"
    "{%- if message['content'] is string %}{{- message['content'] }}"
    "{%- else %}{%- for block in message['content'] %}"
    "{%- if block['type'] == 'text' %}{{- block['text'] }}{%- endif %}{%- endfor %}{%- endif %}"
    "{{- '<|im_end|>\\n' }}{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)
TINY_VOCAB_SIZE = 512
TINY_TEXT_HIDDEN = 16


def build_tiny_tokenizer(vocab_sentences: list[str]):
    """A byte-level BPE trained on ``vocab_sentences`` (the caption words and the family's
    prompt template), as a ``Qwen2Tokenizer`` with Qwen's control tokens and the reduced
    chat template."""
    from transformers import Qwen2Tokenizer

    tok = train_byte_level_bpe(vocab_sentences, TINY_VOCAB_SIZE - len(SPECIAL_TOKENS))
    vocab, merges = bpe_vocab_and_merges(tok, SPECIAL_TOKENS)
    tokenizer = Qwen2Tokenizer(
        vocab=vocab, merges=merges, unk_token=None, eos_token="<|im_end|>",
        pad_token="<|endoftext|>", additional_special_tokens=SPECIAL_TOKENS[1:],
        model_max_length=4096, clean_up_tokenization_spaces=False)
    tokenizer.chat_template = CHAT_TEMPLATE
    return tokenizer


def build_tiny_text_encoder(tokenizer, seed: int, *, model_class: str, num_hidden_layers: int,
                            tie_word_embeddings: bool):
    """A random-init Qwen3-VL of ``model_class`` (``"Qwen3VLModel"`` or
    ``"Qwen3VLForConditionalGeneration"``, the class the pipeline loads): a text model of
    hidden ``TINY_TEXT_HIDDEN`` and ``num_hidden_layers`` layers, and a one-layer vision
    tower; weights drawn from ``seed``."""
    import torch
    import transformers
    from transformers import Qwen3VLConfig

    ids = tokenizer.convert_tokens_to_ids
    config = Qwen3VLConfig(
        text_config=dict(
            vocab_size=max(TINY_VOCAB_SIZE, len(tokenizer)), hidden_size=TINY_TEXT_HIDDEN,
            intermediate_size=32, num_hidden_layers=num_hidden_layers, num_attention_heads=2,
            num_key_value_heads=1, head_dim=8, max_position_embeddings=4096,
            rms_norm_eps=1e-6, rope_theta=5000000,
            rope_scaling={"rope_type": "default", "mrope_section": [2, 1, 1],
                          "mrope_interleaved": True}),
        vision_config=dict(depth=1, hidden_size=16, intermediate_size=32, num_heads=2,
                           out_hidden_size=TINY_TEXT_HIDDEN, patch_size=16,
                           spatial_merge_size=2, temporal_patch_size=2,
                           num_position_embeddings=16, deepstack_visual_indexes=[0]),
        image_token_id=ids("<|image_pad|>"), video_token_id=ids("<|video_pad|>"),
        vision_start_token_id=ids("<|vision_start|>"),
        vision_end_token_id=ids("<|vision_end|>"), tie_word_embeddings=tie_word_embeddings)
    torch.manual_seed(seed)
    return getattr(transformers, model_class)(config).eval()
