"""What is particular to Z-Image, on tiny real-architecture models built by the family's own
code (what every family gets -- training under ZeRO-3 offload lowers the held-out loss, the
exports, samples, resume -- is in tests/test_every_family.py, on the same shared LoRA):

- stage 1 caches what ``ZImagePipeline`` computes; the shared ZeRO-3 LoRA trains every
  block and both refiners;
- every ComfyUI-format key is a name ComfyUI's Z-Image key map accepts;
- the reference trainer's ``lora/Z-Image.sh`` and ``lora/Z-Image-Turbo.sh`` (and its split
  training script) import with only the script path changed;
- Turbo with ``preset_lora_path``: the merged adapter changes the model, training runs with
  it merged (ZeRO-3 partitioned), and the saved LoRA holds only the trained adapter's keys.
"""
from __future__ import annotations

from pathlib import Path

import pytest

from tests.harness.families import family_cases
from tests.harness.seeds import SEED_ZERO3
from tests.harness.stages import assert_ok, check_progress, run_stage, write_accelerate_config

BASE, TURBO = "Tongyi-MAI/Z-Image", "Tongyi-MAI/Z-Image-Turbo"
Z = next(c for c in family_cases() if c.family == "z_image")
TARGETS = "to_q,to_k,to_v,to_out.0,w1,w2,w3"
RANK = 4


# ------------------------------------------------------------------------------------------
# Fixtures: the tiny models (Base; Turbo = another transformer with the same encoders, as the
# released pair shares its text encoder and VAE), a data set, one stage-1 cache.
# ------------------------------------------------------------------------------------------
@pytest.fixture(scope="session")
def z_models(tmp_path_factory) -> Path:
    from backend.families.z_image.tiny import build_components, build_transformer, save_pipeline

    root = tmp_path_factory.mktemp("z_models")
    components = build_components(seed=0)
    save_pipeline(components, root / BASE)
    save_pipeline({**components, "transformer": build_transformer(seed=7)}, root / TURBO)
    return root


@pytest.fixture(scope="session")
def z_cache(family_runs) -> Path:
    """The shared stage-1 cache of Z-Image (tests/harness/families.py): the 4 shapes at
    64x64, encoded by the encoders these tiny models share."""
    return family_runs.cache(Z)


@pytest.fixture(scope="session")
def z_data(family_runs) -> Path:
    return family_runs.dataset(Z)


@pytest.fixture(scope="session")
def z_trained(family_runs) -> tuple[Path, dict, str]:
    """The shared LoRA trained under ZeRO-3 offload (rank 4, 12 steps, the default targets),
    which tests/test_every_family.py checks as it checks every family's."""
    return family_runs.trained(Z)


def transformer(models: Path, repo: str = BASE):
    import torch

    from backend.families import get_family
    return get_family("z_image").load_transformer(models / repo / "transformer",
                                                  torch.float32).eval()


def held_out_loss(models: Path, cache: Path, lora_path: Path | None = None,
                  repo: str = BASE) -> float:
    from backend.models import lora
    from backend.data.cache import load_cached_samples
    from backend.families import get_family

    model = transformer(models, repo)
    if lora_path is not None:
        lora.load_lora(model, lora_path)
    return get_family("z_image").eval_loss(model, load_cached_samples(cache))


def train_zero3(tmp_path: Path, models: Path, cache: Path, repo: str, *extra):
    acc = write_accelerate_config(tmp_path, "z3", ds_config=SEED_ZERO3, zero3_init_flag=True)
    out = tmp_path / "out"
    proc = run_stage(["--task", "sft:train", "--models_dir", models, "--offline",
                      "--model_id_with_origin_paths", f"{repo}:transformer/*.safetensors",
                      "--dataset_base_path", cache, "--output_path", out,
                      "--lora_rank", RANK, "--learning_rate", "5e-3", "--seed", "0",
                      "--dataset_repeat", "3", "--save_steps", "6",
                      "--use_gradient_checkpointing", "--initialize_model_on_cpu", *extra],
                     config_file=acc)
    assert_ok(proc)
    return out, proc


