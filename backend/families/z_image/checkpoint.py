"""Z-Image's full checkpoint in one file (``Family.full_checkpoint_names``).

- ``comfyui``: the original (Lumina 2 ``NextDiT``) names of ComfyUI's model: the
  transcription of ``comfy/utils.py`` ``z_image_to_diffusers`` (ComfyUI v0.26.1) read
  backwards. In every block of ``layers``, ``noise_refiner`` and ``context_refiner``:
  ``attention.qkv`` = to_q, to_k, to_v stacked, ``attention.out`` (= ``to_out.0``),
  ``attention.q_norm`` / ``k_norm``; the norms, ``feed_forward.w1/w2/w3`` and
  ``adaLN_modulation.0`` keep their names. ``x_embedder`` and ``final_layer`` are diffusers'
  ``all_x_embedder.2-1`` / ``all_final_layer.2-1`` (patch 2, one frame: another patch size
  has no ComfyUI name and is refused); the pad tokens, ``cap_embedder`` and
  ``t_embedder`` keep theirs. The original checkpoints also hold ``norm_final.weight``,
  which no forward pass reads and diffusers' model does not have (its single-file
  converter drops it), so the export has none; ComfyUI then lists it as a missing key.
- ``reference``: the reference trainer's ``ZImageDiT`` loads the diffusers transformer files
  without a converter (``diffsynth/configs/model_configs.py``): diffusers' names.
"""
from __future__ import annotations

from typing import Mapping

from backend.families.checkpoint_names import (Named, Names, Piece, block_indices, keyed,
                                               renamed)

BLOCK = {
    "attention.norm_q.weight": "attention.q_norm.weight",
    "attention.norm_k.weight": "attention.k_norm.weight",
    "attention.to_out.0.weight": "attention.out.weight",
    "attention.to_out.0.bias": "attention.out.bias",
    **{f"{n}.weight": f"{n}.weight" for n in (
        "attention_norm1", "attention_norm2", "ffn_norm1", "ffn_norm2", "feed_forward.w1",
        "feed_forward.w2", "feed_forward.w3")},
    "adaLN_modulation.0.weight": "adaLN_modulation.0.weight",
    "adaLN_modulation.0.bias": "adaLN_modulation.0.bias",
}
OTHER = {
    "all_final_layer.2-1.linear.weight": "final_layer.linear.weight",
    "all_final_layer.2-1.linear.bias": "final_layer.linear.bias",
    "all_final_layer.2-1.adaLN_modulation.1.weight": "final_layer.adaLN_modulation.1.weight",
    "all_final_layer.2-1.adaLN_modulation.1.bias": "final_layer.adaLN_modulation.1.bias",
    "all_x_embedder.2-1.weight": "x_embedder.weight",
    "all_x_embedder.2-1.bias": "x_embedder.bias",
    **{k: k for k in ("x_pad_token", "cap_pad_token", "cap_embedder.0.weight",
                      "cap_embedder.1.weight", "cap_embedder.1.bias",
                      "t_embedder.mlp.0.weight", "t_embedder.mlp.0.bias",
                      "t_embedder.mlp.2.weight", "t_embedder.mlp.2.bias")},
}


def comfyui_names(shapes: Mapping[str, tuple[int, ...]]) -> Names:
    out: Names = {}
    for where in ("layers", "noise_refiner", "context_refiner"):
        for i in block_indices(shapes, where):
            p = f"{where}.{i}."
            keyed(BLOCK, p, p, shapes, out)
            for end in (".weight", ".bias"):
                keys = tuple(f"{p}attention.{q}{end}" for q in ("to_q", "to_k", "to_v"))
                if all(k in shapes for k in keys):
                    out[f"{p}attention.qkv{end}"] = Named(tuple(Piece(k) for k in keys))
    keyed(OTHER, "", "", shapes, out)
    return out


def names(shapes: Mapping[str, tuple[int, ...]], fmt: str) -> Names | None:
    if fmt == "comfyui":
        return comfyui_names(shapes)
    if fmt == "reference":
        return renamed(shapes, lambda key: key)
    return None
