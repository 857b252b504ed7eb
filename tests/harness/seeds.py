"""The reference trainer's files and commands, verbatim, and how to compare with them."""
from __future__ import annotations

from pathlib import Path


# The seed's DeepSpeed JSON (ZeRO-3, parameter + optimizer CPU offload, DeepSpeed
# activation checkpointing, "auto" values filled by accelerate).
SEED_ZERO3 = {
    "fp16": {"enabled": "auto", "loss_scale": 0, "loss_scale_window": 1000,
             "initial_scale_power": 16, "hysteresis": 2, "min_loss_scale": 1},
    "bf16": {"enabled": "auto"},
    "zero_optimization": {
        "stage": 3,
        "offload_optimizer": {"device": "cpu", "pin_memory": True},
        "offload_param": {"device": "cpu", "pin_memory": True},
        "overlap_comm": False, "contiguous_gradients": True, "sub_group_size": 1e9,
        "reduce_bucket_size": 5e7, "stage3_prefetch_bucket_size": 5e7,
        "stage3_param_persistence_threshold": 1e5, "stage3_max_live_parameters": 1e8,
        "stage3_max_reuse_distance": 1e8, "stage3_gather_16bit_weights_on_model_save": True,
    },
    "activation_checkpointing": {"partition_activations": False, "cpu_checkpointing": False,
                                 "contiguous_memory_optimization": False},
    "gradient_accumulation_steps": "auto", "gradient_clipping": "auto",
    "train_batch_size": "auto", "train_micro_batch_size_per_gpu": "auto",
    "wall_clock_breakdown": False,
}


ZERO2 = {
    "bf16": {"enabled": "auto"},
    "zero_optimization": {"stage": 2, "overlap_comm": False, "contiguous_gradients": True},
    "gradient_accumulation_steps": "auto", "gradient_clipping": "auto",
    "train_batch_size": "auto", "train_micro_batch_size_per_gpu": "auto",
}


# Several processes: set the micro batch, leave train_batch_size out.
ZERO3_TWO_PROCS = {k: v for k, v in SEED_ZERO3.items() if k != "train_batch_size"}


SEED_STAGE1 = """
  --dataset_base_path data/example_image_dataset
  --dataset_metadata_path data/example_image_dataset/metadata.csv
  --max_pixels 1048576
  --dataset_repeat 1
  --model_id_with_origin_paths Qwen/Qwen-Image:text_encoder/model*.safetensors,Qwen/Qwen-Image:vae/diffusion_pytorch_model.safetensors
  --learning_rate 1e-4
  --num_epochs 5
  --remove_prefix_in_ckpt pipe.dit.
  --output_path ./models/train/Qwen-Image_lora-splited-cache
  --lora_base_model dit
  --lora_target_modules to_q,to_k,to_v,add_q_proj,add_k_proj,add_v_proj,to_out.0,to_add_out,img_mlp.net.2,img_mod.1,txt_mlp.net.2,txt_mod.1
  --lora_rank 32
  --task sft:data_process
  --use_gradient_checkpointing
  --dataset_num_workers 8
  --find_unused_parameters
""".split()


SEED_STAGE2 = """
  --dataset_base_path ./models/train/Qwen-Image_lora-splited-cache
  --max_pixels 1048576
  --dataset_repeat 50
  --model_id_with_origin_paths Qwen/Qwen-Image:transformer/diffusion_pytorch_model*.safetensors
  --learning_rate 1e-4
  --num_epochs 5
  --remove_prefix_in_ckpt pipe.dit.
  --output_path ./models/train/Qwen-Image_lora
  --lora_base_model dit
  --lora_target_modules to_q,to_k,to_v,add_q_proj,add_k_proj,add_v_proj,to_out.0,to_add_out,img_mlp.net.2,img_mod.1,txt_mlp.net.2,txt_mod.1
  --lora_rank 32
  --task sft:train
  --use_gradient_checkpointing
  --dataset_num_workers 8
  --find_unused_parameters
  --initialize_model_on_cpu
""".split()


# The reference's low-VRAM files (DiffSynth-Studio examples/qwen_image/model_training/special/
# low_vram_training/), verbatim.
SEED_ACCELERATE_YAML = """\
compute_environment: LOCAL_MACHINE
debug: true
deepspeed_config:
  deepspeed_config_file: examples/qwen_image/model_training/special/low_vram_training/ds_z3_cpuoffload.json
  zero3_init_flag: true
distributed_type: DEEPSPEED
downcast_bf16: 'no'
enable_cpu_affinity: false
machine_rank: 0
main_training_function: main
num_machines: 1
num_processes: 1
rdzv_backend: static
same_network: true
tpu_env: []
tpu_use_cluster: false
tpu_use_sudo: false
use_cpu: false
"""


