"""Full fine-tuning (``--trainable_models dit``): the reference's flag through the schema, the
real stage under ``accelerate launch`` with DeepSpeed ZeRO-2 and ZeRO-3 offload on the tiny
real-architecture Qwen-Image, checkpoints in diffusers layout that ``from_pretrained`` loads,
resume, samples from a checkpoint, and the refusals before any stage.
"""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.harness.seeds import SEED_ZERO3, ZERO2, ZERO3_TWO_PROCS
from tests.harness.stages import (REPO, assert_ok, check_progress, eval_lora_loss,
                                  launch_and_stop, read_progress, run_stage, stage_env,
                                  write_accelerate_config)

ZERO2_OFFLOAD = {**ZERO2, "zero_optimization": {
    **ZERO2["zero_optimization"], "offload_optimizer": {"device": "cpu", "pin_memory": True}}}
ZERO3_TWO = {**ZERO3_TWO_PROCS, "train_micro_batch_size_per_gpu": 1}


def full_args(models_root, cache, out, *extra) -> list:
    """The reference's full-training flags: no --lora_* at all."""
    return ["--task", "sft:train", "--models_dir", models_root, "--offline",
            "--model_id_with_origin_paths",
            "Qwen/Qwen-Image:transformer/diffusion_pytorch_model*.safetensors",
            "--dataset_base_path", cache, "--output_path", out, "--trainable_models", "dit",
            "--learning_rate", "1e-3", "--seed", "0", *extra]


def load_checkpoint(folder: Path):
    import torch
    from diffusers import QwenImageTransformer2DModel

    return QwenImageTransformer2DModel.from_pretrained(str(folder), torch_dtype=torch.float32)


def weights(folder: Path) -> dict:
    from backend.families.common import weight_files
    from safetensors.torch import load_file

    out: dict = {}
    for f in weight_files(folder):
        out.update(load_file(str(f)))
    return out


def check_full_checkpoint(folder: Path, tiny_model_dir: Path, cache: Path, base: float,
                          step: int) -> None:
    """A diffusers folder the family's class loads, every weight moved from the base's, and
    a held-out loss below the base model's."""
    import torch

    info = json.loads((folder / "zerolora_checkpoint.json").read_text())
    assert info["format"] == "zerolora-full" and info["step"] == step
    assert info["trainable_models"] == "dit" and info["model_family"] == "qwen_image"
    model = load_checkpoint(folder)
    base_w = weights(tiny_model_dir / "transformer")
    tuned = {k: v.detach() for k, v in model.state_dict().items()}
    assert tuned.keys() == base_w.keys()
    moved = [k for k in tuned if not torch.equal(tuned[k], base_w[k].float())]
    assert len(moved) >= 0.9 * len(tuned), f"only {len(moved)} of {len(tuned)} moved"
    trained = eval_lora_loss(folder, cache)
    assert trained < base, f"held-out loss {trained:.4f} not below {base:.4f}"


# ------------------------------------------------------------------------------------------
# Refused before any stage
# ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("values, field, needle", [
    ({"trainable_models": "vae"}, "trainable_models", "'vae' stays frozen"),
    ({"trainable_models": "unet"}, "trainable_models", "no component of Qwen-Image"),
    ({"trainable_models": "dit", "lora_rank": 8}, "lora_rank", "a full fine-tune attaches no"),
    ({"trainable_models": "dit", "lora_checkpoint": "/x.safetensors"}, "lora_checkpoint",
     "attaches no LoRA"),
    ({"trainable_models": "dit", "enable_model_cpu_offload": True},
     "enable_model_cpu_offload", "frozen base only"),
    ({"trainable_models": "dit",
      "quant_options": "Qwen/Qwen-Image:transformer/*.safetensors:nf4"},
     "quant_options", "cannot train in full"),
])
def test_bad_full_training_options_name_the_field(values, field, needle):
    from backend.config.errors import ConfigError
    from backend.config.validation import validate

    with pytest.raises(ConfigError) as e:
        validate({"dataset_base_path": "/data", **values})
    lines = [str(p) for p in e.value.problems]
    assert any(line.startswith(f"{field}: ") and needle in line for line in lines), lines


def test_full_training_in_chinese_names_the_field():
    from backend.config.errors import ConfigError
    from backend.config.validation import validate

    with pytest.raises(ConfigError) as e:
        validate({"dataset_base_path": "/data", "trainable_models": "text_encoder"})
    text = e.value.problems[0].text("zh")
    assert "trainable_models" in text.split("：")[0] and "保持冻结" in text


