"""The validation area's messages by key: every problem the run config's checks, its files,
presets, the stage command line, the paths a signed-in user's run may name, the quotas and
the refusals of the start/resume services can produce is a ``Msg`` whose Chinese holds no
English, and whose English is what the CLI and the logs read."""
from __future__ import annotations

import json
import os
from pathlib import Path
from types import SimpleNamespace

import pytest

from backend.config import cli, files, presets
from backend.config.errors import ConfigError
from backend.config.schema import FIELDS, RunConfig
from backend.config.validation import validate, validate_layers
from backend.core.messages import EN, Msg, codes
from webui.messages import english_left

ALL_VALIDATION = {c for c in EN if c.split(".")[0] in ("validation", "config", "problems")}
BAD_VALUES = ("abc", -(10**13), 10**13, 3.7, 17, [], ["x"], "", {"a": 1}, None, True, "1.5",
              [1], ["x"] * 3, "a" * 250, 0, -1, float("nan"), "x\x00", "   ", [None], 520,
              -0.5, 2.0, [5.0], ["bad"], "none", "zz:yy", 10**30)


def assert_both_languages(m) -> str:
    """``m`` is a message whose Chinese reads without English; its Chinese."""
    assert isinstance(m, Msg), f"not a message: {m!r}"
    zh = m.text("zh")
    assert english_left(zh) == [], (str(m), zh, english_left(zh))
    return zh


def problems_of(fn) -> ConfigError:
    with pytest.raises(ConfigError) as e:
        fn()
    err = e.value
    for p in err.problems:
        assert_both_languages(p)
    assert_both_languages(err.message)
    assert str(err) == str(err.message)
    return err


# ---------------------------------------------------------------------- one field
def test_every_one_field_problem_is_a_message_in_both_languages():
    seen: set[str] = set()
    for name in FIELDS:
        for value in BAD_VALUES:
            try:
                validate({name: value}, require_inputs=False)
            except ConfigError as e:
                for p in e.problems:
                    assert_both_languages(p)
                    seen |= codes(p)
    # Every pydantic error type the schema raises has a template reproducing its English.
    assert "validation.pydantic.other" not in seen
    assert {"validation.pydantic.greater_than_equal", "validation.pydantic.less_than_equal",
            "validation.pydantic.greater_than", "validation.pydantic.multiple_of",
            "validation.pydantic.int_parsing", "validation.pydantic.int_from_float",
            "validation.pydantic.literal_error", "validation.pydantic.not_a_family",
            "validation.not_expected_form", "validation.at_item",
            "validation.allowed.list_of", "validation.allowed.or_empty",
            "validation.allowed.lokr_factor", "validation.allowed.gpu_ids",
            "validation.allowed.http_url", "validation.allowed.at_most_chars",
            "validation.allowed.non_empty_text", "validation.allowed.at_least_items",
            "validation.allowed.text", "validation.allowed.multiple_of",
            "validation.allowed.parts"} <= seen, sorted(ALL_VALIDATION - seen)
    for data in ({"lora_rnak": 3}, {"hf_token": "x"}, {"nonsense_option": 1}):
        problems_of(lambda: validate(data, require_inputs=False))


def test_one_field_problems_read_as_before_in_english_and_in_chinese():
    e = problems_of(lambda: validate({"lora_rank": 0}, require_inputs=False))
    (p,) = e.problems
    assert p == "lora_rank: input should be greater than or equal to 1 (got 0; allowed ≥ 1 " \
                "and ≤ 1024)"
    assert p.code == "validation.field_problem" and p.params["field"] == "lora_rank"
    assert p.text("zh") == "`lora_rank`：应大于或等于 1（当前：`0`；允许：≥ 1 且 ≤ 1024）"
    assert e.fields() == ["lora_rank"]
    e = problems_of(lambda: validate({"sample_lora_scales": ["x"]}, require_inputs=False))
    assert "at item 0" in e.problems[0]
    assert "（第 0 项）" in e.problems[0].text("zh")
    e = problems_of(lambda: validate({"lora_rnak": 3}, require_inputs=False))
    assert e.problems[0] == ("lora_rnak: unknown option (got 3; allowed: the fields of the run "
                             "schema; did you mean lora_rank?)")
    assert e.problems[0].text("zh") == ("`lora_rnak`：未知选项（当前：`3`；允许：运行配置中的字段；"
                                        "是不是想写 lora_rank？）")
    e = problems_of(lambda: validate({"hf_token": "secret"}, require_inputs=False))
    assert "secrets are never stored" in e.problems[0] and "secret'" not in str(e)
    e = problems_of(lambda: validate({"task": "x"}, require_inputs=False))
    assert e.problems[0].startswith("task: input should be 'sft', 'sft:data_process' or "
                                    "'sft:train' (got 'x'")
    assert "应为 'sft', 'sft:data_process' 或 'sft:train' 之一" in e.problems[0].text("zh")


