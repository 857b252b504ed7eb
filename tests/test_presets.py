"""Presets: every bundled file loads, holds only what it changes, round-trips, plans."""
from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from backend.config.errors import ConfigError
from backend.config.paths import REPO_ROOT
from backend.config.presets import PRESETS_DIR, diff_configs, list_presets, load_preset, save_preset
from backend.config.schema import FIELDS, SCHEMA_VERSION, RunConfig, family_defaults
from backend.config.validation import validate
from backend.families import family_of
from backend.planning.plan import deepspeed_config, plan_run

BUNDLED = ["cpu_demo", "cpu_demo_zero3", "flux2_dev_low_vram", "flux2_dev_single_gpu",
           "flux2_klein_4b_full_zero3_offload", "flux2_klein_4b_low_vram",
           "flux2_klein_4b_single_gpu",
           "flux2_klein_9b_low_vram", "flux2_klein_9b_single_gpu",
           "hunyuan_video15_i2v_low_vram", "hunyuan_video15_t2v_low_vram",
           "hunyuan_video15_t2v_single_gpu", "qwen_image_low_vram",
           "qwen_image_full_multi_gpu_zero2_offload", "qwen_image_multi_gpu_zero2",
           "qwen_image_single_gpu", "qwen_image_slurm_2x8", "qwen_image_2512_low_vram",
           "qwen_image_edit_2509_low_vram", "qwen_image_edit_2509_single_gpu",
           "qwen_image_edit_2511_low_vram", "qwen_image_edit_2511_single_gpu",
           "krea2_raw_low_vram", "krea2_raw_single_gpu",
           "ltx2_i2av_low_vram", "ltx2_ic_lora_low_vram",
           "ltx2_t2av_low_vram", "ltx2_t2v_low_vram", "ltx2_t2v_single_gpu",
           "qwen_image_21_low_vram", "qwen_image_21_single_gpu",
           "wan_14b_zero3_offload", "wan_1_3b_12gb", "wan_2_1_i2v_14b_zero3_offload",
           "wan_2_2_t2v_a14b_low_noise_zero3_offload", "wan_2_2_ti2v_5b_24gb",
           "z_image_low_vram",
           "z_image_single_gpu", "z_image_turbo_dedistill"]


def _changed(raw: dict, cfg: RunConfig) -> set[str]:
    """What the preset file must say: the family it names, the fields that pick a variant
    (its model sources) and every field ``cfg`` holds other than that variant's defaults."""
    family, variant = family_of(raw)
    own, var = family_defaults(family), family_defaults(family, variant)
    data = cfg.to_dict()
    picks = {k for k, v in raw.items() if k in FIELDS and own[k] != v and var[k] == v}
    return {k for k in FIELDS if data[k] != var[k]} | picks | (
        {"model_family"} if "model_family" in raw else set())


def test_the_bundled_presets_are_listed():
    names = [n for n, _ in list_presets()]
    assert names == sorted(BUNDLED)
    assert [p.name for p in sorted(PRESETS_DIR.glob("*.yaml"))] == [f"{n}.yaml" for n in names]


@pytest.mark.parametrize("name", BUNDLED)
def test_every_preset_loads_and_holds_only_what_it_changes(name):
    raw = yaml.safe_load((PRESETS_DIR / f"{name}.yaml").read_text())
    assert raw.pop("schema_version") == SCHEMA_VERSION
    cfg = load_preset(name)
    assert isinstance(cfg, RunConfig)
    defaults = family_defaults(family_of(raw)[0])
    same = [k for k, v in raw.items() if defaults[k] == v and k != "model_family"]
    assert not same, f"{name} repeats its family's defaults: {same}"
    assert set(raw) == _changed(raw, cfg)
    # Ready to run once the user names a dataset (the demos bring theirs).
    data = cfg.to_dict()
    data["dataset_base_path"] = data["dataset_base_path"] or "my_dataset"
    validate(data)


@pytest.mark.parametrize("name", BUNDLED)
def test_load_save_load_round_trips(tmp_path, name):
    cfg = load_preset(name)
    path = save_preset(cfg, f"my_{name}", tmp_path)
    assert path == tmp_path / "presets" / f"my_{name}.yaml"
    assert load_preset(f"my_{name}", workspace=tmp_path) == cfg
    assert load_preset(path) == cfg
    saved = yaml.safe_load(path.read_text())
    assert saved.pop("schema_version") == SCHEMA_VERSION
    assert set(saved) == {k for k, _, _ in diff_configs(RunConfig(), cfg)}
    assert (f"my_{name}", path) in list_presets(tmp_path)


