"""HunyuanVideo 1.5 text-to-video and image-to-video: diffusers' ``HunyuanVideo15Pipeline`` and
``HunyuanVideo15ImageToVideoPipeline`` in the layout of the
``hunyuanvideo-community/HunyuanVideo-1.5-*`` repositories (480p and 720p).

The family's data (read when the schema is built); the adapter is ``adapter.py``, the
image-to-video binding ``i2v.py``, the tiny real-architecture models ``tiny.py``, the
published configs ``published.py``, ComfyUI's module names ``native.py``.

One 8.3B transformer (``HunyuanVideo15Transformer3DModel``: 54 double-stream blocks of width
2048) reads the noisy latents beside a first-frame condition and its mask (65 channels), the
prompt encoded twice: Qwen2.5-VL's text model (``Qwen2_5_VLTextModel``, the prompt in a chat
template with the pipeline's system message) and, for text in quotes, the glyph encoder
(``T5EncoderModel`` with ``ByT5Tokenizer``, the ``text_encoder_2`` / ``tokenizer_2``
components); image-to-video adds SigLIP's embedding of the first frame (``SiglipVisionModel``
and ``SiglipImageProcessor``, the ``image_encoder`` / ``feature_extractor`` components). The
VAE (``AutoencoderKLHunyuanVideo15``) compresses 16x in space and 4x in time: clips take
4k+1 frames, sides multiples of 16. Samples use the pipeline's scheduler and its
classifier-free guider (``guider/``, guidance 6).

Split training on a GPU (``presets/hunyuan_video15_t2v_low_vram.yaml`` is this recipe as a
run config)::

    accelerate launch -m backend.stages.train --task sft:data_process \\
      --model_family hunyuan_video15 \\
      --dataset_base_path data/videos --dataset_metadata_path data/videos/metadata.csv \\
      --height 480 --width 848 --num_frames 121 --output_path ./models/train/HV15_cache
    accelerate launch --config_file deepspeed_zero3_cpuoffload.yaml -m backend.stages.train \\
      --task sft:train --model_family hunyuan_video15 \\
      --dataset_base_path ./models/train/HV15_cache --lora_rank 32 --learning_rate 1e-4 \\
      --num_epochs 5 --dataset_repeat 100 --use_gradient_checkpointing \\
      --initialize_model_on_cpu --output_path ./models/train/HV15_lora

CPU (the tiny model)::

    python -m backend.families.tiny /tmp/hv15 --family hunyuan_video15
"""
from backend.families.base import PROCESSOR, SCHEDULER, TOKENIZER, Component, FamilySpec, Variant

ORG = "hunyuanvideo-community/HunyuanVideo-1.5"
T2V_480P = f"{ORG}-480p_t2v"
I2V_480P = f"{ORG}-480p_i2v"
T2V_720P = f"{ORG}-720p_t2v"
I2V_720P = f"{ORG}-720p_i2v"
I2V_CLASSES = ("HunyuanVideo15ImageToVideoPipeline",)
# Both streams' attention and feed-forward layers of every double-stream block (and of the
# prompt's token refiner, whose layers share the names).
TARGETS = ("to_q,to_k,to_v,to_out.0,add_q_proj,add_k_proj,add_v_proj,to_add_out,"
           "ff.net.0.proj,ff.net.2,ff_context.net.0.proj,ff_context.net.2")
MODELS = ("transformer", "text_encoder", "text_encoder_2", "vae")


def source(repo: str, folder: str) -> str:
    return f"{repo}:{folder}/*.safetensors"


def sources(repo: str, image: bool = False) -> str:
    """The model components of ``repo`` (``image``: with the SigLIP image encoder)."""
    return ",".join(source(repo, c) for c in MODELS + (("image_encoder",) if image else ()))


def aliases(repo: str) -> tuple[str, ...]:
    """A repository's ids: ``...-1.5-480p_t2v`` and the ``...-1.5-Diffusers-480p_t2v``
    spelling diffusers' documentation uses."""
    return repo, repo.replace(f"{ORG}-", f"{ORG}-Diffusers-")


def size_defaults(height: int, width: int) -> dict:
    """A resolution's training and sample size (16:9 at the model's pixel count)."""
    return {"max_pixels": height * width, "sample_height": height, "sample_width": width}


