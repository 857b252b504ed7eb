"""Run planning: a RunConfig becomes the files and the exact commands of a run.

``plan_run(cfg, run_dir)`` writes into ``run_dir``

- ``run.yaml``: the resolved config (absolute paths) that every stage reads with ``--config``;
- ``accelerate_<stage>.yaml`` for data_process and train, built with accelerate's own
  ``ClusterConfig`` (and loadable by ``accelerate launch --config_file``);
- ``deepspeed_train.json`` when ``zero_stage`` > 0 (ZeRO 1/2/3, CPU or NVMe offload, the
  ``activation_checkpointing`` block when DeepSpeed checkpointing is on);
- ``commands.sh``: the same commands shell-quoted, for people (the runner never runs it);

and returns one ``StagePlan`` per stage in ``cfg.stages``, with ``class_images`` before
``data_process`` when prior preservation renders class images from ``class_prompt`` (a
stage the options imply, not one of ``stages``: ``backend/training/class_images.py`` says
why it is a stage of its own; stage 1 gets its folder with ``--class_images_dir``). Rules:

- stage 1 (data_process) never runs under DeepSpeed: it has no optimizer and ZeRO wraps
  crash it. It runs plain on the main machine with that machine's processes.
- train runs under DeepSpeed when ``zero_stage`` > 0 (``distributed_type: DEEPSPEED``, the
  JSON through ``deepspeed_config_file``; mixed precision is then passed as
  ``--mixed_precision`` because accelerate refuses it in the YAML next to a DeepSpeed file),
  else plain: one process ``NO``, several ``MULTI_GPU``.
- without CUDA (CPU): plain stages set ``use_cpu: true``; several plain CPU processes are
  started by torchrun (``MULTI_GPU``) and run as ``MULTI_CPU`` (gloo) through
  ``ACCELERATE_USE_CPU=true`` in the stage environment -- accelerate's own ``MULTI_CPU``
  launch starts only one process without MPI. DeepSpeed picks its CPU accelerator itself.
- DeepSpeed batch sizes: one process keeps accelerate's ``"auto"``; several processes set
  ``train_micro_batch_size_per_gpu: 1`` and leave ``train_batch_size`` out (DeepSpeed
  derives it as micro x accumulation x world size).
- several machines: the main machine runs the plan (machine_rank 0); every other machine
  runs the train command of ``other_node_commands`` (``--machine_rank k``) at the same
  time, with the run folder at the same path (a shared file system).

The stage environment holds nothing secret: tokens stay in the UI process's environment.

Example (the CPU demo)::

    from backend.config.schema import load_preset
    from backend.planning.plan import plan_run
    for st in plan_run(load_preset("cpu_demo"), "/tmp/run"):
        print(st.name, st.argv)
"""
from __future__ import annotations

import json
import os
import shlex
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from backend.config.paths import REPO_ROOT, resolve_paths
from backend.config.schema import RunConfig, effective_optimizer
from backend.config.validation import validate
from backend.core import libraries
from backend.core.rundir import RunDir
from backend.training import class_images

# The name of the run-folder layout before backend.core.rundir (kept for older imports).
RunFiles = RunDir

LAUNCH = ("-m", "accelerate.commands.launch")
TRAIN_MODULE = "backend.stages.train"
SAMPLE_MODULE = "backend.stages.sample"
CLASS_IMAGES_MODULE = "backend.stages.class_images"
STAGE_TASKS = {"data_process": "sft:data_process", "train": "sft:train"}


@dataclass
class StagePlan:
    """One stage of a run: a name (also the log file name), the exact argv, extra environment."""

    name: str
    argv: list[str]
    env: dict[str, str] = field(default_factory=dict)


def cuda_available() -> bool:
    """Whether this machine can run the stages on CUDA GPUs."""
    import torch

    return bool(torch.cuda.is_available())


# ------------------------------------------------------------------------------------------
# DeepSpeed
# ------------------------------------------------------------------------------------------
# The DeepSpeed JSON keys that are schema fields of the same name, in the JSON's order. The
# generator below writes them and the importer (backend/planning/importer.py) reads them back through
# these same tables, so the two directions cannot drift apart.
DS_OFFLOAD_FIELDS = {"offload_optimizer": "offload_optimizer_device",  # zero_optimization.<block>
                     "offload_param": "offload_param_device"}          # .device (param: ZeRO-3)
