"""The run schema: the single source of truth for every option of a ZeroLoRA run.

One snake_case name per option serves as YAML key, stage CLI flag, form component key and
attribute. Names follow the reference trainer's flags wherever one exists, so a user's
existing command runs against ours with only the script path changed.

Precedence is explicit: command line > config file > schema default.
Validation reports every problem at once, one per line, as
``field: problem (got X; allowed Y)``. Hub tokens are never fields: they come from the
environment (``HF_TOKEN``, ``MODELSCOPE_API_TOKEN``) and never reach a file.

This module imports only the standard library, pydantic and yaml, so a bad config fails
within a second, before torch or any distributed set-up is touched.
"""
from __future__ import annotations

import argparse
import json
import os
from pathlib import Path
from typing import Any, Literal, Optional

import yaml
from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError

SCHEMA_VERSION = 1

QWEN_IMAGE_TARGETS = (
    "to_q,to_k,to_v,add_q_proj,add_k_proj,add_v_proj,to_out.0,to_add_out,"
    "img_mlp.net.2,img_mod.1,txt_mlp.net.2,txt_mod.1"
)
QWEN_IMAGE_SOURCES = (
    "Qwen/Qwen-Image:transformer/diffusion_pytorch_model*.safetensors,"
    "Qwen/Qwen-Image:text_encoder/model*.safetensors,"
    "Qwen/Qwen-Image:vae/diffusion_pytorch_model.safetensors"
)
TASKS = ("sft", "sft:data_process", "sft:train")
STAGES = ("data_process", "train", "sample")
# Strings that mean "unset" for optional fields on the command line.
NONE_WORDS = ("none", "null", "")


class ConfigError(ValueError):
    """Every problem of a config, one per line: ``field: problem (got X; allowed Y)``."""

    def __init__(self, problems: list[str], source: str | None = None):
        self.problems = list(problems)
        self.source = source
        head = f"Invalid run config{f' in {source}' if source else ''}:"
        super().__init__("\n".join([head] + [f"  {p}" for p in self.problems]))

    def fields(self) -> list[str]:
        return [p.split(":", 1)[0] for p in self.problems]


def F(default: Any, help: str, group: str, *, ui: str = "basic", **kw: Any) -> Any:
    """A schema field: default, help text, UI group and level (basic | advanced | hidden)."""
    extra = {"group": group, "ui": ui}
    extra.update(kw.pop("extra", {}))
    return Field(default, description=help, json_schema_extra=extra, **kw)


PosInt = int
Precision = Literal["no", "fp16", "bf16"]
OffloadDevice = Literal["none", "cpu", "nvme"]


class RunConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=False)

    # --- run ---------------------------------------------------------------------------
    run_name: str = F("", "A name for this run in the history (optional).", "run")
    task: Literal["sft", "sft:data_process", "sft:train"] = F(
        "sft", "sft: encode text and images every step; sft:data_process: stage 1 (cache); "
        "sft:train: stage 2 (train from the cache).", "run", ui="hidden")
    output_path: str = F("./models", "Where checkpoints are written (stage 1: the cache folder).",
                         "run", ui="hidden")
    resume_from: Optional[str] = F(None, "Folder of a saved training state to continue from.",
                                   "run", ui="hidden")
    progress_file: Optional[str] = F(None, "JSON-lines progress events (default: "
                                     "output_path/progress.jsonl).", "run", ui="hidden")

    # --- model -------------------------------------------------------------------------
    model_family: Literal["qwen_image"] = F("qwen_image", "Model family.", "model")
    model_id_with_origin_paths: Optional[str] = F(
        QWEN_IMAGE_SOURCES, "Comma-separated model_id:glob (split at the last colon); "
        "an existing local path is used as a path.", "model")
    model_paths: Optional[str] = F(None, "JSON list of local weight files (an element may be a "
                                   "list of shards); used instead of model_id_with_origin_paths.",
                                   "model", ui="advanced")
    tokenizer_path: Optional[str] = F(None, "Tokenizer folder or model_id:folder/ "
                                      "(default Qwen/Qwen-Image:tokenizer/).", "model",
                                      ui="advanced")
    download_source: Literal["modelscope", "huggingface"] = F(
        "modelscope", "Where missing model files are downloaded from.", "model")
    hub_endpoint: Optional[str] = F(None, "Mirror endpoint URL for the download source.",
                                    "model", ui="advanced")
    models_dir: str = F("./models", "Folder holding downloaded models as {models_dir}/"
                        "{model_id}/{glob} (env ZEROLORA_MODELS_DIR overrides the default).",
                        "model")
    offline: bool = F(False, "Never touch the network; missing files are an error.", "model")

    # --- data --------------------------------------------------------------------------
    dataset_base_path: str = F("", "Dataset folder (in stage 2: the cache folder).", "data")
    dataset_metadata_path: Optional[str] = F(
        None, "metadata.csv/json/jsonl; empty: image + same-named .txt captions in "
        "dataset_base_path (or, for sft:train, a cache folder).", "data")
    data_file_keys: str = F("image", "Metadata columns loaded as files.", "data", ui="advanced")
    trigger_word: str = F("", "Prepended to every caption (e.g. 'zlr style').", "data")
    max_pixels: int = F(1048576, "Area cap for dynamic resolution.", "data", ge=256 * 256,
                        le=4096 * 4096)
    height: Optional[int] = F(None, "Fixed height (set with width).", "data", ge=16, le=4096,
                              multiple_of=16)
    width: Optional[int] = F(None, "Fixed width (set with height).", "data", ge=16, le=4096,
                             multiple_of=16)
    dataset_repeat: int = F(1, "Dataset length multiplier per epoch.", "data", ge=1, le=100000)
    dataset_num_workers: int = F(0, "DataLoader worker processes.", "data", ui="advanced",
                                 ge=0, le=64)

    # --- LoRA --------------------------------------------------------------------------
    lora_base_model: Literal["dit"] = F("dit", "Component that gets the LoRA.", "lora",
                                        ui="advanced")
    lora_target_modules: str = F(QWEN_IMAGE_TARGETS, "Comma-separated module names.", "lora",
                                 ui="advanced")
    lora_rank: int = F(32, "LoRA rank (alpha = rank).", "lora", ge=1, le=1024)
    lora_checkpoint: Optional[str] = F(None, "Initialise the LoRA from this file.", "lora",
                                       ui="advanced")
    remove_prefix_in_ckpt: str = F("pipe.dit.", "Prefix stripped from saved keys.", "lora",
                                   ui="advanced")

    # --- training ----------------------------------------------------------------------
    learning_rate: float = F(1e-4, "AdamW learning rate.", "training", gt=0, le=1.0)
    lr_warmup_steps: int = F(0, "Linear warm-up steps.", "training", ui="advanced", ge=0)
    weight_decay: float = F(0.01, "AdamW weight decay.", "training", ui="advanced", ge=0, le=1)
    num_epochs: int = F(1, "Epochs.", "training", ge=1, le=100000)
    max_steps: Optional[int] = F(None, "Stop after this many optimizer steps.", "training",
                                 ge=1)
    gradient_accumulation_steps: int = F(1, "Micro-steps per optimizer step.", "training",
                                         ui="advanced", ge=1, le=1024)
    save_steps: Optional[int] = F(None, "Save every N steps (empty: each epoch).", "training",
                                  ge=1)
    keep_last_n_checkpoints: Optional[int] = F(None, "Delete older step checkpoints.",
                                               "training", ui="advanced", ge=1)
    seed: int = F(42, "Random seed.", "training", ge=0, le=2**32 - 1)
    use_gradient_checkpointing: bool = F(False, "Per-block activation checkpointing.",
                                         "training")
    use_gradient_checkpointing_offload: bool = F(
        False, "Keep checkpointed activations on CPU.", "training", ui="advanced")
    find_unused_parameters: bool = F(False, "DDP: allow parameters without gradients.",
                                     "training", ui="advanced")
    initialize_model_on_cpu: bool = F(False, "Build the model on CPU (used with ZeRO-3).",
                                      "training", ui="advanced")

    # --- distributed -------------------------------------------------------------------
    mixed_precision: Precision = F("bf16", "Mixed precision.", "distributed")
    num_processes: int = F(1, "Processes (GPUs) in total across machines.", "distributed",
                           ge=1, le=1024)
    gpu_ids: str = F("all", "GPU ids for this run, e.g. 0,1 (or all).", "distributed")
    num_machines: int = F(1, "Machines.", "distributed", ui="advanced", ge=1, le=128)
    machine_rank: int = F(0, "This machine's rank.", "distributed", ui="advanced", ge=0)
    main_process_ip: Optional[str] = F(None, "Main machine address (needed for >1 machine).",
                                       "distributed", ui="advanced")
    main_process_port: int = F(29500, "Main machine port.", "distributed", ui="advanced",
                               ge=1024, le=65535)
    zero_stage: int = F(0, "DeepSpeed ZeRO stage (0: no DeepSpeed).", "distributed", ge=0,
                        le=3)
    offload_optimizer_device: OffloadDevice = F("none", "Where optimizer states live.",
                                                "distributed")
    offload_param_device: OffloadDevice = F("none", "Where parameters live (ZeRO-3).",
                                            "distributed")
    offload_nvme_path: Optional[str] = F(None, "NVMe folder for nvme offload.", "distributed",
                                         ui="advanced")
    pin_memory: bool = F(True, "Pin host memory for offload.", "distributed", ui="advanced")
    zero3_init_flag: bool = F(True, "Build the model partitioned (ZeRO-3).", "distributed",
                              ui="advanced")
    ds_activation_checkpointing: bool = F(
        True, "Write the activation_checkpointing block (DeepSpeed's checkpointing).",
        "distributed", ui="advanced")
    partition_activations: bool = F(False, "Partition checkpointed activations.",
                                    "distributed", ui="advanced")
    cpu_checkpointing: bool = F(False, "Keep DeepSpeed-checkpointed activations on CPU.",
                                "distributed", ui="advanced")
    contiguous_memory_optimization: bool = F(False, "Contiguous checkpoint buffers.",
                                             "distributed", ui="advanced")
    overlap_comm: bool = F(False, "Overlap communication.", "distributed", ui="advanced")
    contiguous_gradients: bool = F(True, "Contiguous gradient buffers.", "distributed",
                                   ui="advanced")
    sub_group_size: int = F(1_000_000_000, "ZeRO sub group size.", "distributed",
                            ui="advanced", ge=1)
    reduce_bucket_size: int = F(50_000_000, "Reduce bucket size.", "distributed",
                                ui="advanced", ge=1)
    stage3_prefetch_bucket_size: int = F(50_000_000, "ZeRO-3 prefetch bucket.", "distributed",
                                         ui="advanced", ge=0)
    stage3_param_persistence_threshold: int = F(100_000, "ZeRO-3 persistence threshold.",
                                                "distributed", ui="advanced", ge=0)
    stage3_max_live_parameters: int = F(100_000_000, "ZeRO-3 live parameters.", "distributed",
                                        ui="advanced", ge=0)
    stage3_max_reuse_distance: int = F(100_000_000, "ZeRO-3 reuse distance.", "distributed",
                                       ui="advanced", ge=0)
    gradient_clipping: Optional[float] = F(None, "Clip gradient norm (empty: off).",
                                           "distributed", ui="advanced", gt=0)

    # --- stages ------------------------------------------------------------------------
    split_training: bool = F(True, "Cache text/VAE outputs first (stage 1), then train "
                             "only the transformer (stage 2).", "stages")
    stages: list[Literal["data_process", "train", "sample"]] = F(
        ["data_process", "train", "sample"], "Stages to run, in order.", "stages",
        ui="advanced", min_length=1)

    # --- samples -----------------------------------------------------------------------
    sample_prompts: list[str] = F(["a photo of a cat"], "Test prompts.", "samples")
    sample_negative_prompt: str = F("", "Negative prompt.", "samples", ui="advanced")
    sample_seed: int = F(0, "Seed for every sample.", "samples", ge=0, le=2**32 - 1)
    sample_steps: int = F(30, "Denoising steps.", "samples", ge=1, le=200)
    sample_cfg: float = F(4.0, "Classifier-free guidance scale.", "samples", ge=1.0, le=30.0)
    sample_height: int = F(1328, "Sample height.", "samples", ge=16, le=4096, multiple_of=16)
    sample_width: int = F(1328, "Sample width.", "samples", ge=16, le=4096, multiple_of=16)
    sample_lora_scales: list[float] = F([0.0, 1.0], "LoRA scales (0 = base model).", "samples",
                                        min_length=1)
    sample_every_n_steps: Optional[int] = F(None, "Render samples every N training steps.",
                                            "samples", ui="advanced", ge=1)
    sample_cpu_offload: bool = F(False, "Low-VRAM inference: model CPU offload.", "samples",
                                 ui="advanced")

    # -----------------------------------------------------------------------------------
    @property
    def uses_deepspeed(self) -> bool:
        return self.zero_stage > 0

    def target_modules(self) -> list[str]:
        return [m.strip() for m in self.lora_target_modules.split(",") if m.strip()]

    def to_dict(self, only_changed: bool = False) -> dict[str, Any]:
        data = self.model_dump(mode="json")
        if only_changed:
            defaults = RunConfig().model_dump(mode="json")
            data = {k: v for k, v in data.items() if defaults.get(k) != v}
        return data

    def to_yaml(self, only_changed: bool = False) -> str:
        data = {"schema_version": SCHEMA_VERSION, **self.to_dict(only_changed)}
        return yaml.safe_dump(data, sort_keys=False, allow_unicode=True)

    def save(self, path: str | os.PathLike, only_changed: bool = False) -> Path:
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(self.to_yaml(only_changed), encoding="utf-8")
        os.replace(tmp, path)
        return path


