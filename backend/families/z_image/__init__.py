"""Z-Image (Base and Turbo): text-to-image, diffusers' ``ZImagePipeline``.

The family's data (read when the schema is built); the adapter is ``adapter.py``, the tiny
real-architecture models ``tiny.py``, the published configs the estimator uses before
anything is downloaded ``published.py``.

Split training with the reference's flags (GPU; ``presets/z_image_low_vram.yaml`` is the
same recipe as a run config)::

    accelerate launch -m backend.stages.train --task sft:data_process \\
      --model_id_with_origin_paths "Tongyi-MAI/Z-Image:text_encoder/*.safetensors,Tongyi-MAI/Z-Image:vae/diffusion_pytorch_model.safetensors" \\
      --dataset_base_path data/images --dataset_metadata_path data/images/metadata.csv \\
      --output_path ./models/train/Z-Image_cache
    accelerate launch --config_file deepspeed_zero3_cpuoffload.yaml -m backend.stages.train \\
      --task sft:train --model_id_with_origin_paths "Tongyi-MAI/Z-Image:transformer/*.safetensors" \\
      --dataset_base_path ./models/train/Z-Image_cache --lora_rank 32 --learning_rate 1e-4 \\
      --num_epochs 5 --dataset_repeat 50 --use_gradient_checkpointing \\
      --initialize_model_on_cpu --output_path ./models/train/Z-Image_lora

Turbo is step-distilled (8 steps, no guidance). Training it directly teaches it ordinary
flow matching and wears the distillation off (samples turn blurry or need more steps).
Two ways around it, as users do: train on Base and apply the LoRA to Turbo (the weights
share names and shapes), or train Turbo with a de-distillation adapter merged into its
weights for training only (``preset_lora_path``; the saved LoRA holds only what was trained,
so it is applied to plain Turbo at inference). Turbo's ``distilled_from`` says so: a run
that trains it with neither is refused unless ``train_distilled`` says the user means it.
"""
from backend.families.base import FamilySpec, Variant
from backend.families.common import pipeline_components

BASE = "Tongyi-MAI/Z-Image"
TURBO = "Tongyi-MAI/Z-Image-Turbo"
# The reference trainer's targets: attention q/k/v/out and the SwiGLU feed-forward.
TARGETS = "to_q,to_k,to_v,to_out.0,w1,w2,w3"


def sources(repo: str) -> str:
    return (f"{repo}:transformer/*.safetensors,{repo}:text_encoder/*.safetensors,"
            f"{repo}:vae/diffusion_pytorch_model.safetensors")


SPEC = FamilySpec(
    name="z_image",
    title="Z-Image",
    adapter="backend.families.z_image.adapter",
    components=pipeline_components(
        transformer=(("ZImageTransformer2DModel",), f"{BASE}:transformer/*.safetensors"),
        text_encoder=(("Qwen3Model", "Qwen3ForCausalLM"), f"{BASE}:text_encoder/*.safetensors"),
        vae=(("AutoencoderKL",), f"{BASE}:vae/diffusion_pytorch_model.safetensors"),
        tokenizer=f"{BASE}:tokenizer/", scheduler=f"{BASE}:scheduler/"),
    defaults={
        "model_id_with_origin_paths": sources(BASE),
        "lora_target_modules": TARGETS,
        "remove_prefix_in_ckpt": "pipe.dit.",
        # Base: the model card's 28-50 steps at guidance 3-5 (ZImagePipeline's
        # guidance_scale 4 is sample_cfg 5: the schema's scale counts the prompt itself).
        "sample_steps": 40,
        "sample_cfg": 5.0,
        "sample_height": 1024,
        "sample_width": 1024,
    },
    recognise_classes=("ZImagePipeline", "ZImageTransformer2DModel"),
    variants=(
        Variant("z_image", "Z-Image (Base)", (BASE,)),
        Variant("z_image_turbo", "Z-Image-Turbo", (TURBO,), defaults={
            "model_id_with_origin_paths": sources(TURBO),
            # Distilled: 8 steps without classifier-free guidance.
            "sample_steps": 8,
            "sample_cfg": 1.0,
        }, distilled_from="z_image"),
    ),
    keywords=("z_image", "zimage", "z-image"),
    # Base recipes by GPU memory; presets/z_image_turbo_dedistill.yaml is the Turbo one.
    presets_by_vram=("z_image_single_gpu", "z_image_low_vram"),
)
