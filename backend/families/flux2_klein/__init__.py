"""FLUX.2 [klein]: text-to-image, diffusers' ``Flux2KleinPipeline``.

LoRAs are trained on the undistilled base models (``FLUX.2-klein-base-4B`` / ``-9B``); the
step-distilled klein models render fast but training them breaks the distillation. As in
the reference trainer's klein-base split-training script, stage 1 takes the text encoder
(Qwen3), the VAE and the tokenizer from the distilled repo (the base repos hold the same
files) and stage 2 the base transformer::

    stage 1  FLUX.2-klein-4B:text_encoder/*.safetensors, :vae/..., tokenizer FLUX.2-klein-4B:tokenizer/
    stage 2  FLUX.2-klein-base-4B:transformer/*.safetensors

The family's data (read when the schema is built); the adapter is ``adapter.py``, the tiny
real-architecture models ``tiny.py``, the published configs the estimator uses before
anything is downloaded ``published.py``.

LoRA targets. A double block's ``attn.to_out`` is a ModuleList (``to_out.0`` is its
Linear), a single block's ``attn.to_out`` is the Linear itself; peft cannot wrap a list, so
the targets name ``to_out.0`` for the double blocks and each single block's
``single_transformer_blocks.N.attn.to_out`` (N = 0..19 for 4B, 0..23 for 9B), as the
reference's klein LoRA scripts do. The reference's module names are diffusers' own
(``linear_in``, ``to_qkv_mlp_proj``...), so ``target_aliases`` maps nothing.
"""
from backend.families.base import FamilySpec, Variant
from backend.families.common import pipeline_components

ORG = "black-forest-labs"
DISTILLED_4B, BASE_4B = f"{ORG}/FLUX.2-klein-4B", f"{ORG}/FLUX.2-klein-base-4B"
DISTILLED_9B, BASE_9B = f"{ORG}/FLUX.2-klein-9B", f"{ORG}/FLUX.2-klein-base-9B"
# The double blocks' and the single blocks' fused projections, then one to_out per single
# block: the reference's klein LoRA target list.
BLOCK_TARGETS = ("to_q,to_k,to_v,to_out.0,add_q_proj,add_k_proj,add_v_proj,to_add_out,"
                 "linear_in,linear_out,to_qkv_mlp_proj")


def single_block_targets(n: int) -> str:
    """The reference's spelling of the single blocks' output projections, one per block."""
    return ",".join(f"single_transformer_blocks.{i}.attn.to_out" for i in range(n))


def sources(distilled: str, base: str) -> str:
    return (f"{distilled}:text_encoder/*.safetensors,{base}:transformer/*.safetensors,"
            f"{distilled}:vae/diffusion_pytorch_model.safetensors")


SPEC = FamilySpec(
    name="flux2_klein",
    title="FLUX.2 [klein]",
    adapter="backend.families.flux2_klein.adapter",
    components=pipeline_components(
        transformer=(("Flux2Transformer2DModel",), f"{BASE_4B}:transformer/*.safetensors"),
        text_encoder=(("Qwen3ForCausalLM",), f"{DISTILLED_4B}:text_encoder/*.safetensors"),
        vae=(("AutoencoderKLFlux2",), f"{DISTILLED_4B}:vae/diffusion_pytorch_model.safetensors"),
        tokenizer=f"{DISTILLED_4B}:tokenizer/", scheduler=f"{BASE_4B}:scheduler/"),
    defaults={
        "model_id_with_origin_paths": sources(DISTILLED_4B, BASE_4B),
        "lora_target_modules": f"{BLOCK_TARGETS},{single_block_targets(20)}",
        "remove_prefix_in_ckpt": "pipe.dit.",
        # diffusers' klein-base defaults: 50 steps, guidance 4 (the distilled models: 4, 1).
        "sample_steps": 50,
        "sample_cfg": 4.0,
        "sample_height": 1024,
        "sample_width": 1024,
    },
    recognise_classes=("Flux2KleinPipeline", "Flux2Transformer2DModel"),
    variants=(
        Variant("base_4b", "FLUX.2 [klein] base 4B", (BASE_4B, DISTILLED_4B)),
        Variant("base_9b", "FLUX.2 [klein] base 9B", (BASE_9B, DISTILLED_9B), defaults={
            "model_id_with_origin_paths": sources(DISTILLED_9B, BASE_9B),
            "tokenizer_path": f"{DISTILLED_9B}:tokenizer/",
            "lora_target_modules": f"{BLOCK_TARGETS},{single_block_targets(24)}",
        }),
    ),
    keywords=("flux2", "flux.2", "klein"),
    presets_by_vram=("flux2_klein_9b_single_gpu", "flux2_klein_4b_single_gpu",
                     "flux2_klein_9b_low_vram", "flux2_klein_4b_low_vram"),
)