# ------------------------------------------------------------------------------------------
# Stage 1 and stage 2
# ------------------------------------------------------------------------------------------
@pytest.mark.slow
@pytest.mark.timeout(900)
def test_stage1_caches_what_the_pipeline_computes(z_models, z_data, z_cache):
    """The cache holds the pipeline's own prompt embedding (the prompt's tokens, padding
    dropped) and the latents it would decode, for every sample."""
    import torch
    from diffusers import ZImagePipeline
    from PIL import Image

    from backend.data.cache import load_cached_samples

    samples = load_cached_samples(z_cache)
    assert len(samples) == 4
    pipe = ZImagePipeline.from_pretrained(str(z_models / BASE))
    lengths = set()
    for sample in samples:
        assert sample["latents"].shape == (1, 16, 8, 8)
        assert bool(sample["prompt_emb_mask"].all())
        lengths.add(sample["prompt_emb"].shape[1])
    # The first sample (metadata order): red.png, "a red circle on a white background".
    emb = pipe.encode_prompt("a red circle on a white background", device="cpu",
                             do_classifier_free_guidance=False)[0][0]
    assert torch.equal(samples[0]["prompt_emb"][0], emb)
    # Padding dropped: the embedding is as long as the templated prompt, not 512.
    text = pipe.tokenizer.apply_chat_template(
        [{"role": "user", "content": "a red circle on a white background"}], tokenize=False,
        add_generation_prompt=True, enable_thinking=True)
    assert lengths == {len(pipe.tokenizer(text)["input_ids"])} and max(lengths) < 512
    import numpy as np

    pixels = torch.from_numpy(np.asarray(Image.open(z_data / "red.png").convert("RGB"),
                                         dtype=np.float32) / 127.5 - 1).permute(2, 0, 1)[None]
    z = pipe.vae.encode(pixels).latent_dist.mean
    expected = (z - pipe.vae.config.shift_factor) * pipe.vae.config.scaling_factor
    assert torch.allclose(samples[0]["latents"], expected, atol=1e-5)


@pytest.mark.slow
@pytest.mark.timeout(1200)
def test_the_zero3_lora_trains_every_block_and_refiner(z_models, z_trained):
    """The shared ZeRO-3 offload run (its loss and shapes: tests/test_every_family.py): 12
    steps, and every target of the main blocks and both refiners trained."""
    from backend.models import lora

    path, _, _ = z_trained
    check_progress(path.parent, total=12)
    assert path.name == "step-12.safetensors"
    tensors, meta = lora.read_lora(path)
    assert meta["model_family"] == "z_image" and meta["target_modules"] == TARGETS
    expected = lora.expected_shapes(transformer(z_models), RANK, TARGETS.split(","))
    # 2 main blocks + 1 noise refiner + 1 context refiner, 7 targets each, A and B.
    assert len(expected) == 4 * 7 * 2
    assert {k: tuple(v.shape) for k, v in tensors.items()} == expected
    for prefix in ("layers.0.", "layers.1.", "noise_refiner.0.", "context_refiner.0."):
        assert any(k.startswith(prefix + "attention.to_q.lora_A") for k in tensors), prefix
    untrained = [k for k, v in tensors.items() if ".lora_B." in k and not v.abs().sum() > 0]
    assert not untrained, f"never trained: {untrained}"


# ------------------------------------------------------------------------------------------
# Exports
# ------------------------------------------------------------------------------------------
def comfyui_z_image_lora_names(config: dict) -> set[str]:
    """The LoRA module names ComfyUI's loader accepts for a Z-Image model with the
    ``diffusion_model.`` prefix: comfy/lora.py's Lumina2 branch registers
    ``diffusion_model.<name>`` for every weight name on the diffusers side of
    comfy/utils.py ``z_image_to_diffusers`` (restated here from that table)."""
    block = ["attention.to_q", "attention.to_k", "attention.to_v", "attention.to_out.0",
             "attention.norm_q", "attention.norm_k", "attention_norm1", "attention_norm2",
             "feed_forward.w1", "feed_forward.w2", "feed_forward.w3", "ffn_norm1",
             "ffn_norm2", "adaLN_modulation.0"]
    names = set()
    refiners = int(config.get("n_refiner_layers", 2))
    for group, count in (("layers", int(config["n_layers"])), ("context_refiner", refiners),
                         ("noise_refiner", refiners)):
        for i in range(count):
            names |= {f"{group}.{i}.{b}" for b in block}
    names |= {"all_final_layer.2-1.linear", "all_final_layer.2-1.adaLN_modulation.1",
              "all_x_embedder.2-1", "cap_embedder.0", "cap_embedder.1", "t_embedder.mlp.0",
              "t_embedder.mlp.2"}
    return {f"diffusion_model.{n}" for n in names}


