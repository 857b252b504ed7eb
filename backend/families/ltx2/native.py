"""LTX-2's native (original-checkpoint) module names, for ComfyUI's LoRA loader.

ComfyUI's LTX-2 model keeps the original checkpoint's names under ``diffusion_model.``
(``patchify_proj``, ``adaln_single``, ``av_ca_video_scale_shift_adaln_single``...); the
blocks' attention and feed-forward layers (``transformer_blocks.N.attn1.to_q``,
``.audio_to_video_attn.to_out.0``, ``.ff.net.0.proj``) have the same names in both. The
table is diffusers' own LTX-2 key mapping (``_convert_non_diffusers_ltx2_lora_to_diffusers``:
original -> diffusers, its top-level renames) read backwards.
"""
from __future__ import annotations

# diffusers' top-level module -> the original's (the Linear layers live under them).
TOP = {
    "proj_in": "patchify_proj",
    "audio_proj_in": "audio_patchify_proj",
    "time_embed": "adaln_single",
    "audio_time_embed": "audio_adaln_single",
    "av_cross_attn_video_scale_shift": "av_ca_video_scale_shift_adaln_single",
    "av_cross_attn_video_a2v_gate": "av_ca_a2v_gate_adaln_single",
    "av_cross_attn_audio_scale_shift": "av_ca_audio_scale_shift_adaln_single",
    "av_cross_attn_audio_v2a_gate": "av_ca_v2a_gate_adaln_single",
    "prompt_adaln": "prompt_adaln_single",  # LTX-2.3
    "audio_prompt_adaln": "audio_prompt_adaln_single",
}
_BACK = {v: k for k, v in TOP.items()}


def _rename(module: str, table: dict[str, str]) -> str:
    head, dot, rest = module.partition(".")
    return table.get(head, head) + dot + rest


def to_native(module: str) -> str:
    """diffusers' module name -> the original LTX-2 name."""
    return _rename(module, TOP)


def from_native(name: str) -> str:
    """The original LTX-2 module name -> diffusers'."""
    return _rename(name, _BACK)
