"""The rules that tie options together, one function per concern, each returning its
problems as ``field: problem (got X; allowed Y)``. ``cross_field_problems`` runs them all in
order; ``backend.config.validation.validate`` runs it after checking each field on its own.
The low-VRAM rules live in ``backend/config/lowvram.py``.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

from backend.config.lowvram import combination_problems
from backend.config.schema import (LOKR_FACTOR_ALLOWED, SAMPLE_SCALE_RANGE, STAGES,
                                   effective_optimizer, resolution_multiple)
from backend.core import bounded


def cross_field_problems(c: dict[str, Any], require_inputs: bool = True) -> list[str]:
    """Rules that involve more than one field. ``c`` holds defaults merged with valid values.

    ``require_inputs``: also demand what only the user can supply (the dataset folder); off
    for presets, which are partial by design.
    """
    return (deepspeed_problems(c) + machine_problems(c) + size_problems(c)
            + source_form_problems(c) + model_problems(c) + training_problems(c)
            + stage_problems(c, require_inputs) + video_field_problems(c)
            + samples_during_training_problems(c)
            + combination_problems(c)  # low VRAM (backend/config/lowvram.py)
            + option_problems(c))


def deepspeed_problems(c: dict[str, Any]) -> list[str]:
    """DeepSpeed: offload devices by ZeRO stage, the NVMe folder, and which activation
    checkpointing applies."""
    p: list[str] = []
    zs = c["zero_stage"]
    opt, par = c["offload_optimizer_device"], c["offload_param_device"]
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
    return p


def machine_problems(c: dict[str, Any]) -> list[str]:
    """Processes and machines: the main machine's address and port, ranks, processes per
    machine and the GPU ids."""
    p: list[str] = []
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
    return p


def size_problems(c: dict[str, Any]) -> list[str]:
    """Fixed sizes: height and width set together, every side a multiple of what the
    family (or variant) needs."""
    p: list[str] = []
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
            p.append(f"{name}: {side} the colon is empty (got {bounded.short(entry)}; allowed a "
                     f"local folder, or model_id:folder/ or model_id:glob, e.g. {example})")
    return p


def model_problems(c: dict[str, Any]) -> list[str]:
    """The model: a source to load it from, the form of model_paths, the modules the LoRA
    trains, and torch checkpointing's CPU offload (which needs checkpointing on)."""
    p: list[str] = []
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
                     f"{bounded.short(c['model_paths'])}; allowed e.g. [\"a.safetensors\", "
                     f"[\"shard1.safetensors\", \"shard2.safetensors\"]])")
    if not [t for t in str(c["lora_target_modules"]).split(",") if t.strip()]:
        p.append(f"lora_target_modules: at least one module name (got "
                 f"{c['lora_target_modules']!r}; allowed e.g. to_q,to_k,to_v)")
    return p


def training_problems(c: dict[str, Any]) -> list[str]:
    """Training length and checkpoints: a step cap below the step target, pruning without
    step checkpoints, resuming and initialising the LoRA at once."""
    p: list[str] = []
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
    return p


def stage_problems(c: dict[str, Any], require_inputs: bool = True) -> list[str]:
    """The stages: their order, stage 1 only with split training, the dataset folder the
    stages need (``require_inputs``), sample prompts and LoRA scales."""
    p: list[str] = []
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


def samples_during_training_problems(c: dict[str, Any]) -> list[str]:
    """Samples rendered during training need the train stage."""
    p: list[str] = []
    stages = list(c["stages"])
    if c["sample_every_n_steps"] and "train" not in stages:
        p.append("sample_every_n_steps: renders during training (got "
                 f"{c['sample_every_n_steps']} without the train stage; allowed empty)")
    return p


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
