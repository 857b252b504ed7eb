"""LoRA files written the way training saves them, from a peft adapter with random weights."""
from __future__ import annotations

from pathlib import Path

import torch

from backend.families.qwen_image import SPEC as QWEN_IMAGE

QWEN_IMAGE_TARGETS = QWEN_IMAGE.defaults["lora_target_modules"]


RANK = 4


def peft_transformer(tiny: Path, seed: int, rank: int = RANK, b_std: float = 1.0):
    """The tiny transformer with a peft LoRA whose lora_B is random (non-zero)."""
    from diffusers import QwenImageTransformer2DModel
    from peft import LoraConfig

    model = QwenImageTransformer2DModel.from_pretrained(tiny / "transformer").eval()
    torch.manual_seed(seed)  # peft draws lora_A from the global generator
    model.add_adapter(LoraConfig(r=rank, lora_alpha=rank,
                                 target_modules=QWEN_IMAGE_TARGETS.split(",")))
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.copy_(torch.randn(p.shape, generator=gen) * b_std)
    return model


def make_reference_lora(tiny: Path, path: Path, seed: int = 1, rank: int = RANK,
                        b_std: float = 1.0) -> dict[str, torch.Tensor]:
    """Write a LoRA the way training saves it: peft keys with adapter `default`, no prefix,
    no alpha tensor (alpha = rank), metadata with rank/alpha/targets."""
    from backend.models.lora import save_lora

    model = peft_transformer(tiny, seed, rank, b_std)
    sd = {k: v.detach().clone().contiguous() for k, v in model.state_dict().items()
          if "lora_" in k}
    save_lora(path, sd, rank=rank, target_modules=QWEN_IMAGE_TARGETS.split(","))
    return sd


def transformer_inputs(seed: int = 0) -> dict:
    """One tiny forward's inputs (64x64 image -> 4x4 packed latents, 7 text tokens)."""
    g = torch.Generator().manual_seed(seed)
    return dict(hidden_states=torch.randn(1, 16, 64, generator=g),
                encoder_hidden_states=torch.randn(1, 7, 32, generator=g),
                encoder_hidden_states_mask=torch.ones(1, 7, dtype=torch.long),
                timestep=torch.tensor([0.5]), img_shapes=[[(1, 4, 4)]], return_dict=False)