# ---------------------------------------------------------------------- rules between fields
RULE_CASES = (
    {"model_family": "z_image",
     "model_id_with_origin_paths": "Qwen/Qwen-Image:transformer/*.safetensors"},
    {"zero_stage": 0, "offload_param_device": "cpu"},
    {"zero_stage": 0, "offload_optimizer_device": "cpu"},
    {"zero_stage": 2, "offload_optimizer_device": "nvme"},
    {"zero_stage": 3, "offload_param_device": "nvme"},
    {"cpu_checkpointing": True, "zero_stage": 2},
    {"zero_stage": 2, "use_gradient_checkpointing_offload": True,
     "ds_activation_checkpointing": True, "use_gradient_checkpointing": True},
    {"num_machines": 2, "num_processes": 1},
    {"num_machines": 2, "num_processes": 3, "machine_rank": 5, "main_process_port": 80},
    {"gpu_ids": "0,0"}, {"gpu_ids": "0", "num_processes": 2}, {"height": 512},
    {"model_id_with_origin_paths": "Wan-AI/Wan2.2-TI2V-5B:diffusion_pytorch_model*.safetensors",
     "height": 48, "width": 48},
    {"model_id_with_origin_paths": ":x"}, {"model_id_with_origin_paths": "a:"},
    {"tokenizer_path": "org/x:"}, {"captioner_path": ":y"},
    {"use_gradient_checkpointing_offload": True, "use_gradient_checkpointing": False},
    {"model_id_with_origin_paths": None, "model_paths": None}, {"model_paths": "notjson"},
    {"lora_target_modules": " , "}, {"max_train_steps": 100, "max_steps": 50},
    {"keep_last_n_checkpoints": 2, "save_steps": None},
    {"resume_from": "a", "lora_checkpoint": "b"}, {"stages": ["sample", "train"]},
    {"split_training": False, "stages": ["data_process", "train"]},
    {"stages": ["sample"], "sample_prompts": [" "]}, {"sample_lora_scales": [5.0, -9]},
    {"num_frames": 10}, {"min_timestep_boundary": 0.5, "max_timestep_boundary": 0.4},
    {"frame_buckets": [0, 5, 5, 2000]},
    {"frame_extraction": "chunk", "frame_window_stride": 2, "frame_sample": 3,
     "extra_inputs": "in_context_videos"},
    {"sample_every_n_steps": 10, "stages": ["sample"]},
    {"customized_optimizer": "torch.optim.AdamW", "optimizer": "prodigy"},
    {"optimizer": "prodigy", "zero_stage": 2, "offload_optimizer_device": "cpu"},
    {"optimizer": "prodigy", "enable_optimizer_cpu_offload": True}, {"lokr_factor": 0},
    {"lora_type": "lokr", "lora_dropout": 0.1}, {"lora_type": "dora", "zero_stage": 3},
    {"lora_type": "lokr", "loraplus_lr_ratio": 16},
    {"optimizer": "prodigy", "loraplus_lr_ratio": 16},
    {"validation_every_n_steps": 10, "validation_samples": 0},
    {"aspect_buckets": True, "height": 512, "width": 512},
    {"alpha_mask": True}, {"masked_loss": True},
    {"prior_preservation": True}, {"prior_preservation": True, "class_data_path": "/no/such"},
    {"class_data_path": "x", "dop_weight": 2.0},
    {"prior_preservation": True, "class_data_path": ".", "num_class_images": 5},
    {"diff_output_preservation": True, "split_training": False, "stages": ["train"]},
    {"enable_wandb_log": True, "wandb_project": "team/project", "offline": True},
    {"enable_swanlab_log": True, "swanlab_project": "my project", "swanlab_workspace": "a b"},
    {"slurm_partition": "gpu"},
    {"executor": "slurm", "slurm_time_limit": "soon", "slurm_mem_per_task": "lots",
     "slurm_nccl_env": ["NCCL DEBUG=INFO"], "slurm_setup_lines": ["module load a\nb"]},
    {"ema_update_every": 5, "sample_use_ema": "both"},
    {"ema_decay": 0.9, "max_train_steps": 10, "ema_start_step": 11},
    {"quant_options": "bad"}, {"quant_options": "a:b:torchao_nvfp4_w4a16"},
    {"quant_options": "a:b:comfy_kitchen_fp8_w8a8"}, {"quant_options": "a:b:zzz"},
    {"quant_options": "a:transformer/x:nf4;a:transformer/y:int8"}, {"fp8_models": "bogus"},
    {"quant_options": "a:transformer/*:nf4", "zero_stage": 3},
    {"enable_model_cpu_offload": True, "zero_stage": 2},
    {"enable_model_cpu_offload": True, "num_processes": 2},
    {"enable_model_cpu_offload": True, "quant_options": "a:transformer/*:int8"},
    {"lora_type": "dora", "quant_options": "a:transformer/*:nf4"},
    {"enable_optimizer_cpu_offload": True, "optimizer": "adamw8bit"},
    {"trainable_models": "vae"}, {"trainable_models": "unet"},
    {"trainable_models": "dit", "lora_rank": 8},
    {"trainable_models": "dit", "enable_model_cpu_offload": True},
    {"trainable_models": "dit", "quant_options": "a:transformer/*:nf4"},
)