def i2v_defaults(repo: str, height: int, width: int) -> dict:
    """An image-to-video model: its sources (with SigLIP) and the clip's first frame as
    its input image."""
    return {"model_id_with_origin_paths": sources(repo, image=True),
            "extra_inputs": "input_image", **size_defaults(height, width)}


SPEC = FamilySpec(
    name="hunyuan_video15",
    title="HunyuanVideo 1.5 (video)",
    adapter="backend.families.hunyuan_video15.adapter",
    run_adapters=("backend.families.hunyuan_video15.i2v:I2VAdapter",),
    components=(
        Component("transformer", ("HunyuanVideo15Transformer3DModel",), trained=True,
                  source=source(T2V_480P, "transformer"), stages=("train", "sample")),
        Component("text_encoder", ("Qwen2_5_VLTextModel",),
                  source=source(T2V_480P, "text_encoder"), stages=("data_process", "sample")),
        Component("tokenizer", source=f"{T2V_480P}:tokenizer/",
                  stages=("data_process", "sample"), kind=TOKENIZER),
        Component("text_encoder_2", ("T5EncoderModel",),
                  source=source(T2V_480P, "text_encoder_2"),
                  stages=("data_process", "sample")),
        # ByT5 has no vocabulary file: its folder is resolved beside the models, never
        # recognised by its files (a second tokenizer kind would take the first's folder).
        Component("tokenizer_2", source=f"{T2V_480P}:tokenizer_2/",
                  stages=("data_process", "sample"), kind=PROCESSOR),
        Component("vae", ("AutoencoderKLHunyuanVideo15",), source=source(T2V_480P, "vae"),
                  stages=("data_process", "sample")),
        Component("scheduler", source=f"{T2V_480P}:scheduler/", stages=("sample",),
                  kind=SCHEDULER),
        # The pipeline's classifier-free guidance settings (guider_config.json).
        Component("guider", source=f"{T2V_480P}:guider/", stages=("sample",), kind=PROCESSOR),
        # Image-to-video only: its adapter (``i2v.py``) loads them in stage 1 and samples.
        Component("image_encoder", ("SiglipVisionModel",),
                  source=source(I2V_480P, "image_encoder")),
        Component("feature_extractor", source=f"{I2V_480P}:feature_extractor/",
                  kind=PROCESSOR),
    ),
    defaults={
        "model_id_with_origin_paths": sources(T2V_480P),
        "lora_target_modules": TARGETS,
        # The model card: 480p (848x480) clips of 121 frames at 24 fps, 50 steps,
        # guidance 6 (the guider's; sample_cfg 6 is the same count).
        **size_defaults(480, 848),
        "num_frames": 121,
        "video_fps": 24.0,
        "sample_steps": 50,
        "sample_cfg": 6.0,
        "sample_num_frames": 121,
        "sample_fps": 24,
    },
    recognise_classes=("HunyuanVideo15Pipeline", "HunyuanVideo15Transformer3DModel")
    + I2V_CLASSES,
    variants=(
        Variant("hunyuan_video15_480p_t2v", "HunyuanVideo-1.5-480p-T2V", aliases(T2V_480P)),
        # A local folder of a 720p model: its transformer's target size (960).
        Variant("hunyuan_video15_720p_i2v", "HunyuanVideo-1.5-720p-I2V", aliases(I2V_720P),
                input_images=1, defaults=i2v_defaults(I2V_720P, 720, 1280),
                config_values={"transformer": {"target_size": 960, "task_type": "i2v"}}),
        Variant("hunyuan_video15_720p_t2v", "HunyuanVideo-1.5-720p-T2V", aliases(T2V_720P),
                defaults={"model_id_with_origin_paths": sources(T2V_720P),
                          **size_defaults(720, 1280)},
                config_values={"transformer": {"target_size": 960, "task_type": "t2v"}}),
        Variant("hunyuan_video15_480p_i2v", "HunyuanVideo-1.5-480p-I2V", aliases(I2V_480P),
                classes=I2V_CLASSES, input_images=1,
                defaults=i2v_defaults(I2V_480P, 480, 848)),
    ),
    keywords=("hunyuan_video15", "hunyuanvideo15", "hunyuanvideo-1.5", "hunyuan video 1.5"),
    presets_by_vram=("hunyuan_video15_t2v_single_gpu", "hunyuan_video15_t2v_low_vram"),
    # The VAE compresses 16x in space (the transformer's patch is 1) and 4x in time.
    resolution_multiple=16,
    frame_multiple=4,
)
