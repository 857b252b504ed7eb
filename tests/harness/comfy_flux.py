"""ComfyUI's FLUX LoRA key map, as the FLUX.2 families' exports are checked against it
(``tests/test_flux2_klein.py``, ``tests/test_flux2_dev.py``)."""
from __future__ import annotations

from pathlib import Path

import pytest


def comfyui_flux_lora_keys(double_blocks: int, single_blocks: int) -> set[str]:
    """The diffusers-style FLUX LoRA module keys ComfyUI's loader maps, with the
    ``transformer.`` prefix: a transcription of ``comfy/utils.py`` ``flux_to_diffusers``
    (the FLUX.1 and FLUX.2 names) as ``comfy/lora.py`` ``model_lora_keys_unet`` uses it for
    FLUX models (``transformer.<name>``, also bare; never ``diffusion_model.<name>``)."""
    names: set[str] = set()
    for i in range(double_blocks):
        p = f"transformer_blocks.{i}."
        names |= {p + n for n in (
            "attn.to_q", "attn.to_k", "attn.to_v", "attn.add_q_proj", "attn.add_k_proj",
            "attn.add_v_proj", "attn.to_out.0", "attn.to_add_out", "norm1.linear",
            "norm1_context.linear", "ff.net.0.proj", "ff.net.2", "ff_context.net.0.proj",
            "ff_context.net.2", "ff.linear_in", "ff.linear_out", "ff_context.linear_in",
            "ff_context.linear_out", "attn.norm_q", "attn.norm_k", "attn.norm_added_q",
            "attn.norm_added_k")}
    for i in range(single_blocks):
        p = f"single_transformer_blocks.{i}."
        names |= {p + n for n in (
            "attn.to_q", "attn.to_k", "attn.to_v", "proj_mlp", "norm.linear", "proj_out",
            "attn.norm_q", "attn.norm_k", "attn.to_qkv_mlp_proj", "attn.to_out")}
    names |= {"proj_out", "x_embedder", "context_embedder", "norm_out.linear",
              "time_text_embed.timestep_embedder.linear_1",
              "time_text_embed.timestep_embedder.linear_2",
              "time_text_embed.text_embedder.linear_1", "time_text_embed.text_embedder.linear_2",
              "time_text_embed.guidance_embedder.linear_1",
              "time_text_embed.guidance_embedder.linear_2", "controlnet_x_embedder"}
    return {f"transformer.{n}" for n in names}


def check_comfyui_export(path: Path, transformer) -> int:
    """Every key: ``transformer.<module>.lora_down/lora_up.weight`` or ``.alpha``, the
    module one ComfyUI maps, and a Linear of the model with matching sizes."""
    import torch
    from safetensors.torch import load_file

    cfg = transformer.config
    accepted = comfyui_flux_lora_keys(cfg.num_layers, cfg.num_single_layers)
    linears = {n: m for n, m in transformer.named_modules() if isinstance(m, torch.nn.Linear)}
    tensors = load_file(str(path))
    modules = set()
    for key, value in tensors.items():
        for suffix in (".lora_down.weight", ".lora_up.weight", ".alpha"):
            if key.endswith(suffix):
                module = key[: -len(suffix)]
                break
        else:
            pytest.fail(f"{key}: not a ComfyUI LoRA key")
        assert module in accepted, f"{key}: ComfyUI's FLUX key map has no {module}"
        name = module[len("transformer."):]
        assert name in linears, f"{key}: no Linear {name} in the model"
        if key.endswith(".lora_down.weight"):
            assert value.shape[1] == linears[name].in_features, key
        if key.endswith(".lora_up.weight"):
            assert value.shape[0] == linears[name].out_features, key
        modules.add(module)
    assert not any(k.startswith("diffusion_model.") for k in tensors)
    return len(modules)