def test_comfyui_key_map_covers_the_default_targets_of_the_released_model():
    """On the published config (30 blocks, meta device): every default-target module is a
    name ComfyUI maps."""
    from backend.families import get_family

    family = get_family("z_image")
    config = family.published_configs()["transformer"]
    accepted = comfyui_z_image_lora_names(config)
    modules = family.lora_module_map()
    targets = [n for n in modules if any(n == t or n.endswith("." + t)
                                         for t in TARGETS.split(","))]
    assert len(targets) == (30 + 2 + 2) * 7
    assert {f"diffusion_model.{n}" for n in targets} <= accepted


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_the_comfyui_export_holds_only_names_comfyuis_z_image_map_accepts(tmp_path, z_models,
                                                                          z_trained):
    """Beyond every family's check (each key names a module, tests/test_every_family.py):
    each is a name ComfyUI's own Z-Image key map accepts, in ComfyUI's key spelling."""
    from backend.models.export import export_lora, load_lora_file

    comfy = export_lora(z_trained[0], "comfyui", out_dir=tmp_path,
                        transformer_config=z_models / BASE / "transformer")
    tensors, _ = load_lora_file(comfy)
    accepted = comfyui_z_image_lora_names(dict(transformer(z_models).config))
    names = {k.rsplit(".", 2)[0] if k.endswith(".weight") else k.rsplit(".", 1)[0]
             for k in tensors}
    assert len(names) == 4 * 7
    assert names <= accepted, sorted(names - accepted)
    assert all(k.endswith((".lora_down.weight", ".lora_up.weight", ".alpha")) for k in tensors)


@pytest.mark.timeout(600)
def test_the_family_renders_through_its_pipeline(z_models):
    """``load_pipeline`` + ``render`` with the schema's sample settings; cfg 1 is no
    guidance, cfg > 1 adds the negative prompt's branch and changes the image."""
    import numpy as np
    import torch

    from backend.families import get_family

    family = get_family("z_image")
    model_dir = z_models / BASE
    dirs = {k: model_dir / k for k in ("transformer", "text_encoder", "vae", "tokenizer",
                                       "scheduler")}
    pipe = family.load_pipeline(dirs, torch.float32)
    kwargs = dict(negative_prompt="", steps=2, height=64, width=64)
    plain = family.render(pipe, "a red circle", generator=torch.Generator().manual_seed(0),
                          cfg=1.0, **kwargs)
    guided = family.render(pipe, "a red circle", generator=torch.Generator().manual_seed(0),
                           cfg=4.0, **kwargs)
    assert plain.size == (64, 64)
    assert np.abs(np.asarray(plain, dtype=float) - np.asarray(guided, dtype=float)).max() > 0


