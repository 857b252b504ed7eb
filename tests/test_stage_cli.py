"""The stage CLI does what its options say: the real ``backend.stages.train`` under
``accelerate launch`` on the tiny model, the way a person runs it by hand.

- options the launch decides (``mixed_precision``, ``zero_stage``, the offload devices) are
  applied or refused naming the launch to change, and ``training_args.json`` records what ran;
- ``max_train_steps`` is a step target that overrides the epochs, ``max_steps`` stays a cap,
  both across a resume;
- ``sft:train`` pointed at a raw dataset suggests a cache folder of its own.
"""
from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tests.harness.seeds import SEED_ZERO3
from tests.harness.stages import (REPO, assert_ok, read_progress, run_stage, train_args,
                                  write_accelerate_config)


def _args(out: Path) -> dict:
    return json.loads((out / "training_args.json").read_text())


def _steps(out: Path) -> list[int]:
    return [e["step"] for e in read_progress(out / "progress.jsonl") if e["event"] == "step"]


# ------------------------------------------------------------------------ launch options
@pytest.mark.slow
@pytest.mark.timeout(600)
def test_mixed_precision_on_the_command_line_is_applied(tmp_path, models_root, stage1_cache,
                                                        plain_accelerate_config):
    """The launch config says "no"; --mixed_precision bf16 on the stage's command line wins."""
    out = tmp_path / "out"
    proc = run_stage(train_args(models_root, stage1_cache, out, "--max_steps", "1",
                                "--mixed_precision", "bf16"),
                     config_file=plain_accelerate_config, launch=True)  # a fresh process
    assert_ok(proc)
    assert _args(out)["mixed_precision"] == "bf16"
    assert "weights torch.bfloat16" in proc.stdout
    # No quantization asked for: torchao stays out of the process and out of its log.
    assert "Failed to load" not in proc.stderr and "torchao" not in proc.stderr


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_zero3_flags_under_a_plain_launch_are_refused_naming_the_launch(
        tmp_path, models_root, stage1_cache, plain_accelerate_config):
    out = tmp_path / "out"
    proc = run_stage(train_args(models_root, stage1_cache, out, "--max_steps", "1",
                                "--zero_stage", "3", "--offload_param_device", "cpu",
                                "--offload_optimizer_device", "cpu"),
                     config_file=plain_accelerate_config, launch=True)  # the launcher's file
    assert proc.returncode != 0, proc.stdout[-2000:]
    err = proc.stderr
    assert "zero_stage: this launch runs 0 (got 3 from the command line" in err
    assert f"--config_file {plain_accelerate_config}" in err  # the file to change
    assert ("--use_deepspeed --zero_stage 3 --offload_optimizer_device cpu "
            "--offload_param_device cpu") in err                # or the flags that give it
    assert not list(out.glob("*.safetensors"))
    end = read_progress(out / "progress.jsonl")[-1]
    assert end["status"] == "failed" and "zero_stage" in end["reason"]


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_a_zero3_offload_launch_records_the_offload_devices_that_ran(
        tmp_path, models_root, stage1_cache):
    """No offload flags on the stage's command line: the launch's DeepSpeed JSON decides,
    and training_args.json says what it decided."""
    acc = write_accelerate_config(tmp_path, "z3", ds_config=SEED_ZERO3, zero3_init_flag=True)
    out = tmp_path / "out"
    assert_ok(run_stage(train_args(models_root, stage1_cache, out, "--max_steps", "1",
                                   "--initialize_model_on_cpu"), config_file=acc))
    args = _args(out)
    assert (args["zero_stage"], args["offload_param_device"],
            args["offload_optimizer_device"]) == (3, "cpu", "cpu")
    assert str(acc) in args["launch"]