def test_every_rule_between_fields_is_a_message_in_both_languages():
    seen: set[str] = set()
    for data in RULE_CASES:
        e = problems_of(lambda: validate(data, require_inputs=False))
        seen |= codes(e.problems)
    for split, stages in ((True, ["train"]), (False, ["train"])):
        e = problems_of(lambda: validate({"split_training": split, "stages": stages,
                                          "dataset_base_path": ""}))
        seen |= codes(e.problems)
    # A distilled model trained directly (refused once the run has its inputs).
    e = problems_of(lambda: validate({"model_id_with_origin_paths":
                                      "krea/Krea-2-Turbo:transformer/*.safetensors",
                                      "dataset_base_path": str(Path.cwd())}))
    seen |= codes(e.problems)
    rules = {c for c in ALL_VALIDATION
             if c.startswith(("validation.rule.", "validation.lowvram.", "validation.quant."))}
    assert rules <= seen, f"rules no case reached: {sorted(rules - seen)}"


def test_rules_read_as_before():
    e = problems_of(lambda: validate({"zero_stage": 0, "offload_param_device": "cpu"},
                                     require_inputs=False))
    assert e.problems == ["offload_param_device: parameter offload needs ZeRO-3 (got 'cpu' "
                          "with zero_stage 0; allowed none unless zero_stage is 3)"]
    assert e.problems[0].text("zh") == (
        "`offload_param_device`：参数卸载需要 ZeRO-3（当前：'cpu'，zero_stage 为 0；允许："
        "zero_stage 为 3 时才可卸载，否则为 `none`）")
    e = problems_of(lambda: validate({"quant_options": "a:b:torchao_nvfp4_w4a16"},
                                     require_inputs=False))
    assert e.problems[0].startswith("quant_options: torchao_nvfp4_w4a16 does not run here: "
                                    "NVFP4 weights need a Blackwell GPU's FP4 kernels")
    assert "在这里不能运行：NVFP4 权重需要" in e.problems[0].text("zh")
    e = problems_of(lambda: validate({"lokr_factor": 0}, require_inputs=False))
    assert e.problems[0] == ("lokr_factor: 0 splits no dimension (got 0; allowed -1 (as "
                             "balanced as the dimension allows) or a factor from 1 to 1024)")