def test_reference_full_command_parses_and_dit_trains_the_transformer():
    """The reference's full-training flags (examples/qwen_image/model_training/full/
    Qwen-Image.sh), only the script path changed."""
    from backend.config.cli import parse_stage_args

    cfg, _ = parse_stage_args([
        "--dataset_base_path", "data/example_image_dataset",
        "--dataset_metadata_path", "data/example_image_dataset/metadata.csv",
        "--max_pixels", "1048576", "--dataset_repeat", "50",
        "--model_id_with_origin_paths",
        "Qwen/Qwen-Image:transformer/diffusion_pytorch_model*.safetensors,"
        "Qwen/Qwen-Image:text_encoder/model*.safetensors,"
        "Qwen/Qwen-Image:vae/diffusion_pytorch_model.safetensors",
        "--learning_rate", "1e-5", "--num_epochs", "2", "--remove_prefix_in_ckpt", "pipe.dit.",
        "--output_path", "./models/train/Qwen-Image_full", "--trainable_models", "dit",
        "--use_gradient_checkpointing", "--find_unused_parameters"])
    assert cfg.full_training and cfg.trainable_models == "dit"


def test_the_reference_full_script_imports_as_a_full_fine_tune(tmp_path):
    from backend.planning.importer import import_commands

    result = import_commands(
        "accelerate launch --config_file examples/qwen_image/model_training/full/"
        "accelerate_config_zero2offload.yaml examples/qwen_image/model_training/train.py "
        "--dataset_base_path data/example_image_dataset --dataset_metadata_path "
        "data/example_image_dataset/metadata.csv --max_pixels 1048576 --dataset_repeat 50 "
        "--model_id_with_origin_paths \"Qwen/Qwen-Image:transformer/diffusion_pytorch_model"
        "*.safetensors\" --learning_rate 1e-5 --num_epochs 2 --remove_prefix_in_ckpt "
        "\"pipe.dit.\" --output_path \"./models/train/Qwen-Image_full\" --trainable_models "
        "\"dit\" --use_gradient_checkpointing --find_unused_parameters", base_dir=tmp_path)
    cfg = result.config
    assert cfg.full_training and cfg.trainable_models == "dit"
    assert cfg.learning_rate == 1e-5 and cfg.lora_rank == 32  # no LoRA option was given
    assert not [x for x in result.not_understood if "trainable_models" in x]


def test_cli_refuses_lora_flags_with_trainable_models_before_loading(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "backend.stages.train", "--task", "sft:train",
         "--dataset_base_path", str(tmp_path), "--trainable_models", "dit",
         "--lora_rank", "16", "--output_path", str(tmp_path / "out")],
        cwd=REPO, env=stage_env(), capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert "lora_rank: a LoRA option beside trainable_models" in proc.stderr
    assert not (tmp_path / "out").exists()


# ------------------------------------------------------------------------------------------
# Saving (in-process)
# ------------------------------------------------------------------------------------------
def test_save_component_shards_with_an_index_that_from_pretrained_loads(tmp_path,
                                                                      tiny_model_dir):
    import torch

    from backend.families import get_family
    from backend.models import full

    model = get_family("qwen_image").load_transformer(tiny_model_dir / "transformer",
                                                      torch.float32)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.01)
    folder = full.save_component(model, tmp_path / "step-3", dtype=torch.float32,
                                 info={"step": 3}, max_shard_bytes=100_000)
    shards = sorted(p.name for p in folder.glob("diffusion_pytorch_model-*.safetensors"))
    assert len(shards) >= 3 and shards[0].endswith("-00001-of-%05d.safetensors" % len(shards))
    index = json.loads((folder / full.INDEX_NAME).read_text())
    assert set(index["weight_map"]) == set(model.state_dict())
    assert index["metadata"]["total_size"] == full.checkpoint_bytes(model, torch.float32)
    loaded = load_checkpoint(folder)
    for k, v in model.state_dict().items():
        assert torch.equal(loaded.state_dict()[k], v), k
    assert not list(tmp_path.glob(".step-3.tmp"))
    # Saved again over itself (a resumed run's same step): replaced whole.
    full.save_component(model, folder, dtype=torch.bfloat16, info={"step": 3})
    assert (folder / "diffusion_pytorch_model.safetensors").is_file()
    assert not (folder / full.INDEX_NAME).exists()


