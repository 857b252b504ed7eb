"""The reference trainer's full-training scripts of every family we train import as full
fine-tunes of that family, and plan, with nothing left not understood.

``tests/fixtures/reference_full/*.sh`` are the reference's own scripts
(``examples/<family>/model_training/full/``), unchanged. Importing one is what the Training
tab's import box and ``launch.py``'s importer do with a pasted script; the plan is what a
run writes before any stage starts. Training itself is generic (``tests/test_full_finetune.py``
trains the tiny model under ZeRO-2 and ZeRO-3); what differs per family is what is read
here: the family, its variant's own defaults, the sources mapped to the diffusers layout,
the tokenizer.
"""
from __future__ import annotations

from pathlib import Path

import pytest

from backend.config.errors import ConfigError
from backend.config.schema import family_defaults
from backend.families import family_of
from backend.models.hub import ROOT_FILES, download_patterns, local_state, parse_spec
from backend.planning.importer import import_commands
from backend.planning.plan import plan_run

SCRIPTS = Path(__file__).parent / "fixtures" / "reference_full"

# script: (family, the trained transformer's source after import)
EXPECTED = {
    "Qwen-Image-2512.sh": ("qwen_image",
                           "Qwen/Qwen-Image-2512:transformer/diffusion_pytorch_model*.safetensors"),
    "Qwen-Image-Edit-2511.sh": (
        "qwen_image", "Qwen/Qwen-Image-Edit-2511:transformer/diffusion_pytorch_model*.safetensors"),
    "FLUX.2-klein-4B.sh": ("flux2_klein", "black-forest-labs/FLUX.2-klein-4B:transformer/*.safetensors"),
    "FLUX.2-klein-base-9B.sh": ("flux2_klein",
                                "black-forest-labs/FLUX.2-klein-base-9B:transformer/*.safetensors"),
    "Krea-2-Raw.sh": ("krea2", "krea/Krea-2-Raw:transformer/*.safetensors"),
    "Z-Image.sh": ("z_image", "Tongyi-MAI/Z-Image:transformer/*.safetensors"),
    "Z-Image-Turbo.sh": ("z_image", "Tongyi-MAI/Z-Image-Turbo:transformer/*.safetensors"),
    "Wan2.1-T2V-1.3B.sh": ("wan", "Wan-AI/Wan2.1-T2V-1.3B-Diffusers:transformer/*.safetensors"),
    "Wan2.1-I2V-14B-480P.sh": ("wan",
                               "Wan-AI/Wan2.1-I2V-14B-480P-Diffusers:transformer/*.safetensors"),
    "Wan2.2-TI2V-5B.sh": ("wan", "Wan-AI/Wan2.2-TI2V-5B-Diffusers:transformer/*.safetensors"),
    "Wan2.2-T2V-A14B.sh": ("wan", "Wan-AI/Wan2.2-T2V-A14B-Diffusers:transformer/*.safetensors"),
}


# Step-distilled models: the reference trains them directly; a run must say it means it.
DISTILLED = {"Z-Image-Turbo.sh"}


def test_every_fixture_script_is_checked():
    assert sorted(p.name for p in SCRIPTS.glob("*.sh")) == sorted(EXPECTED)


@pytest.mark.parametrize("script", sorted(EXPECTED))
def test_a_reference_full_script_imports_and_plans_as_a_full_fine_tune(script, tmp_path):
    family, transformer = EXPECTED[script]
    result = import_commands((SCRIPTS / script).read_text(), base_dir=tmp_path)
    cfg = result.config
    assert result.not_understood == []
    assert cfg.model_family == family
    assert cfg.full_training and cfg.trainable_models == "dit"
    assert cfg.learning_rate == 1e-5 and cfg.num_epochs == 2
    assert transformer in cfg.model_id_with_origin_paths.split(",")
    # The LoRA options stay at the defaults of the family and its variant (the 9B klein's
    # targets are its own): the rules refuse any other beside trainable_models.
    defaults = family_defaults(*family_of(cfg.to_dict()))
    assert cfg.lora_target_modules == defaults["lora_target_modules"]
    if script in DISTILLED:
        # A step-distilled model trained directly is the user's choice to make: the
        # imported run says so under the field, and plans once train_distilled is set.
        with pytest.raises(ConfigError) as e:
            plan_run(cfg, tmp_path / "run", cuda=True)
        assert e.value.fields() == ["model_id_with_origin_paths"]
        assert "train_distilled" in str(e.value)
        cfg = cfg.model_copy(update={"train_distilled": True})
    plans = plan_run(cfg, tmp_path / "run", cuda=True)
    train = next(p for p in plans if p.name == "train")
    argv = [str(a) for a in train.argv]
    assert "backend.stages.train" in " ".join(argv)
    written = (tmp_path / "run" / "run.yaml").read_text()
    assert "trainable_models: dit" in written


def test_the_klein_9b_variant_keeps_its_own_targets_in_a_full_fine_tune(tmp_path):
    """The variant's own LoRA targets (24 single blocks, not the 4B's 20) are its default:
    a full fine-tune of it is not refused for a LoRA option it never set."""
    cfg = import_commands((SCRIPTS / "FLUX.2-klein-base-9B.sh").read_text(),
                          base_dir=tmp_path).config
    four_b = family_defaults("flux2_klein")["lora_target_modules"]
    assert cfg.lora_target_modules != four_b
    assert "single_transformer_blocks.23." in cfg.lora_target_modules


def test_the_reference_tokenizer_at_a_repository_root_is_its_files_without_weights(tmp_path):
    """``--tokenizer_path "Qwen/Qwen3-VL-4B-Instruct:"`` (Krea 2's scripts): the tokenizer at
    the repository's root, imported as ``model_id:./`` and said so; it is fetched without
    the weights beside it, and found once its files are there."""
    result = import_commands((SCRIPTS / "Krea-2-Raw.sh").read_text(), base_dir=tmp_path)
    assert result.config.tokenizer_path == "Qwen/Qwen3-VL-4B-Instruct:./"
    assert any("Qwen/Qwen3-VL-4B-Instruct:./" in str(n) for n in result.notes)

    src = parse_spec("Qwen/Qwen3-VL-4B-Instruct:./", tokenizer=True)
    assert download_patterns(src) == list(ROOT_FILES)
    assert not any(p.endswith(".safetensors") or p == "*" for p in download_patterns(src))
    base = tmp_path / "models" / "Qwen" / "Qwen3-VL-4B-Instruct"
    base.mkdir(parents=True)
    (base / "model-00001-of-00002.safetensors").write_bytes(b"x")
    assert local_state(base, src) == ([], False)  # weights alone: no tokenizer yet
    (base / "tokenizer.json").write_text("{}")
    assert local_state(base, src) == ([base], True)
    # A captioner's ``model_id:./`` is the whole repository, weights included.
    whole = parse_spec("Qwen/Qwen3-VL-4B-Instruct:./")
    assert not whole.is_root and download_patterns(whole) != list(ROOT_FILES)