# ------------------------------------------------------------------- steps: target vs cap
@pytest.mark.slow
@pytest.mark.timeout(900)
def test_max_train_steps_is_a_target_and_resumes_to_it(tmp_path, models_root, stage1_cache,
                                                      plain_accelerate_config):
    """4 cached samples, 1 epoch by default: max_train_steps 6 trains 6 steps (2 epochs);
    stopped at 3 and resumed with the same target, it goes on to 6."""
    out = tmp_path / "full"
    assert_ok(run_stage(train_args(models_root, stage1_cache, out, "--max_train_steps", "6"),
                        config_file=plain_accelerate_config))
    assert _steps(out) == [1, 2, 3, 4, 5, 6]
    start = read_progress(out / "progress.jsonl")[0]
    assert (start["total"], start["epochs"]) == (6, 2)

    part = tmp_path / "part"
    assert_ok(run_stage(train_args(models_root, stage1_cache, part, "--max_train_steps", "3"),
                        config_file=plain_accelerate_config))
    assert _steps(part) == [1, 2, 3]
    assert_ok(run_stage(train_args(models_root, stage1_cache, part, "--max_train_steps", "6",
                                   "--resume_from", part / "state"),
                        config_file=plain_accelerate_config))
    assert _steps(part) == [1, 2, 3, 4, 5, 6]
    assert (part / "step-6.safetensors").is_file()


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_max_steps_stays_a_cap_across_a_resume(tmp_path, models_root, stage1_cache,
                                              plain_accelerate_config):
    """max_steps 200 with one epoch of 4 steps trains 4 (a cap never adds steps); capped
    at 2 and resumed with the cap raised, the run ends where its epochs end."""
    out = tmp_path / "out"
    assert_ok(run_stage(train_args(models_root, stage1_cache, out, "--max_steps", "2"),
                        config_file=plain_accelerate_config))
    assert _steps(out) == [1, 2]
    assert_ok(run_stage(train_args(models_root, stage1_cache, out, "--max_steps", "200",
                                   "--resume_from", out / "state"),
                        config_file=plain_accelerate_config))
    assert _steps(out) == [1, 2, 3, 4]


def test_max_steps_help_says_it_is_a_cap_and_names_the_target():
    from backend.config.errors import ConfigError
    from backend.config.meta import field_meta
    from backend.config.validation import validate

    assert "cap" in field_meta("max_steps")["help"]
    assert "max_train_steps" in field_meta("max_steps")["help"]
    with pytest.raises(ConfigError) as e:
        validate({"dataset_base_path": "d", "max_train_steps": 100, "max_steps": 10})
    assert e.value.fields() == ["max_steps"]


