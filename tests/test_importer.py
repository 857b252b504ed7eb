"""Importing the reference's command lines; exporting a run as a shell script."""
from __future__ import annotations

import json
import os
import shutil
import subprocess


from backend.config.files import load_config
from backend.config.validation import validate
from backend.families.qwen_image import SPEC as QWEN_IMAGE

QWEN_IMAGE_SOURCES = QWEN_IMAGE.defaults["model_id_with_origin_paths"]
QWEN_IMAGE_TARGETS = QWEN_IMAGE.defaults["lora_target_modules"]
from backend.planning.importer import export_shell_script, import_commands, split_commands
from backend.planning.plan import deepspeed_config, plan_run
from tests.harness.seeds import (SEED_COMMANDS, SEED_DEEPSPEED_JSON, SEED_DIR, comparable,
                                 load_accelerate, write_seed_files)


def test_split_commands_handles_continuations_quotes_comments_and_separators():
    text = ('# set-up\ncd repo && A=1 python train.py --x "a b" \\\n  --y \'c;d\' ; echo hi\n'
            'python t.py --prompt "two\nlines"\n')
    assert split_commands(text) == [
        ["cd", "repo"], ["A=1", "python", "train.py", "--x", "a b", "--y", "c;d"],
        ["echo", "hi"], ["python", "t.py", "--prompt", "two\nlines"]]


def test_the_seed_commands_import_into_the_low_vram_recipe(tmp_path):
    write_seed_files(tmp_path)
    result = import_commands(SEED_COMMANDS, base_dir=tmp_path)
    cfg = result.config
    assert cfg.split_training and cfg.stages == ["data_process", "train", "sample"]
    # Data from stage 1 (stage 2's dataset is the reference's cache).
    assert cfg.dataset_base_path == str(tmp_path / "data" / "example_image_dataset")
    assert cfg.dataset_metadata_path == str(tmp_path / "data/example_image_dataset/metadata.csv")
    # Training from stage 2, models from both.
    assert (cfg.dataset_repeat, cfg.num_epochs, cfg.learning_rate, cfg.lora_rank) == (
        50, 5, 1e-4, 32)
    assert cfg.model_id_with_origin_paths == QWEN_IMAGE_SOURCES
    assert cfg.lora_target_modules == QWEN_IMAGE_TARGETS and cfg.remove_prefix_in_ckpt == \
        "pipe.dit."
    assert cfg.use_gradient_checkpointing and cfg.find_unused_parameters
    assert cfg.initialize_model_on_cpu and cfg.dataset_num_workers == 8
    # DeepSpeed from stage 2's files.
    assert (cfg.zero_stage, cfg.offload_optimizer_device, cfg.offload_param_device) == (
        3, "cpu", "cpu")
    assert cfg.pin_memory and cfg.zero3_init_flag and cfg.ds_activation_checkpointing
    assert (cfg.reduce_bucket_size, cfg.stage3_prefetch_bucket_size, cfg.sub_group_size) == (
        50_000_000, 50_000_000, 1_000_000_000)
    assert result.not_understood == []
    notes = "\n".join(result.notes)
    assert "Qwen-Image_lora-splited-cache" in notes and "mixed precision" in notes

    # ... and the files planned from it carry the seed's settings.
    run = tmp_path / "run"
    plan_run(cfg, run, cuda=True)
    assert json.loads((run / "deepspeed_train.json").read_text()) == json.loads(
        SEED_DEEPSPEED_JSON)
    seed_yaml = tmp_path / SEED_DIR / "deepspeed_zero3_cpuoffload.yaml"
    assert comparable(load_accelerate(run / "accelerate_train.yaml")) == comparable(
        load_accelerate(seed_yaml))
    assert load_accelerate(run / "accelerate_data_process.yaml")["distributed_type"] == "NO"


def test_deepspeed_settings_follow_the_files(tmp_path):
    acc, ds_file = write_seed_files(tmp_path)
    ds = json.loads(SEED_DEEPSPEED_JSON)
    ds["zero_optimization"].update(stage=2, reduce_bucket_size=2e8, overlap_comm=True)
    del ds["zero_optimization"]["offload_param"]
    ds["zero_optimization"]["offload_optimizer"]["pin_memory"] = False
    del ds["activation_checkpointing"]
    ds["bf16"]["enabled"] = True
    ds["gradient_clipping"] = 0.7
    ds["optimizer"] = {"type": "Lion"}
    ds["train_micro_batch_size_per_gpu"] = 3
    ds_file.write_text(json.dumps(ds))
    text = acc.read_text().replace("zero3_init_flag: true", "zero3_init_flag: false") \
        .replace("num_processes: 1", "num_processes: 2")
    acc.write_text(text)
    cfg_text = SEED_COMMANDS.split("\n\n")[1]
    result = import_commands(cfg_text, base_dir=tmp_path)
    cfg = result.config
    assert (cfg.zero_stage, cfg.offload_optimizer_device, cfg.offload_param_device) == (
        2, "cpu", "none")
    assert cfg.pin_memory is False
    assert cfg.zero3_init_flag is True  # the YAML's false concerns ZeRO-3 only: not imported
    assert cfg.ds_activation_checkpointing is False and cfg.overlap_comm is True
    assert cfg.reduce_bucket_size == 200_000_000 and cfg.gradient_clipping == 0.7
    assert cfg.mixed_precision == "bf16" and cfg.num_processes == 2
    assert cfg.batch_size == 3  # DeepSpeed's micro-batch
    # Stage 2 alone: it trains from the cache it names.
    assert cfg.stages == ["train", "sample"] and cfg.split_training
    assert cfg.dataset_base_path == str(tmp_path / "models/train/Qwen-Image_lora-splited-cache")
    assert [x for x in result.not_understood if "optimizer" in x and "Lion" in x]


