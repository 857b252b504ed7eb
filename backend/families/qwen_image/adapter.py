"""Qwen-Image family adapter: components, prompt/image encoding, the training loss, samples.

Components are diffusers' ``QwenImageTransformer2DModel`` and ``AutoencoderKLQwenImage``,
transformers' ``Qwen2_5_VLForConditionalGeneration`` and its tokenizer. Prompt encoding is
diffusers' ``QwenImagePipeline`` code (template, last hidden state, masks), run through a
pipeline object holding only the encoders; the number of template tokens dropped is counted
with the model's own tokenizer (34 for the real one), so another tokenizer never eats the
prompt. The stage-1 encoders can keep their weights in host RAM (``Encoder``'s offload
modes: none | model | sequential) without changing a bit of what they compute.
The training loss is the reference trainer's flow matching: 1000 sigmas from
linspace(1, 0, 1001)[:-1] shifted with mu = 0.8 (exponential) and stretched to a terminal
sigma of 0.02 (diffusers' ``FlowMatchEulerDiscreteScheduler``), x_t = (1 - s) x0 + s noise,
target noise - x0, MSE weighted by exp(-2 ((t - 500) / 1000)^2) shifted to 0 and
normalised to mean 1.

Cached sample tensors (one safetensors file per sample, see backend/data/cache.py):
``prompt_emb`` [1, L, D], ``prompt_emb_mask`` [1, L], ``latents`` [1, 16, H/8, W/8]
(posterior mean normalised by the VAE's latents_mean/std), ``height``, ``width``.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

from backend.families.base import Family, Schedule
from backend.families.common import (OffloadingEncoder, cached_sample, frozen, noised,
                                     pipeline_loaders, weighted_mse)
from backend.families.qwen_image import caption, checkpoint
from backend.families.qwen_image.published import CONFIGS
from backend.families.qwen_image.qwen_vl import load_text_encoder

# The real Qwen-Image scheduler config (Qwen/Qwen-Image scheduler/scheduler_config.json);
# training needs only the transformer, so the schedule does not depend on a scheduler folder.
SCHEDULER_CONFIG = dict(
    base_image_seq_len=256, base_shift=0.5, invert_sigmas=False, max_image_seq_len=8192,
    max_shift=0.9, num_train_timesteps=1000, shift=1.0, shift_terminal=0.02,
    stochastic_sampling=False, time_shift_type="exponential", use_beta_sigmas=False,
    use_dynamic_shifting=True, use_exponential_sigmas=False, use_karras_sigmas=False,
)
TRAIN_SHIFT_MU = 0.8
NUM_TRAIN_TIMESTEPS = 1000
SAMPLE_KEYS = ("prompt_emb", "prompt_emb_mask", "latents")


# ------------------------------------------------------------------------------------------
# Loading
# ------------------------------------------------------------------------------------------
def transformer_class():
    from diffusers import QwenImageTransformer2DModel
    return QwenImageTransformer2DModel


def load_vae(folder: str | Path, dtype=None, device: str | Any = "cpu"):
    from diffusers import AutoencoderKLQwenImage

    model = AutoencoderKLQwenImage.from_pretrained(str(folder), torch_dtype=dtype)
    return frozen(model, device)


def template_prefix_tokens(tokenizer, template: str) -> int:
    """How many tokens the template's text before ``{}`` splits into with this tokenizer."""
    return len(tokenizer(template.split("{}")[0])["input_ids"])


