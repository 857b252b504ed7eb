"""The run schema: metadata, validation messages, precedence, the stage CLI."""
from __future__ import annotations

import os
import subprocess
import sys
import typing
from pathlib import Path

import pytest
import yaml

from backend.config.cli import parse_stage_args
from backend.config.errors import ConfigError
from backend.config.files import load_config, migrate
from backend.config.meta import field_meta
from backend.config.paths import resolve_paths
from backend.config.schema import FIELDS, GROUPS, LEVELS, SCHEMA_VERSION, RunConfig
from backend.config.validation import validate

REPO = Path(__file__).resolve().parent.parent
OK = {"dataset_base_path": "data/set"}


def problems_of(data: dict, **kw) -> list[str]:
    with pytest.raises(ConfigError) as info:
        validate(data, **kw)
    return info.value.problems


# ------------------------------------------------------------------------------ metadata
def test_every_field_has_default_help_group_level_and_limits():
    RunConfig()  # every default is valid
    for name in FIELDS:
        meta = field_meta(name)
        assert meta["help"].strip(), name
        assert meta["group"] in GROUPS, name
        assert meta["ui"] in LEVELS, name
        ann = FIELDS[name].annotation
        base = ([a for a in typing.get_args(ann) if a is not type(None)][0]
                if typing.get_origin(ann) is typing.Union else ann)
        if base in (int, float):
            assert ("ge" in meta or "gt" in meta) and ("le" in meta or "lt" in meta), \
                f"{name}: no bounds"
        if typing.get_origin(base) is typing.Literal:
            assert meta["choices"], name
    assert {field_meta(n)["group"] for n in FIELDS} == set(GROUPS)


def test_field_names_follow_the_reference_flags():
    for flag in ("dataset_base_path", "dataset_metadata_path", "dataset_repeat",
                 "dataset_num_workers", "data_file_keys", "model_paths",
                 "model_id_with_origin_paths", "height", "width", "max_pixels",
                 "learning_rate", "weight_decay", "num_epochs", "gradient_accumulation_steps",
                 "task", "output_path", "remove_prefix_in_ckpt", "save_steps",
                 "lora_base_model", "lora_target_modules", "lora_rank", "lora_checkpoint",
                 "use_gradient_checkpointing", "use_gradient_checkpointing_offload",
                 "find_unused_parameters", "initialize_model_on_cpu", "tokenizer_path"):
        assert flag in FIELDS, flag


def test_tokens_are_never_fields():
    assert [n for n in FIELDS if "token" in n] == ["tokenizer_path"]
    for key in ("hf_token", "modelscope_api_token", "hub_token"):
        (p,) = problems_of({**OK, key: "abc123"})
        assert p.startswith(f"{key}: secrets are never stored")
        assert "abc123" not in p


def test_config_module_imports_nothing_heavy():
    # cli and presets import every other module of backend/config/ (paths: the rest).
    code = ("import sys, backend.config.cli, backend.config.presets, backend.config.paths; "
            "heavy = [m for m in ('torch', 'accelerate', 'deepspeed', 'diffusers', "
            "'transformers', 'gradio') if m in sys.modules]; print(heavy)")
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True,
                         text=True, check=True)
    assert out.stdout.strip() == "[]"


