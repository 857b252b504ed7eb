"""The training stage end to end: the real stage under ``accelerate launch`` on a tiny
real-architecture Qwen-Image model, stage 1 then stage 2 with and without DeepSpeed.

Each training variant asserts that the LoRA lowers the loss on a fixed held-out batch
(fixed noise and timesteps), that the file has the expected keys and shapes for every
target module, that loading it back changes the transformer's output, and that progress
events parse and end with a final ``end`` event.
"""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.harness.seeds import SEED_STAGE1, SEED_STAGE2, SEED_ZERO3, ZERO2, ZERO3_TWO_PROCS
from tests.harness.stages import (RANK, REPO, assert_ok, check_progress, eval_lora_loss,
                                  launch_and_stop, read_progress, run_stage, stage_env, train_args,
                                  write_accelerate_config)

TARGETS = ("to_q,to_k,to_v,add_q_proj,add_k_proj,add_v_proj,to_out.0,to_add_out,"
           "img_mlp.net.2,img_mod.1,txt_mlp.net.2,txt_mod.1")

ZERO3_TWO_PROCS["train_micro_batch_size_per_gpu"] = 1


# ------------------------------------------------------------------------------------------
# Helpers
# ------------------------------------------------------------------------------------------
@pytest.fixture(scope="session")
def base_loss(tiny_model_dir, stage1_cache) -> float:
    return eval_lora_loss(tiny_model_dir / "transformer", stage1_cache)



def check_lora(path: Path, tiny_model_dir: Path, base: float, cache: Path) -> None:
    """Keys/shapes for every target module, a lower held-out loss, and a changed output."""
    import torch
    from safetensors import safe_open

    from backend.models import lora
    from backend.families import get_family
    from backend.families.qwen_image import adapter as qi

    tensors, meta = lora.read_lora(path)
    assert meta["rank"] == str(RANK) and meta["alpha"] == str(RANK)
    assert meta["target_modules"] == TARGETS and meta["base_model"] == "dit"
    fresh = get_family("qwen_image").load_transformer(tiny_model_dir / "transformer", torch.float32)
    expected = lora.expected_shapes(fresh, RANK, TARGETS.split(","))
    assert len(expected) == 2 * 12 * 2  # 2 blocks x 12 targets x (A, B)
    assert {k: tuple(v.shape) for k, v in tensors.items()} == expected
    assert "transformer_blocks.0.attn.to_q.lora_A.default.weight" in tensors
    # Every block trained. In the last block the text stream's output is unused, so its
    # text query, text output projection and text MLP get no gradient (by design).
    unused = ("attn.add_q_proj", "attn.to_add_out", "txt_mlp.net.2")
    for k, v in tensors.items():
        if ".lora_B." not in k:
            continue
        if k.startswith("transformer_blocks.1.") and any(u in k for u in unused):
            assert v.abs().sum() == 0, k
        else:
            assert v.abs().sum() > 0, f"{k} never trained"
    with safe_open(str(path), framework="pt") as f:
        assert f.metadata()["format"] == "zerolora-lora"

    trained = eval_lora_loss(tiny_model_dir / "transformer", cache, path)
    assert trained < base, f"held-out loss {trained:.4f} not below {base:.4f}"

    from backend.data.cache import load_cached_samples
    sample = load_cached_samples(cache)[0]
    sigma = torch.tensor(0.5)
    g = torch.Generator().manual_seed(0)
    x = torch.randn(sample["latents"].shape, generator=g)
    with torch.no_grad():
        before = qi.predict(fresh, x, sigma, sample["prompt_emb"], sample["prompt_emb_mask"])
        lora.load_lora(fresh, path)
        after = qi.predict(fresh, x, sigma, sample["prompt_emb"], sample["prompt_emb_mask"])
    assert not torch.allclose(before, after, atol=1e-6)


