"""Dataset reading, checking and resizing (backend/data/dataset.py)."""
from __future__ import annotations

import json

import pytest
from PIL import Image

from backend.config.schema import RunConfig
from backend.data.dataset import (DatasetError, check_dataset, load_pixels, target_size,
                          validate_dataset)


def cfg(**kw) -> RunConfig:
    return RunConfig(**kw)


def save(path, size=(64, 64), colour=(255, 0, 0)):
    Image.new("RGB", size, colour).save(path)
    return path


# ------------------------------------------------------------------------------------------
# Sizes
# ------------------------------------------------------------------------------------------
def test_target_size_rules():
    # Fixed size wins, whatever the image.
    assert target_size(1000, 500, cfg(height=256, width=512)) == (512, 256)
    assert target_size(20, 20, cfg(height=64, width=64)) == (64, 64)
    # Dynamic, under the cap: floor to multiples of 16, never upscale.
    assert target_size(100, 50, cfg()) == (96, 48)
    assert target_size(64, 64, cfg()) == (64, 64)
    # Dynamic, over the cap: scale by sqrt(max_pixels / area), truncate, floor to 16.
    w, h = target_size(2048, 1024, cfg(max_pixels=65536))
    assert (w, h) == (352, 176) and w * h <= 65536
    w, h = target_size(1328, 1328, cfg())
    assert (w, h) == (1024, 1024)


def test_load_pixels_cover_crop_and_range(tmp_path):
    im = Image.new("RGB", (100, 50), (255, 0, 0))
    im.paste((0, 0, 255), (50, 0, 100, 50))  # right half blue
    im.save(tmp_path / "a.png")
    x = load_pixels(tmp_path / "a.png", cfg(height=32, width=32))
    assert tuple(x.shape) == (1, 3, 32, 32)
    assert float(x.min()) >= -1.0 and float(x.max()) <= 1.0
    # Scaled to cover (64x32), centre-cropped: left half red, right half blue.
    assert float(x[0, 0, 16, 4]) > 0.9 and float(x[0, 2, 16, 4]) < -0.9
    assert float(x[0, 2, 16, 28]) > 0.9 and float(x[0, 0, 16, 28]) < -0.9
    y = load_pixels(tmp_path / "a.png", cfg())
    assert tuple(y.shape) == (1, 3, 48, 96)  # dynamic: floored to 16, not upscaled


# ------------------------------------------------------------------------------------------
# Reading
# ------------------------------------------------------------------------------------------
def test_metadata_csv_json_jsonl_and_trigger(tmp_path):
    save(tmp_path / "a.png")
    save(tmp_path / "b.png")
    (tmp_path / "m.csv").write_text("image,prompt,extra\na.png,a cat,x\nb.png,a dog,y\n")
    recs = check_dataset(cfg(dataset_base_path=str(tmp_path),
                             dataset_metadata_path=str(tmp_path / "m.csv"),
                             trigger_word="zlr style"))
    assert [r.prompt for r in recs] == ["zlr style, a cat", "zlr style, a dog"]
    assert recs[0].image == (tmp_path / "a.png").resolve()

    (tmp_path / "m.json").write_text(json.dumps([{"image": ["a.png"], "prompt": "x"}]))
    assert check_dataset(cfg(dataset_base_path=str(tmp_path),
                             dataset_metadata_path=str(tmp_path / "m.json")))[0].prompt == "x"
    (tmp_path / "m.jsonl").write_text('{"image": "b.png", "prompt": "y"}\n\n')
    assert check_dataset(cfg(dataset_base_path=str(tmp_path),
                             dataset_metadata_path=str(tmp_path / "m.jsonl")))[0].prompt == "y"


def test_folder_with_txt_captions(tmp_path):
    save(tmp_path / "b.png")
    save(tmp_path / "a.jpg")
    (tmp_path / "a.txt").write_text("first\n")
    (tmp_path / "b.txt").write_text("second")
    recs = check_dataset(cfg(dataset_base_path=str(tmp_path), trigger_word="tok"))
    assert [(r.image.name, r.prompt) for r in recs] == [("a.jpg", "tok, first"),
                                                        ("b.png", "tok, second")]


def test_every_problem_named_by_file_and_row(tmp_path):
    save(tmp_path / "ok.png")
    (tmp_path / "broken.png").write_bytes(b"not an image at all")
    (tmp_path / "m.csv").write_text(
        "image,prompt\nok.png,fine\nmissing.png,a cat\nbroken.png,a dog\nok.png,\n")
    c = cfg(dataset_base_path=str(tmp_path), dataset_metadata_path=str(tmp_path / "m.csv"))
    with pytest.raises(DatasetError) as e:
        check_dataset(c)
    msg = str(e.value)
    assert "m.csv row 2" in msg and "missing.png" in msg
    assert "m.csv row 3" in msg and "cannot read image broken.png" in msg
    assert "m.csv row 4" in msg and "empty caption" in msg
    assert "row 1" not in msg
    assert len(e.value.problems) == 3

    found = validate_dataset(c)
    assert [f["level"] for f in found] == ["ok", "error", "error", "error"]
    assert found[0]["original_size"] == [64, 64] and found[0]["size"] == [64, 64]
    assert found[0]["caption"] == "fine" and found[1]["row"] == 2


