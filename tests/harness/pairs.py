"""Edit-pair datasets: target images with one or two input images and an instruction."""
from __future__ import annotations

import json
from pathlib import Path


SIZE = 64


# (target, inputs, instruction): the target is the inputs' shape recoloured.
ROWS = [
    ("t_red.png", ["i_red.png"], "make the circle blue"),
    ("t_green.png", ["i_green.png"], "make the square yellow"),
    ("t_blue.png", ["i_blue.png", "i_red.png"], "put the circle of picture 2 in picture 1"),
]


def _draw(path: Path, colour, shape: str, size: int = SIZE) -> None:
    from PIL import Image, ImageDraw

    im = Image.new("RGB", (size, size), (255, 255, 255))
    d = ImageDraw.Draw(im)
    box = (size // 4, size // 4, 3 * size // 4, 3 * size // 4)
    (d.ellipse if shape == "circle" else d.rectangle)(box, fill=colour)
    im.save(path)


def make_edit_dataset(folder: Path) -> Path:
    """Three pair rows (two with one input image, one with two) in metadata.json."""
    folder.mkdir(parents=True, exist_ok=True)
    _draw(folder / "i_red.png", (220, 30, 30), "circle")
    _draw(folder / "i_green.png", (30, 200, 60), "square")
    _draw(folder / "i_blue.png", (30, 60, 220), "square")
    _draw(folder / "t_red.png", (30, 60, 220), "circle")
    _draw(folder / "t_green.png", (230, 210, 40), "square")
    _draw(folder / "t_blue.png", (220, 30, 30), "circle")
    rows = [{"image": t, "edit_image": i if len(i) > 1 else i[0], "prompt": p}
            for t, i, p in ROWS]
    (folder / "metadata.json").write_text(json.dumps(rows, indent=1), encoding="utf-8")
    return folder