DS_ZERO_FIELDS = (  # zero_optimization.<key>: (key, written under ZeRO-3 only)
    ("overlap_comm", False), ("contiguous_gradients", False), ("sub_group_size", True),
    ("reduce_bucket_size", False), ("stage3_prefetch_bucket_size", True),
    ("stage3_param_persistence_threshold", True), ("stage3_max_live_parameters", True),
    ("stage3_max_reuse_distance", True))
DS_ACTIVATION_FIELDS = ("partition_activations", "cpu_checkpointing",  # activation_checkpointing
                        "contiguous_memory_optimization")
DS_FP16 = {"enabled": "auto", "loss_scale": 0, "loss_scale_window": 1000,  # fixed, not fields
           "initial_scale_power": 16, "hysteresis": 2, "min_loss_scale": 1}


def deepspeed_config(cfg: RunConfig, num_processes: int | None = None) -> dict[str, Any]:
    """The DeepSpeed JSON of the train stage, with ``"auto"`` where accelerate fills values.

    The layout follows the reference's ZeRO-3 CPU-offload file; values come from ``cfg``.
    """
    if cfg.zero_stage < 1:
        raise ValueError("deepspeed_config: zero_stage is 0 (no DeepSpeed)")
    n = cfg.num_processes if num_processes is None else num_processes
    zero: dict[str, Any] = {"stage": cfg.zero_stage}
    for block, name in DS_OFFLOAD_FIELDS.items():
        device = getattr(cfg, name)
        if device != "none" and (block != "offload_param" or cfg.zero_stage == 3):
            zero[block] = _offload(cfg, device)
    for key, zero3_only in DS_ZERO_FIELDS:
        if cfg.zero_stage == 3 or not zero3_only:
            zero[key] = getattr(cfg, key)
    if cfg.zero_stage == 3:
        # Saving LoRA weights under ZeRO-3 gathers them into one 16-bit state dict.
        zero["stage3_gather_16bit_weights_on_model_save"] = True
    ds: dict[str, Any] = {
        "fp16": dict(DS_FP16),
        "bf16": {"enabled": "auto"},
        "zero_optimization": zero,
    }
    if uses_ds_activation_checkpointing(cfg):
        ds["activation_checkpointing"] = {key: getattr(cfg, key) for key in DS_ACTIVATION_FIELDS}
    ds["gradient_accumulation_steps"] = "auto"
    ds["gradient_clipping"] = "auto" if cfg.gradient_clipping is None else cfg.gradient_clipping
    if n > 1:
        # accelerate can resolve train_batch_size "auto" inconsistently with the world size;
        # DeepSpeed derives it from these two and the number of processes.
        ds["train_micro_batch_size_per_gpu"] = cfg.batch_size
    else:
        ds["train_batch_size"] = "auto"
        # batch_size > 1 is drawn by a batch sampler, whose loader accelerate cannot read
        # a batch size from: the micro-batch is written out.
        ds["train_micro_batch_size_per_gpu"] = cfg.batch_size if cfg.batch_size > 1 else "auto"
    if effective_optimizer(cfg.model_dump()) != "adamw":
        # ZeRO runs a client optimizer other than Adam only when told it may.
        ds["zero_allow_untested_optimizer"] = True
    ds["wall_clock_breakdown"] = False
    return ds


def ds_batch_sizes(cfg: RunConfig, num_processes: int | None = None) -> dict[str, int]:
    """What DeepSpeed's batch sizes come to for ``cfg`` (shown beside the form, never asked
    for): the micro-batch is ``batch_size``, ``train_batch_size`` = micro-batch x
    ``gradient_accumulation_steps`` x processes."""
    n = cfg.num_processes if num_processes is None else num_processes
    return {"train_micro_batch_size_per_gpu": cfg.batch_size,
            "gradient_accumulation_steps": cfg.gradient_accumulation_steps,
            "train_batch_size": cfg.batch_size * cfg.gradient_accumulation_steps * n}


def _offload(cfg: RunConfig, device: str) -> dict[str, Any]:
    block: dict[str, Any] = {"device": device, "pin_memory": cfg.pin_memory}
    if device == "nvme":
        block["nvme_path"] = cfg.offload_nvme_path
    return block


def uses_ds_activation_checkpointing(cfg: RunConfig) -> bool:
    return cfg.uses_deepspeed and cfg.use_gradient_checkpointing and \
        cfg.ds_activation_checkpointing


