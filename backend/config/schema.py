"""The run schema: the single source of truth for every option of a ZeroLoRA run.

One snake_case name per option serves as YAML key, stage CLI flag, form component key and
attribute. Names follow the reference trainer's flags wherever one exists, so a user's
existing command runs against ours with only the script path changed. Every field carries
its default, bounds or choices, help text, UI group (``GROUPS``) and UI level (``LEVELS``:
basic | advanced | hidden); ``field_meta(name)`` returns them for forms and messages.

Precedence is explicit: command line > config file > schema default.
Validation reports every problem at once, one per line, as
``field: problem (got X; allowed Y)`` -- single fields first, then the rules that tie
fields together (``cross_field_problems``). Hub tokens are never fields: they come from the
environment (``HF_TOKEN``, ``MODELSCOPE_API_TOKEN``) and never reach a file.

Presets are YAML files holding ``schema_version`` and only the values they change
(``list_presets``, ``load_preset``, ``save_preset``, ``diff_configs``). Bundled presets live
in ``<repo>/presets/``; relative paths inside them resolve against the repository root.
User presets live in ``{workspace}/presets/``. Older schema versions are brought up to date
in one place, ``migrate``.

This module imports only the standard library, pydantic and yaml, so a bad config fails
within a second, before torch or any distributed set-up is touched.
"""
from __future__ import annotations

import argparse
import copy
import json
import os
import re
from pathlib import Path
from typing import Annotated, Any, Literal, Optional, Union, get_args, get_origin

import yaml
from pydantic import (AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field,
                      ValidationError, create_model)

from backend.core import rundir, writegate
from backend.core import bounded
from backend.families import default_family, family_names, family_of, family_spec
from backend.config.lowvram import combination_problems

SCHEMA_VERSION = 1

REPO_ROOT = Path(__file__).resolve().parents[2]
PRESETS_DIR = REPO_ROOT / "presets"

# Model families come from the registry (backend/families): their names are the choices
# of model_family, and the default family's values are the schema defaults of the fields a
# family changes (family_defaults gives any family's).
_DEFAULT_FAMILY = family_spec(default_family())


def _known_family(value: str) -> str:
    if value not in family_names():
        raise ValueError("not a registered model family")
    return value


# Checked against the registry when a value is validated (a family registered later counts).
FamilyName = Annotated[str, AfterValidator(_known_family)]


def _family_default(name: str) -> Any:
    return _DEFAULT_FAMILY.defaults[name]
TASKS = ("sft", "sft:data_process", "sft:train")
STAGES = ("data_process", "train", "sample")
GROUPS = ("run", "model", "data", "lora", "training", "distributed", "stages", "samples",
          "captions")
LEVELS = ("basic", "advanced", "hidden")
# Strings that mean "unset" for optional fields (command line, YAML, forms).
NONE_WORDS = ("none", "null", "")
# Options that hold a local path (made absolute by ``resolve_paths``).
PATH_FIELDS = ("output_path", "resume_from", "progress_file", "models_dir",
               "dataset_base_path", "dataset_metadata_path", "lora_checkpoint",
               "preset_lora_path", "offload_nvme_path")
MODELS_DIR_ENV = "ZEROLORA_MODELS_DIR"
SAMPLE_SCALE_RANGE = (-4.0, 4.0)

BIG = 10**12
LOKR_FACTOR_ALLOWED = "-1 (as balanced as the dimension allows) or a factor from 1 to 1024"
# The reference trainer's --customized_optimizer names a class by dotted path; only these
# are understood, each mapped onto an ``optimizer`` choice (nothing is ever imported from a
# user-given path).
CUSTOMIZED_OPTIMIZER_MAP = {
    "torch.optim.AdamW": "adamw",
    "bitsandbytes.optim.AdamW8bit": "adamw8bit",
    "bitsandbytes.optim.adamw.AdamW8bit": "adamw8bit",
    "transformers.Adafactor": "adafactor",
    "transformers.optimization.Adafactor": "adafactor",
    "prodigyopt.Prodigy": "prodigy",
}
CUSTOMIZED_OPTIMIZERS = tuple(CUSTOMIZED_OPTIMIZER_MAP)


class ConfigError(ValueError):
    """Every problem of a config, one per line: ``field: problem (got X; allowed Y)``.

    ``source`` says where the values came from (a file, ``the command line``, an API call);
    ``sources`` maps a field to where its value came from when the values came from several
    places (a ``--config`` file and flags, a preset and the values put on top of it). Each
    problem is attributed to the source of the field it names (``source`` for the rest):
    one source names it in the first line, several are named at the end of each line.
    """

    def __init__(self, problems: list[str], source: str | None = None,
                 sources: dict[str, str] | None = None):
        self.problems = list(problems)
        where = [(sources or {}).get(_problem_field(p), source) for p in self.problems]
        places = list(dict.fromkeys(w for w in where if w))
        self.problem_sources = where
        if len(places) <= 1 and (len(places) == 0 or None not in where):
            self.source = places[0] if places else source
            lines = [f"  {p}" for p in self.problems]
        else:
            self.source = " and ".join(places)
            lines = [f"  {p}" + (f" [from {w}]" if w else "")
                     for p, w in zip(self.problems, where)]
        head = f"Invalid run config{f' in {self.source}' if self.source else ''}:"
        super().__init__("\n".join([head] + lines))

    def fields(self) -> list[str]:
        return [_problem_field(p) for p in self.problems]


def _problem_field(problem: str) -> str:
    return problem.split(":", 1)[0]




def F(default: Any, help: str, group: str, *, ui: str = "basic", label: str | None = None,
      **kw: Any) -> Any:
    """A schema field: default, help text, UI group and level (basic | advanced | hidden);
    ``label``: the words a newcomer reads for it (default: ``FIELD_LABELS``)."""
    assert group in GROUPS and ui in LEVELS, (group, ui)
    extra = {"group": group, "ui": ui}
    if label:
        extra["label"] = label
    extra.update(kw.pop("extra", {}))
    return Field(default, description=help, json_schema_extra=extra, **kw)


Precision = Literal["no", "fp16", "bf16"]
OffloadDevice = Literal["none", "cpu", "nvme"]
OffloadMode = Literal["none", "model", "sequential"]


def _offload_from_bool(value: Any) -> Any:
    """``sample_cpu_offload`` was a boolean before it had modes: true means model, false
    none (YAML booleans, and the words from a command line or form)."""
    if isinstance(value, str) and value.strip().lower() in ("true", "false"):
        value = value.strip().lower() == "true"
    if isinstance(value, bool):
        return "model" if value else "none"
    return value


# An offload mode that still reads the boolean spelling of older run files and presets.
OffloadModeOrBool = Annotated[OffloadMode, BeforeValidator(_offload_from_bool)]


class RunConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=False)

    # --- run ---------------------------------------------------------------------------
    run_name: str = F("", "A name for this run in the history (optional).", "run",
                      max_length=200)
    task: Literal["sft", "sft:data_process", "sft:train"] = F(
        "sft", "sft: encode text and images every step; sft:data_process: stage 1 (cache); "
        "sft:train: stage 2 (train from the cache). Set per stage by the run plan.", "run",
        ui="hidden")
    output_path: str = F("./models", "Where checkpoints are written (stage 1: the cache "
                         "folder). Set per stage by the run plan.", "run", ui="hidden")
    resume_from: Optional[str] = F(None, "Folder of a saved training state (output/state) to "
                                   "continue from.", "run", ui="hidden")
    progress_file: Optional[str] = F(None, "JSON-lines progress events (default: "
                                     f"output_path/{rundir.PROGRESS}).", "run", ui="hidden")
    read_roots: Optional[list[str]] = F(
        None, "Folders the stages may read files from (besides the run's own folder); set "
        "by the web server for signed-in users who are not admins, never by users. Empty: "
        "no restriction (backend/core/readgate.py).", "run", ui="hidden")
    write_roots: Optional[list[str]] = F(
        None, "Folders the stages may write files into (besides the run's own folder); set "
        "by the web server for signed-in users who are not admins, never by users. Empty: "
        "no restriction (backend/core/writegate.py).", "run", ui="hidden")

    # --- model -------------------------------------------------------------------------
    model_family: FamilyName = F(
        default_family(), "Model family (the architecture). Left out, it is recognised from "
        "the model sources (a known model id, or the _class_name in their config.json).",
        "model", extra={"choices_from": "families"})
    model_id_with_origin_paths: Optional[str] = F(
        _family_default("model_id_with_origin_paths"), "Comma-separated model_id:glob, resolved as {models_dir}/"
        "{model_id}/{glob} (split at the last colon); an existing local path (a file, a "
        "component folder or a pipeline folder) is used as a path.", "model")
    model_paths: Optional[str] = F(None, "JSON list of local weight files (an element may be a "
                                   "list of shards); used instead of model_id_with_origin_paths.",
                                   "model", ui="advanced")
    tokenizer_path: Optional[str] = F(None, "Tokenizer folder or model_id:folder/ (default: "
                                      "the text encoder's sibling tokenizer/ folder, else "
                                      "the family's default tokenizer source).", "model",
                                      ui="advanced")
    download_source: Literal["modelscope", "huggingface"] = F(
        "modelscope", "Where missing model files are downloaded from.", "model")
    hub_endpoint: Optional[str] = F(None, "Mirror endpoint URL for the download source.",
                                    "model", ui="advanced", pattern=r"^https?://\S+$")
    models_dir: str = F("./models", "Folder holding downloaded models as {models_dir}/"
                        "{model_id}/{glob} (env ZEROLORA_MODELS_DIR replaces the default).",
                        "model", min_length=1)
    offline: bool = F(False, "Never touch the network; missing files are an error.", "model")

    # --- data --------------------------------------------------------------------------
    dataset_base_path: str = F("", "Dataset folder (in stage 2: the cache folder).", "data")
    dataset_metadata_path: Optional[str] = F(
        None, "metadata.csv/json/jsonl; empty: image + same-named .txt captions in "
        "dataset_base_path (or, for sft:train, a cache folder).", "data")
    data_file_keys: str = F("image", "Metadata columns loaded as files.", "data", ui="advanced",
                            min_length=1)
    trigger_word: str = F("", "Prepended to every caption (e.g. 'zlr style').", "data")
    max_pixels: int = F(1048576, "Area cap for dynamic resolution (when height/width are "
                        "empty).", "data", ge=64 * 64, le=4096 * 4096)
    height: Optional[int] = F(None, "Fixed height (set with width; empty: dynamic "
                              "resolution).", "data", ge=16, le=4096, multiple_of=16)
    width: Optional[int] = F(None, "Fixed width (set with height; empty: dynamic "
                             "resolution).", "data", ge=16, le=4096, multiple_of=16)
    dataset_repeat: int = F(1, "Dataset length multiplier per epoch.", "data", ge=1, le=100000)
    # --- video datasets and clips (video families) -------------------------------------
    num_frames: int = F(81, "Video families: frames per training clip (4k+1: the VAE groups "
                        "frames by 4 after the first; 1 trains on single frames). Images "
                        "are one-frame clips.", "data", ui="advanced", ge=1, le=1025)
    frame_stride: int = F(1, "Video families: take every N-th frame of a clip (1: every "
                          "frame).", "data", ui="advanced", ge=1, le=1000)
    video_fps: Optional[float] = F(None, "Video families: sample a clip's frames at this rate "
                                   "in its own time instead of by frame_stride (empty: use "
                                   "frame_stride).", "data", ui="advanced", gt=0, le=240)
    # --- two-expert video models: one expert per run over its own timestep range ---------
    max_timestep_boundary: float = F(
        1.0, "Video families: train only on the schedule's timesteps below this fraction of "
        "them, counted from the noisiest (the reference's flag; 1: to the end). A two-expert "
        "model trains each expert over its own range: the high-noise expert (transformer) "
        "from 0, the low-noise one (transformer_2) up to 1.", "training", ui="advanced",
        ge=0.0, le=1.0)
    min_timestep_boundary: float = F(
        0.0, "Video families: train only on the schedule's timesteps from this fraction of "
        "them on, counted from the noisiest (the reference's flag; 0: from the start).",
        "training", ui="advanced", ge=0.0, le=1.0)
    sample_num_frames: int = F(81, "Video families: frames of a sample clip (4k+1).",
                               "samples", ui="advanced", ge=1, le=1025)
    sample_fps: int = F(16, "Video families: frames per second of a sample clip.",
                        "samples", ui="advanced", ge=1, le=120)
    dataset_num_workers: int = F(0, "DataLoader worker processes.", "data", ui="advanced",
                                 ge=0, le=64)

    # --- LoRA --------------------------------------------------------------------------
    lora_base_model: Literal["dit"] = F("dit", "Component that gets the LoRA.", "lora",
                                        ui="advanced")
    lora_target_modules: str = F(_family_default("lora_target_modules"),
                                 "Comma-separated module names (the family's defaults are "
                                 "the reference trainer's).", "lora", ui="advanced")
    lora_rank: int = F(32, "LoRA rank (alpha = rank).", "lora", ge=1, le=1024)
    lora_checkpoint: Optional[str] = F(None, "Initialise the LoRA from this file.", "lora",
                                       ui="advanced")
    preset_lora_path: Optional[str] = F(
        None, "A LoRA merged into the model's weights before training (e.g. a "
        "de-distillation adapter for a distilled model); it trains nothing and is not in "
        "the saved LoRA.", "lora", ui="advanced")
    remove_prefix_in_ckpt: str = F(_family_default("remove_prefix_in_ckpt"), "Prefix stripped from saved keys.", "lora",
                                   ui="advanced")

    # --- training ----------------------------------------------------------------------
    learning_rate: float = F(1e-4, "AdamW learning rate.", "training", gt=0, le=1.0)
    lr_warmup_steps: int = F(0, "Linear warm-up steps.", "training", ui="advanced", ge=0,
                             le=10**7)
    weight_decay: float = F(0.01, "AdamW weight decay.", "training", ui="advanced", ge=0, le=1)
    num_epochs: int = F(1, "Epochs (max_train_steps, when set, decides instead).", "training",
                        ge=1, le=100000)
    max_train_steps: Optional[int] = F(
        None, "Train exactly this many optimizer steps, overriding num_epochs (the epochs "
        "follow from it: steps / steps per epoch, rounded up). Empty: num_epochs decides.",
        "training", ge=1, le=10**9)
    max_steps: Optional[int] = F(None, "A cap, not a target: stop after this many optimizer "
                                 "steps if num_epochs would run longer; it never adds steps "
                                 "(for a step target use max_train_steps). Empty: run all "
                                 "epochs.", "training", ge=1, le=10**9)
    gradient_accumulation_steps: int = F(1, "Micro-steps per optimizer step.", "training",
                                         ui="advanced", ge=1, le=1024)
    save_steps: Optional[int] = F(None, "Save every N steps plus a final save (empty: each "
                                  "epoch).", "training", ge=1, le=10**9)
    keep_last_n_checkpoints: Optional[int] = F(None, "Delete older step checkpoints.",
                                               "training", ui="advanced", ge=1, le=10000)
    seed: int = F(42, "Random seed.", "training", ge=0, le=2**32 - 1)
    use_gradient_checkpointing: bool = F(False, "Per-block activation checkpointing (under "
                                         "DeepSpeed: DeepSpeed's checkpointing when "
                                         "ds_activation_checkpointing is on).", "training")
    use_gradient_checkpointing_offload: bool = F(
        False, "Keep checkpointed activations on CPU (torch checkpointing only; under "
        "DeepSpeed activation checkpointing use cpu_checkpointing).", "training",
        ui="advanced")
    find_unused_parameters: bool = F(False, "DDP: allow parameters without gradients.",
                                     "training", ui="advanced")
    initialize_model_on_cpu: bool = F(False, "Build the model on CPU (used with ZeRO-3).",
                                      "training", ui="advanced")

    # --- distributed -------------------------------------------------------------------
    mixed_precision: Precision = F("bf16", "Mixed precision (no: float32).", "distributed")
    num_processes: int = F(1, "Processes (GPUs) in total across machines.", "distributed",
                           ge=1, le=1024)
    gpu_ids: str = F("all", "GPU ids for this run, e.g. 0,1 (or all).", "distributed",
                     pattern=r"^(all|\d+(,\d+)*)$")
    num_machines: int = F(1, "Machines (the run folder must be at the same path on each, "
                          "e.g. a shared file system).", "distributed", ui="advanced", ge=1,
                          le=128)
    machine_rank: int = F(0, "This machine's rank (0: the main machine; the run plan prints "
                          "the commands for the others).", "distributed", ui="hidden", ge=0,
                          le=127)
    main_process_ip: Optional[str] = F(None, "Main machine address (needed for >1 machine).",
                                       "distributed", ui="advanced")
    main_process_port: int = F(0, "Main machine port (0: a free port, one machine only).",
                               "distributed", ui="advanced", ge=0, le=65535)
    zero_stage: int = F(0, "DeepSpeed ZeRO stage of the training stage (0: no DeepSpeed; "
                        "stage 1 caching always runs without it).", "distributed", ge=0, le=3)
    offload_optimizer_device: OffloadDevice = F("none", "Where optimizer states live "
                                                "(ZeRO 1-3; nvme: ZeRO-3).", "distributed")
    offload_param_device: OffloadDevice = F("none", "Where parameters live (ZeRO-3).",
                                            "distributed")
    offload_nvme_path: Optional[str] = F(None, "NVMe folder for nvme offload.", "distributed",
                                         ui="advanced")
    pin_memory: bool = F(True, "Pin host memory for offload.", "distributed", ui="advanced")
    zero3_init_flag: bool = F(True, "Build the model partitioned (ZeRO-3).", "distributed",
                              ui="advanced")
    ds_activation_checkpointing: bool = F(
        True, "With DeepSpeed and gradient checkpointing: write the activation_checkpointing "
        "block (DeepSpeed's checkpointing).", "distributed", ui="advanced")
    partition_activations: bool = F(False, "Partition checkpointed activations.",
                                    "distributed", ui="advanced")
    cpu_checkpointing: bool = F(False, "Keep DeepSpeed-checkpointed activations on CPU.",
                                "distributed", ui="advanced")
    contiguous_memory_optimization: bool = F(False, "Contiguous checkpoint buffers.",
                                             "distributed", ui="advanced")
    overlap_comm: bool = F(False, "Overlap communication.", "distributed", ui="advanced")
    contiguous_gradients: bool = F(True, "Contiguous gradient buffers.", "distributed",
                                   ui="advanced")
    sub_group_size: int = F(1_000_000_000, "ZeRO-3 sub group size.", "distributed",
                            ui="advanced", ge=1, le=BIG)
    reduce_bucket_size: int = F(50_000_000, "Reduce bucket size.", "distributed",
                                ui="advanced", ge=1, le=BIG)
    stage3_prefetch_bucket_size: int = F(50_000_000, "ZeRO-3 prefetch bucket.", "distributed",
                                         ui="advanced", ge=0, le=BIG)
    stage3_param_persistence_threshold: int = F(100_000, "ZeRO-3 persistence threshold.",
                                                "distributed", ui="advanced", ge=0, le=BIG)
    stage3_max_live_parameters: int = F(100_000_000, "ZeRO-3 live parameters.", "distributed",
                                        ui="advanced", ge=0, le=BIG)
    stage3_max_reuse_distance: int = F(100_000_000, "ZeRO-3 reuse distance.", "distributed",
                                       ui="advanced", ge=0, le=BIG)
    gradient_clipping: Optional[float] = F(None, "Clip the gradient norm (empty: no clipping "
                                           "without DeepSpeed; with DeepSpeed 'auto', which "
                                           "accelerate sets to 1.0).", "distributed",
                                           ui="advanced", gt=0, le=10000)

    # --- stages ------------------------------------------------------------------------
    split_training: bool = F(True, "Cache text/VAE outputs first (stage 1), then train "
                             "only the transformer (stage 2).", "stages")
    stages: list[Literal["data_process", "train", "sample"]] = F(
        ["data_process", "train", "sample"], "Stages to run, in order.", "stages",
        ui="advanced", min_length=1)
    data_process_offload: OffloadMode = F(
        "none", "GPU memory of stage 1 (data_process). none: the text encoder and the VAE "
        "sit on the GPU together; model: one at a time -- every prompt with the text "
        "encoder, which then goes back to host RAM, then every image with the VAE; "
        "sequential: the weights stay in host RAM and reach the GPU one module at a time "
        "(least memory, slower). The cache is the same in every mode; the memory estimate "
        "gives each mode's figure for the chosen model.", "stages", ui="advanced")

    # --- samples -----------------------------------------------------------------------
    sample_prompts: list[str] = F(["a photo of a cat"], "Test prompts (one per line).",
                                  "samples")
    sample_negative_prompt: str = F("", "Negative prompt.", "samples", ui="advanced")
    sample_seed: int = F(0, "Seed for every sample.", "samples", ge=0, le=2**32 - 1)
    sample_steps: int = F(_family_default("sample_steps"), "Denoising steps.", "samples",
                          ge=1, le=200)
    sample_cfg: float = F(_family_default("sample_cfg"), "Classifier-free guidance scale.",
                          "samples", ge=1.0, le=30.0)
    sample_height: int = F(_family_default("sample_height"), "Sample height.", "samples",
                           ge=16, le=4096, multiple_of=16)
    sample_width: int = F(_family_default("sample_width"), "Sample width.", "samples",
                          ge=16, le=4096, multiple_of=16)
    sample_lora_scales: list[float] = F([0.0, 1.0], "LoRA scales (0 = base model), each "
                                        "between -4 and 4.", "samples", min_length=1)
    sample_every_n_steps: Optional[int] = F(None, "Render samples every N training steps.",
                                            "samples", ui="advanced", ge=1, le=10**9)
    sample_cpu_offload: OffloadModeOrBool = F(
        "none", "GPU memory of the sample stage. none: the whole pipeline on the GPU; "
        "model: one component at a time (diffusers' model CPU offload; the transformer still "
        "goes whole); sequential: weights stream from host RAM one module at a time "
        "(diffusers' sequential CPU offload; much slower, least memory, less still with "
        "sample_vae_tiling). The memory estimate gives each mode's figure for the chosen "
        "model. true / false from older configs mean model / none.", "samples",
        ui="advanced", extra={"bare_flag": "model", "no_flag": "none"})
    sample_vae_tiling: bool = F(
        False, "Decode sample images in overlapping tiles, so the VAE decoder's memory "
        "stops growing with the image size. Seams are blended; pixels differ slightly from "
        "an untiled decode.", "samples", ui="advanced")

    # --- edit models: input images beside the target (the reference's flags) ----------
    extra_inputs: str = F(
        "", "Metadata columns passed to the model besides image and prompt: edit_image for "
        "edit models (one path or a list per row: the input images; the image column is "
        "the target); input_image for image-to-video models (the first frame of each clip "
        "conditions it). Empty: text-to-image.", "data", ui="advanced",
        pattern=r"^(edit_image|input_image)?$")
    zero_cond_t: bool = F(
        False, "Edit models: input-image tokens get timestep 0 in the transformer's "
        "modulation (a model whose config sets it uses it anyway; this forces it on).",
        "training", ui="advanced")
    sample_images: list[str] = F(
        [], "Edit and image-to-video models: the input images of each sample prompt, one "
        "line per prompt in the order of sample_prompts; several images of one prompt "
        "separated by |. Empty: each prompt takes a dataset row's input images (an "
        "image-to-video row: its clip's first frame), row 1 for prompt 1 and so on.",
        "samples")
    # --- low VRAM: layer offload and a quantized base (backend/config/lowvram.py) --------------
    enable_model_cpu_offload: bool = F(
        False, "Layer-wise offload without DeepSpeed (one GPU): the frozen weights stay in "
        "pinned host RAM and each block is copied to the GPU just before it runs (the next "
        "one overlapped), then dropped. Least GPU memory without DeepSpeed; every step "
        "moves the weights across the bus twice.", "distributed", ui="advanced")
    enable_optimizer_cpu_offload: bool = F(
        False, "Keep the optimizer's state (and its update) in host RAM without DeepSpeed "
        "(one GPU).", "distributed", ui="advanced")
    quant_options: Optional[str] = F(
        None, "Quantize a frozen model: entries <model_id>:<glob>:<method>[/<modules left "
        "unquantized>] separated by ';', methods bitsandbytes_nf4 | bitsandbytes_fp4 | "
        "bitsandbytes_int8 | torchao_int8 | torchao_fp8 (the reference's torchao_int8_w8a16 "
        "and torchao_fp8_w8a16 are the torchao two; the glob's folder names the component: "
        "transformer, text_encoder, vae). The LoRA trains and is saved in full precision.",
        "model",
        ui="advanced")
    fp8_models: Optional[str] = F(
        None, "Models kept with fp8 weights (list of <model_id>:<glob>, separated by ',' "
        "or ';'), as "
        "quant_options with torchao_fp8.", "model", ui="advanced")
    offload_models: Optional[str] = F(
        None, "Models kept in host RAM between uses (comma list of <model_id>:<glob>): in "
        "one-shot training the text encoder and VAE move to the GPU only to encode. Split "
        "training needs none (each stage loads only what it uses).", "model", ui="advanced")
    # --- end low VRAM ---------------------------------------------------------------------
    # === training options: batches, optimizers, schedules, LoRA variants, loss and noise ===
    # (one block; backend/training/optimizers.py, backend/data/buckets.py, backend/training/timesteps.py and
    # backend/models/lora.py read them; their cross-field rules are option_problems below)
    lora_alpha: Optional[float] = F(
        None, "LoRA alpha; the update is scaled by alpha / rank (empty: alpha = rank, scale "
        "1, as the reference trainer). Exports write it where the format carries an alpha "
        "and fold it into the weights where it does not.", "lora", ui="advanced", gt=0,
        le=65536)
    lora_dropout: float = F(0.0, "Dropout on the LoRA branch's input while training (lora "
                            "and dora).", "lora", ui="advanced", ge=0, le=0.9)
    lora_type: Literal["lora", "dora", "lokr"] = F(
        "lora", "lora: low-rank A·B; dora: LoRA with a learned magnitude per output "
        "(weight-decomposed); lokr: a Kronecker product (LyCORIS's LoKr; ComfyUI and peft "
        "load it, diffusers' loaders take LoRA keys only). All through peft.", "lora",
        ui="advanced")
    lokr_factor: int = F(-1, "LoKr: the Kronecker factor that splits each dimension (-1: "
                         "as balanced as the dimension allows).", "lora", ui="advanced",
                         ge=-1, le=1024, extra={"show_if": {"lora_type": ["lokr"]}})
    optimizer: Literal["adamw", "adamw8bit", "adafactor", "prodigy"] = F(
        "adamw", "adamw: torch's AdamW (DeepSpeed's CPU Adam with optimizer offload); "
        "adamw8bit: bitsandbytes' 8-bit AdamW; adafactor: transformers' Adafactor at the "
        "given learning rate; prodigy: the prodigyopt package (learns the step size: use "
        "learning_rate 1.0). Only adamw runs with optimizer offload.", "training")
    customized_optimizer: Optional[Literal[CUSTOMIZED_OPTIMIZERS]] = F(
        None, "The reference trainer's optimizer class by dotted path, mapped onto "
        "optimizer (only these names; nothing is imported from a path).", "training",
        ui="hidden")
    adam_beta1: float = F(0.9, "AdamW beta1.", "training", ui="advanced", ge=0, le=0.9999,
                          extra={"show_if": {"optimizer": ["adamw", "adamw8bit"]}})
    adam_beta2: float = F(0.999, "AdamW beta2.", "training", ui="advanced", ge=0, le=0.99999,
                          extra={"show_if": {"optimizer": ["adamw", "adamw8bit"]}})
    adam_epsilon: float = F(1e-8, "AdamW epsilon.", "training", ui="advanced", gt=0, le=1,
                            extra={"show_if": {"optimizer": ["adamw", "adamw8bit"]}})
    adafactor_decay_rate: float = F(-0.8, "Adafactor: decay rate of the second moment "
                                    "(transformers' decay_rate).", "training", ui="advanced",
                                    ge=-1, le=-0.1, extra={"show_if": {"optimizer": ["adafactor"]}})
    adafactor_clip_threshold: float = F(1.0, "Adafactor: update clipping threshold.",
                                        "training", ui="advanced", gt=0, le=100,
                                        extra={"show_if": {"optimizer": ["adafactor"]}})
    prodigy_d_coef: float = F(1.0, "Prodigy: multiplier of the learned step size (d_coef).",
                              "training", ui="advanced", gt=0, le=100,
                              extra={"show_if": {"optimizer": ["prodigy"]}})
    prodigy_use_bias_correction: bool = F(False, "Prodigy: Adam's bias correction.",
                                          "training", ui="advanced",
                                          extra={"show_if": {"optimizer": ["prodigy"]}})
    prodigy_safeguard_warmup: bool = F(False, "Prodigy: keep the step-size estimate from "
                                       "growing during warm-up.", "training", ui="advanced",
                                       extra={"show_if": {"optimizer": ["prodigy"]}})
    lr_scheduler: Literal["constant", "linear", "cosine", "cosine_with_restarts",
                          "polynomial"] = F(
        "constant", "Learning-rate schedule after the lr_warmup_steps linear warm-up "
        "(diffusers' get_scheduler): constant, linear decay to 0, cosine to 0, cosine with "
        "restarts (lr_num_cycles), polynomial (lr_power).", "training", ui="advanced")
    lr_num_cycles: int = F(1, "cosine_with_restarts: number of restarts.", "training",
                           ui="advanced", ge=1, le=1000,
                           extra={"show_if": {"lr_scheduler": ["cosine_with_restarts"]}})
    lr_power: float = F(1.0, "polynomial: the power of the decay.", "training", ui="advanced",
                        gt=0, le=10, extra={"show_if": {"lr_scheduler": ["polynomial"]}})
    batch_size: int = F(1, "Images per batch on each GPU (the micro-batch); every batch is "
                        "drawn from one size bucket. DeepSpeed's train_batch_size is derived: "
                        "batch_size x gradient_accumulation_steps x processes.", "training",
                        ge=1, le=1024)
    aspect_buckets: bool = F(False, "Resize each image to the nearest of a fixed set of "
                             "aspect-ratio buckets at the max_pixels budget (instead of its "
                             "own size rounded to the multiple), so batches fill up.",
                             "data")
    bucket_remainder: Literal["pad", "drop"] = F(
        "pad", "A bucket whose images do not fill its last batch: pad (repeat images of the "
        "same bucket) or drop them for that epoch.", "data", ui="advanced")
    timestep_sampling: Literal["reference", "uniform", "logit_normal", "shifted"] = F(
        "reference", "How a step's noise level is drawn: reference (the family's own "
        "schedule, as the reference trainer), uniform over the training sigmas, "
        "logit_normal (SD3's, logit_mean / logit_std), shifted (uniform pushed towards "
        "noise by timestep_shift).", "training", ui="advanced")
    logit_mean: float = F(0.0, "logit_normal: mean.", "training", ui="advanced", ge=-10,
                          le=10, extra={"show_if": {"timestep_sampling": ["logit_normal"]}})
    logit_std: float = F(1.0, "logit_normal: standard deviation.", "training", ui="advanced",
                         gt=0, le=10,
                         extra={"show_if": {"timestep_sampling": ["logit_normal"]}})
    timestep_shift: float = F(3.0, "shifted: sigma = s·u / (1 + (s - 1)·u).", "training",
                              ui="advanced", gt=0, le=100,
                              extra={"show_if": {"timestep_sampling": ["shifted"]}})
    caption_dropout: float = F(0.0, "Probability that a step trains on the empty caption "
                               "instead of the image's (the model keeps an unconditional "
                               "prediction).", "training", ui="advanced", ge=0, le=1)
    validation_samples: int = F(0, "Hold the last N samples of the data set out of training "
                                "and log their loss at fixed noise and timesteps beside the "
                                "training loss (0: none).", "training", ge=0, le=10000)
    validation_every_n_steps: Optional[int] = F(
        None, "Validation loss every N optimizer steps (empty: at each checkpoint), plus "
        "before the first step and after the last.", "training", ui="advanced", ge=1,
        le=10**9)
    # === end of the training options block ===

    # === captioning (backend/data/captions.py, the caption stage) ===
    caption_template: str = F(
        "Describe this image in one detailed sentence, as a caption for training an image "
        "model.", "What the captioning model is asked for each image (the instruction "
        "beside the image).", "captions", ui="basic", min_length=1, max_length=2000)
    caption_max_length: int = F(
        120, "Longest caption, in tokens of the captioning model (generation stops there).",
        "captions", ui="basic", ge=1, le=1024)
    caption_overwrite: bool = F(
        False, "Replace captions that already exist (off: images with a caption keep it "
        "and are skipped).", "captions", ui="basic")
    caption_batch_size: int = F(
        4, "Images captioned together in one generation batch (more: faster on a large "
        "GPU, more memory).", "captions", ui="advanced", ge=1, le=64)
    caption_target: Literal["txt", "metadata"] = F(
        "txt", "Where captions go: txt (one same-named .txt per image) or metadata (the "
        "prompt column of dataset_metadata_path).", "captions", ui="basic")
    captioner_path: Optional[str] = F(
        None, "A local Qwen2.5-VL or Qwen3-VL model folder to caption with (empty: the "
        "family's own text encoder from the model sources, with its image processor).",
        "captions", ui="advanced")
    caption_offload: Literal["none", "sequential"] = F(
        "none", "GPU memory of captioning. none: the whole captioning model on the GPU; "
        "sequential: its weights stay in host RAM and reach the GPU one module at a time "
        "(least memory, slower). The caption estimate gives each mode's figure.", "captions",
        ui="advanced")
    # === end of the captioning block ===

    # -----------------------------------------------------------------------------------
    @property
    def uses_deepspeed(self) -> bool:
        return self.zero_stage > 0

    @property
    def processes_per_machine(self) -> int:
        return max(1, self.num_processes // self.num_machines)

    def target_modules(self) -> list[str]:
        return [m.strip() for m in self.lora_target_modules.split(",") if m.strip()]

    def to_dict(self, only_changed: bool = False) -> dict[str, Any]:
        """The options; ``only_changed``: those that differ from the defaults of this
        config's family (its ``model_family`` stays, so the file says which)."""
        data = self.model_dump(mode="json")
        if only_changed:
            defaults = family_defaults(self.model_family)
            data = {k: v for k, v in data.items()
                    if defaults.get(k) != v or k == "model_family"}
        return data

    def to_yaml(self, only_changed: bool = False) -> str:
        data = {"schema_version": SCHEMA_VERSION, **self.to_dict(only_changed)}
        return yaml.safe_dump(data, sort_keys=False, allow_unicode=True)

    def save(self, path: str | os.PathLike, only_changed: bool = False) -> Path:
        return _write_yaml(path, self.to_yaml(only_changed))


FIELDS: dict[str, Any] = RunConfig.model_fields

# ------------------------------------------------------------------------------------------
# Field labels: the words a newcomer reads for each option, shown beside its name
# ("LoRA rank · lora_rank"). A field may carry its own (``F(..., label=...)``), which wins.
# ------------------------------------------------------------------------------------------
FIELD_LABELS: dict[str, str] = {
    "run_name": "Run name",
    "task": "Task",
    "output_path": "Output folder",
    "resume_from": "Resume from",
    "progress_file": "Progress file",
    "read_roots": "Readable folders",
    "write_roots": "Writable folders",
    "model_family": "Model family",
    "model_id_with_origin_paths": "Model sources",
    "model_paths": "Local weight files",
    "tokenizer_path": "Tokenizer",
    "download_source": "Download from",
    "hub_endpoint": "Mirror endpoint",
    "models_dir": "Models folder",
    "offline": "Offline",
    "dataset_base_path": "Dataset folder",
    "dataset_metadata_path": "Metadata file",
    "data_file_keys": "File columns",
    "trigger_word": "Trigger word",
    "max_pixels": "Max pixels per image",
    "height": "Image height",
    "width": "Image width",
    "dataset_repeat": "Dataset repeats",
    "dataset_num_workers": "Data loader workers",
    "lora_base_model": "LoRA on",
    "lora_target_modules": "Target modules",
    "lora_rank": "LoRA rank",
    "lora_checkpoint": "Start from LoRA",
    "preset_lora_path": "Merged LoRA",
    "remove_prefix_in_ckpt": "Key prefix to strip",
    "learning_rate": "Learning rate",
    "lr_warmup_steps": "Warm-up steps",
    "weight_decay": "Weight decay",
    "num_epochs": "Epochs",
    "max_train_steps": "Training steps",
    "max_steps": "Step cap",
    "gradient_accumulation_steps": "Gradient accumulation",
    "save_steps": "Save every N steps",
    "keep_last_n_checkpoints": "Checkpoints to keep",
    "seed": "Seed",
    "use_gradient_checkpointing": "Gradient checkpointing",
    "use_gradient_checkpointing_offload": "Checkpoints on CPU",
    "find_unused_parameters": "Find unused parameters",
    "initialize_model_on_cpu": "Build model on CPU",
    "mixed_precision": "Mixed precision",
    "num_processes": "Processes (GPUs)",
    "gpu_ids": "GPUs to use",
    "num_machines": "Machines",
    "machine_rank": "Machine rank",
    "main_process_ip": "Main machine address",
    "main_process_port": "Main machine port",
    "zero_stage": "ZeRO stage",
    "offload_optimizer_device": "Optimizer offload",
    "offload_param_device": "Parameter offload",
    "offload_nvme_path": "NVMe folder",
    "pin_memory": "Pinned memory",
    "zero3_init_flag": "Partitioned model build",
    "ds_activation_checkpointing": "DeepSpeed activation checkpointing",
    "partition_activations": "Partition activations",
    "cpu_checkpointing": "Activation checkpoints on CPU",
    "contiguous_memory_optimization": "Contiguous checkpoint memory",
    "overlap_comm": "Overlap communication",
    "contiguous_gradients": "Contiguous gradients",
    "sub_group_size": "Sub-group size",
    "reduce_bucket_size": "Reduce bucket size",
    "stage3_prefetch_bucket_size": "Prefetch bucket size",
    "stage3_param_persistence_threshold": "Persistence threshold",
    "stage3_max_live_parameters": "Max live parameters",
    "stage3_max_reuse_distance": "Max reuse distance",
    "gradient_clipping": "Gradient clipping",
    "split_training": "Split training",
    "stages": "Stages",
    "data_process_offload": "Stage 1 memory saving",
    "sample_prompts": "Sample prompts",
    "sample_negative_prompt": "Negative prompt",
    "sample_seed": "Sample seed",
    "sample_steps": "Sample steps",
    "sample_cfg": "Guidance scale",
    "sample_height": "Sample height",
    "sample_width": "Sample width",
    "sample_lora_scales": "LoRA scales",
    "sample_every_n_steps": "Samples every N steps",
    "sample_cpu_offload": "Sampling memory saving",
    "sample_vae_tiling": "Tiled VAE decoding",
    "num_frames": "Frames per clip",
    "max_timestep_boundary": "Max timestep boundary",
    "min_timestep_boundary": "Min timestep boundary",
    "frame_stride": "Frame stride",
    "video_fps": "Clip frame rate",
    "sample_num_frames": "Sample clip frames",
    "sample_fps": "Sample clip frame rate",
    "extra_inputs": "Extra model inputs",
    "zero_cond_t": "Zero timestep for input images",
    "sample_images": "Sample input images",
    "enable_model_cpu_offload": "Layer-wise weight offload",
    "enable_optimizer_cpu_offload": "Optimizer state in host RAM",
    "quant_options": "Quantization",
    "fp8_models": "FP8 models",
    "offload_models": "Models kept in host RAM",
    "lora_alpha": "LoRA alpha",
    "lora_dropout": "LoRA dropout",
    "lora_type": "Adapter type",
    "lokr_factor": "LoKr factor",
    "optimizer": "Optimizer",
    "customized_optimizer": "Optimizer class (reference name)",
    "adam_beta1": "AdamW beta1",
    "adam_beta2": "AdamW beta2",
    "adam_epsilon": "AdamW epsilon",
    "adafactor_decay_rate": "Adafactor decay rate",
    "adafactor_clip_threshold": "Adafactor clip threshold",
    "prodigy_d_coef": "Prodigy step-size multiplier",
    "prodigy_use_bias_correction": "Prodigy bias correction",
    "prodigy_safeguard_warmup": "Prodigy warm-up safeguard",
    "lr_scheduler": "Learning-rate schedule",
    "lr_num_cycles": "Schedule restarts",
    "lr_power": "Schedule power",
    "batch_size": "Batch size",
    "aspect_buckets": "Aspect-ratio buckets",
    "bucket_remainder": "Incomplete bucket batches",
    "timestep_sampling": "Timestep sampling",
    "logit_mean": "Logit-normal mean",
    "logit_std": "Logit-normal std",
    "timestep_shift": "Timestep shift",
    "caption_dropout": "Caption dropout",
    "validation_samples": "Validation samples",
    "validation_every_n_steps": "Validate every N steps",
    "caption_template": "Caption instruction",
    "caption_max_length": "Caption length (tokens)",
    "caption_overwrite": "Replace existing captions",
    "caption_batch_size": "Caption batch size",
    "caption_target": "Write captions to",
    "captioner_path": "Captioning model folder",
    "caption_offload": "Captioning memory saving",
}


def family_defaults(family: str, variant: str | None = None) -> dict[str, Any]:
    """Every option's default for ``family`` (and one of its variants): the schema's
    defaults with the values the family, then the variant, changes."""
    spec = family_spec(family)
    out = RunConfig.model_construct().model_dump(mode="json")
    out.update(copy.deepcopy(dict(spec.defaults)))
    for var in spec.variants:
        if var.name == variant:
            out.update(copy.deepcopy(dict(var.defaults)))
    out["model_family"] = family
    return out


def resolution_multiple(data: dict[str, Any]) -> tuple[int, str]:
    """(the multiple every image side is resized to, the model's title) for a mapping of
    options: what its family (or its variant, recognised from the sources) declares
    (``FamilySpec.size_multiple``). The one size rule (``backend.data.dataset.target_size``) and
    the checks of fixed sizes below read it."""
    family, variant = family_of(data)
    return family_spec(family).size_multiple(variant)


def apply_family_defaults(data: dict[str, Any]) -> dict[str, Any]:
    """``data`` with its family's defaults under it: options it leaves out take the values
    of its family (and variant) instead of the default family's."""
    family, variant = family_of(data)
    defaults = family_defaults(family, variant)
    base = family_defaults(default_family())
    out = {k: v for k, v in defaults.items() if k in FIELDS and v != base.get(k)}
    if family != default_family():
        out["model_family"] = family
    out.update(data)
    return out


def _write_yaml(path: str | os.PathLike, text: str, root: str | os.PathLike | None = None
                ) -> Path:
    """``text`` into ``path`` atomically, never through a link (``root``: the folder the
    write must stay inside, links on the way refused; it is made when missing)."""
    if root is None:
        return writegate.atomic_write(path, text)
    if not os.path.islink(root):
        Path(root).mkdir(parents=True, exist_ok=True)
    try:
        return writegate.gate_of([root]).write_text(path, text, "preset", parents=True)
    except writegate.WriteRefused as e:
        raise ConfigError([str(e).replace(os.fspath(path), Path(path).name)]) from None


def field_meta(name: str) -> dict[str, Any]:
    """Group, UI level, help, default, choices and bounds of a field, for forms and messages."""
    info = FIELDS[name]
    extra = dict(info.json_schema_extra or {})
    meta: dict[str, Any] = {"name": name, "help": info.description or "",
                            "label": extra.get("label") or FIELD_LABELS.get(name, ""),
                            "default": copy.deepcopy(info.default)
                            if info.default_factory is None else info.default_factory(),
                            "group": extra.get("group"), "ui": extra.get("ui", "basic")}
    for m in info.metadata:
        for attr in ("ge", "gt", "le", "lt", "multiple_of", "min_length", "max_length",
                     "pattern"):
            if getattr(m, attr, None) is not None:
                meta[attr] = getattr(m, attr)
    choices = (list(family_names()) if extra.get("choices_from") == "families"
               else _choices(info.annotation))
    if choices:
        meta["choices"] = choices
    return meta


def _choices(annotation: Any) -> list[Any] | None:
    if get_origin(annotation) is Literal:
        return list(get_args(annotation))
    for arg in get_args(annotation):
        found = _choices(arg)
        if found:
            return found
    return None


def _is_optional(name: str) -> bool:
    return type(None) in get_args(FIELDS[name].annotation)


def _base_type(name: str) -> Any:
    ann = FIELDS[name].annotation
    if get_origin(ann) is Union:
        args = [a for a in get_args(ann) if a is not type(None)]
        if len(args) == 1:
            return args[0]
    return ann


def _allowed(name: str) -> str:
    meta = field_meta(name)
    if "choices" in meta:
        text = " | ".join(str(c) for c in meta["choices"])
        return f"a list of {text}" if get_origin(_base_type(name)) is list else text
    lo = meta.get("ge", meta.get("gt"))
    hi = meta.get("le", meta.get("lt"))
    parts = []
    if lo is not None or hi is not None:
        lo_s = "" if lo is None else (f"> {lo}" if "gt" in meta else f"≥ {lo}")
        hi_s = "" if hi is None else f"≤ {hi}"
        parts.append(" and ".join(p for p in (lo_s, hi_s) if p))
    if "multiple_of" in meta:
        parts.append(f"a multiple of {meta['multiple_of']}")
    if name == "lokr_factor":  # 0 lies inside the bounds but splits nothing
        parts = [LOKR_FACTOR_ALLOWED]
    if name == "gpu_ids":
        parts.append("all or comma-separated GPU numbers like 0,1")
    elif name == "hub_endpoint":
        parts.append("an http(s) URL")
    if "min_length" in meta and get_origin(_base_type(name)) is list:
        parts.append(f"at least {meta['min_length']} item(s)")
    elif "min_length" in meta:
        parts.append("non-empty text")
    if "max_length" in meta:
        parts.append(f"at most {meta['max_length']} characters")
    if parts:
        text = ", ".join(parts)
    else:
        base = _base_type(name)
        text = {bool: "true | false", int: "an integer", float: "a number", str: "text"}.get(
            base, str(base).replace("typing.", ""))
    return text + (" or empty" if _is_optional(name) else "")


def _short(value: Any) -> str:
    """``repr(value)`` in at most 80 characters, never building the whole repr (a value of
    a YAML alias bomb would take minutes and gigabytes)."""
    return bounded.short(value)


# ------------------------------------------------------------------------------------------
# Validation
# ------------------------------------------------------------------------------------------
_FLOATISH = re.compile(r"^[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?$")


def _prepare(name: str, value: Any) -> Any:
    """Spellings every view uses: 'none'/'' for unset optionals, 5e7 for integers."""
    if isinstance(value, str) and _is_optional(name) and value.strip().lower() in NONE_WORDS:
        return None
    if _base_type(name) is int and isinstance(value, str) and _FLOATISH.match(value.strip()):
        number = float(value)
        if number.is_integer():
            return int(number)
    return value


def _field_problems(data: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
    ok: dict[str, Any] = {}
    problems: list[str] = []
    for key, value in data.items():
        if key not in FIELDS:
            problems.append(_unknown_key_problem(key, value))
            continue
        try:
            ok[key] = _validate_one(key, _prepare(key, value))
        except ValidationError as e:
            err = e.errors()[0]
            msg = err["msg"]
            if err.get("type") == "string_pattern_mismatch":
                msg = "not in the expected form"
            where = [str(p) for p in err.get("loc", ())[1:]]
            at = f" at item {where[0]}" if where else ""
            problems.append(f"{key}: {msg[0].lower() + msg[1:]}{at} (got {_short(value)}; "
                            f"allowed {_allowed(key)})")
    return ok, problems


def _unknown_key_problem(key: str, value: Any) -> str:
    if _SECRET_KEY.search(key):
        return (f"{key}: secrets are never stored in run configs (got a value; allowed: set "
                f"HF_TOKEN or MODELSCOPE_API_TOKEN in the environment)")
    return (f"{key}: unknown option (got {_short(value)}; allowed: the fields of the run "
            f"schema{_suggest(key)})")


_SECRET_KEY = re.compile(r"(^|_)(token|secret|password|passwd|api_?key)s?($|_)", re.I)
_one_field_models: dict[str, Any] = {}


def _validate_one(key: str, value: Any) -> Any:
    """Validate one field with its constraints through a cached one-field model."""
    model = _one_field_models.get(key)
    if model is None:
        info = FIELDS[key]
        model = create_model(f"_F_{key}", **{key: (info.annotation, info)})
        _one_field_models[key] = model
    return getattr(model.model_validate({key: value}), key)


def _suggest(key: str) -> str:
    import difflib
    close = difflib.get_close_matches(key, list(FIELDS), n=1, cutoff=0.75)
    return f"; did you mean {close[0]}?" if close else ""


def cross_field_problems(c: dict[str, Any], require_inputs: bool = True) -> list[str]:
    """Rules that involve more than one field. ``c`` holds defaults merged with valid values.

    ``require_inputs``: also demand what only the user can supply (the dataset folder); off
    for presets, which are partial by design.
    """
    p: list[str] = []
    zs = c["zero_stage"]
    opt, par = c["offload_optimizer_device"], c["offload_param_device"]
    # --- DeepSpeed -------------------------------------------------------------------------
    if par != "none" and zs != 3:
        p.append(f"offload_param_device: parameter offload needs ZeRO-3 (got {par!r} with "
                 f"zero_stage {zs}; allowed none unless zero_stage is 3)")
    if opt != "none" and zs < 1:
        p.append(f"offload_optimizer_device: optimizer offload needs DeepSpeed (got {opt!r} "
                 f"with zero_stage 0; allowed none unless zero_stage is 1-3)")
    elif opt == "nvme" and zs != 3:
        p.append(f"offload_optimizer_device: nvme offload needs ZeRO-3 (got 'nvme' with "
                 f"zero_stage {zs}; allowed none | cpu)")
    if "nvme" in (par, opt) and not c["offload_nvme_path"]:
        p.append("offload_nvme_path: nvme offload needs a folder (got None; allowed a "
                 "writable folder on an NVMe drive)")
    ds_ckpt = zs > 0 and c["ds_activation_checkpointing"] and c["use_gradient_checkpointing"]
    for name in ("partition_activations", "cpu_checkpointing",
                 "contiguous_memory_optimization"):
        if c[name] and not ds_ckpt:
            p.append(f"{name}: applies to DeepSpeed activation checkpointing only (got true "
                     f"with zero_stage {zs}, use_gradient_checkpointing "
                     f"{str(c['use_gradient_checkpointing']).lower()}, "
                     f"ds_activation_checkpointing "
                     f"{str(c['ds_activation_checkpointing']).lower()}; allowed false, or "
                     f"zero_stage ≥ 1 with both checkpointing options on)")
    if c["use_gradient_checkpointing_offload"] and ds_ckpt:
        p.append("use_gradient_checkpointing_offload: DeepSpeed activation checkpointing "
                 "replaces torch checkpointing here (got true with zero_stage "
                 f"{zs} and ds_activation_checkpointing true; allowed false -- use "
                 "cpu_checkpointing -- or ds_activation_checkpointing false)")
    # --- processes and machines --------------------------------------------------------------
    n, m = c["num_processes"], c["num_machines"]
    if m > 1 and not c["main_process_ip"]:
        p.append(f"main_process_ip: {m} machines need the main machine's address (got None; "
                 f"allowed a host name or IP reachable from every machine)")
    if m > 1 and c["main_process_port"] == 0:
        p.append(f"main_process_port: {m} machines need a fixed port (got 0; allowed "
                 f"1024-65535)")
    if 0 < c["main_process_port"] < 1024:
        p.append(f"main_process_port: ports below 1024 are reserved (got "
                 f"{c['main_process_port']}; allowed 0 or 1024-65535)")
    if c["machine_rank"] >= m:
        p.append(f"machine_rank: must be below num_machines (got {c['machine_rank']}; "
                 f"allowed 0..{m - 1})")
    if n < m:
        p.append(f"num_processes: at least one process per machine (got {n}; allowed ≥ {m})")
    elif n % m:
        p.append(f"num_processes: must split evenly over {m} machines (got {n}; allowed a "
                 f"multiple of {m})")
    if c["gpu_ids"] != "all":
        ids = c["gpu_ids"].split(",")
        per_machine = max(1, n // m)
        if len(ids) != len(set(ids)):
            p.append(f"gpu_ids: repeated GPU (got {c['gpu_ids']!r}; allowed distinct ids)")
        elif len(ids) < per_machine:
            p.append(f"gpu_ids: fewer GPUs than processes per machine (got {c['gpu_ids']!r} "
                     f"for {per_machine} process(es); allowed all or ≥ {per_machine} ids)")
    # --- data and model ------------------------------------------------------------------------
    if (c["height"] is None) != (c["width"] is None):
        which = "width" if c["width"] is None else "height"
        p.append(f"{which}: set height and width together for a fixed size (got "
                 f"height={c['height']}, width={c['width']}; allowed both or neither)")
    mult, model = resolution_multiple(c)
    for name in ("height", "width", "sample_height", "sample_width"):
        side = c[name]
        if isinstance(side, int) and side % mult:
            lo = side // mult * mult
            p.append(f"{name}: {model} needs sides that are multiples of {mult} (got {side}; "
                     f"allowed e.g. {lo or mult} or {lo + mult})")
    p += source_form_problems(c)
    if c["use_gradient_checkpointing_offload"] and not c["use_gradient_checkpointing"]:
        p.append("use_gradient_checkpointing_offload: needs use_gradient_checkpointing "
                 "(got true with checkpointing off; allowed false, or turn checkpointing on)")
    if not (c["model_id_with_origin_paths"] or c["model_paths"]):
        p.append("model_id_with_origin_paths: no model source (got None; allowed "
                 "model_id:glob list, a local path, or model_paths)")
    if c["model_paths"]:
        try:
            mp = bounded.load_json(c["model_paths"], "model_paths")
            if not isinstance(mp, list) or not mp or not all(
                    isinstance(x, str) or (isinstance(x, list) and x and all(
                        isinstance(y, str) for y in x)) for x in mp):
                raise ValueError
        except ValueError:
            p.append(f"model_paths: must be a JSON list of paths (got "
                     f"{_short(c['model_paths'])}; allowed e.g. [\"a.safetensors\", "
                     f"[\"shard1.safetensors\", \"shard2.safetensors\"]])")
    if not [t for t in str(c["lora_target_modules"]).split(",") if t.strip()]:
        p.append(f"lora_target_modules: at least one module name (got "
                 f"{c['lora_target_modules']!r}; allowed e.g. to_q,to_k,to_v)")
    # --- training ----------------------------------------------------------------------------
    if c["max_train_steps"] and c["max_steps"] and c["max_steps"] < c["max_train_steps"]:
        p.append(f"max_steps: a cap below the step target cuts it short (got "
                 f"{c['max_steps']} with max_train_steps {c['max_train_steps']}; allowed "
                 f"empty or ≥ {c['max_train_steps']})")
    if c["keep_last_n_checkpoints"] and not c["save_steps"]:
        p.append("keep_last_n_checkpoints: only step checkpoints are pruned (got "
                 f"{c['keep_last_n_checkpoints']} without save_steps; allowed with save_steps)")
    if c["resume_from"] and c["lora_checkpoint"]:
        p.append("lora_checkpoint: set either resume_from or lora_checkpoint (got both; "
                 "allowed one: a saved state already holds the LoRA)")
    # --- stages ------------------------------------------------------------------------------
    stages = list(c["stages"])
    if stages != sorted(stages, key=STAGES.index) or len(set(stages)) != len(stages):
        p.append(f"stages: must be in order data_process, train, sample without repeats "
                 f"(got {stages}; allowed a subset of {list(STAGES)} in that order)")
    if not c["split_training"] and "data_process" in stages:
        p.append("stages: data_process runs only with split_training (got data_process with "
                 "split_training false; allowed train, sample)")
    if require_inputs and ("data_process" in stages or "train" in stages) and not \
            c["dataset_base_path"]:
        what = ("the cache folder written by data_process" if c["split_training"] and
                "data_process" not in stages else "an existing dataset folder")
        p.append(f"dataset_base_path: a dataset folder is required (got ''; allowed {what})")
    if "sample" in stages and not [s for s in c["sample_prompts"] if str(s).strip()]:
        p.append("sample_prompts: the sample stage needs at least one prompt (got "
                 f"{c['sample_prompts']!r}; allowed one or more non-empty prompts)")
    lo, hi = SAMPLE_SCALE_RANGE
    bad = [s for s in c["sample_lora_scales"] if not lo <= s <= hi]
    if bad:
        p.append(f"sample_lora_scales: scales must lie between {lo:g} and {hi:g} (got "
                 f"{bad}; allowed e.g. 0, 0.5, 1)")
    p += video_field_problems(c)
    if c["sample_every_n_steps"] and "train" not in stages:
        p.append("sample_every_n_steps: renders during training (got "
                 f"{c['sample_every_n_steps']} without the train stage; allowed empty)")
    p += combination_problems(c)  # low VRAM (backend/config/lowvram.py)
    p += option_problems(c)
    return p


def source_form_problems(c: dict[str, Any]) -> list[str]:
    """Model sources given as ``model_id:glob`` (``model_id_with_origin_paths`` entries,
    ``tokenizer_path``, ``captioner_path``) with nothing before or after the last colon,
    which no stage can resolve; an existing local path is taken as a path."""
    p: list[str] = []
    examples = {"model_id_with_origin_paths": "org/model:transformer/*.safetensors",
                "tokenizer_path": "org/model:tokenizer/",
                "captioner_path": "org/model:text_encoder/"}
    for name, example in examples.items():
        value = c.get(name)
        if not isinstance(value, str):
            continue
        entries = value.split(",") if name == "model_id_with_origin_paths" else [value]
        for entry in (e.strip() for e in entries):
            if ":" not in entry or Path(entry).expanduser().exists():
                continue
            model_id, _, glob = entry.rpartition(":")
            if model_id.strip() and glob.strip():
                continue
            side = ("the model id before" if not model_id.strip() else
                    "the folder or files after")
            p.append(f"{name}: {side} the colon is empty (got {_short(entry)}; allowed a "
                     f"local folder, or model_id:folder/ or model_id:glob, e.g. {example})")
    return p


def effective_optimizer(c: dict[str, Any]) -> str:
    """The ``optimizer`` choice a config trains with: ``customized_optimizer`` (the
    reference's dotted path) mapped onto the fixed list when given, else ``optimizer``."""
    given = c.get("customized_optimizer")
    return CUSTOMIZED_OPTIMIZER_MAP[given] if given else c.get("optimizer", "adamw")


def option_problems(c: dict[str, Any]) -> list[str]:
    """Rules of the training options block (batches, optimizers, LoRA variants, validation)."""
    p: list[str] = []
    opt = effective_optimizer(c)
    if c.get("customized_optimizer") and c["optimizer"] not in ("adamw", opt):
        p.append(f"customized_optimizer: names another optimizer than optimizer (got "
                 f"{c['customized_optimizer']!r} = {opt} with optimizer {c['optimizer']}; "
                 f"allowed one of the two, or both naming the same)")
    offload = c["offload_optimizer_device"]
    if opt != "adamw" and offload != "none" and c["zero_stage"] >= 1:
        p.append(f"optimizer: with optimizer offload only adamw runs (DeepSpeed's CPU Adam) "
                 f"(got {opt} with offload_optimizer_device {offload}; allowed adamw, or "
                 f"offload_optimizer_device none)")
    if opt != "adamw" and c["enable_optimizer_cpu_offload"] and c["optimizer"] != "adamw8bit":
        # (optimizer adamw8bit: refused by the low-VRAM rules, combination_problems)
        p.append(f"optimizer: enable_optimizer_cpu_offload steps adamw only (torchao's "
                 f"CPU-offload AdamW) (got {opt} with enable_optimizer_cpu_offload true; "
                 f"allowed adamw, or enable_optimizer_cpu_offload false)")
    if c["lokr_factor"] == 0:
        p.append(f"lokr_factor: 0 splits no dimension (got 0; allowed {LOKR_FACTOR_ALLOWED})")
    if c["lora_type"] == "lokr" and c["lora_dropout"]:
        p.append(f"lora_dropout: applies to lora and dora (got {c['lora_dropout']} with "
                 f"lora_type lokr; allowed 0)")
    if c["lora_type"] == "dora" and c["zero_stage"] == 3:
        p.append("lora_type: dora reads each layer's whole base weight, which ZeRO-3 "
                 "partitions (got dora with zero_stage 3; allowed lora | lokr, or zero_stage "
                 "0-2)")
    if c["validation_every_n_steps"] and not c["validation_samples"]:
        p.append(f"validation_every_n_steps: needs held-out samples (got "
                 f"{c['validation_every_n_steps']} with validation_samples 0; allowed empty, "
                 f"or validation_samples ≥ 1)")
    if c["aspect_buckets"] and c["height"] is not None and c["width"] is not None:
        p.append(f"aspect_buckets: a fixed height and width make one size for every image "
                 f"(got aspect_buckets true with height={c['height']}, width={c['width']}; "
                 f"allowed false, or empty height and width)")
    return p


def video_field_problems(c: dict[str, Any]) -> list[str]:
    """Video options: frame counts the VAE's temporal grouping accepts (4k+1)."""
    p: list[str] = []
    for name in ("num_frames", "sample_num_frames"):
        n = c.get(name)
        if isinstance(n, int) and (n - 1) % 4:
            lo = (n - 1) // 4 * 4 + 1
            p.append(f"{name}: must be 4k+1 (got {n}; allowed e.g. {lo} or {lo + 4})")
    lo, hi = c.get("min_timestep_boundary"), c.get("max_timestep_boundary")
    if isinstance(lo, (int, float)) and isinstance(hi, (int, float)) and \
            int(lo * 1000) >= int(hi * 1000):
        p.append(f"min_timestep_boundary: must be below max_timestep_boundary (got {lo:g} "
                 f"with max_timestep_boundary {hi:g}; allowed e.g. 0 to 0.358 for a "
                 f"high-noise expert, 0.358 to 1 for a low-noise one)")
    return p


def validate(data: dict[str, Any], source: str | None = None, *,
             require_inputs: bool = True, sources: dict[str, str] | None = None) -> RunConfig:
    """Validate a mapping of options (merged file + CLI) and report every problem at once.

    ``require_inputs=False`` accepts a config that still lacks the user's own inputs (the
    dataset folder), as a preset does; everything else is checked all the same.
    ``source`` names where the values came from; ``sources`` where single fields came from
    when that differs (see ``ConfigError``; ``validate_layers`` builds it).
    """
    data = dict(data)
    data.pop("schema_version", None)
    data = apply_family_defaults(data)
    ok, problems = _field_problems(data)
    merged = RunConfig.model_construct().model_dump()
    merged.update(ok)
    # Rules about a field that is already wrong on its own would only repeat the problem.
    failed = [k for k in data if k in FIELDS and k not in ok]
    problems += [p for p in cross_field_problems(merged, require_inputs)
                 if not any(re.search(rf"\b{k}\b", p) for k in failed)]
    if problems:
        raise ConfigError(problems, source, sources)
    return RunConfig.model_validate(ok)


def validate_layers(layers: list[tuple[str, dict[str, Any]]], *, require_inputs: bool = True
                    ) -> RunConfig:
    """Validate ``(source, values)`` layers merged in order (later layers win), each
    problem attributed to the layer its field's value came from; a problem about a field
    no layer set (a rule about a default) goes to the last layer. E.g. a preset file and
    the values of an API call on top: ``[(str(preset_path), preset), ("start_run", values)]``.
    """
    data: dict[str, Any] = {}
    sources: dict[str, str] = {}
    for where, values in layers:
        for key, value in values.items():
            if key == "schema_version":
                continue
            data[key] = value
            sources[key] = where
    last = layers[-1][0] if layers else None
    return validate(data, last, require_inputs=require_inputs, sources=sources)


# ------------------------------------------------------------------------------------------
# Files
# ------------------------------------------------------------------------------------------
def migrate(data: dict[str, Any], source: str | None = None) -> dict[str, Any]:
    """Bring an older schema version's mapping up to date (the one place for migrations).

    A file without ``schema_version`` is read as the current version. When the schema
    changes incompatibly, bump ``SCHEMA_VERSION`` and add a step here that rewrites
    version N-1 mappings (renamed keys, changed units) into version N.
    """
    data = dict(data)
    version = data.pop("schema_version", SCHEMA_VERSION)
    if isinstance(version, bool) or not isinstance(version, int) or not (
            1 <= version <= SCHEMA_VERSION):
        raise ConfigError([f"schema_version: unsupported (got {_short(version)}; allowed 1.."
                           f"{SCHEMA_VERSION})"], source)
    # (no older versions exist yet: version 1 is the first schema)
    return data


def read_yaml(path: str | os.PathLike, what: str = "config") -> dict[str, Any]:
    """A config or preset file (``what``) as a mapping of the current schema version.

    Every way a file can be unreadable is a ``ConfigError`` naming it (never a traceback);
    an empty preset is refused (it would load as the defaults without a word)."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError([f"{what}: file not found (got {str(path)!r}; allowed an existing "
                           f"YAML file)"])
    try:
        text = bounded.read_text(path, what)
    except bounded.ParseError as e:
        raise ConfigError([str(e)], str(path)) from None
    except UnicodeDecodeError as e:
        raise ConfigError([f"{what}: not UTF-8 text (byte {e.start}; allowed a YAML file)"],
                          str(path)) from None
    except OSError as e:
        raise ConfigError([f"{what}: cannot read ({e.strerror or e}; allowed a readable "
                           f"YAML file)"], str(path)) from None
    try:
        # Sizes, nesting and what YAML aliases expand to are bounded (backend/core/bounded.py).
        data = bounded.load_yaml(text, what)
    except bounded.ParseError as e:
        raise ConfigError([str(e)], str(path)) from None
    if data is None:
        if what == "preset":
            raise ConfigError(["preset: empty file (got no options; allowed schema_version "
                               "and the options the preset changes)"], str(path))
        data = {}
    if not isinstance(data, dict):
        raise ConfigError([f"{what}: top level must be a mapping (got "
                           f"{type(data).__name__})"], str(path))
    bad = [k for k in data if not isinstance(k, str)]
    if bad:
        raise ConfigError([f"{_short(k)}: keys must be option names (got {_short(k)}; "
                           f"allowed the fields of the run schema)" for k in bad], str(path))
    return migrate(data, str(path))


def load_config(path: str | os.PathLike, overrides: dict[str, Any] | None = None) -> RunConfig:
    """A run config from YAML, with ``overrides`` (e.g. command-line values) on top."""
    data = read_yaml(path)
    data.update(overrides or {})
    return validate(data, str(path))


# ------------------------------------------------------------------------------------------
# Command line (one parser for every stage; built from the schema)
# ------------------------------------------------------------------------------------------
COMMAND_LINE = "the command line"


def build_parser(prog: str = "backend.stages.train", extra: argparse.ArgumentParser | None = None
                 ) -> argparse.ArgumentParser:
    """A parser with ``--config`` and one ``--<field>`` per schema field.

    Values stay text here; ``validate`` converts and checks them, so a bad value is
    reported like one in a file (``field: problem (got X; allowed Y)``). Flags left out
    are absent from the namespace (the file or the default applies). A choice that was
    once a boolean (``sample_cpu_offload``) still takes the bare flag and ``--no-`` form.
    """
    parser = argparse.ArgumentParser(prog=prog, argument_default=argparse.SUPPRESS,
                                     allow_abbrev=False, parents=[extra] if extra else [],
                                     description="Options come from --config (YAML), then "
                                     "the flags below (flags win).")
    parser.add_argument("--config", help="Run config YAML written by the UI or by hand.")
    for name in FIELDS:
        meta = field_meta(name)
        help_text = meta["help"].replace("%", "%%")
        base = _base_type(name)
        schema_extra = FIELDS[name].json_schema_extra or {}
        if base is bool:
            parser.add_argument(f"--{name}", action=argparse.BooleanOptionalAction,
                                help=help_text)
        elif "bare_flag" in schema_extra:
            # Once a boolean: a bare --name and --no-name keep the meaning they had.
            parser.add_argument(f"--{name}", nargs="?", const=schema_extra["bare_flag"],
                                metavar="VALUE", help=help_text)
            parser.add_argument(f"--no-{name}", dest=name, action="store_const",
                                const=schema_extra["no_flag"], help=argparse.SUPPRESS)
        elif get_origin(base) is list:
            parser.add_argument(f"--{name}", nargs="+", metavar="VALUE", help=help_text)
        else:
            parser.add_argument(f"--{name}", metavar="VALUE", help=help_text)
    return parser


def parse_stage_args(argv: list[str] | None = None, prog: str = "backend.stages.train",
                     extra: argparse.ArgumentParser | None = None
                     ) -> tuple[RunConfig, argparse.Namespace]:
    """Parse a stage's command line: --config file first, then flags on top.

    Returns (config, namespace); the namespace also carries stage-only options declared by
    ``extra`` (e.g. the sample stage's --checkpoints). Unknown flags and keys are errors
    that name them.
    """
    parser = build_parser(prog, extra)
    ns, unknown = parser.parse_known_args(argv)
    if unknown:
        flags = [u for u in unknown if u.startswith("-")] or unknown
        raise ConfigError([f"{u.lstrip('-').split('=')[0]}: unknown option (got {u!r}; "
                           f"allowed: see --help{_suggest(u.lstrip('-').split('=')[0])})"
                           for u in flags], COMMAND_LINE)
    given = vars(ns)
    cli = {k: v for k, v in given.items() if k in FIELDS}
    layers: list[tuple[str, dict[str, Any]]] = []
    if given.get("config"):
        layers.append((given["config"], read_yaml(given["config"])))
    layers.append((COMMAND_LINE, cli))
    # Where each option's value came from (file or flag; absent: the schema default), for
    # messages and for the stage's checks against how accelerate launched it.
    ns.option_sources = {k: where for where, values in layers for k in values if k in FIELDS}
    # The sample stage renders from the model (and LoRA files) alone: no dataset needed.
    return validate_layers(layers, require_inputs=not prog.endswith(".sample")), ns


def resolve_paths(cfg: RunConfig, base: str | os.PathLike | None = None) -> RunConfig:
    """Make every local path option absolute against ``base`` (default: working directory).

    Also freezes ``models_dir``: at its default, ``ZEROLORA_MODELS_DIR`` (when set) replaces
    it, as the hub does. ``model_id:glob`` entries stay as they are; entries of
    ``model_id_with_origin_paths``/``tokenizer_path`` that exist as local paths under
    ``base`` and the files of ``model_paths`` become absolute.
    """
    base = Path(base or os.getcwd())

    def absolute(value: str) -> str:
        p = Path(value).expanduser()
        return str(p if p.is_absolute() else (base / p).resolve())

    updates: dict[str, Any] = {}
    if cfg.models_dir == FIELDS["models_dir"].default and os.environ.get(MODELS_DIR_ENV):
        updates["models_dir"] = absolute(os.environ[MODELS_DIR_ENV])
    for name in PATH_FIELDS:
        value = updates.get(name, getattr(cfg, name))
        if value:
            updates[name] = absolute(value)
    if cfg.tokenizer_path:
        tp = cfg.tokenizer_path
        if ":" not in tp or (base / tp).exists():
            updates["tokenizer_path"] = absolute(tp)
    if cfg.captioner_path:  # a local folder, or model_id:folder/ (kept as it is)
        cp = cfg.captioner_path
        if ":" not in cp or (base / cp).exists() or Path(cp).is_absolute():
            updates["captioner_path"] = absolute(cp)
    if cfg.model_id_with_origin_paths:
        entries = []
        for entry in cfg.model_id_with_origin_paths.split(","):
            e = entry.strip()
            entries.append(absolute(e) if e and ((base / e).exists() or Path(e).is_absolute())
                           else e)
        updates["model_id_with_origin_paths"] = ",".join(entries)
    if cfg.model_paths:
        items = json.loads(cfg.model_paths)
        items = [[absolute(y) for y in x] if isinstance(x, list) else absolute(x) for x in items]
        updates["model_paths"] = json.dumps(items)
    return cfg.model_copy(update=updates)


# ------------------------------------------------------------------------------------------
# Presets: bundled (<repo>/presets/), shared ({workspace}/presets/, saved by admins or with
# sign-in off) and each signed-in user's own ({workspace}/presets/users/<user>/).
# ------------------------------------------------------------------------------------------
_PRESET_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,79}$")
_USER_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.@-]{0,63}$")
# What only an admin may put in a preset: where models come from and server folders. A
# user's own preset holding one of these is refused at save and at load (shared presets,
# saved by an admin, may hold them).
ADMIN_PRESET_FIELDS = ("model_id_with_origin_paths", "model_paths", "tokenizer_path",
                       "hub_endpoint", "models_dir", "output_path", "resume_from",
                       "progress_file", "offload_nvme_path", "read_roots",
                       "write_roots")


def _preset_folder(workspace: str | os.PathLike | None, user: str | None = None
                   ) -> Path | None:
    """``{workspace}/presets`` (shared), or ``{workspace}/presets/users/<user>`` (one
    user's own)."""
    if not workspace:
        return None
    if user is None:
        return Path(workspace) / "presets"
    if not _USER_NAME.match(str(user)):
        raise ConfigError([f"user: not a user name (got {user!r})"])
    return Path(workspace) / "presets" / "users" / str(user)


def list_presets(workspace: str | os.PathLike | None = None, user: str | None = None
                 ) -> list[tuple[str, Path]]:
    """(name, path) of the bundled presets, the shared presets of ``workspace``, then
    ``user``'s own (shadowing a shared one of the same name). Without ``user`` (sign-in
    off): bundled and shared, as every preset was before presets had owners."""
    out = {p.stem: p for p in sorted(PRESETS_DIR.glob("*.yaml")) if p.is_file()}
    bundled = set(out)
    for folder in (_preset_folder(workspace),
                   _preset_folder(workspace, user) if user is not None else None):
        if folder and folder.is_dir() and not folder.is_symlink():
            out.update((p.stem, p) for p in sorted(folder.glob("*.yaml"))
                       if p.is_file() and not p.is_symlink() and p.stem not in bundled)
    return list(out.items())


def _find_preset(name_or_path: str | os.PathLike, workspace, user: str | None = None,
                 by_path: bool = True) -> Path:
    text = str(name_or_path)
    listed = dict(list_presets(workspace, user))
    if text in listed:  # a listed name loads, whatever it looks like (``x.yaml`` too)
        return listed[text]
    as_path = Path(text).expanduser()
    if as_path.suffix in (".yaml", ".yml") or os.sep in text or "/" in text:
        if by_path and as_path.is_file():
            return as_path
        raise ConfigError([f"preset: file not found (got {text!r}; allowed an existing "
                           f"preset file or a preset name)"] if by_path else
                          [f"preset: a name, not a path (got {text!r}; allowed "
                           f"{' | '.join(n for n, _ in list_presets(workspace, user))})"])
    names = list(listed)
    raise ConfigError([f"preset: no preset with this name (got {text!r}; allowed "
                       f"{' | '.join(names) or 'none yet'})"])


def admin_field_problems(data: dict[str, Any], workspace: str | os.PathLike | None = None
                         ) -> list[str]:
    """Fields reserved to admins that ``data`` (a user's preset values) sets to a value no
    admin chose: not the schema default, nor the value of a bundled or shared preset."""
    chosen = {k: [FIELDS[k].default] for k in ADMIN_PRESET_FIELDS}
    for _, path in list_presets(workspace):
        try:
            values, _ = read_preset(path, workspace)
        except ConfigError:
            continue
        for k in ADMIN_PRESET_FIELDS:
            if k in values:
                chosen[k].append(values[k])
    return [f"{k}: reserved to admins in presets (got {_short(data[k])}; allowed the "
            f"default or a value of a bundled or shared preset)"
            for k in ADMIN_PRESET_FIELDS if k in data and data[k] not in chosen[k]]


def read_preset(name_or_path: str | os.PathLike, workspace: str | os.PathLike | None = None,
                user: str | None = None, admin: bool = True
                ) -> tuple[dict[str, Any], Path]:
    """A preset's own values (migrated; bundled relative paths made absolute) and its file.

    ``user``: whose presets besides the bundled and shared ones; with ``admin=False`` only
    names are taken (no paths), and the user's own presets may not hold
    ``ADMIN_PRESET_FIELDS``."""
    path = _find_preset(name_or_path, workspace, user, by_path=admin)
    data = read_yaml(path, "preset")
    own = _preset_folder(workspace, user) if user is not None and workspace else None
    if not admin and own is not None and path.parent == own:
        problems = admin_field_problems(data, workspace)
        if problems:
            raise ConfigError(problems, path.name)
    if path.resolve().parent == PRESETS_DIR.resolve():
        # Bundled presets: relative paths are relative to the repository root.
        for name in PATH_FIELDS + ("tokenizer_path", "model_id_with_origin_paths"):
            value = data.get(name)
            if not isinstance(value, str) or not value:
                continue
            if name == "model_id_with_origin_paths":
                data[name] = ",".join(
                    str((REPO_ROOT / e.strip()).resolve()) if e.strip() and
                    (REPO_ROOT / e.strip()).exists() else e.strip() for e in value.split(","))
            elif name == "tokenizer_path" and ":" in value and not (REPO_ROOT / value).exists():
                continue
            elif not os.path.isabs(value):
                data[name] = str((REPO_ROOT / value).resolve())
    return data, path


def load_preset(name_or_path: str | os.PathLike, workspace: str | os.PathLike | None = None,
                base: RunConfig | None = None, user: str | None = None,
                admin: bool = True) -> RunConfig:
    """A preset (by name or file) applied on top of ``base`` (default: schema defaults).

    Unknown keys and bad values are an error that names the file and the key; ``user`` and
    ``admin`` as for ``read_preset``.
    """
    data, path = read_preset(name_or_path, workspace, user, admin)
    return validate_layers([("the settings the preset is applied to", base.to_dict() if base
                             is not None else {}), (str(path) if admin else path.name, data)],
                           require_inputs=False)


def save_preset(cfg: RunConfig, name: str, workspace: str | os.PathLike,
                base: RunConfig | None = None, user: str | None = None,
                admin: bool = True, shared: bool = False) -> Path:
    """Write ``cfg`` as a preset with only the values that differ from ``base`` (default:
    the schema defaults), so the file says what the preset changes. Loading it with the
    same ``base`` gives ``cfg`` back.

    Where: ``{workspace}/presets/<name>.yaml`` without ``user`` (sign-in off) or with
    ``shared`` (admins only: every user sees it); else ``user``'s own
    ``{workspace}/presets/users/<user>/<name>.yaml``. A non-admin's preset may not set
    ``ADMIN_PRESET_FIELDS`` (refused, nothing written)."""
    problems = []
    if not _PRESET_NAME.match(name or ""):
        problems.append(f"name: not a preset name (got {name!r}; allowed letters, digits, "
                        f"_ . - up to 80 characters)")
    elif Path(name).suffix.lower() in (".yaml", ".yml"):  # the file would be x.yaml.yaml
        problems.append(f"name: a preset name, not a file name (got {name!r}; allowed "
                        f"{Path(name).stem!r}: the .yaml is added)")
    elif (PRESETS_DIR / f"{name}.yaml").exists():
        problems.append(f"name: a bundled preset has this name (got {name!r}; allowed "
                        f"another name)")
    if not workspace:
        problems.append("workspace: needed to save user presets (got None; allowed a folder)")
    if shared and not admin:
        problems.append("shared: only admins share presets (got true; allowed false)")
    reference = (base or RunConfig()).to_dict()
    values = {k: v for k, v in cfg.to_dict().items() if reference.get(k) != v}
    if not admin:
        problems += admin_field_problems(values, workspace)
    if problems:
        raise ConfigError(problems)
    text = yaml.safe_dump({"schema_version": SCHEMA_VERSION, **values}, sort_keys=False,
                          allow_unicode=True)
    folder = _preset_folder(workspace, None if shared else user)
    # Inside that folder only, links refused (a user's folder swapped for a link to another
    # user's presets cannot redirect the write).
    return _write_yaml(folder / f"{name}.yaml", text, root=folder)


def diff_configs(a: RunConfig, b: RunConfig) -> list[tuple[str, Any, Any]]:
    """(field, value in a, value in b) for every field that differs, in schema order."""
    da, db = a.to_dict(), b.to_dict()
    return [(k, da[k], db[k]) for k in FIELDS if da[k] != db[k]]
