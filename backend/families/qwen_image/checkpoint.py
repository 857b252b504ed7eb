"""Qwen-Image's full checkpoint in one file (``Family.full_checkpoint_names``).

- ``comfyui``: ComfyUI's Qwen-Image model (``comfy/ldm/qwen_image/model.py``,
  ``QwenImageTransformer2DModel``) has diffusers' own module names and no fused layer, so
  the keys stay; ``COMFYUI`` lists the parameters that model has, and a key outside it
  (an architecture ComfyUI's model lacks) is left unnamed, so the export is refused.
- ``reference``: the reference trainer saves ``step-N.safetensors`` / ``epoch-N`` as its
  ``QwenImageDiT``'s state dict without the ``pipe.dit.`` prefix
  (``diffsynth/diffusion/logger.py`` ``ModelLogger.save_model``); that class loads the
  diffusers transformer files without a state-dict converter
  (``diffsynth/configs/model_configs.py``), so its names are diffusers' too.
"""
from __future__ import annotations

from typing import Mapping

from backend.families.checkpoint_names import Names, by_patterns, renamed

_WB = r"\.(?:weight|bias)"
COMFYUI = (
    rf"time_text_embed\.timestep_embedder\.linear_[12]{_WB}",
    r"txt_norm\.weight", rf"img_in{_WB}", rf"txt_in{_WB}",
    rf"transformer_blocks\.\d+\.(?:img_mod|txt_mod)\.1{_WB}",
    r"transformer_blocks\.\d+\.attn\.norm_(?:q|k|added_q|added_k)\.weight",
    rf"transformer_blocks\.\d+\.attn\.(?:to_q|to_k|to_v|add_q_proj|add_k_proj|add_v_proj"
    rf"|to_add_out|to_out\.0){_WB}",
    rf"transformer_blocks\.\d+\.(?:img_mlp|txt_mlp)\.net\.(?:0\.proj|2){_WB}",
    rf"norm_out\.linear{_WB}", rf"proj_out{_WB}",
)


def names(shapes: Mapping[str, tuple[int, ...]], fmt: str) -> Names | None:
    if fmt == "comfyui":
        return renamed(shapes, by_patterns(COMFYUI))
    if fmt == "reference":
        return renamed(shapes, lambda key: key)
    return None
