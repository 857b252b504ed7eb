"""Wan's native (original-repository) module names, for ComfyUI's LoRA loader.

ComfyUI loads Wan LoRAs only under the original model's names
(``diffusion_model.blocks.N.self_attn.q``, ``.cross_attn.k``, ``.ffn.0``, ...). The table
below is diffusers' own Wan key mapping
(``_convert_non_diffusers_wan_lora_to_diffusers``: original -> diffusers) read backwards.
"""
from __future__ import annotations

import re

# diffusers' module name inside a block -> the original's.
BLOCK = {
    "attn1.to_q": "self_attn.q", "attn1.to_k": "self_attn.k", "attn1.to_v": "self_attn.v",
    "attn1.to_out.0": "self_attn.o",
    "attn2.to_q": "cross_attn.q", "attn2.to_k": "cross_attn.k", "attn2.to_v": "cross_attn.v",
    "attn2.to_out.0": "cross_attn.o",
    "attn2.add_k_proj": "cross_attn.k_img", "attn2.add_v_proj": "cross_attn.v_img",
    "ffn.net.0.proj": "ffn.0", "ffn.net.2": "ffn.2",
}
# Modules outside the blocks.
OTHER = {
    "condition_embedder.text_embedder.linear_1": "text_embedding.0",
    "condition_embedder.text_embedder.linear_2": "text_embedding.2",
    "condition_embedder.time_embedder.linear_1": "time_embedding.0",
    "condition_embedder.time_embedder.linear_2": "time_embedding.2",
    "condition_embedder.time_proj": "time_projection.1",
    "condition_embedder.image_embedder.ff.net.0.proj": "img_emb.proj.1",
    "condition_embedder.image_embedder.ff.net.2": "img_emb.proj.3",
    "proj_out": "head.head",
}
_BLOCK_RE = re.compile(r"^blocks\.(\d+)\.(.+)$")
_BACK_BLOCK = {v: k for k, v in BLOCK.items()}
_BACK_OTHER = {v: k for k, v in OTHER.items()}


def to_native(module: str) -> str:
    """diffusers' module name -> the original Wan name (KeyError for one it has not)."""
    m = _BLOCK_RE.match(module)
    if m:
        return f"blocks.{m[1]}.{BLOCK[m[2]]}"
    return OTHER[module]


def from_native(name: str) -> str:
    """The original Wan module name -> diffusers' (KeyError for an unknown one)."""
    m = _BLOCK_RE.match(name)
    if m:
        return f"blocks.{m[1]}.{_BACK_BLOCK[m[2]]}"
    return _BACK_OTHER[name]
