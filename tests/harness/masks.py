"""A small dataset whose images have masks of each kind (a mask folder, a metadata column,
an alpha channel), shared by the masked-loss tests and the Dataset tab's browser test."""
from __future__ import annotations

import numpy as np
from PIL import Image


def masked_dataset(folder):
    """Three 64x64 images: a.png with a mask in masks/, b.png with a mask column, c.png with
    an alpha channel (left half transparent). Masks: left half black."""
    folder.mkdir(parents=True)
    (folder / "masks").mkdir()
    half = np.full((64, 64), 255, np.uint8)
    half[:, :32] = 0
    for name in ("a.png", "b.png"):
        Image.new("RGB", (64, 64), (200, 30, 30)).save(folder / name)
    Image.fromarray(half).save(folder / "masks" / "a.png")
    Image.fromarray(half).save(folder / "b_mask.png")
    rgba = np.zeros((64, 64, 4), np.uint8)
    rgba[..., 1] = 200
    rgba[..., 3] = half
    Image.fromarray(rgba, "RGBA").save(folder / "c.png")
    (folder / "metadata.csv").write_text(
        "image,prompt,mask\na.png,a red square,\nb.png,a red square,b_mask.png\n"
        "c.png,a green square,\n", encoding="utf-8")
    return folder
