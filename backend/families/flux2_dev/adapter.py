"""FLUX.2 [dev] family adapter: components, prompt/image encoding, the training loss,
samples, exports.

Components are diffusers' ``Flux2Transformer2DModel`` and ``AutoencoderKLFlux2``,
transformers' ``Mistral3ForConditionalGeneration`` and the tokenizer of its
``PixtralProcessor`` folder with the processor's chat template
(``common.load_chat_tokenizer``: the processor needs torchvision; text prompts need only the
tokenizer). Stage 1 encodes as ``Flux2Pipeline`` does, through its own static methods: the
prompt after the pipeline's system message under Mistral's chat template, padded to 512
tokens, the hidden states of layers 10, 20 and 30 stacked into [1, 512, 3 x hidden]; the
image by the VAE's posterior mode, patchified 2x2 and normalised by the VAE's batch-norm
statistics ([1, 4 x latent channels, H/16, W/16]). The encoders can keep their weights in
host RAM (offload none | model | sequential) without changing what they compute.

The loss: a uniform index into the scheduler's 1000 training sigmas (dynamic shifting
leaves them unshifted: 1.000, 0.999 ... 0.001), x_t = (1 - s) x0 + s noise, the transformer
sees timestep s and the embedded guidance 1 (the reference trainer's ``embedded_guidance``
for training), target noise - x0, plain MSE.

Cached sample tensors: ``prompt_emb`` [1, 512, 3 x hidden], ``latents`` [1, C, H/16, W/16]
(normalised, patchified), ``height``, ``width``.

Samples: ``Flux2Pipeline`` with ``sample_cfg`` as its ``guidance_scale``, the guidance the
transformer embeds (one pass per step; there is no negative prompt).

Exports: diffusers loads ``transformer.<module>`` keys (``Flux2Pipeline.load_lora_weights``);
ComfyUI maps diffusers-style FLUX keys with the ``transformer.`` prefix (its
``flux_to_diffusers`` key map, the FLUX.2 names included), so the ComfyUI export uses
``transformer.`` with ``lora_down`` / ``lora_up`` / ``alpha``, as for the
smaller FLUX.2 models.
"""
from __future__ import annotations

from typing import Any

from backend.families.base import Family, Schedule
from backend.families.common import (OffloadingEncoder, cached_sample, load_chat_tokenizer,
                                     pipeline_loaders)
from backend.families.flux2_dev.published import CONFIGS, SCHEDULER
from backend.families.flux2_dev.tiny import build_tiny_flux2_dev

NUM_TRAIN_TIMESTEPS = 1000
MAX_SEQUENCE_LENGTH = 512
TEXT_LAYERS = (10, 20, 30)
# The guidance the transformer embeds in training (the reference's ``embedded_guidance``).
TRAIN_GUIDANCE = 1.0


# ------------------------------------------------------------------------------------------
# Loading
# ------------------------------------------------------------------------------------------
def transformer_class():
    from diffusers import Flux2Transformer2DModel
    return Flux2Transformer2DModel


def load_text_encoder(folder, dtype=None, device: Any = "cpu"):
    from transformers import Mistral3ForConditionalGeneration

    model = Mistral3ForConditionalGeneration.from_pretrained(str(folder), dtype=dtype)
    return model.to(device).eval().requires_grad_(False)


def load_vae(folder, dtype=None, device: Any = "cpu"):
    from diffusers import AutoencoderKLFlux2

    model = AutoencoderKLFlux2.from_pretrained(str(folder), torch_dtype=dtype)
    return model.to(device).eval().requires_grad_(False)


# ------------------------------------------------------------------------------------------
# Stage 1
# ------------------------------------------------------------------------------------------
class Encoder(OffloadingEncoder):
    """Text encoder + VAE (+ tokenizer), frozen: prompts -> stacked hidden states, images ->
    normalised patchified latents, as ``Flux2Pipeline`` computes them; ``offload`` as
    ``common.OffloadingEncoder``."""

    def __init__(self, text_encoder, tokenizer, vae, device=None, offload: str = "none"):
        self.tokenizer = tokenizer
        super().__init__(text_encoder, vae, device, offload)

    def encode_prompt(self, prompt: str | list[str]):
        """[B, 512, 3 x hidden] as ``Flux2Pipeline.encode_prompt`` computes it (its system
        message, the hidden states of layers 10, 20 and 30)."""
        import torch
        from diffusers import Flux2Pipeline

        with torch.no_grad():
            return Flux2Pipeline._get_mistral_3_small_prompt_embeds(
                self.text_encoder, self.tokenizer, prompt, dtype=self.text_encoder.dtype,
                device=self.device, max_sequence_length=MAX_SEQUENCE_LENGTH,
                hidden_states_layers=TEXT_LAYERS)

    def encode_image(self, pixels):
        """Pixels [B, 3, H, W] in [-1, 1] -> [B, 4 x latent channels, H/16, W/16]: the VAE's
        posterior mode, patchified and normalised (the pipeline's ``_encode_vae_image``)."""
        import torch
        from diffusers import Flux2Pipeline

        vae = self.vae
        with torch.no_grad():
            x = pixels.to(device=self.device, dtype=vae.dtype)
            z = Flux2Pipeline._patchify_latents(vae.encode(x).latent_dist.mode())
            mean = vae.bn.running_mean.view(1, -1, 1, 1).to(z)
            std = torch.sqrt(vae.bn.running_var.view(1, -1, 1, 1) +
                             vae.config.batch_norm_eps).to(z)
            return (z - mean) / std

    def prompt_parts(self, prompt: str) -> tuple:
        return (self.encode_prompt([prompt]),)

    def make_sample(self, parts: tuple, latents, pixels) -> dict[str, Any]:
        return cached_sample(latents, pixels, prompt_emb=parts[0])


