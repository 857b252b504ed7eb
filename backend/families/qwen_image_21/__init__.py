"""Qwen-Image-2.1: text-to-image, diffusers' ``QwenImage21Pipeline``.

The transformer is ``QwenImage21Transformer2DModel`` (32 single-stream blocks with
block-causal attention: the text, then the target image's tokens, each image block
bidirectional inside), the text encoder Qwen3-VL-8B (``Qwen3VLForConditionalGeneration``;
the pipeline reads its last decoder layer before the final norm), the VAE
``AutoencoderKLQwenImage21`` (16 pixels per latent cell, 64 channels, latents unpatched; an
image slot of the text sequence stands for 2x2 latent tokens, so sides are multiples of 32).
A new architecture, not 2.0's: its own family, recognised by its own class names.

The family's data (read when the schema is built); the adapter is ``adapter.py``, the tiny
real-architecture models ``tiny.py``, the published configs the estimator uses before
anything is downloaded ``published.py``.

It captions a dataset with its own text encoder, a whole Qwen3-VL with its vision tower
(``captioner_components``; ``backend/families/qwen3_vl.py``'s ``load_captioner``), so no
captioning model is downloaded besides the weights stage 1 loads anyway.

The reference trainer (DiffSynth-Studio, snapshot of 2026-08-20) has no Qwen-Image-2.1
scripts, so there is nothing to import from it; a run config names the diffusers layout.

Split training (GPU; ``presets/qwen_image_21_low_vram.yaml`` is the same recipe as a run
config)::

    accelerate launch -m backend.stages.train --task sft:data_process \\
      --model_id_with_origin_paths "Qwen/Qwen-Image-2.1:text_encoder/*.safetensors,Qwen/Qwen-Image-2.1:vae/diffusion_pytorch_model.safetensors" \\
      --dataset_base_path data/images --dataset_metadata_path data/images/metadata.csv \\
      --output_path ./models/train/Qwen-Image-2.1_cache
    accelerate launch --config_file deepspeed_zero3_cpuoffload.yaml -m backend.stages.train \\
      --task sft:train --model_id_with_origin_paths "Qwen/Qwen-Image-2.1:transformer/*.safetensors" \\
      --dataset_base_path ./models/train/Qwen-Image-2.1_cache --lora_rank 32 \\
      --learning_rate 1e-4 --num_epochs 5 --dataset_repeat 50 --use_gradient_checkpointing \\
      --output_path ./models/train/Qwen-Image-2.1_lora

Tiny CPU pipeline: ``python -m backend.families.tiny OUT_DIR --family qwen_image_21``.
"""
from __future__ import annotations

from backend.families.base import FamilySpec
from backend.families.common import pipeline_components

REPO = "Qwen/Qwen-Image-2.1"
VAE_FILE = "vae/diffusion_pytorch_model.safetensors"
# Every projection of the 32 blocks: attention q/k/v/out and the SwiGLU feed-forward
# (diffusers' names; the model's tensor-parallel plan lists the same seven).
TARGETS = "to_q,to_k,to_v,to_out.0,img_mlp.proj,img_mlp.gate_layer,img_mlp.out"


def sources(repo: str) -> str:
    return (f"{repo}:transformer/*.safetensors,{repo}:text_encoder/*.safetensors,"
            f"{repo}:{VAE_FILE}")


SPEC = FamilySpec(
    name="qwen_image_21",
    title="Qwen-Image-2.1",
    adapter="backend.families.qwen_image_21.adapter",
    components=pipeline_components(
        transformer=(("QwenImage21Transformer2DModel",), f"{REPO}:transformer/*.safetensors"),
        text_encoder=(("Qwen3VLForConditionalGeneration",),
                      f"{REPO}:text_encoder/*.safetensors"),
        vae=(("AutoencoderKLQwenImage21",), f"{REPO}:{VAE_FILE}"),
        # The pipeline's ``processor`` folder; prompts need only its tokenizer.
        tokenizer=f"{REPO}:processor/", scheduler=f"{REPO}:scheduler/"),
    defaults={
        "model_id_with_origin_paths": sources(REPO),
        "lora_target_modules": TARGETS,
        # QwenImage21Pipeline's defaults: 40 steps, true_cfg_scale 1.0 ("meant to be sampled
        # without guidance"), output_resolution 1024.
        "sample_steps": 40,
        "sample_cfg": 1.0,
        "sample_height": 1024,
        "sample_width": 1024,
    },
    recognise_classes=("QwenImage21Pipeline", "QwenImage21Transformer2DModel"),
    keywords=("qwen_image_21", "qwen-image-2.1", "qwenimage21", "qwen image 2.1"),
    presets_by_vram=("qwen_image_21_single_gpu", "qwen_image_21_low_vram"),
    # 16 pixels per latent cell times the 2x2 latent tokens of one image slot.
    resolution_multiple=32,
)
