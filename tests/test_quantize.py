"""A quantized frozen base (``quant_options``, ``fp8_models``) on the CPU, tiny Qwen-Image.

- In process, per method (bitsandbytes nf4 / int8, torchao int8 / fp8): the chosen linear
  layers are replaced by quantized ones (the family's skip list stays full precision), the
  LoRA on top trains in float32 and the held-out loss falls.
- The reference's command (``--quant_options ...:bitsandbytes_nf4/<skip list>`` with
  ``--enable_model_cpu_offload --enable_optimizer_cpu_offload``) runs against our stage with
  only the script path changed; the saved LoRA is float32 and loads, strictly, into the
  unquantized diffusers pipeline, where it changes the output.
- Bad entries and combinations are refused by field name before any stage starts.
"""
from __future__ import annotations

import pytest

from tests.harness.stages import read_progress

SOURCE = "Qwen/Qwen-Image:transformer/diffusion_pytorch_model*.safetensors"
REFERENCE_SKIP = "img_mod.1,txt_mod.1,norm_out.linear,img_in,txt_in,proj_out,timestep_embedder.*"


@pytest.fixture(scope="module")
def samples(stage1_cache):
    from backend.data.cache import CachedDataset

    data = CachedDataset(stage1_cache)
    return [data[i] for i in range(len(data))]


@pytest.mark.parametrize("method", ["bitsandbytes_nf4", "bitsandbytes_int8", "torchao_int8",
                                    "torchao_fp8"])
def test_quantized_base_trains(method, tiny_model_dir, samples):
    import torch

    from backend.models import lora
    from backend.families import get_family
    from backend.config.lowvram import QuantEntry
    from backend.models.quantize import is_quantized, quantize_model

    family = get_family("qwen_image")
    torch.manual_seed(0)
    model = family.load_transformer(tiny_model_dir / "transformer", torch.float32, "cpu")
    counts = quantize_model(model, QuantEntry("Qwen/Qwen-Image", "transformer/*", method, None),
                            family.quantize_skip, torch.float32, device="cpu",
                            log=lambda m: None)
    quantized = {n for n, m in model.named_modules() if is_quantized(m)}
    assert counts["quantized"] == len(quantized) > 0 and counts["skipped"] > 0
    # The family's skip list (in/out projections, modulation) stays in full precision.
    assert not any(n.startswith(("img_in", "txt_in", "proj_out")) or ".img_mod." in n
                   for n in quantized)
    assert "transformer_blocks.0.attn.to_q" in quantized
    lora.add_lora(model, 4, family.target_modules(["to_q", "to_k", "to_v", "to_out.0"]))
    params = [p for p in model.parameters() if p.requires_grad]
    for p in params:
        p.data = p.data.float()
    assert params and all(p.dtype == torch.float32 for p in params)
    opt = torch.optim.AdamW(params, lr=5e-3)
    schedule = family.training_schedule()
    before = family.eval_loss(model, samples[:2])
    for step in range(12):
        loss = family.training_loss(model, samples[step % 2], schedule,
                                    torch.Generator().manual_seed(step), torch.float32)
        loss.backward()
        opt.step()
        opt.zero_grad()
    after = family.eval_loss(model, samples[:2])
    assert after < before, (method, before, after)


