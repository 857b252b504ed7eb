"""FLUX.2 [dev] through the family contract, on a tiny real-architecture pipeline (CPU).

- recognised from its model id and from its files (``Flux2Pipeline``; a transformer folder,
  whose class FLUX.2 [klein] shares, by the Mistral text encoder beside it), never as
  [klein], and [klein]'s files still as [klein]; its defaults are the pipeline's and the
  reference's;
- the published configs are diffusers' FLUX.2 [dev] transformer and hold the default
  targets; the estimator reads them;
- stage 1 encodes exactly as ``Flux2Pipeline`` does, in every offload mode, with the
  tokenizer of the processor folder and the processor's chat template wherever the folder
  keeps it (``PixtralProcessor`` itself needs torchvision);
- a [klein] source with a [dev] one (text encoder, tokenizer, a local folder) is refused by
  the config's validation, naming the field;
- the reference's FLUX.2-dev LoRA script (split training) and its NPU twin import into this
  family with only the script path changed;
- exports of the default targets: every ComfyUI key is one ComfyUI's FLUX key map accepts
  and a Linear of the model; the diffusers export changes what ``Flux2Pipeline`` renders.
The shared LoRA's training under ZeRO-3 offload, its exports, samples and resume are checked
for every family in tests/test_every_family.py.
"""
from __future__ import annotations

import inspect
import json
import shutil
from pathlib import Path

import pytest

from backend.families.flux2_dev import BLOCK_TARGETS, REPO, SOURCES, SPEC, single_block_targets
from tests.harness.flux2 import (check_comfyui_export, check_stage1_encodes_as_the_pipeline,
                                 flux2_pipeline, lora_on_targets, render)
from tests.harness.families import family_cases

FAMILY = SPEC.name
RANK = 4
CASE = next(c for c in family_cases() if c.family == FAMILY)
KLEIN = next(c for c in family_cases() if c.family == "flux2_klein")
PROMPT = "a blue triangle on a white background"


@pytest.fixture(scope="module")
def tiny_dir(family_runs) -> Path:
    """The family's shared tiny pipeline (tests/harness/families.py) under its model id."""
    return family_runs.models(CASE) / REPO


def _pipeline(tiny_dir):
    return flux2_pipeline(tiny_dir, "Flux2Pipeline")


def _render(pipe):
    return render(FAMILY, pipe, cfg=4.0)


# ------------------------------------------------------------------------------------------
# Recognition and defaults
# ------------------------------------------------------------------------------------------
def test_recognised_from_its_model_id_with_the_pipelines_defaults():
    from diffusers import Flux2Pipeline

    from backend.config.schema import family_defaults
    from backend.families import family_of, recognise

    assert recognise(f"{REPO}:transformer/*.safetensors") == (FAMILY, None)
    assert family_of({"model_id_with_origin_paths": SOURCES}) == (FAMILY, None)
    d = family_defaults(FAMILY)
    call = inspect.signature(Flux2Pipeline.__call__).parameters
    assert d["sample_steps"] == call["num_inference_steps"].default == 50
    assert d["sample_cfg"] == call["guidance_scale"].default
    assert (d["sample_height"], d["sample_width"]) == (1024, 1024)
    assert d["model_id_with_origin_paths"] == SOURCES
    assert d["remove_prefix_in_ckpt"] == "pipe.dit."
    # The reference's target list, 48 single blocks' to_out.
    targets = d["lora_target_modules"].split(",")
    assert targets[:11] == BLOCK_TARGETS.split(",")
    assert targets[-1] == "single_transformer_blocks.47.attn.to_out" and len(targets) == 59


def test_recognised_from_its_files_and_klein_still_from_its_own(family_runs, tiny_dir):
    """The pipeline folder by ``Flux2Pipeline``; its transformer folder alone (the class
    [klein] shares) by the Mistral text encoder beside it; a copy of the transformer with no
    pipeline around it by a text encoder folder among the model paths. [klein]'s folders stay
    [klein]'s."""
    from backend.families import recognise

    assert recognise(str(tiny_dir)) == (FAMILY, None)
    assert recognise(str(tiny_dir / "transformer"))[0] == FAMILY
    weights = tiny_dir / "transformer" / "diffusion_pytorch_model.safetensors"
    assert recognise(None, json.dumps([str(weights)]))[0] == FAMILY
    klein = family_runs.models(KLEIN) / KLEIN.model_ids[0]
    assert recognise(str(klein))[0] == "flux2_klein"
    assert recognise(str(klein / "transformer"))[0] == "flux2_klein"


