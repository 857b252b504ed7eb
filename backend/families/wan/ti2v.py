"""Wan2.2-TI2V-5B: text-to-video, and image-to-video from a clean first frame, in one model.

Exactly what diffusers runs for it (``WanPipeline`` / ``WanImageToVideoPipeline`` with
``expand_timesteps``), so a LoRA trained here behaves the same there:

- latents come from the Wan 2.2 VAE (``AutoencoderKLWan`` with ``is_residual``, 2x2 pixel
  patches, 16x spatial and 4x temporal compression to 48 channels), normalised with its
  own ``latents_mean`` / ``latents_std`` as for Wan 2.1 (``Encoder.encode_clip``);
- the transformer takes one timestep per token ([B, F' x h/2 x w/2], the pipeline's
  ``mask[0][0][:, ::2, ::2] * t``), all equal for text-to-video;
- image-to-video (``extra_inputs: input_image``): the first latent frame is the clean
  latents of the first frame encoded alone (the pipeline's ``prepare_latents``: the VAE's
  mode, normalised), kept clean in the noisy input (``(1 - mask) * condition + mask *
  x_t``, mask 0 on latent frame 0), its tokens at timestep 0; the loss covers the other
  frames only. Stage 1 caches that latent as ``first_frame`` [1, 48, 1, H/16, W/16]. No
  CLIP image encoder, no extra input channels.

The variant is named by its model id (``Wan-AI/Wan2.2-TI2V-5B``, ``-Diffusers``) or found in
a local pipeline folder (``model_index.json`` with ``expand_timesteps: true``, or a VAE
config of the Wan 2.2 VAE). Samples render with ``WanPipeline`` (text) or
``WanImageToVideoPipeline`` (first frame from ``sample_images``), ``expand_timesteps`` set.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

from backend.families import family_of
from backend.families.wan.adapter import Adapter, Encoder, is_wan22_vae, predict, read_json, render
from backend.families.common import noised, weighted_mse
from backend.families.wan.i2v import render_i2v

VARIANT = "wan22_ti2v_5b"
TITLE = "Wan2.2-TI2V-5B"


def folder_has_wan22_vae(path: str | Path) -> bool:
    """Whether a local folder without a pipeline index (a component folder, or a file in
    one) is a TI2V-5B's by its VAE: the Wan 2.2 VAE, in ``vae/`` beside it or itself."""
    path = Path(path).expanduser()
    folder = path if path.is_dir() else path.parent
    return any(is_wan22_vae(read_json(root / "vae" / "config.json")) for root in
               (folder, folder.parent, folder.parent.parent)) or is_wan22_vae(
        read_json(folder / "config.json"))


def config_is_ti2v(cfg) -> bool:
    """The config names the TI2V-5B: as the registry recognises the variant (its model id,
    or a local pipeline whose model_index.json sets ``expand_timesteps``), or a local folder
    without an index whose VAE is the Wan 2.2 VAE."""
    if family_of(cfg.to_dict())[1] == VARIANT:
        return True
    entries = [e.strip() for e in (cfg.model_id_with_origin_paths or "").split(",")]
    return any(e and Path(e).expanduser().exists() and folder_has_wan22_vae(e)
               for e in entries)


# ------------------------------------------------------------------------------------------
# The loss
# ------------------------------------------------------------------------------------------
def token_timesteps(mask, t):
    """[B, tokens]: ``t`` for every token of the latent video (2x2 latent patches), 0 where
    ``mask`` is 0 (the clean first frame), as the pipeline's
    ``(mask[0][0][:, ::2, ::2] * t).flatten()``."""
    return (mask[0][0][:, ::2, ::2] * t).flatten().unsqueeze(0).expand(mask.shape[0], -1)


