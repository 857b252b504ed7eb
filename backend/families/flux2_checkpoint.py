"""A FLUX.2 full checkpoint in one file (``Family.full_checkpoint_names``; both FLUX.2
adapters share it).

- ``comfyui``: the original (Black Forest Labs) names ComfyUI's FLUX model has: the
  transcription of ``comfy/utils.py`` ``flux_to_diffusers`` (ComfyUI v0.26.1) read
  backwards: ``double_blocks.N.img_attn.qkv`` = to_q, to_k, to_v stacked (``txt_attn.qkv``
  = add_q/k/v_proj), ``img_attn.proj``, ``img_mlp.0/2`` (= ``ff.linear_in/out``), the
  q/k norms as ``*.norm.query_norm.scale`` / ``key_norm.scale``, ``single_blocks.N.linear1``
  (= ``attn.to_qkv_mlp_proj``) and ``linear2`` (= ``attn.to_out``), ``img_in``, ``txt_in``,
  ``final_layer.linear`` and ``final_layer.adaLN_modulation.1`` (``norm_out.linear`` with
  its halves swapped: the original computes shift, scale where diffusers computes scale,
  shift). FLUX.2's own embeddings and shared modulations, which that map does not list,
  have the names of diffusers' ``convert_flux2_transformer_checkpoint_to_diffusers``
  (its loader of these files): ``time_in.in_layer/out_layer``, ``guidance_in.*``,
  ``double_stream_modulation_img.lin``, ``..._txt.lin``, ``single_stream_modulation.lin``.
- ``reference``: the reference trainer's ``Flux2DiT`` loads the diffusers transformer files
  without a converter (``diffsynth/configs/model_configs.py``) and saves its state dict as
  it is (``ModelLogger.save_model``): diffusers' names.
"""
from __future__ import annotations

from typing import Mapping

from backend.families.checkpoint_names import (Named, Names, Piece, block_indices, keyed,
                                               renamed, swapped_halves)

DOUBLE = {
    "attn.to_out.0": "img_attn.proj", "attn.to_add_out": "txt_attn.proj",
    "ff.linear_in": "img_mlp.0", "ff.linear_out": "img_mlp.2",
    "ff_context.linear_in": "txt_mlp.0", "ff_context.linear_out": "txt_mlp.2",
}
DOUBLE_NORMS = {
    "attn.norm_q.weight": "img_attn.norm.query_norm.scale",
    "attn.norm_k.weight": "img_attn.norm.key_norm.scale",
    "attn.norm_added_q.weight": "txt_attn.norm.query_norm.scale",
    "attn.norm_added_k.weight": "txt_attn.norm.key_norm.scale",
}
DOUBLE_QKV = {"img_attn.qkv": ("attn.to_q", "attn.to_k", "attn.to_v"),
              "txt_attn.qkv": ("attn.add_q_proj", "attn.add_k_proj", "attn.add_v_proj")}
SINGLE = {"attn.to_qkv_mlp_proj": "linear1", "attn.to_out": "linear2"}
SINGLE_NORMS = {"attn.norm_q.weight": "norm.query_norm.scale",
                "attn.norm_k.weight": "norm.key_norm.scale"}
OTHER = {
    "x_embedder": "img_in", "context_embedder": "txt_in", "proj_out": "final_layer.linear",
    "time_guidance_embed.timestep_embedder.linear_1": "time_in.in_layer",
    "time_guidance_embed.timestep_embedder.linear_2": "time_in.out_layer",
    "time_guidance_embed.guidance_embedder.linear_1": "guidance_in.in_layer",
    "time_guidance_embed.guidance_embedder.linear_2": "guidance_in.out_layer",
    "double_stream_modulation_img.linear": "double_stream_modulation_img.lin",
    "double_stream_modulation_txt.linear": "double_stream_modulation_txt.lin",
    "single_stream_modulation.linear": "single_stream_modulation.lin",
}
ENDS = (".weight", ".bias")


def _with_ends(table: Mapping[str, str]) -> dict[str, str]:
    return {k + e: v + e for k, v in table.items() for e in ENDS}


def comfyui_names(shapes: Mapping[str, tuple[int, ...]]) -> Names:
    out: Names = {}
    for i in block_indices(shapes, "transformer_blocks"):
        src, dst = f"transformer_blocks.{i}.", f"double_blocks.{i}."
        keyed({**_with_ends(DOUBLE), **DOUBLE_NORMS}, src, dst, shapes, out)
        for fused, parts in DOUBLE_QKV.items():
            for end in ENDS:
                keys = tuple(src + p + end for p in parts)
                if all(k in shapes for k in keys):
                    out[dst + fused + end] = Named(tuple(Piece(k) for k in keys))
    for i in block_indices(shapes, "single_transformer_blocks"):
        keyed({**_with_ends(SINGLE), **SINGLE_NORMS}, f"single_transformer_blocks.{i}.",
              f"single_blocks.{i}.", shapes, out)
    keyed(_with_ends(OTHER), "", "", shapes, out)
    for end in ENDS:
        if "norm_out.linear" + end in shapes:
            out["final_layer.adaLN_modulation.1" + end] = swapped_halves(
                "norm_out.linear" + end, shapes["norm_out.linear" + end])
    return out


def names(shapes: Mapping[str, tuple[int, ...]], fmt: str) -> Names | None:
    if fmt == "comfyui":
        return comfyui_names(shapes)
    if fmt == "reference":
        return renamed(shapes, lambda key: key)
    return None
