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
the vocoder (LTX-2.3's ``LTX2VocoderWithBWE`` writes 48 kHz sound) and the scheduler. Clips
are resampled to 24 fps (the reference's ``--frame_rate 24``).

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

Conditioned (``condition.py``): image-to-video (``--extra_inputs input_image``, with
``input_audio`` the reference's ``LTX-2.3-I2AV-splited.sh``; ``presets/ltx2_i2av_low_vram.yaml``)
keeps each clip's first latent frame clean at timestep 0 as ``LTX2ImageToVideoPipeline``
does; IC-LoRA (``--extra_inputs input_audio,in_context_videos``, the reference's
``LTX-2-T2AV-IC-LoRA-splited.sh``; ``presets/ltx2_ic_lora_low_vram.yaml``) appends each row's
reference video as clean tokens as ``LTX2InContextPipeline`` does.

The reference names its own repackaged files (``DiffSynth-Studio/LTX-2-Repackage``,
``-2.3-Repackage``: ``transformer.safetensors``, ``text_encoder_post_modules.safetensors``,
``video_vae_encoder.safetensors``, ``audio_vae_encoder.safetensors``) and Gemma from
``google/gemma-3-12b-it-qat-q4_0-unquantized``; the importer maps each to the same
component of the diffusers-layout repository (``Lightricks/LTX-2``, ``Lightricks/LTX-2.3``).

CPU (the tiny model)::

    python -m backend.families.tiny /tmp/ltx2 --family ltx2
"""
from dataclasses import dataclass

from backend.core.messages import Msg
from backend.families.base import SCHEDULER, TOKENIZER, Component, FamilySpec, Variant

REPO = "Lightricks/LTX-2"
REPO_2_3 = "Lightricks/LTX-2.3"
# The reference's targets (the attention layers of both streams); diffusers spells them alike.
TARGETS = "to_k,to_q,to_v,to_out.0"
# The reference trainer's repackaged files -> the diffusers-layout repository's components.
REPACKAGED = {"DiffSynth-Studio/LTX-2-Repackage": REPO,
              "DiffSynth-Studio/LTX-2.3-Repackage": REPO_2_3}
REPACKAGED_FILES = {"transformer.safetensors": "transformer",
                    "text_encoder_post_modules.safetensors": "connectors",
                    "video_vae_encoder.safetensors": "vae",
                    "video_vae_decoder.safetensors": "vae",
                    "audio_vae_encoder.safetensors": "audio_vae",
                    "audio_vae_decoder.safetensors": "audio_vae",
                    "audio_vocoder.safetensors": "vocoder"}
# The Gemma 3 12B the reference names (the diffusers repositories hold it as text_encoder/).
GEMMA = "google/gemma-3-12b-it-qat-q4_0-unquantized"


def source(folder: str, repo: str = REPO) -> str:
    return f"{repo}:{folder}/*.safetensors"


def sources(repo: str) -> str:
    return ",".join(source(c, repo) for c in (
        "transformer", "text_encoder", "connectors", "vae", "audio_vae", "vocoder"))


@dataclass(frozen=True)
class Spec(FamilySpec):
    """The family's spec; the reference's sources name another repository than the
    components' (its repackaged files), so they map here rather than by suffix."""

    def map_reference_sources(self, sources: str | None) -> tuple[str | None, list[Msg]]:
        """(``sources`` with each repackaged file and the reference's Gemma renamed to the
        same component of the diffusers-layout repository, one note per renamed entry)."""
        if not sources:
            return sources, []
        entries = [e.strip() for e in sources.split(",") if e.strip()]
        repos = [REPACKAGED[e.rpartition(":")[0]] for e in entries
                 if e.rpartition(":")[0] in REPACKAGED]
        if not repos:
            return sources, []
        out, notes = [], []
        for entry in entries:
            repo, _, pattern = entry.rpartition(":")
            if repo in REPACKAGED and pattern in REPACKAGED_FILES:
                new = source(REPACKAGED_FILES[pattern], REPACKAGED[repo])
            elif repo == GEMMA:
                new = source("text_encoder", repos[0])
            else:
                out.append(entry)
                continue
            notes.append(Msg("import.mapped_source", entry=entry, new=new))
            if new not in out:
                out.append(new)
        return ",".join(out), notes


SPEC = Spec(
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
        # LTX-2's vocoder, or LTX-2.3's with its bandwidth extension (16 -> 48 kHz as released;
        # ``audio.py``).
        Component("vocoder", ("LTX2Vocoder", "LTX2VocoderWithBWE"), source=source("vocoder"),
                  stages=("sample",)),
        Component("scheduler", source=f"{REPO}:scheduler/", stages=("sample",),
                  kind=SCHEDULER),
    ),
    defaults={
        "model_id_with_origin_paths": sources(REPO),
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
    variants=(
        # The reference's repackaged LTX-2 (its files map to Lightricks/LTX-2's on import).
        Variant("ltx2_repackage", "LTX-2", ("DiffSynth-Studio/LTX-2-Repackage",)),
        # LTX-2.3 (the reference's I2AV and IC-LoRA recipes): its own sources.
        Variant("ltx2_3", "LTX-2.3", (REPO_2_3, "DiffSynth-Studio/LTX-2.3-Repackage"),
                defaults={"model_id_with_origin_paths": sources(REPO_2_3)}),
    ),
    keywords=("ltx2", "ltx-2"),
    presets_by_vram=("ltx2_t2v_single_gpu", "ltx2_t2v_low_vram"),
    # The video VAE compresses 32x in space (the transformer's patch is 1) and 8x in time.
    resolution_multiple=32,
    frame_multiple=8,
    # extra_inputs input_audio: the clip's sound trained beside its frames (``t2av.py``).
    # extra_inputs input_image / in_context_videos (with input_audio or not): the first
    # frame or a reference video as clean condition tokens (``condition.py``), tried first.
    run_adapters=("backend.families.ltx2.condition:ConditionAdapter",
                  "backend.families.ltx2.t2av:SoundAdapter",),
)
