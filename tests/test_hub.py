"""Model file resolution (backend/models/hub.py) against pre-filled local folders, offline."""
from __future__ import annotations

import json
import shutil

import pytest

from backend.config.schema import RunConfig
from backend.families.qwen_image import SPEC as QWEN_IMAGE

QWEN_IMAGE_SOURCES = QWEN_IMAGE.defaults["model_id_with_origin_paths"]
from backend.models.hub import (HubError, parse_spec, resolve_component_dirs, resolve_source)

TRANSFORMER = "Qwen/Qwen-Image:transformer/diffusion_pytorch_model*.safetensors"
# Nothing listens on port 9: any attempt to reach the network fails at once.
DEAD_ENDPOINT = "http://127.0.0.1:9"


def cfg(**kw) -> RunConfig:
    return RunConfig(**kw)


def test_offline_resolves_prefilled_models_dir(models_root, tiny_model_dir):
    c = cfg(models_dir=str(models_root), offline=True)
    files = resolve_source(c, parse_spec(TRANSFORMER))
    assert files == [tiny_model_dir / "transformer" / "diffusion_pytorch_model.safetensors"]

    dirs = resolve_component_dirs(c, ["transformer", "text_encoder", "vae", "tokenizer",
                                      "scheduler"])
    assert dirs == {k: tiny_model_dir / k for k in ("transformer", "text_encoder", "vae",
                                                    "tokenizer", "scheduler")}


def test_missing_file_offline_names_it(tmp_path, tiny_model_dir):
    root = tmp_path / "models"
    shutil.copytree(tiny_model_dir, root / "Qwen" / "Qwen-Image")
    (root / "Qwen/Qwen-Image/text_encoder/model.safetensors").unlink()
    c = cfg(models_dir=str(root), offline=True, model_id_with_origin_paths=QWEN_IMAGE_SOURCES)
    # Stage 2 needs only the transformer: the missing text encoder is not even looked at.
    assert resolve_component_dirs(c, ["transformer"])["transformer"].name == "transformer"
    with pytest.raises(HubError) as e:
        resolve_component_dirs(c, ["text_encoder", "vae", "tokenizer"])
    msg = str(e.value)
    assert "offline" in msg and "Qwen/Qwen-Image:text_encoder/model*.safetensors" in msg
    assert str(root / "Qwen/Qwen-Image/text_encoder/model*.safetensors") in msg


def test_env_models_dir(monkeypatch, models_root):
    monkeypatch.setenv("ZEROLORA_MODELS_DIR", str(models_root))
    dirs = resolve_component_dirs(cfg(offline=True), ["transformer"])
    assert dirs["transformer"] == models_root / "Qwen/Qwen-Image/transformer"


def test_local_paths(tmp_path, tiny_model_dir):
    # An existing local path inside model_id_with_origin_paths (a whole pipeline folder).
    c = cfg(offline=True, models_dir=str(tmp_path / "empty"),
            model_id_with_origin_paths=str(tiny_model_dir))
    dirs = resolve_component_dirs(c, ["transformer", "text_encoder", "vae", "tokenizer"])
    assert dirs["tokenizer"] == tiny_model_dir / "tokenizer"  # sibling of the text encoder
    # model_paths: a JSON list of files (an element may be a list of shards).
    files = [str(tiny_model_dir / "transformer/diffusion_pytorch_model.safetensors"),
             [str(tiny_model_dir / "vae/diffusion_pytorch_model.safetensors")]]
    c = cfg(offline=True, models_dir=str(tmp_path / "empty"), model_paths=json.dumps(files))
    dirs = resolve_component_dirs(c, ["transformer", "vae"])
    assert dirs == {"transformer": tiny_model_dir / "transformer",
                    "vae": tiny_model_dir / "vae"}
    with pytest.raises(HubError, match="model sources give no text_encoder"):
        resolve_component_dirs(c, ["text_encoder"])
    c = cfg(offline=True, model_paths=json.dumps([str(tmp_path / "nope.safetensors")]))
    with pytest.raises(HubError, match="nope.safetensors"):
        resolve_component_dirs(c, ["transformer"])


def test_component_from_config_not_folder_name(tmp_path, tiny_model_dir):
    """The architecture comes from config.json, whatever the folder is called."""
    shutil.copytree(tiny_model_dir / "transformer", tmp_path / "my_dit")
    shutil.copytree(tiny_model_dir / "tokenizer", tmp_path / "notes")
    (tmp_path / "notes" / "tokenizer_config.json").unlink()
    (tmp_path / "notes" / "tokenizer.json").unlink()
    (tmp_path / "notes" / "config.json").write_text('{"_class_name": "Something"}')
    c = cfg(offline=True, model_id_with_origin_paths=f"{tmp_path / 'my_dit'},"
            f"{tmp_path / 'notes'}")
    assert resolve_component_dirs(c, ["transformer"])["transformer"] == tmp_path / "my_dit"
    with pytest.raises(HubError, match="folders without a known config.json: .*notes"):
        resolve_component_dirs(c, ["vae"])


def test_present_files_never_touch_the_network(models_root, tiny_model_dir):
    for source in ("modelscope", "huggingface"):
        c = cfg(models_dir=str(models_root), download_source=source,
                hub_endpoint=DEAD_ENDPOINT)
        assert resolve_component_dirs(c, ["transformer"])["transformer"] == \
            tiny_model_dir / "transformer"


def test_failed_download_is_one_clear_error(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_TOKEN", "hf_zerolora_test_secret")
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    c = cfg(models_dir=str(tmp_path), download_source="huggingface",
            hub_endpoint=DEAD_ENDPOINT)
    with pytest.raises(HubError) as e:
        resolve_component_dirs(c, ["transformer"])
    msg = str(e.value)
    assert f"could not download {TRANSFORMER} from huggingface" in msg
    assert "hf_zerolora_test_secret" not in msg