def test_save_component_refuses_a_disk_without_room_before_writing(tmp_path, tiny_model_dir,
                                                                   monkeypatch):
    import shutil

    import torch

    from backend.core.diskspace import DiskFullError
    from backend.families import get_family
    from backend.models import full

    model = get_family("qwen_image").load_transformer(tiny_model_dir / "transformer",
                                                      torch.float32)
    # The margin kept free set to more than this disk has: the save must not start.
    monkeypatch.setattr(full, "DISK_MARGIN", shutil.disk_usage(tmp_path).free + 1)
    with pytest.raises(DiskFullError, match="needed about"):
        full.save_component(model, tmp_path / "step-1", dtype=torch.float32)
    assert list(tmp_path.iterdir()) == []


def test_a_runs_full_checkpoint_downloads_as_a_zip_or_one_file(tmp_path, tiny_model_dir):
    import zipfile

    import torch

    from backend.families import get_family
    from backend.models import full
    from webui import jobs

    model = get_family("qwen_image").load_transformer(tiny_model_dir / "transformer",
                                                      torch.float32)
    out = tmp_path / "run" / "output"
    full.save_component(model, out / "step-2", dtype=torch.float32, info={"step": 2},
                        max_shard_bytes=200_000)
    full.save_component(model, out / "step-4", dtype=torch.float32, info={"step": 4})
    run = {"id": "r1", "run_dir": str(tmp_path / "run")}
    assert [p.name for p in jobs.checkpoints(run)] == ["step-2", "step-4"]
    path = jobs.lora_download(run, "step-2", "diffusers")
    assert path == out / "export" / "r1-step-2.zip"
    with zipfile.ZipFile(path) as zf:
        names = set(zf.namelist())
        assert {"step-2/config.json", "step-2/" + full.INDEX_NAME} <= names
        assert zf.getinfo("step-2/config.json").file_size > 0
    assert names == {f"step-2/{p.name}" for p in (out / "step-2").iterdir()}
    # one file for ComfyUI and the reference trainer: every weight, bit for bit
    from safetensors.torch import load_file

    weights = {k: v for k, v in model.state_dict().items()}
    for fmt, name in (("comfyui", "step-2.comfyui.safetensors"),
                      ("reference", "step-2.safetensors")):
        path = jobs.lora_download(run, "step-2", fmt)
        assert path == out / "export" / name
        got = load_file(str(path))
        assert set(got) == set(weights), fmt  # this family's names are diffusers' own
        assert all(torch.equal(got[k], weights[k]) for k in weights), fmt
    with pytest.raises(ValueError) as e:
        jobs.lora_download(run, "step-3", "comfyui")
    assert e.value.args[0].code == "runs.not_a_checkpoint" and "step-2, step-4" in str(e.value)


# ------------------------------------------------------------------------------------------
# The stage under accelerate launch and DeepSpeed
# ------------------------------------------------------------------------------------------
@pytest.mark.slow
@pytest.mark.timeout(900)
def test_full_finetune_zero2_optimizer_offload(tmp_path, models_root, tiny_model_dir,
                                               stage1_cache, base_loss):
    """The reference's default for full training: ZeRO-2 with the optimizer offloaded."""
    acc = write_accelerate_config(tmp_path, "z2off", ds_config=ZERO2_OFFLOAD)
    out = tmp_path / "out"
    proc = run_stage(full_args(models_root, stage1_cache, out, "--num_epochs", "100",
                               "--max_steps", "20", "--save_steps", "10",
                               "--keep_last_n_checkpoints", "1"), config_file=acc)
    assert_ok(proc)
    assert "full fine-tune of the transformer" in proc.stdout
    assert "CPU Adam (AdamW mode)" in proc.stdout
    events = check_progress(out, total=20)
    assert [e["path"] for e in events if e["event"] == "checkpoint"] == [
        str(out / "step-10"), str(out / "step-20")]
    assert sorted(p.name for p in out.iterdir() if p.name.startswith("step-")) == ["step-20"]
    assert not list(out.glob("*.safetensors"))  # no LoRA anywhere
    check_full_checkpoint(out / "step-20", tiny_model_dir, stage1_cache, base_loss, 20)