# ------------------------------------------------------------------------------------------
# accelerate
# ------------------------------------------------------------------------------------------
def launch_settings(cfg: RunConfig, stage: str) -> dict[str, Any]:
    """How a stage is launched: deepspeed or not, processes, machines."""
    if stage == "data_process":
        return {"deepspeed": False, "num_processes": cfg.processes_per_machine,
                "num_machines": 1}
    if stage == "train":
        return {"deepspeed": cfg.uses_deepspeed, "num_processes": cfg.num_processes,
                "num_machines": cfg.num_machines}
    raise ValueError(f"stage {stage!r} is not launched through accelerate")


def accelerate_config(cfg: RunConfig, stage: str, *, cuda: bool,
                      deepspeed_file: str | os.PathLike | None = None):
    """accelerate's own ``ClusterConfig`` for a stage (``.to_yaml_file(path)`` writes it)."""
    libraries.ready()
    from accelerate.commands.config.config_args import ClusterConfig
    from accelerate.utils import ComputeEnvironment, DistributedType

    s = launch_settings(cfg, stage)
    n, machines, ds = s["num_processes"], s["num_machines"], s["deepspeed"]
    if ds:
        dist = DistributedType.DEEPSPEED
    elif n > 1 or machines > 1:
        dist = DistributedType.MULTI_GPU  # torchrun; on CPU it runs as MULTI_CPU (see env)
    else:
        dist = DistributedType.NO
    deepspeed: dict[str, Any] = {}
    if ds:
        if deepspeed_file is None:
            raise ValueError("accelerate_config: a DeepSpeed stage needs deepspeed_file")
        deepspeed = {"deepspeed_config_file": str(deepspeed_file),
                     "zero3_init_flag": bool(cfg.zero3_init_flag and cfg.zero_stage == 3)}
        if machines > 1:
            # Each machine starts its own launcher (no ssh/pdsh from the main machine).
            deepspeed["deepspeed_multinode_launcher"] = "standard"
    return ClusterConfig(
        compute_environment=ComputeEnvironment.LOCAL_MACHINE,
        distributed_type=dist,
        # Next to a DeepSpeed file accelerate refuses mixed_precision in the YAML: it goes
        # on the launch command line instead (see stage_argv).
        mixed_precision=None if ds else cfg.mixed_precision,
        use_cpu=bool(not cuda and not ds),
        debug=False,
        num_processes=n,
        machine_rank=0,
        num_machines=machines,
        gpu_ids=cfg.gpu_ids if cuda else None,
        main_process_ip=cfg.main_process_ip if machines > 1 else None,
        main_process_port=cfg.main_process_port if dist != DistributedType.NO else None,
        rdzv_backend="static",
        same_network=True,
        main_training_function="main",
        enable_cpu_affinity=False,
        deepspeed_config=deepspeed,
        downcast_bf16="no",
        tpu_env=[],
        tpu_use_cluster=False,
        tpu_use_sudo=False,
    )


def stage_env(cfg: RunConfig, stage: str, *, cuda: bool) -> dict[str, str]:
    """Extra environment of a stage (added to the runner's; never secrets)."""
    env: dict[str, str] = {"PYTHONUNBUFFERED": "1"}
    if stage in STAGE_TASKS:
        s = launch_settings(cfg, stage)
        if not cuda and not s["deepspeed"] and (s["num_processes"] > 1 or
                                                s["num_machines"] > 1):
            env["ACCELERATE_USE_CPU"] = "true"
    # Explicit either way: the UI process may run offline itself while a run downloads.
    env["HF_HUB_OFFLINE"] = "1" if cfg.offline else "0"
    env["TRANSFORMERS_OFFLINE"] = "1" if cfg.offline else "0"
    return env


