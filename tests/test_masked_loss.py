"""Masked loss (``masked_loss``): masks read and checked per row, cached at the latent grid by
stage 1, and one weighting (``backend.families.common.weighted_mse``) in every family's loss:
a masked-out latent cell gives its prediction no gradient, and a mask of ones gives exactly
the unmasked loss (one step and a whole run)."""
from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from PIL import Image

from backend.config.schema import RunConfig
from backend.data.dataset import DatasetError
from tests.harness.masks import masked_dataset
from tests.harness.stages import (assert_ok, check_progress, make_dataset, run_stage,
                                  train_args)


# ------------------------------------------------------------------------------------------
# The loss: a half-zero mask cuts the gradient of the masked tokens' predictions
# ------------------------------------------------------------------------------------------
class Capture(torch.nn.Module):
    """A transformer whose output keeps its gradient (``out.grad`` after backward)."""

    def __init__(self, inner):
        super().__init__()
        self.inner, self.out = inner, None

    @property
    def config(self):
        return self.inner.config

    def forward(self, *args, **kwargs):
        result = self.inner(*args, **kwargs)
        result[0].retain_grad()
        self.out = result[0]
        return result


def half_mask(shape) -> torch.Tensor:
    """[1, *shape] (latent grid, a clip's [F, h, w]): 0 over the left half, 1 elsewhere."""
    m = torch.ones((1, *shape))
    m[..., : shape[-1] // 2] = 0
    return m


def qwen_image_case():
    from diffusers import QwenImageTransformer2DModel

    from backend.families.qwen_image.adapter import Adapter
    from backend.families.qwen_image.tiny import TRANSFORMER_CONFIG

    torch.manual_seed(0)
    model = QwenImageTransformer2DModel(**TRANSFORMER_CONFIG)
    c = TRANSFORMER_CONFIG["in_channels"] // 4
    sample = {"latents": torch.randn(1, c, 8, 8),
              "prompt_emb": torch.randn(1, 5, TRANSFORMER_CONFIG["joint_attention_dim"]),
              "prompt_emb_mask": torch.ones(1, 5, dtype=torch.long)}

    def masked_tokens(out):  # [1, 16, 4C]: 2x2 patches over a 4x4 grid, row-major
        return out.view(1, 4, 4, -1)[:, :, :2], out.view(1, 4, 4, -1)[:, :, 2:]
    return Adapter(), model, sample, (8, 8), masked_tokens


def flux2_klein_case():
    from diffusers import Flux2Transformer2DModel

    from backend.families.flux2 import TINY_TRANSFORMER
    from backend.families.flux2_klein.adapter import Adapter

    torch.manual_seed(0)
    model = Flux2Transformer2DModel(**TINY_TRANSFORMER, guidance_embeds=False)
    sample = {"latents": torch.randn(1, TINY_TRANSFORMER["in_channels"], 4, 4),
              "prompt_emb": torch.randn(1, 5, TINY_TRANSFORMER["joint_attention_dim"])}

    def masked_tokens(out):  # [1, 16, C]: one token per latent cell, row-major
        return out.view(1, 4, 4, -1)[:, :, :2], out.view(1, 4, 4, -1)[:, :, 2:]
    return Adapter(), model, sample, (4, 4), masked_tokens


def wan_case():
    from backend.families.wan.adapter import Adapter
    from backend.families.wan.tiny import TRANSFORMER_CONFIG, build_transformer

    model = build_transformer(0)
    sample = {"latents": torch.randn(1, TRANSFORMER_CONFIG["in_channels"], 2, 4, 4),
              "prompt_emb": torch.randn(1, 5, TRANSFORMER_CONFIG["text_dim"])}

    def masked_tokens(out):  # latent-shaped [1, C, F, h, w]
        return out[..., :2], out[..., 2:]
    return Adapter(), model, sample, (2, 4, 4), masked_tokens


CASES = {"qwen_image": qwen_image_case, "flux2_klein": flux2_klein_case, "wan": wan_case}


@pytest.mark.parametrize("family", sorted(CASES))
def test_half_zero_mask_gives_the_masked_predictions_no_gradient(family):
    adapter, model, sample, grid, masked_tokens = CASES[family]()
    schedule = adapter.training_schedule()
    model = Capture(model.float())
    noise = torch.randn(sample["latents"].shape, generator=torch.Generator().manual_seed(1))
    index = 400
    loss = adapter.loss_at(model, {**sample, "loss_mask": half_mask(grid)}, schedule, index,
                           noise, torch.float32)
    loss.backward()
    off, on = masked_tokens(model.out.grad)
    assert off.abs().max() == 0, "a cell of weight 0 gave its prediction a gradient"
    assert (on.abs().amax(dim=-1) > 0).all(), "a cell of weight 1 has no gradient"

    # A mask of ones: exactly the unmasked loss (value and gradient).
    plain = adapter.loss_at(model, sample, schedule, index, noise, torch.float32)
    plain.backward()
    g_plain = model.out.grad.clone()
    ones = adapter.loss_at(model, {**sample, "loss_mask": torch.ones((1, *grid))}, schedule,
                           index, noise, torch.float32)
    ones.backward()
    assert ones.item() == plain.item() != loss.item()
    assert torch.equal(model.out.grad, g_plain)


def test_weighted_mse_weights_and_normalises_as_documented():
    from backend.families.common import weighted_mse

    latents = torch.zeros(1, 2, 2, 2)
    pred, target = torch.ones(1, 2, 2, 2), torch.zeros(1, 2, 2, 2)
    sample = {"loss_mask": torch.tensor([[[1.0, 0.5], [0.0, 0.0]]])}
    # mean(w * err) over every element: (1 + 0.5) * 2 channels / 8 elements
    assert float(weighted_mse(pred, target, sample, latents)) == pytest.approx(3 / 8)
    assert float(weighted_mse(pred, target, {}, latents)) == 1.0
    # A weighted mean of a sliced (non-contiguous) prediction is the same mean.
    wide = torch.ones(1, 2, 2, 4)[..., :2]
    assert float(weighted_mse(wide, target, sample, latents)) == pytest.approx(3 / 8)


def test_latent_mask_is_the_area_average_and_groups_frames_as_the_vae():
    from backend.data.masks import latent_mask

    mask = torch.zeros(1, 16, 16)
    mask[:, :, :4] = 1  # the left quarter
    out = latent_mask(mask, torch.zeros(1, 4, 2, 2))
    assert out.shape == (1, 2, 2)
    assert torch.allclose(out, torch.tensor([[[0.5, 0.0], [0.5, 0.0]]]))
    # A clip of 9 frames: latent frames hold frame 0, then 1-4 and 5-8.
    clip = torch.zeros(1, 9, 8, 8)
    clip[:, 0] = 1.0
    clip[:, 1:3] = 1.0
    got = latent_mask(clip, torch.zeros(1, 4, 3, 1, 1))
    assert got.flatten().tolist() == [1.0, 0.5, 0.0]
    # One mask over the whole clip, and none (weight 1).
    assert latent_mask(torch.ones(1, 8, 8) * 0.25, torch.zeros(1, 4, 3, 1, 1)).flatten(
        ).tolist() == [0.25] * 3
    assert torch.equal(latent_mask(None, torch.zeros(1, 4, 3, 2, 2)), torch.ones(1, 3, 2, 2))


# ------------------------------------------------------------------------------------------
# Reading and checking masks
# ------------------------------------------------------------------------------------------
def cfg_for(data, **kw) -> RunConfig:
    return RunConfig(dataset_base_path=str(data),
                     dataset_metadata_path=str(data / "metadata.csv"), masked_loss=True,
                     **kw)


def test_each_source_gives_the_mask_resized_as_its_image(tmp_path):
    from backend.data.masks import load_image_mask
    from backend.data.video import check_stage_dataset
    from backend.families import get_family

    data = masked_dataset(tmp_path / "d")
    cfg = cfg_for(data, mask_path=str(data / "masks"), alpha_mask=True, height=32, width=32)
    records = check_stage_dataset(cfg, get_family("qwen_image"))
    assert [str(r.mask).rsplit("/", 1)[-1] for r in records] == ["a.png", "b_mask.png", "alpha"]
    for rec in records:
        m = load_image_mask(rec, cfg)
        assert m.shape == (1, 32, 32)
        assert m[0, :, :15].max() == 0 and m[0, :, 17:].min() == 1


def test_the_dataset_tab_shows_each_mask_over_its_image(tmp_path):
    """The check's previews: each image at its training size, its weight-1 half as it is,
    its weight-0 half tinted; one per image that has a mask, named by its file."""
    from backend.data.masks import MASKED_BLEND, MASKED_TINT
    from backend.data.video import mask_findings

    data = masked_dataset(tmp_path / "d")
    cfg = cfg_for(data, mask_path=str(data / "masks"), alpha_mask=True, height=32, width=32)
    findings, _, shown = mask_findings(cfg, previews=24)
    assert findings == [] and [name for _, name in shown] == ["a.png", "b.png", "c.png"]
    for (im, name), colour in zip(shown, ((200, 30, 30), (200, 30, 30), (255, 255, 255))):
        arr = np.asarray(im).astype(int)
        assert im.size == (32, 32)
        # c.png: its transparent pixels composited on white, as training reads them
        right = colour if name != "c.png" else (0, 200, 0)
        assert (arr[:, 17:] == right).all(), name
        tinted = [round(c + (t - c) * MASKED_BLEND) for c, t in zip(colour, MASKED_TINT)]
        assert np.abs(arr[:, :15] - tinted).max() <= 1, name
    # only as many as asked; none while a mask has a problem
    assert len(mask_findings(cfg, previews=2)[2]) == 2
    Image.new("L", (48, 64), 255).save(data / "masks" / "a.png")
    findings, _, shown = mask_findings(cfg, previews=24)
    assert findings and shown == []


def test_refusals_name_the_row_and_the_field(tmp_path):
    from backend.data.video import check_stage_dataset, mask_findings
    from backend.families import get_family

    family = get_family("qwen_image")
    data = masked_dataset(tmp_path / "d")
    Image.new("L", (48, 64), 255).save(data / "masks" / "a.png")  # another size
    (data / "metadata.csv").write_text(
        "image,prompt,mask\na.png,a red square,\nb.png,a red square,gone.png\n"
        "c.png,a green square,\n", encoding="utf-8")
    cfg = cfg_for(data, mask_path=str(data / "masks"), mask_missing="refuse")
    with pytest.raises(DatasetError) as e:
        check_stage_dataset(cfg, family)
    text = "\n".join(map(str, e.value.problems))
    assert "metadata.csv row 1: mask: a.png is 48x64, its image is 64x64" in text
    assert "metadata.csv row 2: mask: no mask for b.png (got 'gone.png'" in text
    assert "metadata.csv row 3: mask: no mask for c.png (got none" in text
    assert "mask_missing: refuse" in text
    # weight_one: only the broken cell and the size are refused; the Dataset tab counts.
    cfg = cfg_for(data, mask_path=str(data / "masks"))
    with pytest.raises(DatasetError) as e:
        check_stage_dataset(cfg, family)
    assert len(e.value.problems) == 1 and "row 1" in str(e.value.problems[0])
    Image.new("L", (64, 64), 255).save(data / "masks" / "a.png")
    findings, count, _ = mask_findings(cfg)
    assert [f["level"] for f in findings] == ["warning"]  # the cell naming no file
    assert count == "2 of 3 item(s) without a mask (weight_one)."
    assert "没有遮罩" in count.text("zh")
    # No source at all: the metadata has no mask column.
    (data / "metadata.csv").write_text("image,prompt\na.png,a red square\n", encoding="utf-8")
    with pytest.raises(DatasetError, match="masked_loss: no source of masks"):
        check_stage_dataset(cfg_for(data), family)


def test_mask_options_are_refused_by_field_before_any_stage():
    from backend.config.errors import ConfigError
    from backend.config.validation import validate

    with pytest.raises(ConfigError) as e:
        validate({"alpha_mask": True}, require_inputs=False)
    assert "alpha_mask: a mask option without the masked loss" in str(e.value)
    with pytest.raises(ConfigError) as e:
        validate({"masked_loss": True}, require_inputs=False)
    assert "masked_loss: no source of masks" in str(e.value)
    validate({"masked_loss": True, "task": "sft:train"}, require_inputs=False)


# ------------------------------------------------------------------------------------------
# Stage 1 caches loss_mask at the latent grid
# ------------------------------------------------------------------------------------------
@pytest.mark.timeout(600)
def test_stage1_caches_loss_mask_from_folder_column_and_alpha(tmp_path, models_root,
                                                              plain_accelerate_config):
    from backend.data.cache import load_sample, read_manifest

    data = masked_dataset(tmp_path / "d")
    out = tmp_path / "cache"
    args = ["--task", "sft:data_process", "--models_dir", models_root, "--offline",
            "--dataset_base_path", data, "--dataset_metadata_path", data / "metadata.csv",
            "--height", "32", "--width", "32"]
    proc = run_stage(args + ["--output_path", out, "--masked_loss", "--mask_path",
                             data / "masks", "--alpha_mask"], config_file=plain_accelerate_config)
    assert_ok(proc)
    entries = read_manifest(out)["samples"]
    assert len(entries) == 3 and all(e["masked"] for e in entries)
    want = torch.tensor([[0.0, 0.0, 1.0, 1.0]] * 4)
    for e in entries:
        s = load_sample(out / e["file"])
        assert s["loss_mask"].shape == (1, *s["latents"].shape[-2:]) == (1, 4, 4), e["image"]
        # the mask resized as the image (bilinear, 64 -> 32), then averaged per cell
        assert torch.allclose(s["loss_mask"][0], want, atol=0.02), e["image"]
    # The same data without masks is another cache (other keys).
    plain = tmp_path / "plain"
    proc = run_stage(args + ["--output_path", plain], config_file=plain_accelerate_config)
    assert_ok(proc)
    assert not {e["file"] for e in entries} & {e["file"] for e in
                                              read_manifest(plain)["samples"]}
    assert "loss_mask" not in load_sample(next(iter(plain.glob("*.safetensors"))))


# ------------------------------------------------------------------------------------------
# A mask of ones trains exactly as no mask, step for step
# ------------------------------------------------------------------------------------------
@pytest.mark.slow
@pytest.mark.timeout(600)
def test_all_ones_masks_train_as_an_unmasked_run(tmp_path, models_root, stage1_cache,
                                                 plain_accelerate_config):
    data = make_dataset(tmp_path / "images")
    (data / "masks").mkdir()
    for p in data.glob("*.png"):
        Image.new("L", (64, 64), 255).save(data / "masks" / p.name)
    masked_cache = tmp_path / "masked_cache"
    proc = run_stage(["--task", "sft:data_process", "--models_dir", models_root, "--offline",
                      "--dataset_base_path", data, "--dataset_metadata_path",
                      data / "metadata.csv", "--output_path", masked_cache, "--masked_loss",
                      "--mask_path", data / "masks"], config_file=plain_accelerate_config)
    assert_ok(proc)
    losses = {}
    for name, cache, extra in (("plain", stage1_cache, []),
                               ("masked", masked_cache, ["--masked_loss"])):
        out = tmp_path / name
        proc = run_stage(train_args(models_root, cache, out, "--num_epochs", "1",
                                    "--max_steps", "4", *extra),
                         config_file=plain_accelerate_config)
        assert_ok(proc)
        losses[name] = [e["loss"] for e in check_progress(out, total=4) if e["event"] == "step"]
        assert json.loads((out / "training_args.json").read_text())["masked_loss"] == bool(extra)
    assert losses["masked"] == losses["plain"]