@pytest.mark.slow
@pytest.mark.timeout(1200)
def test_full_finetune_zero3_offload_two_processes(tmp_path, models_root, tiny_model_dir,
                                                   stage1_cache, base_loss):
    """ZeRO-3, parameters and optimizer offloaded, built partitioned, across two
    processes: the checkpoint is gathered a parameter at a time."""
    acc = write_accelerate_config(tmp_path, "z3x2", ds_config=ZERO3_TWO, num_processes=2,
                                  zero3_init_flag=True)
    out = tmp_path / "out"
    proc = run_stage(full_args(models_root, stage1_cache, out, "--num_epochs", "10",
                               "--use_gradient_checkpointing", "--initialize_model_on_cpu"),
                     config_file=acc)
    assert_ok(proc)
    assert "transformer built partitioned" in proc.stdout
    events = check_progress(out, total=20)  # 4 samples / 2 processes = 2 steps per epoch
    assert events[0]["num_processes"] == 2
    assert sorted(p.name for p in out.glob("epoch-*")) == [f"epoch-{i}" for i in range(10)]
    check_full_checkpoint(out / "epoch-9", tiny_model_dir, stage1_cache, base_loss, 20)


@pytest.mark.slow
@pytest.mark.timeout(1200)
def test_full_finetune_zero3_resume_equals_an_uninterrupted_run(tmp_path, models_root,
                                                                stage1_cache):
    """Stopped with SIGTERM under ZeRO-3 offload and resumed from state/: the same step
    count and the same weights as a run that was never stopped."""
    import torch

    acc = write_accelerate_config(tmp_path, "z3", ds_config=SEED_ZERO3, zero3_init_flag=True)
    total = 12
    args = ["--num_epochs", "1000", "--max_steps", str(total), "--save_steps", str(total),
            "--use_gradient_checkpointing", "--initialize_model_on_cpu"]
    whole, part = tmp_path / "whole", tmp_path / "part"
    assert_ok(run_stage(full_args(models_root, stage1_cache, whole, *args), config_file=acc))
    launch_and_stop(full_args(models_root, stage1_cache, part, *args), acc,
                    part / "progress.jsonl", at_step=3)
    end = read_progress(part / "progress.jsonl")[-1]
    assert end["event"] == "end" and end["status"] == "stopped", end
    stopped = end["step"]
    assert 3 <= stopped < total and (part / f"step-{stopped}" / "config.json").is_file()
    assert_ok(run_stage(full_args(models_root, stage1_cache, part, *args, "--resume_from",
                                  part / "state"), config_file=acc))
    events = read_progress(part / "progress.jsonl")
    start = max(i for i, e in enumerate(events) if e["event"] == "start")
    assert events[start]["step"] == stopped
    assert [e["step"] for e in events[start:] if e["event"] == "step"] == list(
        range(stopped + 1, total + 1))
    a, b = weights(whole / f"step-{total}"), weights(part / f"step-{total}")
    assert a.keys() == b.keys()
    for k in a:
        torch.testing.assert_close(a[k], b[k], rtol=1e-4, atol=1e-5, msg=k)


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_samples_render_a_full_checkpoint_and_the_base_again(tmp_path, tiny_model_dir):
    """The sample stage's renderer takes a checkpoint folder: its images differ from the
    base's at the same seed, and the base pipeline is restored after it."""
    import numpy as np
    import torch
    from PIL import Image

    from backend.config.schema import RunConfig
    from backend.families import get_family
    from backend.models import full
    from backend.training.samples import list_checkpoints, load_pipeline, render_samples

    model = get_family("qwen_image").load_transformer(tiny_model_dir / "transformer",
                                                      torch.float32)
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn(p.shape, generator=g) * 0.05)
    run_out = tmp_path / "output"
    full.save_component(model, run_out / "step-4", dtype=torch.float32, info={"step": 4})
    (run_out / "step-2.safetensors").write_bytes(b"")  # an older LoRA-named file is skipped
    assert list_checkpoints(run_out)[-1] == run_out / "step-4"
    cfg = RunConfig(stages=["sample"], model_id_with_origin_paths=str(tiny_model_dir),
                    offline=True, trainable_models="dit", sample_prompts=["a red circle"],
                    sample_lora_scales=[0.0, 1.0], sample_seed=7, sample_steps=2,
                    sample_height=64, sample_width=64)
    pipe, _ = load_pipeline(cfg)
    samples = tmp_path / "samples"
    done = render_samples(cfg, [run_out / "step-4"], samples, pipe=pipe)
    by_name = {e["checkpoint_name"]: e for e in done}
    assert set(by_name) == {"base", "step-4"} and by_name["step-4"]["scale"] == 1.0

    def image(folder: Path, entry: dict):
        return np.asarray(Image.open(folder / entry["image"]).convert("RGB"), dtype=np.int16)

    base, tuned = image(samples, by_name["base"]), image(samples, by_name["step-4"])
    assert np.abs(base - tuned).mean() > 1.0
    # The same pipeline renders the base's image again: its weights were put back.
    again = render_samples(cfg.model_copy(update={"sample_lora_scales": [0.0]}), [],
                           tmp_path / "again", pipe=pipe)
    assert np.array_equal(image(tmp_path / "again", again[0]), base)


