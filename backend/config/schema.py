"""The run schema: the single source of truth for every option of a ZeroLoRA run.

One snake_case name per option serves as YAML key, stage CLI flag, form component key and
attribute. Names follow the reference trainer's flags wherever one exists, so a user's
existing command runs against ours with only the script path changed. Every field carries
its default, bounds or choices, help text, UI group (``GROUPS``) and UI level (``LEVELS``:
basic | advanced | hidden). A family changes some defaults (``family_defaults``); a config
that leaves them out takes its family's (``apply_family_defaults``). Hub tokens are never
fields: they come from the environment (``HF_TOKEN``, ``MODELSCOPE_API_TOKEN``) and never
reach a file.

The rest of ``backend/config/`` are views of this module, one concept each: ``labels.py``
(the words a newcomer reads for each option), ``meta.py`` (``field_meta``: an option's
metadata for forms and messages), ``rules.py`` (the rules that tie options together),
``validation.py`` (``validate``: every problem at once), ``files.py`` (YAML files and schema
versions), ``cli.py`` (the stage command line), ``paths.py`` (local paths made absolute),
``presets.py`` (bundled, shared and users' presets) and ``lowvram.py`` (the low-VRAM options).

This module imports only the standard library, pydantic and yaml, so a bad config fails
within a second, before torch or any distributed set-up is touched.
"""
from __future__ import annotations

import copy
import os
from pathlib import Path
from typing import Annotated, Any, Literal, Optional

import yaml
from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field

from backend.core import rundir, writegate
from backend.core.messages import Msg
from backend.families import default_family, family_names, family_of, family_spec

SCHEMA_VERSION = 1

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


# The reference's name for the component a LoRA would train (``--trainable_models dit``).
TRAINED_ALIAS = "dit"


def trainable_names(value: str | None) -> list[str]:
    """The component names of a ``trainable_models`` value, in order, without blanks."""
    return [n.strip() for n in str(value or "").split(",") if n.strip()]


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
               "preset_lora_path", "offload_nvme_path", "mask_path", "class_data_path")
MODELS_DIR_ENV = "ZEROLORA_MODELS_DIR"
SAMPLE_SCALE_RANGE = (-4.0, 4.0)