# ------------------------------------------------------------------------------------------
# The reference trainer's commands
# ------------------------------------------------------------------------------------------
SCRIPT = "examples/z_image/model_training/train.py"
Z_IMAGE_SH = f"""
accelerate launch {SCRIPT} \\
  --dataset_base_path data/diffsynth_example_dataset/z_image/Z-Image \\
  --dataset_metadata_path data/diffsynth_example_dataset/z_image/Z-Image/metadata.csv \\
  --max_pixels 1048576 \\
  --dataset_repeat 50 \\
  --model_id_with_origin_paths "Tongyi-MAI/Z-Image:transformer/*.safetensors,Tongyi-MAI/Z-Image-Turbo:text_encoder/*.safetensors,Tongyi-MAI/Z-Image-Turbo:vae/diffusion_pytorch_model.safetensors" \\
  --learning_rate 1e-4 \\
  --num_epochs 5 \\
  --remove_prefix_in_ckpt "pipe.dit." \\
  --output_path "./models/train/Z-Image_lora" \\
  --lora_base_model "dit" \\
  --lora_target_modules "to_q,to_k,to_v,to_out.0,w1,w2,w3" \\
  --lora_rank 32 \\
  --use_gradient_checkpointing \\
  --dataset_num_workers 8
"""
Z_IMAGE_TURBO_SH = f"""
accelerate launch {SCRIPT} \\
  --dataset_base_path data/example_image_dataset \\
  --dataset_metadata_path data/example_image_dataset/metadata.csv \\
  --max_pixels 1048576 \\
  --dataset_repeat 50 \\
  --model_id_with_origin_paths "Tongyi-MAI/Z-Image-Turbo:transformer/*.safetensors,Tongyi-MAI/Z-Image-Turbo:text_encoder/*.safetensors,Tongyi-MAI/Z-Image-Turbo:vae/diffusion_pytorch_model.safetensors" \\
  --learning_rate 1e-4 \\
  --num_epochs 5 \\
  --remove_prefix_in_ckpt "pipe.dit." \\
  --output_path "./models/train/Z-Image-Turbo_lora" \\
  --lora_base_model "dit" \\
  --lora_target_modules "to_q,to_k,to_v,to_out.0,w1,w2,w3" \\
  --lora_rank 32 \\
  --use_gradient_checkpointing \\
  --dataset_num_workers 8
"""
SOURCES = ("{t}:transformer/*.safetensors,Tongyi-MAI/Z-Image-Turbo:text_encoder/*.safetensors,"
           "Tongyi-MAI/Z-Image-Turbo:vae/diffusion_pytorch_model.safetensors")
SPLIT_SH = f"""
accelerate launch {SCRIPT} \\
  --dataset_base_path data/z/Z-Image --dataset_metadata_path data/z/Z-Image/metadata.csv \\
  --max_pixels 1048576 --dataset_repeat 1 \\
  --model_id_with_origin_paths '{SOURCES.format(t=BASE)}' \\
  --learning_rate 1e-4 --num_epochs 5 --remove_prefix_in_ckpt pipe.dit. \\
  --output_path ./models/train/Z-Image_split_cache --lora_base_model dit \\
  --lora_target_modules to_q,to_k,to_v,to_out.0,w1,w2,w3 --lora_rank 32 \\
  --use_gradient_checkpointing --dataset_num_workers 8 \\
  --offload_models 'Tongyi-MAI/Z-Image:transformer/*.safetensors' --task sft:data_process
accelerate launch {SCRIPT} \\
  --dataset_base_path ./models/train/Z-Image_split_cache --max_pixels 1048576 \\
  --dataset_repeat 50 --model_id_with_origin_paths '{SOURCES.format(t=BASE)}' \\
  --learning_rate 1e-4 --num_epochs 5 --remove_prefix_in_ckpt pipe.dit. \\
  --output_path ./models/train/Z-Image_split --lora_base_model dit \\
  --lora_target_modules to_q,to_k,to_v,to_out.0,w1,w2,w3 --lora_rank 32 \\
  --use_gradient_checkpointing --dataset_num_workers 8 \\
  --offload_models 'Tongyi-MAI/Z-Image-Turbo:text_encoder/*.safetensors' --task sft:train
"""


@pytest.mark.parametrize("script, variant", [(Z_IMAGE_SH, "z_image"),
                                             (Z_IMAGE_TURBO_SH, "z_image_turbo")])
def test_reference_lora_scripts_import_with_only_the_script_path_changed(
        tmp_path, script, variant):
    from backend.families import family_of
    from backend.planning.importer import import_commands

    text = script.replace(SCRIPT, "backend/stages/train.py")
    result = import_commands(text, base_dir=tmp_path)
    cfg = result.config
    assert cfg.model_family == "z_image"
    assert family_of(cfg.to_dict())[1] == variant
    assert cfg.lora_target_modules == TARGETS and cfg.lora_rank == 32
    assert cfg.learning_rate == 1e-4 and cfg.num_epochs == 5 and cfg.dataset_repeat == 50
    assert cfg.max_pixels == 1048576 and cfg.dataset_num_workers == 8
    assert cfg.use_gradient_checkpointing and cfg.remove_prefix_in_ckpt == "pipe.dit."
    repo = TURBO if variant == "z_image_turbo" else BASE
    assert cfg.model_id_with_origin_paths.split(",")[0] == f"{repo}:transformer/*.safetensors"
    assert f"{TURBO}:text_encoder/*.safetensors" in cfg.model_id_with_origin_paths
    assert cfg.split_training is False and cfg.stages == ["train", "sample"]
    assert not result.not_understood, result.not_understood
    # The sample settings are the variant's: Turbo renders in 8 steps without guidance.
    assert (cfg.sample_steps, cfg.sample_cfg) == ((8, 1.0) if variant == "z_image_turbo"
                                                  else (40, 5.0))


