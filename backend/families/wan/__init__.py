"""Wan 2.1 text-to-video and image-to-video: diffusers' ``WanPipeline`` (1.3B and 14B) and
``WanImageToVideoPipeline`` (I2V-14B-480P / -720P).

The family's data (read when the schema is built); the adapter is ``adapter.py``, the tiny
real-architecture models ``tiny.py``, the published configs ``published.py``, the native
(original-repository) module names and file mapping ``native.py``, the image-to-video
variants' encoder, loss inputs and pipeline ``i2v.py``.

Wan 2.2 A14B (``Wan-AI/Wan2.2-T2V-A14B``, ``-I2V-A14B``): two experts of the 14B
architecture, ``transformer`` for the noisy part of sampling (timesteps at or above the
pipeline's ``boundary_ratio``) and ``transformer_2`` for the rest. A run trains one expert:
the sources name its folder (``transformer/`` or ``transformer_2/``; the reference's
``high_noise_model/`` / ``low_noise_model/``) and ``min_timestep_boundary`` /
``max_timestep_boundary`` (the reference's flags: fractions of the training schedule's
timesteps, noisiest first; a step draws its index from ``[int(min * 1000), int(max * 1000))``)
keep its steps in its range. Samples load both experts (``transformer_2``,
``boundary_ratio``) and put the LoRA on the trained one; a low-noise expert's diffusers
export loads with ``load_lora_weights(file, load_into_transformer_2=True)``.

Wan 2.2 TI2V-5B (``Wan-AI/Wan2.2-TI2V-5B``): one 5B transformer over the Wan 2.2 VAE's
48-channel latents (16x spatial compression), one timestep per token; text-to-video, or
with ``extra_inputs: input_image`` the clip's first frame kept clean as
``WanImageToVideoPipeline`` keeps it (``ti2v.py``). Found by model id or, for a local
pipeline folder, by ``expand_timesteps`` in its model_index.json (or the Wan 2.2 VAE).

Image-to-video (``Wan-AI/Wan2.1-I2V-14B-480P`` / ``-720P``): the first frame of each clip
conditions it, as ``WanImageToVideoPipeline`` does: its CLIP vision embedding
(``CLIPVisionModel`` + ``CLIPImageProcessor``, the ``image_encoder`` / ``image_processor``
components) goes to the transformer's image cross-attention, and the VAE latents of the
first frame followed by black frames, behind a 4-channel first-frame mask, are concatenated
to the noisy latents (36 input channels). The reference's ``--extra_inputs input_image``
names this (its input image is the clip's first frame); samples take the first frame from
``sample_images``.

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
from backend.families.base import (PROCESSOR, SCHEDULER, TOKENIZER, Component, FamilySpec,
                                   Variant)

T2V_1_3B = "Wan-AI/Wan2.1-T2V-1.3B"
T2V_14B = "Wan-AI/Wan2.1-T2V-14B"
I2V_480P = "Wan-AI/Wan2.1-I2V-14B-480P"
I2V_720P = "Wan-AI/Wan2.1-I2V-14B-720P"
I2V_CLASSES = ("WanImageToVideoPipeline",)
T2V_A14B = "Wan-AI/Wan2.2-T2V-A14B"
TI2V_5B = "Wan-AI/Wan2.2-TI2V-5B"
I2V_A14B = "Wan-AI/Wan2.2-I2V-A14B"
DIFFUSERS = "-Diffusers"
# The reference trainer's targets (the original module names) and diffusers' spellings.
REFERENCE_TARGETS = "q,k,v,o,ffn.0,ffn.2"
TARGETS = "to_q,to_k,to_v,to_out.0,ffn.net.0.proj,ffn.net.2"


def sources(repo: str, image: bool = False) -> str:
    """The -Diffusers components of ``repo`` (``image``: with the I2V CLIP image encoder)."""
    d = repo + DIFFUSERS
    return (f"{d}:transformer/*.safetensors,{d}:text_encoder/*.safetensors,"
            f"{d}:vae/diffusion_pytorch_model.safetensors"
            + (f",{d}:image_encoder/*.safetensors" if image else ""))


def i2v_defaults(repo: str, height: int, width: int) -> dict:
    """What an image-to-video variant changes: its sources, the first frame as input, and
    the model card's size (81 frames, 50 steps, guidance 5 as the family's)."""
    return {"model_id_with_origin_paths": sources(repo, image=True),
            "extra_inputs": "input_image", "max_pixels": height * width,
            "sample_height": height, "sample_width": width}


def expert_defaults(repo: str, expert: str, image: bool, boundary: float) -> dict:
    """A Wan 2.2 A14B expert's run: its folder (``transformer`` high-noise,
    ``transformer_2`` low-noise) as the trained component and its range of the schedule
    (``boundary``: the fraction of the training schedule's timesteps, noisiest first,
    above the model's ``boundary_ratio``). ``image``: the I2V model (first frame in, no CLIP
    image encoder in Wan 2.2)."""
    d = repo + DIFFUSERS
    src = sources(repo).replace(f"{d}:transformer/", f"{d}:{expert}/")
    lo, hi = (0.0, boundary) if expert == "transformer" else (boundary, 1.0)
    return {"model_id_with_origin_paths": src, "min_timestep_boundary": lo,
            "max_timestep_boundary": hi, "num_frames": 49, "sample_num_frames": 49,
            **({"extra_inputs": "input_image"} if image else {})}


def ti2v_defaults() -> dict:
    """What Wan2.2-TI2V-5B changes: its sources and the model card's 704x1280 (area; the
    transpose works too), 121 frames at 24 fps (50 steps, guidance 5 as the family's)."""
    return {"model_id_with_origin_paths": sources(TI2V_5B), "max_pixels": 704 * 1280,
            "num_frames": 121, "sample_height": 704, "sample_width": 1280,
            "sample_num_frames": 121, "sample_fps": 24}


SPEC = FamilySpec(
    name="wan",
    title="Wan 2.1 (video)",
    adapter="backend.families.wan.adapter",
    # The TI2V-5B first: with extra_inputs input_image it is still the TI2V-5B.
    run_adapters=("backend.families.wan.ti2v:TI2VAdapter", "backend.families.wan.i2v:I2VAdapter"),
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
        # Image-to-video only: its adapter (``i2v.py``) loads them in stage 1 and samples.
        Component("image_encoder", ("CLIPVisionModel", "CLIPVisionModelWithProjection"),
                  source=f"{I2V_480P}{DIFFUSERS}:image_encoder/*.safetensors"),
        Component("image_processor", source=f"{I2V_480P}{DIFFUSERS}:image_processor/",
                  kind=PROCESSOR),
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
    recognise_classes=("WanPipeline", "WanTransformer3DModel") + I2V_CLASSES,
    variants=(
        Variant("wan_t2v_1_3b", "Wan2.1-T2V-1.3B", (T2V_1_3B, T2V_1_3B + DIFFUSERS)),
        Variant("wan_t2v_14b", "Wan2.1-T2V-14B", (T2V_14B, T2V_14B + DIFFUSERS), defaults={
            "model_id_with_origin_paths": sources(T2V_14B),
        }),
        Variant("wan_i2v_14b_480p", "Wan2.1-I2V-14B-480P", (I2V_480P, I2V_480P + DIFFUSERS),
                classes=I2V_CLASSES, input_images=1,
                defaults=i2v_defaults(I2V_480P, 480, 832)),
        Variant("wan_i2v_14b_720p", "Wan2.1-I2V-14B-720P", (I2V_720P, I2V_720P + DIFFUSERS),
                input_images=1, defaults=i2v_defaults(I2V_720P, 720, 1280)),
        # Wan 2.2's two experts: boundary_ratio 0.875 (T2V) / 0.9 (I2V) of the sampler's
        # timesteps is, in the training schedule (shift 5), 0.417 / 0.358 of its indices.
        Variant("wan22_t2v_a14b", "Wan2.2-T2V-A14B", (T2V_A14B, T2V_A14B + DIFFUSERS),
                defaults=expert_defaults(T2V_A14B, "transformer_2", False, 0.417)),
        Variant("wan22_i2v_a14b", "Wan2.2-I2V-A14B", (I2V_A14B, I2V_A14B + DIFFUSERS),
                input_images=1,
                defaults=expert_defaults(I2V_A14B, "transformer_2", True, 0.358)),
        # One 5B transformer over the Wan 2.2 VAE's latents (``ti2v.py``): text-to-video, or
        # from a clean first frame with extra_inputs input_image.
        Variant("wan22_ti2v_5b", "Wan2.2-TI2V-5B", (TI2V_5B, TI2V_5B + DIFFUSERS),
                defaults=ti2v_defaults(), index_values={"expand_timesteps": True},
                config_values={"vae": {"is_residual": True, "z_dim": 48}},
                # The Wan 2.2 VAE downsamples 16x and the transformer's patch is 2x2.
                resolution_multiple=32),
    ),
    # The reference's original module names, as peft matches them in diffusers' model.
    target_aliases={"q": "to_q", "k": "to_k", "v": "to_v", "o": "to_out.0",
                    "ffn.0": "ffn.net.0.proj", "ffn.2": "ffn.net.2"},
    keywords=("wan", "wan2", "wanvideo"),
    presets_by_vram=("wan_14b_zero3_offload", "wan_1_3b_12gb"),
    # The reference trainer's Wan commands name the original repositories' files.
    reference_files={
        "diffusion_pytorch_model*.safetensors": "transformer/*.safetensors",
        "high_noise_model/diffusion_pytorch_model*.safetensors": "transformer/*.safetensors",
        "low_noise_model/diffusion_pytorch_model*.safetensors": "transformer_2/*.safetensors",
        "models_t5_umt5-xxl-enc-bf16.pth": "text_encoder/*.safetensors",
        "Wan2.1_VAE.pth": "vae/diffusion_pytorch_model.safetensors",
        "google/umt5-xxl/": "tokenizer/",
        "models_clip_open-clip-xlm-roberta-large-vit-huge-14.pth": "image_encoder/*.safetensors",
    },
    reference_repo_suffix=DIFFUSERS,
)