# ------------------------------------------------------------------------------------------
# Command line
# ------------------------------------------------------------------------------------------
def test_seed_commands_parse():
    from backend.config.cli import parse_stage_args

    cfg1, _ = parse_stage_args(SEED_STAGE1)
    assert cfg1.task == "sft:data_process" and cfg1.lora_rank == 32
    assert cfg1.dataset_num_workers == 8 and cfg1.find_unused_parameters
    cfg2, _ = parse_stage_args(SEED_STAGE2)
    assert cfg2.task == "sft:train" and cfg2.dataset_repeat == 50
    assert cfg2.dataset_metadata_path is None and cfg2.initialize_model_on_cpu
    assert cfg2.target_modules() == TARGETS.split(",")


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_bad_input_fails_before_heavy_imports(tmp_path, demo_dataset):
    """A missing image is reported (file and row) before torch is even imported."""
    data = tmp_path / "data"
    data.mkdir()
    (data / "metadata.csv").write_text("image,prompt\nmissing.png,a cat\n", encoding="utf-8")
    code = ("import sys; from backend.stages.train import main; "
            "rc = main(sys.argv[1:]); print('TORCH', 'torch' in sys.modules); sys.exit(rc)")
    proc = subprocess.run(
        [sys.executable, "-c", code, "--task", "sft:data_process", "--dataset_base_path", data,
         "--dataset_metadata_path", data / "metadata.csv", "--output_path", tmp_path / "c",
         "--offline", "--models_dir", tmp_path / "nomodels"],
        cwd=REPO, env=stage_env(), capture_output=True, text=True, timeout=100)
    assert proc.returncode == 2, proc.stderr  # exits.REFUSED
    assert "metadata.csv row 1" in proc.stderr and "missing.png" in proc.stderr
    assert "TORCH False" in proc.stdout
    end = read_progress(tmp_path / "c" / "progress.jsonl")[-1]
    assert end["event"] == "end" and end["status"] == "failed" and "missing.png" in end["reason"]

    bad = subprocess.run([sys.executable, "-m", "backend.stages.train", "--lora_rank", "0",
                          "--task", "sft:train"], cwd=REPO, env=stage_env(),
                         capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and "lora_rank" in bad.stderr


# ------------------------------------------------------------------------------------------
# Stage 1: cache
# ------------------------------------------------------------------------------------------
@pytest.mark.slow
@pytest.mark.timeout(600)
def test_stage1_cache_reuse(tmp_path, models_root, demo_dataset, stage1_cache,
                            plain_accelerate_config):
    import shutil

    from backend.data.cache import read_manifest

    manifest = read_manifest(stage1_cache)
    assert len(manifest["samples"]) == 4
    first = [e for e in read_progress(stage1_cache / "progress.jsonl") if e["event"] == "end"]
    assert first[-1]["encoded"] == 4 and first[-1]["reused"] == 0

    cache = tmp_path / "cache"
    shutil.copytree(stage1_cache, cache)
    (cache / "progress.jsonl").unlink()
    data = tmp_path / "data"
    shutil.copytree(demo_dataset, data)
    args = ["--task", "sft:data_process", "--models_dir", models_root, "--offline",
            "--dataset_base_path", data, "--dataset_metadata_path", data / "metadata.csv",
            "--output_path", cache]
    # Nothing changed: nothing encoded (the encoders are not even loaded).
    proc = run_stage(args, config_file=plain_accelerate_config)
    assert_ok(proc)
    end = read_progress(cache / "progress.jsonl")[-1]
    assert (end["status"], end["encoded"], end["reused"]) == ("succeeded", 0, 4)
    assert "Loading weights" not in proc.stderr + proc.stdout

    # One caption changed: exactly that sample is re-encoded, the stale file removed.
    meta = data / "metadata.csv"
    meta.write_text(meta.read_text().replace("a green square", "a big green square"))
    (cache / "progress.jsonl").unlink()
    assert_ok(run_stage(args, config_file=plain_accelerate_config))
    end = read_progress(cache / "progress.jsonl")[-1]
    assert (end["encoded"], end["reused"]) == (1, 3)
    new = read_manifest(cache)
    assert len(new["samples"]) == 4
    files = sorted(p.name for p in cache.glob("*.safetensors"))
    assert files == sorted(e["file"] for e in new["samples"])
    changed = [e for e in new["samples"] if "big green" in e["prompt"]]
    assert len(changed) == 1 and changed[0]["file"] not in {e["file"] for e in
                                                            manifest["samples"]}


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_stage1_refuses_deepspeed(tmp_path, models_root, demo_dataset):
    acc = write_accelerate_config(tmp_path, "z2", ds_config=ZERO2)
    proc = run_stage(["--task", "sft:data_process", "--models_dir", models_root, "--offline",
                      "--dataset_base_path", demo_dataset, "--output_path", tmp_path / "c"],
                     config_file=acc)
    assert proc.returncode != 0
    end = read_progress(tmp_path / "c" / "progress.jsonl")[-1]
    assert end["status"] == "failed" and "without DeepSpeed" in end["reason"]
    assert "Launch it plainly" in proc.stderr


# ------------------------------------------------------------------------------------------
# Stage 2 variants
# ------------------------------------------------------------------------------------------
@pytest.mark.slow
@pytest.mark.timeout(600)
def test_train_no_deepspeed(tmp_path, models_root, tiny_model_dir, stage1_cache, base_loss,
                            plain_accelerate_config):
    out = tmp_path / "out"
    proc = run_stage(train_args(models_root, stage1_cache, out, "--num_epochs", "10",
                                "--lr_warmup_steps", "4", "--use_gradient_checkpointing"),
                     config_file=plain_accelerate_config)
    assert_ok(proc)
    events = check_progress(out, total=40)
    lrs = [e["lr"] for e in events if e["event"] == "step"]
    assert lrs[0] < lrs[3] == lrs[-1] == pytest.approx(5e-3)  # linear warm-up
    assert sorted(p.name for p in out.glob("*.safetensors")) == sorted(
        f"epoch-{i}.safetensors" for i in range(10))
    args = json.loads((out / "training_args.json").read_text())
    assert args["lora_rank"] == RANK and args["task"] == "sft:train"
    assert list((out / "tensorboard").glob("events.out.tfevents.*"))
    check_lora(out / "epoch-9.safetensors", tiny_model_dir, base_loss, stage1_cache)


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_train_zero2(tmp_path, models_root, tiny_model_dir, stage1_cache, base_loss):
    """ZeRO-2 with gradient accumulation and torch checkpointing offloaded to CPU (no
    activation_checkpointing block in this DeepSpeed config)."""
    acc = write_accelerate_config(tmp_path, "z2", ds_config=ZERO2)
    out = tmp_path / "out"
    proc = run_stage(train_args(models_root, stage1_cache, out, "--num_epochs", "100",
                                "--max_steps", "40", "--save_steps", "20",
                                "--gradient_accumulation_steps", "2",
                                "--use_gradient_checkpointing",
                                "--use_gradient_checkpointing_offload"), config_file=acc)
    assert_ok(proc)
    assert "using torch checkpointing" in proc.stdout
    events = check_progress(out, total=40)
    assert events[0]["steps_per_epoch"] == 2  # 4 samples / 2 micro-batches per step
    assert [e for e in events if e["event"] == "step"][-1]["epoch"] == 19
    assert sorted(p.name for p in out.glob("*.safetensors")) == ["step-20.safetensors",
                                                                 "step-40.safetensors"]
    check_lora(out / "step-40.safetensors", tiny_model_dir, base_loss, stage1_cache)


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_train_zero3_offload_seed_config(tmp_path, models_root, tiny_model_dir, stage1_cache,
                                         base_loss):
    """The seed's recipe: ZeRO-3, parameter + optimizer CPU offload, DeepSpeed activation
    checkpointing, zero3_init_flag, --initialize_model_on_cpu."""
    acc = write_accelerate_config(tmp_path, "z3", ds_config=SEED_ZERO3, zero3_init_flag=True)
    out = tmp_path / "out"
    proc = run_stage(train_args(models_root, stage1_cache, out, "--num_epochs", "100",
                                "--max_steps", "40", "--save_steps", "10",
                                "--keep_last_n_checkpoints", "2",
                                "--use_gradient_checkpointing", "--initialize_model_on_cpu",
                                "--find_unused_parameters"), config_file=acc)
    assert_ok(proc)
    assert "DeepSpeed activation checkpointing configured" in proc.stdout
    assert "transformer built partitioned" in proc.stdout
    check_progress(out, total=40)
    assert sorted(p.name for p in out.glob("*.safetensors")) == ["step-30.safetensors",
                                                                 "step-40.safetensors"]
    assert (out / "state" / "trainer_state.json").is_file()
    check_lora(out / "step-40.safetensors", tiny_model_dir, base_loss, stage1_cache)


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_zero3_offload_trains_the_lora_plain_training_trains(tmp_path, models_root,
                                                             stage1_cache,
                                                             plain_accelerate_config):
    """ZeRO-3 with the optimizer offloaded steps DeepSpeed's CPU Adam: the same AdamW
    (decoupled weight decay) on the same warm-up schedule as plain training, so the same
    seed gives the same LoRA. (Handed anything but ``torch.optim.AdamW``, accelerate builds
    the CPU Adam in L2 mode, which moves every still-untrained weight by the full learning
    rate; a schedule built on the optimizer before ``prepare`` drives one that never steps.)
    """
    extra = ("--num_epochs", "100", "--max_steps", "3", "--save_steps", "3",
             "--learning_rate", "1e-2", "--weight_decay", "0.1", "--lr_warmup_steps", "2")
    acc = write_accelerate_config(tmp_path, "z3", ds_config=SEED_ZERO3, zero3_init_flag=True)
    outs = {}
    for name, config in (("plain", plain_accelerate_config), ("zero3", acc)):
        outs[name] = tmp_path / name
        proc = run_stage(train_args(models_root, stage1_cache, outs[name], *extra),
                         config_file=config)
        assert_ok(proc)
    lrs = {name: [e["lr"] for e in check_progress(out, total=3) if e["event"] == "step"]
           for name, out in outs.items()}
    assert lrs["zero3"] == lrs["plain"] == [5e-3, 1e-2, 1e-2]
    from backend.models.lora import read_lora
    a, _ = read_lora(outs["plain"] / "step-3.safetensors")
    b, _ = read_lora(outs["zero3"] / "step-3.safetensors")
    assert a.keys() == b.keys()
    worst = max((a[k].float() - b[k].float()).abs().max().item() for k in a)
    # Measured 4e-4 (float rounding through the CPU Adam); the faults move weights ~1e-2.
    assert worst < 2e-3, f"ZeRO-3 offload trained another LoRA: max |difference| {worst:.2e}"
    assert "DeepSpeed's CPU Adam (AdamW mode)" in proc.stdout


@pytest.mark.slow
@pytest.mark.timeout(1200)
@pytest.mark.parametrize("kind", ["zero3", "ddp"])
def test_train_two_processes(kind, tmp_path, models_root, tiny_model_dir, stage1_cache,
                             base_loss):
    """ZeRO-3 across two processes; and plain data parallel (two CPU processes, gloo) with
    the reference's --find_unused_parameters for the last block's unused text branch."""
    if kind == "zero3":
        acc = write_accelerate_config(tmp_path, "z3x2", ds_config=ZERO3_TWO_PROCS,
                                      num_processes=2, zero3_init_flag=True)
        extra, env = ["--use_gradient_checkpointing", "--initialize_model_on_cpu"], None
    else:
        acc = write_accelerate_config(tmp_path, "ddp", num_processes=2)
        extra, env = ["--find_unused_parameters"], {"ACCELERATE_USE_CPU": "true"}
    out = tmp_path / "out"
    proc = run_stage(train_args(models_root, stage1_cache, out, "--num_epochs", "15", *extra),
                     config_file=acc, env=env)
    assert_ok(proc)
    events = check_progress(out, total=30)  # 4 samples / 2 processes = 2 steps per epoch
    assert events[0]["num_processes"] == 2
    assert len(list(out.glob("epoch-*.safetensors"))) == 15
    check_lora(out / "epoch-14.safetensors", tiny_model_dir, base_loss, stage1_cache)


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_train_zero3_offload_bf16(tmp_path, models_root, tiny_model_dir, stage1_cache,
                                  base_loss):
    """The low-VRAM recipe in the precision GPUs run it in: bf16 weights under ZeRO-3 with
    parameter and optimizer offload. DeepSpeed keeps float32 master weights in the
    optimizer and gathers the 16-bit module weights to save, so the LoRA file is bf16."""
    from backend.models import lora

    ds = {**SEED_ZERO3, "bf16": {"enabled": True}, "fp16": {"enabled": False}}
    acc = write_accelerate_config(tmp_path, "z3bf16", ds_config=ds, zero3_init_flag=True)
    out = tmp_path / "out"
    proc = run_stage(train_args(models_root, stage1_cache, out, "--num_epochs", "100",
                                "--max_steps", "24", "--save_steps", "24",
                                "--use_gradient_checkpointing", "--initialize_model_on_cpu"),
                     config_file=acc)
    assert_ok(proc)
    assert "weights torch.bfloat16" in proc.stdout
    check_progress(out, total=24)
    tensors, _ = lora.read_lora(out / "step-24.safetensors")
    assert {str(v.dtype) for v in tensors.values()} == {"torch.bfloat16"}
    check_lora(out / "step-24.safetensors", tiny_model_dir, base_loss, stage1_cache)


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_train_deepspeed_config_optimizer(tmp_path, models_root, tiny_model_dir, stage1_cache,
                                          base_loss):
    """A DeepSpeed JSON that defines its own optimizer: DeepSpeed builds it, with the run's
    learning rate and weight decay filled in for its "auto" values. The optimizer is offloaded
    (DeepSpeed's CPU Adam, built once before the suite): on a CPU without offload DeepSpeed
    would JIT-compile its FusedAdam op for this test alone (~65 s on 2 cores)."""
    ds = {**ZERO2, "optimizer": {"type": "AdamW",
                                 "params": {"lr": "auto", "weight_decay": "auto"}}}
    ds["zero_optimization"] = {**ZERO2["zero_optimization"],
                               "offload_optimizer": {"device": "cpu"}}
    acc = write_accelerate_config(tmp_path, "z2opt", ds_config=ds)
    out = tmp_path / "out"
    proc = run_stage(train_args(models_root, stage1_cache, out, "--num_epochs", "100",
                                "--max_steps", "40", "--save_steps", "40",
                                "--lr_warmup_steps", "4"), config_file=acc)
    assert_ok(proc)
    assert "optimizer AdamW from the DeepSpeed config" in proc.stdout
    assert "lr_warmup_steps is not applied" in proc.stdout
    check_progress(out, total=40)
    check_lora(out / "step-40.safetensors", tiny_model_dir, base_loss, stage1_cache)


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_stage1_two_processes_writes_the_same_cache(tmp_path, models_root, demo_dataset,
                                                    stage1_cache):
    """Stage 1 split over two processes writes every sample once, bit-identical to the
    one-process cache, under one manifest."""
    import torch
    from safetensors.torch import load_file

    from backend.data.cache import read_manifest

    acc = write_accelerate_config(tmp_path, "x2", num_processes=2)
    out = tmp_path / "cache2"
    args = ["--task", "sft:data_process", "--models_dir", models_root, "--offline",
            "--dataset_base_path", demo_dataset,
            "--dataset_metadata_path", demo_dataset / "metadata.csv", "--output_path", out]
    # Without a GPU, accelerate runs the two processes as one each unless told to use the
    # CPU: the stage refuses that launch, naming the fix, before it encodes anything.
    refused = run_stage(args, config_file=acc)
    assert refused.returncode != 0
    assert "ACCELERATE_USE_CPU=true" in refused.stdout + refused.stderr
    assert not list(out.glob("*.safetensors"))
    proc = run_stage(args, config_file=acc, env={"ACCELERATE_USE_CPU": "true"})
    assert_ok(proc)
    assert "2 process(es)" in proc.stdout
    one, two = read_manifest(stage1_cache), read_manifest(out)
    assert [e["file"] for e in two["samples"]] == [e["file"] for e in one["samples"]]
    assert sorted(p.name for p in out.glob("*.safetensors")) == sorted(
        e["file"] for e in one["samples"])
    for e in one["samples"]:
        a, b = load_file(stage1_cache / e["file"]), load_file(out / e["file"])
        assert a.keys() == b.keys()
        for k in a:
            assert torch.equal(a[k], b[k]), (e["file"], k)
    end = read_progress(out / "progress.jsonl")[-1]
    assert end["status"] == "succeeded" and end["encoded"] == len(one["samples"])


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_one_shot_sft(tmp_path, models_root, tiny_model_dir, demo_dataset, stage1_cache,
                      base_loss, plain_accelerate_config):
    """--task sft encodes every step (text encoder + VAE + transformer in one process)."""
    import shutil

    import yaml

    # A run config plus flag overrides; relative paths resolve against the working dir.
    shutil.copytree(demo_dataset, tmp_path / "data")
    (tmp_path / "run.yaml").write_text(yaml.safe_dump({
        "task": "sft", "models_dir": str(models_root), "offline": True,
        "dataset_base_path": "data", "output_path": "elsewhere", "lora_rank": RANK,
        "learning_rate": 1e-9, "num_epochs": 10}))
    proc = run_stage(["--config", "run.yaml", "--output_path", "out", "--learning_rate",
                      "5e-3"], config_file=plain_accelerate_config, cwd=tmp_path)
    assert_ok(proc)
    out = tmp_path / "out"
    assert not (tmp_path / "elsewhere").exists()
    events = check_progress(out, total=40)
    assert events[1]["lr"] == pytest.approx(5e-3)
    check_lora(out / "epoch-9.safetensors", tiny_model_dir, base_loss, stage1_cache)


# ------------------------------------------------------------------------------------------
# Stop and resume
# ------------------------------------------------------------------------------------------
def check_resume(tmp_path, models_root, stage1_cache, config_file, total, stop_at,
                 extra=(), plain_stop=False) -> tuple[Path, Path]:
    full, part = tmp_path / "full", tmp_path / "part"
    args = ["--num_epochs", "1000", "--max_steps", str(total), "--save_steps", str(total),
            *extra]
    assert_ok(run_stage(train_args(models_root, stage1_cache, full, *args),
                        config_file=config_file))
    check_progress(full, total=total)

    rc = launch_and_stop(train_args(models_root, stage1_cache, part, *args),
                         None if plain_stop else config_file, part / "progress.jsonl",
                         at_step=stop_at)
    if plain_stop:
        assert rc == 143  # the stage's own exit code for a SIGTERM stop
    events = read_progress(part / "progress.jsonl")
    end = events[-1]
    assert end["event"] == "end" and end["status"] == "stopped", end
    stopped_at = end["step"]
    assert stop_at <= stopped_at < total
    assert (part / f"step-{stopped_at}.safetensors").is_file()
    state = json.loads((part / "state" / "trainer_state.json").read_text())
    assert state["global_step"] == stopped_at

    proc = run_stage(train_args(models_root, stage1_cache, part, *args, "--resume_from",
                                part / "state"), config_file=config_file)
    assert_ok(proc)
    events = read_progress(part / "progress.jsonl")
    starts = [i for i, e in enumerate(events) if e["event"] == "start"]
    resumed = events[starts[-1]:]
    assert resumed[0]["step"] == stopped_at
    steps = [e["step"] for e in resumed if e["event"] == "step"]
    assert steps == list(range(stopped_at + 1, total + 1))
    assert resumed[-1]["event"] == "end" and resumed[-1]["status"] == "succeeded"
    assert resumed[-1]["step"] == total
    assert (part / f"step-{total}.safetensors").is_file()
    return full / f"step-{total}.safetensors", part / f"step-{total}.safetensors"


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_sigterm_and_resume(tmp_path, models_root, stage1_cache, plain_accelerate_config):
    """Stopped mid-run with SIGTERM, resumed from state/: ends at the same step as an
    uninterrupted run, with the same LoRA (data order, noise and optimizer state kept)."""
    full, resumed = check_resume(tmp_path, models_root, stage1_cache, plain_accelerate_config,
                                 total=150, stop_at=3, plain_stop=True,
                                 extra=("--lr_warmup_steps", "10",
                                        "--gradient_accumulation_steps", "2"))
    assert_same_lora(full, resumed)
    state = tmp_path / "part" / "state"
    assert (state / "model.safetensors").stat().st_size < 200_000  # LoRA only


def assert_same_lora(a_path: Path, b_path: Path) -> None:
    import torch

    from backend.models.lora import read_lora

    a, _ = read_lora(a_path)
    b, _ = read_lora(b_path)
    assert a.keys() == b.keys()
    for k in a:
        torch.testing.assert_close(a[k], b[k], rtol=1e-4, atol=1e-5, msg=k)


@pytest.mark.slow
@pytest.mark.timeout(1200)
def test_sigterm_and_resume_zero3(tmp_path, models_root, stage1_cache):
    """The same under the seed's ZeRO-3 CPU-offload config (DeepSpeed's own checkpoint of
    the partitioned optimizer state, frozen base weights left out)."""
    acc = write_accelerate_config(tmp_path, "z3", ds_config=SEED_ZERO3, zero3_init_flag=True)
    full, resumed = check_resume(tmp_path, models_root, stage1_cache, acc, total=16,
                                 stop_at=3, extra=("--use_gradient_checkpointing",
                                                   "--initialize_model_on_cpu"))
    assert_same_lora(full, resumed)
    state = tmp_path / "part" / "state"
    frozen = sum(p.stat().st_size for p in state.rglob("*model_states.pt"))
    assert frozen < 200_000  # LoRA + bookkeeping only, not the transformer


# ------------------------------------------------------------------------------------------
# LoRA files (in-process)
# ------------------------------------------------------------------------------------------
def test_lora_file_roundtrip(tmp_path, tiny_model_dir):
    """save → lora_checkpoint init → same tensors; diffusers' loader takes to_diffusers()."""
    import torch

    from backend.models import lora
    from backend.families import get_family

    model = get_family("qwen_image").load_transformer(tiny_model_dir / "transformer", torch.float32)
    lora.add_lora(model, RANK, TARGETS.split(","))
    torch.manual_seed(0)
    for _, p in lora.lora_named_parameters(model):
        p.data.normal_()
    state = lora.collect_lora_state(model, "pipe.dit.")
    path = lora.save_lora(tmp_path / "step-1.safetensors", state, rank=RANK,
                          target_modules=TARGETS.split(","), extra={"step": 1})
    assert not list(tmp_path.glob(".*.tmp"))
    info = lora.checkpoint_info(path)
    assert info["tensors"] == 48 and info["step"] == "1" and info["rank"] == str(RANK)

    again = get_family("qwen_image").load_transformer(tiny_model_dir / "transformer", torch.float32)
    lora.add_lora(again, RANK, TARGETS.split(","))
    assert lora.init_from_checkpoint(again, path) == 48
    for k, v in lora.collect_lora_state(again).items():
        torch.testing.assert_close(v, state[k], msg=k)

    from diffusers import QwenImagePipeline
    pipe = QwenImagePipeline.from_pretrained(str(tiny_model_dir))
    pipe.load_lora_weights(lora.to_diffusers(state), adapter_name="zl")
    loaded = {k: v for k, v in pipe.transformer.state_dict().items() if ".zl." in k}
    assert len(loaded) == 48
    key = "transformer_blocks.0.attn.to_q.lora_A.zl.weight"
    torch.testing.assert_close(loaded[key],
                               state["transformer_blocks.0.attn.to_q.lora_A.default.weight"])


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_samples_during_training(tmp_path, models_root, stage1_cache,
                                 plain_accelerate_config):
    """sample_every_n_steps renders through the sample stage's render_samples hook."""
    out = tmp_path / "run" / "output"
    args = train_args(models_root, stage1_cache, out, "--max_steps", "4",
                      "--sample_every_n_steps", "2", "--sample_height", "64",
                      "--sample_width", "64", "--sample_steps", "2",
                      "--sample_prompts", "a red circle", "--sample_lora_scales", "0", "1")
    i = args.index("--model_id_with_origin_paths")
    del args[i:i + 2]  # the default sources: the samples need the whole pipeline
    assert_ok(run_stage(args, config_file=plain_accelerate_config))
    samples = tmp_path / "run" / "samples"
    assert (samples / "step-2" / "p00-x1-seed0.png").is_file()
    assert (samples / "step-4" / "p00-x1-seed0.png").is_file()
    events = read_progress(out / "progress.jsonl")
    assert {e["step"] for e in events if e["event"] == "sample"} == {2, 4}
    assert events[-1]["status"] == "succeeded"
