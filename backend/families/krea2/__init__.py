"""Krea 2 (Raw and Turbo): text-to-image, diffusers' ``Krea2Pipeline``.

The transformer is ``Krea2Transformer2DModel`` (a single-stream MMDiT whose text enters as
12 tapped hidden states of a Qwen3-VL-4B text encoder, fused by a small text transformer),
the VAE the one ``AutoencoderKLQwenImage`` of another family. Raw is the trainable base; Turbo is distilled (8 steps, no guidance):
training it directly wears the distillation off, so train on Raw and apply the LoRA to
Turbo (same names and shapes), as the reference's own scripts recommend (a run that trains
Turbo is refused unless it merges a de-distillation adapter, ``preset_lora_path``, or sets
``train_distilled``).

The family's data (read when the schema is built); the adapter is ``adapter.py``, the tiny
real-architecture models ``tiny.py``, the published configs the estimator uses before
anything is downloaded ``published.py``.

It captions a dataset with its own text encoder, a whole Qwen3-VL with its vision tower
(``captioner_components``; ``backend/families/qwen3_vl.py``'s ``load_captioner``), so no
captioning model is downloaded besides the weights stage 1 loads anyway.

The reference trainer's sources are single files of other layouts: the original checkpoint
``krea/Krea-2-Raw:raw.safetensors`` (``Krea-2-Turbo:turbo.safetensors``), the
Qwen3-VL-4B-Instruct repository's root weights and a VAE of another family's repository (the
same ``AutoencoderKLQwenImage``). Each is read as the same
component of the diffusers layout in the Krea repository (``transformer/``,
``text_encoder/``, ``vae/``), which the import notes and the stage log say; its tokenizer
``Qwen/Qwen3-VL-4B-Instruct:`` is used as it is. Its targets are the original module names
(``wq,wk,wv,gate,wo,up,down,first,tmlp.0,...``), mapped to diffusers' by
``target_aliases`` (``gate`` names both the attention and the feed-forward gate, as in
the reference).

Split training with the reference's flags (GPU; ``presets/krea2_raw_low_vram.yaml`` is the
same recipe as a run config)::

    accelerate launch -m backend.stages.train --task sft:data_process \\
      --model_id_with_origin_paths "krea/Krea-2-Raw:text_encoder/*.safetensors,krea/Krea-2-Raw:vae/diffusion_pytorch_model.safetensors" \\
      --dataset_base_path data/images --dataset_metadata_path data/images/metadata.csv \\
      --output_path ./models/train/Krea-2-Raw_cache
    accelerate launch --config_file deepspeed_zero3_cpuoffload.yaml -m backend.stages.train \\
      --task sft:train --model_id_with_origin_paths "krea/Krea-2-Raw:transformer/*.safetensors" \\
      --dataset_base_path ./models/train/Krea-2-Raw_cache --lora_rank 32 --learning_rate 1e-4 \\
      --num_epochs 5 --dataset_repeat 50 --use_gradient_checkpointing \\
      --initialize_model_on_cpu --output_path ./models/train/Krea-2-Raw_lora

Tiny CPU pipeline: ``python -m backend.families.tiny OUT_DIR --family krea2``.
"""
from __future__ import annotations

from dataclasses import dataclass

from backend.core.messages import Msg
from backend.families import family_names, family_spec
from backend.families.base import FamilySpec, Variant
from backend.families.common import pipeline_components

RAW = "krea/Krea-2-Raw"
TURBO = "krea/Krea-2-Turbo"
TEXT_ENCODER_REPO = "Qwen/Qwen3-VL-4B-Instruct"
VAE_CLASS = "AutoencoderKLQwenImage"
VAE_FILE = "vae/diffusion_pytorch_model.safetensors"
# The reference's single-file sources -> the component of the diffusers layout.
ORIGINAL_FILES = {"raw.safetensors": "transformer/*.safetensors",
                  "turbo.safetensors": "transformer/*.safetensors"}
OTHER_REPO_FILES = {f"{TEXT_ENCODER_REPO}:*.safetensors": "text_encoder/*.safetensors"}
# Every projection of the transformer: attention q/k/v/gate/out and the SwiGLU of the blocks
# and the text fusion, the image and text inputs, the time MLP and modulation, the output.
TARGETS = ("to_q,to_k,to_v,to_gate,to_out.0,gate,up,down,img_in,time_embed.linear_1,"
           "time_embed.linear_2,projector,txt_in.linear_1,txt_in.linear_2,"
           "final_layer.linear,time_mod_proj")