def flow_matching_loss(transformer, sample: dict[str, Any], schedule, index: int, noise,
                       dtype):
    """The family's flow matching with per-token timesteps; with a cached ``first_frame``
    the first latent frame is that clean latent at timestep 0 and the loss leaves it out."""
    import torch

    x0, noise, sigma, x_t = noised(sample, schedule, index, noise, dtype)
    device = x0.device
    mask = torch.ones((x0.shape[0], 1, *x0.shape[2:]), device=device, dtype=dtype)
    first = sample.get("first_frame")
    if first is not None:
        mask[:, :, 0] = 0
        x_t = (1 - mask) * first.to(device, dtype) + mask * x_t
    t = schedule.timesteps[index].to(device=device, dtype=dtype)
    pred = predict(transformer, x_t.to(dtype), token_timesteps(mask, t),
                   sample["prompt_emb"].to(device, dtype))
    target, cut = noise - x0, None
    if first is not None:
        pred, target = pred[:, :, 1:], target[:, :, 1:]
        if pred.shape[2] == 0:  # a one-frame clip is its own condition: nothing to learn
            return pred.float().sum() * 0
        cut = lambda w: w[:, :, 1:]  # noqa: E731 - the mask's frames as the loss's
    loss = weighted_mse(pred, target, sample, x0, cut)
    return loss * schedule.weights[index].to(device)


# ------------------------------------------------------------------------------------------
# Stage 1: the first frame's clean latent (image-to-video)
# ------------------------------------------------------------------------------------------
class FirstFrameEncoder(Encoder):
    """Wan's ``Encoder`` plus each clip's ``first_frame``: its first frame encoded alone
    by ``WanImageToVideoPipeline.prepare_latents`` (``expand_timesteps``)."""

    def __init__(self, text_encoder, tokenizer, vae, device=None, offload: str = "none"):
        super().__init__(text_encoder, tokenizer, vae, device=device, offload=offload)
        from diffusers import WanImageToVideoPipeline

        self.i2v = WanImageToVideoPipeline(
            tokenizer=tokenizer, text_encoder=text_encoder, vae=vae, scheduler=None,
            image_processor=None, image_encoder=None, transformer=None,
            expand_timesteps=True)

    def clip_sample(self, prompt_emb, pixels) -> dict[str, Any]:
        import torch

        out = super().clip_sample(prompt_emb, pixels)
        frames, height, width = pixels.shape[2], pixels.shape[-2], pixels.shape[-1]
        with torch.no_grad():
            _, first, _ = self.i2v.prepare_latents(
                pixels[:, :, 0].to(self.device, torch.float32), 1, self.vae.config.z_dim,
                height, width, frames, torch.float32, self.device, None,
                torch.zeros_like(out["latents"], device=self.device))
        return {**out, "first_frame": first.float()}


class TI2VAdapter(Adapter):
    """Wan's adapter bound to a TI2V-5B run: the Wan 2.2 VAE's geometry, per-token
    timesteps, and with ``extra_inputs: input_image`` the clean first frame."""

    vae_scale_factor = 16  # its size multiple, 32, is the spec's (``Variant``)
    title = TITLE
    expand_timesteps = True

    def __init__(self, spec, image: bool):
        self.spec, self.image = spec, image
        self.input_images = 1 if image else 0
        # Image-to-video: the first frame's latent in stage 1, its pipeline for samples.
        self.encoder = FirstFrameEncoder if image else Encoder
        self.pipeline = "WanImageToVideoPipeline" if image else "WanPipeline"

    @classmethod
    def for_run(cls, base: Adapter, cfg) -> "TI2VAdapter | None":
        """A ``TI2VAdapter`` when the config names the TI2V-5B; None otherwise."""
        if not config_is_ti2v(cfg):
            return None
        return cls(base.spec, image=cfg.extra_inputs == "input_image")

    def for_config(self, cfg):
        return self

    def training_loss(self, transformer, sample, schedule, generator, dtype):
        if self.image and "first_frame" not in sample:
            raise ValueError("dataset_base_path: a cached sample has no first frame (got a "
                             "text-to-video cache; allowed a cache written by "
                             "sft:data_process with extra_inputs input_image)")
        return super().training_loss(transformer, sample, schedule, generator, dtype)

    def loss_at(self, transformer, sample, schedule, index, noise, dtype):
        """``flow_matching_loss`` of the sample as this run trains it: text-to-video leaves
        a cached first frame out."""
        if not self.image:
            sample = {k: v for k, v in sample.items() if k != "first_frame"}
        return flow_matching_loss(transformer, sample, schedule, index, noise, dtype)

    def render(self, pipe, prompt, *, negative_prompt, generator, steps, cfg, height, width,
               num_frames=121, images=None):
        fn = render_i2v if self.image else render
        return fn(pipe, prompt, negative_prompt=negative_prompt, generator=generator,
                  steps=steps, cfg=cfg, height=height, width=width, num_frames=num_frames,
                  **({"images": images} if self.image else {}))
