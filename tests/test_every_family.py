"""Checks every registered family and variant gets from the registry, with no test code of its
own (``tests/harness/families.py`` makes the cases); a family's own file keeps only what is
particular to it. A tiny family planted here gets the same checks.

- Training, exports, samples, resume: one LoRA per family trained under DeepSpeed ZeRO-3 with
  offload lowers the held-out loss; every ComfyUI key names a module; the diffusers export
  changes the family pipeline's output; the sample stage renders into the Results grid; a
  stopped run resumes at its step to the same LoRA.
- Sizes: a 100x58 image (or a 16:9 clip of 96x54) that no family's multiple divides trains
  one step at the sizes the family's multiple gives, as the Dataset check says; a fixed
  height or width that is no multiple is refused, naming the multiple.
"""
from __future__ import annotations

import inspect
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from backend.config.errors import ConfigError
from backend.config.validation import validate
from backend.core.progress import read_events
from backend.core.rundir import RunDir, list_checkpoints
from backend.data.dataset import validate_dataset
from backend.data.video import validate_video_dataset
from backend.data.cache import load_cached_samples
from backend.families import EXTRA_FAMILIES_ENV, family_spec, get_family
from backend.models.export import export_lora, load_lora_file
from backend.models.lora import expected_shapes, load_lora, read_lora
from backend.training.samples import _render as render
from backend.training.samples import component_dirs, load_pipeline, read_index
from webui import jobs as results
from tests.harness.families import (ODD_CLIP, ODD_IMAGE, RANK, adjusted, build_models, cases,
                                    clip_frames, family_cases, odd_dataset, run_config,
                                    run_stage_here, sigterm_after_step, write_run_config)
from tests.harness.stages import REPO, stage_env

CASES = cases()
pytestmark = pytest.mark.timeout(600)


def findings(case, cfg):
    """The Dataset check's findings, as the tab shows them."""
    return (validate_video_dataset if case.media == "video" else validate_dataset)(cfg)