# The reference's target spellings (the original module names) -> diffusers'.
ALIASES = {"wq": "to_q", "wk": "to_k", "wv": "to_v", "wo": "to_out.0", "first": "img_in",
           "tmlp.0": "time_embed.linear_1", "tmlp.2": "time_embed.linear_2",
           "txtmlp.1": "txt_in.linear_1", "txtmlp.3": "txt_in.linear_2",
           "last.linear": "final_layer.linear", "tproj.1": "time_mod_proj"}


def _same_vae(entry: str, own: str) -> bool:
    """Whether ``entry`` is the VAE of another family's repository whose VAE is this
    family's class (the reference loads Krea 2's VAE from there)."""
    repo, _, pattern = entry.rpartition(":")
    if pattern != VAE_FILE:
        return False
    for name in family_names():
        spec = family_spec(name)
        if name != own and repo in spec.model_ids() and any(
                c.name == "vae" and VAE_CLASS in c.classes for c in spec.components):
            return True
    return False


def sources(repo: str) -> str:
    return (f"{repo}:transformer/*.safetensors,{repo}:text_encoder/*.safetensors,"
            f"{repo}:vae/diffusion_pytorch_model.safetensors")


@dataclass(frozen=True)
class Krea2Spec(FamilySpec):
    """The family's spec; its reference files live in three repositories, so the mapping is
    by whole entry (the Krea repository of the run's transformer holds them all)."""

    def map_reference_sources(self, sources: str | None) -> tuple[str | None, list[Msg]]:
        if not sources:
            return sources, []
        entries = [e.strip() for e in sources.split(",") if e.strip()]
        ids = set(self.model_ids())
        repo = next((e.rpartition(":")[0] for e in entries if e.rpartition(":")[0] in ids),
                    RAW)
        out, notes = [], []
        for entry in entries:
            owner, _, pattern = entry.rpartition(":")
            target = (ORIGINAL_FILES.get(pattern) if owner in ids else
                      OTHER_REPO_FILES.get(entry) or
                      (VAE_FILE if _same_vae(entry, self.name) else None))
            if target is None:
                out.append(entry)
                continue
            new = f"{repo}:{target}"
            notes.append(Msg("import.mapped_source", entry=entry, new=new))
            if new not in out:
                out.append(new)
        return ",".join(out), notes


SPEC = Krea2Spec(
    name="krea2",
    title="Krea 2",
    adapter="backend.families.krea2.adapter",
    components=pipeline_components(
        transformer=(("Krea2Transformer2DModel",), f"{RAW}:transformer/*.safetensors"),
        text_encoder=(("Qwen3VLModel", "Qwen3VLForConditionalGeneration"),
                      f"{RAW}:text_encoder/*.safetensors"),
        vae=((VAE_CLASS,), f"{RAW}:{VAE_FILE}"),
        tokenizer=f"{RAW}:tokenizer/", scheduler=f"{RAW}:scheduler/"),
    defaults={
        "model_id_with_origin_paths": sources(RAW),
        "lora_target_modules": TARGETS,
        "remove_prefix_in_ckpt": "pipe.dit.",
        # Krea2Pipeline's defaults for the base checkpoint: 28 steps, guidance_scale 4.5,
        # which counts only the push away from the negative prompt (the schema's 5.5).
        "sample_steps": 28,
        "sample_cfg": 5.5,
        "sample_height": 1024,
        "sample_width": 1024,
    },
    recognise_classes=("Krea2Pipeline", "Krea2Transformer2DModel"),
    variants=(
        Variant("krea2_raw", "Krea 2 Raw", (RAW,), index_values={"is_distilled": False}),
        Variant("krea2_turbo", "Krea 2 Turbo", (TURBO,), defaults={
            "model_id_with_origin_paths": sources(TURBO),
            # The distilled checkpoint: 8 steps without guidance (Krea2Pipeline's docs).
            "sample_steps": 8,
            "sample_cfg": 1.0,
        }, index_values={"is_distilled": True}, distilled_from="krea2_raw"),
    ),
    target_aliases=ALIASES,
    keywords=("krea2", "krea 2", "krea-2"),
    presets_by_vram=("krea2_raw_single_gpu", "krea2_raw_low_vram"),
    # The VAE's 8 pixels per latent cell times the 2x2 patch.
    resolution_multiple=16,
)
