"""FLUX.2 [klein] family adapter: what is its own beside what the FLUX.2 families share
(``backend/families/flux2.py``: the image encoding, the flow prediction and loss, samples,
exports).

Components are diffusers' ``Flux2Transformer2DModel`` and ``AutoencoderKLFlux2``,
transformers' ``Qwen3ForCausalLM`` and its tokenizer. Stage 1 encodes as
``Flux2KleinPipeline`` does, through its own static methods: the prompt under Qwen3's chat
template (thinking off), padded to 512 tokens, the hidden states of layers 9, 18 and 27
stacked into [1, 512, 3 x hidden]; the image as every FLUX.2 pipeline does. The encoders can
keep their weights in host RAM (offload none | model | sequential) without changing what
they compute.

The loss is diffusers' klein LoRA example's (``train_dreambooth_lora_flux2_klein.py`` with
its default ``--weighting_scheme none``): a uniform index into the scheduler's 1000
training sigmas, drawn as the example draws it (``training_loss``), and the shared flow
loss; the klein transformers embed no guidance, so the prediction passes none.

Exports: diffusers loads ``transformer.<module>`` keys (``Flux2KleinPipeline.
load_lora_weights``); ComfyUI's as for every FLUX.2 model (``flux2.py``).
"""
from __future__ import annotations

from typing import Any

from backend.families import flux2
from backend.families.base import Schedule
from backend.families.common import frozen, pipeline_loaders
from backend.families.flux2_klein.published import CONFIGS, CONFIGS_9B

PIPELINE = "Flux2KleinPipeline"
NUM_TRAIN_TIMESTEPS = 1000
TEXT_LAYERS = (9, 18, 27)


# ------------------------------------------------------------------------------------------
# Loading
# ------------------------------------------------------------------------------------------
def load_text_encoder(folder, dtype=None, device: Any = "cpu"):
    from transformers import Qwen3ForCausalLM

    model = Qwen3ForCausalLM.from_pretrained(str(folder), dtype=dtype)
    return frozen(model, device)


# ------------------------------------------------------------------------------------------
# Stage 1
# ------------------------------------------------------------------------------------------
class Encoder(flux2.Encoder):
    """The FLUX.2 encoder with ``Flux2KleinPipeline``'s prompt embedding: Qwen3's hidden
    states of layers 9, 18 and 27."""

    pipeline = PIPELINE
    prompt_embeds = "_get_qwen3_prompt_embeds"
    text_layers = TEXT_LAYERS


# ------------------------------------------------------------------------------------------
# Training loss
# ------------------------------------------------------------------------------------------
def train_guidance(transformer) -> float | None:
    """The guidance embedded in training: 1 where the transformer's config embeds guidance
    (no klein model's does), else none."""
    config = getattr(transformer, "config", None)
    return 1.0 if config is not None and getattr(config, "guidance_embeds", False) else None


FLOW = flux2.Flow(PIPELINE, guidance=train_guidance)


def training_loss(transformer, sample, schedule: Schedule, generator, dtype):
    """One step: u ~ U(0, 1), index = int(u * 1000) (the example's ``weighting_scheme
    none``), fresh noise; both drawn from ``generator``."""
    import torch

    u = torch.rand((1,), generator=generator)
    index = min(int(u * NUM_TRAIN_TIMESTEPS), NUM_TRAIN_TIMESTEPS - 1)
    noise = torch.randn(sample["latents"].shape, generator=generator)
    return FLOW.loss_at(transformer, sample, schedule, index, noise, dtype)


# ------------------------------------------------------------------------------------------
# The contract
# ------------------------------------------------------------------------------------------
class Adapter(flux2.Flux2Adapter):
    """FLUX.2 [klein] through the family contract (``backend/families/base.py``)."""

    # Stage 1 and samples (``Family.load_encoder`` / ``load_pipeline``).
    encoder = Encoder
    pipeline = PIPELINE
    loaders = pipeline_loaders(load_text_encoder, flux2.load_vae)

    # The step's draw is the example's (``training_loss``), not the default's uniform index.
    training_loss = staticmethod(training_loss)
    loss_at = staticmethod(FLOW.loss_at)

    published = CONFIGS
    published_by_variant = {"base_9b": CONFIGS_9B}

    def lora_module_map(self, config=None):
        """Module map of ``config``; without one the 9B model's, whose names hold the 4B's
        (5 of its 8 double blocks, 20 of its 24 single blocks), so a LoRA of either size
        checks against the published names (sizes are not checked then)."""
        if config is None:
            config = self.variant_configs("base_9b")["transformer"]
        return super().lora_module_map(config)

    def build_tiny(self, out_dir, seed=0, variant=None):  # the variants differ only in size
        from backend.families.flux2_klein.tiny import build_tiny_flux2_klein
        return build_tiny_flux2_klein(out_dir, seed)
