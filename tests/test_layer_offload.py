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

import pytest


STEPS = 4


def _train(model, samples, offload: bool, checkpointing: bool, record=None):
    import torch

    from backend.families import get_family
    from backend.families.common import block_checkpointing_func
    from backend.models.layer_offload import LayerOffload

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

    from backend.models import lora
    from backend.data.cache import CachedDataset
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


# Published peak VRAM for Qwen-Image LoRA at 1024² (GB = 10^9 bytes; GiB converted).
PUBLISHED = {"bf16 + checkpointing (musubi-tuner)": 42.0,
             "bf16 + checkpointing (SimpleTuner)": 41 * 1.073741824,
             "int8 + checkpointing (SimpleTuner)": 24.1 * 1.073741824,
             "fp8 + 45 of 60 blocks swapped (musubi-tuner)": 12.0}


def test_estimator_methods_for_real_qwen_image():
    """Real Qwen-Image (published config), rank 32, 1024²: each method's GPU peak and bus
    bytes derived from parameter counts, beside the peers' published figures, and the
    recommendation per card."""
    import fnmatch

    import diffusers
    import torch
    from accelerate import init_empty_weights

    from backend.planning import estimator
    from backend.config.presets import load_preset
    from backend.families import get_family

    cfg = load_preset("qwen_image_single_gpu").model_copy(
        update={"height": 1024, "width": 1024, "lora_rank": 32})
    family = get_family("qwen_image")
    configs, _ = estimator.model_configs(cfg)
    conf = configs["transformer"]
    with init_empty_weights():
        meta = getattr(diffusers, conf["_class_name"]).from_config(conf)
    params = sum(p.numel() for p in meta.parameters())
    assert 20.0e9 < params < 20.6e9
    skip = family.quantize_skip
    block_q = block_s = 0
    for name, m in meta.named_modules():
        if isinstance(m, torch.nn.Linear) and name.startswith("transformer_blocks."):
            if any(name == s or name.startswith(s + ".") or fnmatch.fnmatchcase(name, s)
                   for s in skip):
                block_s += m.weight.numel()
            else:
                block_q += m.weight.numel()
    GB = 1e9
    rows, _ = estimator.compare_methods(cfg, None, bandwidth=25e9)
    by = {r.name: r for r in rows}
    table = {r.name: (round(r.gpu_bytes / GB, 1), round(r.bus_bytes_per_step / GB, 1))
             for r in rows}
    print("method: (GPU GB incl. CUDA context, GB over the bus per step)", table)
    print("published:", PUBLISHED)

    # Bus bytes per step: every block's weights forward and backward, at their stored size,
    # plus the updated float32 LoRA from the offloaded optimizer.
    lora = estimator.estimate_memory(cfg).params["lora"]
    assert 0.2e9 < lora < 0.3e9
    assert by["layer_offload"].bus_bytes_per_step == pytest.approx(
        2 * 2 * (block_q + block_s) + 4 * lora, rel=0.01)
    nf4_bits = 4 + 8 / 64 + 32 / (64 * 256)
    assert by["layer_offload_nf4"].bus_bytes_per_step == pytest.approx(
        2 * (block_q * nf4_bits / 8 + block_s * 2) + 4 * lora, rel=0.01)
    assert by["zero3_offload"].bus_bytes_per_step == pytest.approx(2 * 2 * params, rel=0.01)
    for quiet in ("plain", "int8", "fp8", "nf4"):
        assert by[quiet].bus_bytes_per_step == 0
    assert by["layer_offload"].transfer_bound_s == pytest.approx(
        by["layer_offload"].bus_bytes_per_step / 25e9)

    # GPU peaks beside the published figures.
    assert by["plain"].gpu_bytes / GB == pytest.approx(42.0, rel=0.2)
    int8_all = estimator.estimate_memory(cfg.model_copy(update={
        "quant_options": "Qwen/Qwen-Image:transformer/*.safetensors:torchao_int8/",
        "use_gradient_checkpointing": True}))
    assert int8_all.stages["train"].gpu_gb == pytest.approx(
        PUBLISHED["int8 + checkpointing (SimpleTuner)"], rel=0.15)
    # The family's skip list keeps the per-block modulation in bf16: a third of the model.
    assert by["int8"].gpu_bytes > int8_all.stages["train"].gpu_bytes + 6 * GB
    assert by["nf4"].gpu_bytes < by["int8"].gpu_bytes < by["plain"].gpu_bytes
    assert by["layer_offload_nf4"].gpu_bytes < by["layer_offload"].gpu_bytes < 8 * GB
    assert by["layer_offload"].gpu_bytes < PUBLISHED[
        "fp8 + 45 of 60 blocks swapped (musubi-tuner)"] * GB  # every block swapped here
    assert by["zero3_offload"].gpu_bytes < by["layer_offload_nf4"].gpu_bytes

    # The fastest that fits: resident first, then the least traffic; None when none fits.
    def best(gb):
        return estimator.compare_methods(cfg, gb * GB, bandwidth=25e9)[1]

    assert best(80) == "plain"
    assert best(40) in ("fp8", "int8")
    assert best(30) == "nf4"
    assert best(24) == "layer_offload_nf4"
    assert best(5) == "zero3_offload"
    assert best(2) is None
    # A suggestion: the row's changes, applied, give that method; the config is untouched.
    applied = cfg.model_copy(update=by["layer_offload_nf4"].changes)
    assert applied.enable_model_cpu_offload and "bitsandbytes_nf4" in applied.quant_options
    assert not cfg.enable_model_cpu_offload and cfg.quant_options is None
    from backend.config.validation import validate
    validate({**applied.to_dict(), "dataset_base_path": "/data"})  # a valid combination


def test_estimator_stage1_with_a_quantized_text_encoder():
    """The 8B text encoder dominates stage 1 on a small card: nf4 cuts its weights to about
    a third (embedding and LM head stay bf16), and the stage's GPU figure with them."""
    from backend.planning import estimator
    from backend.config.presets import load_preset

    cfg = load_preset("qwen_image_single_gpu")
    plain = estimator.estimate_memory(cfg)
    q = estimator.estimate_memory(cfg.model_copy(update={
        "quant_options": "Qwen/Qwen-Image:text_encoder/model*.safetensors:bitsandbytes_nf4"}))
    te = plain.params["text_encoder"]
    w0 = plain.stages["data_process"].gpu["text encoder weights"]
    w1 = q.stages["data_process"].gpu["text encoder weights"]
    assert w0 == te * 2 and 0.25 * w0 < w1 < 0.45 * w0
    assert q.stages["data_process"].gpu_bytes == pytest.approx(
        plain.stages["data_process"].gpu_bytes - (w0 - w1))
    assert q.stages["train"].gpu_bytes == plain.stages["train"].gpu_bytes  # stage 2 untouched
