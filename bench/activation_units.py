"""How much one Qwen-Image transformer block saves for backward, in hidden-state units.

The estimator (backend/planning/estimator.py) models a block's training activations as
U * N * D * b bytes (N tokens, D = heads * head_dim, b bytes of the compute dtype). This
script measures U on a real ``QwenImageTransformerBlock`` with the product's LoRA targets
(rank 32): it runs one forward under ``torch.autograd.graph.saved_tensors_hooks`` and adds
up the distinct storages autograd keeps, leaving out parameters and the shared rotary
table. U does not depend on N, and hardly on D (LoRA's rank-sized tensors are r/D of a
unit), so a small block on the CPU gives the constant the real model uses.

Regimes (the ones the train stage runs):
- fp32:                 everything float32 (CPU runs, mixed_precision no)
- bf16:                 base and LoRA in bf16 (DeepSpeed bf16)
- bf16 + fp32 LoRA:     bf16 base, fp32 LoRA weights under autocast (accelerate bf16)

Run (about 10 s on 2 CPU cores):
    python bench/activation_units.py            # prints, writes bench/results/activation_units.json
"""
from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from bench.results_io import write_result  # noqa: E402

TARGETS = ("to_q,to_k,to_v,add_q_proj,add_k_proj,add_v_proj,to_out.0,to_add_out,"
           "img_mlp.net.2,img_mod.1,txt_mlp.net.2,txt_mod.1").split(",")
REGIMES = {
    "fp32": ("float32", "float32", False),
    "bf16": ("bfloat16", "bfloat16", False),
    "bf16_fp32_lora_autocast": ("bfloat16", "float32", True),
}


def measure_units(dtype: str = "float32", lora_dtype: str = "float32", autocast: bool = False,
                  heads: int = 4, head_dim: int = 128, image_side: int = 32,
                  text_tokens: int = 64, rank: int = 32, seed: int = 0) -> dict:
    """Saved-for-backward bytes of one block, and the same in units of N * D * b."""
    import torch
    from diffusers.models.transformers.transformer_qwenimage import (
        QwenEmbedRope, QwenImageTransformerBlock)
    from peft import LoraConfig, inject_adapter_in_model

    torch.manual_seed(seed)
    dt, ldt = getattr(torch, dtype), getattr(torch, lora_dtype)
    dim = heads * head_dim
    block = QwenImageTransformerBlock(dim, heads, head_dim).to(dt).requires_grad_(False)
    block = inject_adapter_in_model(LoraConfig(r=rank, lora_alpha=rank,
                                               target_modules=list(TARGETS)), block)
    for name, p in block.named_parameters():
        if "lora_" in name:
            p.data = p.data.to(ldt)
            p.requires_grad_(True)
    rope = QwenEmbedRope(theta=10000, axes_dim=[16, 56, 56] if head_dim == 128 else
                         [head_dim // 8, 7 * head_dim // 16, 7 * head_dim // 16],
                         scale_rope=True)
    rot = rope([(1, image_side, image_side)], max_txt_seq_len=text_tokens, device="cpu")
    n_img = image_side * image_side
    x = torch.randn(1, n_img, dim, dtype=dt)
    e = torch.randn(1, text_tokens, dim, dtype=dt)
    temb = torch.randn(1, dim, dtype=dt)

    skip = {p.untyped_storage().data_ptr() for p in block.parameters()}
    skip |= {t.untyped_storage().data_ptr() for t in rot}
    seen: dict[int, int] = {}

    def pack(t):
        s = t.untyped_storage()
        if s.data_ptr() not in skip:
            seen[s.data_ptr()] = s.nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        with torch.autocast("cpu", dtype=dt, enabled=autocast):
            txt, img = block(x, e, None, temb, rot)
    (txt.float().mean() + img.float().mean()).backward()  # the graph is a real one
    unit = (n_img + text_tokens) * dim * torch.tensor([], dtype=dt).element_size()
    total = sum(seen.values())
    return {"dtype": dtype, "lora_dtype": lora_dtype, "autocast": autocast, "dim": dim,
            "tokens": n_img + text_tokens, "rank": rank, "saved_bytes": total,
            "units": round(total / unit, 2)}


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--image_side", type=int, default=32, help="image tokens per side")
    parser.add_argument("--out", default=str(ROOT / "bench/results/activation_units.json"))
    args = parser.parse_args(argv)
    import torch

    from backend.planning import estimator as E

    t0 = time.time()
    rows = {name: measure_units(*spec, heads=args.heads, image_side=args.image_side)
            for name, spec in REGIMES.items()}
    model = {"fp32": E.ACT_UNITS_SAVED,
             "bf16": E.ACT_UNITS_SAVED + E.ACT_UNITS_UPCAST,
             "bf16_fp32_lora_autocast": E.ACT_UNITS_SAVED + E.ACT_UNITS_UPCAST
             + E.ACT_UNITS_LORA_CAST}
    for name, row in rows.items():
        row["estimator_units"] = round(model[name], 2)
        print(f"{name:26s} measured {row['units']:6.2f} units  estimator {model[name]:6.2f}  "
              f"({row['saved_bytes'] / 1e6:.1f} MB at D={row['dim']}, N={row['tokens']})")
    result = {"date": time.strftime("%Y-%m-%d"),
              "machine": f"{platform.machine()}, CPU only", "torch": torch.__version__,
              "seconds": round(time.time() - t0, 1), "regimes": rows}
    return write_result(args.out, result)


if __name__ == "__main__":
    main()