def test_reference_command_runs_quantized_and_offloaded(launch_stage, models_root,
                                                        stage1_cache, tiny_model_dir,
                                                        plain_accelerate_config, tmp_path):
    import torch
    from safetensors.torch import load_file

    from backend.models import lora

    out = tmp_path / "out"
    # The reference's stage-2 command, the script path changed to our module.
    proc = launch_stage([
        "--task", "sft:train", "--models_dir", models_root, "--offline",
        "--model_id_with_origin_paths", SOURCE, "--dataset_base_path", stage1_cache,
        "--output_path", out, "--lora_base_model", "dit", "--lora_rank", "4",
        "--lora_target_modules", "to_q,to_k,to_v,add_q_proj,add_k_proj,add_v_proj,to_out.0",
        "--learning_rate", "5e-3", "--num_epochs", "3", "--remove_prefix_in_ckpt",
        "pipe.dit.", "--use_gradient_checkpointing", "--enable_model_cpu_offload",
        "--enable_optimizer_cpu_offload",
        "--quant_options", f"{SOURCE}:bitsandbytes_nf4/{REFERENCE_SKIP}"],
        config_file=plain_accelerate_config)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]
    assert "bitsandbytes_nf4" in proc.stdout and "layer offload: 2 blocks" in proc.stdout
    events = read_progress(out / "progress.jsonl")
    losses = [e["loss"] for e in events if e["event"] == "step"]
    assert len(losses) == 12 and events[-1]["status"] == "succeeded"
    saved = sorted(out.glob("epoch-*.safetensors"))
    assert [p.name for p in saved] == [f"epoch-{i}.safetensors" for i in range(3)]
    tensors = load_file(str(saved[-1]))
    assert tensors and all(t.dtype == torch.float32 for t in tensors.values())
    assert any(float(t.abs().sum()) > 0 for k, t in tensors.items() if "lora_B" in k)

    # The LoRA loads strictly into the unquantized diffusers pipeline's transformer and
    # changes what it computes.
    from backend.families import get_family
    family = get_family("qwen_image")
    pipe = family.load_pipeline({"transformer": tiny_model_dir / "transformer",
                                 "text_encoder": tiny_model_dir / "text_encoder",
                                 "vae": tiny_model_dir / "vae",
                                 "tokenizer": tiny_model_dir / "tokenizer",
                                 "scheduler": tiny_model_dir / "scheduler"}, torch.float32)
    from backend.data.cache import CachedDataset
    batch = [CachedDataset(stage1_cache)[0]]
    base = family.eval_loss(pipe.transformer, batch)
    lora.load_lora(pipe.transformer, saved[-1], strict=True)
    assert family.eval_loss(pipe.transformer, batch) != pytest.approx(base, rel=1e-6)


@pytest.mark.parametrize("values, field, words", [
    ({"quant_options": f"{SOURCE}:bitsandbytes_nf4", "zero_stage": 3,
      "offload_param_device": "cpu", "offload_optimizer_device": "cpu"},
     "quant_options", "ZeRO-3"),
    ({"enable_model_cpu_offload": True, "zero_stage": 2}, "enable_model_cpu_offload",
     "without DeepSpeed"),
    ({"enable_model_cpu_offload": True, "num_processes": 2}, "enable_model_cpu_offload",
     "one GPU"),
    ({"enable_optimizer_cpu_offload": True, "zero_stage": 1},
     "enable_optimizer_cpu_offload", "offload_optimizer_device"),
    ({"quant_options": f"{SOURCE}:int3"}, "quant_options", "bitsandbytes_nf4 |"),
    ({"quant_options": "just-a-name"}, "quant_options", "<model_id>:<glob>:<method>"),
    ({"fp8_models": "no-glob"}, "fp8_models", "<model_id>:<glob>"),
    ({"fp8_models": "dit", "zero_stage": 3}, "fp8_models", "ZeRO-3"),
    ({"quant_options": f"{SOURCE}:torchao_int8", "enable_model_cpu_offload": True},
     "enable_model_cpu_offload", "bitsandbytes"),
    ({"quant_options": f"{SOURCE}:bitsandbytes_nf4", "use_dora": True}, "quant_options",
     "DoRA"),
    ({"enable_optimizer_cpu_offload": True, "optimizer": "adamw_8bit"},
     "enable_optimizer_cpu_offload", "8-bit"),
])
def test_bad_combinations_are_refused_by_field(values, field, words):
    from backend.config.lowvram import combination_problems
    from backend.config.errors import ConfigError
    from backend.config.schema import RunConfig
    from backend.config.validation import validate

    merged = RunConfig.model_construct().model_dump()
    merged.update(values)
    problems = [p for p in combination_problems(merged) if p.startswith(field + ":")]
    assert problems and words in problems[0], combination_problems(merged)
    schema_values = {k: v for k, v in values.items() if k not in ("use_dora", "optimizer")}
    if schema_values == values:  # every key is ours: the schema refuses it the same way
        with pytest.raises(ConfigError) as e:
            validate({"dataset_base_path": "/data", **values})
        assert field in e.value.fields()


