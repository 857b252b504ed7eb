"""Qwen-Image: text-to-image, diffusers' ``QwenImagePipeline``.

The family's data (read when the schema is built); the adapter is ``adapter.py``, the tiny
real-architecture models ``tiny.py``, the CPU demo builder ``demo.py``, the published
configs the estimator uses before anything is downloaded ``published.py``, the edit
models' encoder and pipeline ``edit.py``.

Variants share the transformer class and the text encoder, VAE and tokenizer:
``Qwen/Qwen-Image-2512`` (new weights, text-to-image) and the edit models
``Qwen/Qwen-Image-Edit`` (one input image, ``QwenImageEditPipeline``),
``Qwen/Qwen-Image-Edit-2509`` and ``-2511`` (up to three, ``QwenImageEditPlusPipeline``;
2511's transformer gives input-image tokens timestep 0, ``zero_cond_t``). An edit sample
is a target ``image``, its input images ``edit_image`` (one path or a list) and the
instruction ``prompt``; stage 1 encodes the prompt together with the input images through
the Qwen2.5-VL processor and caches the input images' latents (``edit_latents_<i>``),
which stage 2 puts beside the noisy latents as the pipelines do (``edit.py``).

Split training of an edit LoRA with the reference's flags (GPU; ``presets/
qwen_image_edit_2511_low_vram.yaml`` is the same recipe as a run config)::

    accelerate launch -m backend.stages.train --task sft:data_process \\
      --dataset_base_path data/edit --dataset_metadata_path data/edit/metadata.json \\
      --data_file_keys image,edit_image --extra_inputs edit_image \\
      --model_id_with_origin_paths "$EDIT_2511_SOURCES" \\
      --output_path ./models/train/Qwen-Image-Edit-2511_cache
    accelerate launch --config_file deepspeed_zero3_cpuoffload.yaml -m backend.stages.train \\
      --task sft:train --dataset_base_path ./models/train/Qwen-Image-Edit-2511_cache \\
      --model_id_with_origin_paths "Qwen/Qwen-Image-Edit-2511:transformer/diffusion_pytorch_model*.safetensors" \\
      --extra_inputs edit_image --zero_cond_t --lora_rank 32 --learning_rate 1e-4 \\
      --use_gradient_checkpointing --initialize_model_on_cpu \\
      --output_path ./models/train/Qwen-Image-Edit-2511_lora

(``$EDIT_2511_SOURCES``: ``sources(EDIT_2511)`` below, the reference's three sources; each
stage fetches only the components it loads, and the transformer's model id names the
variant.)
"""
from backend.families.base import FamilySpec, Variant
from backend.families.common import pipeline_components

REPO = "Qwen/Qwen-Image"
REPO_2512 = "Qwen/Qwen-Image-2512"
EDIT, EDIT_2509, EDIT_2511 = ("Qwen/Qwen-Image-Edit", "Qwen/Qwen-Image-Edit-2509",
                              "Qwen/Qwen-Image-Edit-2511")
EDIT_CLASSES = ("QwenImageEditPipeline",)
EDIT_PLUS_CLASSES = ("QwenImageEditPlusPipeline",)


def sources(transformer_repo: str) -> str:
    """The reference's sources: the transformer of ``transformer_repo``, Qwen-Image's text
    encoder and VAE (the released models share them)."""
    return (f"{transformer_repo}:transformer/diffusion_pytorch_model*.safetensors,"
            f"{REPO}:text_encoder/model*.safetensors,"
            f"{REPO}:vae/diffusion_pytorch_model.safetensors")


# What every edit variant changes: the input images column, and the pipelines' sample
# settings (diffusers' examples: 50 steps at true_cfg_scale 4, 1024x1024).
EDIT_DEFAULTS = {"extra_inputs": "edit_image", "data_file_keys": "image,edit_image",
                 "sample_steps": 40, "sample_cfg": 4.0, "sample_height": 1024,
                 "sample_width": 1024}
TARGETS = ("to_q,to_k,to_v,add_q_proj,add_k_proj,add_v_proj,to_out.0,to_add_out,"
           "img_mlp.net.2,img_mod.1,txt_mlp.net.2,txt_mod.1")

SPEC = FamilySpec(
    name="qwen_image",
    title="Qwen-Image",
    adapter="backend.families.qwen_image.adapter",
    run_adapters=("backend.families.qwen_image.edit:EditAdapter",),
    is_default=True,
    components=pipeline_components(
        transformer=(("QwenImageTransformer2DModel",),
                     f"{REPO}:transformer/diffusion_pytorch_model*.safetensors"),
        text_encoder=(("Qwen2_5_VLForConditionalGeneration",),
                      f"{REPO}:text_encoder/model*.safetensors"),
        vae=(("AutoencoderKLQwenImage",), f"{REPO}:vae/diffusion_pytorch_model.safetensors"),
        tokenizer=f"{REPO}:tokenizer/", scheduler=f"{REPO}:scheduler/"),
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
    recognise_classes=("QwenImagePipeline", "QwenImageTransformer2DModel") + EDIT_CLASSES
    + EDIT_PLUS_CLASSES,
    variants=(
        Variant("qwen_image", "Qwen-Image", (REPO,), classes=("QwenImagePipeline",)),
        Variant("qwen_image_2512", "Qwen-Image-2512", (REPO_2512,),
                defaults={"model_id_with_origin_paths": sources(REPO_2512)}),
        Variant("qwen_image_edit", "Qwen-Image-Edit", (EDIT,), classes=EDIT_CLASSES,
                input_images=1,
                defaults={**EDIT_DEFAULTS, "model_id_with_origin_paths": sources(EDIT)}),
        Variant("qwen_image_edit_2509", "Qwen-Image-Edit-2509", (EDIT_2509,),
                classes=EDIT_PLUS_CLASSES, input_images=3,
                defaults={**EDIT_DEFAULTS, "model_id_with_origin_paths": sources(EDIT_2509)}),
        # 2511 shares 2509's pipeline class; its transformer's config sets zero_cond_t.
        Variant("qwen_image_edit_2511", "Qwen-Image-Edit-2511", (EDIT_2511,), input_images=3,
                config_values={"transformer": {"zero_cond_t": True}},
                defaults={**EDIT_DEFAULTS, "model_id_with_origin_paths": sources(EDIT_2511),
                          "zero_cond_t": True}),
    ),
    # "qwen" alone would also name the Qwen3 text encoders other families use.
    keywords=("qwen-image", "qwenimage"),
    presets_by_vram=("qwen_image_multi_gpu_zero2", "qwen_image_single_gpu",
                     "qwen_image_low_vram"),
    # Presets of the variants (not ranked with the text-to-image ones):
    # qwen_image_2512_low_vram, qwen_image_edit_{2509,2511}_{single_gpu,low_vram}.
)
