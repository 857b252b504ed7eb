"""Qwen-Image's edit models: the prompt encoded with the input images, their latents beside
the noisy latents, and the edit pipelines.

Exactly what diffusers' pipelines compute, so a LoRA trained here behaves the same there:

- ``Qwen/Qwen-Image-Edit`` (``QwenImageEditPipeline``): one input image, resized to the area
  of 1024x1024 (sides multiples of 32, aspect kept); the Qwen2.5-VL processor sees that
  image and the VAE encodes it.
- ``-2509`` / ``-2511`` (``QwenImageEditPlusPipeline``): up to three input images, each
  shown to the processor at the area of 384x384 (``Picture i: <|vision_start|>...`` before
  the instruction) and encoded by the VAE at the area of 1024x1024.

The VAE's area is capped at ``max_pixels`` (at the default 1024x1024 it is the pipelines'
own), so small CPU runs stay small. The prompt template's system part is dropped, counted
with the model's own tokenizer (64 tokens for the real one). Stage 1 caches
``edit_latents_<i>`` [1, 16, h_i, w_i] per input image beside Qwen-Image's tensors;
stage 2 packs them after the noisy latents (``adapter.predict``). ``zero_cond_t`` (2511):
the transformer's config turns it on; ``--zero_cond_t`` forces it on a transformer whose
config lacks it.

The processor (images and text, no torchvision needed) is ``qwen_vl.load_processor``.
An edit run's adapter is ``EditAdapter``, which the family's spec names
(``FamilySpec.run_adapters``): ``Family.for_config`` asks its ``for_run``.
"""
from __future__ import annotations

from typing import Any

from backend.core.messages import Msg
from backend.families import family_of
from backend.families.qwen_image import EDIT_CLASSES
from backend.families.qwen_image.adapter import Adapter, Encoder, _sample, input_latents
from backend.families.qwen_image.qwen_vl import load_processor

VAE_IMAGE_AREA = 1024 * 1024
CONDITION_IMAGE_AREA = 384 * 384
USER_TURN = "<|im_start|>user\n"


# ------------------------------------------------------------------------------------------
# The pipelines
# ------------------------------------------------------------------------------------------
def system_prefix_tokens(tokenizer, template: str) -> int:
    """Tokens of the template's system turn (what the pipeline drops: 64 for the real
    tokenizer), counted with this tokenizer."""
    head = template.split(USER_TURN)[0] + USER_TURN
    return len(tokenizer(head)["input_ids"])


def _pipeline_module(plus: bool):
    if plus:
        from diffusers.pipelines.qwenimage import pipeline_qwenimage_edit_plus as module
    else:
        from diffusers.pipelines.qwenimage import pipeline_qwenimage_edit as module
    return module


def _pipeline_class(plus: bool):
    from diffusers import QwenImageEditPipeline, QwenImageEditPlusPipeline
    return QwenImageEditPlusPipeline if plus else QwenImageEditPipeline


def _dimensions(module, area: int, ratio: float) -> tuple[int, int]:
    """(width, height) of the pipeline module's ``calculate_dimensions``."""
    out = module.calculate_dimensions(area, ratio)
    return int(out[0]), int(out[1])


