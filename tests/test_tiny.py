"""The tiny Qwen-Image builder and the committed CPU demo model (backend/assets)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import load_file

from backend.families.qwen_image.tiny import PROMPT_TEMPLATE, PROMPT_TEMPLATE_DROP, build_tiny_qwen_image

WEIGHTS = {
    "transformer": "transformer/diffusion_pytorch_model.safetensors",
    "vae": "vae/diffusion_pytorch_model.safetensors",
    "text_encoder": "text_encoder/model.safetensors",
}


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    root = tmp_path_factory.mktemp("tiny")
    return {
        "a": build_tiny_qwen_image(root / "a", seed=0),
        "b": build_tiny_qwen_image(root / "b", seed=0),
        "c": build_tiny_qwen_image(root / "c", seed=1),
    }


def test_hub_layout_safetensors_only(built):
    root = built["a"]
    index = json.loads((root / "model_index.json").read_text())
    assert index["_class_name"] == "QwenImagePipeline"
    for name in ("transformer", "text_encoder", "vae", "tokenizer", "scheduler"):
        assert name in index and (root / name).is_dir()
    for rel in WEIGHTS.values():
        assert (root / rel).is_file()
    assert not [p for p in root.rglob("*") if p.suffix in (".bin", ".pt", ".pth", ".pkl")]
    sched = json.loads((root / "scheduler/scheduler_config.json").read_text())
    assert sched["use_dynamic_shifting"] is True and sched["shift_terminal"] == 0.02


def test_components_load_by_their_own_class(built):
    from diffusers import AutoencoderKLQwenImage, FlowMatchEulerDiscreteScheduler, QwenImageTransformer2DModel
    from transformers import AutoTokenizer, Qwen2_5_VLForConditionalGeneration

    root = built["a"]
    transformer = QwenImageTransformer2DModel.from_pretrained(root, subfolder="transformer")
    assert transformer.config.num_layers == 2 and transformer.config.joint_attention_dim == 32
    vae = AutoencoderKLQwenImage.from_pretrained(root, subfolder="vae")
    assert vae.config.z_dim == 16
    te = Qwen2_5_VLForConditionalGeneration.from_pretrained(root, subfolder="text_encoder")
    assert te.config.text_config.hidden_size == 32
    FlowMatchEulerDiscreteScheduler.from_pretrained(root, subfolder="scheduler")
    tok = AutoTokenizer.from_pretrained(root / "tokenizer")
    # The pipeline drops the template's first 34 tokens: they must be exactly the prefix.
    prefix = PROMPT_TEMPLATE.split("{}")[0]
    assert len(tok(prefix)["input_ids"]) == PROMPT_TEMPLATE_DROP
    ids = tok(PROMPT_TEMPLATE.format("a red circle"))["input_ids"]
    assert tok.decode(ids[PROMPT_TEMPLATE_DROP:]).startswith("a red circle")


def test_pipeline_renders(built):
    from diffusers import QwenImagePipeline

    pipe = QwenImagePipeline.from_pretrained(built["a"])
    out = pipe(
        "a red circle on a white background",
        negative_prompt="",
        true_cfg_scale=3.0,
        height=64,
        width=64,
        num_inference_steps=2,
        generator=torch.Generator().manual_seed(0),
        output_type="np",
    ).images
    assert out.shape == (1, 64, 64, 3)
    assert np.isfinite(out).all()


def test_same_seed_same_weights_other_seed_differs(built):
    for rel in WEIGHTS.values():
        a, b, c = (load_file(built[k] / rel) for k in "abc")
        assert a.keys() == b.keys() == c.keys()
        assert all(torch.equal(a[k], b[k]) for k in a), rel
        assert any(not torch.equal(a[k], c[k]) for k in a), rel


# ----------------------------------------------------------------------------- CPU demo assets

ASSETS = Path(__file__).resolve().parents[1] / "backend" / "assets"
DEMO_MODEL = ASSETS / "tiny-qwen-image"
DEMO_DATASET = ASSETS / "demo_dataset"


@pytest.fixture(scope="module")
def demo_pipe():
    from diffusers import QwenImagePipeline

    pipe = QwenImagePipeline.from_pretrained(DEMO_MODEL)
    pipe.set_progress_bar_config(disable=True)
    return pipe


def test_demo_model_follows_colour_prompts(demo_pipe):
    from backend.families.qwen_image.demo import caption, image_stats, render

    for shape in ("circle", "square"):
        for seed in (0, 1):
            red = image_stats(render(demo_pipe, caption("red", shape), seed))
            blue = image_stats(render(demo_pipe, caption("blue", shape), seed))
            assert red["shape_rgb"] is not None and blue["shape_rgb"] is not None, (shape, seed)
            # Red minus blue channel of the drawn shape: high for "red", low for "blue".
            r_red = red["shape_rgb"][0] - red["shape_rgb"][2]
            r_blue = blue["shape_rgb"][0] - blue["shape_rgb"][2]
            assert r_red - r_blue > 60, (shape, seed, red["shape_rgb"], blue["shape_rgb"])
            # Plain white background, as in its training data.
            assert min(red["background"]) > 180 and min(blue["background"]) > 180


def test_demo_dataset_is_a_style_the_base_model_does_not_draw(demo_pipe):
    import csv

    from PIL import Image

    from backend.families.qwen_image.demo import ZLR_PURPLE, ZLR_TRIGGER, image_stats, render

    rows = list(csv.DictReader(open(DEMO_DATASET / "metadata.csv", newline="")))
    assert list(rows[0]) == ["image", "prompt"] and 6 <= len(rows) <= 8
    purple = np.array(ZLR_PURPLE, dtype=np.float32)
    for row in rows:
        assert ZLR_TRIGGER in row["prompt"]
        img = Image.open(DEMO_DATASET / row["image"])
        assert img.size == (64, 64) and img.mode == "RGB"
        assert np.linalg.norm(np.array(image_stats(np.asarray(img))["background"]) - purple) < 10
    # The base model keeps a white background for the data set's own captions.
    for seed, row in enumerate(rows[:2]):
        bg = np.array(image_stats(render(demo_pipe, row["prompt"], seed))["background"])
        assert np.linalg.norm(bg - purple) > 150, (row["prompt"], bg)


@pytest.mark.slow  # a process of its own that loads the model libraries
def test_demo_build_smoke(tmp_path):
    from backend.families.qwen_image.demo import main

    main(["build", "--out", str(tmp_path), "--vae_steps", "2", "--dit_steps", "2", "--dit_images", "8",
          "--dit_batch", "4", "--verify_seeds", "1"])
    from diffusers import QwenImagePipeline

    QwenImagePipeline.from_pretrained(tmp_path / "tiny-qwen-image")
    report = json.loads((tmp_path / "demo_build.json").read_text())
    assert report["verification"]["renders"] == 12
    assert (tmp_path / "demo_dataset" / "metadata.csv").is_file()
    assert len(list((tmp_path / "demo_dataset").glob("*.png"))) == 8
