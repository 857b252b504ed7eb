"""The launch file the reference's FLUX.2-dev commands name (DiffSynth-Studio's
examples/flux2/model_training/full/accelerate_config_zero3.yaml, which its NPU LoRA script
launches stage 2 with; every example folder of the reference ships the same file under this
name), verbatim, by file name: {name: (what it is, contents)}. The importer reads a command
that names it with these contents when the file is not on the machine
(``backend.planning.importer``). Plain data.
"""

LAUNCH_FILES: dict[str, tuple[str, str]] = {
    "accelerate_config_zero3.yaml": (
        "accelerate config (DeepSpeed ZeRO-3 without offload, 8 processes)", """\
compute_environment: LOCAL_MACHINE
debug: false
deepspeed_config:
  gradient_accumulation_steps: 1
  offload_optimizer_device: none
  offload_param_device: none
  zero3_init_flag: true
  zero3_save_16bit_model: true
  zero_stage: 3
distributed_type: DEEPSPEED
downcast_bf16: 'no'
enable_cpu_affinity: false
machine_rank: 0
main_training_function: main
mixed_precision: bf16
num_machines: 1
num_processes: 8
rdzv_backend: static
same_network: true
tpu_env: []
tpu_use_cluster: false
tpu_use_sudo: false
use_cpu: false
"""),
}
