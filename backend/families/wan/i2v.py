"""Wan 2.1 image-to-video (I2V-14B-480P / -720P): the first frame conditions the clip.

Exactly what diffusers' ``WanImageToVideoPipeline`` computes, so a LoRA trained here
behaves the same there:

- the first frame's CLIP embedding: ``CLIPImageProcessor`` then ``CLIPVisionModel``'s
  second-to-last hidden state (the pipeline's ``encode_image``), fed to the transformer as
  ``encoder_hidden_states_image`` (its image cross-attention, ``add_k_proj`` /
  ``add_v_proj``);
- the condition: the VAE latents (normalised) of the first frame followed by black frames,
  behind a mask that is 1 on the first frame's four temporal slots and 0 elsewhere, 4 + 16
  channels concatenated after the noisy latents (the transformer takes 36). It is the
  pipeline's own ``prepare_latents``, called with the clip's first frame.

Stage 1 caches ``image_embeds`` [1, N, D] and ``condition`` [1, 20, F', H/8, W/8] beside
the text-to-video tensors; stage 2 feeds them as the pipeline does (``adapter.predict``).
The input image is the clip's first frame, as decoded and sized for training (the
reference's ``--extra_inputs input_image``). Samples render with
``WanImageToVideoPipeline`` from each prompt's image in ``sample_images``.
"""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

from backend.families import family_of
from backend.families.common import (check_first_frame_inputs, first_frame_image, frame_to_pil,
                                     frozen, quiet_image_processor)
from backend.families.wan.adapter import Adapter, Encoder

I2V_COMPONENTS = ("image_encoder", "image_processor")
# Image-to-video variants whose transformer has no image cross-attention (Wan 2.2: the
# first frame enters through the condition channels only, no CLIP image encoder).
WITHOUT_CLIP = ("wan22_i2v_a14b",)


def load_image_encoder(folder: str | Path, dtype=None, device: str | Any = "cpu"):
    """The CLIP vision tower (the released one is float32-sized; ``dtype`` as given)."""
    from transformers import CLIPVisionModel

    model = CLIPVisionModel.from_pretrained(str(folder), dtype=dtype)
    return frozen(model, device)


def load_image_processor(folder: str | Path):
    from transformers import CLIPImageProcessor

    return quiet_image_processor(CLIPImageProcessor, folder)


class I2VEncoder(Encoder):
    """Wan's ``Encoder`` plus the CLIP image encoder: each clip's first frame becomes its
    ``image_embeds`` and ``condition`` (what ``WanImageToVideoPipeline`` computes). Offload
    modes as ``Encoder``'s; with ``model`` the image encoder and the VAE share the device
    after every prompt is encoded."""

    def __init__(self, text_encoder, tokenizer, vae, image_encoder=None, image_processor=None,
                 device=None, offload: str = "none"):
        super().__init__(text_encoder, tokenizer, vae, device=device, offload=offload)
        from diffusers import WanImageToVideoPipeline

        self.image_encoder = image_encoder
        self.pipe = WanImageToVideoPipeline(
            tokenizer=tokenizer, text_encoder=text_encoder, vae=vae, scheduler=None,
            image_processor=image_processor, image_encoder=image_encoder, transformer=None)
        if image_encoder is not None:
            self.clip_modules = ("image_encoder", "vae")
        if offload == "sequential" and image_encoder is not None:
            from accelerate import cpu_offload
            cpu_offload(image_encoder, execution_device=self.device)

    def encode_first_frame(self, pixels) -> dict[str, Any]:
        """{image_embeds, condition} of a clip [1, 3, F, H, W] in [-1, 1]."""
        import torch

        first = pixels[:, :, 0]
        frames, height, width = pixels.shape[2], pixels.shape[-2], pixels.shape[-1]
        out = {}
        with torch.no_grad():
            if self.image_encoder is not None:
                out["image_embeds"] = self.pipe.encode_image(frame_to_pil(first[0]),
                                                             self.device).float()
            shape = (1, self.vae.config.z_dim, (frames - 1) // 4 + 1, height // 8, width // 8)
            _, condition = self.pipe.prepare_latents(
                first.to(self.device, torch.float32), 1, self.vae.config.z_dim, height, width,
                frames, torch.float32, self.device, None,
                torch.zeros(shape, device=self.device))
        return {**out, "condition": condition.float()}

    def clip_sample(self, prompt_emb, pixels) -> dict[str, Any]:
        return {**super().clip_sample(prompt_emb, pixels), **self.encode_first_frame(pixels)}


def render_i2v(pipe, prompt: str, *, negative_prompt: str, generator, steps: int, cfg: float,
               height: int, width: int, num_frames: int = 81, images: list | None = None):
    """One clip from its first frame (``images[0]``, PIL): frames [F, H, W, 3] in [0, 1]."""
    import torch

    image = first_frame_image(images)
    with torch.inference_mode():
        return pipe(image=image, prompt=prompt, negative_prompt=negative_prompt or None,
                    guidance_scale=float(cfg), num_inference_steps=steps, height=height,
                    width=width, num_frames=num_frames, generator=generator,
                    output_type="np").frames[0]


class I2VAdapter(Adapter):
    """Wan's adapter bound to an image-to-video run: the CLIP components in stage 1 and
    samples, the first-frame inputs in the loss, ``WanImageToVideoPipeline`` for samples."""

    input_images = 1
    title = "Wan2.1-I2V"  # the bound variant's (``for_run``)

    # Stage 1 and samples (``Family.load_encoder``, ``Adapter.load_pipeline``): the CLIP
    # components are the spec's where the model has them (``__init__``).
    encoder = I2VEncoder
    pipeline = "WanImageToVideoPipeline"
    loaders = {**Adapter.loaders, "image_encoder": load_image_encoder,
               "image_processor": load_image_processor}

    def __init__(self, spec, title: str, clip: bool = True):
        # The image encoder and its processor load where the text encoder does.
        stages = ("data_process", "sample") if clip else ()
        self.spec = replace(spec, components=tuple(
            replace(c, stages=stages) if c.name in I2V_COMPONENTS else c
            for c in spec.components))
        self.title, self.clip = title, clip

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
        return cls(base.spec, variant.title if takes else cls.title,
                   clip=not (variant is not None and variant.name in WITHOUT_CLIP))

    def for_config(self, cfg):
        return self

    def training_loss(self, transformer, sample, schedule, generator, dtype):
        check_first_frame_inputs(sample, ("condition", "image_embeds") if self.clip
                                 else ("condition",))
        return super().training_loss(transformer, sample, schedule, generator, dtype)

    def render(self, pipe, prompt, *, negative_prompt, generator, steps, cfg, height, width,
               num_frames=81, images=None):
        return render_i2v(pipe, prompt, negative_prompt=negative_prompt, generator=generator,
                          steps=steps, cfg=cfg, height=height, width=width,
                          num_frames=num_frames, images=images)