# ---------------------------------------------------------------------- ConfigError
def test_the_error_names_where_each_value_came_from_in_both_languages(tmp_path):
    e = problems_of(lambda: validate_layers([("a.yaml", {"lora_rank": 0}),
                                             (cli.COMMAND_LINE, {"batch_size": 0})],
                                            require_inputs=False))
    assert str(e).splitlines()[0] == "Invalid run config in a.yaml and the command line:"
    assert str(e).splitlines()[1].endswith(" [from a.yaml]")
    zh = e.message.text("zh").splitlines()
    assert zh[0] == "运行配置有误（a.yaml 和 命令行）："
    assert zh[2].endswith("（来自 命令行）"), zh
    assert e.fields() == ["lora_rank", "batch_size"]
    e = problems_of(lambda: validate({"lora_rank": 0}, require_inputs=False))
    assert e.message.text("zh").splitlines()[0] == "运行配置有误："
    (tmp_path / "p.yaml").write_text("lora_rank: 0\n")
    e = problems_of(lambda: presets.load_preset(tmp_path / "p.yaml"))
    assert str(e).splitlines()[0] == f"Invalid run config in {tmp_path / 'p.yaml'}:"
    e = problems_of(lambda: presets.load_preset(tmp_path / "p.yaml",
                                                base=RunConfig.model_construct(lora_rank=0)))


def test_a_problem_from_elsewhere_stays_as_it_is():
    e = ConfigError(["model: something another module wrote"], "x.yaml")
    assert str(e) == "Invalid run config in x.yaml:\n  model: something another module wrote"
    assert e.fields() == ["model"]
    assert e.message.text("zh").splitlines()[0] == "运行配置有误（x.yaml）："


# ---------------------------------------------------------------------- files, presets, CLI
def test_files_presets_and_the_command_line_in_both_languages(tmp_path):
    seen: set[str] = set()
    (tmp_path / "l.yaml").write_text("- 1\n")
    (tmp_path / "k.yaml").write_text("1: 2\n")
    (tmp_path / "e.yaml").write_text("")
    (tmp_path / "b.yaml").write_bytes(b"a: \xff\n")
    (tmp_path / "v.yaml").write_text("schema_version: 99\n")
    (tmp_path / "d").mkdir()
    for name in ("l", "k", "v", "missing"):
        seen |= codes(problems_of(lambda: files.read_yaml(tmp_path / f"{name}.yaml")).problems)
    seen |= codes(problems_of(lambda: files.read_yaml(tmp_path / "e.yaml", "preset")).problems)
    seen |= codes(problems_of(lambda: files.read_yaml(tmp_path / "b.yaml")).problems)
    unreadable = tmp_path / "u.yaml"
    unreadable.write_text("a: 1\n")
    unreadable.chmod(0)
    try:
        if not os.access(unreadable, os.R_OK):  # (root reads everything)
            e = problems_of(lambda: files.read_yaml(unreadable))
            seen |= codes(e.problems)
            assert "无法读取（\"Permission denied\"" in e.problems[0].text("zh")
    finally:
        unreadable.chmod(0o600)
    ws = tmp_path / "ws"
    for name, kw in (("bad name!", {}), ("x.yaml", {}), ("cpu_demo", {}),
                     ("ok", {"shared": True, "admin": False})):
        seen |= codes(problems_of(lambda: presets.save_preset(RunConfig(), name, ws,
                                                              **kw)).problems)
    seen |= codes(problems_of(lambda: presets.save_preset(RunConfig(), "ok", None)).problems)
    seen |= codes(problems_of(lambda: presets.save_preset(
        RunConfig(hub_endpoint="https://mirror.example"), "mine", ws, user="bob",
        admin=False)).problems)
    for kw in ({}, {"admin": False}):
        seen |= codes(problems_of(lambda: presets.read_preset("nope.yaml", ws, **kw)).problems)
    seen |= codes(problems_of(lambda: presets.read_preset("nope", ws)).problems)
    seen |= codes(problems_of(lambda: presets.read_preset("x", ws, user="bad user!")).problems)
    e = problems_of(lambda: presets.save_preset(RunConfig(), "x.yaml", ws))
    assert e.problems[0] == ("name: a preset name, not a file name (got 'x.yaml'; allowed 'x': "
                             "the .yaml is added)")
    assert e.problems[0].text("zh") == ("`name`：应为预设名称，而不是文件名（当前：'x.yaml'；"
                                        "允许：'x'，`.yaml` 会自动加上）")
    e = problems_of(lambda: cli.parse_stage_args(["--lora_rnak", "3", "--bogus=1"]))
    seen |= codes(e.problems)
    assert str(e).splitlines()[0] == "Invalid run config in the command line:"
    assert e.message.text("zh").splitlines()[0] == "运行配置有误（命令行）："
    assert e.problems[0] == ("lora_rnak: unknown option (got '--lora_rnak'; allowed: see "
                             "--help; did you mean lora_rank?)")
    wanted = {c for c in ALL_VALIDATION if c.startswith(("config.preset.", "config."))
              and c.count(".") == 1 and c not in ("config.invalid", "config.invalid_in",
                                                   "config.sources_and", "config.from_source",
                                                   "config.error", "config.set_by_plan",
                                                   "config.run_name_too_long")}
    if os.access(unreadable, os.R_OK):
        wanted.discard("config.cannot_read")
    wanted |= {c for c in ALL_VALIDATION if c.startswith("config.preset.")} - {
        "config.preset.none_yet"}
    assert wanted <= seen, sorted(wanted - seen)


