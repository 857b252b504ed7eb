"""What the FLUX.2 families share: one transformer (diffusers' ``Flux2Transformer2DModel``),
one VAE (``AutoencoderKLFlux2``) and one scheduler, so one image encoding, one training
schedule, one flow prediction and loss, one adapter shape and one tiny transformer and VAE.
A family's folder says what is its own: its pipeline (whose static methods, the same in
every FLUX.2 pipeline, encode and pack), its text encoder and how the pipeline embeds a
prompt, the guidance its transformer embeds in training, and a step's draw.

Stage 1 encodes an image as the pipelines' ``_encode_vae_image`` does: the VAE's posterior
mode, patchified 2x2 and normalised by the VAE's batch-norm statistics ([B, 4 x latent
channels, H/16, W/16]); a prompt by the pipeline's own prompt embedding, padded to 512
tokens, three hidden-state layers stacked into [B, 512, 3 x hidden].

The loss: a sigma s of the scheduler's 1000 training sigmas (dynamic shifting leaves them
unshifted: 1.000, 0.999 ... 0.001), x_t = (1 - s) x0 + s noise, the transformer sees
timestep s (and the family's guidance, if any), target noise - x0, plain MSE on the packed
tokens.

Cached sample tensors: ``prompt_emb`` [1, 512, 3 x hidden], ``latents`` [1, C, H/16, W/16]
(normalised, patchified), ``height``, ``width``.

Exports: diffusers loads ``transformer.<module>`` keys (the pipelines' ``load_lora_weights``);
ComfyUI maps diffusers-style FLUX keys only with the ``transformer.`` prefix or none (its
``flux_to_diffusers`` key map, which knows FLUX.2's ``linear_in`` / ``to_qkv_mlp_proj``
names; ``diffusion_model.`` + diffusers names is not loaded), so the ComfyUI export uses
``transformer.`` with ``lora_down`` / ``lora_up`` / ``alpha``.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from backend.families import flux2_checkpoint
from backend.families.base import Family, Schedule
from backend.families.common import (OffloadingEncoder, cached_sample, frozen,
                                     save_tiny_pipeline, weighted_mse)

MAX_SEQUENCE_LENGTH = 512

# ------------------------------------------------------------------------------------------
# Published configs (the same files in every FLUX.2 repository)
# ------------------------------------------------------------------------------------------
# diffusers' ``AutoencoderKLFlux2`` defaults (the FLUX.2 VAE: 32 latent channels).
VAE: dict[str, Any] = {
    "_class_name": "AutoencoderKLFlux2",
    "block_out_channels": [128, 256, 512, 512],
    "latent_channels": 32,
    "layers_per_block": 2,
    "norm_num_groups": 32,
    "patch_size": [2, 2],
    "batch_norm_eps": 0.0001,
}
# FLUX.2's ``FlowMatchEulerDiscreteScheduler`` settings (dynamic shifting).
SCHEDULER: dict[str, Any] = dict(
    base_image_seq_len=256, base_shift=0.5, max_image_seq_len=4096, max_shift=1.15,
    num_train_timesteps=1000, shift=3.0, use_dynamic_shifting=True,
    time_shift_type="exponential",
)


# ------------------------------------------------------------------------------------------
# Loading
# ------------------------------------------------------------------------------------------
def pipeline_class(name: str) -> type:
    """diffusers' pipeline class ``name`` (a family's ``Family.pipeline``)."""
    import diffusers

    return getattr(diffusers, name)


def transformer_class():
    from diffusers import Flux2Transformer2DModel
    return Flux2Transformer2DModel


def load_vae(folder, dtype=None, device: Any = "cpu"):
    from diffusers import AutoencoderKLFlux2

    model = AutoencoderKLFlux2.from_pretrained(str(folder), torch_dtype=dtype)
    return frozen(model, device)


# ------------------------------------------------------------------------------------------
# Stage 1
# ------------------------------------------------------------------------------------------
class Encoder(OffloadingEncoder):
    """Text encoder + VAE (+ tokenizer), frozen: prompts -> stacked hidden states, images ->
    normalised patchified latents, as ``pipeline`` computes them; ``offload`` as
    ``common.OffloadingEncoder``. A family's encoder names its ``pipeline``, the pipeline's
    static method that embeds a prompt (``prompt_embeds``) and the hidden-state layers it
    stacks (``text_layers``)."""

    pipeline: str
    prompt_embeds: str
    text_layers: tuple[int, ...]

    def __init__(self, text_encoder, tokenizer, vae, device=None, offload: str = "none"):
        self.tokenizer = tokenizer
        super().__init__(text_encoder, vae, device, offload)

    def encode_prompt(self, prompt: str | list[str]):
        """[B, 512, 3 x hidden] as the pipeline's ``encode_prompt`` computes it."""
        import torch

        embed = getattr(pipeline_class(self.pipeline), self.prompt_embeds)
        with torch.no_grad():
            return embed(self.text_encoder, self.tokenizer, prompt, dtype=self.text_encoder.dtype,
                         device=self.device, max_sequence_length=MAX_SEQUENCE_LENGTH,
                         hidden_states_layers=self.text_layers)

    def encode_image(self, pixels):
        """Pixels [B, 3, H, W] in [-1, 1] -> [B, 4 x latent channels, H/16, W/16]: the VAE's
        posterior mode, patchified and normalised (the pipeline's ``_encode_vae_image``)."""
        import torch

        vae = self.vae
        with torch.no_grad():
            x = pixels.to(device=self.device, dtype=vae.dtype)
            z = pipeline_class(self.pipeline)._patchify_latents(vae.encode(x).latent_dist.mode())
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


