"""ComfyUI's module names of the HunyuanVideo 1.5 transformer, for its LoRA loader.

ComfyUI builds HunyuanVideo 1.5 from its FLUX-style layers under ``diffusion_model.``: the
double-stream blocks are ``double_blocks.N`` with ``img_attn.qkv`` / ``txt_attn.qkv`` (the
query, key and value projections fused), ``img_attn.proj``, ``img_mlp.0`` / ``.2``,
``img_mod.lin`` and their ``txt_`` twins; the prompt's token refiner is ``txt_in`` (its blocks'
``self_attn.qkv`` fused too, ``self_attn.proj``, ``mlp.0`` / ``.2``, ``adaLN_modulation.1``);
the glyph and image projections ``byt5_in`` and ``vision_in``; the timestep embedding
``time_in``; the output ``final_layer.linear``. The names are the original checkpoint's as
diffusers' conversion script (``scripts/convert_hunyuan_video1_5_to_diffusers.py``) reads
them, in ComfyUI's spelling of the shared layers: the modules of ComfyUI's own model
(``comfy/ldm/hunyuan_video/model.py``: FLUX's ``DoubleStreamBlock``, ``MLPEmbedder`` and
``LastLayer``, its ``TokenRefiner`` and ``ByT5Mapper``, an ``MLPProj`` as ``vision_in``),
which its LoRA loader takes as ``diffusion_model.<module>`` (its generic map; its
HunyuanVideo map adds the original checkpoint's spellings such as ``img_attn_qkv``).

A fused layer's parts (``attn.to_q``, ``attn.to_k``, ``attn.to_v``) are exported as one LoRA
on the fused layer (``Adapter.fused_modules``: ``attn.to_qkv`` and ``attn.add_qkv_proj``
stand for the fused layers in diffusers' terms); each part alone has a name here only so
that the export checks can read it back. The final layer's modulation has no name: its
original stores scale and shift the other way round, which a LoRA cannot follow by renaming.
"""
from __future__ import annotations

import re

# Fused layers, in diffusers' terms (relative to their block): the parts, in output order.
FUSED = {"attn.to_qkv": ("attn.to_q", "attn.to_k", "attn.to_v"),
         "attn.add_qkv_proj": ("attn.add_q_proj", "attn.add_k_proj", "attn.add_v_proj")}

DOUBLE = {
    "norm1.linear": "img_mod.lin", "norm1_context.linear": "txt_mod.lin",
    "attn.to_qkv": "img_attn.qkv", "attn.to_q": "img_attn.q", "attn.to_k": "img_attn.k",
    "attn.to_v": "img_attn.v", "attn.to_out.0": "img_attn.proj",
    "attn.add_qkv_proj": "txt_attn.qkv", "attn.add_q_proj": "txt_attn.q",
    "attn.add_k_proj": "txt_attn.k", "attn.add_v_proj": "txt_attn.v",
    "attn.to_add_out": "txt_attn.proj",
    "ff.net.0.proj": "img_mlp.0", "ff.net.2": "img_mlp.2",
    "ff_context.net.0.proj": "txt_mlp.0", "ff_context.net.2": "txt_mlp.2",
}
REFINER = {
    "attn.to_qkv": "self_attn.qkv", "attn.to_q": "self_attn.q", "attn.to_k": "self_attn.k",
    "attn.to_v": "self_attn.v", "attn.to_out.0": "self_attn.proj",
    "ff.net.0.proj": "mlp.0", "ff.net.2": "mlp.2", "norm_out.linear": "adaLN_modulation.1",
}
OTHER = {
    "context_embedder.proj_in": "txt_in.input_embedder",
    "context_embedder.time_text_embed.timestep_embedder.linear_1": "txt_in.t_embedder.in_layer",
    "context_embedder.time_text_embed.timestep_embedder.linear_2": "txt_in.t_embedder.out_layer",
    "context_embedder.time_text_embed.text_embedder.linear_1": "txt_in.c_embedder.in_layer",
    "context_embedder.time_text_embed.text_embedder.linear_2": "txt_in.c_embedder.out_layer",
    "context_embedder_2.linear_1": "byt5_in.fc1",
    "context_embedder_2.linear_2": "byt5_in.fc2",
    "context_embedder_2.linear_3": "byt5_in.fc3",
    "image_embedder.linear_1": "vision_in.proj.1",
    "image_embedder.linear_2": "vision_in.proj.3",
    "time_embed.timestep_embedder.linear_1": "time_in.in_layer",
    "time_embed.timestep_embedder.linear_2": "time_in.out_layer",
    "proj_out": "final_layer.linear",
}
# (diffusers' block prefix, ComfyUI's, the table inside the block)
BLOCKS = (("transformer_blocks", "double_blocks", DOUBLE),
          ("context_embedder.token_refiner.refiner_blocks",
           "txt_in.individual_token_refiner.blocks", REFINER))
_BACK_OTHER = {v: k for k, v in OTHER.items()}
_BACK = {id(table): {v: k for k, v in table.items()} for _, _, table in BLOCKS}


def _block(name: str, src: int) -> tuple[str, str, dict] | None:
    """(block prefix in the other spelling, the rest, its table) of a block's module."""
    for spelling in BLOCKS:
        m = re.match(rf"^{re.escape(spelling[src])}\.(\d+)\.(.+)$", name)
        if m:
            return f"{spelling[1 - src]}.{m[1]}", m[2], spelling[2]
    return None


def to_native(module: str) -> str:
    """diffusers' module name -> ComfyUI's (KeyError for one it has not)."""
    found = _block(module, 0)
    if found:
        prefix, rest, table = found
        return f"{prefix}.{table[rest]}"
    return OTHER[module]


def from_native(name: str) -> str:
    """ComfyUI's module name -> diffusers' (KeyError for an unknown one)."""
    found = _block(name, 1)
    if found:
        prefix, rest, table = found
        return f"{prefix}.{_BACK[id(table)][rest]}"
    return _BACK_OTHER[name]