# ---------------------------------------------------------------------- the page
def test_the_problems_summary_shows_each_problem_in_both_languages():
    from webui.form import from_widget_value, problems_markdown

    e = problems_of(lambda: validate({"zero_stage": 0, "offload_param_device": "cpu"},
                                     require_inputs=False))
    md = problems_markdown(e.problems)
    assert '<span class="zl-en">✗ **1 problem(s)** — fix them before starting:</span>' in md
    assert '<span class="zl-zh">✗ **1 个问题**——改好后才能开始：</span>' in md
    assert "- `offload_param_device`: <span class=\"zl-en\">parameter offload needs ZeRO-3" in md
    assert '<span class="zl-zh">参数卸载需要 ZeRO-3' in md
    assert problems_markdown([]) == ('<span class="zl-en">✓ No problems.</span>'
                                     '<span class="zl-zh">✓ 没有问题。</span>')
    value, problem = from_widget_value("sample_lora_scales", "0, lots")
    assert problem == ("sample_lora_scales: not a number (got 'lots'; allowed comma-separated "
                       "numbers, e.g. 0, 0.5, 1)")
    assert assert_both_languages(problem) == ("`sample_lora_scales`：不是数字（当前：'lots'；"
                                              "允许：逗号分隔的数字，例如 0, 0.5, 1）")


# ---------------------------------------------------------------------- paths, quotas, refusals
@pytest.fixture
def signed_in(tmp_path):
    from webui import security

    security.configure(auth_enabled=True, admins=["alice"])
    yield tmp_path / "ws"
    security.configure(auth_enabled=False)
    security.configure_quotas()


def _runner(ws: Path, runs: list[dict]):
    return SimpleNamespace(workspace=ws, list_runs=lambda owner=None: list(runs))