@dataclass(frozen=True)
class Flow:
    """One family's flow prediction and loss, through ``pipeline``'s static methods
    (``_pack_latents``, ``_prepare_latent_ids``, ``_prepare_text_ids``); ``guidance``
    gives, for a transformer, the value it embeds in training (None: no guidance)."""

    pipeline: str
    guidance: Callable[[Any], float | None]

    def pack_latents(self, latents):
        """[B, C, h, w] (patchified) -> [B, h * w, C] (the pipeline's ``_pack_latents``)."""
        return pipeline_class(self.pipeline)._pack_latents(latents)

    def predict(self, transformer, noisy_latents, sigma, prompt_emb):
        """The flow prediction for patchified latents [B, C, h, w], packed [B, h * w, C]."""
        import torch

        pipe = pipeline_class(self.pipeline)
        b = noisy_latents.shape[0]
        img_ids = pipe._prepare_latent_ids(noisy_latents).to(noisy_latents.device)
        txt_ids = pipe._prepare_text_ids(prompt_emb).to(prompt_emb.device)
        value = self.guidance(transformer)
        guidance = (None if value is None else
                    torch.full((b,), value, device=noisy_latents.device, dtype=torch.float32))
        packed = self.pack_latents(noisy_latents)
        out = transformer(hidden_states=packed, timestep=sigma.expand(b), guidance=guidance,
                          encoder_hidden_states=prompt_emb, txt_ids=txt_ids, img_ids=img_ids,
                          return_dict=False)[0]
        return out[:, : packed.shape[1]]

    def loss_at(self, transformer, sample, schedule: Schedule, index: int, noise, dtype):
        """MSE of the flow prediction at schedule ``index`` with ``noise`` (no schedule
        weighting; a ``loss_mask`` weights it per latent cell: ``weighted_mse``)."""
        x0 = sample["latents"].to(dtype)
        device = x0.device
        sigma = schedule.sigmas[index].to(device=device, dtype=dtype)
        noise = noise.to(device=device, dtype=dtype)
        x_t = (1 - sigma) * x0 + sigma * noise
        pred = self.predict(transformer, x_t, sigma,
                            sample["prompt_emb"].to(device=device, dtype=dtype))
        return weighted_mse(pred, self.pack_latents(noise - x0), sample, x0,
                            self.pack_latents)


# ------------------------------------------------------------------------------------------
# Samples
# ------------------------------------------------------------------------------------------
def render(pipe, prompt: str, *, negative_prompt: str, generator, steps: int, cfg: float,
           height: int, width: int):
    """One image; ``cfg`` is the pipeline's ``guidance_scale`` (classifier-free guidance
    against the empty prompt when above 1 for a transformer that embeds no guidance, the
    embedded guidance for one that does; the pipelines have no negative prompt, so
    ``negative_prompt`` is not used)."""
    import torch

    with torch.inference_mode():
        return pipe(prompt=prompt, guidance_scale=cfg, num_inference_steps=steps,
                    height=height, width=width, generator=generator).images[0]