def test_the_references_files_are_recognised_by_name_and_others_named_in_the_notes(tmp_path):
    """The reference's shipped files import from their known contents when missing; any
    other missing file is named, with the way to give it, and sets nothing."""
    write_seed_files(tmp_path / "seed")
    on_disk = import_commands(SEED_COMMANDS, base_dir=tmp_path / "seed")
    known = import_commands(SEED_COMMANDS, base_dir=tmp_path / "elsewhere")
    paths = ("dataset_base_path", "dataset_metadata_path")  # relative to each base
    assert {k: v for k, v in known.given.items() if k not in paths} == \
        {k: v for k, v in on_disk.given.items() if k not in paths}
    assert (known.given["zero_stage"], known.given["offload_param_device"],
            known.given["offload_optimizer_device"]) == (3, "cpu", "cpu")
    recognised = [n for n in known.notes if "recognised" in n]
    assert [n for n in recognised if "deepspeed_zero3_cpuoffload.yaml" in n]
    assert [n for n in recognised if "ds_z3_cpuoffload.json" in n]
    assert not [n for n in on_disk.notes if "recognised" in n]
    from backend.core.messages import Msg
    from webui.messages import english_left  # the Training tab shows these in both languages

    def chinese(notes) -> bool:
        return all(isinstance(n, Msg) and not english_left(n.text("zh")) for n in notes)

    assert chinese(recognised), recognised

    unknown = SEED_COMMANDS.replace("deepspeed_zero3_cpuoffload.yaml", "my_zero3.yaml")
    result = import_commands(unknown, base_dir=tmp_path / "elsewhere")
    assert [n for n in result.notes if "my_zero3.yaml" in n and "not found" in n and
            "upload the file" in n]
    distributed = {"zero_stage", "offload_param_device", "offload_optimizer_device",
                   "num_processes", "mixed_precision", "pin_memory", "zero3_init_flag"}
    assert not distributed & set(result.given)  # nothing read, nothing guessed
    assert result.given["lora_rank"] == 32 and result.given["split_training"] is True

    # The file's contents given with the command: imported from them, under its own name.
    yaml_text = (tmp_path / "seed" / SEED_DIR / "deepspeed_zero3_cpuoffload.yaml").read_text()
    ds = json.loads(SEED_DEEPSPEED_JSON)
    ds["zero_optimization"]["stage"] = 2
    del ds["zero_optimization"]["offload_param"]
    given = import_commands(unknown, base_dir=tmp_path / "elsewhere",
                            files={"my_zero3.yaml": yaml_text,
                                   "ds_z3_cpuoffload.json": json.dumps(ds)})
    assert (given.given["zero_stage"], given.given["offload_optimizer_device"]) == (2, "cpu")
    assert given.given["offload_param_device"] == "none"  # the file has no offload_param
    assert [n for n in given.notes if "my_zero3.yaml read from the file given" in n]
    said = [n for r in (result, given) for n in r.notes if "my_zero3" in n]
    assert said and chinese(said), said


def test_files_named_in_a_command_go_through_the_read_gate(tmp_path):
    from backend.core.readgate import gate_of

    acc, _ = write_seed_files(tmp_path / "outside")
    text = f"accelerate launch --config_file {acc} train.py --task sft --dataset_base_path d"
    allowed = import_commands(text, gate=gate_of([str(tmp_path / "outside")]))
    assert allowed.given["zero_stage"] == 3
    # Outside the user's folders the file is not read; its name is the reference's, so
    # the known contents stand in (and the note says so), never the file on disk.
    acc.write_text(acc.read_text().replace("num_processes: 1", "num_processes: 4"))
    walled = import_commands(text, gate=gate_of([str(tmp_path / "mine")]))
    assert walled.given["num_processes"] == 1
    assert [n for n in walled.notes if "recognised" in n]
    assert import_commands(text).given["num_processes"] == 4