def test_path_refusals_are_messages_in_both_languages(signed_in, tmp_path):
    from webui import security

    ws = signed_in
    models = tmp_path / "models"
    models.mkdir()
    own = ws / "datasets" / "bob" / "cats"
    own.mkdir(parents=True)
    (own / "a.png").write_bytes(b"png")
    (own / "metadata.csv").write_text("image,prompt\na.png,ok\n/etc/hostname,x\n")
    (ws / "datasets" / "bob" / "linked").mkdir()
    (ws / "datasets" / "bob" / "linked" / "b.png").symlink_to("/etc/hostname")
    (ws / "datasets" / "bob" / "escape").symlink_to("/etc", target_is_directory=True)
    bob_run = ws / "runs" / "r1"
    bob_run.mkdir(parents=True)
    runner = _runner(ws, [{"id": "r1", "run_dir": str(bob_run), "owner": "bob"}])

    def check(user="bob", runner=runner, **changes):
        problems = security.check_run_paths(RunConfig(**changes), user, ws, models_dir=models,
                                            runner=runner, cwd=tmp_path)
        for p in problems:
            assert_both_languages(p)
        return problems

    seen: set[str] = set()
    for changes in (
            {"dataset_base_path": "/etc"},
            {"dataset_base_path": str(ws / "datasets" / "bob" / "escape")},
            {"dataset_base_path": str(ws / "datasets" / "bob" / "linked")},
            {"dataset_base_path": str(own), "dataset_metadata_path": str(own / "metadata.csv")},
            {"models_dir": "/"}, {"model_id_with_origin_paths": "/etc/passwd"},
            {"model_id_with_origin_paths": "Qwen/Qwen-Image:../../etc/*"},
            {"model_id_with_origin_paths": "../../x:weights/*"},
            {"model_id_with_origin_paths": "/etc:passwd"},
            {"model_paths": json.dumps(["/etc/passwd"])},
            {"preset_lora_path": "/etc/passwd"}, {"lora_checkpoint": "/etc/passwd"},
            {"output_path": str(tmp_path / "out"), "offload_nvme_path": "/mnt/nvme",
             "hub_endpoint": "http://127.0.0.1:9"},
            {"read_roots": ["/"]}, {"dataset_base_path": "x\x00"},
            {"model_paths": "not json"}):
        problems = check(**changes)
        assert problems, changes
        seen |= codes(problems)
    seen |= codes(check(runner=None, lora_checkpoint="/etc/passwd"))
    seen |= codes(check(user=None))
    p = check(dataset_base_path="/etc")[0]
    assert p == (f"dataset_base_path: outside your dataset folders (got '/etc'; allowed a "
                 f"folder under {ws / 'datasets' / 'bob'}/, the demo dataset "
                 f"(backend/assets/) or a folder of one of your runs)")
    assert p.text("zh") == (f"`dataset_base_path`：不在你的数据集文件夹中（当前：'/etc'；允许："
                            f"{ws / 'datasets' / 'bob'}/ 下的文件夹、演示数据集（backend/assets/），"
                            f"或你某个运行的文件夹）")
    # The Dataset tab's check, a write, and a user name that is none.
    for problems in (security.check_dataset_paths("/etc", None, "bob", ws, write=True),
                     security.check_dataset_paths("x\x00", None, "bob", ws),
                     security.check_run_paths(RunConfig(), "../carol", ws)):
        assert problems
        for p in problems:
            assert_both_languages(p)
        seen |= codes(problems)
    with pytest.raises(security.AccessDenied) as denied:
        security.user_dataset_root(ws, "../carol")
    assert_both_languages(denied.value.args[0])
    # A run resumed: its run.yaml and the links in its folder are checked again.
    run = {"id": "r1", "run_dir": str(bob_run), "owner": "bob", "config_yaml": ""}
    for text in ("a: [\n", "- 1\n"):
        (bob_run / "run.yaml").write_text(text)
        seen |= codes(_resume(runner, run, ws))
    (bob_run / "run.yaml").unlink()
    (bob_run / "run.yaml").symlink_to("/etc/hostname")
    seen |= codes(_resume(runner, run, ws))
    (bob_run / "run.yaml").unlink()
    (bob_run / "out").symlink_to("/etc")
    seen |= codes(_resume(runner, run, ws))
    wanted = {c for c in ALL_VALIDATION if c.startswith("config.path.")} - {
        "config.path.too_many_files"}
    assert wanted <= seen, sorted(wanted - seen)