def test_stage_cli_reads_the_reference_flags():
    from backend.config.cli import parse_stage_args

    cfg = parse_stage_args([
        "--dataset_base_path", "/data", "--enable_model_cpu_offload",
        "--enable_optimizer_cpu_offload",
        "--quant_options", f"{SOURCE}:bitsandbytes_nf4/{REFERENCE_SKIP};"
        f"Qwen/Qwen-Image:text_encoder/*.safetensors:torchao_int8",
        "--fp8_models", "Qwen/Qwen-Image:vae/*.safetensors",
        "--offload_models", "Qwen/Qwen-Image:text_encoder/*.safetensors"])[0]
    from backend.config.lowvram import entries_for, offloaded_models
    assert [e.method for e in entries_for(cfg, "transformer")] == ["bitsandbytes_nf4"]
    assert entries_for(cfg, "transformer")[0].skip[0] == "img_mod.1"
    assert [e.method for e in entries_for(cfg, "text_encoder")] == ["torchao_int8"]
    assert [e.method for e in entries_for(cfg, "vae")] == ["torchao_fp8"]
    assert offloaded_models(cfg) == ["text_encoder"]


def test_importer_maps_the_reference_low_vram_flags(tmp_path):
    from backend.planning.importer import import_commands

    script = f"""accelerate launch examples/qwen_image/model_training/train.py \\
  --dataset_base_path data/example_image_dataset \\
  --dataset_metadata_path data/example_image_dataset/metadata.csv \\
  --model_id_with_origin_paths "{SOURCE},Qwen/Qwen-Image:text_encoder/model*.safetensors,Qwen/Qwen-Image:vae/diffusion_pytorch_model.safetensors" \\
  --learning_rate 1e-4 --num_epochs 5 --remove_prefix_in_ckpt "pipe.dit." \\
  --output_path ./models/train/Qwen-Image_lora --lora_base_model dit \\
  --lora_target_modules "to_q,to_k,to_v,add_q_proj,add_k_proj,add_v_proj,to_out.0" \\
  --lora_rank 32 --use_gradient_checkpointing \\
  --enable_model_cpu_offload --enable_optimizer_cpu_offload \\
  --quant_options "{SOURCE}:bitsandbytes_nf4/{REFERENCE_SKIP};Qwen/Qwen-Image:text_encoder/model*.safetensors:bitsandbytes_nf4" \\
  --offload_models "Qwen/Qwen-Image:text_encoder/model*.safetensors,Qwen/Qwen-Image:vae/diffusion_pytorch_model.safetensors" \\
  --task sft
"""
    result = import_commands(script, base_dir=tmp_path)
    cfg = result.config
    assert result.not_understood == []
    assert cfg.enable_model_cpu_offload and cfg.enable_optimizer_cpu_offload
    assert cfg.quant_options.startswith(f"{SOURCE}:bitsandbytes_nf4/img_mod.1")
    assert cfg.offload_models.startswith("Qwen/Qwen-Image:text_encoder")  # one-shot: kept
    assert (cfg.task, cfg.split_training, cfg.zero_stage) == ("sft", False, 0)


@pytest.mark.parametrize("method", ["bitsandbytes_nf4", "torchao_int8"])
def test_stage1_text_encoder_quantized(method, tiny_model_dir):
    """quant_options for the text encoder (what dominates stage 1 on a small card): the
    encoder's linear layers are quantized and the cached embeddings stay close to the
    full-precision ones without being equal."""
    import torch

    from backend.config.validation import validate
    from backend.families import get_family
    from backend.models.quantize import is_quantized, quantize_frozen

    family = get_family("qwen_image")
    dirs = {c: tiny_model_dir / c for c in ("text_encoder", "tokenizer", "vae")}
    cfg = validate({"dataset_base_path": "/data", "quant_options":
                    f"Qwen/Qwen-Image:text_encoder/model*.safetensors:{method}"})
    pixels = torch.rand(1, 3, 64, 64, generator=torch.Generator().manual_seed(0)) * 2 - 1
    enc = family.load_encoder(dirs, torch.float32, "cpu")
    ref = enc.encode_sample(pixels, "a red circle on a white background")
    quantize_frozen(cfg, enc, log=lambda m: None)
    assert sum(is_quantized(m) for m in enc.text_encoder.modules()) > 0
    assert not any(is_quantized(m) for m in enc.vae.modules())
    out = enc.encode_sample(pixels, "a red circle on a white background")
    key = next(k for k in ref if "prompt_emb" in k or "encoder_hidden" in k or "text" in k)
    a, b = ref[key].float(), out[key].float()
    assert a.shape == b.shape and not torch.equal(a, b)
    assert torch.nn.functional.cosine_similarity(a.flatten(), b.flatten(), dim=0) > 0.9
    torch.testing.assert_close(out["latents"], ref["latents"])  # the VAE is untouched
