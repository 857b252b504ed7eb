"""Issue 28, inputs that were accepted with a wrong result or refused unclearly, each mended
at its cause and checked here without starting a stage:

- optimizer offload (``enable_optimizer_cpu_offload``) steps adamw only: any other optimizer
  is refused by field (never AdamW trained in its place), and the AdamW it steps takes the
  run's own betas and epsilon;
- a frames folder with a frame of another size, ``lokr_factor: 0`` and an unterminated quote
  in an imported command are refused, each naming what is wrong;
- Wan2.2-TI2V-5B declares its size multiple (32: a 16x VAE and 2x2 patches); the one size
  rule floors to it and the schema refuses a fixed size that is not one, so the size that
  trains is the size stage 1 caches (the tiny TI2V model built by the family's code);
- a caption folder's file that is no image (a text file named .png, an empty .png) is named
  before the job queues, and by the stage if it fails there;
- ``captioner_path`` with an empty glob is refused by field, and the diagnosis of a missing
  captioning model names ``captioner_path``;
- the reference trainer's renamed quantization methods and ``;`` lists are accepted (and
  imported), ``bitsandbytes_fp4`` quantizes, a method we cannot run is refused by field;
- a local Qwen-Image-Edit-2511 folder is recognised as 2511 (its transformer's config), not
  2509; an input image that is a folder is called a folder; a preset name with ``.yaml`` is
  refused at save, and every listed preset name loads.
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from backend.config.errors import ConfigError
from backend.config.validation import validate

EDIT_2509, EDIT_2511 = "Qwen/Qwen-Image-Edit-2509", "Qwen/Qwen-Image-Edit-2511"
TI2V_DIFFUSERS = "Wan-AI/Wan2.2-TI2V-5B-Diffusers"


def _image(path: Path, size=(64, 64), colour=(200, 40, 40)) -> Path:
    from PIL import Image

    path.parent.mkdir(parents=True, exist_ok=True)
    Image.new("RGB", size, colour).save(path)
    return path


def _problems(data: dict) -> list[str]:
    with pytest.raises(ConfigError) as e:
        validate(data, require_inputs=False)
    return e.value.problems


# ------------------------------------------------------------------------------------------
# 4. optimizer offload
# ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("values", [
    {"optimizer": "prodigy", "learning_rate": 1.0},
    {"optimizer": "adafactor"},
    {"customized_optimizer": "prodigyopt.Prodigy"},
])
def test_optimizer_offload_refuses_every_optimizer_but_adamw_by_field(values):
    problems = _problems({**values, "enable_optimizer_cpu_offload": True})
    mine = [p for p in problems if p.startswith("optimizer:")]
    assert len(mine) == 1, problems
    assert "enable_optimizer_cpu_offload" in mine[0] and "allowed adamw" in mine[0], mine
    # Without optimizer offload the same optimizer is fine.
    validate(values, require_inputs=False)


def test_optimizer_offload_steps_adamw_with_the_runs_own_settings():
    import torch

    from backend.training import optimizers
    from backend.config.schema import RunConfig

    cfg = validate({"enable_optimizer_cpu_offload": True, "adam_beta1": 0.8,
                    "adam_beta2": 0.95, "adam_epsilon": 1e-6, "learning_rate": 3e-4},
                   require_inputs=False)
    params = [torch.nn.Parameter(torch.zeros(4, 4))]
    opt = optimizers.make_optimizer(cfg, params, None)
    assert isinstance(opt, torch.optim.AdamW)
    group = opt.param_groups[0]
    assert (group["betas"], group["eps"], group["lr"]) == ((0.8, 0.95), 1e-6, 3e-4)
    assert optimizers.describe(cfg, opt).startswith("optimizer adamw (AdamW)")
    # A config that skipped the schema (a hand-built one) is refused, never run as AdamW.
    unchecked = RunConfig.model_construct(**{**cfg.model_dump(), "optimizer": "prodigy"})
    with pytest.raises(optimizers.OptimizerError, match="enable_optimizer_cpu_offload"):
        optimizers.make_optimizer(unchecked, params, None)


# ------------------------------------------------------------------------------------------
# 5. silently accepted inputs
# ------------------------------------------------------------------------------------------
def test_frames_folder_with_a_frame_of_another_size_is_refused_naming_it(tmp_path):
    from backend.data.dataset import DatasetError
    from backend.data.video import check_video_dataset, read_frames

    data = tmp_path / "clips"
    for i in range(5):
        _image(data / "walk" / f"{i:04d}.png", (80, 64) if i == 3 else (64, 64))
        _image(data / "still" / f"{i:04d}.png", (64, 64))
    (data / "metadata.csv").write_text("video,prompt\nwalk,a walk\nstill,a still\n",
                                       encoding="utf-8")
    cfg = validate({"model_family": "wan", "dataset_base_path": str(data),
                    "dataset_metadata_path": str(data / "metadata.csv"), "num_frames": 5,
                    "max_pixels": 4096})
    with pytest.raises(ValueError) as e:
        read_frames(data / "walk", cfg)
    assert "0003.png is 80x64" in str(e.value) and "0000.png is 64x64" in str(e.value)
    with pytest.raises(DatasetError) as e:
        check_video_dataset(cfg)
    assert len(e.value.problems) == 1, e.value.problems
    assert e.value.problems[0].startswith("metadata.csv row 1:")
    assert "0003.png is 80x64" in e.value.problems[0]
    frames, _ = read_frames(data / "still", cfg)
    assert len(frames) == 5


def test_lokr_factor_zero_is_refused_with_the_allowed_values():
    for value in (0, "0"):
        problems = _problems({"lora_type": "lokr", "lokr_factor": value})
        assert len(problems) == 1 and problems[0].startswith("lokr_factor:"), problems
        assert "got 0" in problems[0] and "-1" in problems[0] and "1 to 1024" in problems[0]
    # Out of range says the same allowed values (0 is not among them).
    (problem,) = _problems({"lokr_factor": -2})
    assert "allowed -1 (as balanced as the dimension allows) or a factor from 1 to 1024" \
        in problem
    for ok in (-1, 1, 4):
        assert validate({"lora_type": "lokr", "lokr_factor": ok},
                        require_inputs=False).lokr_factor == ok


def test_unterminated_quote_in_an_imported_command_is_an_error_naming_it():
    from backend.planning.importer import CommandError, import_commands, split_commands

    text = ("accelerate launch train.py --task sft --dataset_base_path data \\\n"
            "  --sample_prompts 'a cat --lora_rank 8\n")
    with pytest.raises(CommandError) as e:
        import_commands(text)
    message = str(e.value)
    assert isinstance(e.value, ValueError)  # what the Training tab shows next to the box
    assert "unterminated ' quote" in message and "line 1" in message, message
    assert "'a cat --lora_rank 8" in message
    with pytest.raises(CommandError, match=r'unterminated " quote on line 3'):
        split_commands('echo ok\n# it\'s a comment\npython train.py --trigger_word "zlr\n')
    # A quote that closes on a later line is one argument, as a shell reads it.
    assert split_commands("python train.py --sample_prompts 'one\ntwo' --lora_rank 8") == [
        ["python", "train.py", "--sample_prompts", "one\ntwo", "--lora_rank", "8"]]


# ------------------------------------------------------------------------------------------
# 8. Wan2.2-TI2V-5B sizes
# ------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def ti2v_models(tmp_path_factory) -> Path:
    from backend.families.wan import tiny

    root = tmp_path_factory.mktemp("ti2v")
    tiny.build_tiny_wan_ti2v(root / TI2V_DIFFUSERS, seed=0)
    return root


def test_ti2v_sizes_follow_its_declared_multiple_before_any_stage():
    from backend.config.schema import resolution_multiple
    from backend.families import family_spec
    from backend.data.dataset import target_size
    from backend.families.wan import T2V_1_3B, TI2V_5B, sources

    ti2v = {"model_id_with_origin_paths": sources(TI2V_5B)}
    assert resolution_multiple(ti2v) == (32, "Wan2.2-TI2V-5B")
    assert family_spec("wan").size_multiple() == (16, family_spec("wan").title)
    problems = _problems({**ti2v, "height": 48, "width": 48})
    assert [p.split(":")[0] for p in problems] == ["height", "width"], problems
    assert "multiples of 32 (got 48; allowed e.g. 32 or 64)" in problems[0]
    (sample,) = _problems({**ti2v, "sample_height": 720, "sample_width": 1280})
    assert sample.startswith("sample_height:") and "got 720" in sample
    # Dynamic sizes: 192x108 at max_pixels 4096 is 85x48, floored to the model's multiple.
    cfg = validate({**ti2v, "max_pixels": 4096}, require_inputs=False)
    assert target_size(192, 108, cfg) == (64, 32)
    bucketed = cfg.model_copy(update={"aspect_buckets": True})
    w, h = target_size(192, 108, bucketed)
    assert w % 32 == 0 and h % 32 == 0 and w * h <= 4096
    t2v = validate({"model_id_with_origin_paths": sources(T2V_1_3B), "max_pixels": 4096,
                    "height": 48, "width": 48}, require_inputs=False)
    assert target_size(192, 108, t2v.model_copy(update={"height": None, "width": None})) \
        == (80, 48)


def test_ti2v_local_folder_declares_its_multiple_and_the_size_trains(ti2v_models, tmp_path):
    """The tiny TI2V folder (no model id) is the variant: the rule gives 64x32 for a
    192x108 clip at max_pixels 4096, and that clip encodes and trains; the 16-multiple the
    rule gave before (80x48) is the tensor-size mismatch the stage died of."""
    import torch

    from backend.families import family_of
    from backend.data.dataset import target_size
    from backend.families import get_family

    folder = ti2v_models / TI2V_DIFFUSERS
    # Component folders only, without model_index.json: the Wan 2.2 VAE's config names it.
    bare = tmp_path / "bare"
    for part in ("transformer", "vae"):
        (bare / part).mkdir(parents=True)
        (bare / part / "config.json").write_text((folder / part / "config.json").read_text())
    for sources in (str(folder), str(bare / "transformer")):
        assert family_of({"model_id_with_origin_paths": sources}) == ("wan", "wan22_ti2v_5b")
        assert _problems({"model_id_with_origin_paths": sources, "height": 48,
                          "width": 48})[0].startswith("height: Wan2.2-TI2V-5B needs sides")
    cfg = validate({"model_id_with_origin_paths": str(folder), "max_pixels": 4096,
                    "num_frames": 5}, require_inputs=False)
    w, h = target_size(192, 108, cfg)
    assert (w, h) == (64, 32)
    family = get_family("wan").for_config(cfg)
    assert family.title == "Wan2.2-TI2V-5B" and family.vae_scale_factor == 16
    dirs = {k: folder / k for k in ("text_encoder", "tokenizer", "vae")}
    encoder = family.load_encoder(dirs, torch.float32)
    transformer = family.load_transformer(folder / "transformer", torch.float32)
    schedule = family.training_schedule()

    def loss(width: int, height: int):
        pixels = torch.rand(1, 3, 5, height, width) * 2 - 1
        sample = encoder.encode_sample(pixels, "a red ball")
        return family.training_loss(transformer, sample, schedule,
                                    torch.Generator().manual_seed(0), torch.float32)

    assert torch.isfinite(loss(w, h))
    with pytest.raises(RuntimeError):  # what 80x48 did in stage 2
        loss(80, 48)


# ------------------------------------------------------------------------------------------
# 9. caption folders with files that are no images
# ------------------------------------------------------------------------------------------
def _caption_folder(folder: Path) -> Path:
    _image(folder / "good.png")
    (folder / "fake.png").write_text("this is text, not a picture", encoding="utf-8")
    (folder / "empty.png").write_bytes(b"")
    return folder


def test_caption_check_names_images_that_do_not_open_before_the_job_queues(tmp_path):
    from backend.data.captions import caption_problems

    folder = _caption_folder(tmp_path / "set")
    cfg = validate({"dataset_base_path": str(folder)}, require_inputs=False)
    problems = caption_problems(cfg)
    assert len(problems) == 2, problems
    empty, fake = problems  # in name order
    assert empty.startswith("dataset_base_path: empty.png does not open as an image") \
        and "an empty file" in empty, empty
    assert fake.startswith("dataset_base_path: fake.png does not open as an image") \
        and "not an image format" in fake, fake
    # Images that keep their caption are not opened by the job, so not checked either.
    (folder / "fake.txt").write_text("a caption", encoding="utf-8")
    (folder / "empty.txt").write_text("a caption", encoding="utf-8")
    assert caption_problems(cfg) == []
    assert len(caption_problems(cfg.model_copy(update={"caption_overwrite": True}))) == 2


def test_caption_stage_names_the_image_it_cannot_open(tmp_path):
    """A file that turned bad after the check: the job stops naming it, before any caption
    is written (the captioning model is never reached, so none is loaded)."""
    from backend.data.captions import CaptionError
    from backend.stages.caption import caption_dataset

    folder = _caption_folder(tmp_path / "set")
    cfg = validate({"dataset_base_path": str(folder), "caption_batch_size": 8},
                   require_inputs=False)
    with pytest.raises(CaptionError) as e:
        caption_dataset(cfg, captioner=None, log=lambda line: None)
    assert "empty.png does not open as an image" in str(e.value), str(e.value)
    assert not list(folder.glob("*.txt"))


# ------------------------------------------------------------------------------------------
# 13a. captioner_path
# ------------------------------------------------------------------------------------------
def test_captioner_path_with_an_empty_side_is_refused_by_field():
    (problem,) = _problems({"captioner_path": "Qwen/Qwen2.5-VL-3B-Instruct:"})
    assert problem.startswith("captioner_path: the folder or files after the colon is "
                              "empty (got 'Qwen/Qwen2.5-VL-3B-Instruct:'"), problem
    (problem,) = _problems({"captioner_path": ":text_encoder/"})
    assert problem.startswith("captioner_path: the model id before the colon is empty")
    (problem,) = _problems({"tokenizer_path": "Qwen/Qwen-Image:"})
    assert problem.startswith("tokenizer_path:")
    validate({"captioner_path": "Qwen/Qwen2.5-VL-3B-Instruct:./"}, require_inputs=False)


def test_missing_captioning_model_diagnosis_names_captioner_path(tmp_path):
    from backend.data.captions import captioner_folder
    from backend.models.hub import HubError
    from backend.jobs.diagnosis import diagnose

    cfg = validate({"captioner_path": "Qwen/Qwen2.5-VL-3B-Instruct:./", "offline": True,
                    "models_dir": str(tmp_path / "models")}, require_inputs=False)
    with pytest.raises(HubError) as e:  # what the caption stage raises, offline
        captioner_folder(cfg)
    log = f"Traceback (most recent call last):\nbackend.hub.HubError: {e.value}\n"
    (found, *_) = diagnose(1, log, config_yaml=cfg.to_yaml(), stage="caption")
    assert found.kind == "missing_model" and found.settings[0] == "captioner_path", found
    assert "model_id_with_origin_paths" not in found.settings
    assert any("offline" in fix for fix in found.fixes)
    # Another stage's missing model still names the model sources.
    (other, *_) = diagnose(1, "model files missing and offline is on: Qwen/Qwen-Image:"
                           "transformer/*.safetensors", config_yaml=cfg.to_yaml(),
                           stage="train")
    assert other.settings[0] == "model_id_with_origin_paths"


# ------------------------------------------------------------------------------------------
# 13b. the reference's quantization methods
# ------------------------------------------------------------------------------------------
SRC = "Qwen/Qwen-Image:transformer/*.safetensors"
TE = "Qwen/Qwen-Image:text_encoder/*.safetensors"


def test_reference_quant_method_names_and_semicolon_lists_are_accepted():
    from backend.config.lowvram import parse_quant_options

    cfg = validate({"quant_options": f"{SRC}:torchao_int8_w8a16;{TE}:bitsandbytes_fp4/lm_head;"},
                   require_inputs=False)
    entries, problems = parse_quant_options(cfg.quant_options)
    assert problems == []
    assert [(e.component, e.method, e.skip) for e in entries] == [
        ("transformer", "torchao_int8", None), ("text_encoder", "bitsandbytes_fp4",
                                                ("lm_head",))]
    cfg = validate({"fp8_models": f"{TE};Qwen/Qwen-Image:vae/*.safetensors"},
                   require_inputs=False)
    entries, _ = parse_quant_options(None, cfg.fp8_models)
    assert [(e.component, e.method) for e in entries] == [("text_encoder", "torchao_fp8"),
                                                          ("vae", "torchao_fp8")]
    assert parse_quant_options(f"{SRC}:torchao_fp8_w8a16")[0][0].method == "torchao_fp8"
    for method in ("torchao_nvfp4_w4a16", "comfy_kitchen_fp8_w8a8"):
        (problem,) = _problems({"quant_options": f"{SRC}:{method}"})
        assert problem.startswith(f"quant_options: {method} does not run here"), problem
        assert "allowed bitsandbytes_nf4 | bitsandbytes_fp4" in problem


def test_imported_command_keeps_the_reference_quant_methods():
    from backend.planning.importer import import_commands

    text = (f"accelerate launch examples/qwen_image/model_training/train.py --task sft "
            f"--dataset_base_path data --model_id_with_origin_paths \"{SRC}\" "
            f"--quant_options \"{SRC}:torchao_fp8_w8a16;{TE}:bitsandbytes_nf4\"")
    result = import_commands(text)
    assert result.given.get("quant_options") == f"{SRC}:torchao_fp8_w8a16;{TE}:bitsandbytes_nf4"
    assert not [n for n in result.not_understood if "quant_options" in n]
    refused = import_commands(text.replace("torchao_fp8_w8a16", "torchao_nvfp4_w4a16"))
    assert "quant_options" not in refused.given
    (said,) = [n for n in refused.not_understood if n.startswith("quant_options:")]
    assert "torchao_nvfp4_w4a16 does not run here" in said


def test_bitsandbytes_fp4_quantizes_a_frozen_model_the_lora_trains_on():
    import torch

    from backend.config.lowvram import parse_quant_options
    from backend.models.quantize import is_quantized, quantize_model

    pytest.importorskip("bitsandbytes")
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.GELU(),
                                torch.nn.Linear(64, 32))
    x = torch.randn(4, 64)
    before = model(x).detach()
    (entry,), _ = parse_quant_options(f"{SRC}:bitsandbytes_fp4")
    counts = quantize_model(model, entry, log=lambda line: None)
    assert counts["quantized"] == 2
    assert type(model[0]).__name__ == "Linear4bit" and model[0].weight.quant_type == "fp4"
    assert is_quantized(model[0])
    after = model(x)
    assert after.shape == before.shape and 0 < (after - before).abs().max() < 0.5


# ------------------------------------------------------------------------------------------
# 13c-e. edit models, input images, preset names
# ------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def edit_folders(tmp_path_factory) -> Path:
    from backend.families.qwen_image.tiny import build_tiny_qwen_image_edit

    root = tmp_path_factory.mktemp("edit")
    build_tiny_qwen_image_edit(root / EDIT_2511, seed=0, zero_cond_t=True)
    build_tiny_qwen_image_edit(root / EDIT_2509, seed=0)
    return root


def test_local_edit_2511_folder_is_recognised_as_2511_not_2509(edit_folders):
    from backend.families import family_of
    from backend.families import get_family

    for repo, variant, title in ((EDIT_2511, "qwen_image_edit_2511", "Qwen-Image-Edit-2511"),
                                 (EDIT_2509, "qwen_image_edit_2509", "Qwen-Image-Edit-2509")):
        for source in (edit_folders / repo, edit_folders / repo / "transformer"):
            data = {"model_id_with_origin_paths": str(source)}
            assert family_of(data) == ("qwen_image", variant), source
        cfg = validate({"model_id_with_origin_paths": str(edit_folders / repo)},
                       require_inputs=False)
        assert get_family(cfg.model_family).for_config(cfg).title == title
        assert cfg.zero_cond_t is (repo == EDIT_2511)  # the variant's defaults


def test_a_folder_given_as_an_input_image_is_called_a_folder(tmp_path):
    from backend.data.dataset import DatasetError, check_input_images, read_records, validate_dataset
    from backend.families.qwen_image import sources

    data = tmp_path / "pairs"
    _image(data / "target.png")
    (data / "inputs").mkdir()
    (data / "target_dir").mkdir()
    (tmp_path / "outside").mkdir()
    rows = [{"image": "target.png", "edit_image": "inputs", "prompt": "make it blue"},
            {"image": "target_dir", "edit_image": "target.png", "prompt": "a folder target"},
            {"image": "target.png", "edit_image": "../outside", "prompt": "outside"}]
    (data / "metadata.json").write_text(json.dumps(rows), encoding="utf-8")
    cfg = validate({"model_id_with_origin_paths": sources(EDIT_2509),
                    "dataset_base_path": str(data),
                    "dataset_metadata_path": str(data / "metadata.json")})
    records, problems = read_records(cfg)
    assert problems == []
    with pytest.raises(DatasetError) as e:
        check_input_images(cfg, records[:1], 3, "Qwen-Image-Edit-2509")
    assert "input image is a folder, not an image file (got 'inputs')" in e.value.problems[0]
    (finding,) = [f for f in validate_dataset(cfg) if f["level"] == "error"]
    assert "image is a folder, not an image file (got 'target_dir')" in finding["message"]
    # Outside the run's read roots a folder is "not found", as a missing file: no oracle.
    with pytest.raises(DatasetError) as e:
        check_input_images(cfg, records[2:], 3)
    assert "is a folder, not an image file (got '../outside')" in e.value.problems[0]
    gated = cfg.model_copy(update={"read_roots": [str(data)]})
    with pytest.raises(DatasetError) as e:
        check_input_images(gated, records, 3)
    assert [p.split(": ", 1)[1] for p in e.value.problems] == [
        "input image is a folder, not an image file (got 'inputs')",
        "input image not found (got '../outside')"]


def test_preset_name_with_the_yaml_suffix_is_refused_and_every_listed_name_loads(tmp_path):
    from backend.config.presets import list_presets, load_preset, read_preset, save_preset

    cfg = validate({"lora_rank": 8}, require_inputs=False)
    for name in ("x.yaml", "x.YML"):
        with pytest.raises(ConfigError) as e:
            save_preset(cfg, name, tmp_path)
        assert e.value.problems == [f"name: a preset name, not a file name (got {name!r}; "
                                    f"allowed 'x': the .yaml is added)"]
    assert not (tmp_path / "presets").exists() or not list((tmp_path / "presets").iterdir())
    save_preset(cfg, "x", tmp_path)
    # A file an older version wrote as <name>.yaml.yaml is listed as "<name>.yaml": it loads.
    legacy = tmp_path / "presets" / "y.yaml.yaml"
    legacy.write_text("schema_version: 1\nlora_rank: 16\n", encoding="utf-8")
    listed = dict(list_presets(tmp_path))
    assert {"x", "y.yaml"} <= set(listed)
    for name in listed:
        load_preset(name, tmp_path)
    assert load_preset("y.yaml", tmp_path).lora_rank == 16
    values, path = read_preset("y.yaml", tmp_path, user="bob", admin=False)
    assert values == {"lora_rank": 16} and path == legacy