def test_a_lone_transformer_folder_is_named_by_the_text_encoder_among_the_sources(
        tmp_path, family_runs, tiny_dir):
    from backend.families import recognise

    alone = tmp_path / "somewhere" / "transformer"
    shutil.copytree(tiny_dir / "transformer", alone)
    # Nothing beside it: the class's first family, as before FLUX.2 [dev] existed.
    assert recognise(str(alone))[0] == "flux2_klein"
    assert recognise(f"{alone},{tiny_dir / 'text_encoder'}")[0] == FAMILY
    klein = family_runs.models(KLEIN) / KLEIN.model_ids[0]
    assert recognise(f"{alone},{klein / 'text_encoder'}")[0] == "flux2_klein"


# ------------------------------------------------------------------------------------------
# Published configs and the estimator
# ------------------------------------------------------------------------------------------
def test_published_transformer_is_diffusers_flux2_dev_and_holds_the_default_targets():
    from diffusers import Flux2Transformer2DModel

    from backend.families import get_family
    from backend.families.flux2_dev.published import TRANSFORMER

    init = inspect.signature(Flux2Transformer2DModel.__init__).parameters
    for key, value in TRANSFORMER.items():
        if key != "_class_name":
            default = init[key].default
            assert (list(default) if isinstance(default, tuple) else default) == value, key
    family = get_family(FAMILY)
    shapes = family.lora_module_map()
    for t in f"{BLOCK_TARGETS},{single_block_targets()}".split(","):
        assert any(n == t or n.endswith("." + t) for n in shapes), t
    assert "transformer_blocks.7.attn.to_out.0" in shapes
    assert "single_transformer_blocks.47.attn.to_out" in shapes
    assert "single_transformer_blocks.48.attn.to_out" not in shapes
    assert family.transformer_shape(TRANSFORMER) == (56, 6144)


def test_the_estimator_reads_the_published_sizes():
    from backend.config.presets import load_preset
    from backend.planning import estimator

    low = estimator.estimate_memory(load_preset("flux2_dev_low_vram"))
    assert 31e9 < low.params["transformer"] < 33e9  # 32B
    assert 23.5e9 < low.params["text_encoder"] < 24.5e9  # Mistral Small 3.1 24B
    single = estimator.estimate_memory(load_preset("flux2_dev_single_gpu"))
    assert low.peak_gpu_gb < 12 < 64 < single.peak_gpu_gb


# ------------------------------------------------------------------------------------------
# Stage 1
# ------------------------------------------------------------------------------------------
def test_stage1_encodes_as_the_pipeline_does_in_every_offload_mode(tiny_dir):
    import torch
    from diffusers import Flux2Pipeline

    expected, text_ids = check_stage1_encodes_as_the_pipeline(FAMILY, _pipeline(tiny_dir),
                                                              tiny_dir, PROMPT)
    # The text ids the loss builds are the pipeline's.
    assert torch.equal(Flux2Pipeline._prepare_text_ids(expected), text_ids)


def test_the_prompt_passes_the_system_message_through_the_chat_template(tiny_dir):
    """The hidden states encode ``[SYSTEM_PROMPT]<the pipeline's system message>
    [/SYSTEM_PROMPT][INST]<prompt>[/INST]`` after the BOS, padded to 512."""
    from diffusers.pipelines.flux2.pipeline_flux2 import format_input
    from diffusers.pipelines.flux2.system_messages import SYSTEM_MESSAGE

    from backend.families.common import load_chat_tokenizer

    tok = load_chat_tokenizer(tiny_dir / "tokenizer")
    text = tok.apply_chat_template(format_input([PROMPT], SYSTEM_MESSAGE), tokenize=False)[0]
    assert text == f"<s>[SYSTEM_PROMPT]{SYSTEM_MESSAGE}[/SYSTEM_PROMPT][INST]{PROMPT}[/INST]"
    ids = tok.apply_chat_template(format_input([PROMPT], SYSTEM_MESSAGE), tokenize=True,
                                  return_dict=True, padding="max_length", truncation=True,
                                  max_length=512)["input_ids"][0]
    assert len(ids) == 512 and ids.count(tok.bos_token_id) == 1