@pytest.mark.parametrize("name", BUNDLED)
def test_a_preset_on_the_pages_base_gets_its_own_familys_defaults(tmp_path, name):
    """The page loads a preset over its base (the schema defaults and its models folder): a
    preset of another family gets that family's sources and targets, not the default
    family's, and the base's own setting stays."""
    base = RunConfig(models_dir=str(tmp_path / "models"))
    cfg, own = load_preset(name, base=base), load_preset(name)
    raw = yaml.safe_load((PRESETS_DIR / f"{name}.yaml").read_text())
    models_dir = own.models_dir if "models_dir" in raw else base.models_dir
    assert cfg == own.model_copy(update={"models_dir": models_dir})


def test_save_against_a_base_keeps_only_the_changes(tmp_path):
    base = load_preset("qwen_image_low_vram")
    mine = base.model_copy(update={"lora_rank": 64, "num_epochs": 8})
    path = save_preset(mine, "rank64", tmp_path, base=base)
    saved = yaml.safe_load(path.read_text())
    assert saved == {"schema_version": SCHEMA_VERSION, "lora_rank": 64, "num_epochs": 8}
    assert load_preset("rank64", tmp_path, base=base) == mine
    assert diff_configs(base, mine) == [("lora_rank", 32, 64), ("num_epochs", 5, 8)]