@pytest.mark.slow  # a stage in this process, per variant
@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_one_step_from_a_size_no_multiple_divides(case, tmp_path):
    models = build_models(tmp_path / "models", case)
    data = odd_dataset(tmp_path / "data", case)
    out = tmp_path / "out"
    # A distilled variant (Turbo) trains directly here on purpose: the check is its sizes.
    variant = family_spec(case.family).variant(case.variant)
    raw = run_config(case, models, data, out, task="sft", num_epochs=1, dataset_repeat=1,
                     lora_rank=2, seed=0, mixed_precision="no", num_frames=clip_frames(case),
                     dataset_num_workers=0, save_steps=1,
                     train_distilled=bool(variant and variant.distilled_from))
    cfg = validate(raw)
    m = case.multiple
    expected = adjusted(ODD_CLIP if case.media == "video" else ODD_IMAGE, m)
    sizes = [tuple(f["size"]) for f in findings(case, cfg) if f.get("file")]
    assert sizes == [expected], (sizes, m)

    code, log = run_stage_here("train", ["--config", write_run_config(tmp_path / "run.yaml",
                                                                      raw)])
    assert code == 0, log[-6000:]
    events, _ = read_events(out / "progress.jsonl")
    assert events[-1]["event"] == "end" and events[-1]["status"] == "succeeded", events[-1]
    assert [e["step"] for e in events if e["event"] == "step"] == [1]
    assert list_checkpoints(out), sorted(p.name for p in out.iterdir())

    # A fixed size that is no multiple is refused, naming the multiple.
    with pytest.raises(ConfigError) as refused:
        validate({**raw, "height": expected[1] + m // 2, "width": expected[0]})
    assert f"multiples of {m}" in str(refused.value) or f"multiple of {m}" in str(refused.value)


# ------------------------------------------------------------------------------------------
# One trained LoRA per family (tests/harness/families.py FamilyRuns), every check on it
# ------------------------------------------------------------------------------------------
FAMILIES = family_cases()
IDS = [c.family for c in FAMILIES]
PROMPT = "a red circle on a white background"


def trained_model(case, cfg):
    """The family's trained component (float32, eval) from the run's own sources."""
    import torch

    family = get_family(case.family).for_config(cfg)
    name = family.spec.trained_component
    folder = component_dirs(cfg, [name])[name]
    return family, family.load_transformer(folder, torch.float32).eval(), folder


def shown_media(path):
    """An image file as its pixels, a clip as its frames."""
    from PIL import Image

    from backend.data.video import read_video_frames

    return read_video_frames(path) if path.suffix in (".webm", ".mp4") else Image.open(path)


def pixels(result):
    """A rendered image or clip (PIL image, frames, array) as one float array."""
    import numpy as np

    if isinstance(result, (list, tuple)):
        return np.stack([pixels(r) for r in result])
    return np.asarray(result, dtype=np.float64)


@pytest.mark.slow
@pytest.mark.parametrize("case", FAMILIES, ids=IDS)
def test_zero3_offload_training_lowers_the_held_out_loss(case, family_runs):
    """Stage 2 under the reference's ZeRO-3 CPU-offload DeepSpeed file (parameters built
    partitioned): every target module has its keys and shapes, the LoRA was trained, and it
    lowers the loss on a fixed held-out batch (fixed noise and timesteps)."""
    path, raw, out = family_runs.trained(case)
    assert "ZeRO-3" in out and "built partitioned" in out, out[-3000:]
    cfg = validate(raw)
    family, model, _ = trained_model(case, cfg)
    tensors, meta = read_lora(path)
    assert meta["model_family"] == case.family
    targets = family.target_modules(meta["target_modules"].split(","))
    assert {k: tuple(v.shape) for k, v in tensors.items()} == expected_shapes(model, RANK,
                                                                               targets)
    assert sum(float(v.abs().sum()) for k, v in tensors.items() if ".lora_B." in k) > 0
    samples = load_cached_samples(family_runs.cache(case))
    before = family.eval_loss(model, samples)
    load_lora(model, path)
    after = family.eval_loss(model, samples)
    print(f"\n{case.family} held-out loss: before {before:.4f}, after {after:.4f}")
    assert after < before, f"held-out loss {after:.4f} not below {before:.4f}"


@pytest.mark.slow
@pytest.mark.parametrize("case", FAMILIES, ids=IDS)
def test_every_comfyui_key_names_a_module_of_the_model(case, family_runs, tmp_path):
    path, raw, _ = family_runs.trained(case)
    cfg = validate(raw)
    family, model, folder = trained_model(case, cfg)
    comfy = export_lora(path, "comfyui", out_dir=tmp_path, transformer_config=folder,
                        family=case.family)
    tensors, _ = load_lora_file(comfy)
    prefix = family.export_prefixes["comfyui"]
    modules = {n for n, _ in model.named_modules()}
    suffixes = (".lora_down.weight", ".lora_up.weight", ".alpha")
    assert tensors and all(k.startswith(prefix) and k.endswith(suffixes) for k in tensors)
    names = {family.import_module_name(k[len(prefix):].rsplit(".lora_", 1)[0]
                                       .removesuffix(".alpha"), "comfyui") for k in tensors}
    # A layer ComfyUI's model keeps fused names the parts it stands for.
    for fused, parts in family.fused_modules.get("comfyui", {}).items():
        for name in [n for n in names if n.endswith("." + fused)]:
            names.remove(name)
            block = name[: -len(fused)]
            names |= {block + p for p in parts}
    trained = {k.split(".lora_", 1)[0] for k in read_lora(path)[0]}
    assert names == trained and names <= modules, sorted(names ^ trained)


@pytest.mark.slow
@pytest.mark.parametrize("case", FAMILIES, ids=IDS)
def test_the_diffusers_export_changes_the_pipelines_output(case, family_runs, tmp_path):
    """``load_lora_weights`` of the family's own diffusers pipeline takes the export, the
    render changes, and unloading it gives the base render back."""
    path, raw, _ = family_runs.trained(case)
    cfg = validate(raw)
    _, _, folder = trained_model(case, cfg)
    exported = export_lora(path, "diffusers", out_dir=tmp_path, transformer_config=folder,
                           family=case.family)
    pipe, _ = load_pipeline(cfg, device="cpu")
    before = pixels(render(pipe, cfg, PROMPT))
    pipe.load_lora_weights(str(exported))
    after = pixels(render(pipe, cfg, PROMPT))
    assert (before == before).all() and (after == after).all()  # no NaN
    assert abs(after - before).max() > 1e-3
    pipe.unload_lora_weights()
    assert abs(pixels(render(pipe, cfg, PROMPT)) - before).max() < 1e-5


@pytest.mark.slow
@pytest.mark.parametrize("case", FAMILIES, ids=IDS)
def test_the_sample_stage_renders_base_and_lora_into_the_results_grid(case, family_runs,
                                                                       tmp_path):
    """The sample stage (in this process) into a run's samples folder: the base model and
    the LoRA at two strengths from one seed; the LoRA's differ from the base's and from each
    other, and the Results tab's grid shows them as its columns."""
    path, raw, _ = family_runs.trained(case)
    # The shared run's folder stays as training left it: this stage's progress goes here.
    raw = {**raw, "progress_file": str(tmp_path / "progress.jsonl")}
    run = {"id": "run-1", "run_dir": str(tmp_path / "run")}
    out = RunDir.of(run).samples
    code, log = run_stage_here("sample", [
        "--config", write_run_config(tmp_path / "run.yaml", raw), "--checkpoints", path,
        "--output_dir", out, "--sample_prompts", PROMPT, "--sample_lora_scales", "0", "1",
        "2"])
    assert code == 0, log[-6000:]
    entries = read_index(out)
    assert [e["scale"] for e in entries] == [0.0, 1.0, 2.0]
    cfg = validate(raw)  # the family's own sample settings (e.g. a guided or distilled model)
    assert all(e["steps"] == cfg.sample_steps and e["cfg"] == cfg.sample_cfg for e in entries)
    shown = [pixels(shown_media(out / e["image"])) for e in entries]
    assert abs(shown[1] - shown[0]).max() > 0 and abs(shown[2] - shown[1]).max() > 0
    images, titles, columns = results.grid(run)
    assert titles == ["base model", f"{path.stem} × 1", f"{path.stem} × 2"] and columns == 3
    assert [Path(i) for i, _ in images] == [out / e["image"] for e in entries]


@pytest.mark.slow
@pytest.mark.parametrize("case", FAMILIES, ids=IDS)
def test_a_stopped_run_resumes_at_its_step_to_the_same_lora(case, family_runs, tmp_path):
    """Stopped by SIGTERM at step 2 of 6 (in this process, no DeepSpeed), resumed from its
    state folder: it continues at step 3, ends at 6, and its LoRA equals an uninterrupted
    run's (data order, noise and optimizer state kept)."""
    def train(name: str, **changes):
        raw = family_runs.config(case, tmp_path / name, task="sft:train",
                                 dataset_base_path=str(family_runs.cache(case)),
                                 learning_rate=5e-3, num_epochs=1000, max_steps=6,
                                 save_steps=6, **changes)
        raw.pop("dataset_metadata_path", None)
        return run_stage_here("train", ["--config", write_run_config(
            tmp_path / f"{name}-{len(changes)}.yaml", raw)])

    code, log = train("full")
    assert code == 0, log[-6000:]
    with sigterm_after_step(2):
        code, log = train("part")
    assert code == 143, log[-6000:]  # the stage's exit code for a stop
    events, _ = read_events(tmp_path / "part" / "progress.jsonl")
    assert events[-1]["status"] == "stopped" and events[-1]["step"] == 2, events[-1]
    code, log = train("part", resume_from=str(tmp_path / "part" / "state"))
    assert code == 0, log[-6000:]
    events, _ = read_events(tmp_path / "part" / "progress.jsonl")
    resumed = events[max(i for i, e in enumerate(events) if e["event"] == "start"):]
    assert resumed[0]["step"] == 2
    assert [e["step"] for e in resumed if e["event"] == "step"] == [3, 4, 5, 6]
    assert resumed[-1]["status"] == "succeeded"
    full, _ = read_lora(tmp_path / "full" / "step-6.safetensors")
    again, _ = read_lora(tmp_path / "part" / "step-6.safetensors")
    assert full.keys() == again.keys()
    for k in full:
        assert torch_close(full[k], again[k]), k


def torch_close(a, b) -> bool:
    import torch

    return torch.allclose(a, b, atol=1e-6, rtol=1e-5)


def common_checks() -> list[str]:
    """This module's tests that every family and variant gets (those taking a ``case``)."""
    return sorted(name for name, f in globals().items() if name.startswith("test_")
                  and callable(f) and "case" in inspect.signature(f).parameters)


@pytest.mark.slow
@pytest.mark.timeout(1800)
def test_a_planted_family_gets_every_common_check():
    """A family defined in tests/harness/planted.py, outside backend/families/ and with no
    test code, registered through ZEROLORA_FAMILY_MODULES: pytest run on this module with it
    collects every common check for it, and each passes."""
    if os.environ.get(EXTRA_FAMILIES_ENV):
        pytest.skip("this is the run it starts")
    env = stage_env({EXTRA_FAMILIES_ENV: "tests.harness.planted"})
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-rA", "-p", "no:cacheprovider",
                           __file__, "-k", "planted"], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=1700)
    passed = sorted(re.findall(r"^PASSED \S+::(\w+)\[planted\]", proc.stdout, re.M))
    assert passed == common_checks(), proc.stdout[-6000:] + proc.stderr[-3000:]
    assert proc.returncode == 0, proc.stdout[-6000:]