@pytest.mark.parametrize("kept_in", ["chat_template.json", "processor_config.json"])
def test_the_processors_chat_template_is_read_where_the_folder_keeps_it(tmp_path, tiny_dir,
                                                                        kept_in):
    """A processor folder whose template is not ``chat_template.jinja`` (the processors'
    older files) gives the tokenizer that template; a folder without one is refused."""
    from backend.families.common import load_chat_tokenizer

    folder = tmp_path / "tokenizer"
    shutil.copytree(tiny_dir / "tokenizer", folder)
    template = (folder / "chat_template.jinja").read_text(encoding="utf-8")
    (folder / "chat_template.jinja").unlink()
    extra = {"processor_class": "PixtralProcessor"} if kept_in == "processor_config.json" else {}
    (folder / kept_in).write_text(json.dumps({**extra, "chat_template": template}))
    assert load_chat_tokenizer(folder).chat_template == template
    (folder / kept_in).unlink()
    with pytest.raises(ValueError, match="no chat template"):
        load_chat_tokenizer(folder)


def test_the_cache_holds_what_stage_2_reads(family_runs):
    from backend.data.cache import load_cached_samples, read_manifest

    cache = family_runs.cache(CASE)
    assert read_manifest(cache)["family"] == FAMILY
    samples = load_cached_samples(cache)
    assert len(samples) == 4
    assert {k for s in samples for k in s} == {"prompt_emb", "latents", "height", "width"}
    assert samples[0]["prompt_emb"].shape == (1, 512, 48)


# ------------------------------------------------------------------------------------------
# Bad input: the other FLUX.2 family's components
# ------------------------------------------------------------------------------------------
KLEIN_REPO = "black-forest-labs/FLUX.2-klein-4B"


def _problems(data: dict) -> list[str]:
    from backend.config.errors import ConfigError
    from backend.config.validation import validate

    with pytest.raises(ConfigError) as e:
        validate(data, require_inputs=False)
    return [str(p) for p in e.value.problems]


def test_a_klein_text_encoder_or_tokenizer_with_the_dev_transformer_is_refused():
    sources = SOURCES.replace(f"{REPO}:text_encoder", f"{KLEIN_REPO}:text_encoder")
    problems = _problems({"model_family": FAMILY, "model_id_with_origin_paths": sources,
                          "tokenizer_path": f"{KLEIN_REPO}:tokenizer/"})
    assert len(problems) == 2
    te, tok = problems
    assert te.startswith("model_id_with_origin_paths: a FLUX.2 [klein] model, not FLUX.2 "
                         "[dev]") and f"{KLEIN_REPO}:text_encoder" in te
    assert f"e.g. {REPO}:text_encoder/*.safetensors" in te
    assert tok.startswith("tokenizer_path: a FLUX.2 [klein] model") and f"{REPO}:tokenizer/" in tok
    # Left to recognition (no model_family), the first source names the family and the
    # dev transformer and VAE are the strangers.
    problems = _problems({"model_id_with_origin_paths": sources})
    assert len(problems) == 2 and all(p.startswith(
        "model_id_with_origin_paths: a FLUX.2 [dev] model, not FLUX.2 [klein]")
        for p in problems)
    assert f"{REPO}:transformer" in problems[0] and f"{REPO}:vae" in problems[1]