# ------------------------------------------------------------------------------ validation
INVALID = [
    # single fields
    ({"lora_rank": 0}, "lora_rank"),
    ({"lora_rank": "big"}, "lora_rank"),
    ({"lora_rank": 4096}, "lora_rank"),
    ({"learning_rate": 0}, "learning_rate"),
    ({"learning_rate": "fast"}, "learning_rate"),
    ({"num_epochs": 0}, "num_epochs"),
    ({"mixed_precision": "fp8"}, "mixed_precision"),
    ({"zero_stage": 4}, "zero_stage"),
    ({"offload_param_device": "disk"}, "offload_param_device"),
    ({"height": 100, "width": 96}, "height"),
    ({"max_pixels": 10}, "max_pixels"),
    ({"dataset_repeat": 0}, "dataset_repeat"),
    ({"sample_steps": 0}, "sample_steps"),
    ({"sample_cfg": 0.5}, "sample_cfg"),
    ({"sample_height": 1000}, "sample_height"),
    ({"stages": ["train", "evaluate"]}, "stages"),
    ({"stages": []}, "stages"),
    ({"main_process_port": 70000}, "main_process_port"),
    ({"num_processes": 0}, "num_processes"),
    ({"gpu_ids": "0;1"}, "gpu_ids"),
    ({"seed": -1}, "seed"),
    ({"task": "sft:everything"}, "task"),
    ({"model_family": "flux"}, "model_family"),
    ({"download_source": "s3"}, "download_source"),
    ({"lora_rnak": 16}, "lora_rnak"),
    ({"sample_lora_scales": []}, "sample_lora_scales"),
    ({"gradient_clipping": 0}, "gradient_clipping"),
    ({"weight_decay": 2}, "weight_decay"),
    ({"hub_endpoint": "ftp://mirror"}, "hub_endpoint"),
    ({"use_gradient_checkpointing": "maybe"}, "use_gradient_checkpointing"),
    ({"sub_group_size": 0}, "sub_group_size"),
    # cross-field rules
    ({"offload_param_device": "cpu", "zero_stage": 2}, "offload_param_device"),
    ({"offload_optimizer_device": "cpu", "zero_stage": 0}, "offload_optimizer_device"),
    ({"offload_optimizer_device": "nvme", "zero_stage": 2, "offload_nvme_path": "/nvme"},
     "offload_optimizer_device"),
    ({"offload_param_device": "nvme", "zero_stage": 3}, "offload_nvme_path"),
    ({"num_machines": 2, "num_processes": 4, "main_process_port": 29500}, "main_process_ip"),
    ({"num_machines": 2, "num_processes": 4, "main_process_ip": "10.0.0.1"},
     "main_process_port"),
    ({"main_process_port": 80}, "main_process_port"),
    ({"machine_rank": 1}, "machine_rank"),
    ({"num_machines": 2, "num_processes": 1, "main_process_ip": "h", "main_process_port": 2000},
     "num_processes"),
    ({"num_machines": 2, "num_processes": 3, "main_process_ip": "h", "main_process_port": 2000},
     "num_processes"),
    ({"num_processes": 2, "gpu_ids": "0"}, "gpu_ids"),
    ({"gpu_ids": "1,1"}, "gpu_ids"),
    ({"height": 512}, "width"),
    ({"width": 512}, "height"),
    ({"use_gradient_checkpointing_offload": True}, "use_gradient_checkpointing_offload"),
    ({"use_gradient_checkpointing_offload": True, "use_gradient_checkpointing": True,
      "zero_stage": 3}, "use_gradient_checkpointing_offload"),
    ({"cpu_checkpointing": True}, "cpu_checkpointing"),
    ({"partition_activations": True, "zero_stage": 2}, "partition_activations"),
    ({"model_id_with_origin_paths": None}, "model_id_with_origin_paths"),
    ({"model_paths": "not json"}, "model_paths"),
    ({"model_paths": '{"a": 1}'}, "model_paths"),
    ({"lora_target_modules": " , "}, "lora_target_modules"),
    ({"keep_last_n_checkpoints": 3}, "keep_last_n_checkpoints"),
    ({"resume_from": "out/state", "lora_checkpoint": "a.safetensors"}, "lora_checkpoint"),
    ({"stages": ["train", "data_process"]}, "stages"),
    ({"stages": ["train", "train"]}, "stages"),
    ({"split_training": False}, "stages"),
    ({"dataset_base_path": ""}, "dataset_base_path"),
    ({"sample_prompts": ["  "]}, "sample_prompts"),
    ({"sample_lora_scales": [0, 9]}, "sample_lora_scales"),
    ({"sample_every_n_steps": 10, "stages": ["sample"]}, "sample_every_n_steps"),
]