# ------------------------------------------------------------------------------------------
# The estimator
# ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("family, params_b", [("qwen_image", 20.43), ("flux2_klein", 3.88)])
def test_estimator_full_training_per_zero_stage(family, params_b):
    """The published transformer at 1024x1024: without DeepSpeed every parameter costs 16
    bytes on the GPU (fp32 weight, grad, two moments); ZeRO-2 with the optimizer offloaded
    keeps the bf16 weights on the GPU and the fp32 master + moments + grad partition on the
    host; ZeRO-3 offload moves all of it to the host. A checkpoint is the bf16 transformer."""
    from backend.config.validation import validate
    from backend.planning import estimator as E

    def train(zs, opt="none", par="none", full=True):
        values = {"model_family": family, "dataset_base_path": "/d", "height": 1024,
                  "width": 1024, "zero_stage": zs, "offload_optimizer_device": opt,
                  "offload_param_device": par, "use_gradient_checkpointing": True}
        if full:
            values["trainable_models"] = "dit"
        est = E.estimate_memory(validate(values))
        return est, est.stages["train"]

    est, plain = train(0)
    n = est.params["trained"]
    assert n / 1e9 == pytest.approx(params_b, rel=0.01) and est.params["lora"] == 0
    assert plain.gpu["weights + grads + adamw"] == 16 * n and "base weights" not in plain.gpu
    assert est.checkpoint_bytes == 2 * n
    assert "full fine-tune of" in est.summary()
    _, z2 = train(2, "cpu")
    assert z2.gpu["base weights"] == 2 * n and z2.host["adamw (offloaded)"] == 16 * n
    assert "lora weights" not in z2.gpu and "grads" not in z2.gpu  # offloaded per bucket
    _, z3 = train(3, "cpu", "cpu")
    _, z3_lora = train(3, "cpu", "cpu", full=False)
    assert z3.host["base weights (offloaded)"] == 2 * n
    assert z3.host_bytes > z3_lora.host_bytes + 15 * n
    assert z3.gpu_bytes <= z3_lora.gpu_bytes  # the GPU holds the live block either way


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_a_checkpoint_is_the_base_model_of_a_new_run(tmp_path, tiny_model_dir, stage1_cache,
                                                    plain_accelerate_config):
    """A fine-tune's checkpoint folder named as the model source: a LoRA trains on it (the
    folder is recognised as the family's transformer, nothing else is needed in stage 2)."""
    import torch

    from backend.families import get_family
    from backend.models import full
    from backend.models.lora import read_lora

    model = get_family("qwen_image").load_transformer(tiny_model_dir / "transformer",
                                                      torch.float32)
    with torch.no_grad():
        for p in model.parameters():
            p.mul_(1.01)
    ckpt = full.save_component(model, tmp_path / "tuned" / "step-8", dtype=torch.float32,
                               info={"step": 8})
    out = tmp_path / "lora"
    proc = run_stage(["--task", "sft:train", "--offline", "--model_id_with_origin_paths",
                      ckpt, "--dataset_base_path", stage1_cache, "--output_path", out,
                      "--lora_rank", "4", "--learning_rate", "5e-3", "--max_train_steps", "2",
                      "--save_steps", "2"], config_file=plain_accelerate_config)
    assert_ok(proc)
    args = json.loads((out / "training_args.json").read_text())
    assert args["model_family"] == "qwen_image"
    assert args["resolved_components"]["transformer"] == str(ckpt)
    _, meta = read_lora(out / "step-2.safetensors")
    assert meta["base_model_path"] == str(ckpt)


