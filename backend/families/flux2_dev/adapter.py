"""FLUX.2 [dev] family adapter: what is its own beside what the FLUX.2 families share
(``backend/families/flux2.py``: the image encoding, the flow prediction and loss, samples,
exports).

Components are diffusers' ``Flux2Transformer2DModel`` and ``AutoencoderKLFlux2``,
transformers' ``Mistral3ForConditionalGeneration`` and the tokenizer of its
``PixtralProcessor`` folder with the processor's chat template
(``common.load_chat_tokenizer``: the processor needs torchvision; text prompts need only the
tokenizer). Stage 1 encodes as ``Flux2Pipeline`` does, through its own static methods: the
prompt after the pipeline's system message under Mistral's chat template, padded to 512
tokens, the hidden states of layers 10, 20 and 30 stacked into [1, 512, 3 x hidden]; the
image as every FLUX.2 pipeline does. The encoders can keep their weights in host RAM
(offload none | model | sequential) without changing what they compute.

The loss: a uniform index into the scheduler's 1000 training sigmas (the default draw) and
the shared flow loss, the transformer embedding the guidance 1 (the reference trainer's
``embedded_guidance`` for training).

Samples: ``Flux2Pipeline`` with ``sample_cfg`` as its ``guidance_scale``, the guidance the
transformer embeds (one pass per step; there is no negative prompt).

Exports: diffusers loads ``transformer.<module>`` keys (``Flux2Pipeline.load_lora_weights``);
ComfyUI's as for the smaller FLUX.2 models (``flux2.py``).
"""
from __future__ import annotations

from typing import Any

from backend.families import flux2
from backend.families.common import frozen, load_chat_tokenizer, pipeline_loaders
from backend.families.flux2_dev.published import CONFIGS
from backend.families.flux2_dev.tiny import build_tiny_flux2_dev

PIPELINE = "Flux2Pipeline"
TEXT_LAYERS = (10, 20, 30)
# The guidance the transformer embeds in training (the reference's ``embedded_guidance``).
TRAIN_GUIDANCE = 1.0


# ------------------------------------------------------------------------------------------
# Loading
# ------------------------------------------------------------------------------------------
def load_text_encoder(folder, dtype=None, device: Any = "cpu"):
    from transformers import Mistral3ForConditionalGeneration

    model = Mistral3ForConditionalGeneration.from_pretrained(str(folder), dtype=dtype)
    return frozen(model, device)


# ------------------------------------------------------------------------------------------
# Stage 1
# ------------------------------------------------------------------------------------------
class Encoder(flux2.Encoder):
    """The FLUX.2 encoder with ``Flux2Pipeline``'s prompt embedding: its system message,
    Mistral's hidden states of layers 10, 20 and 30."""

    pipeline = PIPELINE
    prompt_embeds = "_get_mistral_3_small_prompt_embeds"
    text_layers = TEXT_LAYERS


# ------------------------------------------------------------------------------------------
# Training loss
# ------------------------------------------------------------------------------------------
def train_guidance(transformer) -> float:
    """The guidance embedded in training, whatever the transformer."""
    return TRAIN_GUIDANCE


FLOW = flux2.Flow(PIPELINE, guidance=train_guidance)


# ------------------------------------------------------------------------------------------
# The contract
# ------------------------------------------------------------------------------------------
class Adapter(flux2.Flux2Adapter):
    """FLUX.2 [dev] through the family contract (``backend/families/base.py``)."""

    # Stage 1 and samples (``Family.load_encoder`` / ``load_pipeline``).
    encoder = Encoder
    pipeline = PIPELINE
    loaders = {**pipeline_loaders(load_text_encoder, flux2.load_vae),
               "tokenizer": load_chat_tokenizer}

    # A step's draw is the default's: a uniform schedule index and fresh noise.
    loss_at = staticmethod(FLOW.loss_at)

    published = CONFIGS

    def build_tiny(self, out_dir, seed=0, variant=None):
        return build_tiny_flux2_dev(out_dir, seed)
