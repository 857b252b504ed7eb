"""LTX-2 text-to-video, video only (the reference's no-audio variant) and with its sound
(``t2av.py``): diffusers' ``LTX2Pipeline`` in the layout of ``Lightricks/LTX-2``.

The family's data (read when the schema is built); the adapter is ``adapter.py``, the tiny
real-architecture models ``tiny.py``, the published configs ``published.py``, the native
(original-checkpoint) module names for ComfyUI ``native.py``.

LTX-2 is one audio-video transformer (``LTX2VideoTransformer3DModel``: a video stream and an
audio stream with cross-attention both ways). This variant trains it on clips without sound,
as the reference's ``LTX-2-T2AV-noaudio.sh`` does: the audio stream gets pure noise at the
clip's timestep and only the video's flow counts in the loss. Components: the transformer
(trained), Gemma 3 (``Gemma3ForConditionalGeneration``) and its tokenizer with the text
connectors (``LTX2TextConnectors``: the prompt's per-layer hidden states to the video and the
audio stream's embeddings), the video VAE (``AutoencoderKLLTX2Video``: 32x in space, 8x in
time, so clips take 8k+1 frames and sides multiples of 32), and for samples the audio VAE,
the vocoder and the scheduler. Clips are resampled to 24 fps (the reference's
``--frame_rate 24``).

Split training on a GPU (``presets/ltx2_t2v_low_vram.yaml`` is this recipe as a run config)::

    accelerate launch -m backend.stages.train --task sft:data_process \\
      --model_id_with_origin_paths "Lightricks/LTX-2:text_encoder/*.safetensors,Lightricks/LTX-2:connectors/*.safetensors,Lightricks/LTX-2:vae/*.safetensors" \\
      --dataset_base_path data/videos --dataset_metadata_path data/videos/metadata.csv \\
      --height 512 --width 768 --num_frames 121 --output_path ./models/train/LTX2_cache
    accelerate launch --config_file deepspeed_zero3_cpuoffload.yaml -m backend.stages.train \\
      --task sft:train --model_id_with_origin_paths "Lightricks/LTX-2:transformer/*.safetensors" \\
      --dataset_base_path ./models/train/LTX2_cache --lora_rank 32 --learning_rate 1e-4 \\
      --lora_target_modules to_k,to_q,to_v,to_out.0 --num_epochs 5 --dataset_repeat 100 \\
      --use_gradient_checkpointing --initialize_model_on_cpu --output_path ./models/train/LTX2_lora

With sound (text-to-video-and-audio, the reference's ``LTX-2-T2AV-splited.sh``; ``t2av.py``):
the same two commands with ``--data_file_keys video,input_audio --extra_inputs input_audio``
(``presets/ltx2_t2av_low_vram.yaml``): stage 1 also encodes each clip's sound (its
``input_audio`` file, else its own audio stream) with the audio VAE, stage 2 trains both
streams' flow. The reading, the mel front end and the muxing are ``audio.py``'s.

CPU (the tiny model)::

    python -m backend.families.tiny /tmp/ltx2 --family ltx2
"""
from backend.families.base import SCHEDULER, TOKENIZER, Component, FamilySpec

REPO = "Lightricks/LTX-2"
# The reference's targets (the attention layers of both streams); diffusers spells them alike.
TARGETS = "to_k,to_q,to_v,to_out.0"


def source(folder: str) -> str:
    return f"{REPO}:{folder}/*.safetensors"


SPEC = FamilySpec(
    name="ltx2",
    title="LTX-2 (video)",
    adapter="backend.families.ltx2.adapter",
    components=(
        Component("transformer", ("LTX2VideoTransformer3DModel",), trained=True,
                  source=source("transformer"), stages=("train", "sample")),
        Component("text_encoder", ("Gemma3ForConditionalGeneration",),
                  source=source("text_encoder"), stages=("data_process", "sample")),
        Component("connectors", ("LTX2TextConnectors",), source=source("connectors"),
                  stages=("data_process", "sample")),
        Component("vae", ("AutoencoderKLLTX2Video",), source=source("vae"),
                  stages=("data_process", "sample")),
        Component("tokenizer", source=f"{REPO}:tokenizer/", stages=("data_process", "sample"),
                  kind=TOKENIZER),
        Component("audio_vae", ("AutoencoderKLLTX2Audio",), source=source("audio_vae"),
                  stages=("sample",)),
        Component("vocoder", ("LTX2Vocoder",), source=source("vocoder"), stages=("sample",)),
        Component("scheduler", source=f"{REPO}:scheduler/", stages=("sample",),
                  kind=SCHEDULER),
    ),
    defaults={
        "model_id_with_origin_paths": ",".join(source(c) for c in (
            "transformer", "text_encoder", "connectors", "vae", "audio_vae", "vocoder")),
        "lora_target_modules": TARGETS,
        "remove_prefix_in_ckpt": "pipe.dit.",
        # The reference's no-audio recipe: 512x768 clips of 121 frames at 24 fps.
        "max_pixels": 512 * 768,
        "num_frames": 121,
        "video_fps": 24.0,
        # LTX2Pipeline's defaults: 512x768, 121 frames at 24 fps, 30 steps, guidance 3.
        "sample_steps": 30,
        "sample_cfg": 3.0,
        "sample_height": 512,
        "sample_width": 768,
        "sample_num_frames": 121,
        "sample_fps": 24,
    },
    recognise_classes=("LTX2Pipeline", "LTX2VideoTransformer3DModel"),
    keywords=("ltx2", "ltx-2"),
    presets_by_vram=("ltx2_t2v_single_gpu", "ltx2_t2v_low_vram"),
    # The video VAE compresses 32x in space (the transformer's patch is 1) and 8x in time.
    resolution_multiple=32,
    frame_multiple=8,
    # extra_inputs input_audio: the clip's sound trained beside its frames (``t2av.py``).
    run_adapters=("backend.families.ltx2.t2av:SoundAdapter",),
)
