"""HunyuanVideo 1.5 image-to-video (480p / 720p I2V): the first frame conditions the clip.

Exactly what diffusers' ``HunyuanVideo15ImageToVideoPipeline`` computes, so a LoRA trained
here behaves the same there:

- the first frame's SigLIP embedding: ``SiglipImageProcessor`` then ``SiglipVisionModel``'s
  last hidden state (the pipeline's ``encode_image``), fed to the transformer as
  ``image_embeds`` (its image tokens, attended beside the prompt's);
- the condition: the first frame encoded by the VAE on its own (the pipeline's
  ``prepare_cond_latents_and_mask``: its latents in the first latent frame, zeros after, and
  a mask of ones on the first latent frame), concatenated after the noisy latents
  (2C + 1 channels).

Stage 1 caches ``image_embeds`` [1, N, D] and ``condition`` [1, C + 1, F', H/16, W/16] beside
the text-to-video tensors; stage 2 feeds them as the pipeline does (``adapter.predict``). The
input image is the clip's first frame as decoded and sized for training (the reference's
``--extra_inputs input_image``). Samples render with the image-to-video pipeline from each
prompt's image in ``sample_images``; the pipeline sizes the clip from the image (the
model's target area at the image's aspect ratio), not from ``sample_height`` /
``sample_width``.
"""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

from backend.families import family_of
from backend.families.common import (check_first_frame_inputs, first_frame_image, frame_to_pil,
                                     frozen, quiet_image_processor)
from backend.families.hunyuan_video15.adapter import (Adapter, Encoder, as_clip, guided,
                                                      pipeline_for_encoding)

I2V_COMPONENTS = ("image_encoder", "feature_extractor")
PIPELINE = "HunyuanVideo15ImageToVideoPipeline"


def load_image_encoder(folder: str | Path, dtype=None, device: str | Any = "cpu"):
    from transformers import SiglipVisionModel

    model = SiglipVisionModel.from_pretrained(str(folder), dtype=dtype)
    return frozen(model, device)


def load_feature_extractor(folder: str | Path):
    from transformers import SiglipImageProcessor

    return quiet_image_processor(SiglipImageProcessor, folder)


class I2VEncoder(Encoder):
    """The text-to-video ``Encoder`` plus SigLIP: each clip's first frame becomes its
    ``image_embeds`` and ``condition`` (what the image-to-video pipeline computes). Offload
    modes as ``Encoder``'s; with ``model`` the image encoder and the VAE share the device
    after every prompt is encoded."""

    image_modules = ("image_encoder", "vae")

    def __init__(self, text_encoder, tokenizer, text_encoder_2, tokenizer_2, vae,
                 image_encoder=None, feature_extractor=None, device=None,
                 offload: str = "none"):
        super().__init__(text_encoder, tokenizer, text_encoder_2, tokenizer_2, vae,
                         device=device, offload=offload)
        self.image_encoder = image_encoder
        self.pipe = pipeline_for_encoding(PIPELINE, text_encoder, tokenizer, text_encoder_2,
                                          tokenizer_2, vae, image_encoder=image_encoder,
                                          feature_extractor=feature_extractor)
        if offload == "sequential":
            from accelerate import cpu_offload

            cpu_offload(image_encoder, execution_device=self.device)

    def first_frame(self, latents, pixels) -> dict[str, Any]:
        """{image_embeds, condition} of a clip [1, 3, F, H, W] in [-1, 1] whose latents are
        ``latents``: the pipeline's ``encode_image`` and ``prepare_cond_latents_and_mask``
        with the clip's first frame as the image."""
        import torch

        pixels = as_clip(pixels)
        image = frame_to_pil(pixels[0, :, 0])
        height, width = pixels.shape[-2], pixels.shape[-1]
        with torch.no_grad():
            embeds = self.pipe.encode_image(image, 1, self.device, torch.float32)
            condition, mask = self.pipe.prepare_cond_latents_and_mask(
                latents, image, 1, height, width, torch.float32, self.device)
        return {"image_embeds": embeds.float(),
                "condition": torch.cat([condition, mask], dim=1).float()}

    def make_sample(self, parts: tuple, latents, pixels) -> dict[str, Any]:
        return {**super().make_sample(parts, latents, pixels),
                **self.first_frame(latents, pixels)}


def render_i2v(pipe, prompt: str, *, negative_prompt: str, generator, steps: int, cfg: float,
               height: int, width: int, num_frames: int = 121, images: list | None = None):
    """One clip from its first frame (``images[0]``, PIL): frames [F, H, W, 3] in [0, 1],
    sized by the pipeline from the image (``height`` / ``width`` are not its to take)."""
    import torch

    image = first_frame_image(images)
    with torch.inference_mode():
        return guided(pipe, cfg)(
            image=image, prompt=prompt,
            negative_prompt=negative_prompt or None, num_frames=num_frames,
            num_inference_steps=steps, generator=generator, output_type="np").frames[0]


class I2VAdapter(Adapter):
    """The adapter bound to an image-to-video run: SigLIP in stage 1 and samples, the
    first-frame inputs in the loss, the image-to-video pipeline for samples."""

    input_images = 1
    title = "HunyuanVideo-1.5-I2V"  # the bound variant's (``for_run``)

    encoder = I2VEncoder
    pipeline = PIPELINE
    loaders = {**Adapter.loaders, "image_encoder": load_image_encoder,
               "feature_extractor": load_feature_extractor}

    def __init__(self, spec, title: str, train_shift: float):
        # SigLIP and its processor load where the text encoder does.
        self.spec = replace(spec, components=tuple(
            replace(c, stages=("data_process", "sample")) if c.name in I2V_COMPONENTS else c
            for c in spec.components))
        self.title, self.train_shift = title, train_shift

    @classmethod
    def for_run(cls, base: Adapter, cfg) -> "I2VAdapter | None":
        """An ``I2VAdapter`` when the config's model is an image-to-video variant (by model
        id or a local pipeline's class) or it gives ``extra_inputs: input_image``; None
        otherwise."""
        _, name = family_of(cfg.to_dict())
        variant = base.spec.variant(name)
        takes = variant.input_images if variant is not None else 0
        if not takes and cfg.extra_inputs != "input_image":
            return None
        return cls(base.spec, variant.title if takes else cls.title, base.train_shift)

    def for_config(self, cfg):
        return self

    def training_loss(self, transformer, sample, schedule, generator, dtype):
        check_first_frame_inputs(sample, ("condition", "image_embeds"))
        return super().training_loss(transformer, sample, schedule, generator, dtype)

    def render(self, pipe, prompt, *, negative_prompt, generator, steps, cfg, height, width,
               num_frames=121, images=None):
        return render_i2v(pipe, prompt, negative_prompt=negative_prompt, generator=generator,
                          steps=steps, cfg=cfg, height=height, width=width,
                          num_frames=num_frames, images=images)