# ------------------------------------------------------------------------ inputs
def test_sft_train_on_a_raw_dataset_suggests_a_cache_folder_of_its_own(tmp_path,
                                                                       demo_dataset):
    import subprocess
    import sys

    from tests.harness.stages import REPO, stage_env

    out = tmp_path / "out"
    proc = subprocess.run(
        [sys.executable, "-m", "backend.stages.train", "--task", "sft:train",
         "--dataset_base_path", demo_dataset, "--dataset_metadata_path",
         demo_dataset / "metadata.csv", "--output_path", out, "--offline",
         "--models_dir", tmp_path / "models"],
        cwd=REPO, env=stage_env(), capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2, proc.stderr  # exits.REFUSED
    suggested = demo_dataset.parent / f"{demo_dataset.name}_cache"
    assert f"--output_path {suggested}" in proc.stderr
    assert f"--output_path {demo_dataset}" not in proc.stderr.replace(str(suggested), "")
    assert "raw dataset" in proc.stderr and "--task sft " in proc.stderr
    assert not suggested.exists()  # a suggestion: nothing written
    end = read_progress(out / "progress.jsonl")[-1]
    assert end["status"] == "failed" and str(suggested) in end["reason"]


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_lora_targets_that_match_nothing_stop_the_train_stage_before_peft(
        tmp_path, models_root, stage1_cache):
    """to_q matches, to_qq matches nothing: peft would train to_q alone without a word."""
    import subprocess
    import sys

    from tests.harness.stages import REPO, stage_env

    out = tmp_path / "out"
    proc = subprocess.run(
        [sys.executable, "-m", "backend.stages.train",
         *map(str, train_args(models_root, stage1_cache, out, "--max_steps", "1",
                              "--lora_target_modules", "to_q,to_qq"))],
        cwd=REPO, env=stage_env(), capture_output=True, text=True, timeout=240)
    assert proc.returncode == 2, proc.stdout[-2000:] + proc.stderr[-3000:]
    assert "lora_target_modules: to_qq match no Linear layer of the transformer" in proc.stderr
    assert "transformer/config.json" in proc.stderr and "Traceback" not in proc.stderr
    assert not list(out.glob("*.safetensors"))


# ------------------------------------------------------------------------ unreadable model
def _as_nobody(fn) -> str:
    """``fn()`` in a forked child that runs as user ``nobody`` (so permission bits hold even
    when the tests run as root); returns what it returned, as text."""

    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        try:
            os.close(r)
            if os.geteuid() == 0:
                os.setgid(65534)
                os.setuid(65534)
            out = str(fn())
        except BaseException as e:  # noqa: BLE001
            out = f"child failed: {type(e).__name__}: {e}"
        os.write(w, out.encode())
        os.close(w)
        os._exit(0)
    os.close(w)
    chunks = []
    while chunk := os.read(r, 65536):
        chunks.append(chunk)
    os.close(r)
    os.waitpid(pid, 0)
    return b"".join(chunks).decode()


@pytest.mark.slow
@pytest.mark.timeout(300)
@pytest.mark.parametrize("target, words", [
    ("transformer/config.json", "permission denied reading"),
    ("transformer/diffusion_pytorch_model.safetensors", "permission denied reading"),
    ("transformer", "permission denied listing"),
])
def test_an_unreadable_model_file_is_named_not_called_missing(target, words, tiny_model_dir,
                                                             stage1_cache):
    import contextlib
    import io
    import shutil
    import tempfile

    import backend.data.cache  # noqa: F401 - imported before the fork, as the stage would
    import backend.data.dataset  # noqa: F401
    import backend.models.hub  # noqa: F401
    from backend.stages.train import main

    root = Path(tempfile.mkdtemp(prefix="zl-perm-"))
    try:
        models = root / "models"
        shutil.copytree(tiny_model_dir / "transformer",
                        models / "Qwen" / "Qwen-Image" / "transformer")
        shutil.copytree(stage1_cache, root / "cache")
        out = root / "out"
        out.mkdir()
        for p in [root, *root.rglob("*")]:
            p.chmod(0o777 if p == out else 0o755 if p.is_dir() else 0o644)
        bad = models / "Qwen" / "Qwen-Image" / target
        bad.chmod(0o000)
        argv = [str(a) for a in train_args(models, root / "cache", out, "--max_steps", "1")]

        def stage() -> str:
            err = io.StringIO()
            with contextlib.redirect_stderr(err):
                code = main(argv)
            return f"exit {code}\n{err.getvalue()}"

        text = _as_nobody(stage)
        assert text.startswith("exit 2"), text  # exits.REFUSED: a model source it cannot read
        assert f"{words} {bad}" in text, text
        assert "gives no" not in text and "missing" not in text
        end = read_progress(out / "progress.jsonl")[-1]
        assert end["status"] == "failed" and f"{words} {bad}" in end["reason"]
    finally:
        for p in [root, *root.rglob("*")]:
            with __import__("contextlib").suppress(OSError):
                p.chmod(0o755 if p.is_dir() else 0o644)
        shutil.rmtree(root, ignore_errors=True)


# ------------------------------------------------------------------------ disk full
@pytest.fixture
def small_disk(tmp_path):
    """A 32 KiB file system (tmpfs) at ``tmp_path / "disk"``; skipped where mounting is not
    permitted."""
    import subprocess

    disk = tmp_path / "disk"
    disk.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=32k", "tmpfs", str(disk)],
                      capture_output=True).returncode != 0:
        pytest.skip("cannot mount a small file system here")
    try:
        yield disk
    finally:
        subprocess.run(["umount", "-l", str(disk)], capture_output=True)


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_a_full_disk_names_the_lora_file_and_the_space(tmp_path, small_disk, models_root,
                                                       stage1_cache, plain_accelerate_config):
    out = small_disk / "out"
    progress = tmp_path / "progress.jsonl"
    proc = run_stage(train_args(models_root, stage1_cache, out, "--max_steps", "1",
                                "--progress_file", progress),
                     config_file=plain_accelerate_config)
    assert proc.returncode != 0
    assert f"error: disk full writing {out / 'step-1.safetensors'}: " in proc.stderr, \
        proc.stderr[-3000:]
    assert "free of 32.0 KiB" in proc.stderr and "needed about 4" in proc.stderr  # ~46 KiB
    assert "SafetensorError" not in proc.stderr and not (out / ".step-1.safetensors.tmp"
                                                         ).exists()
    end = read_progress(progress)[-1]
    assert end["status"] == "failed" and end["reason"].startswith("disk full writing")


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_a_full_disk_in_stage1_names_the_cache_file_and_the_space(
        tmp_path, small_disk, models_root, demo_dataset, plain_accelerate_config):
    import shutil

    data = tmp_path / "data"
    shutil.copytree(demo_dataset, data)
    filler = small_disk / "filler"
    filler.write_bytes(b"\0" * 24 * 1024)  # 8 KiB left: not one cached sample fits
    cache = small_disk / "cache"
    progress = tmp_path / "progress.jsonl"
    proc = run_stage(["--task", "sft:data_process", "--models_dir", models_root, "--offline",
                      "--dataset_base_path", data, "--output_path", cache,
                      "--progress_file", progress], config_file=plain_accelerate_config)
    assert proc.returncode != 0
    assert f"error: disk full writing {cache}/" in proc.stderr, proc.stderr[-3000:]
    assert "free of 32.0 KiB" in proc.stderr and "SafetensorError" not in proc.stderr
    end = read_progress(progress)[-1]
    assert end["status"] == "failed" and end["reason"].startswith(f"disk full writing {cache}")


