"""Stage 1 caches what the fixed image loading gives, and says what it changed (issue 21)."""
from __future__ import annotations

import numpy as np
import pytest
import torch
from PIL import Image

from backend.config.schema import RunConfig
from backend.data.dataset import load_pixels

pytestmark = pytest.mark.slow


def test_stage1_caches_fixed_pixels_and_warns(tmp_path, models_root, plain_accelerate_config,
                                              launch_stage):

    data = tmp_path / "data"
    data.mkdir()
    Image.fromarray(np.full((32, 32), 32768, dtype=np.uint16)).save(data / "grey16.png")
    rgba = Image.new("RGBA", (32, 32), (0, 0, 0, 0))
    rgba.paste((255, 0, 0, 255), (0, 0, 16, 32))
    rgba.save(data / "logo.png")
    Image.new("RGB", (16, 16), (0, 255, 0)).save(data / "tiny.png")
    long_prompt = " ".join(["a green square on a plain field"] * 200) + " TAILWORD"
    (data / "metadata.csv").write_text(
        "image,prompt\ngrey16.png,grey\nlogo.png,a logo\n"
        f"tiny.png,{long_prompt}\n", encoding="utf-8")
    out = tmp_path / "cache"
    args = ["--task", "sft:data_process", "--models_dir", models_root, "--offline",
            "--dataset_base_path", data, "--dataset_metadata_path", data / "metadata.csv",
            "--height", "32", "--width", "32", "--output_path", out]
    proc = launch_stage(args, config_file=plain_accelerate_config)
    log = proc.stdout + proc.stderr
    assert proc.returncode == 0, log[-4000:]
    assert "metadata.csv row 2 (logo.png): transparent pixels composited on white" in log
    assert "metadata.csv row 3 (tiny.png): upscaled 2x (16x16" in log
    assert "metadata.csv row 3: prompt cut at the text encoder's limit of 1024 tokens" in log
    assert "TAILWORD" in log  # the dropped words are shown
    # The cache holds the VAE latents of exactly the pixels the fixed loading gives.
    from backend.data.cache import load_sample
    from backend.families.qwen_image.adapter import Encoder, load_vae

    cfg = RunConfig(height=32, width=32)
    model = models_root / "Qwen" / "Qwen-Image"
    vae = load_vae(model / "vae", torch.float32)
    enc = Encoder.__new__(Encoder)  # only encode_image is needed: no text encoder
    enc.vae, enc.device = vae, torch.device("cpu")
    by_image = {}
    for f in out.glob("*.safetensors"):
        from safetensors import safe_open

        with safe_open(str(f), "pt") as h:
            by_image[h.metadata()["image"]] = load_sample(f)
    assert len(by_image) == 3, sorted(by_image)
    for name in ("grey16.png", "logo.png"):
        key = next(k for k in by_image if k.endswith(name))
        want = enc.encode_image(load_pixels(data / name, cfg))
        white = enc.encode_image(torch.ones(1, 3, 32, 32))
        got = by_image[key]["latents"].float()
        assert torch.allclose(got, want, atol=1e-3), name
        assert not torch.allclose(got, white, atol=1e-2), name  # not clipped to white
