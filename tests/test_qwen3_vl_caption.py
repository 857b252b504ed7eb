"""Captioning with the Qwen3-VL text encoder of Krea 2 and Qwen-Image-2.1
(``backend/families/qwen3_vl.py``): the caption stage on each family's tiny build (a real
random-weight Qwen3-VL with a one-layer vision tower) writes a caption per image; the
processor built without torchvision gives the image grid and the number of image tokens
transformers' Qwen3-VL math gives, at the released image settings; and a whole captioning
run imports no torchvision, where transformers' own ``Qwen3VLProcessor`` constructor fails.

Random weights write gibberish (its length limit is the generic caption tests'); the
checks here are on what is written and counted.
"""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from PIL import Image

from tests.harness.families import build_models, cases, run_stage_here

FAMILIES = ("krea2", "qwen_image_21")
TRIGGER = "zlr style"
MAX_LENGTH = 6
# The released Qwen3-VL image settings (``Qwen/Qwen3-VL-*-Instruct``
# preprocessor_config.json), written out here rather than read from the module under test.
MIN_PIXELS, MAX_PIXELS, PATCH, MERGE, TEMPORAL = 65536, 16777216, 16, 2, 2


def case_of(family: str):
    return next(c for c in cases() if c.family == family)


@pytest.fixture(scope="session")
def qwen3_vl_models(tmp_path_factory) -> dict[str, tuple[Path, Path]]:
    """Per family: (models folder holding its tiny pipeline under its default model ids,
    the pipeline folder)."""
    out = {}
    for family in FAMILIES:
        case = case_of(family)
        models = build_models(tmp_path_factory.mktemp(f"models_{family}"), case)
        out[family] = (models, models / case.model_ids[0])
    return out


def make_images(folder: Path, n: int = 3, captions: dict[str, str] | None = None) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for i in range(n):
        Image.new("RGB", (64 + 16 * i, 48), (40 * i, 200 - 30 * i, 90)).save(
            folder / f"img{i}.png")
    for name, text in (captions or {}).items():
        (folder / name).write_text(text + "\n", encoding="utf-8")
    return folder


# ------------------------------------------------------------------------------ the stage
@pytest.mark.parametrize("family", FAMILIES)
def test_the_caption_stage_captions_with_the_familys_own_text_encoder(family, qwen3_vl_models,
                                                                       tmp_path):
    from backend.families import get_family

    assert get_family(family).captioner_components == ("text_encoder", "tokenizer")
    models, _ = qwen3_vl_models[family]
    folder = make_images(tmp_path / "shapes", 3, {"img1.txt": "my own caption"})
    cfg = {"model_family": family, "model_id_with_origin_paths": case_of(family).sources,
           "models_dir": str(models), "offline": True, "dataset_base_path": str(folder),
           "trigger_word": TRIGGER, "caption_max_length": MAX_LENGTH,
           "caption_batch_size": 2, "progress_file": str(tmp_path / "progress.jsonl")}
    run_yaml = tmp_path / "run.yaml"
    run_yaml.write_text(yaml.safe_dump(cfg), encoding="utf-8")
    journal = tmp_path / "journal.txt"
    code, log = run_stage_here("caption", ["--config", str(run_yaml),
                                           "--journal", str(journal)])
    assert code == 0, log[-4000:]
    assert f"captioning with {family}'s own model" in log
    assert sorted(p.name for p in folder.glob("*.txt")) == ["img0.txt", "img1.txt", "img2.txt"]
    assert (folder / "img1.txt").read_text(encoding="utf-8").strip() == "my own caption"
    for name in ("img0.txt", "img2.txt"):
        text = (folder / name).read_text(encoding="utf-8")
        assert text.endswith("\n") and text.count("\n") == 1, text  # one line
        caption = text.strip()
        assert caption.startswith(f"{TRIGGER}, ") and len(caption) > len(TRIGGER) + 2, caption
        assert f"[caption] {Path(name).with_suffix('.png').name}: {caption}" in log
    assert sorted(journal.read_text(encoding="utf-8").split()) == ["img0.png", "img2.png"]
    events = [json.loads(line) for line in
              (tmp_path / "progress.jsonl").read_text(encoding="utf-8").splitlines()]
    assert events[-1]["event"] == "end" and events[-1]["status"] == "succeeded", events[-1]


# -------------------------------------------------------------------------- the processor
@pytest.fixture(scope="module")
def tokenizer_dir(tmp_path_factory) -> Path:
    from backend.families.qwen3_vl import build_tiny_tokenizer

    folder = tmp_path_factory.mktemp("qwen3_vl_tokenizer")
    build_tiny_tokenizer(["a red circle on a white background", "describe the image"]
                         ).save_pretrained(folder)
    return folder


# (width, height) -> the grid at the released settings, worked by hand: 640x480 is a whole
# number of 32-pixel cells; 64x48 is under the minimum area, so it is scaled up to it.
KNOWN = {(640, 480): (1, 30, 40), (64, 48): (1, 14, 20), (1024, 1024): (1, 64, 64)}


@pytest.mark.parametrize("size", [(640, 480), (64, 48), (1024, 1024), (1001, 333),
                                  (250, 4000), (4100, 4100)])