def test_the_deepspeed_file_is_also_found_next_to_the_yaml(tmp_path):
    acc, ds = write_seed_files(tmp_path / "ref")
    shutil.move(str(acc), tmp_path / "accelerate.yaml")
    shutil.move(str(ds), tmp_path / "ds_z3_cpuoffload.json")
    result = import_commands("accelerate launch --config_file accelerate.yaml train.py "
                             "--task sft --dataset_base_path d", base_dir=tmp_path)
    assert result.config.zero_stage == 3 and not result.config.split_training


def test_flags_without_a_counterpart_are_listed(tmp_path):
    text = ('CUDA_VISIBLE_DEVICES=0,1 accelerate launch --num_processes 2 --multi_gpu '
            '--mixed_precision fp16 train.py --dataset_base_path "my data" --fp8_models "a:b" '
            '--lora_rank 16 --no_such_flag 3 --height 512 --width 512 && echo done')
    result = import_commands(text)
    cfg = result.config
    assert (cfg.num_processes, cfg.gpu_ids, cfg.mixed_precision) == (2, "0,1", "fp16")
    assert (cfg.lora_rank, cfg.height, cfg.width) == (16, 512, 512)
    assert cfg.dataset_base_path == "my data" and not cfg.split_training
    assert cfg.fp8_models == "a:b"  # the reference's low-VRAM flag maps to the field
    assert result.not_understood == ["command 1: --no_such_flag 3"]
    assert [n for n in result.notes if "echo done" in n]


def test_bad_values_are_reported_and_left_at_the_default():
    result = import_commands("python train.py --dataset_base_path d --lora_rank 0 "
                             "--height 100 --width 100")
    assert result.config.lora_rank == 32 and result.config.height is None
    assert [x for x in result.not_understood if x.startswith("lora_rank:")]


# ------------------------------------------------------------------------------ export
def test_export_shell_script_writes_the_files_and_runs_the_commands(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    cfg = validate({"dataset_base_path": str(tmp_path / "data"), "zero_stage": 3,
                    "offload_param_device": "cpu", "offload_optimizer_device": "cpu",
                    "use_gradient_checkpointing": True,
                    "sample_prompts": ["it's a 'quoted' $HOME prompt"]})
    script = export_shell_script(cfg, cuda=True)
    path = tmp_path / "run.sh"
    path.write_text(script)
    bash = shutil.which("bash")
    subprocess.run([bash, "-n", str(path)], check=True)
    # The stage commands run "$PYTHON ..."; `true` stands in for Python so that only the
    # file-writing part has effects.
    env = {**os.environ, "PYTHON": "true"}
    subprocess.run([bash, str(path), "exported"], check=True, cwd=tmp_path, env=env)
    out = tmp_path / "exported"
    assert sorted(p.name for p in out.iterdir()) == [
        "accelerate_data_process.yaml", "accelerate_train.yaml", "deepspeed_train.json",
        "run.yaml"]
    assert json.loads((out / "deepspeed_train.json").read_text()) == deepspeed_config(cfg)
    train = load_accelerate(out / "accelerate_train.yaml")
    assert train["deepspeed_config"]["deepspeed_config_file"] == "deepspeed_train.json"
    again = load_config(out / "run.yaml")
    assert again.sample_prompts == cfg.sample_prompts and again.output_path == "output"
    assert again.dataset_base_path == cfg.dataset_base_path
    assert '"$PYTHON" -m accelerate.commands.launch' in script
    assert "--task sft:train" in script and "--output_dir samples" in script


def test_a_runs_own_commands_import_back_into_its_config(tmp_path):
    cfg = validate({"dataset_base_path": str(tmp_path / "data"), "zero_stage": 2,
                    "offload_optimizer_device": "cpu", "num_processes": 2, "lora_rank": 8,
                    "sample_prompts": ["a red circle", "a blue square"], "sample_steps": 12})
    run = tmp_path / "run"
    plan_run(cfg, run, cuda=True)
    result = import_commands((run / "commands.sh").read_text(), base_dir=tmp_path)
    assert result.config == load_config(run / "run.yaml")
    assert result.not_understood == []


def test_zero3_init_flag_is_read_from_the_accelerate_file(tmp_path):
    acc, _ = write_seed_files(tmp_path)
    acc.write_text(acc.read_text().replace("zero3_init_flag: true", "zero3_init_flag: false"))
    cfg = import_commands(SEED_COMMANDS, base_dir=tmp_path).config
    assert cfg.zero_stage == 3 and cfg.zero3_init_flag is False
    plan_run(cfg, tmp_path / "run", cuda=True)
    conf = load_accelerate(tmp_path / "run" / "accelerate_train.yaml")
    assert conf["deepspeed_config"]["zero3_init_flag"] is False
