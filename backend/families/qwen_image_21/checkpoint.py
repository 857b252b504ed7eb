"""Qwen-Image-2.1's full checkpoint in one file (``Family.full_checkpoint_names``).

- ``comfyui``: ComfyUI's Qwen-Image-2.1 model (0.37.0 on, ``comfy/ldm/qwen_image21``) has
  diffusers' names but fuses each block's SwiGLU gate and up projections into one
  ``img_mlp.gate_up`` (gate rows first): diffusers'
  ``convert_qwen_image21_transformer_checkpoint_to_diffusers``, its reader of ComfyUI's
  files, splits exactly that and renames nothing else.
- ``reference``: the reference trainer has no Qwen-Image-2.1 model, so it has no checkpoint
  naming of its own (None: refused).
"""
from __future__ import annotations

import re
from typing import Mapping

from backend.families.checkpoint_names import Names, fuse, renamed

_PART = re.compile(r"^transformer_blocks\.(\d+)\.img_mlp\.(?:gate_layer|proj)\.(weight|bias)$")


def names(shapes: Mapping[str, tuple[int, ...]], fmt: str) -> Names | None:
    if fmt != "comfyui":
        return None
    out = renamed(shapes, lambda key: None if _PART.match(key) else key)
    for key in shapes:
        m = _PART.match(key)
        if m:
            p = f"transformer_blocks.{m[1]}.img_mlp."
            fuse(shapes, out, f"{p}gate_up.{m[2]}",
                 (f"{p}gate_layer.{m[2]}", f"{p}proj.{m[2]}"))
    return out