def test_the_processor_counts_image_tokens_as_transformers_qwen3_vl_math(size, tokenizer_dir):
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import smart_resize

    from backend.families.qwen3_vl import load_processor

    processor = load_processor(tokenizer_dir)
    assert type(processor).__mro__[1].__name__ == "Qwen3VLProcessor"
    w, h = size
    rh, rw = smart_resize(h, w, factor=PATCH * MERGE, min_pixels=MIN_PIXELS,
                          max_pixels=MAX_PIXELS)
    grid = (1, rh // PATCH, rw // PATCH)
    if size in KNOWN:
        assert grid == KNOWN[size]
    text = processor.apply_chat_template(
        [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "describe"}]}],
        tokenize=False, add_generation_prompt=True)
    out = processor(text=[text], images=[Image.new("RGB", size, (10, 20, 30))],
                    return_tensors="pt")
    assert tuple(out["image_grid_thw"][0].tolist()) == grid
    assert tuple(out["pixel_values"].shape) == (grid[1] * grid[2], 3 * TEMPORAL * PATCH * PATCH)
    tokens = grid[1] * grid[2] // MERGE ** 2
    pad = processor.tokenizer.convert_tokens_to_ids("<|image_pad|>")
    assert int((out["input_ids"][0] == pad).sum()) == tokens
    # Qwen3VLProcessor's own count for an image of that size.
    assert processor._get_num_multimodal_tokens(image_sizes=[(h, w)]).num_image_tokens == [tokens]


def test_image_settings_beside_the_tokenizer_are_used(tokenizer_dir, tmp_path):
    """A ``processor/`` folder next to the tokenizer's (the Qwen-Image-2.1 layout's, or the
    one a user adds) sets the image settings: here a smaller largest area."""
    from backend.families.qwen3_vl import PROCESSOR_CONFIG, load_processor

    tokenizer = shutil.copytree(tokenizer_dir, tmp_path / "tokenizer")
    (tmp_path / "processor").mkdir()
    config = {**PROCESSOR_CONFIG, "size": {"shortest_edge": MIN_PIXELS, "longest_edge": 262144}}
    (tmp_path / "processor" / "preprocessor_config.json").write_text(json.dumps(config))
    out = load_processor(tokenizer).image_processor(images=[Image.new("RGB", (1024, 1024))],
                                                    return_tensors="pt")
    assert out["image_grid_thw"][0].tolist() == [1, 32, 32]  # 512x512: the largest area


def test_a_text_encoder_without_its_lm_head_is_refused(tmp_path):
    """A ``Qwen3VLModel`` saved untied has no LM head to caption with: refused, by code,
    rather than captioning with a random head."""
    from backend.families.qwen3_vl import (build_tiny_text_encoder, build_tiny_tokenizer,
                                           load_captioning_model)

    tokenizer = build_tiny_tokenizer(["a red circle", "describe the image"])
    build_tiny_text_encoder(tokenizer, 0, model_class="Qwen3VLModel", num_hidden_layers=1,
                            tie_word_embeddings=False).save_pretrained(tmp_path / "untied")
    with pytest.raises(ValueError) as e:
        load_captioning_model(tmp_path / "untied")
    assert e.value.args[0].code == "note.caption_text_encoder_incomplete"
    assert "lm_head.weight" in str(e.value)
    build_tiny_text_encoder(tokenizer, 0, model_class="Qwen3VLModel", num_hidden_layers=1,
                            tie_word_embeddings=True).save_pretrained(tmp_path / "tied")
    model = load_captioning_model(tmp_path / "tied")
    assert model.lm_head.weight is model.model.language_model.embed_tokens.weight


# -------------------------------------------------------------------------- no torchvision
NO_TORCHVISION = """
import json, sys
from PIL import Image
import transformers
from backend.families import get_family
from backend.families.qwen3_vl import load_processor

pipeline, tokenizer = sys.argv[1], sys.argv[2]
captioner = get_family("krea2").load_captioner(
    {"text_encoder": pipeline + "/text_encoder", "tokenizer": pipeline + "/" + tokenizer})
captions = captioner.caption([Image.new("RGB", (64, 48), (200, 30, 30))], "Describe.", 3)
stock = None
if not transformers.utils.is_torchvision_available():
    processor = load_processor(pipeline + "/" + tokenizer)
    try:
        transformers.Qwen3VLProcessor(image_processor=processor.image_processor,
                                      tokenizer=processor.tokenizer)
        stock = "built"
    except Exception as e:
        stock = type(e).__name__
print("RESULT " + json.dumps({"captions": captions, "stock": stock,
                              "torchvision": "torchvision" in sys.modules}))
"""


def test_captioning_imports_no_torchvision(qwen3_vl_models):
    """A captioning run in a fresh process: a caption written, torchvision never imported;
    where torchvision is absent, transformers' own ``Qwen3VLProcessor`` constructor fails
    (which is why the processor is built from its parts)."""
    _, pipeline = qwen3_vl_models["krea2"]
    root = Path(__file__).resolve().parents[1]
    proc = subprocess.run([sys.executable, "-c", NO_TORCHVISION, str(pipeline), "tokenizer"],
                          cwd=root, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-4000:]
    line = next(x for x in proc.stdout.splitlines() if x.startswith("RESULT "))
    result = json.loads(line[len("RESULT "):])
    assert len(result["captions"]) == 1
    assert result["torchvision"] is False
    assert result["stock"] in (None, "AttributeError", "ImportError", "TypeError",
                               "ValueError"), result
