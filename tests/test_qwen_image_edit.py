"""Qwen-Image-Edit (Edit, 2509, 2511) end to end on a tiny real-architecture edit model built
by the family's own code (diffusers' transformer and VAE, transformers' Qwen2.5-VL and its
processor):

- rows with one and with two input images: stage 1 caches the edit pipeline's own prompt
  embedding (computed with the images) and every image's latents; bad rows (a missing or
  unreadable input image, more images than the model takes) are refused naming the row
  before any model loads;
- stage 2 under DeepSpeed ZeRO-3 with parameter and optimizer offload on a 2511-like model
  (``zero_cond_t`` in its config): the held-out loss falls;
- the exported diffusers LoRA loads with ``QwenImageEditPlusPipeline.load_lora_weights`` and
  changes the edited image; the ComfyUI export names the same modules;
- the reference's ``lora/Qwen-Image-Edit*.sh`` commands (and their split into
  ``sft:data_process`` / ``sft:train``) import into a config equal to their flags;
- ``Qwen/Qwen-Image-2512`` is a Qwen-Image variant with its preset.
"""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tests.harness.pairs import ROWS, SIZE, make_edit_dataset
from tests.harness.seeds import SEED_ZERO3
from tests.harness.stages import assert_ok, check_progress, run_stage, write_accelerate_config

EDIT_2511 = "Qwen/Qwen-Image-Edit-2511"
RANK = 4

# ------------------------------------------------------------------------------------------
# Fixtures: one tiny 2511-like model, one pair dataset, one stage-1 cache, one training run
# ------------------------------------------------------------------------------------------
@pytest.fixture(scope="session")
def edit_models(tmp_path_factory) -> Path:
    from backend.families.qwen_image.tiny import build_tiny_qwen_image_edit

    root = tmp_path_factory.mktemp("edit_models")
    build_tiny_qwen_image_edit(root / EDIT_2511, seed=0, zero_cond_t=True)
    return root


@pytest.fixture(scope="session")
def edit_data(tmp_path_factory) -> Path:
    return make_edit_dataset(tmp_path_factory.mktemp("edit_data") / "pairs")


def stage1_args(models: Path, data: Path, out: Path) -> list:
    return ["--task", "sft:data_process", "--models_dir", models, "--offline",
            "--model_id_with_origin_paths", str(models / EDIT_2511),
            "--dataset_base_path", data, "--dataset_metadata_path", data / "metadata.json",
            "--data_file_keys", "image,edit_image", "--extra_inputs", "edit_image",
            "--max_pixels", str(SIZE * SIZE), "--output_path", out]


@pytest.fixture(scope="session")
def edit_cache(tmp_path_factory, edit_models, edit_data) -> Path:
    out = tmp_path_factory.mktemp("edit_cache") / "cache"
    acc = write_accelerate_config(tmp_path_factory.mktemp("edit_accel"), "plain")
    assert_ok(run_stage(stage1_args(edit_models, edit_data, out), config_file=acc))
    return out


def load_transformer(models: Path):
    import torch

    from backend.families import get_family
    return get_family("qwen_image").load_transformer(models / EDIT_2511 / "transformer",
                                                     torch.float32).eval()


def held_out_loss(models: Path, cache: Path, lora_path: Path | None = None) -> float:
    from backend.models import lora
    from backend.data.cache import load_cached_samples
    from backend.families import get_family

    model = load_transformer(models)
    assert model.zero_cond_t  # the 2511-like config's
    if lora_path is not None:
        lora.load_lora(model, lora_path)
    return get_family("qwen_image").eval_loss(model, load_cached_samples(cache))