BIG = 10**12
# SLURM names (partition, account, QoS) and node features, as they go into #SBATCH lines.
SLURM_NAME = r"^[A-Za-z0-9_.+,-]+$"
SLURM_CONSTRAINT = r"^[A-Za-z0-9_.&|,*:()\[\]!-]+$"
LOKR_FACTOR_ALLOWED = Msg("validation.allowed.lokr_factor")
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
    # --- tracking (backend/training/tracking.py): keys only from the environment ---------
    enable_tensorboard_log: bool = F(
        True, "Log the training metrics and the samples to TensorBoard (the tensorboard "
        "package), in a folder beside the checkpoints.", "run", ui="advanced")
    enable_wandb_log: bool = F(
        False, "Log the training metrics (loss, held-out loss, learning rate, step time, GPU "
        "memory) and the samples to Weights & Biases (the wandb package). Its key comes "
        "from WANDB_API_KEY in the server's environment, never from a file.", "run",
        ui="advanced")
    wandb_project: str = F("zerolora", "W&B: the project the run goes to.", "run",
                           ui="advanced", max_length=128,
                           extra={"show_if": {"enable_wandb_log": [True]}})
    wandb_entity: Optional[str] = F(
        None, "W&B: the team or user the run belongs to (empty: the key's default).", "run",
        ui="advanced", max_length=128, extra={"show_if": {"enable_wandb_log": [True]}})
    wandb_run_name: Optional[str] = F(
        None, "W&B: the run's name (empty: run_name, else the run folder's name).", "run",
        ui="advanced", max_length=200, extra={"show_if": {"enable_wandb_log": [True]}})
    wandb_mode: Literal["online", "offline"] = F(
        "online", "W&B: online sends the metrics as it trains; offline writes them beside "
        "the checkpoints only, to send later with wandb sync (no network needed).", "run",
        ui="advanced", extra={"show_if": {"enable_wandb_log": [True]}})
    enable_swanlab_log: bool = F(
        False, "Log the training metrics and the samples to SwanLab (the swanlab package). "
        "Its key comes from SWANLAB_API_KEY in the server's environment, never from a "
        "file.", "run", ui="advanced")
    swanlab_project: str = F("zerolora", "SwanLab: the project the run goes to.", "run",
                             ui="advanced", max_length=100,
                             extra={"show_if": {"enable_swanlab_log": [True]}})
    swanlab_workspace: Optional[str] = F(
        None, "SwanLab: the workspace (a team or user) the run belongs to (empty: the key's "
        "own).", "run", ui="advanced", max_length=25,
        extra={"show_if": {"enable_swanlab_log": [True]}})
    swanlab_run_name: Optional[str] = F(
        None, "SwanLab: the experiment's name (empty: run_name, else the run folder's "
        "name).", "run", ui="advanced", max_length=200,
        extra={"show_if": {"enable_swanlab_log": [True]}})
    swanlab_mode: Literal["online", "offline"] = F(
        "online", "SwanLab: online sends the metrics as it trains; offline writes them "
        "beside the checkpoints only, to send later with swanlab sync (no network needed).",
        "run", ui="advanced", extra={"show_if": {"enable_swanlab_log": [True]}})
    enable_csv_log: bool = F(
        False, "Write the metrics to a CSV file beside the checkpoints: step, loss, val_loss, "
        "lr, step_time_s, gpu_memory_gib, gpu_memory_peak_gib (GPU columns on CUDA only), a "
        "row per optimizer step and per validation.",
        "run", ui="advanced")

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
    # --- masked loss (backend/data/masks.py) ------------------------------------------
    masked_loss: bool = F(
        False, "Weight the loss per latent cell by a mask per image (grey levels as weights: "
        "black 0 ... white 1), cached by stage 1 at the latent resolution. An image's mask "
        "is the first of: its file in mask_path, the metadata's mask column, its alpha "
        "channel (alpha_mask).", "data", ui="advanced")
    mask_path: Optional[str] = F(
        None, "Folder of masks named as the images (same file name, or same stem with any "
        "image suffix); a clip's mask is an image (the whole clip) or a video or frames "
        "folder (per frame). Empty: the metadata's mask column, or the alpha channel. "
        "Needs masked_loss.", "data", ui="advanced")
    alpha_mask: bool = F(
        False, "Take each image's mask from its own alpha channel (sd-scripts' alpha_mask); "
        "images only. Needs masked_loss.", "data", ui="advanced")
    mask_missing: Literal["weight_one", "refuse"] = F(
        "weight_one", "An image without a mask: weight_one (trains on the whole image) or "
        "refuse (named before any stage).", "data", ui="advanced")
    # --- video datasets and clips (video families) -------------------------------------
    num_frames: int = F(81, "Video families: frames per training clip (k*m+1, m the family's "
                        "VAE grouping after the first frame, e.g. 4k+1 or 8k+1; "
                        "1 trains on single frames). Images "
                        "are one-frame clips.", "data", ui="advanced", ge=1, le=1025)
    frame_buckets: list[int] = F([], "Video families: frame counts clips train at instead of "
                                 "num_frames (each k*m+1 as num_frames, e.g. 17, 33, 81): each clip takes "
                                 "the largest it fills at frame_stride or video_fps, and a "
                                 "batch holds clips of one count and size. A clip shorter "
                                 "than the smallest is refused, naming its row. Empty: "
                                 "num_frames.", "data", ui="advanced", max_length=16)
    frame_stride: int = F(1, "Video families: take every N-th frame of a clip (1: every "
                          "frame).", "data", ui="advanced", ge=1, le=1000)
    video_fps: Optional[float] = F(None, "Video families: sample a clip's frames at this rate "
                                   "in its own time instead of by frame_stride (empty: use "
                                   "frame_stride).", "data", ui="advanced", gt=0, le=240)
    frame_extraction: Literal["head", "chunk", "slide", "uniform"] = F(
        "head", "Video families: which windows of a clip train, each window a sample of the "
        "clip's frame count (num_frames or its frame bucket): head (one from the start), "
        "chunk (consecutive windows that do not overlap), slide (a window every "
        "frame_window_stride source frames) or uniform (frame_sample windows spread evenly "
        "over the clip). Images are one sample.", "data", ui="advanced")
    frame_window_stride: int = F(1, "Video families: source frames between the starts of "
                                 "two windows with frame_extraction slide.", "data",
                                 ui="advanced", ge=1, le=100000)
    frame_sample: int = F(1, "Video families: windows per clip with frame_extraction "
                          "uniform.", "data", ui="advanced", ge=1, le=1000)
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
    sample_num_frames: int = F(81, "Video families: frames of a sample clip (k*m+1 as num_frames).",
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
    trainable_models: Optional[str] = F(
        None, "Train this component in full instead of a LoRA (the reference's flag; dit: "
        "the transformer). Each checkpoint is then the whole component in diffusers layout "
        "(sharded safetensors with an index). Empty: train a LoRA.", "lora",
        pattern=r"^\s*[A-Za-z_][A-Za-z0-9_]*\s*(,\s*[A-Za-z_][A-Za-z0-9_]*\s*)*$")

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
    train_distilled: bool = F(
        False, "I know the model is step-distilled (a Turbo model): train it directly "
        "anyway (its few-step sampling wears off). Off: a distilled model trains only with "
        "a de-distillation adapter in preset_lora_path; else train its undistilled model "
        "and apply the LoRA to the distilled one.", "training", ui="advanced")

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

    # --- where the stages run (backend/jobs/executor.py; SLURM: backend/jobs/slurm.py) ---
    executor: Literal["local", "slurm"] = F(
        "local", "Where the stages run: local, this server's own queue and GPUs; slurm, one "
        "sbatch job on the SLURM cluster (an srun step per stage; the run folder must be on "
        "storage the nodes share).", "distributed", ui="advanced")
    slurm_partition: Optional[str] = F(
        None, "SLURM: the partition (empty: the server's --slurm-partition, else the "
        "cluster's default).", "distributed", ui="advanced", max_length=200,
        pattern=SLURM_NAME, extra={"show_if": {"executor": ["slurm"]}})
    slurm_account: Optional[str] = F(
        None, "SLURM: the account the job is charged to (empty: your default).",
        "distributed", ui="advanced", max_length=200, pattern=SLURM_NAME,
        extra={"show_if": {"executor": ["slurm"]}})
    slurm_qos: Optional[str] = F(
        None, "SLURM: the quality of service (empty: the default).", "distributed",
        ui="advanced", max_length=200, pattern=SLURM_NAME,
        extra={"show_if": {"executor": ["slurm"]}})
    slurm_time_limit: Optional[str] = F(
        None, "SLURM: the job's time limit: minutes, HH:MM:SS or D-HH:MM:SS (empty: the "
        "partition's default). Training saves its state when the limit is reached.",
        "distributed", ui="advanced", max_length=32,
        extra={"show_if": {"executor": ["slurm"]}})
    slurm_constraint: Optional[str] = F(
        None, "SLURM: node features the nodes must have, e.g. a100&ib (empty: any node).",
        "distributed", ui="advanced", max_length=200, pattern=SLURM_CONSTRAINT,
        extra={"show_if": {"executor": ["slurm"]}})
    slurm_gpus_per_node: int = F(
        0, "SLURM: GPUs per node (0: the stages run on CPUs; set it to the processes per "
        "machine, num_processes / num_machines).", "distributed", ui="advanced", ge=0, le=64,
        extra={"show_if": {"executor": ["slurm"]}})
    slurm_cpus_per_task: Optional[int] = F(
        None, "SLURM: CPUs per node (one task per node; empty: the partition's default).",
        "distributed", ui="advanced", ge=1, le=4096,
        extra={"show_if": {"executor": ["slurm"]}})
    slurm_mem_per_task: Optional[str] = F(
        None, "SLURM: host memory per node (one task per node), e.g. 256G (empty: the "
        "partition's default).", "distributed", ui="advanced", max_length=32,
        extra={"show_if": {"executor": ["slurm"]}})
    slurm_setup_lines: list[str] = F(
        [], "SLURM: shell lines the job runs before the stages (module loads, the environment "
        "to activate), one per line.", "distributed", ui="advanced",
        extra={"show_if": {"executor": ["slurm"]}})
    slurm_nccl_env: list[str] = F(
        [], "SLURM: NCCL variables for the job, one NAME=value per line (e.g. "
        "NCCL_SOCKET_IFNAME=ib0).", "distributed", ui="advanced",
        extra={"show_if": {"executor": ["slurm"]}})

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
    sample_use_ema: Literal["raw", "ema", "both"] = F(
        "raw", "Which weights samples use (during training, the sample stage, the Results "
        "grid): raw, the trained weights; ema, each checkpoint's EMA twin (step-N-ema) "
        "instead; both, the twin as a column of its own beside each checkpoint. ema and "
        "both need ema_decay.", "samples", ui="advanced")

    # --- edit models: input images beside the target (the reference's flags) ----------
    extra_inputs: str = F(
        "", "Metadata columns passed to the model besides image and prompt: edit_image for "
        "edit models (one path or a list per row: the input images; the image column is "
        "the target); input_image for image-to-video models (the first frame of each clip "
        "conditions it); input_audio for audio-video models (each clip's sound is trained "
        "beside its frames: the row's input_audio file, else the clip's own audio stream); "
        "in_context_videos for IC-LoRA (each row's reference video, its latents clean "
        "tokens beside the clip's; in_context_downsample_factor: the row's reference scale; "
        "frame_rate: the clips' rate, video_fps). Several separated by commas (e.g. "
        "input_image,input_audio). Empty: text-to-image.", "data", ui="advanced",
        pattern=r"^((edit_image|input_image|input_audio|in_context_videos|"
                r"in_context_downsample_factor|frame_rate)(,(input_image|input_audio|"
                r"in_context_videos|in_context_downsample_factor|frame_rate))*)?$")
    audio_missing: Literal["error", "silence"] = F(
        "error", "Audio-video models (extra_inputs input_audio): a clip without sound (no "
        "input_audio file and no audio stream of its own): error (named before any stage) "
        "or silence (trains on silence).", "data", ui="advanced")
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
    sample_videos: list[str] = F(
        [], "IC-LoRA (extra_inputs in_context_videos): the reference clip of each sample "
        "prompt (a video, frames folder or image), one line per prompt in the order of "
        "sample_prompts; read with the run's frame settings (video_fps or frame_stride) at "
        "the sample's size, a clip must fill sample_num_frames (an image is a one-frame "
        "reference). Empty: each prompt takes the "
        "reference video of the dataset row whose caption is the prompt, else of the first "
        "row.", "samples")
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
    # (one block; backend/training/optimizers.py, backend/data/buckets.py,
    # backend/training/timesteps.py and backend/models/lora.py read them; their cross-field
    # rules are option_problems in backend/config/rules.py)
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
    loraplus_lr_ratio: Optional[float] = F(
        None, "LoRA+: lora_B (and DoRA's magnitude) learns at this many times learning_rate, "
        "lora_A at learning_rate (empty: off; the LoRA+ paper suggests 16, with a somewhat "
        "lower learning_rate). adamw (offloaded too), adamw8bit and adafactor; not prodigy, "
        "which learns one step size for all. lora and dora only.",
        "lora", ui="advanced", gt=0, le=1000)
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
    ema_decay: Optional[float] = F(
        None, "An exponential moving average (EMA) of the trained weights (the LoRA's, or "
        "all of a full fine-tune's): after each update ema = decay x ema + (1 - decay) x "
        "weights. Each checkpoint gets an EMA twin beside it (step-N-ema), kept in the "
        "resume state. Empty: no EMA; e.g. 0.999 (closer to 1: a longer memory).",
        "training", ui="advanced", gt=0, lt=1)
    ema_update_every: int = F(1, "EMA: update it every N optimizer steps (needs ema_decay).",
                              "training", ui="advanced", ge=1, le=10**9)
    ema_start_step: int = F(
        0, "EMA: the optimizer step it begins at, as a copy of the weights then (0: the "
        "weights before the first step), updated every ema_update_every steps after it "
        "(needs ema_decay).", "training", ui="advanced", ge=0, le=10**9)
    ema_device: Literal["gpu", "cpu"] = F(
        "gpu", "EMA: where its float32 copy lives (4 bytes a trained parameter): gpu, the "
        "training device; cpu, host RAM (for low VRAM; each update copies the weights "
        "there). Needs ema_decay.", "training", ui="advanced")
    # --- regularization against drift (backend/training/preservation.py) --------------
    prior_preservation: bool = F(
        False, "Prior preservation: a class dataset (regularization images of the class, "
        "with their captions, without the trigger word), cached by stage 1 beside the "
        "training set; each step adds prior_loss_weight x the loss on one class sample.",
        "training", ui="advanced")
    class_data_path: Optional[str] = F(
        None, "Prior preservation: the class dataset folder (images with same-named .txt "
        "captions, or a metadata.csv in it).", "training", ui="advanced",
        extra={"show_if": {"prior_preservation": [True]}})
    prior_loss_weight: float = F(
        1.0, "Prior preservation: the weight of the class sample's loss (0: cached, not "
        "trained on).", "training", ui="advanced", ge=0, le=100,
        extra={"show_if": {"prior_preservation": [True]}})
    class_prompt: str = F(
        "", "Prior preservation: a prompt the base model renders class images from (no "
        "LoRA, with the sample settings), in a stage of its own before stage 1, into the run "
        "folder's classes/ (never into class_data_path), each with the prompt as its caption: "
        "as many as class_data_path lacks of num_class_images, or all of them without it.",
        "training", ui="advanced", max_length=2000,
        extra={"show_if": {"prior_preservation": [True]}})
    num_class_images: int = F(
        100, "Prior preservation: how many class images the class set holds at least; those "
        "class_data_path lacks are rendered from class_prompt (image k with seed sample_seed "
        "+ k, so a rerun renders only what is not there yet). Needs class_prompt.",
        "training", ui="advanced", ge=1, le=10000,
        extra={"show_if": {"prior_preservation": [True]}})
    diff_output_preservation: bool = F(
        False, "Differential output preservation (ai-toolkit's): each step the LoRA's "
        "prediction for the caption with trigger_word replaced by dop_class is pulled toward "
        "the base model's (the LoRA switched off) on the same noisy latents, at dop_weight. "
        "Stage 1 encodes those captions; LoRA only.", "training", ui="advanced")
    dop_class: str = F(
        "", "DOP: the class word that replaces trigger_word in each caption (e.g. 'woman', "
        "'painting').", "training", ui="advanced", max_length=200,
        extra={"show_if": {"diff_output_preservation": [True]}})
    dop_weight: float = F(
        1.0, "DOP: the weight of the preservation loss (mse of the LoRA's prediction against "
        "the base model's).", "training", ui="advanced", ge=0, le=100,
        extra={"show_if": {"diff_output_preservation": [True]}})
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

    @property
    def full_training(self) -> bool:
        """Whether the run trains a component in full (``trainable_models``), not a LoRA."""
        return bool(trainable_names(self.trainable_models))

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
        return writegate.atomic_write(path, self.to_yaml(only_changed))


FIELDS: dict[str, Any] = RunConfig.model_fields


def family_defaults(family: str, variant: str | None = None) -> dict[str, Any]:
    """Every option's default for ``family`` (and one of its variants): the schema's
    defaults with the values the family, then the variant, changes."""
    spec = family_spec(family)
    out = RunConfig.model_construct().model_dump(mode="json")
    out.update(copy.deepcopy(dict(spec.defaults)))
    var = spec.variant(variant)
    if var is not None:
        out.update(copy.deepcopy(dict(var.defaults)))
    out["model_family"] = family
    return out


def resolution_multiple(data: dict[str, Any]) -> tuple[int, str]:
    """(the multiple every image side is resized to, the model's title) for a mapping of
    options: what its family (or its variant, recognised from the sources) declares
    (``FamilySpec.size_multiple``). The one size rule (``backend.data.dataset.target_size``) and
    the checks of fixed sizes (``backend.config.rules.size_problems``) read it."""
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


def effective_optimizer(c: dict[str, Any]) -> str:
    """The ``optimizer`` choice a config trains with: ``customized_optimizer`` (the
    reference's dotted path) mapped onto the fixed list when given, else ``optimizer``."""
    given = c.get("customized_optimizer")
    return CUSTOMIZED_OPTIMIZER_MAP[given] if given else c.get("optimizer", "adamw")
