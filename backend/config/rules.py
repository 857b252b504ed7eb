"""The rules that tie options together, one function per concern, each returning its
problems as ``field: problem (got X; allowed Y)``. ``cross_field_problems`` runs them all in
order; ``backend.config.validation.validate`` runs it after checking each field on its own.
The low-VRAM rules live in ``backend/config/lowvram.py``.
"""
from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from backend.config.lowvram import combination_problems, parse_quant_options
from backend.config.schema import (LOKR_FACTOR_ALLOWED, SAMPLE_SCALE_RANGE, STAGES,
                                   TRAINED_ALIAS, effective_optimizer, family_defaults,
                                   resolution_multiple, trainable_names)
from backend.config.errors import field_problem
from backend.core import bounded
from backend.core.messages import Msg
from backend.families import family_names, family_of, family_spec, foreign_sources, recognise


def cross_field_problems(c: dict[str, Any], require_inputs: bool = True) -> list[Msg]:
    """Rules that involve more than one field. ``c`` holds defaults merged with valid values.

    ``require_inputs``: also demand what only the user can supply (the dataset folder, the
    choice to train a distilled model directly); off for presets, which are partial by
    design, and for imports, which take a command as it is (the form then shows what is
    missing).
    """
    return (deepspeed_problems(c) + machine_problems(c) + size_problems(c)
            + source_form_problems(c) + model_problems(c) + training_problems(c)
            + full_training_problems(c)
            + stage_problems(c, require_inputs) + video_field_problems(c)
            + samples_during_training_problems(c)
            + (distilled_problems(c) if require_inputs else [])
            + combination_problems(c)  # low VRAM (backend/config/lowvram.py)
            + option_problems(c) + loraplus_problems(c) + ema_problems(c)
            + mask_problems(c) + preservation_problems(c) + slurm_problems(c)
            + tracking_problems(c))


def deepspeed_problems(c: dict[str, Any]) -> list[Msg]:
    """DeepSpeed: offload devices by ZeRO stage, the NVMe folder, and which activation
    checkpointing applies."""
    p: list[Msg] = []
    zs = c["zero_stage"]
    opt, par = c["offload_optimizer_device"], c["offload_param_device"]
    if par != "none" and zs != 3:
        p.append(field_problem("offload_param_device", Msg(
            "validation.rule.param_offload_zero3", got=repr(par), zs=zs)))
    if opt != "none" and zs < 1:
        p.append(field_problem("offload_optimizer_device", Msg(
            "validation.rule.optimizer_offload_deepspeed", got=repr(opt))))
    elif opt == "nvme" and zs != 3:
        p.append(field_problem("offload_optimizer_device", Msg(
            "validation.rule.nvme_zero3", zs=zs)))
    if "nvme" in (par, opt) and not c["offload_nvme_path"]:
        p.append(field_problem("offload_nvme_path", Msg("validation.rule.nvme_folder")))
    ds_ckpt = zs > 0 and c["ds_activation_checkpointing"] and c["use_gradient_checkpointing"]
    for name in ("partition_activations", "cpu_checkpointing",
                 "contiguous_memory_optimization"):
        if c[name] and not ds_ckpt:
            p.append(field_problem(name, Msg(
                "validation.rule.ds_checkpointing_only", zs=zs,
                ugc=str(c["use_gradient_checkpointing"]).lower(),
                dac=str(c["ds_activation_checkpointing"]).lower())))
    if c["use_gradient_checkpointing_offload"] and ds_ckpt:
        p.append(field_problem("use_gradient_checkpointing_offload", Msg(
            "validation.rule.ds_replaces_torch", zs=zs)))
    return p