def test_local_folders_of_the_other_family_are_refused(family_runs, tiny_dir):
    """A [klein] text encoder folder (Qwen3) with the [dev] transformer folder, and the
    [dev] text encoder folder (Mistral) in a [klein] run; the run's own folders pass."""
    from backend.config.validation import validate

    klein = family_runs.models(KLEIN) / KLEIN.model_ids[0]
    mixed = f"{klein / 'text_encoder'},{tiny_dir / 'transformer'},{tiny_dir / 'vae'}"
    problems = _problems({"model_family": FAMILY, "model_id_with_origin_paths": mixed})
    assert len(problems) == 1 and problems[0].startswith(
        "model_id_with_origin_paths: a FLUX.2 [klein] model, not FLUX.2 [dev]")
    assert str(klein / "text_encoder") in problems[0] or "text_encoder" in problems[0]
    mixed = f"{tiny_dir / 'text_encoder'},{klein / 'transformer'},{klein / 'vae'}"
    problems = _problems({"model_family": "flux2_klein", "model_id_with_origin_paths": mixed})
    assert len(problems) == 1 and problems[0].startswith(
        "model_id_with_origin_paths: a FLUX.2 [dev] model, not FLUX.2 [klein]")
    weights = klein / "text_encoder" / "model.safetensors"
    problems = _problems({"model_family": FAMILY, "model_paths": json.dumps([str(weights)])})
    assert len(problems) == 1 and problems[0].startswith("model_paths: a FLUX.2 [klein] model")
    own = f"{tiny_dir / 'text_encoder'},{tiny_dir / 'transformer'},{tiny_dir / 'vae'}"
    assert validate({"model_id_with_origin_paths": own},
                    require_inputs=False).model_family == FAMILY


# ------------------------------------------------------------------------------------------
# The reference's commands
# ------------------------------------------------------------------------------------------
def _targets() -> str:
    return f"{BLOCK_TARGETS},{single_block_targets()}"


def reference_lora_script(npu: bool = False) -> str:
    """The reference's lora/FLUX.2-dev.sh (npu: special/npu_training/FLUX.2-dev-Lora-NPU.sh,
    its stage 2 under its ZeRO-3 launch file, the model built on CPU), the script path
    changed."""
    launch = ("accelerate launch --config_file "
              "examples/flux2/model_training/full/accelerate_config_zero3.yaml"
              if npu else "accelerate launch")
    on_cpu = "  --initialize_model_on_cpu \\\n" if npu else ""
    return f"""modelscope download --dataset DiffSynth-Studio/diffsynth_example_dataset --include "flux2/FLUX.2-dev/*" --local_dir ./data/diffsynth_example_dataset

accelerate launch backend/stages/train.py \\
  --dataset_base_path data/diffsynth_example_dataset/flux2/FLUX.2-dev \\
  --dataset_metadata_path data/diffsynth_example_dataset/flux2/FLUX.2-dev/metadata.csv \\
  --max_pixels 1048576 \\
  --dataset_repeat 1 \\
  --model_id_with_origin_paths "{REPO}:text_encoder/*.safetensors,{REPO}:vae/diffusion_pytorch_model.safetensors" \\
  --learning_rate 1e-4 \\
  --num_epochs 5 \\
  --remove_prefix_in_ckpt "pipe.dit." \\
  --output_path "./models/train/FLUX.2-dev-LoRA-splited-cache" \\
  --lora_base_model "dit" \\
  --lora_target_modules "{_targets()}" \\
  --lora_rank 32 \\
  --use_gradient_checkpointing \\
  --dataset_num_workers 8 \\
  --task "sft:data_process"

{launch} backend/stages/train.py \\
  --dataset_base_path "./models/train/FLUX.2-dev-LoRA-splited-cache" \\
  --max_pixels 1048576 \\
  --dataset_repeat 50 \\
  --model_id_with_origin_paths "{REPO}:transformer/*.safetensors" \\
  --learning_rate 1e-4 \\
  --num_epochs 5 \\
  --remove_prefix_in_ckpt "pipe.dit." \\
  --output_path "./models/train/FLUX.2-dev-LoRA-splited" \\
  --lora_base_model "dit" \\
  --lora_target_modules "{_targets()}" \\
  --lora_rank 32 \\
  --use_gradient_checkpointing \\
  --dataset_num_workers 8 \\
{on_cpu}  --task "sft:train"
"""