# ------------------------------------------------------------------------------------------
# Stage 1
# ------------------------------------------------------------------------------------------
class EditEncoder(Encoder):
    """Qwen-Image's ``Encoder`` for an edit model: the prompt with the input images through
    the edit pipeline's own prompt code, the input images' latents beside the target's.
    Offload modes as ``Encoder``'s (never a different tensor)."""

    def __init__(self, text_encoder, tokenizer, vae, processor, *, plus: bool,
                 vae_area: int = VAE_IMAGE_AREA, device=None, offload: str = "none"):
        super().__init__(text_encoder, tokenizer, vae, device=device, offload=offload)
        self.plus = plus
        self.module = _pipeline_module(plus)
        self.vae_area = min(int(vae_area), VAE_IMAGE_AREA)
        self.pipe = _pipeline_class(plus)(scheduler=None, vae=vae, text_encoder=text_encoder,
                                          tokenizer=tokenizer, processor=processor,
                                          transformer=None)
        self.pipe.prompt_template_encode_start_idx = system_prefix_tokens(
            tokenizer, self.pipe.prompt_template_encode)

    def condition_images(self, images: list) -> Any:
        """The input images as the processor sees them (Edit: the VAE-sized image)."""
        out = []
        for img in images:
            area = CONDITION_IMAGE_AREA if self.plus else self.vae_area
            w, h = _dimensions(self.module, area, img.width / img.height)
            out.append(self.pipe.image_processor.resize(img, h, w))
        return out if self.plus else out[0]

    def input_pixels(self, images: list) -> list:
        """Each input image as the VAE gets it: [1, 3, h, w] in [-1, 1]."""
        out = []
        for img in images:
            w, h = _dimensions(self.module, self.vae_area, img.width / img.height)
            if not self.plus:  # the Edit pipeline resizes once, then preprocesses
                img = self.pipe.image_processor.resize(img, h, w)
            out.append(self.pipe.image_processor.preprocess(img, h, w))
        return out

    def encode_prompt(self, prompt: str | list[str], images: list | None = None):
        import torch

        if not images:
            raise ValueError("edit_image: an edit sample needs at least one input image")
        with torch.no_grad():
            return self.pipe._get_qwen_prompt_embeds(
                prompt, image=self.condition_images(images), device=self.device,
                dtype=self.text_encoder.dtype)

    def _with_inputs(self, sample: dict[str, Any], images: list) -> dict[str, Any]:
        for i, pixels in enumerate(self.input_pixels(images)):
            sample[f"edit_latents_{i}"] = self.encode_image(pixels)
        return sample

    def encode_sample(self, pixels, prompt: str, images: list | None = None) -> dict[str, Any]:
        emb, mask = self.encode_prompt([prompt], images)
        return self._with_inputs(_sample(emb, mask, self.encode_image(pixels), pixels), images)

    def item_prompt(self, item: tuple) -> tuple:
        """Items are (load_pixels, prompt, load_inputs): the prompt with its input images."""
        return self.encode_prompt([item[1]], item[2]())

    def item_sample(self, parts: tuple, item: tuple) -> dict[str, Any]:
        emb, mask = parts
        pixels = item[0]()
        return self._with_inputs(_sample(emb, mask, self.encode_image(pixels), pixels),
                                 item[2]())


# ------------------------------------------------------------------------------------------
# Stage 2: zero_cond_t
# ------------------------------------------------------------------------------------------
def force_zero_cond_t(transformer) -> int:
    """Turn ``zero_cond_t`` on in the transformer and its blocks (what a 2511 config sets);
    returns how many modules changed."""
    changed = 0
    for module in transformer.modules():
        if getattr(module, "zero_cond_t", None) is False:
            module.zero_cond_t = True
            changed += 1
    return changed


# ------------------------------------------------------------------------------------------
# Samples
# ------------------------------------------------------------------------------------------
def render_edit(pipe, prompt: str, *, negative_prompt: str, generator, steps: int, cfg: float,
                height: int, width: int, images: list | None = None):
    """One edited image from ``images`` (PIL) and the instruction; ``cfg`` is the
    pipelines' ``true_cfg_scale``."""
    import torch

    if not images:
        raise ValueError(Msg("data.sample_edit_images_missing"))
    image = list(images) if isinstance(pipe, _pipeline_class(True)) else images[0]
    with torch.inference_mode():
        return pipe(image=image, prompt=prompt,
                    negative_prompt=negative_prompt if cfg > 1 else None,
                    true_cfg_scale=cfg, num_inference_steps=steps, height=height,
                    width=width, generator=generator).images[0]