SEED_DEEPSPEED_JSON = """\
{
    "fp16": {
        "enabled": "auto",
        "loss_scale": 0,
        "loss_scale_window": 1000,
        "initial_scale_power": 16,
        "hysteresis": 2,
        "min_loss_scale": 1
    },
    "bf16": {
        "enabled": "auto"
    },
    "zero_optimization": {
        "stage": 3,
        "offload_optimizer": {
            "device": "cpu",
            "pin_memory": true
        },
        "offload_param": {
            "device": "cpu",
            "pin_memory": true
        },
        "overlap_comm": false,
        "contiguous_gradients": true,
        "sub_group_size": 1e9,
        "reduce_bucket_size": 5e7,
        "stage3_prefetch_bucket_size": 5e7,
        "stage3_param_persistence_threshold": 1e5,
        "stage3_max_live_parameters": 1e8,
        "stage3_max_reuse_distance": 1e8,
        "stage3_gather_16bit_weights_on_model_save": true
    },
    "activation_checkpointing": {
        "partition_activations": false,
        "cpu_checkpointing": false,
        "contiguous_memory_optimization": false
    },
    "gradient_accumulation_steps": "auto",
    "gradient_clipping": "auto",
    "train_batch_size": "auto",
    "train_micro_batch_size_per_gpu": "auto",
    "wall_clock_breakdown": false
}
"""


SEED_DIR = "examples/qwen_image/model_training/special/low_vram_training"


# Keys of an accelerate file that differ by design: file locations, accelerate's debug mode
# (extra checks), a free port (0) for single-machine runs, the GPUs to use.
IGNORED_ACCELERATE_KEYS = {"debug", "main_process_port", "gpu_ids"}


def write_seed_files(root: Path) -> tuple[Path, Path]:
    folder = root / SEED_DIR
    folder.mkdir(parents=True, exist_ok=True)
    acc = folder / "deepspeed_zero3_cpuoffload.yaml"
    ds = folder / "ds_z3_cpuoffload.json"
    acc.write_text(SEED_ACCELERATE_YAML)
    ds.write_text(SEED_DEEPSPEED_JSON)
    return acc, ds


def load_accelerate(path: Path) -> dict:
    """An accelerate config file through accelerate's own loader, as a dict."""
    from accelerate.commands.config.config_args import ClusterConfig, load_config_from_file

    conf = load_config_from_file(str(path))
    assert isinstance(conf, ClusterConfig)
    return conf.to_dict()


def comparable(d: dict) -> dict:
    d = {k: v for k, v in d.items() if k not in IGNORED_ACCELERATE_KEYS}
    if "deepspeed_config" in d:
        d["deepspeed_config"] = {k: v for k, v in d["deepspeed_config"].items()
                                 if k != "deepspeed_config_file"}
    return d


# The reference's two low-VRAM commands, verbatim.
SEED_COMMANDS = r"""
accelerate launch examples/qwen_image/model_training/train.py \
  --dataset_base_path data/example_image_dataset \
  --dataset_metadata_path data/example_image_dataset/metadata.csv \
  --max_pixels 1048576 \
  --dataset_repeat 1 \
  --model_id_with_origin_paths "Qwen/Qwen-Image:text_encoder/model*.safetensors,Qwen/Qwen-Image:vae/diffusion_pytorch_model.safetensors" \
  --learning_rate 1e-4 \
  --num_epochs 5 \
  --remove_prefix_in_ckpt "pipe.dit." \
  --output_path "./models/train/Qwen-Image_lora-splited-cache" \
  --lora_base_model "dit" \
  --lora_target_modules "to_q,to_k,to_v,add_q_proj,add_k_proj,add_v_proj,to_out.0,to_add_out,img_mlp.net.2,img_mod.1,txt_mlp.net.2,txt_mod.1" \
  --lora_rank 32 \
  --task "sft:data_process" \
  --use_gradient_checkpointing \
  --dataset_num_workers 8 \
  --find_unused_parameters

accelerate launch --config_file examples/qwen_image/model_training/special/low_vram_training/deepspeed_zero3_cpuoffload.yaml examples/qwen_image/model_training/train.py \
  --dataset_base_path "./models/train/Qwen-Image_lora-splited-cache" \
  --max_pixels 1048576 \
  --dataset_repeat 50 \
  --model_id_with_origin_paths "Qwen/Qwen-Image:transformer/diffusion_pytorch_model*.safetensors" \
  --learning_rate 1e-4 \
  --num_epochs 5 \
  --remove_prefix_in_ckpt "pipe.dit." \
  --output_path "./models/train/Qwen-Image_lora" \
  --lora_base_model "dit" \
  --lora_target_modules "to_q,to_k,to_v,add_q_proj,add_k_proj,add_v_proj,to_out.0,to_add_out,img_mlp.net.2,img_mod.1,txt_mlp.net.2,txt_mod.1" \
  --lora_rank 32 \
  --task "sft:train" \
  --use_gradient_checkpointing \
  --dataset_num_workers 8 \
  --find_unused_parameters \
  --initialize_model_on_cpu
"""
