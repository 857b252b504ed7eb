"""What the FLUX.2 families' tests share (``tests/test_flux2_klein.py``,
``tests/test_flux2_dev.py``): the tiny pipeline and a render of it, a LoRA on the default
targets, and ComfyUI's FLUX LoRA key map, as the families' exports are checked against it."""
from __future__ import annotations

from pathlib import Path

import pytest

from backend.families import get_family
from backend.models import lora

RED_CIRCLE = "a red circle on a white background"


# ------------------------------------------------------------------------------------------
# The tiny pipeline, a render, a LoRA on the default targets
# ------------------------------------------------------------------------------------------
def flux2_pipeline(tiny_dir: Path, pipeline: str):
    """diffusers' ``pipeline`` class from the tiny pipeline's folder, in float32, quiet."""
    import diffusers
    import torch

    pipe = getattr(diffusers, pipeline).from_pretrained(str(tiny_dir), torch_dtype=torch.float32)
    pipe.set_progress_bar_config(disable=True)
    return pipe


def render(family: str, pipe, cfg: float, prompt: str = RED_CIRCLE):
    """One 64 x 64 image of 2 steps with seed 0 through the family's ``render``, as a
    float32 array."""
    import numpy as np
    import torch

    image = get_family(family).render(pipe, prompt, negative_prompt="",
                                      generator=torch.Generator().manual_seed(0), steps=2,
                                      cfg=cfg, height=64, width=64)
    return np.asarray(image, dtype=np.float32)


def lora_on_targets(tmp_path: Path, tiny_dir: Path, family: str, targets: list[str],
                    rank: int, std: float):
    """A LoRA of ``rank`` on ``targets`` of the tiny transformer, its B matrices drawn
    from N(0, std) after seed 0, saved as ``tmp_path/step-1.safetensors``: (path, state)."""
    import torch

    adapter = get_family(family)
    model = adapter.load_transformer(tiny_dir / "transformer", torch.float32)
    lora.add_lora(model, rank, adapter.target_modules(targets))
    torch.manual_seed(0)
    for name, p in model.named_parameters():
        if "lora_B" in name:
            torch.nn.init.normal_(p, std=std)
    state = lora.collect_lora_state(model)
    path = lora.save_lora(tmp_path / "step-1.safetensors", state, rank=rank,
                          target_modules=targets, model_family=family)
    return path, state


def check_stage1_encodes_as_the_pipeline(family: str, pipe, tiny_dir: Path, prompt: str):
    """Stage 1's sample of ``prompt`` and a 64 x 64 image, in every offload mode, is what
    ``pipe`` (the tiny pipeline) computes: the prompt embedding [1, 512, 3 x 16] equal, the
    latents [1, 16, 4, 4] close. Returns the pipeline's (prompt embedding, text ids)."""
    import torch

    adapter = get_family(family)
    expected, text_ids = pipe.encode_prompt(prompt, device=torch.device("cpu"))
    pixels = torch.rand(1, 3, 64, 64) * 2 - 1
    expected_latents = pipe._encode_vae_image(pixels, generator=None)
    dirs = {c: tiny_dir / c for c in ("text_encoder", "vae", "tokenizer")}
    for offload in ("none", "model", "sequential"):
        enc = adapter.load_encoder(dirs, torch.float32, "cpu", offload=offload)
        samples = list(enc.encode_samples([(lambda: pixels, prompt)]))
        assert len(samples) == 1
        s = samples[0]
        # 512 tokens x 3 stacked layers of the 16-wide tiny text encoder.
        assert s["prompt_emb"].shape == (1, 512, 48), offload
        assert torch.equal(s["prompt_emb"], expected), offload
        assert s["latents"].shape == (1, 16, 4, 4), offload
        assert torch.allclose(s["latents"], expected_latents, atol=1e-6), offload
        assert (int(s["height"]), int(s["width"])) == (64, 64)
    return expected, text_ids


# ------------------------------------------------------------------------------------------
# ComfyUI's FLUX key map
# ------------------------------------------------------------------------------------------


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
