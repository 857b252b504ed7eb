"""A step-distilled model (Z-Image-Turbo, Krea 2 Turbo) trained directly learns ordinary flow
matching and wears its few-step sampling off. Training one is refused before any stage runs,
naming the model, the undistilled one to train on instead and the two options that allow it:

- ``preset_lora_path``: a de-distillation adapter merged for training only;
- ``train_distilled``: the user knows, and trains it directly anyway.

The refusal waits for the user's own inputs (``require_inputs``): a preset or an imported
command that names Turbo loads as it is, and the form, the run plan and the stage refuse it.
"""
from __future__ import annotations

import subprocess
import sys

import pytest

from backend.config.errors import ConfigError
from backend.config.presets import list_presets, load_preset
from backend.config.rules import distilled_problems
from backend.config.validation import validate
from backend.core.messages import codes
from backend.families import family_names, family_spec
from webui.messages import english_left

Z_TURBO = ("Tongyi-MAI/Z-Image-Turbo:transformer/*.safetensors,"
           "Tongyi-MAI/Z-Image-Turbo:text_encoder/*.safetensors,"
           "Tongyi-MAI/Z-Image-Turbo:vae/diffusion_pytorch_model.safetensors")
Z_BASE = Z_TURBO.replace("Z-Image-Turbo", "Z-Image")
K_TURBO = ("krea/Krea-2-Turbo:transformer/*.safetensors,"
           "krea/Krea-2-Turbo:text_encoder/*.safetensors,"
           "krea/Krea-2-Turbo:vae/diffusion_pytorch_model.safetensors")
K_RAW = K_TURBO.replace("Krea-2-Turbo", "Krea-2-Raw")
# (model sources of a distilled model, its title, the title of the model to train instead)
DISTILLED = [(Z_TURBO, "Z-Image-Turbo", "Z-Image (Base)"),
             (K_TURBO, "Krea 2 Turbo", "Krea 2 Raw"),
             # The reference's own single file, read as the transformer folder.
             ("krea/Krea-2-Turbo:turbo.safetensors", "Krea 2 Turbo", "Krea 2 Raw")]
IDS = ["z_image_turbo", "krea2_turbo", "krea2_turbo_reference_file"]


@pytest.fixture
def data(tmp_path):
    folder = tmp_path / "data"
    folder.mkdir()
    return str(folder)


def refused(values: dict) -> list:
    with pytest.raises(ConfigError) as e:
        validate(values)
    return [p for p in e.value.problems if "validation.rule.distilled" in codes(p)]


def test_the_turbo_models_are_distilled_from_a_variant_of_their_own_family():
    distilled = {}
    for name in family_names():
        spec = family_spec(name)
        for var in spec.variants:
            if var.distilled_from:
                base = spec.variant(var.distilled_from)
                assert base is not None and base.distilled_from is None, (name, var.name)
                distilled[var.name] = base.name
    assert distilled == {"z_image_turbo": "z_image", "krea2_turbo": "krea2_raw"}


@pytest.mark.parametrize("sources, model, base", DISTILLED, ids=IDS)
def test_training_a_distilled_model_directly_is_refused_naming_the_ways_around(
        sources, model, base, data):
    (p,) = refused({"model_id_with_origin_paths": sources, "dataset_base_path": data})
    assert p.params["field"] == "model_id_with_origin_paths"
    assert p.startswith(f"model_id_with_origin_paths: {model} is step-distilled")
    given = sources.split(",")[0]
    for words in (f"got {given!r}", f"allowed {base} to train on", "preset_lora_path",
                  "train_distilled true"):
        assert words in p, p
    zh = p.text("zh")
    assert english_left(zh) == [], zh
    for words in (f'"{model}" 是步数蒸馏模型', f'改用 "{base}" 训练', "preset_lora_path",
                  "train_distilled"):
        assert words in zh, zh


