"""Wan 2.1 text-to-video: diffusers' ``WanPipeline`` (1.3B and 14B).

The family's data (read when the schema is built); the adapter is ``adapter.py``, the tiny
real-architecture models ``tiny.py``, the published configs ``published.py``, the native
(original-repository) module names and file mapping ``native.py``.

Components come from the ``-Diffusers`` repositories: ``WanTransformer3DModel``,
``AutoencoderKLWan``, transformers' ``UMT5EncoderModel`` and its tokenizer. The reference
trainer names the original repositories' files instead, some of them pickles
(``models_t5_umt5-xxl-enc-bf16.pth``, ``Wan2.1_VAE.pth``); those are never unpickled: the
importer maps each to the same component of the ``-Diffusers`` repository and says so.

Split training on a GPU (``presets/wan_1_3b_12gb.yaml`` and ``presets/wan_14b_zero3_offload.yaml``
are the same recipes as run configs)::

    accelerate launch -m backend.stages.train --task sft:data_process \\
      --model_id_with_origin_paths "Wan-AI/Wan2.1-T2V-1.3B-Diffusers:text_encoder/*.safetensors,Wan-AI/Wan2.1-T2V-1.3B-Diffusers:vae/diffusion_pytorch_model.safetensors" \\
      --dataset_base_path data/videos --dataset_metadata_path data/videos/metadata.csv \\
      --height 480 --width 832 --num_frames 81 --output_path ./models/train/Wan_cache
    accelerate launch --config_file deepspeed_zero3_cpuoffload.yaml -m backend.stages.train \\
      --task sft:train --model_id_with_origin_paths "Wan-AI/Wan2.1-T2V-1.3B-Diffusers:transformer/*.safetensors" \\
      --dataset_base_path ./models/train/Wan_cache --lora_rank 32 --learning_rate 1e-4 \\
      --lora_target_modules q,k,v,o,ffn.0,ffn.2 --num_epochs 5 --dataset_repeat 100 \\
      --use_gradient_checkpointing --initialize_model_on_cpu --output_path ./models/train/Wan_lora
"""
from backend.families.base import SCHEDULER, TOKENIZER, Component, FamilySpec, Variant

T2V_1_3B = "Wan-AI/Wan2.1-T2V-1.3B"
T2V_14B = "Wan-AI/Wan2.1-T2V-14B"
DIFFUSERS = "-Diffusers"
# The reference trainer's targets (the original module names) and diffusers' spellings.
REFERENCE_TARGETS = "q,k,v,o,ffn.0,ffn.2"
TARGETS = "to_q,to_k,to_v,to_out.0,ffn.net.0.proj,ffn.net.2"


def sources(repo: str) -> str:
    d = repo + DIFFUSERS
    return (f"{d}:transformer/*.safetensors,{d}:text_encoder/*.safetensors,"
            f"{d}:vae/diffusion_pytorch_model.safetensors")


SPEC = FamilySpec(
    name="wan",
    title="Wan 2.1 (video)",
    adapter="backend.families.wan.adapter",
    components=(
        Component("transformer", ("WanTransformer3DModel",), trained=True,
                  source=f"{T2V_1_3B}{DIFFUSERS}:transformer/*.safetensors",
                  stages=("train", "sample")),
        Component("text_encoder", ("UMT5EncoderModel",),
                  source=f"{T2V_1_3B}{DIFFUSERS}:text_encoder/*.safetensors",
                  stages=("data_process", "sample")),
        Component("vae", ("AutoencoderKLWan",),
                  source=f"{T2V_1_3B}{DIFFUSERS}:vae/diffusion_pytorch_model.safetensors",
                  stages=("data_process", "sample")),
        Component("tokenizer", source=f"{T2V_1_3B}{DIFFUSERS}:tokenizer/",
                  stages=("data_process", "sample"), kind=TOKENIZER),
        Component("scheduler", source=f"{T2V_1_3B}{DIFFUSERS}:scheduler/", stages=("sample",),
                  kind=SCHEDULER),
    ),
    defaults={
        "model_id_with_origin_paths": sources(T2V_1_3B),
        "lora_target_modules": TARGETS,
        "remove_prefix_in_ckpt": "pipe.dit.",
        # The -Diffusers model card: 480x832, 81 frames, 50 steps, guidance 5 (WanPipeline's
        # guidance_scale 5 is sample_cfg 5: both count the prompt itself).
        "max_pixels": 399360,
        "num_frames": 81,
        "sample_steps": 50,
        "sample_cfg": 5.0,
        "sample_height": 480,
        "sample_width": 832,
        "sample_num_frames": 81,
        "sample_fps": 16,
    },
    recognise_classes=("WanPipeline", "WanTransformer3DModel"),
    variants=(
        Variant("wan_t2v_1_3b", "Wan2.1-T2V-1.3B", (T2V_1_3B, T2V_1_3B + DIFFUSERS)),
        Variant("wan_t2v_14b", "Wan2.1-T2V-14B", (T2V_14B, T2V_14B + DIFFUSERS), defaults={
            "model_id_with_origin_paths": sources(T2V_14B),
        }),
    ),
    # The reference's original module names, as peft matches them in diffusers' model.
    target_aliases={"q": "to_q", "k": "to_k", "v": "to_v", "o": "to_out.0",
                    "ffn.0": "ffn.net.0.proj", "ffn.2": "ffn.net.2"},
    keywords=("wan", "wan2", "wanvideo"),
    presets_by_vram=("wan_14b_zero3_offload", "wan_1_3b_12gb"),
    # The reference trainer's Wan commands name the original repositories' files.
    reference_files={
        "diffusion_pytorch_model*.safetensors": "transformer/*.safetensors",
        "models_t5_umt5-xxl-enc-bf16.pth": "text_encoder/*.safetensors",
        "Wan2.1_VAE.pth": "vae/diffusion_pytorch_model.safetensors",
        "google/umt5-xxl/": "tokenizer/",
    },
    reference_repo_suffix=DIFFUSERS,
    help={
        "lora_target_modules": (
            "Wan: q,k,v,o,ffn.0,ffn.2 (the reference's original names) and "
            "to_q,to_k,to_v,to_out.0,ffn.net.0.proj,ffn.net.2 (diffusers') are the same "
            "modules: self- and cross-attention of every block and its feed-forward."),
        "num_frames": "Wan: 81 frames (5 s at 16 fps) as released; 4k+1.",
        "data_process_offload": "Wan: the UMT5-XXL text encoder is 11 GB in bf16; model "
                                "offload holds it and the VAE one at a time.",
    },
)