@pytest.mark.parametrize("npu", [False, True], ids=["lora", "npu"])
def test_the_reference_lora_script_imports_into_this_family(tmp_path, npu):
    from backend.planning.importer import import_commands

    result = import_commands(reference_lora_script(npu), base_dir=tmp_path)
    cfg = result.config
    assert cfg.model_family == FAMILY
    assert cfg.split_training and cfg.stages[:2] == ["data_process", "train"]
    # Stage 2's transformer and stage 1's text encoder and VAE: the family's sources.
    assert set(cfg.model_id_with_origin_paths.split(",")) == set(SOURCES.split(","))
    assert cfg.tokenizer_path is None  # the reference's default, FLUX.2-dev:tokenizer/
    assert cfg.lora_target_modules == _targets()
    assert (cfg.lora_rank, cfg.learning_rate, cfg.num_epochs, cfg.dataset_repeat,
            cfg.max_pixels) == (32, 1e-4, 5, 50, 1048576)
    assert cfg.use_gradient_checkpointing and cfg.remove_prefix_in_ckpt == "pipe.dit."
    assert cfg.dataset_base_path == str(tmp_path / "data/diffsynth_example_dataset/flux2/"
                                                    "FLUX.2-dev")
    assert cfg.initialize_model_on_cpu == npu
    assert result.not_understood == []
    if npu:  # the reference's launch file, known by name: ZeRO-3 on 8 processes
        assert (cfg.zero_stage, cfg.num_processes, cfg.mixed_precision) == (3, 8, "bf16")
        assert any("accelerate_config_zero3.yaml" in n for n in result.notes)


def test_the_tokenizer_resolves_to_the_repos_processor_folder(tiny_dir, family_runs):
    """Without tokenizer_path (the reference's script sets none), the tokenizer is the
    ``tokenizer/`` folder of the FLUX.2-dev repository, as the reference's default."""
    from backend.config.validation import validate
    from backend.models.hub import resolve_component_dirs

    cfg = validate({"model_family": FAMILY, "models_dir": str(family_runs.models(CASE)),
                    "offline": True}, require_inputs=False)
    dirs = resolve_component_dirs(cfg, ["text_encoder", "tokenizer", "vae"])
    assert dirs["tokenizer"] == tiny_dir / "tokenizer"
    assert dirs["text_encoder"] == tiny_dir / "text_encoder"


# ------------------------------------------------------------------------------------------
# Exports of the default targets
# ------------------------------------------------------------------------------------------
# The default targets, cut to the tiny model's 2 single blocks.
TINY_TARGETS = f"{BLOCK_TARGETS},{single_block_targets(2)}".split(",")


def test_comfyui_export_of_every_target_maps_to_the_model(tmp_path, tiny_dir):
    """Every key is ``transformer.<module>.lora_down/lora_up.weight`` or ``.alpha``, a module
    ComfyUI's FLUX key map accepts (FLUX.2 [klein]'s: the same transformer layout) and a
    Linear of matching sizes; it reads back as the same LoRA."""
    import torch
    from safetensors.torch import load_file

    from backend.families import get_family
    from backend.models.export import export_lora

    path, state = lora_on_targets(tmp_path, tiny_dir, FAMILY, TINY_TARGETS, RANK, 1.0)
    comfy = export_lora(path, "comfyui", transformer_config=tiny_dir / "transformer",
                        family=FAMILY)
    fresh = get_family(FAMILY).load_transformer(tiny_dir / "transformer", torch.float32)
    # 2 double blocks x (8 attention + 4 feed-forward Linears) + 2 single blocks x 2.
    assert check_comfyui_export(comfy, fresh) == 2 * 12 + 2 * 2
    back = export_lora(comfy, "reference", out_dir=tmp_path / "back", family=FAMILY)
    assert {k: v.shape for k, v in load_file(str(back)).items()} == {
        k: v.shape for k, v in state.items()}


def test_diffusers_loads_the_diffusers_export(tmp_path, tiny_dir):
    """A LoRA on the default targets, exported for diffusers, loads with
    ``Flux2Pipeline.load_lora_weights`` and changes the rendered image."""
    import numpy as np

    from backend.models.export import export_lora

    path, _ = lora_on_targets(tmp_path, tiny_dir, FAMILY, TINY_TARGETS, RANK, 0.5)
    exported = export_lora(path, "diffusers", transformer_config=tiny_dir / "transformer",
                           family=FAMILY)
    pipe = _pipeline(tiny_dir)
    plain = _render(pipe)
    pipe.load_lora_weights(str(exported))
    assert np.abs(_render(pipe) - plain).mean() > 1.0
