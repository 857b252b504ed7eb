"""Wan's full checkpoint in one file (``Family.full_checkpoint_names``): the original Wan
names in both formats.

The reference trainer's ``WanModel`` has the original repository's names (it loads the
original files; ``diffsynth/utils/state_dict_converters/wan_video_dit.py``
``WanVideoDiTFromDiffusers`` is its map from diffusers' names, transcribed below) and saves
its state dict as it is (``ModelLogger.save_model``); ComfyUI's Wan model
(``comfy/ldm/wan/model.py``) loads the same original files, so ``comfyui`` and
``reference`` name every tensor alike: ``blocks.N.self_attn.q`` ... ``.o``,
``cross_attn.*`` (``k_img`` / ``v_img`` / ``norm_k_img`` of image-to-video),
``ffn.0/2``, ``norm3`` (diffusers' ``norm2``), ``modulation`` (``scale_shift_table``),
``text_embedding.0/2``, ``time_embedding.0/2``, ``time_projection.1``, ``img_emb.proj.*``,
``head.head`` and ``head.modulation``. diffusers' ``convert_wan_transformer_to_diffusers``
reads such a file back.
"""
from __future__ import annotations

import re
from typing import Mapping

from backend.families.checkpoint_names import Names, renamed
from backend.families.wan import native

# The LoRA export's module names (``native.py``) plus the tensors a LoRA never trains.
BLOCK = {**native.BLOCK,
         "attn1.norm_q": "self_attn.norm_q", "attn1.norm_k": "self_attn.norm_k",
         "attn2.norm_q": "cross_attn.norm_q", "attn2.norm_k": "cross_attn.norm_k",
         "attn2.norm_added_k": "cross_attn.norm_k_img", "norm2": "norm3"}
OTHER = {**native.OTHER,
         "condition_embedder.image_embedder.norm1": "img_emb.proj.0",
         "condition_embedder.image_embedder.norm2": "img_emb.proj.4",
         "patch_embedding": "patch_embedding"}
_BLOCK = re.compile(r"^blocks\.(\d+)\.(.+)\.(weight|bias)$")
_BLOCK_TABLE = re.compile(r"^blocks\.(\d+)\.scale_shift_table$")
_OTHER = re.compile(r"^(.+)\.(weight|bias)$")


def to_native(key: str) -> str | None:
    """diffusers' key -> the original Wan key (None: none known)."""
    if key == "scale_shift_table":
        return "head.modulation"
    if m := _BLOCK_TABLE.match(key):
        return f"blocks.{m[1]}.modulation"
    if (m := _BLOCK.match(key)) and m[2] in BLOCK:
        return f"blocks.{m[1]}.{BLOCK[m[2]]}.{m[3]}"
    if (m := _OTHER.match(key)) and m[1] in OTHER:
        return f"{OTHER[m[1]]}.{m[2]}"
    return None


def names(shapes: Mapping[str, tuple[int, ...]], fmt: str) -> Names | None:
    if fmt in ("comfyui", "reference"):
        return renamed(shapes, to_native)
    return None