# ------------------------------------------------------------------------------------------
# The adapter of one edit run
# ------------------------------------------------------------------------------------------
class EditAdapter(Adapter):
    """Qwen-Image's adapter bound to an edit variant: ``plus`` (2509/2511's pipeline),
    ``input_images`` (how many one sample takes), ``zero_cond_t`` and the VAE's area."""

    title = "Qwen-Image-Edit"  # the bound variant's (``for_run``)

    def __init__(self, spec, *, title: str, plus: bool, input_images: int, zero_cond_t: bool,
                 vae_area: int):
        self.spec, self.title, self.plus = spec, title, plus
        self.input_images, self.zero_cond_t, self.vae_area = input_images, zero_cond_t, vae_area

    @classmethod
    def for_run(cls, base: Adapter, cfg) -> "EditAdapter | None":
        """An ``EditAdapter`` when the config's model is an edit variant (by model id, or a
        local pipeline's class), gives ``extra_inputs`` or ``zero_cond_t``; None for a
        text-to-image config. An edit config whose variant is unknown (a local transformer
        folder) is taken as 2509/2511's pipeline, which also takes one image."""
        _, name = family_of(cfg.to_dict())
        variant = base.spec.variant(name)
        takes = variant.input_images if variant is not None else 0
        if not takes and cfg.extra_inputs:
            takes = max(v.input_images for v in base.spec.variants)
        if not takes and not cfg.zero_cond_t:
            return None
        return cls(
            base.spec, title=variant.title if variant is not None and takes else cls.title,
            plus=not (variant is not None and variant.classes == EDIT_CLASSES),
            input_images=takes, zero_cond_t=bool(cfg.zero_cond_t),
            vae_area=min(int(cfg.max_pixels), VAE_IMAGE_AREA))

    def for_config(self, cfg):
        return self

    def load_encoder(self, dirs, dtype=None, device="cpu", offload="none"):
        """Qwen-Image's encoders; for a model that takes input images ``EditEncoder``, with
        the processor built from the tokenizer."""
        if not self.input_images:
            return super().load_encoder(dirs, dtype, device, offload)
        place = device if offload == "none" else "cpu"
        parts = self.load_components(dirs, "data_process", dtype, place)
        return EditEncoder(**parts, processor=load_processor(dirs["tokenizer"], parts["tokenizer"]),
                           plus=self.plus, vae_area=self.vae_area, device=device,
                           offload=offload)

    def training_loss(self, transformer, sample, schedule, generator, dtype):
        if self.input_images and not input_latents(sample):
            raise ValueError("dataset_base_path: a cached sample has no input-image latents "
                             "(got a text-to-image cache; allowed a cache written by "
                             "sft:data_process with extra_inputs edit_image)")
        if self.zero_cond_t:
            force_zero_cond_t(transformer)
        return super().training_loss(transformer, sample, schedule, generator, dtype)

    def eval_loss(self, transformer, samples, seed=0):
        if self.zero_cond_t:
            force_zero_cond_t(transformer)
        return super().eval_loss(transformer, samples, seed)

    def load_pipeline(self, dirs, dtype=None):
        """Qwen-Image's pipeline; for a model that takes input images
        ``QwenImageEditPlusPipeline`` (or ``QwenImageEditPipeline``) with the processor
        built from the tokenizer, ``zero_cond_t`` forced where the run asks."""
        if not self.input_images:
            return super().load_pipeline(dirs, dtype)
        parts = self.load_components(dirs, "sample", dtype)
        if self.zero_cond_t:
            force_zero_cond_t(parts["transformer"])
        return _pipeline_class(self.plus)(
            **parts, processor=load_processor(dirs["tokenizer"], parts["tokenizer"]))

    def render(self, pipe, prompt, *, negative_prompt, generator, steps, cfg, height, width,
               images=None):
        """The edit pipeline's image from ``images`` and the instruction (see
        ``render_edit``); text-to-image without input images when the model takes none."""
        if not self.input_images:
            return super().render(pipe, prompt, negative_prompt=negative_prompt,
                                  generator=generator, steps=steps, cfg=cfg, height=height,
                                  width=width)
        return render_edit(pipe, prompt, negative_prompt=negative_prompt, generator=generator,
                           steps=steps, cfg=cfg, height=height, width=width, images=images)
