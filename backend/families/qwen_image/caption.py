"""Qwen-Image's captioner: its text encoder is a whole Qwen2.5-VL, so the weights stage 1
loads anyway caption a dataset without a second large download.

The model is the text encoder folder (``Qwen2_5_VLForConditionalGeneration`` with its vision
tower); the processor is built as the edit models build theirs (``qwen_vl.load_processor``:
the PIL image processor and the model's tokenizer, no video processor, so no torchvision).
Its image settings come from a ``preprocessor_config.json`` beside the tokenizer or a
``processor/`` folder next to it (as ``Qwen/Qwen-Image-Edit:processor/`` holds it), else
from the released Qwen-Image-Edit settings (``qwen_vl.PROCESSOR_CONFIG``): nothing more is
downloaded. Generation is ``backend.families.captioner.VLMCaptioner``'s.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping

from backend.families.captioner import VLMCaptioner
from backend.families.common import load_tokenizer
from backend.families.qwen_image.qwen_vl import load_processor, load_text_encoder

# The tokenizer's own chat template is used when it has one; this is Qwen2.5-VL's, for a
# tokenizer saved without it (the tiny test model's).
CHAT_FORMAT = ("<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\n"
               "<|vision_start|><|image_pad|><|vision_end|>{}<|im_end|>\n"
               "<|im_start|>assistant\n")


def load_captioner(dirs: Mapping[str, Path], dtype=None, device: Any = "cpu",
                   offload: str = "none") -> VLMCaptioner:
    """The text encoder (with its vision tower) and its processor as a ``Captioner``."""
    tokenizer = load_tokenizer(dirs["tokenizer"])
    model = load_text_encoder(dirs["text_encoder"], dtype, "cpu")
    return VLMCaptioner(model, load_processor(dirs["tokenizer"], tokenizer), device=device,
                        offload=offload, chat_format=CHAT_FORMAT)