@pytest.mark.parametrize("data,field", INVALID, ids=[f"{f}-{i}" for i, (_, f) in
                                                      enumerate(INVALID)])
def test_invalid_config_names_the_field(data, field):
    problems = problems_of({**OK, **data})
    mine = [p for p in problems if p.startswith(f"{field}: ")]
    assert mine, problems
    assert all("(got " in p and "allowed" in p for p in mine), mine


def test_all_problems_are_reported_at_once():
    text = str(pytest.raises(ConfigError, validate, {
        "lora_rank": 0, "mixed_precision": "fp8", "zero_stage": 1,
        "offload_param_device": "cpu", "height": 64}).value)
    for field in ("lora_rank", "mixed_precision", "offload_param_device", "width",
                  "dataset_base_path"):
        assert f"\n  {field}: " in text, text


def test_unknown_key_suggests_the_close_name():
    (p,) = problems_of({**OK, "learning_rat": 1e-3})
    assert p.startswith("learning_rat: unknown option") and "did you mean learning_rate" in p


def test_the_reference_spellings_are_accepted():
    cfg = validate({**OK, "sub_group_size": "1e9", "reduce_bucket_size": 5e7,
                    "learning_rate": "1e-4", "max_steps": "none", "dataset_metadata_path": "",
                    "use_gradient_checkpointing": "true"})
    assert cfg.sub_group_size == 1_000_000_000 and cfg.reduce_bucket_size == 50_000_000
    assert cfg.learning_rate == 1e-4 and cfg.max_steps is None
    assert cfg.dataset_metadata_path is None and cfg.use_gradient_checkpointing is True


def test_presets_may_leave_the_dataset_out():
    assert validate({}, require_inputs=False).dataset_base_path == ""
    assert "dataset_base_path" in ConfigError(problems_of({})).fields()


# ------------------------------------------------------------------------------ files
def write(path: Path, data: dict) -> Path:
    path.write_text(yaml.safe_dump(data), encoding="utf-8")
    return path


def test_save_load_round_trip(tmp_path):
    cfg = validate({**OK, "lora_rank": 8, "sample_prompts": ["a", "b: c"], "zero_stage": 3,
                    "offload_param_device": "cpu", "sample_lora_scales": [0, 0.5, 1]})
    path = cfg.save(tmp_path / "run.yaml")
    assert yaml.safe_load(path.read_text())["schema_version"] == SCHEMA_VERSION
    again = load_config(path)
    assert again == cfg
    small = cfg.save(tmp_path / "small.yaml", only_changed=True)
    assert set(yaml.safe_load(small.read_text())) == {
        "schema_version", "model_family", "dataset_base_path", "lora_rank", "sample_prompts",
        "zero_stage", "offload_param_device", "sample_lora_scales"}
    assert load_config(small) == cfg


def test_file_errors_name_the_file_and_key(tmp_path):
    path = write(tmp_path / "bad.yaml", {**OK, "lora_rnak": 3, "zero_stage": 9})
    err = pytest.raises(ConfigError, load_config, path).value
    assert str(path) in str(err)
    assert err.fields() == ["lora_rnak", "zero_stage"]


@pytest.mark.parametrize("version", [0, 99, "one", True])
def test_unsupported_schema_versions_are_refused(tmp_path, version):
    path = write(tmp_path / "old.yaml", {"schema_version": version, **OK})
    assert pytest.raises(ConfigError, load_config, path).value.fields() == ["schema_version"]


def test_migrate_reads_unversioned_mappings_as_current():
    assert migrate({"lora_rank": 4}) == {"lora_rank": 4}
    assert migrate({"schema_version": SCHEMA_VERSION, "lora_rank": 4}) == {"lora_rank": 4}