FIELDS: dict[str, Any] = RunConfig.model_fields


def field_meta(name: str) -> dict[str, Any]:
    """Group, UI level, help, choices and bounds of a field, for forms and messages."""
    info = FIELDS[name]
    extra = dict(info.json_schema_extra or {})
    meta: dict[str, Any] = {"name": name, "help": info.description or "",
                            "default": info.default if info.default_factory is None
                            else info.default_factory(),
                            "group": extra.get("group"), "ui": extra.get("ui", "basic")}
    for m in info.metadata:
        for attr in ("ge", "gt", "le", "lt", "multiple_of", "min_length"):
            if getattr(m, attr, None) is not None:
                meta[attr] = getattr(m, attr)
    choices = _choices(info.annotation)
    if choices:
        meta["choices"] = choices
    return meta


def _choices(annotation: Any) -> list[Any] | None:
    from typing import get_args, get_origin
    origin = get_origin(annotation)
    if origin is Literal:
        return list(get_args(annotation))
    for arg in get_args(annotation):
        found = _choices(arg)
        if found:
            return found
    return None


def _allowed(name: str) -> str:
    meta = field_meta(name)
    if "choices" in meta:
        return " | ".join(str(c) for c in meta["choices"])
    lo = meta.get("ge", meta.get("gt"))
    hi = meta.get("le", meta.get("lt"))
    parts = []
    if lo is not None or hi is not None:
        lo_s = "" if lo is None else (f"> {lo}" if "gt" in meta else f"≥ {lo}")
        hi_s = "" if hi is None else f"≤ {hi}"
        parts.append(" and ".join(p for p in (lo_s, hi_s) if p))
    if "multiple_of" in meta:
        parts.append(f"a multiple of {meta['multiple_of']}")
    if parts:
        return ", ".join(parts)
    ann = FIELDS[name].annotation
    return {bool: "true | false", int: "an integer", float: "a number", str: "text"}.get(
        ann, str(ann).replace("typing.", ""))