# ------------------------------------------------------------------------------------------
# Training loss
# ------------------------------------------------------------------------------------------
def training_schedule() -> Schedule:
    """The scheduler's 1000 training sigmas (1.000, 0.999 ... 0.001); no weights."""
    from diffusers import FlowMatchEulerDiscreteScheduler

    return Schedule(FlowMatchEulerDiscreteScheduler(**SCHEDULER).sigmas.float())


def pack_latents(latents):
    """[B, C, h, w] (patchified) -> [B, h * w, C] (the pipeline's ``_pack_latents``)."""
    from diffusers import Flux2Pipeline
    return Flux2Pipeline._pack_latents(latents)


def predict(transformer, noisy_latents, sigma, prompt_emb):
    """The flow prediction for patchified latents [B, C, h, w], packed [B, h * w, C], with
    the training guidance embedded."""
    import torch
    from diffusers import Flux2Pipeline

    b = noisy_latents.shape[0]
    img_ids = Flux2Pipeline._prepare_latent_ids(noisy_latents).to(noisy_latents.device)
    txt_ids = Flux2Pipeline._prepare_text_ids(prompt_emb).to(prompt_emb.device)
    guidance = torch.full((b,), TRAIN_GUIDANCE, device=noisy_latents.device,
                          dtype=torch.float32)
    packed = pack_latents(noisy_latents)
    out = transformer(hidden_states=packed, timestep=sigma.expand(b), guidance=guidance,
                      encoder_hidden_states=prompt_emb, txt_ids=txt_ids, img_ids=img_ids,
                      return_dict=False)[0]
    return out[:, : packed.shape[1]]


def flow_matching_loss(transformer, sample, schedule: Schedule, index: int, noise, dtype):
    """MSE of the flow prediction at schedule ``index`` with ``noise`` (no weighting)."""
    import torch.nn.functional as F

    x0 = sample["latents"].to(dtype)
    device = x0.device
    sigma = schedule.sigmas[index].to(device=device, dtype=dtype)
    noise = noise.to(device=device, dtype=dtype)
    x_t = (1 - sigma) * x0 + sigma * noise
    pred = predict(transformer, x_t, sigma, sample["prompt_emb"].to(device=device, dtype=dtype))
    return F.mse_loss(pred.float(), pack_latents(noise - x0).float())


# ------------------------------------------------------------------------------------------
# Samples
# ------------------------------------------------------------------------------------------
def render(pipe, prompt: str, *, negative_prompt: str, generator, steps: int, cfg: float,
           height: int, width: int):
    """One image; ``cfg`` is the pipeline's ``guidance_scale``, the guidance the
    transformer embeds (the pipeline has no negative prompt, so ``negative_prompt`` is not
    used)."""
    import torch

    with torch.inference_mode():
        return pipe(prompt=prompt, guidance_scale=cfg, num_inference_steps=steps,
                    height=height, width=width, generator=generator).images[0]


# ------------------------------------------------------------------------------------------
# The contract
# ------------------------------------------------------------------------------------------
class Adapter(Family):
    """FLUX.2 [dev] through the family contract (``backend/families/base.py``)."""

    # ComfyUI maps diffusers-style FLUX keys with the ``transformer.`` prefix (or none).
    export_prefixes = {"reference": "", "diffusers": "transformer.",
                       "comfyui": "transformer."}
    offload_blocks = ("transformer_blocks", "single_transformer_blocks")
    # In/out projections, the shared modulations and the time and guidance embedding stay
    # in full precision.
    quantize_skip = ("x_embedder", "context_embedder", "proj_out", "norm_out",
                     "time_guidance_embed", "double_stream_modulation_img",
                     "double_stream_modulation_txt", "single_stream_modulation")

    # Stage 1 and samples (``Family.load_encoder`` / ``load_pipeline``).
    encoder = Encoder
    pipeline = "Flux2Pipeline"
    loaders = {**pipeline_loaders(load_text_encoder, load_vae),
               "tokenizer": load_chat_tokenizer}

    # The contract's members are this module's functions (a step's draw is the default's:
    # a uniform schedule index and fresh noise).
    transformer_class = staticmethod(transformer_class)
    training_schedule = staticmethod(training_schedule)
    loss_at = staticmethod(flow_matching_loss)
    render = staticmethod(render)

    def published_configs(self):
        return {k: dict(v) for k, v in CONFIGS.items()}

    def transformer_shape(self, config):
        """(double + single blocks, heads x head dim)."""
        return (int(config["num_layers"]) + int(config["num_single_layers"]),
                int(config["num_attention_heads"]) * int(config["attention_head_dim"]))

    def build_tiny(self, out_dir, seed=0, variant=None):
        return build_tiny_flux2_dev(out_dir, seed)