def test_not_a_mapping_and_broken_yaml(tmp_path):
    (tmp_path / "list.yaml").write_text("- a\n- b\n")
    (tmp_path / "broken.yaml").write_text("a: [1, 2\n")
    assert pytest.raises(ConfigError, load_config, tmp_path / "list.yaml").value.fields() == [
        "config"]
    assert pytest.raises(ConfigError, load_config, tmp_path / "broken.yaml").value.fields() == [
        "config"]
    assert pytest.raises(ConfigError, load_config, tmp_path / "nope.yaml").value.fields() == [
        "config"]


def test_resolve_paths_makes_local_paths_absolute(tmp_path, monkeypatch):
    (tmp_path / "weights").mkdir()
    (tmp_path / "weights" / "a.safetensors").write_bytes(b"")
    cfg = validate({"dataset_base_path": "data", "dataset_metadata_path": "data/m.csv",
                    "model_id_with_origin_paths": "weights,Qwen/Qwen-Image:vae/x.safetensors",
                    "model_paths": '["weights/a.safetensors", ["s1", "s2"]]',
                    "tokenizer_path": "Qwen/Qwen-Image:tokenizer/", "output_path": "out"})
    monkeypatch.delenv("ZEROLORA_MODELS_DIR", raising=False)
    r = resolve_paths(cfg, tmp_path)
    assert r.dataset_base_path == str(tmp_path / "data")
    assert r.dataset_metadata_path == str(tmp_path / "data" / "m.csv")
    assert r.output_path == str(tmp_path / "out")
    assert r.models_dir == str(tmp_path / "models")
    assert r.model_id_with_origin_paths == f"{tmp_path / 'weights'},Qwen/Qwen-Image:vae/x.safetensors"
    assert r.model_paths == (f'["{tmp_path}/weights/a.safetensors", ["{tmp_path}/s1", '
                             f'"{tmp_path}/s2"]]')
    assert r.tokenizer_path == "Qwen/Qwen-Image:tokenizer/"
    monkeypatch.setenv("ZEROLORA_MODELS_DIR", str(tmp_path / "shared-models"))
    assert resolve_paths(cfg, tmp_path).models_dir == str(tmp_path / "shared-models")
    custom = cfg.model_copy(update={"models_dir": "mine"})
    assert resolve_paths(custom, tmp_path).models_dir == str(tmp_path / "mine")


# ------------------------------------------------------------------------------ stage CLI
def test_cli_beats_file_beats_default(tmp_path):
    path = write(tmp_path / "run.yaml", {**OK, "lora_rank": 8, "learning_rate": 0.001})
    cfg, ns = parse_stage_args(["--config", str(path), "--lora_rank", "16",
                                "--no-offline", "--use_gradient_checkpointing",
                                "--sample_lora_scales", "0", "0.5",
                                "--dataset_metadata_path", "none"])
    assert cfg.lora_rank == 16            # CLI
    assert cfg.learning_rate == 0.001     # file
    assert cfg.num_epochs == 1            # default
    assert cfg.use_gradient_checkpointing is True and cfg.offline is False
    assert cfg.sample_lora_scales == [0.0, 0.5] and cfg.dataset_metadata_path is None
    assert ns.config == str(path)


def test_cli_reports_unknown_flags_and_bad_values_by_name(tmp_path):
    err = pytest.raises(ConfigError, parse_stage_args, [*_ok_args(), "--lora_rnak", "4",
                                                        "--frobnicate", "x"]).value
    assert err.fields() == ["lora_rnak", "frobnicate"]
    assert "did you mean lora_rank" in str(err)
    err = pytest.raises(ConfigError, parse_stage_args, [*_ok_args(), "--lora_rank",
                                                        "many"]).value
    assert err.fields() == ["lora_rank"]


def test_cli_refuses_unknown_keys_in_the_file(tmp_path):
    path = write(tmp_path / "run.yaml", {**OK, "dataset_repeats": 3})
    err = pytest.raises(ConfigError, parse_stage_args, ["--config", str(path)]).value
    assert err.fields() == ["dataset_repeats"] and str(path) in str(err)


def _ok_args() -> list[str]:
    return ["--dataset_base_path", "data"]