@pytest.fixture(scope="session")
def edit_training(tmp_path_factory, edit_models, edit_cache):
    """Stage 2 under the seed's ZeRO-3 CPU-offload config: (output folder, stdout, the
    held-out loss before)."""
    tmp = tmp_path_factory.mktemp("edit_train")
    before = held_out_loss(edit_models, edit_cache)
    acc = write_accelerate_config(tmp, "z3", ds_config=SEED_ZERO3, zero3_init_flag=True)
    out = tmp / "out"
    proc = run_stage(["--task", "sft:train", "--models_dir", edit_models, "--offline",
                      "--model_id_with_origin_paths",
                      f"{EDIT_2511}:transformer/diffusion_pytorch_model*.safetensors",
                      "--dataset_base_path", edit_cache, "--output_path", out,
                      "--extra_inputs", "edit_image", "--zero_cond_t",
                      "--lora_rank", RANK, "--learning_rate", "1e-2", "--seed", "0",
                      "--dataset_repeat", "4", "--save_steps", "12",
                      "--use_gradient_checkpointing", "--initialize_model_on_cpu"],
                     config_file=acc)
    assert_ok(proc)
    return out, proc.stdout, before


# ------------------------------------------------------------------------------------------
# Stage 1
# ------------------------------------------------------------------------------------------
@pytest.mark.slow
@pytest.mark.timeout(900)
def test_stage1_caches_what_the_edit_pipeline_computes(edit_models, edit_data, edit_cache):
    """Every sample holds the target's latents, one ``edit_latents_<i>`` per input image,
    and the prompt embedding QwenImageEditPlusPipeline computes from the instruction and
    the input images (resized as the pipeline does)."""
    import torch
    from diffusers import QwenImageEditPlusPipeline
    from PIL import Image

    from backend.data.cache import load_cached_samples, read_manifest
    from backend.families import common
    from backend.families.qwen_image import adapter, edit, qwen_vl

    samples = load_cached_samples(edit_cache)
    assert len(samples) == 3
    manifest = read_manifest(edit_cache)["samples"]
    assert [len(e["inputs"]) for e in manifest] == [1, 1, 2]
    for sample, (_, inputs, _) in zip(samples, ROWS):
        assert sample["latents"].shape == (1, 16, SIZE // 8, SIZE // 8)
        keys = sorted(k for k in sample if k.startswith("edit_latents_"))
        assert keys == [f"edit_latents_{i}" for i in range(len(inputs))]
        for k in keys:  # max_pixels caps the VAE's area: 64x64 stays 64x64
            assert sample[k].shape == (1, 16, SIZE // 8, SIZE // 8)
    model = edit_models / EDIT_2511
    tokenizer = common.load_tokenizer(model / "tokenizer")
    pipe = QwenImageEditPlusPipeline(
        scheduler=None, vae=adapter.load_vae(model / "vae"),
        text_encoder=qwen_vl.load_text_encoder(model / "text_encoder"), tokenizer=tokenizer,
        processor=qwen_vl.load_processor(model / "processor"), transformer=None)
    pipe.prompt_template_encode_start_idx = edit.system_prefix_tokens(
        tokenizer, pipe.prompt_template_encode)
    module = edit._pipeline_module(True)
    for sample, (target, inputs, prompt) in zip(samples, ROWS):
        images = [Image.open(edit_data / name).convert("RGB") for name in inputs]
        cond = []
        for img in images:
            w, h = module.calculate_dimensions(module.CONDITION_IMAGE_SIZE, img.width / img.height)
            cond.append(pipe.image_processor.resize(img, h, w))
        emb, mask = pipe.encode_prompt(prompt, image=cond, device="cpu")
        assert torch.allclose(sample["prompt_emb"], emb, atol=1e-5)
        # The vision tokens are in it: the same instruction with other images differs.
        if len(inputs) == 1:
            other = pipe.encode_prompt(prompt, image=[pipe.image_processor.resize(
                Image.open(edit_data / "i_blue.png").convert("RGB"), 384, 384)],
                device="cpu")[0]
            assert not torch.allclose(other, emb)
        pixels = pipe.image_processor.preprocess(images[-1], SIZE, SIZE)
        z = pipe.vae.encode(pixels.unsqueeze(2)).latent_dist.mean[:, :, 0]
        mean = torch.tensor(pipe.vae.config.latents_mean).view(1, -1, 1, 1)
        std = torch.tensor(pipe.vae.config.latents_std).view(1, -1, 1, 1)
        assert torch.allclose(sample[f"edit_latents_{len(inputs) - 1}"], (z - mean) / std,
                              atol=1e-4)


def test_bad_pair_rows_are_refused_naming_the_row(tmp_path):
    """A missing input image, an unreadable one, four images for a model that takes three
    and a row without edit_image: one error listing each row, before any model loads."""
    from backend.config.schema import RunConfig
    from backend.data.dataset import DatasetError, check_dataset, check_input_images

    data = make_edit_dataset(tmp_path / "pairs")
    (data / "broken.png").write_bytes(b"not an image")
    rows = [
        {"image": "t_red.png", "edit_image": "nowhere.png", "prompt": "a"},
        {"image": "t_red.png", "edit_image": ["i_red.png", "broken.png"], "prompt": "b"},
        {"image": "t_red.png", "edit_image": ["i_red.png"] * 4, "prompt": "c"},
        {"image": "t_red.png", "prompt": "d"},
        {"image": "t_red.png", "edit_image": ["i_red.png", "i_blue.png"], "prompt": "e"},
    ]
    meta = data / "bad.jsonl"
    meta.write_text("\n".join(json.dumps(r) for r in rows), encoding="utf-8")
    cfg = RunConfig(dataset_base_path=str(data), dataset_metadata_path=str(meta),
                    extra_inputs="edit_image")
    records = check_dataset(cfg)
    with pytest.raises(DatasetError) as err:
        check_input_images(cfg, records, 3, "Qwen-Image-Edit-2509")
    problems = err.value.problems
    assert len(problems) == 4, problems
    assert problems[0].startswith("bad.jsonl row 1:") and "'nowhere.png'" in problems[0]
    assert problems[1].startswith("bad.jsonl row 2:") and "broken.png" in problems[1]
    assert problems[2].startswith("bad.jsonl row 3:") and "4 input images" in problems[2]
    assert "allowed 1 to 3" in problems[2] and "Qwen-Image-Edit-2509" in problems[2]
    assert problems[3].startswith("bad.jsonl row 4:") and "edit_image" in problems[3]
    # Qwen-Image-Edit takes one: the two-image row is refused; a text-to-image model none.
    good = RunConfig(dataset_base_path=str(data),
                     dataset_metadata_path=str(data / "metadata.json"),
                     extra_inputs="edit_image")
    with pytest.raises(DatasetError, match=r"row 3: edit_image: 2 input images"):
        check_input_images(good, check_dataset(good), 1, "Qwen-Image-Edit")
    with pytest.raises(DatasetError, match=r"extra_inputs: Qwen-Image takes no input images"):
        check_input_images(good, check_dataset(good), 0, "Qwen-Image")
    ok = check_input_images(good, check_dataset(good), 3)
    assert [len(r.inputs) for r in ok] == [1, 1, 2]
    # The Dataset tab's check: the same problems, against the config's own model.
    from backend.data.dataset import validate_input_images

    bad = cfg.model_copy(update={"model_id_with_origin_paths": f"{EDIT_2511}:transformer/"})
    findings = validate_input_images(bad)
    assert [f["message"] for f in findings] == problems[:2] + [
        problems[2].replace("Qwen-Image-Edit-2509", "Qwen-Image-Edit-2511")] + problems[3:]
    assert all(f["level"] == "error" for f in findings)
    assert validate_input_images(good.model_copy(update={
        "model_id_with_origin_paths": f"{EDIT_2511}:transformer/"})) == []


# ------------------------------------------------------------------------------------------
# Stage 2, exports
# ------------------------------------------------------------------------------------------
@pytest.mark.slow
@pytest.mark.timeout(1500)
def test_train_zero3_offload_lowers_the_held_out_loss(edit_models, edit_cache, edit_training):
    from backend.models import lora

    out, stdout, before = edit_training
    assert "ZeRO-3" in stdout and "built partitioned" in stdout
    check_progress(out, total=12)
    path = out / "step-12.safetensors"
    tensors, meta = lora.read_lora(path)
    assert meta["model_family"] == "qwen_image"
    targets = meta["target_modules"].split(",")
    assert {k: tuple(v.shape) for k, v in tensors.items()} == lora.expected_shapes(
        load_transformer(edit_models), RANK, targets)
    after = held_out_loss(edit_models, edit_cache, path)
    print(f"\nQwen-Image-Edit held-out loss: before {before:.4f}, after {after:.4f}")
    assert after < before, f"held-out loss {after:.4f} not below {before:.4f}"


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_exported_lora_changes_the_diffusers_edit_pipeline(tmp_path, monkeypatch, edit_models,
                                                            edit_data, edit_training):
    """The diffusers export loads with ``QwenImageEditPlusPipeline.load_lora_weights`` and
    changes the edited image; unloading gives the base image back. The ComfyUI export
    holds the same modules under ``diffusion_model.``. (The pipeline's VAE area for input
    images is set to the training run's, 64x64, as ``max_pixels`` capped it.)"""
    import numpy as np
    import torch
    from PIL import Image

    from diffusers.pipelines.qwenimage import pipeline_qwenimage_edit_plus

    from backend.models.export import export_lora, load_lora_file
    from backend.families import get_family
    from backend.config.schema import RunConfig

    out, _, _ = edit_training
    trained = out / "step-12.safetensors"
    model = edit_models / EDIT_2511
    cfg = RunConfig(model_id_with_origin_paths=str(model), extra_inputs="edit_image")
    family = get_family("qwen_image").for_config(cfg)
    assert family.input_images == 3 and family.plus
    dirs = {k: model / k for k in ("transformer", "text_encoder", "vae", "tokenizer",
                                   "scheduler")}
    pipe = family.load_pipeline(dirs, torch.float32)
    assert type(pipe).__name__ == "QwenImageEditPlusPipeline" and pipe.transformer.zero_cond_t
    image = Image.open(edit_data / "i_red.png").convert("RGB")
    monkeypatch.setattr(pipeline_qwenimage_edit_plus, "VAE_IMAGE_SIZE", SIZE * SIZE)

    def render():
        return np.asarray(family.render(
            pipe, "make the circle blue", negative_prompt="", cfg=1.0, steps=2,
            height=SIZE, width=SIZE, generator=torch.Generator().manual_seed(0),
            images=[image]), dtype=float)

    before = render()
    diffusers_file = export_lora(trained, "diffusers", out_dir=tmp_path,
                                 transformer_config=model / "transformer")
    pipe.load_lora_weights(str(diffusers_file))
    after = render()
    assert np.abs(after - before).max() > 0
    pipe.unload_lora_weights()
    assert np.abs(render() - before).max() == 0

    comfy = export_lora(trained, "comfyui", out_dir=tmp_path / "comfy",
                        transformer_config=model / "transformer")
    names = {k.split(".lora_")[0] for k in load_lora_file(comfy)[0] if ".lora_" in k}
    modules = {f"diffusion_model.{n}" for n, _ in load_transformer(edit_models).named_modules()}
    assert names and names <= modules, sorted(names - modules)[:3]


# ------------------------------------------------------------------------------------------
# The reference trainer's commands, presets
# ------------------------------------------------------------------------------------------
SCRIPT = "examples/qwen_image/model_training/train.py"
TARGETS = ("to_q,to_k,to_v,add_q_proj,add_k_proj,add_v_proj,to_out.0,to_add_out,"
           "img_mlp.net.2,img_mod.1,txt_mlp.net.2,txt_mod.1")


def reference_edit_command(repo: str, metadata: str, extra: str = "") -> str:
    """The reference's lora/Qwen-Image-Edit*.sh, as it ships."""
    return f"""
accelerate launch {SCRIPT} \\
  --dataset_base_path data/example_image_dataset \\
  --dataset_metadata_path data/example_image_dataset/{metadata} \\
  --data_file_keys "image,edit_image" \\
  --extra_inputs "edit_image" \\
  --max_pixels 1048576 \\
  --dataset_repeat 50 \\
  --model_id_with_origin_paths "{repo}:transformer/diffusion_pytorch_model*.safetensors,Qwen/Qwen-Image:text_encoder/model*.safetensors,Qwen/Qwen-Image:vae/diffusion_pytorch_model.safetensors" \\
  --learning_rate 1e-4 \\
  --num_epochs 5 \\
  --remove_prefix_in_ckpt "pipe.dit." \\
  --output_path "./models/train/{repo.split('/')[1]}_lora" \\
  --lora_base_model "dit" \\
  --lora_target_modules "{TARGETS}" \\
  --lora_rank 32 \\
  --use_gradient_checkpointing \\
  --dataset_num_workers 8 \\
  --find_unused_parameters{extra}
"""


@pytest.mark.parametrize("repo,metadata,extra", [
    ("Qwen/Qwen-Image-Edit", "metadata_edit.csv", ""),
    ("Qwen/Qwen-Image-Edit-2509", "metadata_edit.csv", ""),
    (EDIT_2511, "metadata_qwen_imgae_edit_multi.json",
     " \\\n  --zero_cond_t # This is a special parameter introduced by Qwen-Image-Edit-2511."),
])
def test_reference_edit_commands_import_as_their_flags(tmp_path, repo, metadata, extra):
    from backend.families import family_of
    from backend.planning.importer import import_commands

    text = reference_edit_command(repo, metadata, extra)
    ours = text.replace(SCRIPT, "-m backend.stages.train")
    for command in (text, ours):
        result = import_commands(command, base_dir=tmp_path)
        cfg = result.config
        assert not result.not_understood, result.not_understood
        assert cfg.model_family == "qwen_image"
        assert family_of(cfg.to_dict())[1] == repo.split("/")[1].lower().replace("-", "_")
        assert cfg.extra_inputs == "edit_image" and cfg.data_file_keys == "image,edit_image"
        assert cfg.zero_cond_t is bool(extra)
        assert cfg.model_id_with_origin_paths.startswith(f"{repo}:transformer/")
        assert (cfg.dataset_metadata_path or "").endswith(metadata)
        assert (cfg.lora_target_modules, cfg.lora_rank, cfg.learning_rate, cfg.num_epochs,
                cfg.dataset_repeat, cfg.max_pixels) == (TARGETS, 32, 1e-4, 5, 50, 1048576)
        assert cfg.use_gradient_checkpointing and cfg.find_unused_parameters
        assert cfg.split_training is False  # one sft command


def test_reference_split_edit_commands_import_as_one_split_config(tmp_path):
    """The same flags split into sft:data_process and sft:train (2511)."""
    from backend.planning.importer import import_commands

    sources = (f"{EDIT_2511}:transformer/diffusion_pytorch_model*.safetensors,"
               "Qwen/Qwen-Image:text_encoder/model*.safetensors,"
               "Qwen/Qwen-Image:vae/diffusion_pytorch_model.safetensors")
    text = f"""
accelerate launch {SCRIPT} --task sft:data_process \\
  --dataset_base_path data/pairs --dataset_metadata_path data/pairs/metadata.json \\
  --data_file_keys "image,edit_image" --extra_inputs "edit_image" --max_pixels 1048576 \\
  --model_id_with_origin_paths "{sources}" --output_path ./models/train/edit_cache \\
  --zero_cond_t
accelerate launch {SCRIPT} --task sft:train \\
  --dataset_base_path ./models/train/edit_cache --extra_inputs "edit_image" \\
  --model_id_with_origin_paths "{sources}" --lora_base_model dit \\
  --lora_target_modules "{TARGETS}" --lora_rank 16 --learning_rate 2e-4 \\
  --use_gradient_checkpointing --output_path ./models/train/edit_lora --zero_cond_t
"""
    result = import_commands(text.replace(SCRIPT, "-m backend.stages.train"), base_dir=tmp_path)
    cfg = result.config
    assert not result.not_understood, result.not_understood
    assert cfg.split_training and cfg.model_family == "qwen_image"
    assert cfg.dataset_base_path.endswith("data/pairs")
    assert cfg.extra_inputs == "edit_image" and cfg.zero_cond_t
    assert (cfg.lora_rank, cfg.learning_rate) == (16, 2e-4)


def test_edit_variants_and_2512_presets():
    """Every variant preset loads as Qwen-Image with its variant's model; a config naming an
    edit model gets the edit adapter, Qwen-Image-2512 the text-to-image one."""
    from backend.config.presets import load_preset
    from backend.families import family_of
    from backend.families import get_family

    expected = {
        "qwen_image_2512_low_vram": ("qwen_image_2512", 0, False),
        "qwen_image_edit_2509_single_gpu": ("qwen_image_edit_2509", 3, False),
        "qwen_image_edit_2509_low_vram": ("qwen_image_edit_2509", 3, False),
        "qwen_image_edit_2511_single_gpu": ("qwen_image_edit_2511", 3, True),
        "qwen_image_edit_2511_low_vram": ("qwen_image_edit_2511", 3, True),
    }
    for name, (variant, takes, zero_cond_t) in expected.items():
        cfg = load_preset(name)
        assert cfg.model_family == "qwen_image", name
        assert family_of(cfg.to_dict())[1] == variant, name
        assert cfg.zero_cond_t is zero_cond_t, name
        adapter = get_family("qwen_image").for_config(cfg)
        assert adapter.input_images == takes, name
        if name.endswith("low_vram"):
            assert (cfg.zero_stage, cfg.offload_param_device,
                    cfg.offload_optimizer_device) == (3, "cpu", "cpu"), name
        else:
            assert cfg.zero_stage == 0, name


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_samples_render_input_base_and_lora(tmp_path, monkeypatch, edit_models, edit_data,
                                            edit_training):
    """Samples take input images per prompt: the index records them beside the base and the
    LoRA image, which differ; a prompt without input images is refused naming the field."""
    import numpy as np
    from diffusers.pipelines.qwenimage import pipeline_qwenimage_edit_plus
    from PIL import Image

    from backend.config.errors import ConfigError
    from backend.config.schema import RunConfig
    from backend.jobs.runner import check_before_start
    from backend.training.samples import plan_samples, render_samples

    monkeypatch.setattr(pipeline_qwenimage_edit_plus, "VAE_IMAGE_SIZE", SIZE * SIZE)
    out, _, _ = edit_training
    inputs = f"{edit_data / 'i_blue.png'}|{edit_data / 'i_red.png'}"
    cfg = RunConfig(model_id_with_origin_paths=str(edit_models / EDIT_2511), offline=True,
                    models_dir=str(edit_models), sample_prompts=["put the circle in it"],
                    sample_images=[inputs], sample_lora_scales=[0.0, 1.0], sample_steps=2,
                    sample_cfg=1.0, sample_height=SIZE, sample_width=SIZE)
    entries = render_samples(cfg, [out / "step-12.safetensors"], tmp_path / "samples")
    assert [e["scale"] for e in entries] == [0.0, 1.0]
    assert all(e["inputs"] == inputs.split("|") for e in entries)
    # The set keeps the prompt's input images side by side, for the Results tab.
    assert {e["input_image"] for e in entries} == {"inputs/p00.png"}
    with Image.open(tmp_path / "samples" / "inputs" / "p00.png") as kept:
        assert kept.width == 2 * kept.height  # two square input images
    base, lora = (np.asarray(Image.open(tmp_path / "samples" / e["image"]), dtype=float)
                  for e in entries)
    assert base.shape == (SIZE, SIZE, 3) and np.abs(lora - base).max() > 0
    with pytest.raises(ConfigError, match="sample_images: the model renders from input"):
        plan_samples(cfg.model_copy(update={"sample_images": []}),
                     [out / "step-12.safetensors"])
    # No sample_images at all: each prompt takes the input images of a dataset row in turn,
    # and a run is refused before it starts only when neither gives them.
    rows = json.loads((edit_data / "metadata.json").read_text())
    from_data = cfg.model_copy(update={
        "sample_images": [], "sample_prompts": ["a", "b", "c"],
        "dataset_base_path": str(edit_data),
        "dataset_metadata_path": str(edit_data / "metadata.json"),
        "extra_inputs": "edit_image", "data_file_keys": "image,edit_image"})
    jobs = plan_samples(from_data, [out / "step-12.safetensors"])
    names = [[Path(p).name for p in j.inputs] for j in jobs if j.scale == 0.0]
    want = [[Path(n).name for n in (r["edit_image"] if isinstance(r["edit_image"], list)
                                    else [r["edit_image"]])] for r in rows]
    assert names == [want[i % len(want)] for i in range(3)]
    check_before_start(from_data)  # the dataset gives them: nothing to refuse
    with pytest.raises(ConfigError, match="sample_images: the model renders from input"):
        check_before_start(from_data.model_copy(update={"dataset_base_path": str(tmp_path)}))


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_reference_edit_command_runs_with_only_the_script_path_changed(tmp_path, edit_models,
                                                                        edit_data):
    """The reference's lora/Qwen-Image-Edit-2511.sh (one-shot sft: the prompt and images
    encoded every step) trains with the script path changed; the test's own flags after it
    point at the tiny models and data and keep it small. Its sources name Qwen-Image's text
    encoder and VAE, which the released edit models share: the tiny model's are put there."""
    from backend.planning.importer import split_commands
    from backend.models.lora import read_lora

    shared = edit_models / "Qwen" / "Qwen-Image"
    for comp in ("text_encoder", "vae", "tokenizer"):
        if not (shared / comp).exists():
            shutil.copytree(edit_models / EDIT_2511 / comp, shared / comp)
    text = reference_edit_command(EDIT_2511, "metadata_qwen_imgae_edit_multi.json",
                                  " \\\n  --zero_cond_t # a special parameter of 2511")
    argv = split_commands(text.replace(SCRIPT, "-m backend.stages.train"))[0]
    args = argv[argv.index("backend.stages.train") + 1:]
    out = tmp_path / "out"
    args += ["--dataset_base_path", edit_data, "--dataset_metadata_path",
             edit_data / "metadata.json", "--output_path", out, "--models_dir", edit_models,
             "--offline", "--max_pixels", SIZE * SIZE, "--dataset_num_workers", "0",
             "--max_train_steps", "2", "--lora_rank", RANK]
    acc = write_accelerate_config(tmp_path, "plain")
    assert_ok(run_stage(args, config_file=acc))
    check_progress(out, total=2)
    tensors, meta = read_lora(out / "step-2.safetensors")
    assert meta["model_family"] == "qwen_image" and tensors
    ran = json.loads((out / "training_args.json").read_text())
    assert ran["extra_inputs"] == "edit_image" and ran["zero_cond_t"] is True
    assert ran["task"] == "sft" and ran["find_unused_parameters"] is True


def test_pair_uploads_and_instruction_edits_keep_the_input_images(tmp_path):
    """A zip of a pair dataset uploads as it is (its metadata.json found); its instructions
    are edited in the Dataset tab's table and the edit_image column survives the save; an
    upload whose edit_image names a file outside it is refused as a whole."""
    import zipfile

    from webui.datasets import DatasetFolderError, add_uploads, read_captions, save_captions

    data = make_edit_dataset(tmp_path / "pairs")
    archive = tmp_path / "pairs.zip"
    with zipfile.ZipFile(archive, "w") as z:
        for p in sorted(data.iterdir()):
            z.write(p, f"pairs/{p.name}")
    ws = tmp_path / "ws"
    folder, meta, _ = add_uploads(ws, "pairs", [str(archive)])
    assert meta and meta.endswith("metadata.json")
    rows = read_captions(str(folder), meta, user=None, workspace=ws)
    assert rows == [[t, p] for t, _, p in ROWS]
    rows[0][1] = "make the circle dark blue"
    assert save_captions(str(folder), meta, rows, user=None, workspace=ws) == 3
    saved = json.loads(Path(meta).read_text(encoding="utf-8"))
    assert saved[0] == {"image": "t_red.png", "edit_image": "i_red.png",
                        "prompt": "make the circle dark blue"}
    assert saved[2]["edit_image"] == ["i_blue.png", "i_red.png"]

    rows = json.loads((data / "metadata.json").read_text(encoding="utf-8"))
    rows[1]["edit_image"] = ["i_green.png", "../../outside.png"]
    (data / "metadata.json").write_text(json.dumps(rows), encoding="utf-8")
    escape = tmp_path / "escape.zip"
    with zipfile.ZipFile(escape, "w") as z:
        for p in sorted(data.iterdir()):
            z.write(p, f"pairs/{p.name}")
    with pytest.raises(DatasetFolderError, match=r"metadata.json row 2: names a file outside"):
        add_uploads(ws, "escape", [str(escape)])
    assert [p.name for p in folder.parent.iterdir()] == [folder.name]  # nothing of it stays