def _resume(runner, run, ws) -> list:
    from webui import security

    problems = security.check_resume_paths(runner, run, "bob", ws)
    assert problems
    for p in problems:
        assert_both_languages(p)
    return problems


def test_quota_refusals_are_messages_in_both_languages(signed_in):
    from webui.security import quota

    ws = signed_in
    root = ws / "datasets" / "bob"
    (root / "one").mkdir(parents=True)
    (root / "one" / "a.png").write_bytes(b"12345")
    quota.configure_quotas(datasets_count=1)
    (p,) = quota.dataset_problems(root, "bob")
    assert p == "name: you have 1 dataset folders (allowed up to 1; delete one first)"
    assert assert_both_languages(p) == "`name`：你已有 1 个数据集文件夹（允许：最多 1 个；请先删除一个）"
    quota.configure_quotas(datasets_bytes=4)
    (p,) = quota.dataset_problems(root, "bob")
    assert_both_languages(p)
    run_dir = ws / "runs" / "r1"
    from backend.core.rundir import RunDir

    RunDir(run_dir).cache.mkdir(parents=True)
    (RunDir(run_dir).cache / "x.bin").write_bytes(b"0" * 64)
    quota.configure_quotas(cache_bytes=8)
    (p,) = quota.cache_problems(_runner(ws, [{"run_dir": str(run_dir), "owner": "bob"}]), "bob")
    assert p.startswith("cache: the stage-1 caches of your runs hold ")
    assert_both_languages(p)


def test_service_refusals_keep_their_messages(signed_in, monkeypatch):
    from backend.jobs.runner import RunnerError
    from webui import services

    ws = signed_in
    seen: set[str] = set()

    def refused(fn) -> services.Refused:
        with pytest.raises(services.Refused) as e:
            fn()
        assert_both_languages(e.value.headline)
        for p in e.value.problems:
            assert_both_languages(p)
        seen.update(codes(e.value.headline) | codes(e.value.problems))
        return e.value

    def submit(cfg, **kw):
        raise ConfigError([Msg("validation.field_problem", field="lora_rank",
                               problem=Msg("validation.rule.resume_or_lora"))])

    runner = SimpleNamespace(workspace=ws, list_runs=lambda owner=None: [], submit=submit)
    where = SimpleNamespace(runner=runner, workspace=ws, models_dir=None)
    e = refused(lambda: services.start_run(where, RunConfig(dataset_base_path="/etc"), "bob"))
    assert e.headline == "1 path(s) not allowed" and e.headline.text("zh") == "1 个路径不允许"
    assert e.problems[0].code == "validation.field_problem"
    refused(lambda: services.start_run(where, RunConfig(), "alice", name="x" * 500))
    refused(lambda: services.start_run(where, RunConfig(output_path="/x"), "alice"))
    e = refused(lambda: services.start_run(where, RunConfig(), "alice"))
    assert e.headline == "1 problem(s) its stages would refuse"
    from webui import jobs
    from backend.planning import caption_job

    def bad_render(*a, **k):
        raise ConfigError([Msg("validation.field_problem", field="sample_steps",
                               problem=Msg("validation.rule.resume_or_lora"))])

    monkeypatch.setattr(jobs, "submit_render", bad_render)
    refused(lambda: services.render(where, {"id": "r1"}, {}, [], "alice"))
    from backend.data.captions import CaptionError

    def bad_caption(*a, **k):
        raise CaptionError([Msg("validation.field_problem", field="dataset_base_path",
                                problem=Msg("validation.rule.dataset_existing_folder"))])

    monkeypatch.setattr(caption_job, "submit_caption", bad_caption)
    refused(lambda: services.caption(where, RunConfig(), "alice"))
    wanted = {c for c in ALL_VALIDATION if c.startswith("config.refused.")} | {
        "config.set_by_plan", "config.run_name_too_long"}
    assert wanted <= seen, sorted(wanted - seen)
    # Text from elsewhere stays text, tokens hidden as before.
    token = "hf_" + "abcdefghijklmnopqrstuvwxyz123456"

    def fails(cfg, **kw):
        raise RunnerError(f"the queue is full ({token})")

    runner.submit = fails
    with pytest.raises(services.Refused) as raised:
        services.start_run(where, RunConfig(), "alice")
    assert "the queue is full" in raised.value.headline
    assert token not in raised.value.headline