def test_reference_split_training_script_imports_as_split_training(tmp_path):
    from backend.planning.importer import import_commands

    result = import_commands(SPLIT_SH.replace(SCRIPT, "backend/stages/train.py"),
                             base_dir=tmp_path)
    cfg = result.config
    assert cfg.model_family == "z_image" and cfg.split_training is True
    assert cfg.stages == ["data_process", "train", "sample"]
    assert cfg.dataset_base_path == str((tmp_path / "data/z/Z-Image").resolve())
    assert cfg.dataset_repeat == 50 and cfg.lora_target_modules == TARGETS
    # The reference's per-stage model offload has no counterpart: reported, not dropped.
    # Each stage here loads only what it uses: the flag is noted, not refused.
    assert not any("--offload_models" in n for n in result.not_understood)
    assert "--offload_models" in " ".join(result.notes)


def test_preset_lora_path_is_a_lora_option():
    from backend.config.meta import field_meta
    from backend.config.schema import PATH_FIELDS

    meta = field_meta("preset_lora_path")
    assert meta["group"] == "lora" and meta["ui"] == "advanced"
    assert "preset_lora_path" in PATH_FIELDS


# ------------------------------------------------------------------------------------------
# Turbo with a de-distillation adapter
# ------------------------------------------------------------------------------------------
def write_adapter(path: Path, model, targets=("to_q", "w2"), rank: int = 2) -> Path:
    """A stand-in de-distillation LoRA on other targets than the trained ones (nonzero)."""
    import torch

    from backend.models import lora

    shapes = lora.expected_shapes(model, rank, targets)
    g = torch.Generator().manual_seed(3)
    tensors = {k: torch.randn(s, generator=g) * 0.2 for k, s in shapes.items()}
    return lora.save_lora(path, tensors, rank=rank, target_modules=targets,
                          model_family="z_image")


def test_merged_adapter_changes_the_model_and_leaves_no_trace(tmp_path, z_models):
    import torch

    from backend.models import lora
    from backend.families.z_image.adapter import predict

    model = transformer(z_models, TURBO)
    adapter = write_adapter(tmp_path / "dedistill.safetensors", model)
    g = torch.Generator().manual_seed(0)
    x, emb = torch.randn(1, 16, 8, 8, generator=g), torch.randn(1, 12, 16, generator=g)
    with torch.no_grad():
        before = predict(model, x, torch.tensor(0.5), emb)
        merged = lora.merge_lora_file(model, adapter)
        after = predict(model, x, torch.tensor(0.5), emb)
    assert merged == 4 * 2  # to_q and w2 in each of the four blocks
    assert (after - before).abs().max() > 1e-4
    assert not lora.lora_named_parameters(model)
    assert not any("merged" in n for n, _ in model.named_modules())


@pytest.mark.slow
@pytest.mark.timeout(1200)
def test_turbo_trains_with_the_adapter_merged_and_saves_only_its_own_lora(
        tmp_path, z_models, z_cache):
    from backend.models import lora

    adapter = write_adapter(tmp_path / "dedistill.safetensors", transformer(z_models, TURBO))
    out, proc = train_zero3(tmp_path, z_models, z_cache, TURBO,
                            "--preset_lora_path", adapter, "--max_steps", "6")
    assert "preset_lora_path" in proc.stdout and "merged into 8 modules" in proc.stdout
    tensors, meta = lora.read_lora(out / "step-6.safetensors")
    expected = lora.expected_shapes(transformer(z_models, TURBO), RANK, TARGETS.split(","))
    assert {k: tuple(v.shape) for k, v in tensors.items()} == expected
    assert all(".default." in k for k in tensors)  # the adapter ("merged") is not saved
    assert all(tuple(v.shape)[0] != 2 and tuple(v.shape)[-1] != 2 for v in tensors.values())
    assert meta["target_modules"] == TARGETS