def machine_problems(c: dict[str, Any]) -> list[Msg]:
    """Processes and machines: the main machine's address and port, ranks, processes per
    machine and the GPU ids."""
    p: list[Msg] = []
    n, m = c["num_processes"], c["num_machines"]
    # Under SLURM the per-node launcher gives each node the first node's address and a port
    # of the job (backend/jobs/slurm_launch.py): neither is asked for.
    slurm = c.get("executor") == "slurm"
    if m > 1 and not c["main_process_ip"] and not slurm:
        p.append(field_problem("main_process_ip", Msg("validation.rule.main_ip", m=m)))
    if m > 1 and c["main_process_port"] == 0 and not slurm:
        p.append(field_problem("main_process_port", Msg("validation.rule.main_port", m=m)))
    if 0 < c["main_process_port"] < 1024:
        p.append(field_problem("main_process_port", Msg(
            "validation.rule.port_reserved", got=c["main_process_port"])))
    if c["machine_rank"] >= m:
        p.append(field_problem("machine_rank", Msg(
            "validation.rule.rank_below", got=c["machine_rank"], top=m - 1)))
    if n < m:
        p.append(field_problem("num_processes", Msg(
            "validation.rule.process_per_machine", n=n, m=m)))
    elif n % m:
        p.append(field_problem("num_processes", Msg("validation.rule.split_evenly", n=n, m=m)))
    if c["gpu_ids"] != "all":
        ids = c["gpu_ids"].split(",")
        per_machine = max(1, n // m)
        if len(ids) != len(set(ids)):
            p.append(field_problem("gpu_ids", Msg(
                "validation.rule.gpu_repeated", got=repr(c["gpu_ids"]))))
        elif len(ids) < per_machine:
            p.append(field_problem("gpu_ids", Msg(
                "validation.rule.gpu_fewer", got=repr(c["gpu_ids"]), n=per_machine)))
    return p


def size_problems(c: dict[str, Any]) -> list[Msg]:
    """Fixed sizes: height and width set together, every side a multiple of what the
    family (or variant) needs."""
    p: list[Msg] = []
    if (c["height"] is None) != (c["width"] is None):
        which = "width" if c["width"] is None else "height"
        p.append(field_problem(which, Msg(
            "validation.rule.height_width_together", height=str(c["height"]),
            width=str(c["width"]))))
    mult, model = resolution_multiple(c)
    for name in ("height", "width", "sample_height", "sample_width"):
        side = c[name]
        if isinstance(side, int) and side % mult:
            lo = side // mult * mult
            p.append(field_problem(name, Msg(
                "validation.rule.side_multiple", model=model, mult=mult, side=side,
                lo=lo or mult, hi=lo + mult)))
    return p


def source_form_problems(c: dict[str, Any]) -> list[Msg]:
    """Model sources given as ``model_id:glob`` (``model_id_with_origin_paths`` entries,
    ``tokenizer_path``, ``captioner_path``) with nothing before or after the last colon,
    which no stage can resolve; an existing local path is taken as a path."""
    p: list[Msg] = []
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
            got = bounded.short(entry)
            p.append(field_problem(name, Msg(
                "validation.rule.colon_empty_before", got=got, example=example)
                if not model_id.strip() else Msg(
                "validation.rule.colon_empty_after", got=got, example=example)))
    return p


def model_problems(c: dict[str, Any]) -> list[Msg]:
    """The model: a source to load it from, the form of model_paths, the modules the LoRA
    trains, and torch checkpointing's CPU offload (which needs checkpointing on)."""
    p: list[Msg] = []
    if c["use_gradient_checkpointing_offload"] and not c["use_gradient_checkpointing"]:
        p.append(field_problem("use_gradient_checkpointing_offload",
                               Msg("validation.rule.offload_needs_checkpointing")))
    if not (c["model_id_with_origin_paths"] or c["model_paths"]):
        p.append(field_problem("model_id_with_origin_paths",
                               Msg("validation.rule.no_model_source")))
    if c["model_paths"]:
        try:
            mp = bounded.load_json(c["model_paths"], "model_paths")
            if not isinstance(mp, list) or not mp or not all(
                    isinstance(x, str) or (isinstance(x, list) and x and all(
                        isinstance(y, str) for y in x)) for x in mp):
                raise ValueError
        except ValueError:
            p.append(field_problem("model_paths", Msg(
                "validation.rule.model_paths_json", got=bounded.short(c["model_paths"]))))
    if not [t for t in str(c["lora_target_modules"]).split(",") if t.strip()]:
        p.append(field_problem("lora_target_modules", Msg(
            "validation.rule.target_modules", got=repr(c["lora_target_modules"]))))
    return p + foreign_source_problems(c)


def foreign_source_problems(c: dict[str, Any]) -> list[Msg]:
    """Model sources of another family than the run's (a text encoder of one family with
    another's transformer), refused before any stage loads them."""
    family = c.get("model_family")
    if family not in family_names():
        return []
    spec = family_spec(family)
    title = spec.title
    model_paths = c["model_paths"] if isinstance(c.get("model_paths"), str) else None
    # The reference's single files are judged as what they are read as (the family's own
    # folders), not by the repository the reference names them in.
    sources, _ = spec.map_reference_sources(c.get("model_id_with_origin_paths"))
    return [field_problem(field, Msg("validation.rule.other_family_source",
                                     got=bounded.short(entry), other=other, family=title,
                                     example=example))
            for field, entry, other, example in foreign_sources(
                family, sources, model_paths, c.get("tokenizer_path"))]


def distilled_problems(c: dict[str, Any]) -> list[Msg]:
    """A step-distilled model (a variant with ``distilled_from``) trained directly, which
    wears its few-step sampling off: refused unless the run merges a de-distillation
    adapter (``preset_lora_path``) or says it means it (``train_distilled``). The variant is
    the one of the trained component's sources (an undistilled transformer beside the
    distilled model's text encoder trains the undistilled one), else the run's."""
    family = c.get("model_family")
    if ("train" not in list(c.get("stages") or []) or c.get("preset_lora_path")
            or c.get("train_distilled") or family not in family_names()):
        return []
    spec = family_spec(family)
    sources, _ = spec.map_reference_sources(c.get("model_id_with_origin_paths"))
    entries = [e.strip() for e in str(sources or "").split(",") if e.strip()]
    trained = [e for e in entries
               if e.rpartition(":")[2].startswith(f"{spec.trained_component}/")]
    found = recognise(",".join(trained)) if trained else None
    if found and found[0] == family and found[1] is not None:
        variant = found[1]
    else:
        named, name = family_of(c)
        variant = spec.variant(name) if named == family else None
    base = spec.variant(variant.distilled_from) if variant and variant.distilled_from else None
    if base is None:
        return []
    example = family_defaults(family, base.name)["model_id_with_origin_paths"].split(",")[0]
    # What the user gave (a reference file, before it is read as the family's folder).
    given = [e.strip() for e in str(c.get("model_id_with_origin_paths") or "").split(",")]
    got = ([e for e in given if e.rpartition(":")[0] in variant.model_ids] + trained
           + entries + [c.get("model_paths") or variant.title])[0]
    return [field_problem("model_id_with_origin_paths", Msg(
        "validation.rule.distilled", model=variant.title, base=base.title,
        got=bounded.short(got), example=example))]


def training_problems(c: dict[str, Any]) -> list[Msg]:
    """Training length and checkpoints: a step cap below the step target, pruning without
    step checkpoints, resuming and initialising the LoRA at once."""
    p: list[Msg] = []
    if c["max_train_steps"] and c["max_steps"] and c["max_steps"] < c["max_train_steps"]:
        p.append(field_problem("max_steps", Msg(
            "validation.rule.max_steps_cap", got=c["max_steps"], target=c["max_train_steps"])))
    if c["keep_last_n_checkpoints"] and not c["save_steps"]:
        p.append(field_problem("keep_last_n_checkpoints", Msg(
            "validation.rule.prune_needs_save_steps", got=c["keep_last_n_checkpoints"])))
    if c["resume_from"] and c["lora_checkpoint"]:
        p.append(field_problem("lora_checkpoint", Msg("validation.rule.resume_or_lora")))
    return p


def options_left_set(c: dict[str, Any], defaults: dict[str, Any], problem) -> list[Msg]:
    """The options of something the run does not use (``defaults``: each one's value when
    unset) set to anything else: each a problem on its field, ``problem(got=, default=)``
    (refused rather than silently ignored)."""
    return [field_problem(name, problem(got=bounded.short(c.get(name, default)),
                                        default=bounded.short(default)))
            for name, default in defaults.items() if c.get(name, default) != default]


# The options of a LoRA, which a full fine-tune has none of: set to anything but their
# family's defaults beside ``trainable_models``, they are refused rather than ignored.
LORA_ONLY = ("lora_rank", "lora_alpha", "lora_dropout", "lora_type", "lokr_factor",
             "loraplus_lr_ratio", "lora_checkpoint", "lora_target_modules",
             "diff_output_preservation")  # DOP's base model is the LoRA switched off
# Ways to fit a small GPU that hold a frozen base: a full fine-tune has none.
FROZEN_BASE_ONLY = ("enable_model_cpu_offload", "enable_optimizer_cpu_offload",
                    "preset_lora_path")


def full_training_problems(c: dict[str, Any]) -> list[Msg]:
    """``trainable_models``: names of the family's trained component only (``dit``), and
    none of the options that belong to a LoRA or to a frozen base."""
    names = trainable_names(c.get("trainable_models"))
    family = c.get("model_family")
    if not names or family not in family_names():
        return []
    spec = family_spec(family)
    trained = spec.trained_component
    allowed = f"{TRAINED_ALIAS} ({trained})"
    p: list[Msg] = []
    for name in dict.fromkeys(names):
        if name in (TRAINED_ALIAS, trained):
            continue
        known = [comp.name for comp in spec.components]
        params = dict(got=repr(name), family=spec.title, components=str(known),
                      allowed=allowed)
        p.append(field_problem("trainable_models", Msg(
            "validation.rule.trainable_frozen", **params) if name in known else Msg(
            "validation.rule.trainable_unknown", **params)))
    defaults = family_defaults(*family_of(c))  # a variant's own targets are its default
    p += options_left_set(c, {name: defaults.get(name) for name in LORA_ONLY},
                          lambda **k: Msg("validation.rule.full_with_lora", **k))
    for name in FROZEN_BASE_ONLY:
        if c.get(name):
            p.append(field_problem(name, Msg("validation.rule.full_frozen_base",
                                             got=bounded.short(c.get(name)))))
    entries, _ = parse_quant_options(c.get("quant_options"), c.get("fp8_models"))
    for entry in entries:
        if entry.component == "transformer":
            p.append(field_problem(entry.field, Msg("validation.rule.full_quantized",
                                                    method=entry.method)))
    return p


def stage_problems(c: dict[str, Any], require_inputs: bool = True) -> list[Msg]:
    """The stages: their order, stage 1 only with split training, the dataset folder the
    stages need (``require_inputs``), sample prompts and LoRA scales."""
    p: list[Msg] = []
    stages = list(c["stages"])
    if stages != sorted(stages, key=STAGES.index) or len(set(stages)) != len(stages):
        p.append(field_problem("stages", Msg(
            "validation.rule.stage_order", got=str(stages), stages=str(list(STAGES)))))
    if not c["split_training"] and "data_process" in stages:
        p.append(field_problem("stages", Msg("validation.rule.data_process_split")))
    if require_inputs and ("data_process" in stages or "train" in stages) and not \
            c["dataset_base_path"]:
        what = (Msg("validation.rule.dataset_cache_folder") if c["split_training"] and
                "data_process" not in stages else Msg("validation.rule.dataset_existing_folder"))
        p.append(field_problem("dataset_base_path", Msg(
            "validation.rule.dataset_required", what=what)))
    if "sample" in stages and not [s for s in c["sample_prompts"] if str(s).strip()]:
        p.append(field_problem("sample_prompts", Msg(
            "validation.rule.sample_prompt", got=repr(c["sample_prompts"]))))
    lo, hi = SAMPLE_SCALE_RANGE
    bad = [s for s in c["sample_lora_scales"] if not lo <= s <= hi]
    if bad:
        p.append(field_problem("sample_lora_scales", Msg(
            "validation.rule.scales_range", lo=lo, hi=hi, got=str(bad))))
    return p


def video_field_problems(c: dict[str, Any]) -> list[Msg]:
    """Video options: frame counts the family's VAE takes (k * ``frame_multiple`` + 1:
    4k+1, or the family's own)."""
    p: list[Msg] = []
    family = c.get("model_family")
    m = family_spec(family).frame_multiple if family in family_names() else 4
    for name in ("num_frames", "sample_num_frames"):
        n = c.get(name)
        if isinstance(n, int) and (n - 1) % m:
            lo = (n - 1) // m * m + 1
            p.append(field_problem(name, Msg("validation.rule.frame_count", m=m, n=n, lo=lo,
                                             hi=lo + m)))
    buckets = c.get("frame_buckets") or []
    out_of_range = [n for n in buckets if isinstance(n, int) and not 1 <= n <= 1025]
    if out_of_range:
        p.append(field_problem("frame_buckets", Msg("validation.rule.frame_bucket_range",
                                                    got=out_of_range, lo=1, hi=1025)))
    for n in (n for n in buckets if isinstance(n, int) and n not in out_of_range
              and (n - 1) % m):
        lo = (n - 1) // m * m + 1
        p.append(field_problem("frame_buckets", Msg("validation.rule.frame_count", m=m, n=n,
                                                    lo=lo, hi=lo + m)))
    if len(set(buckets)) < len(buckets):
        p.append(field_problem("frame_buckets", Msg("validation.rule.frame_bucket_repeated",
                                                    got=list(buckets))))
    p += window_problems(c)
    lo, hi = c.get("min_timestep_boundary"), c.get("max_timestep_boundary")
    if isinstance(lo, (int, float)) and isinstance(hi, (int, float)) and \
            int(lo * 1000) >= int(hi * 1000):
        p.append(field_problem("min_timestep_boundary", Msg(
            "validation.rule.timestep_order", lo=lo, hi=hi)))
    return p


# The inputs a clip's windows are not cut from (read from the clip's start by the family).
UNWINDOWED_INPUTS = ("input_audio", "in_context_videos")


def window_problems(c: dict[str, Any]) -> list[Msg]:
    """Windows of a clip (``frame_extraction``; ``backend.data.video``): the window stride
    only with ``slide``, the window count only with ``uniform``, and no windows beside a
    row's sound or reference video (read from the clip's start). An image family ignores
    them, as it does ``frame_buckets``."""
    mode = c.get("frame_extraction", "head")
    p: list[Msg] = []
    if mode != "slide":
        p += options_left_set(c, {"frame_window_stride": 1}, lambda **k: Msg(
            "validation.rule.window_stride_needs_slide", mode=mode, **k))
    if mode != "uniform":
        p += options_left_set(c, {"frame_sample": 1}, lambda **k: Msg(
            "validation.rule.frame_sample_needs_uniform", mode=mode, **k))
    names = [k.strip() for k in str(c.get("extra_inputs") or "").split(",")]
    inputs = [k for k in UNWINDOWED_INPUTS if k in names]
    if mode != "head" and inputs:
        p.append(field_problem("frame_extraction", Msg(
            "validation.rule.windows_with_input", got=mode, inputs=", ".join(inputs))))
    return p


def samples_during_training_problems(c: dict[str, Any]) -> list[Msg]:
    """Samples rendered during training need the train stage."""
    p: list[Msg] = []
    stages = list(c["stages"])
    if c["sample_every_n_steps"] and "train" not in stages:
        p.append(field_problem("sample_every_n_steps", Msg(
            "validation.rule.sample_every_needs_train", got=c["sample_every_n_steps"])))
    return p


# The EMA's own options, which mean nothing without ``ema_decay`` (their defaults).
EMA_OPTIONS = {"ema_update_every": 1, "ema_start_step": 0, "ema_device": "gpu",
               "sample_use_ema": "raw"}


def ema_problems(c: dict[str, Any]) -> list[Msg]:
    """The EMA (``ema_decay``; its bounds are the schema's): its other options only beside
    it, and a start step the run reaches."""
    if not c.get("ema_decay"):
        return options_left_set(c, EMA_OPTIONS,
                                lambda **k: Msg("validation.rule.ema_needs_decay", **k))
    last = min([n for n in (c.get("max_train_steps"), c.get("max_steps")) if n] or [0])
    if last and c.get("ema_start_step", 0) > last:
        return [field_problem("ema_start_step", Msg("validation.rule.ema_start_after_end",
                                                    got=c["ema_start_step"], last=last))]
    return []


# The masked loss's own options, which mean nothing without ``masked_loss`` (their defaults).
MASK_OPTIONS = {"mask_path": None, "alpha_mask": False, "mask_missing": "weight_one"}


def mask_problems(c: dict[str, Any]) -> list[Msg]:
    """The masked loss (``masked_loss``; ``backend/data/masks.py``): its other options only
    beside it, and a source of masks where the run reads the dataset (a mask folder,
    ``alpha_mask``, or a metadata file whose ``mask`` column the dataset check reads)."""
    if not c.get("masked_loss"):
        return options_left_set(c, MASK_OPTIONS,
                                lambda **k: Msg("validation.rule.mask_needs_masked_loss", **k))
    reads_dataset = c.get("task") != "sft:train"
    if reads_dataset and not (c.get("mask_path") or c.get("alpha_mask")
                              or c.get("dataset_metadata_path")):
        return [field_problem("masked_loss", Msg("validation.rule.mask_no_source"))]
    return []


# Prior preservation's and DOP's own options, which mean nothing without their switch.
PRIOR_OPTIONS = {"class_data_path": None, "prior_loss_weight": 1.0, "class_prompt": "",
                 "num_class_images": 100}
DOP_OPTIONS = {"dop_class": "", "dop_weight": 1.0}


def preservation_problems(c: dict[str, Any]) -> list[Msg]:
    """Regularization against drift (``backend/training/preservation.py``): each method's
    options only beside its switch; prior preservation needs an existing class dataset
    folder (where the run reads raw data: not a train-only stage, which reads the cache) or
    a ``class_prompt`` to render one from (``backend/training/class_images.py``), and
    ``num_class_images`` only beside that prompt;
    DOP needs the trigger word it replaces and the class word it puts there. Both need
    stage 1 (``split_training``), which caches the class samples and the DOP captions."""
    p: list[Msg] = []
    prior, dop = c.get("prior_preservation"), c.get("diff_output_preservation")
    if not prior:
        p += options_left_set(c, PRIOR_OPTIONS,
                              lambda **k: Msg("validation.rule.prior_needs_switch", **k))
    else:
        folder = c.get("class_data_path")
        prompt = str(c.get("class_prompt") or "").strip()
        if not folder and not prompt:
            p.append(field_problem("class_data_path", Msg("validation.rule.class_data_required")))
        elif folder and c.get("task") != "sft:train" and not Path(folder).expanduser().is_dir():
            p.append(field_problem("class_data_path", Msg("validation.rule.class_data_missing",
                                                          got=bounded.short(folder))))
        count, default = c.get("num_class_images", 100), PRIOR_OPTIONS["num_class_images"]
        if not prompt and count != default:
            p.append(field_problem("num_class_images", Msg(
                "validation.rule.class_count_needs_prompt", got=count, default=default)))
    if not dop:
        p += options_left_set(c, DOP_OPTIONS,
                              lambda **k: Msg("validation.rule.dop_needs_switch", **k))
    elif not str(c.get("trigger_word") or "").strip() or not str(c.get("dop_class") or
                                                                 "").strip():
        which = "trigger_word" if not str(c.get("trigger_word") or "").strip() else "dop_class"
        p.append(field_problem(which, Msg("validation.rule.dop_needs_words")))
    if (prior or dop) and not c.get("split_training", True):
        p.append(field_problem("split_training", Msg("validation.rule.preservation_split")))
    return p


# The SLURM options (backend/jobs/slurm.py), which mean nothing for a run kept local.
SLURM_OPTIONS = {"slurm_partition": None, "slurm_account": None, "slurm_qos": None,
                 "slurm_time_limit": None, "slurm_constraint": None, "slurm_gpus_per_node": 0,
                 "slurm_cpus_per_task": None, "slurm_mem_per_task": None,
                 "slurm_setup_lines": [], "slurm_nccl_env": []}
# SLURM's time forms (minutes, MM:SS, HH:MM:SS, D-HH, D-HH:MM, D-HH:MM:SS) and sizes.
SLURM_TIME = re.compile(r"^(\d+|\d+:\d{1,2}|\d+:\d{1,2}:\d{1,2}|\d+-\d+|\d+-\d+:\d{1,2}|"
                        r"\d+-\d+:\d{1,2}:\d{1,2}|INFINITE|UNLIMITED)$")
SLURM_MEMORY = re.compile(r"^\d+[KMGT]?$")
ENV_LINE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=[^\n\r\0]*$")


def slurm_problems(c: dict[str, Any]) -> list[Msg]:
    """The SLURM options (``executor: slurm``): only for a run sent there; a time limit and
    a memory size in SLURM's forms; NCCL variables as ``NAME=value`` lines; set-up lines of
    one line each. What the cluster says of them (the partition, its GPUs) is checked at
    submission (``backend.jobs.slurm.check_cluster``)."""
    if c.get("executor") != "slurm":
        return options_left_set(c, SLURM_OPTIONS,
                                lambda **k: Msg("validation.rule.slurm_needs_executor", **k))
    p: list[Msg] = []
    limit, mem = c.get("slurm_time_limit"), c.get("slurm_mem_per_task")
    if limit and not SLURM_TIME.match(limit):
        p.append(field_problem("slurm_time_limit", Msg("validation.rule.slurm_time_limit",
                                                       got=bounded.short(limit))))
    if mem and not SLURM_MEMORY.match(mem):
        p.append(field_problem("slurm_mem_per_task", Msg("validation.rule.slurm_memory",
                                                         got=bounded.short(mem))))
    p += [field_problem("slurm_nccl_env", Msg("validation.rule.slurm_env_line",
                                              got=bounded.short(line)))
          for line in c.get("slurm_nccl_env") or [] if not ENV_LINE.match(line)]
    if any(ch in line for line in c.get("slurm_setup_lines") or [] for ch in "\n\r\0"):
        p.append(field_problem("slurm_setup_lines", Msg("validation.rule.slurm_setup_line")))
    return p


# The names each tracker accepts (its own rules): W&B refuses these characters in a project
# or an entity; SwanLab takes letters, digits and _ - + . in a project (at most 100), letters,
# digits, _ and - in a workspace (at most 25).
WANDB_NAME = re.compile(r"^[^/\\#?%:]+$")
SWANLAB_PROJECT = re.compile(r"^[0-9A-Za-z_.+-]{1,100}$")
SWANLAB_WORKSPACE = re.compile(r"^[0-9A-Za-z_-]{1,25}$")
TRACKER_TITLES = {"wandb": "Weights & Biases", "swanlab": "SwanLab"}


def tracking_problems(c: dict[str, Any]) -> list[Msg]:
    """The trackers (``backend/training/tracking.py``), each only while it is switched on
    (its options are hidden otherwise): names its service accepts, and no online mode in a
    run that never touches the network (``offline``)."""
    p: list[Msg] = []
    if c.get("enable_wandb_log"):
        for name in ("wandb_project", "wandb_entity"):
            value = c.get(name)
            if value is not None and not WANDB_NAME.match(value):
                p.append(field_problem(name, Msg("validation.rule.wandb_name",
                                                 got=repr(value))))
    if c.get("enable_swanlab_log"):
        if not SWANLAB_PROJECT.match(c.get("swanlab_project") or ""):
            p.append(field_problem("swanlab_project", Msg(
                "validation.rule.swanlab_project", got=repr(c.get("swanlab_project")))))
        workspace = c.get("swanlab_workspace")
        if workspace is not None and not SWANLAB_WORKSPACE.match(workspace):
            p.append(field_problem("swanlab_workspace", Msg(
                "validation.rule.swanlab_workspace", got=repr(workspace))))
    for tool, title in TRACKER_TITLES.items():
        if c.get(f"enable_{tool}_log") and c.get("offline") and c.get(f"{tool}_mode") == "online":
            p.append(field_problem(f"{tool}_mode", Msg("validation.rule.tracker_offline",
                                                       tracker=title, field=f"{tool}_mode")))
    return p


def option_problems(c: dict[str, Any]) -> list[Msg]:
    """Rules of the training options block (batches, optimizers, LoRA variants, validation)."""
    p: list[Msg] = []
    opt = effective_optimizer(c)
    if c.get("customized_optimizer") and c["optimizer"] not in ("adamw", opt):
        p.append(field_problem("customized_optimizer", Msg(
            "validation.rule.customized_optimizer", got=repr(c["customized_optimizer"]),
            opt=opt, optimizer=c["optimizer"])))
    offload = c["offload_optimizer_device"]
    if opt != "adamw" and offload != "none" and c["zero_stage"] >= 1:
        p.append(field_problem("optimizer", Msg(
            "validation.rule.offload_adamw_only", opt=opt, device=offload)))
    if opt != "adamw" and c["enable_optimizer_cpu_offload"] and c["optimizer"] != "adamw8bit":
        # (optimizer adamw8bit: refused by the low-VRAM rules, combination_problems)
        p.append(field_problem("optimizer", Msg("validation.rule.cpu_offload_adamw_only",
                                                opt=opt)))
    if c["lokr_factor"] == 0:
        p.append(field_problem("lokr_factor", Msg("validation.rule.lokr_zero",
                                                  allowed=LOKR_FACTOR_ALLOWED)))
    if c["lora_type"] == "lokr" and c["lora_dropout"]:
        p.append(field_problem("lora_dropout", Msg("validation.rule.dropout_lokr",
                                                   got=c["lora_dropout"])))
    if c["lora_type"] == "dora" and c["zero_stage"] == 3:
        p.append(field_problem("lora_type", Msg("validation.rule.dora_zero3")))
    if c["validation_every_n_steps"] and not c["validation_samples"]:
        p.append(field_problem("validation_every_n_steps", Msg(
            "validation.rule.validation_needs_samples", got=c["validation_every_n_steps"])))
    if c["aspect_buckets"] and c["height"] is not None and c["width"] is not None:
        p.append(field_problem("aspect_buckets", Msg(
            "validation.rule.buckets_fixed_size", height=c["height"], width=c["width"])))
    return p


def loraplus_problems(c: dict[str, Any]) -> list[Msg]:
    """LoRA+ (``loraplus_lr_ratio``) sets lora_B's learning rate against lora_A's: an
    adapter without the two (LoKr) has nothing to set it on, and Prodigy refuses parameter
    groups at different learning rates (it learns one step size for all). A full fine-tune,
    which has no LoRA at all, is refused with the other LoRA options
    (``full_training_problems``)."""
    ratio = c.get("loraplus_lr_ratio")
    p: list[Msg] = []
    if ratio and c["lora_type"] == "lokr":
        p.append(field_problem("loraplus_lr_ratio", Msg("validation.rule.loraplus_lokr",
                                                        got=f"{ratio:g}")))
    if ratio and effective_optimizer(c) == "prodigy":
        p.append(field_problem("loraplus_lr_ratio", Msg("validation.rule.loraplus_prodigy",
                                                        got=f"{ratio:g}")))
    return p