@pytest.mark.parametrize("stage", ["train", "sample"])
def test_stage_command_refuses_an_unknown_key_by_name(tmp_path, stage):
    """The real stage module exits with the schema message before loading any model."""
    path = write(tmp_path / "bad.yaml", {**OK, "lora_rnak": 4, "sample_prompts": ["x"]})
    argv = [sys.executable, "-m", f"backend.stages.{stage}", "--config", str(path)]
    if stage == "sample":
        argv += ["--output_dir", str(tmp_path / "samples")]
    else:
        argv += ["--output_path", str(tmp_path / "out"), "--progress_file",
                 str(tmp_path / "progress.jsonl")]
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.run(argv, cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "lora_rnak: unknown option" in proc.stderr
    assert "did you mean lora_rank" in proc.stderr
    assert not (tmp_path / "out").exists() and not (tmp_path / "samples").exists()


def test_a_wrong_field_is_not_reported_again_by_the_rules_that_use_it():
    assert problems_of({**OK, "zero_stage": 9, "offload_param_device": "cpu"}) == [
        "zero_stage: input should be less than or equal to 3 (got 9; allowed ≥ 0 and ≤ 3)"]
    (p,) = problems_of({**OK, "tokenizer_pth": "x"})
    assert p.startswith("tokenizer_pth: unknown option") and "did you mean tokenizer_path" in p


# ------------------------------------------------------------------------------ sources
def test_a_bad_flag_is_reported_as_from_the_command_line_not_the_config_file(tmp_path):
    path = write(tmp_path / "run.yaml", {**OK, "lora_rank": 8})
    err = pytest.raises(ConfigError, parse_stage_args,
                        ["--config", str(path), "--lora_rank", "many"]).value
    assert err.source == "the command line"
    assert str(err).splitlines()[0] == "Invalid run config in the command line:"
    assert str(path) not in str(err)
    err = pytest.raises(ConfigError, parse_stage_args,
                        ["--config", str(path), "--lora_rnak", "4"]).value
    assert err.source == "the command line" and err.fields() == ["lora_rnak"]


def test_problems_from_the_file_and_the_flags_each_name_their_source(tmp_path):
    path = write(tmp_path / "run.yaml", {**OK, "zero_stage": 9})
    err = pytest.raises(ConfigError, parse_stage_args,
                        ["--config", str(path), "--lora_rank", "many"]).value
    lines = dict(zip(err.fields(), str(err).splitlines()[1:]))
    assert lines["zero_stage"].endswith(f"[from {path}]")
    assert lines["lora_rank"].endswith("[from the command line]")
    # A file alone still names the file.
    err = pytest.raises(ConfigError, parse_stage_args, ["--config", str(path)]).value
    assert err.source == str(path)


def test_a_bad_value_in_a_user_preset_names_the_preset_not_the_api_call(tmp_path):
    """A preset file with the values of an API call on top (``validate_layers``): each
    problem names the layer its value came from."""
    from backend.config.presets import read_preset
    from backend.config.validation import validate_layers

    ws = tmp_path / "ws"
    (ws / "presets").mkdir(parents=True)
    write(ws / "presets" / "mine.yaml", {"schema_version": SCHEMA_VERSION, "lora_rank": 0})
    data, path = read_preset("mine", ws)
    err = pytest.raises(ConfigError, validate_layers,
                        [(str(path), data), ("start_run", {**OK, "seed": 1})]).value
    assert err.source == str(path) and err.fields() == ["lora_rank"]
    err = pytest.raises(ConfigError, validate_layers,
                        [(str(path), data), ("start_run", {**OK, "seed": -1})]).value
    assert "lora_rank: " in str(err) and f"[from {path}]" in str(err)
    assert "[from start_run]" in str(err)
    # load_preset on top of the form's settings: the preset file is named.
    from backend.config.presets import load_preset

    err = pytest.raises(ConfigError, load_preset, "mine", ws, base=RunConfig(**OK)).value
    assert err.source == str(path)
