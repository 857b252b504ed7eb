"""LoRA exports: diffusers loads its file, ComfyUI names, reference round-trips, checks."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors import safe_open
from safetensors.torch import save_file

from backend.families.qwen_image import TARGETS as QWEN_IMAGE_TARGETS
from backend.models.export import (LoraFormatError, export_lora, load_lora_file, split_modules,
                            transformer_linear_shapes, read_transformer_config)
from tests.harness.loras import make_reference_lora, peft_transformer, transformer_inputs
from tests.harness.stages import RANK

ROOT = Path(__file__).resolve().parents[1]

# ------------------------------------------------------------------------------------------
# Shared helpers (test_sample imports them)
# ------------------------------------------------------------------------------------------

def forward(transformer) -> torch.Tensor:
    with torch.no_grad():
        return transformer(**transformer_inputs())[0]


def render(pipe, prompt: str = "a red circle") -> np.ndarray:
    g = torch.Generator("cpu").manual_seed(0)
    out = pipe(prompt=prompt, negative_prompt="", true_cfg_scale=4.0, num_inference_steps=2,
               height=64, width=64, generator=g).images[0]
    return np.asarray(out)


def read(path: Path) -> tuple[dict[str, torch.Tensor], dict[str, str]]:
    with safe_open(str(path), framework="pt") as f:
        return {k: f.get_tensor(k) for k in f.keys()}, dict(f.metadata() or {})


@pytest.fixture(scope="module")
def run_output(tiny_dir, tmp_path_factory) -> Path:
    """<run>/output with step-2.safetensors in the reference format."""
    out = tmp_path_factory.mktemp("run") / "output"
    make_reference_lora(tiny_dir, out / "step-2.safetensors", seed=1)
    return out


@pytest.fixture(scope="module")
def pipe(tiny_dir):
    from diffusers import QwenImagePipeline

    p = QwenImagePipeline.from_pretrained(tiny_dir, torch_dtype=torch.float32)
    p.set_progress_bar_config(disable=True)
    return p


# ------------------------------------------------------------------------------------------
# Tests
# ------------------------------------------------------------------------------------------
def test_diffusers_export_loads_with_load_lora_weights_and_changes_output(
        tiny_dir, run_output, pipe):
    src = run_output / "step-2.safetensors"
    out = export_lora(src, "diffusers", transformer_config=tiny_dir)
    assert out == run_output / "export" / "step-2.diffusers.safetensors"
    assert sorted(p.name for p in run_output.iterdir() if p.is_file()) == ["step-2.safetensors"]
    tensors, meta = read(out)
    assert all(k.startswith("transformer.") and ".default." not in k for k in tensors)
    assert {k.rsplit(".", 2)[-2] for k in tensors} == {"lora_A", "lora_B"}
    assert meta["rank"] == str(RANK) and meta["target_modules"] == QWEN_IMAGE_TARGETS
    assert meta["zerolora_format"] == "diffusers" and meta["zerolora_source"] == src.name
    assert meta["format"] == "pt" and meta["source_format"] == "zerolora-lora"

    base_image = render(pipe)
    base_out = forward(pipe.transformer)
    pipe.load_lora_weights(str(out), adapter_name="exported")
    try:
        lora_out = forward(pipe.transformer)
        lora_image = render(pipe)
    finally:
        pipe.delete_adapters("exported")
    # The loaded LoRA computes what the peft model that made it computes.
    expected = forward(peft_transformer(tiny_dir, seed=1))
    torch.testing.assert_close(lora_out, expected, rtol=1e-4, atol=1e-5)
    assert not torch.allclose(lora_out, base_out)
    assert np.abs(lora_image.astype(int) - base_image).max() > 0
    assert np.array_equal(render(pipe), base_image)  # adapter gone: base again


def test_comfyui_export_has_comfy_key_names_mapping_to_transformer_modules(
        tiny_dir, run_output, pipe):
    src = run_output / "step-2.safetensors"
    ref, _ = read(src)
    out = export_lora(src, "comfyui", transformer_config=tiny_dir)
    assert out == run_output / "export" / "step-2.comfyui.safetensors"
    tensors, meta = read(out)

    modules = sorted({k.split(".lora_")[0] for k in ref})
    expected_keys = {f"diffusion_model.{m}.{s}" for m in modules
                     for s in ("lora_down.weight", "lora_up.weight", "alpha")}
    assert set(tensors) == expected_keys
    linear = transformer_linear_shapes(read_transformer_config(tiny_dir))
    assert set(modules) <= set(linear)
    assert "transformer_blocks.1.attn.to_out.0" in modules and "transformer_blocks.0.img_mod.1" in modules
    for m in modules:
        assert torch.equal(tensors[f"diffusion_model.{m}.lora_down.weight"],
                           ref[f"{m}.lora_A.default.weight"])
        assert torch.equal(tensors[f"diffusion_model.{m}.lora_up.weight"],
                           ref[f"{m}.lora_B.default.weight"])
        assert tensors[f"diffusion_model.{m}.alpha"].item() == RANK
    assert meta["zerolora_format"] == "comfyui" and meta["alpha"] == str(RANK)

    # An independent reader: diffusers' own converter of diffusion_model./lora_down/alpha
    # files gives the same transformer as the diffusers export.
    pipe.load_lora_weights(str(out), adapter_name="comfy")
    try:
        comfy_out = forward(pipe.transformer)
    finally:
        pipe.delete_adapters("comfy")
    torch.testing.assert_close(comfy_out, forward(peft_transformer(tiny_dir, seed=1)),
                               rtol=1e-4, atol=1e-5)


def test_reference_export_round_trips_through_every_format(tiny_dir, run_output, tmp_path):
    src = run_output / "step-2.safetensors"
    original, meta = read(src)
    for fmt in ("reference", "diffusers", "comfyui"):
        mid = export_lora(src, fmt, out_dir=tmp_path / fmt, transformer_config=tiny_dir)
        back = export_lora(mid, "reference", out_dir=tmp_path / f"{fmt}-back",
                           transformer_config=tiny_dir)
        assert back.name == "step-2.reference.safetensors"
        tensors, back_meta = read(back)
        assert tensors.keys() == original.keys()
        for k, v in original.items():
            assert torch.equal(tensors[k], v), (fmt, k)
        assert {k: back_meta[k] for k in meta} == meta  # metadata kept


def test_export_refuses_keys_the_transformer_does_not_have(tiny_dir, tmp_path):
    good = make_reference_lora(tiny_dir, tmp_path / "ok.safetensors", seed=3)
    a, b = good["transformer_blocks.0.attn.to_q.lora_A.default.weight"], \
        good["transformer_blocks.0.attn.to_q.lora_B.default.weight"]

    # A block the tiny model lacks (it has 2): caught against the model's own config.
    bad = dict(good)
    bad["transformer_blocks.7.attn.to_q.lora_A.default.weight"] = a.clone()
    bad["transformer_blocks.7.attn.to_q.lora_B.default.weight"] = b.clone()
    save_file(bad, str(tmp_path / "extra-block.safetensors"))
    with pytest.raises(LoraFormatError, match=r"transformer_blocks\.7\.attn\.to_q"):
        export_lora(tmp_path / "extra-block.safetensors", "diffusers",
                    transformer_config=tiny_dir)

    # A misspelt module: caught even against the stock Qwen-Image module names.
    typo = {k.replace("attn.to_q.", "attn.to_qq."): v for k, v in good.items()}
    save_file(typo, str(tmp_path / "typo.safetensors"))
    with pytest.raises(LoraFormatError, match=r"to_qq"):
        export_lora(tmp_path / "typo.safetensors", "comfyui")

    # Wrong sizes for the module.
    wide = dict(good)
    wide["transformer_blocks.0.attn.to_q.lora_A.default.weight"] = torch.zeros(RANK, 5)
    save_file(wide, str(tmp_path / "wide.safetensors"))
    with pytest.raises(LoraFormatError, match=r"5 -> 32 features, the module maps 32 -> 32"):
        export_lora(tmp_path / "wide.safetensors", "reference", transformer_config=tiny_dir)

    # The run's own model, found through training_args.json beside the checkpoint.
    (tmp_path / "training_args.json").write_text(json.dumps(
        {"resolved_components": {"transformer": str(tiny_dir / "transformer")}}))
    with pytest.raises(LoraFormatError, match=r"transformer_blocks\.7\.attn\.to_q"):
        export_lora(tmp_path / "extra-block.safetensors", "diffusers")
    (tmp_path / "training_args.json").unlink()
    # Without it only names are checked: block 7 exists in the 60-block Qwen-Image.
    out = export_lora(tmp_path / "extra-block.safetensors", "diffusers", out_dir=tmp_path / "x")
    assert read(out)[1]["zerolora_verified_against"] == "the published qwen_image module names"

    # Not LoRA keys at all.
    save_file({"transformer_blocks.0.attn.to_q.weight": a}, str(tmp_path / "full.safetensors"))
    with pytest.raises(LoraFormatError, match="not a LoRA key"):
        export_lora(tmp_path / "full.safetensors", "diffusers")
    assert not (tmp_path / "export").exists()  # nothing written by a refused export


def test_alpha_other_than_rank_is_folded_into_lora_b(tiny_dir, tmp_path, pipe):
    sd = make_reference_lora(tiny_dir, tmp_path / "ref.safetensors", seed=4)
    comfy = {}
    for k, v in sd.items():
        module, rest = k.split(".lora_")
        kind = "lora_down" if rest.startswith("A") else "lora_up"
        comfy[f"diffusion_model.{module}.{kind}.weight"] = v
        comfy[f"diffusion_model.{module}.alpha"] = torch.tensor(float(RANK) / 2)
    save_file(comfy, str(tmp_path / "half.safetensors"))
    out = export_lora(tmp_path / "half.safetensors", "diffusers", transformer_config=tiny_dir)
    tensors, _ = read(out)
    key = "transformer_blocks.0.attn.to_q"
    torch.testing.assert_close(tensors[f"transformer.{key}.lora_B.weight"],
                               sd[f"{key}.lora_B.default.weight"] * 0.5)
    torch.testing.assert_close(tensors[f"transformer.{key}.lora_A.weight"],
                               sd[f"{key}.lora_A.default.weight"])
    outputs = []
    for name, path in (("a", tmp_path / "half.safetensors"), ("b", out)):
        pipe.load_lora_weights(str(path), adapter_name=name)
        outputs.append(forward(pipe.transformer))
        pipe.delete_adapters(name)
    torch.testing.assert_close(outputs[0], outputs[1], rtol=1e-4, atol=1e-5)


def test_split_modules_reads_all_three_formats_alike(tiny_dir, run_output):
    src = run_output / "step-2.safetensors"
    tensors, meta = load_lora_file(src)
    ref = split_modules(tensors, meta)
    for fmt in ("diffusers", "comfyui"):
        out = export_lora(src, fmt, transformer_config=tiny_dir)
        other = split_modules(*load_lora_file(out))
        assert other.keys() == ref.keys()
        for m, (a, b, _) in ref.items():
            assert torch.equal(other[m][0], a) and torch.equal(other[m][1], b)


@pytest.mark.slow  # a process of its own that loads the model libraries
def test_export_cli(tiny_dir, run_output, tmp_path):
    src = run_output / "step-2.safetensors"
    res = subprocess.run([sys.executable, "-m", "backend.models.export", str(src), "--format",
                          "comfyui", "--out_dir", str(tmp_path), "--model", str(tiny_dir)],
                         cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr
    out = Path(res.stdout.strip().splitlines()[-1])
    assert out == tmp_path / "step-2.comfyui.safetensors" and out.is_file()
    tensors, _ = read(out)
    assert all(k.startswith("diffusion_model.") for k in tensors)

    res = subprocess.run([sys.executable, "-m", "backend.models.export", str(tmp_path / "nope.safetensors"),
                          "--format", "diffusers"], cwd=ROOT, capture_output=True, text=True,
                         timeout=300)
    assert res.returncode == 1 and "nope.safetensors" in res.stderr
    res = subprocess.run([sys.executable, "-m", "backend.models.export", str(src), "--format", "kohya"],
                         cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert res.returncode == 2 and "invalid choice: 'kohya'" in res.stderr
