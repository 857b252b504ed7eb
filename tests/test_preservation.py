"""Regularization against drift (``backend/training/preservation.py``): prior preservation
(a class dataset cached by stage 1, its loss added at ``prior_loss_weight``) and
differential output preservation (the LoRA's prediction for the DOP caption pulled toward
the base model's, the LoRA switched off, at ``dop_weight``).

Fast: the DOP term is mse(LoRA on, LoRA off) on the training loss's own noisy latents;
weight 0 runs nothing; the prior term is the family's loss on the micro-step's class
sample; stage 1's DOP captions; the refusals. Slow: on the tiny model, after training on a
trigger-word set, the LoRA's prediction on the class captions stays closer to the base
model's with DOP than without (both distances in the assert message), and a run with
``dop_weight`` 0 is a plain run step for step."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from backend.config.errors import ConfigError
from backend.config.schema import RunConfig
from backend.config.validation import validate
from backend.data.cache import load_sample, save_sample, write_manifest
from backend.families.base import uniform_index_loss
from backend.families.qwen_image.adapter import Adapter, pack_latents, predict
from backend.families.qwen_image.tiny import TRANSFORMER_CONFIG
from backend.models import lora
from backend.training import preservation
from backend.training.loop import StageError, step_generator
from tests.harness.stages import (CAPTIONS, assert_ok, check_progress, make_dataset,
                                  run_stage, train_args)

TRIGGER, CLASS_WORD = "zlr", "shape"


def dop_cfg(**over) -> RunConfig:
    values = {"task": "sft:train", "diff_output_preservation": True, "trigger_word": TRIGGER,
              "dop_class": CLASS_WORD, "seed": 0}
    values.update(over)
    return RunConfig(**values)


def tiny_lora_model(perturb: bool = True):
    from diffusers import QwenImageTransformer2DModel

    torch.manual_seed(0)
    model = QwenImageTransformer2DModel(**TRANSFORMER_CONFIG)
    lora.add_lora(model, 4, ["to_q", "to_k", "to_v", "to_out.0"])
    if perturb:  # a LoRA that has trained a little (lora_B starts at 0: on = off)
        with torch.no_grad():
            for name, p in model.named_parameters():
                if "lora_B" in name:
                    p.copy_(torch.randn_like(p) * 0.2)
    return model


def batch(seed: int = 1) -> dict:
    g = torch.Generator().manual_seed(seed)
    c, d = TRANSFORMER_CONFIG["in_channels"] // 4, TRANSFORMER_CONFIG["joint_attention_dim"]
    return {"latents": torch.randn(1, c, 8, 8, generator=g),
            "prompt_emb": torch.randn(1, 5, d, generator=g),
            "prompt_emb_mask": torch.ones(1, 5, dtype=torch.long),
            "dop_prompt_emb": torch.randn(1, 6, d, generator=g),
            "dop_prompt_emb_mask": torch.ones(1, 6, dtype=torch.long)}


def by_hand_distance(model, sample: dict, state, schedule) -> torch.Tensor:
    """mse(LoRA on, LoRA off) on the draw a replay of ``state`` gives, the LoRA switched
    off by diffusers' own ``disable_adapters`` (not the module's switch)."""
    g = preservation.replayed(state)
    index = int(torch.randint(0, len(schedule.sigmas), (1,), generator=g))
    noise = torch.randn(sample["latents"].shape, generator=g)
    sigma = schedule.sigmas[index]
    x_t = (1 - sigma) * sample["latents"] + sigma * noise
    t = schedule.timesteps[index] / 1000
    args = (x_t, t, sample["dop_prompt_emb"], sample["dop_prompt_emb_mask"])
    with torch.no_grad():
        on = predict(model, *args)
        model.disable_adapters()
        off = predict(model, *args)
        model.enable_adapters()
    return torch.nn.functional.mse_loss(on, off)


# ------------------------------------------------------------------------------------------
# The DOP term
# ------------------------------------------------------------------------------------------
def test_dop_term_is_the_lora_against_the_base_on_the_training_draw():
    model, family = tiny_lora_model(), Adapter()
    schedule = family.training_schedule()
    extra = preservation.Preservation(dop_cfg(), family, model, schedule, torch.float32, "cpu")
    sample = batch()
    state = step_generator(0, 0, 3).get_state()
    grads_before = {n: p.requires_grad for n, p in model.named_parameters()}
    term = extra.loss(model, sample, state, micro=3)
    expected = by_hand_distance(model, sample, state, schedule)
    assert float(term.detach()) > 0
    torch.testing.assert_close(term.detach(), expected, rtol=1e-5, atol=1e-7)
    term.backward()
    lora_grads = [p.grad for n, p in model.named_parameters() if "lora_" in n]
    assert lora_grads and all(g is not None for g in lora_grads)
    assert any(float(g.abs().sum()) > 0 for g in lora_grads)
    # Switched back on, and nothing frozen or unfrozen on the way.
    assert {n: p.requires_grad for n, p in model.named_parameters()} == grads_before
    assert not any(layer.disable_adapters for layer in preservation.tuner_layers(model))


def test_a_fresh_lora_is_the_base_model_so_the_term_starts_at_zero():
    model = tiny_lora_model(perturb=False)
    extra = preservation.Preservation(dop_cfg(), Adapter(), model,
                                      Adapter().training_schedule(), torch.float32, "cpu")
    assert float(extra.loss(model, batch(), step_generator(0, 0, 0).get_state(), 0)) == 0.0


def test_weight_zero_runs_nothing_and_adds_nothing():
    model = tiny_lora_model()
    calls = []
    model.register_forward_hook(lambda *a: calls.append(1))
    extra = preservation.Preservation(dop_cfg(dop_weight=0.0), Adapter(), model,
                                      Adapter().training_schedule(), torch.float32, "cpu")
    assert extra.loss(model, batch(), step_generator(0, 0, 0).get_state(), 0) == 0.0
    assert calls == []
    assert preservation.Preservation.of(RunConfig(task="sft:train"), Adapter(), model,
                                        None, torch.float32, "cpu") is None


def test_dop_refuses_a_run_without_lora_and_one_shot_training():
    from diffusers import QwenImageTransformer2DModel

    plain = QwenImageTransformer2DModel(**TRANSFORMER_CONFIG)
    with pytest.raises(StageError, match="diff_output_preservation: the base model"):
        preservation.Preservation(dop_cfg(), Adapter(), plain, None, torch.float32, "cpu")
    with pytest.raises(StageError, match="got task sft") as e:
        preservation.check_task(dop_cfg(task="sft"))
    assert "阶段 1" in e.value.args[0].text("zh")


# ------------------------------------------------------------------------------------------
# The prior term
# ------------------------------------------------------------------------------------------
def fake_class_cache(cache: Path, n: int = 3) -> list[dict]:
    folder = cache / preservation.CLASS_CACHE
    folder.mkdir(parents=True)
    samples, entries = [], []
    for i in range(n):
        s = batch(seed=10 + i)
        s = {k: v for k, v in s.items() if not k.startswith("dop_")}
        save_sample(folder / f"c{i}.safetensors", s, {"prompt": f"class {i}"})
        entries.append({"file": f"c{i}.safetensors", "prompt": f"class {i}"})
        samples.append(s)
    write_manifest(folder, entries, [], "qwen_image")
    return samples


def test_prior_term_is_the_weighted_loss_of_the_micro_steps_class_sample(tmp_path):
    samples = fake_class_cache(tmp_path)
    model, family = tiny_lora_model(), Adapter()
    schedule = family.training_schedule()
    cfg = RunConfig(task="sft:train", prior_preservation=True, class_data_path=str(tmp_path),
                    prior_loss_weight=0.5, dataset_base_path=str(tmp_path), seed=0)
    extra = preservation.Preservation(cfg, family, model, schedule, torch.float32, "cpu")
    # Each pass over the class set takes every class sample once.
    seen = [extra.class_sample(m)["latents"] for m in range(3)]
    which = [[torch.equal(s, x["latents"]) for x in samples].index(True) for s in seen]
    assert sorted(which) == [0, 1, 2]
    term = extra.loss(model, batch(), None, micro=4)
    with torch.no_grad():
        expected = 0.5 * uniform_index_loss(family.loss_at, model, extra.class_sample(4),
                                            schedule, preservation.class_generator(0, 0, 4),
                                            torch.float32)
    torch.testing.assert_close(term.detach(), expected)
    with pytest.raises(StageError, match="prior_preservation: no class cache"):
        preservation.Preservation(cfg.model_copy(update={"dataset_base_path": str(
            tmp_path / "elsewhere")}), family, model, schedule, torch.float32, "cpu")


# ------------------------------------------------------------------------------------------
# Stage 1's DOP captions
# ------------------------------------------------------------------------------------------
class FakeEncoder:
    def __init__(self):
        self.prompts = []

    def encode_sample(self, pixels, prompt):
        self.prompts.append(prompt)
        return {"latents": torch.zeros(1, 16, 2, 2),
                "prompt_emb": torch.full((1, 2, 4), float(len(prompt)))}


def test_stage1_encodes_each_dop_caption_once_and_drops_stale_ones(tmp_path):
    cfg = dop_cfg(task="sft:data_process", output_path=str(tmp_path))
    entries = [{"file": f"s{i}.safetensors", "prompt": f"{TRIGGER}, {c}"}
               for i, (_, _, _, c) in enumerate(CAPTIONS)] + [
        {"file": "s9.safetensors", "prompt": f"{TRIGGER}, {CAPTIONS[0][3]}"}]
    write_manifest(tmp_path, entries, [], "qwen_image")
    enc = FakeEncoder()
    assert preservation.write_dop_captions(cfg, lambda: enc, ["m"], lambda: False, print) == 4
    assert sorted(enc.prompts) == sorted(f"{CLASS_WORD}, {c}" for *_, c in CAPTIONS)
    stale = tmp_path / preservation.DOP_CACHE / "old.safetensors"
    stale.write_bytes(b"x")
    assert preservation.write_dop_captions(cfg, lambda: enc, ["m"], lambda: False, print) == 0
    assert not stale.exists()
    caption = f"{CLASS_WORD}, {CAPTIONS[1][3]}"
    tensors = load_sample(preservation.dop_file(tmp_path, caption))
    assert set(tensors) == {"prompt_emb"} and float(tensors["prompt_emb"][0, 0, 0]) == len(caption)
    # Another encoder: every caption again.
    assert preservation.write_dop_captions(cfg, lambda: enc, ["m2"], lambda: False, print) == 4


# ------------------------------------------------------------------------------------------
# Refused before any stage, naming the field
# ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("over, text", [
    ({"prior_preservation": True, "class_data_path": "/no/such/folder"},
     "class_data_path: class dataset folder not found"),
    ({"prior_preservation": True}, "class_data_path: prior preservation needs a class dataset"),
    ({"prior_preservation": True, "class_data_path": ".", "prior_loss_weight": -0.5},
     "prior_loss_weight: input should be greater than or equal to 0"),
    ({"diff_output_preservation": True, "trigger_word": TRIGGER, "dop_class": CLASS_WORD,
      "dop_weight": -1}, "dop_weight: input should be greater than or equal to 0"),
    ({"diff_output_preservation": True, "dop_class": CLASS_WORD},
     "trigger_word: DOP replaces trigger_word by dop_class"),
    ({"dop_class": CLASS_WORD}, "dop_class: a DOP option without differential output"),
    ({"diff_output_preservation": True, "trigger_word": TRIGGER, "dop_class": CLASS_WORD,
      "trainable_models": "dit"}, "diff_output_preservation: a LoRA option beside"),
])
def test_refusals_name_the_field(over, text):
    with pytest.raises(ConfigError) as e:
        validate(over, require_inputs=False)
    assert text in str(e.value)


def test_accepted_with_their_inputs(tmp_path):
    validate({"prior_preservation": True, "class_data_path": str(tmp_path),
              "diff_output_preservation": True, "trigger_word": TRIGGER,
              "dop_class": CLASS_WORD}, require_inputs=False)
    # Stage 2 reads the class set from the cache: the raw folder may be gone by then.
    validate({"task": "sft:train", "prior_preservation": True,
              "class_data_path": str(tmp_path / "gone")}, require_inputs=False)


# ------------------------------------------------------------------------------------------
# On the tiny model: DOP keeps the class prompt's prediction near the base model's
# ------------------------------------------------------------------------------------------
def distance_to_base(transformer_dir: Path, cache: Path, lora_path: Path,
                     trigger: bool = False) -> float:
    """Mean mse(LoRA, base) of the tiny transformer's predictions on the cache's DOP
    captions (the class prompts; ``trigger``: the training captions instead) over its
    latents, at fixed timesteps and noise."""
    from backend.data.cache import load_cached_samples

    family = Adapter()
    schedule = family.training_schedule()
    model = family.load_transformer(transformer_dir, torch.float32).eval()
    lora.load_lora(model, lora_path)
    captions = (load_cached_samples(cache) if trigger else
                [load_sample(p) for p in sorted((cache / preservation.DOP_CACHE).iterdir())])
    total, n = 0.0, 0
    with torch.no_grad():
        for si, sample in enumerate(load_cached_samples(cache)):
            for ci, caption in enumerate(captions):
                for index in (100, 400, 700):
                    g = torch.Generator().manual_seed(si * 1009 + ci * 31 + index)
                    noise = torch.randn(sample["latents"].shape, generator=g)
                    sigma = schedule.sigmas[index]
                    x_t = (1 - sigma) * sample["latents"] + sigma * noise
                    args = (x_t, schedule.timesteps[index] / 1000, caption["prompt_emb"],
                            caption["prompt_emb_mask"])
                    on = predict(model, *args)
                    model.disable_adapters()
                    off = predict(model, *args)
                    model.enable_adapters()
                    total += float(torch.nn.functional.mse_loss(on, off))
                    n += 1
    return total / n


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_dop_keeps_the_class_prompt_near_the_base_model(tmp_path, models_root, tiny_model_dir,
                                                        plain_accelerate_config):
    data = make_dataset(tmp_path / "images")  # trained with the trigger word in front
    classes = make_dataset(tmp_path / "classes")  # regularization images, no trigger word
    cache = tmp_path / "cache"
    words = ["--trigger_word", TRIGGER, "--dop_class", CLASS_WORD]
    proc = run_stage(["--task", "sft:data_process", "--models_dir", models_root, "--offline",
                      "--dataset_base_path", data, "--dataset_metadata_path",
                      data / "metadata.csv", "--output_path", cache,
                      "--diff_output_preservation", "--prior_preservation",
                      "--class_data_path", classes, *words],
                     config_file=plain_accelerate_config)
    assert_ok(proc)
    assert len(list((cache / preservation.DOP_CACHE).iterdir())) == len(CAPTIONS)
    assert len(json.loads((cache / "class" / "manifest.json").read_text())["samples"]) == 4
    steps, runs = 12, {}
    for name, extra in (("plain", []),
                        ("dop", ["--diff_output_preservation", "--dop_weight", "1", *words]),
                        ("dop0", ["--diff_output_preservation", "--dop_weight", "0", *words]),
                        ("prior", ["--prior_preservation", "--class_data_path", classes])):
        out = tmp_path / name
        proc = run_stage(train_args(models_root, cache, out, "--max_train_steps", steps,
                                    "--save_steps", steps,
                                    "--learning_rate", "2e-2", *extra),
                         config_file=plain_accelerate_config)
        assert_ok(proc)
        runs[name] = [e["loss"] for e in check_progress(out, total=steps)
                      if e["event"] == "step"]
    assert runs["dop0"] == runs["plain"]  # weight 0: a plain run, step for step
    assert runs["prior"] != runs["plain"]  # the class samples' loss is in every step
    # Other DOP words than the cache was written with: refused, naming the cache.
    proc = run_stage(train_args(models_root, cache, tmp_path / "refused",
                                "--diff_output_preservation", "--trigger_word", "other",
                                "--dop_class", CLASS_WORD), config_file=plain_accelerate_config)
    assert proc.returncode == 2 and "have no DOP caption in" in proc.stderr, proc.stderr[-2000:]
    transformer = tiny_model_dir / "transformer"
    lora_of = {name: tmp_path / name / f"step-{steps}.safetensors" for name in runs}
    plain = distance_to_base(transformer, cache, lora_of["plain"])
    dop = distance_to_base(transformer, cache, lora_of["dop"])
    assert dop < plain, (f"DOP should keep the class prompt nearer the base model: "
                         f"mse(LoRA, base) {dop:.3e} with DOP, {plain:.3e} without")
    # For the log: the trigger captions' (the tiny text encoder tells the two words apart
    # only a little, so the DOP run's two distances are close).
    learned = distance_to_base(transformer, cache, lora_of["dop"], trigger=True)
    print(f"mse(LoRA, base) on the class prompts: {dop:.3e} with DOP, {plain:.3e} without; "
          f"on the trigger captions with DOP: {learned:.3e}")


def test_a_class_folder_without_images_is_refused_naming_the_field(tmp_path):
    from backend.data.dataset import DatasetError
    from backend.families import get_family
    from backend.planning.preflight import dataset_problems

    data = make_dataset(tmp_path / "images")
    (tmp_path / "classes").mkdir()
    cfg = RunConfig(dataset_base_path=str(data), prior_preservation=True,
                    class_data_path=str(tmp_path / "classes"), output_path=str(tmp_path / "c"))
    with pytest.raises(DatasetError) as e:
        preservation.check_class_dataset(cfg, get_family("qwen_image"))
    assert all(str(p).startswith("class_data_path: ") for p in e.value.problems), e.value.problems
    assert [str(p) for p in dataset_problems(cfg)] == [str(p) for p in e.value.problems]
    classes = make_dataset(tmp_path / "more")
    assert len(preservation.check_class_dataset(
        cfg.model_copy(update={"class_data_path": str(classes)}),
        get_family("qwen_image"))) == len(CAPTIONS)


# ------------------------------------------------------------------------------------------
# Class images rendered from class_prompt (backend/training/class_images.py)
# ------------------------------------------------------------------------------------------
CLASS_PROMPT = "a shape on a plain background"


@pytest.mark.parametrize("over, text", [
    ({"prior_preservation": True},
     "class_data_path: prior preservation needs a class dataset (got neither class_data_path "
     "nor class_prompt"),
    ({"prior_preservation": True, "class_prompt": CLASS_PROMPT, "num_class_images": 0},
     "num_class_images: input should be greater than or equal to 1"),
    ({"prior_preservation": True, "class_prompt": CLASS_PROMPT, "num_class_images": 10001},
     "num_class_images: input should be less than or equal to 10000"),
    ({"prior_preservation": True, "class_data_path": ".", "num_class_images": 5},
     "num_class_images: a number of class images to render without a class_prompt"),
    ({"class_prompt": CLASS_PROMPT}, "class_prompt: a prior preservation option without"),
])
def test_class_image_refusals_name_the_field(over, text):
    with pytest.raises(ConfigError) as e:
        validate(over, require_inputs=False)
    assert text in str(e.value)


def test_a_class_prompt_alone_is_a_class_set():
    validate({"prior_preservation": True, "class_prompt": CLASS_PROMPT,
              "num_class_images": 3}, require_inputs=False)


def test_the_plan_renders_class_images_in_a_stage_of_their_own_before_stage_1(tmp_path):
    from backend.core.rundir import RunDir
    from backend.planning.plan import plan_run

    run = (tmp_path / "run").resolve()
    files = RunDir(run)
    cfg = validate({"dataset_base_path": "data/set", "prior_preservation": True,
                    "class_prompt": CLASS_PROMPT})
    plans = plan_run(cfg, run, cuda=False)
    assert [p.name for p in plans] == ["class_images", "data_process", "train", "sample"]
    assert plans[0].argv[1:] == ["-m", "backend.stages.class_images", "--config",
                                 str(files.run_yaml), "--output_dir", str(files.classes)]
    stage1 = plans[1].argv
    assert stage1[stage1.index("--class_images_dir") + 1] == str(files.classes)
    assert "--class_images_dir" not in plans[2].argv
    assert "backend.stages.class_images" in files.commands.read_text()
    # A class folder alone, or no data_process stage: nothing to render before it.
    for over in ({"class_prompt": "", "class_data_path": str(tmp_path)},
                 {"stages": ["train"]}):
        plans = plan_run(cfg.model_copy(update=over), tmp_path / "other", cuda=False)
        assert "class_images" not in [p.name for p in plans]
        assert all("--class_images_dir" not in p.argv for p in plans)


def test_stage1_takes_the_first_rendered_images_and_refuses_missing_ones(tmp_path):
    from backend.families import get_family
    from backend.training import class_images

    cfg = RunConfig(dataset_base_path=str(tmp_path), prior_preservation=True,
                    class_prompt=CLASS_PROMPT, num_class_images=3, sample_seed=7)
    family = get_family("qwen_image")
    assert [(i.index, i.seed) for i in class_images.to_render(cfg, given=1)] == [(0, 7), (1, 8)]
    assert class_images.to_render(cfg, given=5) == []
    with pytest.raises(StageError, match="class_prompt: 3 class image.*--class_images_dir"):
        class_images.rendered_records(cfg, family, None, 0)
    folder = tmp_path / "classes"
    with pytest.raises(StageError) as e:
        class_images.rendered_records(cfg, family, folder, 0)
    assert "3 of the 3 class images to render are not in" in str(e.value)
    assert "class-0000-seed7.png" in str(e.value)
    assert "类别图片" in e.value.args[0].text("zh")
    from PIL import Image

    folder.mkdir()
    for item in class_images.to_render(cfg, 0):
        Image.new("RGB", (32, 32), "white").save(item.image(folder))
        item.caption(folder).write_text(CLASS_PROMPT)
    records = class_images.rendered_records(cfg, family, folder, given=1)
    assert [Path(r.image).name for r in records] == ["class-0000-seed7.png",
                                                    "class-0001-seed8.png"]
    assert all(r.prompt == CLASS_PROMPT for r in records)


def test_a_class_prompt_for_a_video_model_is_refused_naming_it(tmp_path):
    from backend.data.dataset import DatasetError
    from backend.families import get_family

    cfg = RunConfig(dataset_base_path=str(tmp_path), prior_preservation=True,
                    class_prompt=CLASS_PROMPT, model_family="wan",
                    model_id_with_origin_paths="Wan-AI/Wan2.1-T2V-1.3B:"
                                               "diffusion_pytorch_model*.safetensors")
    family = get_family("wan").for_config(cfg)
    with pytest.raises(DatasetError) as e:
        preservation.check_class_dataset(cfg, family)
    assert str(e.value.problems[0]).startswith("class_prompt: ")


def run_planned(plan) -> "subprocess.CompletedProcess":
    """A planned stage's exact command, run here (one plain process: ``run_stage_here``)."""
    import subprocess

    from tests.harness.stages import run_stage_here

    module = next(a for a in plan.argv if a.startswith("backend.stages."))
    args = plan.argv[plan.argv.index(module) + 1:]
    code, out, err = run_stage_here(module.rsplit(".", 1)[1], args)
    return subprocess.CompletedProcess(plan.argv, code, out, err)


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_class_images_are_rendered_cached_and_trained_on(tmp_path, models_root):
    """A split run with class_prompt and no class folder: the class_images stage renders
    num_class_images into the run folder, stage 1 caches them, stage 2 trains with the prior
    term (its losses differ from the same run at prior_loss_weight 0); the run planned again
    over the same folder renders nothing; a class folder with fewer images gets the rest
    rendered into the run folder, its own folder untouched."""
    from backend.core.rundir import RunDir
    from backend.planning.plan import plan_run
    from tests.harness.stages import read_progress

    data = make_dataset(tmp_path / "images")
    run = RunDir((tmp_path / "run").resolve())
    steps = 4
    values = {"dataset_base_path": str(data), "dataset_metadata_path": str(data / "metadata.csv"),
              "models_dir": str(models_root), "offline": True, "stages": ["data_process", "train"],
              "prior_preservation": True, "class_prompt": CLASS_PROMPT, "num_class_images": 3,
              "sample_steps": 2, "sample_height": 64, "sample_width": 64, "sample_seed": 5,
              "lora_rank": 4, "learning_rate": 2e-2, "max_train_steps": steps,
              "save_steps": steps, "seed": 0}
    cfg = validate(values)
    plans = plan_run(cfg, run.run_dir, cuda=False)
    assert [p.name for p in plans] == ["class_images", "data_process", "train"]
    for plan in plans:
        assert_ok(run_planned(plan))
    events = read_progress(run.progress)
    rendered = [e for e in events if e.get("stage") == "class_images"]
    assert [e["event"] for e in rendered] == ["start", "step", "step", "step", "end"], rendered
    assert rendered[-1]["status"] == "succeeded" and rendered[-1]["rendered"] == 3
    names = sorted(p.name for p in run.classes.iterdir())
    assert names == [f"class-000{k}-seed{5 + k}.{x}" for k in range(3) for x in ("png", "txt")]
    assert all((run.classes / n).read_text().strip() == CLASS_PROMPT
               for n in names if n.endswith(".txt"))
    manifest = json.loads((run.cache / "class" / "manifest.json").read_text())
    assert sorted(Path(s["image"]).name for s in manifest["samples"]) == names[::2]
    assert {s["prompt"] for s in manifest["samples"]} == {CLASS_PROMPT}
    losses = [e["loss"] for e in events if e.get("stage") == "train" and e["event"] == "step"]
    assert len(losses) == steps
    # The same run without the prior term's weight: a plain run, other losses.
    plain = tmp_path / "plain"
    proc = run_stage(["--config", run.run_yaml, "--task", "sft:train", "--dataset_base_path",
                      run.cache, "--dataset_metadata_path", "none", "--output_path", plain,
                      "--progress_file", plain / "progress.jsonl", "--prior_loss_weight", "0"])
    assert_ok(proc)
    plain_losses = [e["loss"] for e in check_progress(plain, total=steps)
                    if e["event"] == "step"]
    assert plain_losses != losses, (plain_losses, losses)

    # Planned again over the same folder: nothing rendered, nothing encoded again.
    stamps = {n: (run.classes / n).stat().st_mtime_ns for n in names}
    cached = {p: p.stat().st_mtime_ns for p in (run.cache / "class").glob("*.safetensors")}
    plans = plan_run(cfg, run.run_dir, cuda=False)
    for plan in plans[:2]:
        assert_ok(run_planned(plan))
    again = [e for e in read_progress(run.progress) if e.get("stage") == "class_images"]
    assert again[-1]["rendered"] == 0 and again[-1]["reused"] == 3, again[-1]
    assert {n: (run.classes / n).stat().st_mtime_ns for n in names} == stamps
    stage1_end = [e for e in read_progress(run.progress)
                  if e.get("stage") == "data_process" and e["event"] == "end"][-1]
    assert stage1_end["status"] == "succeeded" and stage1_end["encoded"] == 0, stage1_end
    assert {p: p.stat().st_mtime_ns
            for p in (run.cache / "class").glob("*.safetensors")} == cached and len(cached) == 3

    # Two images of the user's own: the third is rendered into the run folder, not theirs.
    mine = tmp_path / "mine"
    mine.mkdir()
    for name in ("red.png", "green.png"):
        (mine / name).write_bytes((data / name).read_bytes())
        (mine / name).with_suffix(".txt").write_text("a shape")
    other = RunDir((tmp_path / "run2").resolve())
    plans = plan_run(validate({**values, "class_data_path": str(mine)}), other.run_dir,
                     cuda=False)
    for plan in plans[:2]:
        assert_ok(run_planned(plan))
    assert sorted(p.name for p in mine.iterdir()) == ["green.png", "green.txt", "red.png",
                                                     "red.txt"]
    assert sorted(p.name for p in other.classes.iterdir()) == ["class-0000-seed5.png",
                                                              "class-0000-seed5.txt"]
    manifest = json.loads((other.cache / "class" / "manifest.json").read_text())
    assert len(manifest["samples"]) == 3
