"""Layer-wise offload without DeepSpeed (``enable_model_cpu_offload``), on the CPU.

- In process, on the tiny Qwen-Image: the same seed trained plainly and with layer offload
  gives the same losses and the same LoRA (float tolerance), with and without
  checkpointing; the hooks really move weights (a block's frozen parameters hold no
  storage while another block runs, and get it back when theirs runs; backward reloads).
- The reference's command with ``--enable_model_cpu_offload --enable_optimizer_cpu_offload``
  runs against our stage with only the script path changed, and its LoRA loads into the
  unquantized diffusers pipeline.
- Bad combinations are refused by field name before any stage starts.
"""
from __future__ import annotations

import copy
import json

import pytest

from tests.conftest import read_progress

STEPS = 4


def _train(model, samples, offload: bool, checkpointing: bool, record=None):
    import torch

    from backend.families import get_family
    from backend.families.common import block_checkpointing_func
    from backend.layer_offload import LayerOffload

    family = get_family("qwen_image")
    if checkpointing:
        model.enable_gradient_checkpointing(
            gradient_checkpointing_func=block_checkpointing_func(False))
    off = None
    if offload:
        off = LayerOffload(model, family.offload_blocks, "cpu", checkpointing=checkpointing,
                           log=lambda m: None)
        if record is not None:
            for i, block in enumerate(model.transformer_blocks):
                block.register_forward_pre_hook(record(model, i))
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=1e-3)
    schedule = family.training_schedule()
    losses = []
    for step in range(STEPS):
        g = torch.Generator().manual_seed(step)
        loss = family.training_loss(model, samples[step % len(samples)], schedule, g,
                                    torch.float32)
        loss.backward()
        opt.step()
        opt.zero_grad()
        losses.append(float(loss.detach()))
    lora = {n: p.detach().clone() for n, p in model.named_parameters() if "lora_" in n}
    return losses, lora, off


@pytest.fixture(scope="module")
def base(tiny_model_dir, stage1_cache):
    import torch

    from backend import lora
    from backend.cache import CachedDataset
    from backend.families import get_family

    family = get_family("qwen_image")
    torch.manual_seed(0)
    model = family.load_transformer(tiny_model_dir / "transformer", torch.float32, "cpu")
    lora.add_lora(model, 4, family.target_modules(["to_q", "to_k", "to_v", "to_out.0"]))
    with torch.no_grad():  # LoRA B starts at zero: give it values so every path matters
        for n, p in model.named_parameters():
            if "lora_B" in n:
                p.normal_(0, 0.02, generator=torch.Generator().manual_seed(1))
    samples = [CachedDataset(stage1_cache)[i] for i in range(2)]
    return model, samples


@pytest.mark.parametrize("checkpointing", [False, True])
def test_layer_offload_matches_plain_training(base, checkpointing):
    import torch

    model, samples = base
    plain_losses, plain_lora, _ = _train(copy.deepcopy(model), samples, False, checkpointing)
    seen: list[tuple[int, list[int], bool]] = []

    def record(m, i):
        def hook(module, args):
            blocks = [j for j, blk in enumerate(m.transformer_blocks)
                      if blk.attn.to_q.base_layer.weight.untyped_storage().nbytes() > 0]
            seen.append((i, blocks, torch.is_grad_enabled()))
        return hook

    off_model = copy.deepcopy(model)
    off_losses, off_lora, off = _train(off_model, samples, True, checkpointing, record)
    # Same curve and same LoRA as plain training at the same seed.
    assert len(off_losses) == STEPS and plain_losses[0] != plain_losses[1]
    assert off_losses == pytest.approx(plain_losses, rel=1e-5, abs=1e-6)
    assert off_lora.keys() == plain_lora.keys() and len(off_lora) > 0
    for k in plain_lora:
        torch.testing.assert_close(off_lora[k], plain_lora[k], rtol=1e-4, atol=1e-6)
    # The running block, and only it, holds its weights (no CUDA: no prefetch).
    assert seen and all(blocks == [i] for i, blocks, _ in seen), seen[:6]
    n = len(model.transformer_blocks)
    per_step = 2 * n if checkpointing else n  # recompute runs each block again
    assert len(seen) == STEPS * per_step
    # Between blocks nothing stays loaded but what backward reloaded last, and the frozen
    # weights' storage is empty outside the arena.
    frozen = [p for p in off_model.transformer_blocks.parameters() if not p.requires_grad]
    assert off.loaded_blocks() in ([], [0])
    off.release_all()
    assert all(p.untyped_storage().nbytes() == 0 for p in frozen)
    # Backward reloaded every block (from its saved-tensor tokens, or for the recompute):
    # n loads in each forward and n in each backward, less the first block of the next
    # forward, which backward leaves loaded (it is dropped when another block runs; a
    # recompute stops early, before the block's forward hook would drop it).
    assert off.loads == 2 * n * STEPS - (STEPS - 1)
    assert off.arena_bytes >= sum(v.nbytes for b in off.blocks for v in b.views)