def test_hiding_server_paths_keeps_a_message_a_message(signed_in):
    from webui import services

    m = Msg("validation.field_problem", field="models_dir",
            problem=Msg("config.path.not_models_dir", got=Msg("config.path.got", got="'/srv/x'")))
    out = services.each_text(m, lambda t: t.replace("/srv/x", "<models folder>/x"))
    assert isinstance(out, Msg) and out.code == m.code
    assert "'<models folder>/x'" in out and "'<models folder>/x'" in out.text("zh")
    assert services.each_text("a /srv/x", lambda t: t.upper()) == "A /SRV/X"


def test_pydantic_errors_the_schema_does_not_raise_today_read_the_same():
    """Templates of error types no field raises yet (and pydantic's own words for a type
    without one), driven through pydantic itself."""
    from typing import Annotated

    from pydantic import AfterValidator, Field, ValidationError, create_model

    from backend.config.validation import pydantic_problem

    def boom(value):
        raise ValueError("boom")

    cases = {
        "validation.pydantic.less_than": (Annotated[int, Field(lt=5)], 7),
        "validation.pydantic.string_too_long_one": (Annotated[str, Field(max_length=1)], "ab"),
        "validation.pydantic.string_too_short": (Annotated[str, Field(min_length=2)], "a"),
        "validation.pydantic.too_short": (Annotated[list[int], Field(min_length=2)], [1]),
        "validation.pydantic.value_error": (Annotated[int, AfterValidator(boom)], 1),
        "validation.pydantic.other": (dict[str, int], 3),
    }
    for code, (annotation, value) in cases.items():
        model = create_model("M", x=(annotation, ...))
        with pytest.raises(ValidationError) as e:
            model.model_validate({"x": value})
        err = e.value.errors()[0]
        m = pydantic_problem(err)
        assert m.code == code, (code, err)
        assert m == err["msg"][:1].lower() + err["msg"][1:]
        assert_both_languages(m)
    # A message whose wording no longer matches its template is pydantic's own, quoted.
    m = pydantic_problem({"type": "int_type", "msg": "Input must be an integer", "ctx": {}})
    assert m.code == "validation.pydantic.other" and m == "input must be an integer"
    assert m.text("zh") == '"input must be an integer"'


def test_the_rarer_file_and_folder_problems(tmp_path, monkeypatch, signed_in):
    from backend.core import bounded
    from webui import security
    from webui.security import paths

    def denied(*a, **k):
        raise PermissionError(13, "Permission denied")

    (tmp_path / "c.yaml").write_text("a: 1\n")
    monkeypatch.setattr(bounded, "read_text", denied)
    e = problems_of(lambda: files.read_yaml(tmp_path / "c.yaml"))
    assert e.problems[0] == "config: cannot read (Permission denied; allowed a readable YAML file)"
    assert e.problems[0].text("zh") == ('`config`：无法读取（"Permission denied"；允许：可读取的 '
                                        'YAML 文件）')
    monkeypatch.setattr(presets, "PRESETS_DIR", tmp_path / "none")
    e = problems_of(lambda: presets.read_preset("nope", tmp_path / "ws"))
    assert e.problems[0].endswith("(got 'nope'; allowed none yet)")
    ws = signed_in
    own = ws / "datasets" / "bob" / "many"
    own.mkdir(parents=True)
    for i in range(3):
        (own / f"{i}.png").write_bytes(b"png")
    monkeypatch.setattr(paths, "MAX_DATASET_ENTRIES", 2)
    (p,) = security.check_dataset_paths(str(own), None, "bob", ws)
    assert p == ("dataset_base_path: too many files to check (got more than 2; allowed up to "
                 "2)")
    assert_both_languages(p)