def test_structural_problems(tmp_path):
    (tmp_path / "m.csv").write_text("file,text\na.png,x\n")
    with pytest.raises(DatasetError, match="missing column 'image'"):
        check_dataset(cfg(dataset_base_path=str(tmp_path),
                          dataset_metadata_path=str(tmp_path / "m.csv")))
    save(tmp_path / "lonely.png")
    with pytest.raises(DatasetError, match="lonely.png: caption file lonely.txt not found"):
        check_dataset(cfg(dataset_base_path=str(tmp_path)))
    with pytest.raises(DatasetError, match="dataset_base_path: folder not found"):
        check_dataset(cfg(dataset_base_path=str(tmp_path / "nope")))
    (tmp_path / "m.jsonl").write_text('{"image": "lonely.png"}\n')
    with pytest.raises(DatasetError, match="m.jsonl row 1: missing prompt"):
        check_dataset(cfg(dataset_base_path=str(tmp_path),
                          dataset_metadata_path=str(tmp_path / "m.jsonl")))


# ------------------------------------------------------------------------------------------
# Image modes, orientation, transparency, upscaling (issue 21)
# ------------------------------------------------------------------------------------------
def test_16bit_png_is_scaled_not_clipped(tmp_path):
    import numpy as np

    # Mid grey at 16 bits (32768 of 65535): clipping to 8 bits made it white.
    Image.fromarray(np.full((32, 32), 32768, dtype=np.uint16)).save(tmp_path / "g16.png")
    assert Image.open(tmp_path / "g16.png").mode.startswith("I")
    x = load_pixels(tmp_path / "g16.png", cfg())
    assert tuple(x.shape) == (1, 3, 32, 32)
    assert abs(float(x.mean())) < 0.02  # 32768/65535 -> 127.5/255 -> 0 in [-1, 1]


def test_exif_orientation_is_applied(tmp_path):
    # Stored 64 wide x 32 high, left half red; orientation 6 says "rotate 90° clockwise to
    # view": upright it is 32 wide x 64 high with red on top.
    im = Image.new("RGB", (64, 32), (0, 0, 255))
    im.paste((255, 0, 0), (0, 0, 32, 32))
    exif = Image.Exif()
    exif[0x0112] = 6
    im.save(tmp_path / "phone.jpg", exif=exif, quality=95)
    x = load_pixels(tmp_path / "phone.jpg", cfg())
    assert tuple(x.shape) == (1, 3, 64, 32)
    assert float(x[0, 0, 8, 16]) > 0.8 and float(x[0, 2, 8, 16]) < -0.8  # top: red
    assert float(x[0, 2, 56, 16]) > 0.8 and float(x[0, 0, 56, 16]) < -0.8  # bottom: blue


def test_rgba_is_composited_on_white_and_said(tmp_path):
    im = Image.new("RGBA", (32, 32), (0, 0, 0, 0))  # fully transparent black
    im.paste((255, 0, 0, 255), (0, 0, 16, 32))    # opaque red left half
    im.save(tmp_path / "logo.png")
    x = load_pixels(tmp_path / "logo.png", cfg())
    assert float(x[0, :, 16, 24].min()) > 0.99  # transparent -> white, not black
    assert float(x[0, 0, 16, 4]) > 0.99 and float(x[0, 1, 16, 4]) < -0.99
    (tmp_path / "logo.txt").write_text("a logo")
    found = validate_dataset(cfg(dataset_base_path=str(tmp_path)))
    assert found[0]["level"] == "warning"
    assert "logo.png" in found[0]["message"] and "composited on white" in found[0]["message"]


def test_tiny_image_upscale_is_warned_in_check_and_stage_log(tmp_path):
    save(tmp_path / "tiny.png", size=(20, 20))
    save(tmp_path / "big.png", size=(64, 64))
    (tmp_path / "m.csv").write_text("image,prompt\nbig.png,big\ntiny.png,tiny\n")
    c = cfg(dataset_base_path=str(tmp_path), dataset_metadata_path=str(tmp_path / "m.csv"),
            height=64, width=64)
    found = validate_dataset(c)
    assert [f["level"] for f in found] == ["ok", "warning"]
    assert found[1]["message"].startswith("m.csv row 2 (tiny.png): upscaled")
    assert "20x20" in found[1]["message"] and "64x64" in found[1]["message"]
    lines: list[str] = []
    assert len(check_dataset(c, lines.append)) == 2  # a warning, not a refusal
    assert lines == [f"[data] warning: {found[1]['message']}"]
