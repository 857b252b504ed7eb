"""Qwen2.5-VL, Qwen-Image's text encoder: the model and its processor (the tokenizer is
``common.load_tokenizer``'s).

The text encoder is a whole vision-language model, so three parts of the family use it:
prompt encoding (``adapter.py``), the edit models' prompts with their input images
(``edit.py``) and captioning (``caption.py``).

The processor. ``Qwen2VLProcessor`` checks each of its parts' classes, and without
torchvision its video processor class cannot be looked up, so the usual constructor fails.
It is built here from the PIL image processor and the tokenizer, with no video processor
(``captioner.image_only_processor_class`` skips the check of an absent part and nothing
else), which works with and without torchvision. Its image settings come from a ``preprocessor_config.json``
in the tokenizer folder or a ``processor/`` folder beside it, else from the released
model's (``PROCESSOR_CONFIG``); the tokenizer is the model's.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

from backend.families.captioner import image_only_processor_class, processor_config_file
from backend.families.common import frozen, load_tokenizer

# The released Qwen-Image-Edit processor/preprocessor_config.json (Qwen2-VL image settings).
PROCESSOR_CONFIG = {
    "min_pixels": 3136, "max_pixels": 12845056, "patch_size": 14, "temporal_patch_size": 2,
    "merge_size": 2, "image_mean": [0.48145466, 0.4578275, 0.40821073],
    "image_std": [0.26862954, 0.26130258, 0.27577711],
}


def load_text_encoder(folder: str | Path, dtype=None, device: str | Any = "cpu"):
    from transformers import Qwen2_5_VLForConditionalGeneration

    model = Qwen2_5_VLForConditionalGeneration.from_pretrained(str(folder), dtype=dtype)
    return frozen(model, device)


def load_processor(tokenizer_dir: str | Path, tokenizer=None):
    """The Qwen2.5-VL processor (images + text) from a tokenizer folder (see the module's
    docstring for where its image settings come from)."""
    from transformers import Qwen2VLImageProcessorPil

    found = processor_config_file(tokenizer_dir)
    if found is not None:
        image_processor = Qwen2VLImageProcessorPil.from_pretrained(str(found.parent))
    else:
        c = PROCESSOR_CONFIG
        image_processor = Qwen2VLImageProcessorPil(
            size={"shortest_edge": c["min_pixels"], "longest_edge": c["max_pixels"]},
            patch_size=c["patch_size"], temporal_patch_size=c["temporal_patch_size"],
            merge_size=c["merge_size"], image_mean=c["image_mean"], image_std=c["image_std"])
    tokenizer = tokenizer if tokenizer is not None else load_tokenizer(tokenizer_dir)
    return image_only_processor_class("Qwen2VLProcessor")(
        image_processor=image_processor, tokenizer=tokenizer, video_processor=None)
