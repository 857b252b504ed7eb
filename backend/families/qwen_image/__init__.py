"""Qwen-Image: text-to-image, diffusers' ``QwenImagePipeline``.

The family's data (read when the schema is built); the adapter is ``adapter.py``, the tiny
real-architecture models ``tiny.py``, the CPU demo builder ``demo.py``, the published
configs the estimator uses before anything is downloaded ``published.py``.
"""
from backend.families.base import (SCHEDULER, TOKENIZER, Component, FamilySpec, Variant)

REPO = "Qwen/Qwen-Image"
TARGETS = ("to_q,to_k,to_v,add_q_proj,add_k_proj,add_v_proj,to_out.0,to_add_out,"
           "img_mlp.net.2,img_mod.1,txt_mlp.net.2,txt_mod.1")

SPEC = FamilySpec(
    name="qwen_image",
    title="Qwen-Image",
    adapter="backend.families.qwen_image.adapter",
    is_default=True,
    components=(
        Component("transformer", ("QwenImageTransformer2DModel",), trained=True,
                  source=f"{REPO}:transformer/diffusion_pytorch_model*.safetensors",
                  stages=("train", "sample")),
        Component("text_encoder", ("Qwen2_5_VLForConditionalGeneration",),
                  source=f"{REPO}:text_encoder/model*.safetensors",
                  stages=("data_process", "sample")),
        Component("vae", ("AutoencoderKLQwenImage",),
                  source=f"{REPO}:vae/diffusion_pytorch_model.safetensors",
                  stages=("data_process", "sample")),
        Component("tokenizer", source=f"{REPO}:tokenizer/", stages=("data_process", "sample"),
                  kind=TOKENIZER),
        Component("scheduler", source=f"{REPO}:scheduler/", stages=("sample",),
                  kind=SCHEDULER),
    ),
    defaults={
        "model_id_with_origin_paths": (
            f"{REPO}:transformer/diffusion_pytorch_model*.safetensors,"
            f"{REPO}:text_encoder/model*.safetensors,"
            f"{REPO}:vae/diffusion_pytorch_model.safetensors"),
        "lora_target_modules": TARGETS,
        "remove_prefix_in_ckpt": "pipe.dit.",
        "sample_steps": 30,
        "sample_cfg": 4.0,
        "sample_height": 1328,
        "sample_width": 1328,
    },
    recognise_classes=("QwenImagePipeline", "QwenImageTransformer2DModel"),
    variants=(Variant("qwen_image", "Qwen-Image", (REPO,)),),
    # "qwen" alone would also name the Qwen3 text encoders other families use.
    keywords=("qwen-image", "qwenimage"),
    presets_by_vram=("qwen_image_multi_gpu_zero2", "qwen_image_single_gpu",
                     "qwen_image_low_vram"),
    help={
        "data_process_offload": "Qwen-Image at 1024x1024: about 19 GB (none), 17 GB "
                                "(model), under 3 GB (sequential).",
        "sample_cpu_offload": "Qwen-Image at 1328x1328: about 65 GB (none), 41 GB (model), "
                              "7 GB (sequential), under 2 GB with sample_vae_tiling.",
        "sample_vae_tiling": "Qwen-Image at 1328x1328: about 7 GB untiled, under 1 GB tiled.",
    },
)