# ------------------------------------------------------------------------------------------
# Commands
# ------------------------------------------------------------------------------------------
def stage_argv(cfg: RunConfig, stage: str, files: RunDir, machine_rank: int = 0) -> list[str]:
    """The exact argv of a stage (``machine_rank`` > 0: train on another machine)."""
    if stage == class_images.STAGE:
        return [sys.executable, "-m", CLASS_IMAGES_MODULE, "--config", str(files.run_yaml),
                "--output_dir", str(files.classes)]
    if stage == "sample":
        argv = [sys.executable, "-m", SAMPLE_MODULE, "--config", str(files.run_yaml),
                "--output_dir", str(files.samples)]
        if "train" in cfg.stages:
            argv += ["--checkpoints", str(files.output)]
        elif cfg.lora_checkpoint:
            argv += ["--checkpoints", cfg.lora_checkpoint]
        return argv
    s = launch_settings(cfg, stage)
    argv = [sys.executable, *LAUNCH, "--config_file", str(files.accelerate_yaml(stage))]
    if machine_rank:
        argv += ["--machine_rank", str(machine_rank)]
    if s["deepspeed"]:
        argv += ["--mixed_precision", cfg.mixed_precision]
    argv += ["-m", TRAIN_MODULE, "--config", str(files.run_yaml)]
    if stage == "data_process":
        argv += ["--task", "sft:data_process", "--output_path", str(files.cache)]
        if class_images.wanted(cfg):
            argv += [class_images.DIR_FLAG, str(files.classes)]
    elif cfg.split_training:
        argv += ["--task", "sft:train"]
        if "data_process" in cfg.stages:
            argv += ["--dataset_base_path", str(files.cache)]
        argv += ["--dataset_metadata_path", "none", "--output_path", str(files.output)]
    else:
        argv += ["--task", "sft", "--output_path", str(files.output)]
    argv += ["--progress_file", str(files.progress)]
    return argv


def planned_stages(cfg: RunConfig) -> list[str]:
    """``cfg.stages``, with the class images stage before stage 1 when it renders class
    images (``class_images.wanted``)."""
    out: list[str] = []
    for stage in cfg.stages:
        if stage == "data_process" and class_images.wanted(cfg):
            out.append(class_images.STAGE)
        out.append(stage)
    return out


def resolved_config(cfg: RunConfig, run_dir: str | os.PathLike) -> RunConfig:
    """``cfg`` as the run's run.yaml holds it: absolute paths, run-folder outputs."""
    files = RunDir(Path(run_dir).resolve())
    cfg = resolve_paths(validate(cfg.to_dict()))
    return cfg.model_copy(update={"output_path": str(files.output),
                                  "progress_file": str(files.progress)})


def plan_run(cfg: RunConfig, run_dir: str | os.PathLike, *, cuda: bool | None = None
             ) -> list[StagePlan]:
    """Write the run's files into ``run_dir`` and return its stages (see the module doc).

    ``cuda``: whether the stages run on CUDA GPUs (default: detected on this machine).
    """
    files = RunDir(Path(run_dir).resolve())
    files.run_dir.mkdir(parents=True, exist_ok=True)
    cfg = resolved_config(cfg, files.run_dir)
    cuda = cuda_available() if cuda is None else cuda
    for stale in files.accelerate_yamls() + files.deepspeed_jsons():
        stale.unlink()
    cfg.save(files.run_yaml)
    plans: list[StagePlan] = []
    for stage in planned_stages(cfg):
        if stage in STAGE_TASKS:
            ds_file = None
            if launch_settings(cfg, stage)["deepspeed"]:
                ds_file = files.deepspeed_json(stage)
                ds_file.write_text(json.dumps(deepspeed_config(cfg), indent=4) + "\n",
                                   encoding="utf-8")
            accelerate_config(cfg, stage, cuda=cuda, deepspeed_file=ds_file).to_yaml_file(
                str(files.accelerate_yaml(stage)))
        plans.append(StagePlan(stage, stage_argv(cfg, stage, files),
                               stage_env(cfg, stage, cuda=cuda)))
    # Under SLURM one sbatch job runs the stages on every node (backend/jobs/slurm.py).
    others = _other_nodes(cfg, files, cuda) if cfg.executor != "slurm" else []
    files.commands.write_text(commands_script(plans, others, files.run_dir,
                                              sbatch=files.sbatch if cfg.executor == "slurm"
                                              else None), encoding="utf-8")
    return plans