def _short(value: Any) -> str:
    s = repr(value)
    return s if len(s) <= 80 else s[:77] + "..."


# ------------------------------------------------------------------------------------------
# Validation
# ------------------------------------------------------------------------------------------
def _field_problems(data: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
    ok: dict[str, Any] = {}
    problems: list[str] = []
    for key, value in data.items():
        if key not in FIELDS:
            problems.append(f"{key}: unknown option (got {_short(value)}; "
                            f"allowed: the fields of the run schema{_suggest(key)})")
            continue
        info = FIELDS[key]
        try:
            ok[key] = TypeAdapter(info.annotation, config=ConfigDict(strict=False)).validate_python(
                value) if not info.metadata else _validate_with_meta(key, value)
        except ValidationError as e:
            msg = e.errors()[0]["msg"]
            problems.append(f"{key}: {msg[0].lower() + msg[1:]} (got {_short(value)}; "
                            f"allowed {_allowed(key)})")
    return ok, problems


def _validate_with_meta(key: str, value: Any) -> Any:
    # Validate one field with its constraints through a one-field model.
    model = _one_field_models.get(key)
    if model is None:
        from pydantic import create_model
        info = FIELDS[key]
        model = create_model(f"_F_{key}", **{key: (info.annotation, info)})
        _one_field_models[key] = model
    return getattr(model.model_validate({key: value}), key)


_one_field_models: dict[str, Any] = {}


def _suggest(key: str) -> str:
    import difflib
    close = difflib.get_close_matches(key, list(FIELDS), n=1, cutoff=0.75)
    return f"; did you mean {close[0]}?" if close else ""


def cross_field_problems(c: dict[str, Any]) -> list[str]:
    """Rules that involve more than one field. ``c`` holds defaults merged with valid values."""
    p: list[str] = []
    zs = c["zero_stage"]
    if c["offload_param_device"] != "none" and zs != 3:
        p.append(f"offload_param_device: parameter offload needs ZeRO-3 (got "
                 f"{c['offload_param_device']!r} with zero_stage {zs}; allowed none unless "
                 f"zero_stage is 3)")
    if c["offload_optimizer_device"] != "none" and zs < 1:
        p.append(f"offload_optimizer_device: optimizer offload needs DeepSpeed (got "
                 f"{c['offload_optimizer_device']!r} with zero_stage 0; allowed none unless "
                 f"zero_stage is 1-3)")
    if "nvme" in (c["offload_param_device"], c["offload_optimizer_device"]) and not c[
            "offload_nvme_path"]:
        p.append("offload_nvme_path: nvme offload needs a folder (got None; allowed an "
                 "existing writable folder)")
    if c["task"] == "sft:data_process" and zs > 0 and not c["split_training"]:
        pass
    if c["num_machines"] > 1 and not c["main_process_ip"]:
        p.append(f"main_process_ip: {c['num_machines']} machines need the main machine's "
                 f"address (got None; allowed a host name or IP)")
    if c["machine_rank"] >= c["num_machines"]:
        p.append(f"machine_rank: must be below num_machines (got {c['machine_rank']}; "
                 f"allowed 0..{c['num_machines'] - 1})")
    if c["num_processes"] < c["num_machines"]:
        p.append(f"num_processes: at least one process per machine (got "
                 f"{c['num_processes']}; allowed ≥ {c['num_machines']})")
    if (c["height"] is None) != (c["width"] is None):
        which = "width" if c["width"] is None else "height"
        p.append(f"{which}: set height and width together for a fixed size (got "
                 f"height={c['height']}, width={c['width']}; allowed both or neither)")
    if c["use_gradient_checkpointing_offload"] and not c["use_gradient_checkpointing"]:
        p.append("use_gradient_checkpointing_offload: needs use_gradient_checkpointing "
                 "(got true with checkpointing off; allowed false, or turn checkpointing on)")
    if c["model_family"] == "qwen_image" and not (c["model_id_with_origin_paths"]
                                                   or c["model_paths"]):
        p.append("model_id_with_origin_paths: no model source (got None; allowed "
                 "model_id:glob list or model_paths)")
    if c["model_paths"]:
        try:
            mp = json.loads(c["model_paths"])
            if not isinstance(mp, list):
                raise ValueError
        except ValueError:
            p.append(f"model_paths: must be a JSON list of paths (got "
                     f"{_short(c['model_paths'])}; allowed e.g. [\"a.safetensors\"])")
    if c["mixed_precision"] == "fp16" and zs == 0 and False:
        pass
    stages = c["stages"]
    if list(stages) != sorted(stages, key=STAGES.index) or len(set(stages)) != len(stages):
        p.append(f"stages: must be in order data_process, train, sample without repeats "
                 f"(got {stages}; allowed a subset of {list(STAGES)} in that order)")
    if not c["split_training"] and "data_process" in stages:
        p.append("stages: data_process runs only with split_training (got data_process with "
                 "split_training false; allowed train, sample)")
    if c["split_training"] and "train" in stages and "data_process" not in stages and not \
            c["dataset_base_path"]:
        p.append("dataset_base_path: stage 2 without stage 1 needs a cache folder (got ''; "
                 "allowed a folder written by data_process)")
    if ("data_process" in stages or "train" in stages) and not c["dataset_base_path"]:
        p.append("dataset_base_path: a dataset folder is required (got ''; allowed an "
                 "existing folder)")
    if not c["target_list"]:
        p.append("lora_target_modules: at least one module name (got ''; allowed e.g. "
                 "to_q,to_k,to_v)")
    if c["keep_last_n_checkpoints"] and not c["save_steps"]:
        p.append("keep_last_n_checkpoints: only step checkpoints are pruned (got "
                 f"{c['keep_last_n_checkpoints']} without save_steps; allowed with save_steps)")
    return p


def validate(data: dict[str, Any], source: str | None = None) -> RunConfig:
    """Validate a mapping of options (merged file + CLI) and report every problem at once."""
    data = dict(data)
    data.pop("schema_version", None)
    ok, problems = _field_problems(data)
    merged = RunConfig.model_construct().model_dump()
    merged.update(ok)
    merged["target_list"] = [m for m in str(merged["lora_target_modules"]).split(",")
                             if m.strip()]
    problems += cross_field_problems(merged)
    if problems:
        raise ConfigError(problems, source)
    return RunConfig.model_validate(ok)


# ------------------------------------------------------------------------------------------
# Files
# ------------------------------------------------------------------------------------------
def migrate(data: dict[str, Any], source: str | None = None) -> dict[str, Any]:
    """Bring an older schema version's mapping up to date (the one place for migrations)."""
    version = data.get("schema_version", SCHEMA_VERSION)
    if not isinstance(version, int) or version > SCHEMA_VERSION or version < 1:
        raise ConfigError([f"schema_version: unsupported (got {version!r}; allowed 1.."
                           f"{SCHEMA_VERSION})"], source)
    return data


def read_yaml(path: str | os.PathLike) -> dict[str, Any]:
    path = Path(path)
    if not path.is_file():
        raise ConfigError([f"config: file not found (got {str(path)!r}; allowed an existing "
                           f"YAML file)"])
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    except yaml.YAMLError as e:
        raise ConfigError([f"config: not valid YAML ({' '.join(str(e).split())})"], str(path))
    if not isinstance(data, dict):
        raise ConfigError([f"config: top level must be a mapping (got {type(data).__name__})"],
                          str(path))
    return migrate(data, str(path))


def load_config(path: str | os.PathLike, overrides: dict[str, Any] | None = None) -> RunConfig:
    data = read_yaml(path)
    data.update(overrides or {})
    return validate(data, str(path))


# ------------------------------------------------------------------------------------------
# Command line (one parser for every stage; built from the schema)
# ------------------------------------------------------------------------------------------
def _none_or(conv):
    def parse(text: str):
        return None if text.strip().lower() in NONE_WORDS else conv(text)
    parse.__name__ = getattr(conv, "__name__", "value")
    return parse


def _num(text: str):
    v = float(text)
    return int(v) if v.is_integer() and "." not in text and "e" not in text.lower() else v


def build_parser(prog: str = "backend.stages.train", extra: argparse.ArgumentParser | None = None
                 ) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=prog, argument_default=argparse.SUPPRESS,
                                     allow_abbrev=False, parents=[extra] if extra else [],
                                     description="Options come from --config (YAML), then "
                                     "the flags below (flags win).")
    parser.add_argument("--config", help="Run config YAML written by the UI or by hand.")
    for name, info in FIELDS.items():
        meta = field_meta(name)
        help_text = meta["help"].replace("%", "%%")
        ann = info.annotation
        if ann is bool:
            parser.add_argument(f"--{name}", action=argparse.BooleanOptionalAction,
                                help=help_text)
        elif name in ("stages", "sample_prompts"):
            parser.add_argument(f"--{name}", nargs="+", help=help_text)
        elif name == "sample_lora_scales":
            parser.add_argument(f"--{name}", nargs="+", type=float, help=help_text)
        else:
            base = str
            if ann in (int, Optional[int]):
                base = int
            elif ann in (float, Optional[float]):
                base = float
            conv = _none_or(base) if "Optional" in str(ann) or "None" in str(ann) else base
            parser.add_argument(f"--{name}", type=conv, help=help_text)
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
        flags = [u for u in unknown if u.startswith("--")]
        raise ConfigError([f"{u.lstrip('-').split('=')[0]}: unknown option (got {u!r}; "
                           f"allowed: see --help{_suggest(u.lstrip('-').split('=')[0])})"
                           for u in (flags or unknown)])
    given = vars(ns)
    cli = {k: v for k, v in given.items() if k in FIELDS}
    data: dict[str, Any] = {}
    source = None
    if given.get("config"):
        source = given["config"]
        data = read_yaml(source)
    data.update(cli)
    return validate(data, source), ns


def resolve_paths(cfg: RunConfig, base: str | os.PathLike | None = None) -> RunConfig:
    """Make every path option absolute against ``base`` (default: working directory)."""
    base = Path(base or os.getcwd())
    updates = {}
    for name in ("output_path", "resume_from", "progress_file", "models_dir",
                 "dataset_base_path", "dataset_metadata_path", "lora_checkpoint",
                 "offload_nvme_path"):
        value = getattr(cfg, name)
        if value and not os.path.isabs(value):
            updates[name] = str((base / value).resolve())
    if cfg.tokenizer_path and ":" not in cfg.tokenizer_path and not os.path.isabs(
            cfg.tokenizer_path):
        updates["tokenizer_path"] = str((base / cfg.tokenizer_path).resolve())
    return cfg.model_copy(update=updates)
