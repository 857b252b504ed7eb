"""Qwen3-VL as a text encoder, for the families that condition on it: the values its
released config.json files share across sizes, its processor and captioner, and the pieces
of a tiny one (tokenizer and model) that a family's ``tiny.py`` builds with its own
vocabulary sentences and layer count. Heavy libraries are imported inside the functions.

Captioning. The text encoder is a whole Qwen3-VL, vision tower included, so the weights
stage 1 loads anyway caption a dataset (``load_captioner``): the text encoder folder loads
as ``Qwen3VLForConditionalGeneration`` (a folder saved as ``Qwen3VLModel`` too, whose LM
head is its tied embeddings); generation is ``captioner.VLMCaptioner``'s.
``Qwen3VLProcessor`` cannot be built as usual without torchvision (its video processor);
``load_processor`` builds it from the PIL image processor and the tokenizer with no video
processor (``captioner.image_only_processor_class``). Its image settings come from a
``preprocessor_config.json`` in the tokenizer folder or a ``processor/`` folder beside it,
else from the released model's (``PROCESSOR_CONFIG``); nothing more is downloaded.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping

from backend.core.messages import Msg
from backend.families.captioner import (VLMCaptioner, image_only_processor_class,
                                        processor_config_file)
from backend.families.common import (bpe_vocab_and_merges, load_chat_tokenizer,
                                     train_byte_level_bpe)

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
# The processor and the captioner
# ------------------------------------------------------------------------------------------
# The released image settings, ``Qwen/Qwen3-VL-*-Instruct`` preprocessor_config.json (read
# by transformers as ``Qwen2VLImageProcessor``, as transformers' auto mapping gives for
# ``qwen3_vl``): 65536 to 16777216 pixels, 16-pixel patches, 2 frames per temporal patch,
# 2x2 patches merged per token, mean and std 0.5 (the patch, merge and mean values are also
# transformers' ``Qwen3VLVideoProcessor`` defaults).
PROCESSOR_CONFIG: dict[str, Any] = {
    "size": {"shortest_edge": 65536, "longest_edge": 16777216}, "patch_size": 16,
    "temporal_patch_size": 2, "merge_size": 2, "image_mean": [0.5, 0.5, 0.5],
    "image_std": [0.5, 0.5, 0.5],
}


def load_processor(tokenizer_dir: str | Path, tokenizer=None):
    """``Qwen3VLProcessor`` (images + text, no video processor, so no torchvision) from a
    tokenizer folder, with the tokenizer's chat template (see the module's docstring for
    where its image settings come from)."""
    from transformers import Qwen2VLImageProcessorPil

    found = processor_config_file(tokenizer_dir)
    image_processor = (Qwen2VLImageProcessorPil.from_pretrained(str(found.parent))
                       if found is not None else Qwen2VLImageProcessorPil(**PROCESSOR_CONFIG))
    tokenizer = tokenizer if tokenizer is not None else load_chat_tokenizer(tokenizer_dir)
    return image_only_processor_class("Qwen3VLProcessor")(
        image_processor=image_processor, tokenizer=tokenizer, video_processor=None,
        chat_template=tokenizer.chat_template)


def load_captioning_model(folder: str | Path, dtype=None):
    """The text encoder folder as a ``Qwen3VLForConditionalGeneration`` (vision tower and
    LM head). A folder saved as ``Qwen3VLModel`` has no LM head of its own; it loads when
    the head is tied to the embeddings (Qwen3-VL-4B's), and is refused otherwise."""
    from transformers import Qwen3VLForConditionalGeneration

    model, info = Qwen3VLForConditionalGeneration.from_pretrained(
        str(folder), dtype=dtype, output_loading_info=True)
    if info.get("missing_keys"):
        raise ValueError(Msg("note.caption_text_encoder_incomplete", folder=str(folder),
                             missing=sorted(info["missing_keys"])[:3]))
    return model.eval().requires_grad_(False)


def load_captioner(dirs: Mapping[str, Path], dtype=None, device: Any = "cpu",
                   offload: str = "none") -> VLMCaptioner:
    """The text encoder (with its vision tower) and its processor as a ``Captioner``
    (``Family.load_captioner`` of the families whose ``captioner_components`` are
    ``text_encoder`` and ``tokenizer``)."""
    model = load_captioning_model(dirs["text_encoder"], dtype)
    return VLMCaptioner(model, load_processor(dirs["tokenizer"]), device=device,
                        offload=offload)


class Captions:
    """What a family whose text encoder is a Qwen3-VL adds to its adapter to caption with
    it (``class Adapter(qwen3_vl.Captions, Family)``)."""
    captioner_components = ("text_encoder", "tokenizer")

    def load_captioner(self, dirs, dtype=None, device="cpu", offload="none"):
        return load_captioner(dirs, dtype, device, offload)


# ------------------------------------------------------------------------------------------
# A tiny Qwen3-VL: tokenizer and text encoder
# ------------------------------------------------------------------------------------------
SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|vision_start|>",
                  "<|vision_end|>", "<|image_pad|>", "<|video_pad|>"]
# Qwen3-VL's chat template reduced to text and image blocks (a pipeline writes its own
# template; the tokenizer folder keeps one, as a processor folder does, and the captioner
# renders its prompt with it).
CHAT_TEMPLATE = (
    "{%- for message in messages %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' }}"
    "{%- if message['content'] is string %}{{- message['content'] }}"
    "{%- else %}{%- for block in message['content'] %}"
    "{%- if block['type'] == 'image' %}{{- '<|vision_start|><|image_pad|><|vision_end|>' }}"
    "{%- elif block['type'] == 'text' %}{{- block['text'] }}{%- endif %}{%- endfor %}"
    "{%- endif %}"
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