def plan_render(cfg: RunConfig, job_dir: str | os.PathLike, samples_dir: str | os.PathLike,
                checkpoints: list[str | os.PathLike],
                reuse_base_from: list[str | os.PathLike] = ()) -> tuple[StagePlan, RunConfig]:
    """A sample-stage job rendering ``checkpoints`` into ``samples_dir`` (usually another
    run's samples folder). Writes the job's run.yaml and commands.sh into ``job_dir``;
    returns its one stage and the resolved config."""
    files = RunDir(Path(job_dir).resolve())
    files.run_dir.mkdir(parents=True, exist_ok=True)
    cfg = resolved_config(cfg.model_copy(update={"stages": ["sample"]}), files.run_dir)
    cfg.save(files.run_yaml)
    argv = [sys.executable, "-m", SAMPLE_MODULE, "--config", str(files.run_yaml),
            "--output_dir", str(samples_dir), "--checkpoints", *map(str, checkpoints)]
    if reuse_base_from:
        argv += ["--reuse_base_from", *map(str, reuse_base_from)]
    plan = StagePlan("sample", argv, stage_env(cfg, "sample", cuda=False))
    files.commands.write_text(commands_script([plan], [], files.run_dir), encoding="utf-8")
    return plan, cfg


def _other_nodes(cfg: RunConfig, files: RunDir, cuda: bool) -> list[StagePlan]:
    if cfg.num_machines < 2 or "train" not in cfg.stages:
        return []
    env = stage_env(cfg, "train", cuda=cuda)
    return [StagePlan(f"train_machine_{k}", stage_argv(cfg, "train", files, machine_rank=k),
                      dict(env)) for k in range(1, cfg.num_machines)]


def other_node_commands(cfg: RunConfig, run_dir: str | os.PathLike, *, cuda: bool | None = None
                        ) -> list[StagePlan]:
    """The train command for every other machine (machine_rank 1..num_machines-1).

    Each runs on its machine while the main machine runs the train stage of ``plan_run``;
    the run folder (written by ``plan_run``) must be at the same path there. Empty for one
    machine or without a train stage.
    """
    files = RunDir(Path(run_dir).resolve())
    cfg = resolved_config(cfg, files.run_dir)
    return _other_nodes(cfg, files, cuda_available() if cuda is None else cuda)


def shell_line(plan: StagePlan, python: str | None = None) -> str:
    """One stage as a shell command for people: env assignments, then the argv, quoted."""
    argv = list(plan.argv)
    head = [shlex.quote(a) for a in argv[:3]]
    if python is not None and argv and argv[0] == sys.executable:
        head[0] = python  # already shell text (e.g. "$PYTHON")
    parts = ["env"] + [shlex.quote(f"{k}={v}") for k, v in plan.env.items()] if plan.env else []
    lines: list[str] = [" ".join(parts + head)]
    rest = argv[3:]
    i = 0
    while i < len(rest):
        token = rest[i]
        group = [token]
        if token.startswith("--"):
            while i + 1 < len(rest) and not rest[i + 1].startswith("-"):
                i += 1
                group.append(rest[i])
        elif token == "-m" and i + 1 < len(rest):
            i += 1
            group.append(rest[i])
        lines.append(" ".join(shlex.quote(t) for t in group))
        i += 1
    return " \\\n    ".join(lines)


def commands_script(plans: list[StagePlan], others: list[StagePlan], run_dir: Path,
                    sbatch: Path | None = None) -> str:
    """``commands.sh``; ``sbatch``: the job script of a run sent to SLURM, named first."""
    out = [
        "#!/usr/bin/env bash",
        f"# ZeroLoRA run {run_dir}",
        "# The exact commands of this run, in order. The job runner starts each as an",
        "# argument list (never through a shell) from the ZeroLoRA folder; this file shows",
        "# them shell-quoted, for people.",
    ]
    if sbatch is not None:
        out += [f"# This run goes to SLURM: sbatch {shlex.quote(str(sbatch))} runs these stages",
                "# as one job, an srun step per stage (backend/jobs/slurm.py; the script is",
                "# written when the run is submitted)."]
    out += [
        "set -euo pipefail",
        f"cd {shlex.quote(str(REPO_ROOT))}",
        "",
    ]
    for i, plan in enumerate(plans, 1):
        out += [f"# --- stage {i}/{len(plans)}: {plan.name}", shell_line(plan), ""]
    if others:
        out += ["# --- train on the other machines: run each on its machine while the main",
                "# machine runs the train stage above (same run folder path, same "
                "ZeroLoRA folder).", ""]
        for plan in others:
            rank = plan.name.rsplit("_", 1)[-1]
            out += [f"# machine_rank {rank}", shell_line(plan), ""]
    return "\n".join(out)
