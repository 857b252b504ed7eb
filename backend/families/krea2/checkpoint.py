"""Krea 2's full checkpoint in one file (``Family.full_checkpoint_names``): the original
Krea 2 names in both formats.

ComfyUI's Krea 2 model (``comfy/ldm/krea2/model.py``, ``SingleStreamDiT``) and the reference
trainer's (``diffsynth/models/krea2_dit.py``, saved as its state dict by
``ModelLogger.save_model``) have the same parameters under the original checkpoint's names:
``first``, ``tmlp.0/2``, ``tproj.1``, ``txtmlp.0.scale`` / ``.1`` / ``.3``, ``txtfusion.*``,
``blocks.N.{attn.wq, wk, wv, wo, gate, qknorm.qnorm.scale, qknorm.knorm.scale},
mlp.{gate, up, down}, prenorm.scale, postnorm.scale, mod.lin}`` and
``last.{linear, norm.scale, modulation.lin}``. A block's ``mod.lin`` holds its six
modulation vectors flat [6 x D] where diffusers keeps ``scale_shift_table`` [6, D] (the same
elements). This is diffusers' ``convert_krea2_transformer_checkpoint_to_diffusers`` read
backwards, which also reads such a file back.
"""
from __future__ import annotations

import math
import re
from typing import Mapping

from backend.families.checkpoint_names import Named, Names, Piece

PREFIX = {
    "img_in.": "first.", "time_embed.linear_1.": "tmlp.0.", "time_embed.linear_2.": "tmlp.2.",
    "time_mod_proj.": "tproj.1.", "txt_in.norm.weight": "txtmlp.0.scale",
    "txt_in.linear_1.": "txtmlp.1.", "txt_in.linear_2.": "txtmlp.3.",
    "final_layer.linear.": "last.linear.", "final_layer.norm.weight": "last.norm.scale",
    "final_layer.scale_shift_table": "last.modulation.lin",
    "text_fusion.projector.": "txtfusion.projector.",
}
BLOCK = {
    "attn.to_q.": "attn.wq.", "attn.to_k.": "attn.wk.", "attn.to_v.": "attn.wv.",
    "attn.to_out.0.": "attn.wo.", "attn.to_gate.": "attn.gate.",
    "attn.norm_q.weight": "attn.qknorm.qnorm.scale",
    "attn.norm_k.weight": "attn.qknorm.knorm.scale",
    "ff.gate.": "mlp.gate.", "ff.up.": "mlp.up.", "ff.down.": "mlp.down.",
    "norm1.weight": "prenorm.scale", "norm2.weight": "postnorm.scale",
}
_BLOCK = re.compile(r"^(transformer_blocks|text_fusion\.(?:layerwise|refiner)_blocks)\.(\d+)\.(.+)$")
_ENDS = ("weight", "bias")


def _swap(table: Mapping[str, str], rest: str) -> str | None:
    for old, new in table.items():
        if old.endswith("."):
            if rest.startswith(old) and rest[len(old):] in _ENDS:
                return new + rest[len(old):]
        elif rest == old:
            return new
    return None


def to_original(key: str) -> str | None:
    """diffusers' key -> the original Krea 2 key (None: none known)."""
    m = _BLOCK.match(key)
    if m:
        where = "blocks" if m[1] == "transformer_blocks" else m[1].replace(
            "text_fusion", "txtfusion")
        if m[3] == "scale_shift_table" and m[1] == "transformer_blocks":
            return f"{where}.{m[2]}.mod.lin"
        inner = _swap(BLOCK, m[3])
        return None if inner is None else f"{where}.{m[2]}.{inner}"
    return _swap(PREFIX, key)


def names(shapes: Mapping[str, tuple[int, ...]], fmt: str) -> Names | None:
    if fmt not in ("comfyui", "reference"):
        return None
    out: Names = {}
    for key, shape in shapes.items():
        new = to_original(key)
        if new is None:
            continue
        flat = (math.prod(shape),) if new.endswith(".mod.lin") else None
        out[new] = Named((Piece(key),), flat)
    return out