def test_target_gpu_lists_the_full_training_ways_beside_the_lora_ways():
    """FLUX.2 [klein] 4B at 1024x1024 on an 8 GB GPU with 128 GB of host RAM: the full
    fine-tune fits only with ZeRO-3 offload (ZeRO-2 keeps the 7.8 GB of bf16 weights on the
    GPU); a LoRA run is still recommended a LoRA way,
    a full run a full one; a row applied to a LoRA config with its own rank validates."""
    from backend.config.validation import validate
    from backend.planning import estimator as E

    cfg = validate({"model_family": "flux2_klein", "dataset_base_path": "/d", "height": 1024,
                    "width": 1024, "lora_rank": 16})
    rows, best = E.compare_methods(cfg, 8 * E.GB, host_bytes=128 * E.GB)
    by = {r.name: r for r in rows}
    assert {"full_plain", "full_zero2_offload", "full_zero3_offload"} <= set(by)
    assert [by[n].fits for n in ("full_plain", "full_zero2_offload", "full_zero3_offload")
            ] == [False, False, True]
    assert by["full_plain"].gpu_bytes > 60 * E.GB  # 16 bytes a parameter
    assert best is not None and not best.startswith("full_")
    full = cfg.model_copy(update=by["full_zero3_offload"].changes)
    assert full.full_training and full.lora_rank == 32
    validate({**full.to_dict(), "dataset_base_path": "/d"})
    assert E.compare_methods(full, 8 * E.GB, host_bytes=128 * E.GB)[1] == "full_zero3_offload"
    assert "full fine-tune, DeepSpeed ZeRO-3" in str(by["full_zero3_offload"].label)


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_extract_lora_job_from_a_runs_full_checkpoint(tmp_path, tiny_model_dir):
    """The Runs tab's Extract LoRA: a job of its own (stage ``extract``) reads the
    checkpoint's recorded base, writes the LoRA into the run's output/export/, and ends
    succeeded; a LoRA checkpoint or a bad rank is refused before anything is queued."""
    import torch

    from backend.config.errors import ConfigError
    from backend.core.progress import read_events
    from backend.families import get_family
    from backend.jobs.runner import Runner
    from backend.models import full
    from backend.models.lora import read_lora
    from webui import jobs

    base = tiny_model_dir / "transformer"
    model = get_family("qwen_image").load_transformer(base, torch.float32)
    g = torch.Generator().manual_seed(3)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn(p.shape, generator=g) * 0.01)
    run_dir = tmp_path / "runs" / "r1"
    full.save_component(model, run_dir / "output" / "step-6", dtype=torch.float32,
                        info={"step": 6, "base_model_path": str(base)})
    (run_dir / "output" / "step-3.safetensors").write_bytes(b"")
    run = {"id": "r1", "run_dir": str(run_dir), "name": "tuned",
           "config_yaml": f"model_id_with_origin_paths: {tiny_model_dir}\n"
                          "trainable_models: dit\noffline: true\n"}
    runner = Runner(tmp_path / "ws", stop_grace_s=5)
    with pytest.raises(ConfigError, match="checkpoint: not a full fine-tune's checkpoint"):
        jobs.submit_extract(runner, run, "step-3.safetensors", 8, owner=None)
    with pytest.raises(ConfigError, match="rank: at least 1"):
        jobs.submit_extract(runner, run, "step-6", 0, owner=None)
    job = jobs.submit_extract(runner, run, "step-6", 8, owner=None)
    done = runner.wait(job, timeout=300)
    assert done["status"] == "succeeded", done
    out = run_dir / "output" / "export" / "step-6-lora-r8.safetensors"
    tensors, meta = read_lora(out)
    assert meta["rank"] == "8" and tensors
    events, _ = read_events(Path(done["run_dir"]) / "progress.jsonl")
    assert events[-1]["event"] == "end" and events[-1]["path"] == str(out)


def test_a_state_saved_with_other_trained_tensors_is_refused_before_the_model_loads(tmp_path):
    """Resuming a LoRA state as a full fine-tune (or with another LoRA+ ratio, rank, EMA)
    would load tensors or optimizer groups that are not there: refused, naming the option
    and both values, before the model is read (the state's own record of them)."""
    from backend.config.validation import validate
    from backend.training.loop import StageError, check_resume_options, state_shaping

    lora_run = validate({"dataset_base_path": "/d", "loraplus_lr_ratio": 16})
    state = {"global_step": 3, "options": state_shaping(lora_run)}
    check_resume_options(state, lora_run)  # the same settings resume
    check_resume_options({"global_step": 3}, lora_run)  # a state from before the record
    full = validate({"dataset_base_path": "/d", "trainable_models": "dit"})
    with pytest.raises(StageError) as e:
        check_resume_options(state, full)
    assert "resume_from:" in str(e.value)
    assert "trainable_models None -> 'dit'" in str(e.value)
    assert "loraplus_lr_ratio 16.0 -> None" in str(e.value)
