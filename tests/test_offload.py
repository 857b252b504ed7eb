"""Offload modes: stage 1's ``data_process_offload`` and the sample stage's
``sample_cpu_offload`` (none | model | sequential).

On a CPU the modes save no memory, but they run the same code as on a GPU, so the tests
check what must hold anywhere: the cache files and the images are the same in every mode,
an existing cache is reused whatever the mode, and the weights are where the mode says
(``model``: one encoder moved in at a time; ``sequential``: in host RAM, one module's
weights materialised at a time). The real stages run as subprocesses through their CLIs.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml
from PIL import Image
from safetensors.torch import load_file
from torch.overrides import TorchFunctionMode

from backend.data.cache import read_manifest
from backend.config.cli import parse_stage_args
from backend.config.errors import ConfigError
from backend.config.files import load_config
from backend.config.presets import load_preset
from backend.config.schema import RunConfig
from backend.config.validation import validate
from tests.harness.loras import make_reference_lora
from tests.harness.stages import read_progress, run_stage

REPO = Path(__file__).resolve().parent.parent
STAGE1 = ("text_encoder", "vae", "tokenizer")


def stage1_args(models_root: Path, dataset: Path, out: Path, *extra: str) -> list:
    return ["--task", "sft:data_process", "--models_dir", models_root, "--offline",
            "--dataset_base_path", dataset, "--dataset_metadata_path",
            dataset / "metadata.csv", "--output_path", out, *extra]


def assert_ok(proc: subprocess.CompletedProcess) -> None:
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]


# ------------------------------------------------------------------------------------------
# Stage 1 through the real CLI
# ------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def offload_caches(tmp_path_factory, models_root, demo_dataset, plain_accelerate_config
                   ) -> dict[str, tuple[Path, str]]:
    """The demo dataset (4 images, 64x64) cached by stage 1 with each offload mode:
    {mode: (cache folder, stage output)}. Mode none is the shared ``stage1_cache``."""
    root = tmp_path_factory.mktemp("offload-caches")
    out = {}
    for mode in ("model", "sequential"):
        proc = run_stage(stage1_args(models_root, demo_dataset, root / mode,
                                     "--data_process_offload", mode),
                         config_file=plain_accelerate_config)
        assert_ok(proc)
        out[mode] = (root / mode, proc.stdout + proc.stderr)
    return out


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_stage1_offload_modes_write_identical_caches(offload_caches, stage1_cache):
    reference = read_manifest(stage1_cache)
    assert len(reference["samples"]) == 4
    for mode, (cache, log) in offload_caches.items():
        manifest = read_manifest(cache)
        assert [e["file"] for e in manifest["samples"]] == [
            e["file"] for e in reference["samples"]], mode
        for e in reference["samples"]:
            a, b = load_file(stage1_cache / e["file"]), load_file(cache / e["file"])
            assert a.keys() == b.keys() == {"prompt_emb", "prompt_emb_mask", "latents",
                                            "height", "width"}
            for k in a:
                assert torch.equal(a[k], b[k]), (mode, e["prompt"], k)
        end = read_progress(cache / "progress.jsonl")[-1]
        assert (end["status"], end["encoded"], end["reused"]) == ("succeeded", 4, 0)
        assert f"offload {mode})" in log
        assert f"data_process_offload {mode} saves no memory without a GPU" in log
    # model offload: every prompt first, then every image.
    assert "[encoder] model offload: 4 prompt(s) encoded" in offload_caches["model"][1]
    assert "[encoder]" not in offload_caches["sequential"][1]


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_offload_mode_does_not_invalidate_the_cache(tmp_path, models_root, demo_dataset,
                                                    stage1_cache, plain_accelerate_config):
    cache = tmp_path / "cache"
    shutil.copytree(stage1_cache, cache)
    (cache / "progress.jsonl").unlink()
    proc = run_stage(stage1_args(models_root, demo_dataset, cache,
                                 "--data_process_offload", "sequential"),
                     config_file=plain_accelerate_config)
    assert_ok(proc)
    end = read_progress(cache / "progress.jsonl")[-1]
    assert (end["status"], end["encoded"], end["reused"]) == ("succeeded", 0, 4)
    assert "Loading weights" not in proc.stdout + proc.stderr  # encoders never loaded
    assert read_manifest(cache) == read_manifest(stage1_cache)


# ------------------------------------------------------------------------------------------
# Stage 1: where the weights are
# ------------------------------------------------------------------------------------------
class ResidentParameters(TorchFunctionMode):
    """The most parameters of ``modules`` held as real (non-meta) tensors at any torch call
    (read afresh each time: the offload hooks swap the parameter objects)."""

    def __init__(self, modules):
        super().__init__()
        self.modules = modules
        self.peak = 0

    def __torch_function__(self, func, types, args=(), kwargs=None):
        resident = sum(p.numel() for m in self.modules for p in m.parameters()
                       if p.device.type != "meta")
        self.peak = max(self.peak, resident)
        return func(*args, **(kwargs or {}))


def own_params(module) -> int:
    return sum(p.numel() for p in module.parameters(recurse=False))


def pixels(seed: int = 0):
    return torch.rand(1, 3, 64, 64, generator=torch.Generator().manual_seed(seed)) * 2 - 1


def test_sequential_encoder_streams_one_module_at_a_time(tiny_model_dir):
    from backend.families import get_family

    load_encoder = get_family("qwen_image").load_encoder

    dirs = {k: tiny_model_dir / k for k in STAGE1}
    plain = load_encoder(dirs, torch.float32, "cpu")
    total = sum(p.numel() for m in (plain.text_encoder, plain.vae) for p in m.parameters())
    largest = max(own_params(m) for enc in (plain.text_encoder, plain.vae)
                  for m in enc.modules())
    with ResidentParameters([plain.text_encoder, plain.vae]) as seen:
        expected = plain.encode_sample(pixels(), "a red circle")
    assert seen.peak == total  # the counter sees every weight when nothing is offloaded

    enc = load_encoder(dirs, torch.float32, "cpu", offload="sequential")
    modules = [enc.text_encoder, enc.vae]
    assert all(p.device.type == "meta" for m in modules for p in m.parameters())
    with ResidentParameters(modules) as seen:
        got = enc.encode_sample(pixels(), "a red circle")
    assert 0 < seen.peak <= largest < total / 3
    assert all(p.device.type == "meta" for m in modules for p in m.parameters())
    for k in expected:
        assert torch.equal(expected[k], got[k]), k


def test_model_offload_moves_one_encoder_at_a_time(tiny_model_dir):
    """model: the text encoder is moved to the device for every prompt and back, then the
    VAE for every image and back -- also when the stage is stopped half-way."""
    from backend.families import get_family

    load_encoder = get_family("qwen_image").load_encoder

    def trace(enc) -> list[tuple[str, str]]:
        events: list[tuple[str, str]] = []
        for name, module, runs in (("text_encoder", enc.text_encoder, enc.text_encoder),
                                   ("vae", enc.vae, enc.vae.encoder)):
            def to(*args, _name=name, _to=module.to, **kwargs):
                events.append((_name, "to " + str(args[0] if args else kwargs["device"])))
                return _to(*args, **kwargs)
            module.to = to
            runs.register_forward_pre_hook(lambda m, a, _name=name: events.append(
                (_name, "forward")))
        return events

    dirs = {k: tiny_model_dir / k for k in STAGE1}
    items = [(lambda s=s: pixels(s), p) for s, p in enumerate(["a red circle", "a blue square",
                                                               "a green triangle"])]
    plain = load_encoder(dirs, torch.float32, "cpu")
    events = trace(plain)
    expected = list(plain.encode_samples(items))
    assert events == [("text_encoder", "forward"), ("vae", "forward")] * 3  # interleaved

    enc = load_encoder(dirs, torch.float32, "cpu", offload="model")
    events = trace(enc)
    got = list(enc.encode_samples(items, log=lambda *_: None))
    assert events == ([("text_encoder", "to cpu")] + [("text_encoder", "forward")] * 3
                      + [("text_encoder", "to cpu"), ("vae", "to cpu")]
                      + [("vae", "forward")] * 3 + [("vae", "to cpu")])
    for a, b in zip(expected, got, strict=True):
        assert all(torch.equal(a[k], b[k]) for k in a)

    # Stopped after the first image: one sample, and the VAE still goes back to the host.
    events.clear()
    done: list = []
    for sample in enc.encode_samples(items, should_stop=lambda: bool(done),
                                     log=lambda *_: None):
        done.append(sample)
    assert len(done) == 1 and events[-1] == ("vae", "to cpu")
    assert events.count(("vae", "forward")) == 1


# ------------------------------------------------------------------------------------------
# Sample stage
# ------------------------------------------------------------------------------------------
def sample_env() -> dict[str, str]:
    return {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1",
            "TOKENIZERS_PARALLELISM": "false", "PYTHONPATH": str(REPO)}


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_sample_offload_modes_render_the_same_images(tiny_model_dir, tmp_path):
    """Base and LoRA images (loading a LoRA takes the offload hooks off and puts them back)
    through the real sample stage in each sample_cpu_offload mode."""
    lora = tmp_path / "ckpt" / "step-1.safetensors"
    make_reference_lora(tiny_model_dir, lora, seed=1, b_std=2.0)
    images, logs = {}, {}
    for mode in ("none", "model", "sequential"):
        out = tmp_path / mode
        res = subprocess.run(
            [sys.executable, "-m", "backend.stages.sample", "--stages", "sample",
             "--model_id_with_origin_paths", str(tiny_model_dir), "--offline",
             "--sample_prompts", "a red circle", "--sample_lora_scales", "0", "1",
             "--sample_steps", "2", "--sample_height", "64", "--sample_width", "64",
             "--sample_cpu_offload", mode, "--checkpoints", str(lora),
             "--output_dir", str(out), "--progress_file", str(tmp_path / f"{mode}.jsonl")],
            cwd=REPO, env=sample_env(), capture_output=True, text=True, timeout=600)
        assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
        logs[mode] = res.stdout + res.stderr
        images[mode] = {p.relative_to(out).as_posix(): np.asarray(Image.open(p).convert("RGB"))
                        for p in out.rglob("*.png")}
    for mode in ("model", "sequential"):
        assert sorted(images[mode]) == sorted(images["none"]) == [
            "base/p00-seed0.png", "step-1/p00-x1-seed0.png"]
        for name, image in images["none"].items():
            assert image.shape == (64, 64, 3)
            assert np.array_equal(image, images[mode][name]), (mode, name)
        base, with_lora = (images[mode][k] for k in sorted(images[mode]))
        assert not np.array_equal(base, with_lora)  # the LoRA loaded under the hooks
        assert f"sample_cpu_offload {mode} saves no memory without a GPU" in logs[mode]
    assert "saves no memory" not in logs["none"]


def test_sample_pipeline_places_weights_by_mode(tiny_model_dir):
    from accelerate.hooks import AlignDevicesHook, CpuOffload

    from backend.training.samples import load_pipeline

    def hooks(module) -> list:
        found = []
        for m in module.modules():
            hook = getattr(m, "_hf_hook", None)
            found += list(getattr(hook, "hooks", None) or ([hook] if hook else []))
        return found

    def pipe_for(mode: str, **changes):
        cfg = RunConfig(stages=["sample"], model_id_with_origin_paths=str(tiny_model_dir),
                        offline=True, sample_cpu_offload=mode, **changes)
        return load_pipeline(cfg, device="cpu", dtype=torch.float32)[0]

    names = ("transformer", "text_encoder", "vae")
    none = pipe_for("none")
    for name in names:
        component = getattr(none, name)
        assert not hooks(component)
        assert {p.device.type for p in component.parameters()} == {"cpu"}
    assert not none.vae.use_tiling

    model = pipe_for("model")
    for name in names:
        assert [type(h) for h in hooks(getattr(model, name))] == [CpuOffload], name

    seq = pipe_for("sequential", sample_vae_tiling=True)
    for name in names:
        component = getattr(seq, name)
        assert {p.device.type for p in component.parameters()} == {"meta"}, name
        found = [h for h in hooks(component) if isinstance(h, AlignDevicesHook) and h.offload]
        assert found and {str(h.execution_device) for h in found} == {"cpu"}, name
    assert seq.vae.use_tiling


def test_vae_tiling_changes_only_images_larger_than_a_tile(tiny_model_dir):
    """sample_vae_tiling decodes in 256-pixel tiles: the same pixels below a tile, blended
    (slightly different) ones above."""
    from backend.training.samples import load_pipeline

    def decode(side: int, tiling: bool) -> torch.Tensor:
        cfg = RunConfig(stages=["sample"], model_id_with_origin_paths=str(tiny_model_dir),
                        offline=True, sample_vae_tiling=tiling)
        vae = load_pipeline(cfg, device="cpu", dtype=torch.float32)[0].vae
        z = torch.randn(1, vae.config.z_dim, 1, side // 8, side // 8,
                        generator=torch.Generator().manual_seed(0))
        with torch.no_grad():
            return vae.decode(z, return_dict=False)[0]

    assert torch.equal(decode(64, False), decode(64, True))
    plain, tiled = decode(272, False), decode(272, True)
    assert plain.shape == tiled.shape == (1, 3, 1, 272, 272)
    assert not torch.equal(plain, tiled)


# ------------------------------------------------------------------------------------------
# Options: old spellings and presets
# ------------------------------------------------------------------------------------------
def test_sample_cpu_offload_reads_the_old_boolean_spellings(tmp_path):
    old = tmp_path / "run.yaml"
    old.write_text("schema_version: 1\nstages: [sample]\nsample_cpu_offload: true\n")
    assert load_config(old).sample_cpu_offload == "model"
    old.write_text("schema_version: 1\nstages: [sample]\nsample_cpu_offload: false\n")
    assert load_config(old).sample_cpu_offload == "none"
    for argv, mode in ((["--sample_cpu_offload"], "model"),
                       (["--no-sample_cpu_offload"], "none"),
                       (["--sample_cpu_offload", "true"], "model"),
                       (["--sample_cpu_offload", "sequential"], "sequential")):
        cfg, _ = parse_stage_args(["--stages", "sample", *argv], prog="backend.stages.sample")
        assert cfg.sample_cpu_offload == mode, argv
    # Saved files carry the mode name, and load back to it.
    cfg = RunConfig(sample_cpu_offload=True, data_process_offload="model")
    assert yaml.safe_load(cfg.to_yaml())["sample_cpu_offload"] == "model"
    with pytest.raises(ConfigError) as err:
        validate({"data_process_offload": True, "sample_cpu_offload": "fast"},
                 require_inputs=False)
    assert str(err.value).splitlines()[1:] == [
        "  data_process_offload: input should be 'none', 'model' or 'sequential' (got True; "
        "allowed none | model | sequential)",
        "  sample_cpu_offload: input should be 'none', 'model' or 'sequential' (got 'fast'; "
        "allowed none | model | sequential)"]
    # An old sample command imported by the importer keeps its meaning.
    from backend.planning.importer import import_commands
    imported = import_commands("python -m backend.stages.sample --sample_cpu_offload "
                               "--sample_steps 20\n")
    assert imported.config.sample_cpu_offload == "model"


def test_low_vram_preset_offloads_every_stage():
    low = load_preset("qwen_image_low_vram")
    assert (low.data_process_offload, low.sample_cpu_offload, low.sample_vae_tiling) == (
        "sequential", "sequential", True)
    assert load_preset("qwen_image_single_gpu").sample_cpu_offload == "model"
    assert load_preset("cpu_demo").sample_cpu_offload == "none"