@pytest.mark.parametrize("sources, model, base", DISTILLED, ids=IDS)
def test_a_distilled_model_trains_with_an_adapter_or_when_the_user_says_so(
        sources, model, base, data):
    run = {"model_id_with_origin_paths": sources, "dataset_base_path": data}
    assert validate({**run, "preset_lora_path": "dedistill.safetensors"}).preset_lora_path
    assert validate({**run, "train_distilled": True}).train_distilled
    # Nothing trained, nothing refused: samples of the distilled model itself.
    assert validate({**run, "stages": ["sample"]}).stages == ["sample"]
    # A preset or an import that names it loads; the form and the stage then refuse it.
    assert validate(run, require_inputs=False).train_distilled is False


@pytest.mark.parametrize("sources", [Z_BASE, K_RAW,
                                     # Base's transformer with Turbo's encoders (the
                                     # reference's Z-Image.sh): the trained model is Base.
                                     Z_TURBO.replace("Z-Image-Turbo:transformer",
                                                     "Z-Image:transformer")],
                         ids=["z_image", "krea2_raw", "z_image_with_turbo_encoders"])
def test_the_undistilled_models_train_as_they_are(sources, data):
    cfg = validate({"model_id_with_origin_paths": sources, "dataset_base_path": data})
    assert distilled_problems(cfg.to_dict()) == []


def test_turbo_named_after_base_encoders_is_still_judged_by_its_transformer(data):
    """The variant is the trained component's, whatever order the sources come in."""
    sources = ",".join(reversed(Z_TURBO.split(",")))
    sources = sources.replace("Z-Image-Turbo:vae", "Z-Image:vae")
    assert refused({"model_id_with_origin_paths": sources, "dataset_base_path": data})
    sources = ",".join(reversed(Z_BASE.split(","))).replace("Z-Image:vae", "Z-Image-Turbo:vae")
    assert validate({"model_id_with_origin_paths": sources, "dataset_base_path": data})


def test_every_bundled_preset_of_a_distilled_model_says_which_way_it_trains(data):
    """A preset of a Turbo model merges an adapter or says it trains it directly; the
    others train the undistilled model. Each starts as given once it has a dataset."""
    turbo = []
    for name, path in list_presets():
        cfg = load_preset(path)
        values = {**cfg.to_dict(), "dataset_base_path": data}
        validate(values)  # raises with the problem otherwise
        if "Turbo" in cfg.model_id_with_origin_paths:
            turbo.append(name)
            assert distilled_problems({**values, "preset_lora_path": None,
                                       "train_distilled": False}), name
    assert turbo == ["z_image_turbo_dedistill"]


def test_the_train_stage_refuses_before_anything_loads(tmp_path, data):
    """``python -m backend.stages.train`` exits 2 (exits.REFUSED) with the problem; no model
    library is imported and nothing is written."""
    from tests.harness.stages import REPO, stage_env

    out, models = tmp_path / "out", tmp_path / "models"
    argv = [sys.executable, "-X", "importtime", "-m", "backend.stages.train",
            "--model_id_with_origin_paths", Z_TURBO, "--dataset_base_path", data,
            "--output_path", str(out), "--models_dir", str(models), "--offline"]
    proc = subprocess.run(argv, cwd=REPO, env=stage_env(), capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert ("model_id_with_origin_paths: Z-Image-Turbo is step-distilled" in proc.stderr and
            "train_distilled true" in proc.stderr), proc.stderr[-3000:]
    imported = {line.rsplit("|", 1)[-1].strip().split(".")[0]
                for line in proc.stderr.splitlines() if line.startswith("import time:")}
    assert "backend" in imported  # the import times are there to read
    assert not imported & {"torch", "diffusers", "transformers", "accelerate", "peft"}
    assert not out.exists() and not models.exists()
    # Said it knows: the stage goes on, here to the next thing missing (the dataset is empty).
    proc = subprocess.run([*argv[:1], *argv[3:], "--train_distilled"], cwd=REPO,
                          env=stage_env(), capture_output=True, text=True, timeout=300)
    assert "step-distilled" not in proc.stderr and "no images" in proc.stderr, proc.stderr