# ------------------------------------------------------------------------------------------
# The contract: what the FLUX.2 adapters share
# ------------------------------------------------------------------------------------------
class Flux2Adapter(Family):
    """The members every FLUX.2 family's ``Adapter`` has (``backend/families/base.py``); a
    family adds its encoder, pipeline, loaders, loss, published configs and tiny model."""

    # ComfyUI maps diffusers-style FLUX keys with the ``transformer.`` prefix (or none).
    export_prefixes = {"reference": "", "diffusers": "transformer.",
                       "comfyui": "transformer."}
    offload_blocks = ("transformer_blocks", "single_transformer_blocks")
    # In/out projections, the shared modulations and the time (and guidance) embedding stay
    # in full precision.
    quantize_skip = ("x_embedder", "context_embedder", "proj_out", "norm_out",
                     "time_guidance_embed", "double_stream_modulation_img",
                     "double_stream_modulation_txt", "single_stream_modulation")

    transformer_class = staticmethod(transformer_class)
    training_schedule = staticmethod(training_schedule)
    render = staticmethod(render)

    def full_checkpoint_names(self, shapes, fmt):
        """The single-file names of a full checkpoint (``flux2_checkpoint.py``)."""
        return flux2_checkpoint.names(shapes, fmt)

    def transformer_shape(self, config):
        """(double + single blocks, heads x head dim)."""
        return (int(config["num_layers"]) + int(config["num_single_layers"]),
                int(config["num_attention_heads"]) * int(config["attention_head_dim"]))


# ------------------------------------------------------------------------------------------
# Tiny models: the transformer, VAE and scheduler around a family's tiny text encoder
# ------------------------------------------------------------------------------------------
# The caption words the tiny tokenizers are trained on, and their size (a byte-level BPE,
# control tokens included).
TINY_VOCAB_SENTENCES = [
    "a red circle on a white background", "a green square on a white background",
    "a blue triangle on a white background", "a yellow circle on a black background",
    "a small big large tiny shape in the center, zlr style, zerolora, checkerboard pattern",
    "a picture an image of the a and with on in at, left right top bottom middle photo cat",
    "red green blue yellow purple magenta orange black white gray circle square triangle",
    "0 1 2 3 4 5 6 7 8 9 . , : ; ! ? ' \" ( ) - _",
]
TINY_VOCAB_SIZE = 512
TINY_TEXT_HIDDEN = 16      # a tiny text encoder's width; three layers stack to 48 features
TINY_TRANSFORMER = dict(
    patch_size=1, in_channels=16, num_layers=2, num_single_layers=2, attention_head_dim=16,
    num_attention_heads=2, joint_attention_dim=3 * TINY_TEXT_HIDDEN,
    timestep_guidance_channels=32, mlp_ratio=3.0, axes_dims_rope=(4, 4, 4, 4),
)
TINY_VAE = dict(
    block_out_channels=(8, 8, 8, 8), layers_per_block=1, latent_channels=4,
    norm_num_groups=4, sample_size=64,
)


def tiny_components(tokenizer, text_encoder, seed: int, guidance_embeds: bool) -> dict:
    """The pipeline's components around a family's tiny ``tokenizer`` and ``text_encoder``:
    the VAE (four levels, 8 pixels per latent cell as the real one, 4 latent channels: 16
    after the 2x2 patchify, the transformer's ``in_channels``), the transformer (2 double +
    2 single blocks, 2 heads x 16, ``guidance_embeds``) random-init from ``seed``
    (float32), and the scheduler with FLUX.2's settings."""
    import torch
    from diffusers import (AutoencoderKLFlux2, FlowMatchEulerDiscreteScheduler,
                           Flux2Transformer2DModel)

    torch.manual_seed(seed * 1000 + 2)
    vae = AutoencoderKLFlux2(**TINY_VAE).eval()
    torch.manual_seed(seed * 1000 + 3)
    transformer = Flux2Transformer2DModel(**TINY_TRANSFORMER,
                                          guidance_embeds=guidance_embeds).eval()
    scheduler = FlowMatchEulerDiscreteScheduler(**SCHEDULER)
    return dict(transformer=transformer, vae=vae, text_encoder=text_encoder,
                tokenizer=tokenizer, scheduler=scheduler)


def save_tiny(pipeline: str, components: dict, out_dir: str | Path,
              text_encoder_class: str) -> Path:
    """Write diffusers' ``pipeline`` of ``components`` to ``out_dir`` (hub layout) and
    return its path; the text encoder's folder, recognised by its config's architectures,
    must name ``text_encoder_class``."""
    out = save_tiny_pipeline(pipeline_class(pipeline)(**components), out_dir)
    cfg = json.loads((out / "text_encoder" / "config.json").read_text())
    assert text_encoder_class in cfg.get("architectures", []), cfg.get("architectures")
    return out