class Encoder(OffloadingEncoder):
    """Text encoder + VAE (+ tokenizer), frozen: prompts → embeddings, images → latents.

    Uses ``QwenImagePipeline``'s own prompt code on a pipeline holding only the encoders.
    ``device`` is where the encoders compute; ``offload`` says where their weights live:

    - ``none``: on ``device``, both at once.
    - ``model``: in host RAM; ``encode_samples`` moves the text encoder to ``device`` for
      every prompt, back to the host, then the VAE for every image, so the two are never on
      the GPU together (``on_device``).
    - ``sequential``: in host RAM for good; accelerate's ``cpu_offload`` hooks copy each
      module's own weights to ``device`` for its forward and drop them after, so one
      module's weights are there at a time.

    Every mode runs the same operations on the same inputs, so the tensors are the same.
    """

    def __init__(self, text_encoder, tokenizer, vae, device=None, offload: str = "none"):
        from diffusers import QwenImagePipeline

        self.pipe = QwenImagePipeline(scheduler=None, vae=vae, text_encoder=text_encoder,
                                      tokenizer=tokenizer, transformer=None)
        self.pipe.prompt_template_encode_start_idx = template_prefix_tokens(
            tokenizer, self.pipe.prompt_template_encode)
        super().__init__(text_encoder, vae, device, offload)

    @property
    def drop_tokens(self) -> int:
        return self.pipe.prompt_template_encode_start_idx

    def encode_prompt(self, prompt: str | list[str]):
        """(prompt_emb [B, L, D], prompt_emb_mask [B, L]) as the pipeline computes them."""
        import torch

        with torch.no_grad():
            return self.pipe._get_qwen_prompt_embeds(
                prompt, device=self.device, dtype=self.text_encoder.dtype)

    def prompt_overflow(self, prompt: str) -> str | None:
        """What the text encoder's token limit cuts from ``prompt`` (the pipeline truncates
        the templated prompt at ``tokenizer_max_length`` tokens after the template's
        prefix), as words for a warning; None when it fits."""
        tok, limit = self.pipe.tokenizer, self.pipe.tokenizer_max_length
        drop = self.pipe.prompt_template_encode_start_idx
        ids = tok(self.pipe.prompt_template_encode.format(prompt))["input_ids"]
        if len(ids) <= limit + drop:
            return None
        own = tok(prompt)["input_ids"]
        cut = max(len(ids) - (limit + drop) - (len(ids) - drop - len(own)), 0)
        tail = tok.decode(own[len(own) - cut:]) if cut else ""
        words = " ".join(tail.split())
        shown = words if len(words) <= 80 else f"{words[:40]} ... {words[-36:]}"
        return (f"prompt cut at the text encoder's limit of {limit} tokens ({len(own)} "
                f"tokens; dropped {cut}: {shown!r})")

    def encode_image(self, pixels):
        """Pixels [B, 3, H, W] in [-1, 1] → normalised latents [B, 16, H/8, W/8]."""
        import torch

        vae = self.vae
        with torch.no_grad():
            x = pixels.to(device=self.device, dtype=vae.dtype).unsqueeze(2)  # [B, 3, 1, H, W]
            z = vae.encode(x).latent_dist.mean[:, :, 0]
            mean = torch.tensor(vae.config.latents_mean).view(1, -1, 1, 1).to(z)
            std = torch.tensor(vae.config.latents_std).view(1, -1, 1, 1).to(z)
            return (z - mean) / std

    def prompt_parts(self, prompt: str) -> tuple:
        return self.encode_prompt([prompt])

    def make_sample(self, parts: tuple, latents, pixels) -> dict[str, Any]:
        """A training sample (the tensors a cache file holds)."""
        return _sample(*parts, latents, pixels)


def _sample(emb, mask, latents, pixels) -> dict[str, Any]:
    return cached_sample(latents, pixels, prompt_emb=emb, prompt_emb_mask=mask)


# ------------------------------------------------------------------------------------------
# Training loss
# ------------------------------------------------------------------------------------------
def training_schedule() -> Schedule:
    """The reference's 1000 sigmas (1 down to 0.02), their timesteps (1000 sigma) and its
    weights (mean 1)."""
    import numpy as np
    import torch
    from diffusers import FlowMatchEulerDiscreteScheduler

    sched = FlowMatchEulerDiscreteScheduler(**SCHEDULER_CONFIG)
    sched.set_timesteps(sigmas=np.linspace(1.0, 0.0, NUM_TRAIN_TIMESTEPS + 1)[:-1],
                       mu=TRAIN_SHIFT_MU)
    sigmas = sched.sigmas[:-1].float()          # drop the appended final 0
    timesteps = sched.timesteps.float()
    y = torch.exp(-2 * ((timesteps - NUM_TRAIN_TIMESTEPS / 2) / NUM_TRAIN_TIMESTEPS) ** 2)
    y = y - y.min()
    weights = y * (len(y) / y.sum())
    return Schedule(sigmas, timesteps, weights)


def pack_latents(latents):
    """[B, C, h, w] → [B, h/2 * w/2, 4C] (the pipeline's ``_pack_latents``)."""
    from diffusers import QwenImagePipeline

    b, c, h, w = latents.shape
    return QwenImagePipeline._pack_latents(latents, b, c, h, w)


def input_latents(sample: dict[str, Any]) -> list:
    """An edit sample's input-image latents (``edit_latents_0``, ``_1``...), in order."""
    out, i = [], 0
    while f"edit_latents_{i}" in sample:
        out.append(sample[f"edit_latents_{i}"])
        i += 1
    return out


