"""LTX-2 conditioned on clean latents: image-to-video (``extra_inputs: input_image``, the
reference's ``LTX-2.3-I2AV-splited.sh`` with ``input_audio,input_image``) and IC-LoRA (a
reference video per row, ``extra_inputs: in_context_videos``, the reference's
``LTX-2-T2AV-IC-LoRA-splited.sh``), each with its sound (``input_audio``) or without.

Trained as diffusers' pipelines run them, so a LoRA behaves the same there:

- image-to-video (``LTX2ImageToVideoPipeline``): the clip's first frame, encoded alone by the
  video VAE (the pipeline's ``prepare_latents``: the posterior's mode, normalised), is the
  first latent frame, kept clean in the noisy input; its tokens get timestep 0 (the
  pipeline's ``timestep * (1 - conditioning_mask)``), the audio stream the clip's timestep,
  and the loss leaves the first latent frame out. Stage 1 caches ``first_frame``
  [1, C, 1, H/32, W/32]. The input image is the clip's first frame as decoded and sized for
  training (the reference's ``input_image``: ``data["video"][0]``). Samples render with
  ``LTX2ImageToVideoPipeline`` from each prompt's image (``sample_images``, else a dataset
  row's first frame).
- IC-LoRA (``LTX2InContextPipeline``): the row's reference video (its ``in_context_videos``
  column; ``backend.data.video.check_reference_videos`` refuses a row without one, naming
  it) at the clip's size divided by the row's ``in_context_downsample_factor`` (1 unless
  ``extra_inputs`` names that column), cut to the clip's frames or padded with black ones,
  encoded by the video VAE and appended after the clip's tokens as clean tokens (timestep
  0) at their own positions, the spatial ones scaled by the factor (the pipeline's
  ``_encode_reference_conditions``); the loss covers the clip's tokens only. Stage 1 caches
  ``reference_latents`` [1, C, F', h, w] and ``reference_scale``. Samples render with
  ``LTX2InContextPipeline`` from each prompt's reference clip (``sample_videos``, else the
  reference video of the dataset row whose caption is the prompt, else of the first row):
  the sample stage reads its frames at the sample's size with the run's frame settings (a
  clip too short for ``sample_num_frames`` is refused before any model loads), and
  ``reference_clip`` cuts or pads them as training does; the pipeline encodes them as
  ``ConditionEncoding.encode_image`` does (the VAE posterior's mode, normalised) and
  appends them as clean tokens at timestep 0 (factor 1).

With sound the audio stream is trained as ``t2av.py`` trains it (its latents cached in
stage 1, its flow loss added); without, it gets noise at the clip's timestep, out of the
loss, as the video-only run feeds it.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from typing import Any

from backend.core import readgate
from backend.core.messages import Msg
from backend.families.common import noised, weighted_mse
from backend.families.ltx2.adapter import (FRAME_RATE, Adapter, Encoder, SoundClip,
                                           audio_frames, audio_noise, model_config)
from backend.families.ltx2.t2av import AUDIO_INPUT, SoundAdapter, SoundEncoder, SoundSource

IMAGE_INPUT = "input_image"
REFERENCE_INPUT = "in_context_videos"


def inputs_of(cfg) -> list[str]:
    """The names ``extra_inputs`` gives (comma-separated)."""
    return [x.strip() for x in (getattr(cfg, "extra_inputs", "") or "").split(",") if x.strip()]


def unwrapped(transformer):
    """The transformer itself, through any wrapper (DeepSpeed's engine, DDP)."""
    while hasattr(transformer, "module"):
        transformer = transformer.module
    return transformer


# ------------------------------------------------------------------------------------------
# Stage 1
# ------------------------------------------------------------------------------------------
@dataclass
class Extras:
    """What stage 1 reads of one record beside its pixels: its sound (None: the run trains
    none) and its reference video (``backend.data.video.ReferenceVideo``; None: none)."""
    sound: SoundSource | None
    reference: Any


class ConditionEncoding:
    """Stage 1 for a conditioned run (a mixin before ``Encoder`` / ``SoundEncoder``): each
    clip's ``first_frame`` (image-to-video) or ``reference_latents`` and
    ``reference_scale`` (IC-LoRA), and its ``audio_latents`` when the run trains sound."""

    image = False
    reference = False
    sound = False

    def load_sound(self, rec, cfg) -> Extras:
        """What the cache reads of a record beside its pixels (``backend.data.cache``
        asks every encoder that has this): its sound source and its reference video."""
        gate = readgate.for_config(cfg)
        return Extras(SoundSource(rec.sound, gate) if self.sound else None, rec.reference)

    def item_sample(self, parts: tuple, item: tuple) -> dict[str, Any]:
        import torch

        pixels = item[0]()
        extras = item[2]() if len(item) > 2 else Extras(None, None)
        latents = self.encode_image(pixels)
        sample = self.make_sample(parts, latents, pixels)
        if self.sound:
            frames = pixels.shape[2] if pixels.ndim == 5 else 1
            source = extras.sound or SoundSource(None, readgate.UNRESTRICTED)
            sample["audio_latents"] = self.encode_sound(
                source.read(self.mel, frames / FRAME_RATE), latents.shape[2])
        if self.image:
            clip = pixels if pixels.ndim == 5 else pixels.unsqueeze(2)
            sample["first_frame"] = self.encode_image(clip[:, :, :1])
        if self.reference:
            if extras.reference is None:
                raise ValueError(Msg("data.no_reference_video", where=parts_where(item)))
            sample["reference_latents"] = self.encode_image(extras.reference.load())
            sample["reference_scale"] = torch.tensor([float(extras.reference.factor)])
        return sample

    def encode_sample(self, pixels, prompt: str) -> dict[str, Any]:
        """One clip (a caller that names no sound and no reference: image-to-video only)."""
        return self.item_sample(self.prompt_parts(prompt), (lambda: pixels, prompt))


def parts_where(item: tuple) -> str:
    return repr(item[1])[:60]


class ConditionEncoder(ConditionEncoding, Encoder):
    """The video-only ``Encoder`` with the run's condition."""

    def __init__(self, text_encoder, tokenizer, connectors, vae, device=None,
                 offload: str = "none", image: bool = False, reference: bool = False):
        super().__init__(text_encoder, tokenizer, connectors, vae, device=device,
                         offload=offload)
        self.image, self.reference = image, reference


class SoundConditionEncoder(ConditionEncoding, SoundEncoder):
    """``SoundEncoder`` (the audio VAE too) with the run's condition."""

    sound = True

    def __init__(self, text_encoder, tokenizer, connectors, vae, audio_vae, device=None,
                 offload: str = "none", image: bool = False, reference: bool = False):
        super().__init__(text_encoder, tokenizer, connectors, vae, audio_vae, device=device,
                         offload=offload)
        self.image, self.reference = image, reference


# ------------------------------------------------------------------------------------------
# Stage 2
# ------------------------------------------------------------------------------------------
def reference_tokens(transformer, sample: dict[str, Any], batch: int, dtype):
    """(packed reference tokens [B, R, C], their positions [B, 3, R, 2]) as
    ``LTX2InContextPipeline._encode_reference_conditions`` makes them: the transformer's
    own video positions at the reference's latent size, height and width times the
    reference's downscale factor."""
    from diffusers import LTX2Pipeline

    model = unwrapped(transformer)
    config = model.config
    ref = sample["reference_latents"]
    _, _, f, h, w = ref.shape
    device = ref.device
    coords = model.rope.prepare_video_coords(batch, f, h, w, device, fps=FRAME_RATE)
    scale = float(sample.get("reference_scale", [1.0])[0])
    if scale != 1:
        coords[:, 1] = coords[:, 1] * scale
        coords[:, 2] = coords[:, 2] * scale
    tokens = LTX2Pipeline._pack_latents(ref.to(dtype), config.patch_size, config.patch_size_t)
    return tokens.expand(batch, -1, -1), coords


def conditioned_loss(transformer, sample: dict[str, Any], schedule, index: int, noise, dtype,
                     sound: bool = False):
    """The flow-matching loss of a clip with its condition: a cached ``first_frame`` is the
    clean first latent frame at timestep 0 (left out of the loss), cached
    ``reference_latents`` are clean tokens at timestep 0 after the clip's (the loss covers
    the clip's); with ``sound`` the audio's flow loss is added (``t2av.joint_loss``), else
    the audio stream gets noise at the clip's timestep."""
    import torch
    import torch.nn.functional as F
    from diffusers import LTX2Pipeline

    model = unwrapped(transformer)
    config = model_config(transformer)
    x0, video_noise, sigma, x_t = noised(sample, schedule, index, noise, dtype)
    b, _, f, h, w = x0.shape
    device = x0.device
    mask = torch.ones((b, 1, f, h, w), device=device, dtype=dtype)
    first = sample.get("first_frame")
    if first is not None:
        mask[:, :, 0] = 0
        x_t = (1 - mask) * first.to(device, dtype) + mask * x_t
    t = schedule.timesteps[index].to(device=device, dtype=torch.float32).expand(b)
    tokens = LTX2Pipeline._pack_latents(x_t.to(dtype), config.patch_size, config.patch_size_t)
    per_token = t.unsqueeze(-1) * LTX2Pipeline._pack_latents(
        mask.float(), config.patch_size, config.patch_size_t).squeeze(-1)
    count = tokens.shape[1]
    coords = model.rope.prepare_video_coords(b, f, h, w, device, fps=FRAME_RATE)
    if "reference_latents" in sample:
        ref, ref_coords = reference_tokens(transformer, {
            **sample, "reference_latents": sample["reference_latents"].to(device)}, b, dtype)
        tokens = torch.cat([tokens, ref], dim=1)
        per_token = torch.cat([per_token, per_token.new_zeros(b, ref.shape[1])], dim=1)
        coords = torch.cat([coords, ref_coords.to(coords.dtype)], dim=2)
    if sound:
        a0 = sample["audio_latents"].to(device=device, dtype=dtype)
        a_noise = audio_noise(noise, a0.shape).to(device=device, dtype=dtype)
        a_t = (1 - sigma) * a0 + sigma * a_noise
    else:
        a_t = audio_noise(noise, (b, audio_frames(config, f), config.audio_in_channels)).to(
            device=device, dtype=dtype)
    mask_text = sample.get("prompt_emb_mask")
    mask_text = mask_text.to(device) if mask_text is not None else None
    video, audio = transformer(
        hidden_states=tokens, audio_hidden_states=a_t,
        encoder_hidden_states=sample["prompt_emb"].to(device, dtype),
        audio_encoder_hidden_states=sample["audio_prompt_emb"].to(device, dtype),
        timestep=per_token, audio_timestep=t, sigma=t, encoder_attention_mask=mask_text,
        audio_encoder_attention_mask=mask_text, num_frames=f, height=h, width=w,
        fps=FRAME_RATE, audio_num_frames=a_t.shape[1], video_coords=coords,
        use_cross_timestep=True, return_dict=False)
    pred = LTX2Pipeline._unpack_latents(video[:, :count], f, h, w, config.patch_size,
                                        config.patch_size_t)
    target, cut = video_noise - x0, None
    if first is not None:
        pred, target = pred[:, :, 1:], target[:, :, 1:]
        cut = lambda m: m[:, :, 1:]  # noqa: E731 - the loss mask's frames as the loss's
    if pred.shape[2] == 0:  # a one-frame clip is its own condition: nothing to learn
        loss = pred.float().sum() * 0
    else:
        loss = weighted_mse(pred, target, sample, x0, cut)
    if sound:
        loss = loss + F.mse_loss(audio.float(), (a_noise - a0).float())
    return loss * schedule.weights[index].to(device)


# ------------------------------------------------------------------------------------------
# Samples
# ------------------------------------------------------------------------------------------
def reference_clip(frames: list, num_frames: int) -> list:
    """A sample's reference frames (PIL) as training conditions on a row's reference
    (``backend.data.video.ReferenceVideo.load``): cut to the clip's ``num_frames``, a
    shorter one (an image: one frame) padded with black frames."""
    from PIL import Image

    frames = list(frames)[:num_frames]
    black = Image.new("RGB", frames[0].size, (0, 0, 0))
    return frames + [black] * (num_frames - len(frames))


def render_conditioned(pipe, prompt: str, *, negative_prompt: str, generator, steps: int,
                       cfg: float, height: int, width: int, num_frames: int = 121,
                       images: list | None = None, reference: bool = False,
                       sound: bool = False):
    """One clip from the prompt's image: its first frame (``LTX2ImageToVideoPipeline``) or
    its reference clip (``LTX2InContextPipeline``: the frames given, or an image, at the
    sample's size, through ``reference_clip``). Frames [F, H, W, 3] in [0, 1], or a
    ``SoundClip`` with ``sound``."""
    import torch

    if not images:
        raise ValueError(Msg("data.no_sample_condition"))
    kwargs: dict[str, Any] = {}
    if reference:
        from diffusers.pipelines.ltx2 import LTX2ReferenceCondition

        kwargs["reference_conditions"] = [
            LTX2ReferenceCondition(frames=reference_clip(images, num_frames))]
    else:
        kwargs["image"] = images[0]
    with torch.inference_mode():
        out = pipe(prompt=prompt, negative_prompt=negative_prompt or None,
                   guidance_scale=float(cfg), num_inference_steps=steps, height=height,
                   width=width, num_frames=num_frames, frame_rate=FRAME_RATE,
                   generator=generator, output_type="np", **kwargs)
    if not sound:
        return out.frames[0]
    return SoundClip(out.frames[0], out.audio[0].float().cpu(),
                     int(pipe.vocoder.config.output_sampling_rate))


# ------------------------------------------------------------------------------------------
# The run's adapter
# ------------------------------------------------------------------------------------------
class ConditionAdapter(SoundAdapter):
    """LTX-2's adapter bound to an image-to-video or IC-LoRA run, with sound or without:
    its stage-1 encoder, the conditioned loss, its pipeline for samples."""

    input_images = 1

    def __init__(self, spec, sound: bool, image: bool, reference: bool):
        if sound:
            SoundAdapter.__init__(self, spec)
        else:
            self.spec = spec
        self.sound, self.image, self.reference = sound, image, reference
        self.takes_reference_video = reference  # the dataset check reads it
        self.encoder = partial(SoundConditionEncoder if sound else ConditionEncoder,
                               image=image, reference=reference)
        self.pipeline = "LTX2InContextPipeline" if reference else "LTX2ImageToVideoPipeline"
        self.sample_suffix = ".mp4" if sound else ".webm"
        kind = "IC-LoRA" if reference else "image-to-video"
        self.title = f"LTX-2 {kind}{' with sound' if sound else ''}"

    @classmethod
    def for_run(cls, base: Adapter, cfg) -> "ConditionAdapter | None":
        """A ``ConditionAdapter`` when ``extra_inputs`` names ``input_image`` or
        ``in_context_videos``; None otherwise."""
        names = inputs_of(cfg)
        image, reference = IMAGE_INPUT in names, REFERENCE_INPUT in names
        if not (image or reference):
            return None
        if image and reference:
            raise ValueError(Msg("data.image_with_reference", got=cfg.extra_inputs))
        return cls(base.spec, AUDIO_INPUT in names, image, reference)

    def for_config(self, cfg):
        return self

    def loss_at(self, transformer, sample, schedule, index, noise, dtype):
        wanted = [("first_frame", "first_frame", IMAGE_INPUT)] if self.image else []
        wanted += [("reference_latents", "reference", REFERENCE_INPUT)] if self.reference \
            else []
        for key, what, given in wanted:
            if key not in sample:
                raise ValueError(Msg("data.cache_without_condition", what=what, inputs=given))
        if self.sound and "audio_latents" not in sample:
            raise ValueError(Msg("data.cache_without_sound"))
        if not self.image:
            sample = {k: v for k, v in sample.items() if k != "first_frame"}
        return conditioned_loss(transformer, sample, schedule, index, noise, dtype,
                                sound=self.sound)

    def render(self, pipe, prompt, *, negative_prompt, generator, steps, cfg, height, width,
               num_frames=121, images=None):
        return render_conditioned(pipe, prompt, negative_prompt=negative_prompt,
                                  generator=generator, steps=steps, cfg=cfg, height=height,
                                  width=width, num_frames=num_frames, images=images,
                                  reference=self.reference, sound=self.sound)

    def probe_sound(self, f) -> int | None:
        """Sound only where the run trains it (``check_clip_sound`` asks only then)."""
        return super().probe_sound(f)