def test_bundled_relative_paths_resolve_against_the_repository_root(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    cfg = load_preset("cpu_demo")
    assert cfg.dataset_base_path == str(REPO_ROOT / "backend" / "assets" / "demo_dataset")
    assert cfg.dataset_metadata_path == str(REPO_ROOT / "backend/assets/demo_dataset/"
                                            "metadata.csv")
    assert cfg.models_dir == str(REPO_ROOT / "backend" / "assets")
    assert cfg.model_id_with_origin_paths.startswith("tiny-qwen-image:transformer/")
    # A user preset keeps its paths as written.
    (tmp_path / "presets").mkdir()
    (tmp_path / "presets" / "mine.yaml").write_text(
        "schema_version: 1\ndataset_base_path: data/mine\n")
    assert load_preset("mine", tmp_path).dataset_base_path == "data/mine"


def test_cpu_demo_fits_the_demo_model_and_dataset():
    demo = load_preset("cpu_demo")
    assert demo.mixed_precision == "no" and demo.zero_stage == 0 and demo.split_training
    assert demo.offline and (demo.height, demo.width) == (64, 64)
    assert (demo.sample_height, demo.sample_width) == (64, 64)
    assert all("zlr style" in p for p in demo.sample_prompts)
    zero3 = load_preset("cpu_demo_zero3")
    ds = deepspeed_config(zero3)
    assert ds["zero_optimization"]["offload_param"]["device"] == "cpu"
    assert ds["zero_optimization"]["offload_optimizer"]["device"] == "cpu"
    assert "activation_checkpointing" in ds
    same = {k for k, _, _ in diff_configs(demo, zero3)}
    assert same <= {"run_name", "dataset_repeat", "zero_stage", "offload_optimizer_device",
                    "offload_param_device", "initialize_model_on_cpu",
                    "use_gradient_checkpointing"}


@pytest.mark.skipif(not (REPO_ROOT / "backend/assets/tiny-qwen-image").is_dir(),
                    reason="the CPU demo assets are built by backend.families.qwen_image.demo")
def test_cpu_demo_points_at_the_committed_assets():
    demo = load_preset("cpu_demo")
    assert Path(demo.dataset_metadata_path).is_file()
    for entry in demo.model_id_with_origin_paths.split(","):
        model_id, pattern = entry.rsplit(":", 1)
        assert list((Path(demo.models_dir) / model_id).glob(pattern)), entry


@pytest.mark.parametrize("name", BUNDLED)
def test_every_preset_plans(tmp_path, name):
    from accelerate.commands.config.config_args import load_config_from_file

    cfg = load_preset(name)
    if not cfg.dataset_base_path:
        cfg = cfg.model_copy(update={"dataset_base_path": str(tmp_path / "data")})
    plans = plan_run(cfg, tmp_path / "run", cuda=not name.startswith("cpu_"))
    assert [p.name for p in plans] == cfg.stages
    for stage in ("data_process", "train"):
        conf = load_config_from_file(str(tmp_path / "run" / f"accelerate_{stage}.yaml"))
        assert conf.num_processes >= 1
    assert (tmp_path / "run" / "deepspeed_train.json").exists() == (cfg.zero_stage > 0)


def test_unknown_keys_name_the_file_and_key(tmp_path):
    folder = tmp_path / "presets"
    folder.mkdir()
    (folder / "typo.yaml").write_text("schema_version: 1\nlora_rnak: 4\nzero_stage: 7\n")
    err = pytest.raises(ConfigError, load_preset, "typo", tmp_path).value
    assert str(folder / "typo.yaml") in str(err)
    assert err.fields() == ["lora_rnak", "zero_stage"]


def test_old_or_future_schema_versions(tmp_path):
    folder = tmp_path / "presets"
    folder.mkdir()
    (folder / "future.yaml").write_text(f"schema_version: {SCHEMA_VERSION + 1}\n")
    (folder / "plain.yaml").write_text("lora_rank: 4\n")
    assert pytest.raises(ConfigError, load_preset, "future", tmp_path).value.fields() == [
        "schema_version"]
    assert load_preset("plain", tmp_path).lora_rank == 4


def test_save_refuses_bad_names(tmp_path):
    cfg = RunConfig()
    for name in ("../escape", "", "a/b", "cpu_demo"):
        err = pytest.raises(ConfigError, save_preset, cfg, name, tmp_path).value
        assert err.fields() == ["name"], name
    assert pytest.raises(ConfigError, save_preset, cfg, "ok", None).value.fields() == [
        "workspace"]
    assert not (tmp_path / "presets").exists()


def test_unknown_preset_lists_the_known_ones():
    err = pytest.raises(ConfigError, load_preset, "nope").value
    assert err.fields() == ["preset"] and "cpu_demo" in str(err)


# ------------------------------------------------------------------------------------------
# Bad preset files: a clear error through the preset loader and the API's config builder
# (issue 21)
# ------------------------------------------------------------------------------------------
BAD_PRESETS = {
    "empty": (b"", "preset: empty file"),
    "comments_only": (b"# nothing here\n", "preset: empty file"),
    "future": (b"schema_version: 99\nlora_rank: 4\n", "schema_version: unsupported (got 99"),
    "broken": (b"lora_rank: [1\n", "preset: not valid YAML"),
    "binary": (b"\xff\xfe\x00bad", "preset: not UTF-8 text"),
    "listed": (b"- a\n", "preset: top level must be a mapping"),
}


@pytest.mark.parametrize("name", sorted(BAD_PRESETS))
def test_bad_preset_files_are_a_clear_config_error(tmp_path, name):
    from webui.api import build_config

    body, text = BAD_PRESETS[name]
    (tmp_path / "presets").mkdir()
    (tmp_path / "presets" / f"{name}.yaml").write_bytes(body)
    with pytest.raises(ConfigError) as e:
        load_preset(name, tmp_path)
    assert text in str(e.value) and f"{name}.yaml" in str(e.value)
    # The API answers with the same words (gradio's Error, nothing left for the log).
    with pytest.raises(Exception) as e:
        build_config("", name, tmp_path)
    assert type(e.value).__name__ == "_Fail" and text in str(e.value)


def test_a_user_preset_cannot_take_a_bundled_name(tmp_path):
    """One resolution for the API and the form: a bundled name always means the bundled
    preset, and saving under it is refused."""
    from types import SimpleNamespace

    from webui.api import build_config
    from webui.tabs.model import preset_config

    cfg = RunConfig(lora_rank=4)
    with pytest.raises(ConfigError, match="name: a bundled preset has this name"):
        save_preset(cfg, "cpu_demo", tmp_path, user="bob", admin=False)
    own = tmp_path / "presets" / "users" / "bob"
    own.mkdir(parents=True)
    (own / "cpu_demo.yaml").write_text("schema_version: 1\nlora_rank: 4\n")  # by hand
    assert [n for n, _ in list_presets(tmp_path, "bob")].count("cpu_demo") == 1
    api = build_config("", "cpu_demo", tmp_path, "bob")
    ui = preset_config(SimpleNamespace(workspace=tmp_path, models_dir=None, runner=None), "cpu_demo",
                       "bob")
    assert api.lora_rank == ui["lora_rank"] == load_preset("cpu_demo").lora_rank == 8
