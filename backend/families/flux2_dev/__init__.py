"""FLUX.2 [dev]: text-to-image, diffusers' ``Flux2Pipeline`` (``black-forest-labs/FLUX.2-dev``).

The transformer is ``Flux2Transformer2DModel``, the class the smaller FLUX.2 models train,
at 32 B (8 double + 48 single blocks, guidance-distilled: it embeds a guidance value); the text
encoder is Mistral Small 3.1 (``Mistral3ForConditionalGeneration``, 24 B), whose hidden
states at layers 10, 20 and 30 are the prompt embedding; the VAE is FLUX.2's. Everything
comes from the one repository, as the reference trainer's FLUX.2-dev LoRA script names it
(split training: stage 1 the text encoder and VAE, stage 2 the transformer; the tokenizer
its default, ``FLUX.2-dev:tokenizer/``)::

    stage 1  FLUX.2-dev:text_encoder/*.safetensors, FLUX.2-dev:vae/diffusion_pytorch_model.safetensors
    stage 2  FLUX.2-dev:transformer/*.safetensors

The family's data (read when the schema is built); the adapter is ``adapter.py``, the tiny
real-architecture models ``tiny.py``, the published configs the estimator uses before
anything is downloaded ``published.py``.

Recognition. The pipeline class ``Flux2Pipeline`` names it; its transformer's class is the
smaller FLUX.2 models' too, so a transformer folder alone is told apart by the text encoder
beside it or among the sources (``Mistral3ForConditionalGeneration`` here, a Qwen3 model
there); a source of the other family (its Qwen3 text encoder with this transformer) is
refused by the config's validation, naming the field.

LoRA targets. As for the smaller FLUX.2 models, a double block's ``attn.to_out`` is a
ModuleList and a single block's the Linear itself, so the targets name ``to_out.0`` and each
single block's ``single_transformer_blocks.N.attn.to_out`` (N = 0..47), as the reference's
script does; its module names are diffusers' own, so ``target_aliases`` maps nothing.

The tokenizer folder holds a ``PixtralProcessor`` (Mistral's tokenizer and an image
processor), which needs torchvision to build; prompts need only its tokenizer and chat
template (``common.load_chat_tokenizer``).
"""
from backend.families.base import FamilySpec
from backend.families.common import pipeline_components

REPO = "black-forest-labs/FLUX.2-dev"
SOURCES = (f"{REPO}:text_encoder/*.safetensors,{REPO}:transformer/*.safetensors,"
           f"{REPO}:vae/diffusion_pytorch_model.safetensors")
SINGLE_BLOCKS = 48
# The reference's FLUX.2-dev LoRA target list: the double and single blocks' projections,
# then one to_out per single block.
BLOCK_TARGETS = ("to_q,to_k,to_v,add_q_proj,add_k_proj,add_v_proj,to_qkv_mlp_proj,to_out.0,"
                 "to_add_out,linear_in,linear_out")


def single_block_targets(n: int = SINGLE_BLOCKS) -> str:
    """The reference's spelling of the single blocks' output projections, one per block."""
    return ",".join(f"single_transformer_blocks.{i}.attn.to_out" for i in range(n))


SPEC = FamilySpec(
    name="flux2_dev",
    title="FLUX.2 [dev]",
    adapter="backend.families.flux2_dev.adapter",
    components=pipeline_components(
        transformer=(("Flux2Transformer2DModel",), f"{REPO}:transformer/*.safetensors"),
        text_encoder=(("Mistral3ForConditionalGeneration",),
                      f"{REPO}:text_encoder/*.safetensors"),
        vae=(("AutoencoderKLFlux2",), f"{REPO}:vae/diffusion_pytorch_model.safetensors"),
        tokenizer=f"{REPO}:tokenizer/", scheduler=f"{REPO}:scheduler/"),
    defaults={
        "model_id_with_origin_paths": SOURCES,
        "lora_target_modules": f"{BLOCK_TARGETS},{single_block_targets()}",
        "remove_prefix_in_ckpt": "pipe.dit.",
        # Flux2Pipeline's defaults: 50 steps, embedded guidance 4 (no classifier-free
        # guidance: the model is guidance-distilled), 1024 x 1024.
        "sample_steps": 50,
        "sample_cfg": 4.0,
        "sample_height": 1024,
        "sample_width": 1024,
    },
    recognise_classes=("Flux2Pipeline",),
    # "flux2" and "flux.2" name both FLUX.2 families.
    keywords=("flux2", "flux.2", "flux2_dev", "flux.2-dev", "flux.2 [dev]"),
    presets_by_vram=("flux2_dev_single_gpu", "flux2_dev_low_vram"),
)