# ------------------------------------------------------------------- optional packages
def test_a_stage_process_keeps_out_the_quantizers_it_was_not_asked_for(tmp_path):
    """transformers and diffusers import torchao and bitsandbytes whenever installed (seconds
    of start-up, and torchao's "Failed to load ...so" lines in the log): a stage keeps out
    those its run does not ask for, and keeps those it does."""
    import subprocess
    import sys

    from backend.config.cli import parse_stage_args
    from backend.models.quantize import packages_needed

    def needed(*flags: str) -> set[str]:
        return packages_needed(parse_stage_args([*base, *flags])[0])

    base = ["--task", "sft:train", "--dataset_base_path", str(tmp_path)]

    assert needed() == set()
    assert needed("--optimizer", "adamw8bit") == {"bitsandbytes"}
    assert needed("--enable_optimizer_cpu_offload") == {"torchao"}
    assert needed("--fp8_models", "m:transformer/*") == {"torchao"}
    assert needed("--quant_options", "m:vae/*:bitsandbytes_nf4;m:transformer/*:torchao_int8"
                  ) == {"bitsandbytes", "torchao"}
    assert needed("--customized_optimizer", "bitsandbytes.optim.AdamW8bit") == {"bitsandbytes"}
    code = ("import sys, importlib.util as u; from backend.config.cli import parse_stage_args; "
            "from backend.models.quantize import keep_out_unneeded as k; "
            "out = k(parse_stage_args(sys.argv[1:])[0]); "
            "print(out, [u.find_spec(p) is None for p in ('torchao', 'bitsandbytes')])")
    for flags, expected in (([], "['torchao', 'bitsandbytes'] [True, True]"),
                            (["--optimizer", "adamw8bit"], "['torchao'] [True, False]")):
        proc = subprocess.run([sys.executable, "-c", code, *base, *flags],
                              cwd=str(REPO), capture_output=True, text=True, timeout=120)
        assert proc.stdout.strip() == expected, proc.stdout + proc.stderr[-2000:]