def predict(transformer, noisy_latents, sigma, prompt_emb, prompt_mask, inputs=()):
    """The transformer's flow prediction for [B, C, h, w] latents, packed [B, N, 4C].

    ``inputs``: input-image latents [B, C, h_i, w_i] of an edit model, packed beside the
    noisy latents with their shapes in ``img_shapes``, as the edit pipelines do; the
    prediction is cut back to the noisy latents' tokens."""
    import torch

    b, c, h, w = noisy_latents.shape
    if prompt_mask is not None and bool(prompt_mask.all()):
        prompt_mask = None  # as QwenImagePipeline.encode_prompt does
    hidden = pack_latents(noisy_latents)
    n = hidden.shape[1]
    shapes = [(1, h // 2, w // 2)]
    if inputs:
        hidden = torch.cat([hidden] + [pack_latents(x.to(hidden)) for x in inputs], dim=1)
        shapes += [(1, x.shape[-2] // 2, x.shape[-1] // 2) for x in inputs]
    return transformer(
        hidden_states=hidden,
        timestep=sigma.expand(b),
        encoder_hidden_states=prompt_emb,
        encoder_hidden_states_mask=prompt_mask,
        img_shapes=[shapes] * b,
        return_dict=False,
    )[0][:, :n]


def flow_matching_loss(transformer, sample: dict[str, Any], schedule: Schedule,
                       index: int, noise, dtype):
    """Weighted flow-matching MSE for one sample at schedule ``index`` with ``noise`` (and by
    its ``loss_mask``: ``weighted_mse``)."""
    x0, noise, sigma, x_t = noised(sample, schedule, index, noise, dtype)
    device = x0.device
    target = pack_latents(noise - x0)
    pred = predict(transformer, x_t.to(dtype), (schedule.timesteps[index] / 1000).to(device, dtype),
                   sample["prompt_emb"].to(dtype), sample["prompt_emb_mask"],
                   [x.to(device=device, dtype=dtype) for x in input_latents(sample)])
    loss = weighted_mse(pred, target, sample, x0, pack_latents)
    return loss * schedule.weights[index].to(device)


# ------------------------------------------------------------------------------------------
# Samples
# ------------------------------------------------------------------------------------------
def render(pipe, prompt: str, *, negative_prompt: str, generator, steps: int, cfg: float,
           height: int, width: int):
    """One image; ``cfg`` is Qwen-Image's ``true_cfg_scale`` (classifier-free guidance
    needs a negative prompt, "" counts; none when cfg is 1)."""
    import torch

    with torch.inference_mode():
        return pipe(prompt=prompt, negative_prompt=negative_prompt if cfg > 1 else None,
                    true_cfg_scale=cfg, num_inference_steps=steps, height=height,
                    width=width, generator=generator).images[0]


# ------------------------------------------------------------------------------------------
# The contract
# ------------------------------------------------------------------------------------------
class Adapter(Family):
    """Qwen-Image through the family contract (``backend/families/base.py``)."""

    offload_blocks = ("transformer_blocks",)
    # The reference keeps the modulation and the in/out projections in full precision.
    quantize_skip = ("img_in", "txt_in", "proj_out", "norm_out", "time_text_embed",
                     "*.img_mod.*", "*.txt_mod.*")

    # Stage 1 and samples (``Family.load_encoder`` / ``load_pipeline``).
    encoder = Encoder
    pipeline = "QwenImagePipeline"
    loaders = pipeline_loaders(load_text_encoder, load_vae)

    # The contract's members are this module's functions. An edit run is bound by
    # ``edit.EditAdapter`` (``SPEC.run_adapters``).
    transformer_class = staticmethod(transformer_class)
    training_schedule = staticmethod(training_schedule)
    loss_at = staticmethod(flow_matching_loss)
    render = staticmethod(render)

    # Captioning: the text encoder is a whole Qwen2.5-VL (``caption.py``).
    captioner_components = ("text_encoder", "tokenizer")

    def load_captioner(self, dirs, dtype=None, device="cpu", offload="none"):
        return caption.load_captioner(dirs, dtype, device, offload)

    published = CONFIGS

    def full_checkpoint_names(self, shapes, fmt):
        """The single-file names of a full checkpoint (``checkpoint.py``)."""
        return checkpoint.names(shapes, fmt)

    def build_tiny(self, out_dir, seed=0, variant=None):
        from backend.families.qwen_image import tiny
        var = self.spec.variant(variant)
        if var is not None and var.input_images:  # an edit model
            return tiny.build_tiny_qwen_image_edit(
                out_dir, seed, plus=var.input_images > 1,
                zero_cond_t=bool(var.config_values.get("transformer", {}).get("zero_cond_t")))
        return tiny.build_tiny_qwen_image(out_dir, seed)
