"""LTX-2 video-only adapter: components, prompt/clip encoding, the training loss, samples.

Components are diffusers' ``LTX2VideoTransformer3DModel``, ``AutoencoderKLLTX2Video``,
``LTX2TextConnectors``, ``AutoencoderKLLTX2Audio`` and ``LTX2Vocoder``, transformers'
``Gemma3ForConditionalGeneration`` and its tokenizer (the layout of ``Lightricks/LTX-2``).

Prompt encoding is ``LTX2Pipeline``'s: ``encode_prompt`` (the prompt padded on the left to
1024 tokens, every hidden state of Gemma's text model stacked per token), then the
connectors as ``LTX2Pipeline.__call__`` runs them (per-layer normalisation, the projection,
one small transformer per stream with learnable registers in the padding), run through a
pipeline holding only the encoders. The cache keeps what the transformer reads: the video
stream's ``prompt_emb`` [1, 1024, D], the audio stream's ``audio_prompt_emb`` and the mask
``prompt_emb_mask`` [1, 1024]. Latents are the VAE posterior's mode normalised as the LTX-2
pipelines normalise encoded frames: ``(z - latents_mean) * scaling_factor / latents_std``
[1, 128, (F - 1) / 8 + 1, H / 32, W / 32].

The loss is the reference trainer's LTX-2 flow matching (``FlowMatchScheduler("LTX-2")``
with 1000 training steps): sigmas from linspace(1, 0, 1001)[:-1] shifted exponentially with
mu 2.05 (``LTX2Pipeline``'s max_shift, at 4096 tokens) and stretched so the last is 0.1 (the
scheduler's shift_terminal), timestep 1000 sigma, x_t = (1 - sigma) x0 + sigma noise, target
noise - x0 (the velocity the pipeline's scheduler steps along), MSE weighted by
exp(-2 ((t - 500) / 1000)^2) shifted to 0 and normalised to mean 1. The audio stream gets
pure noise of the clip's audio length at the same timestep (as the reference's no-audio
run feeds it), drawn from a generator seeded by the video noise, so a loss at fixed noise
is the same on every call; its prediction is not in the loss.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from backend.core.media import frame_strip
from backend.families.base import Family, Schedule
from backend.families.common import (OffloadingEncoder, VideoClips, cached_sample, frozen,
                                     load_tokenizer, noised, weighted_mse)
from backend.families.ltx2 import tiny
from backend.families.ltx2.audio import vocoder_class, write_clip_with_sound
from backend.families.ltx2.native import from_native, to_native
from backend.families.ltx2.published import CONFIGS, TRANSFORMER, VARIANT_CONFIGS

NUM_TRAIN_TIMESTEPS = 1000
MAX_SEQUENCE_LENGTH = 1024   # LTX2Pipeline's default
FRAME_RATE = 24.0            # the reference's --frame_rate and LTX2Pipeline's default
TRAIN_MU = 2.05              # the exponential shift at 4096 tokens (max_shift)
SHIFT_TERMINAL = 0.1         # the last training sigma (the scheduler's shift_terminal)
TEMPORAL_COMPRESSION = 8     # pixel frames per latent frame after the first (the video VAE)


# ------------------------------------------------------------------------------------------
# Loading
# ------------------------------------------------------------------------------------------
def transformer_class():
    from diffusers import LTX2VideoTransformer3DModel
    return LTX2VideoTransformer3DModel


def load_text_encoder(folder: str | Path, dtype=None, device: str | Any = "cpu"):
    from transformers import Gemma3ForConditionalGeneration

    return frozen(Gemma3ForConditionalGeneration.from_pretrained(str(folder), dtype=dtype),
                  device)


def load_connectors(folder: str | Path, dtype=None, device: str | Any = "cpu"):
    from diffusers.pipelines.ltx2 import LTX2TextConnectors

    return frozen(LTX2TextConnectors.from_pretrained(str(folder), torch_dtype=dtype), device)


def load_vae(folder: str | Path, dtype=None, device: str | Any = "cpu"):
    from diffusers import AutoencoderKLLTX2Video

    return frozen(AutoencoderKLLTX2Video.from_pretrained(str(folder), torch_dtype=dtype),
                  device)


def load_audio_vae(folder: str | Path, dtype=None, device: str | Any = "cpu"):
    from diffusers import AutoencoderKLLTX2Audio

    return frozen(AutoencoderKLLTX2Audio.from_pretrained(str(folder), torch_dtype=dtype),
                  device)


def load_vocoder(folder: str | Path, dtype=None, device: str | Any = "cpu"):
    """LTX-2's vocoder or LTX-2.3's with its bandwidth extension, by the class its
    config.json names (``audio.vocoder_class``: another is refused, naming the vocoder)."""
    from diffusers.pipelines.ltx2.vocoder import LTX2Vocoder

    cls = vocoder_class(LTX2Vocoder.load_config(str(folder)).get("_class_name"))
    return frozen(cls.from_pretrained(str(folder), torch_dtype=dtype), device)


def load_scheduler(folder: str | Path):
    from diffusers import FlowMatchEulerDiscreteScheduler

    return FlowMatchEulerDiscreteScheduler.from_pretrained(str(folder))


def as_clip(pixels):
    """Pixels [B, 3, F, H, W]; an image [B, 3, H, W] as a one-frame clip."""
    return pixels.unsqueeze(2) if pixels.ndim == 4 else pixels


class Encoder(OffloadingEncoder):
    """Gemma 3 + connectors + video VAE (+ tokenizer), frozen: prompts -> the two streams'
    embeddings, clips -> latents.

    ``offload`` (``data_process_offload``): none | model | sequential, as for every family
    (``OffloadingEncoder``); the connectors go with the text encoder. Every mode computes
    the same tensors.
    """

    with_text_encoder = ("connectors",)

    def __init__(self, text_encoder, tokenizer, connectors, vae, device=None,
                 offload: str = "none"):
        from diffusers import LTX2Pipeline

        self.connectors = connectors
        self.pipe = LTX2Pipeline(scheduler=None, vae=vae, audio_vae=None,
                                 text_encoder=text_encoder, tokenizer=tokenizer,
                                 connectors=connectors, transformer=None, vocoder=None)
        super().__init__(text_encoder, vae, device=device, offload=offload)

    def prompt_parts(self, prompt: str) -> tuple:
        """(video stream's embedding, audio stream's, their mask): ``LTX2Pipeline``'s
        ``encode_prompt`` followed by its connectors."""
        import torch

        pipe = self.pipe
        with torch.no_grad():
            emb, mask, _, _ = pipe.encode_prompt(prompt, do_classifier_free_guidance=False,
                                                 max_sequence_length=MAX_SEQUENCE_LENGTH,
                                                 device=self.device)
            video, audio, mask = self.connectors(
                emb, mask, padding_side=getattr(pipe.tokenizer, "padding_side", "left"))
        return video, audio, mask

    def encode_image(self, pixels):
        """Pixels [B, 3, F, H, W] in [-1, 1] -> normalised latents [B, C, F', H/32, W/32]."""
        import torch
        from diffusers import LTX2Pipeline

        vae = self.vae
        with torch.no_grad():
            z = vae.encode(as_clip(pixels).to(device=self.device, dtype=vae.dtype)
                           ).latent_dist.mode()
            return LTX2Pipeline._normalize_latents(z, vae.latents_mean, vae.latents_std,
                                                   vae.config.scaling_factor)

    def make_sample(self, parts: tuple, latents, pixels) -> dict[str, Any]:
        video, audio, mask = parts
        return cached_sample(latents, as_clip(pixels), prompt_emb=video,
                             audio_prompt_emb=audio, prompt_emb_mask=mask)


# ------------------------------------------------------------------------------------------
# Training loss
# ------------------------------------------------------------------------------------------
def training_schedule() -> Schedule:
    """The reference's LTX-2 training schedule: 1000 sigmas (1 down to 0.1), their
    timesteps (1000 sigma) and its weights (mean 1)."""
    import math

    import torch

    s = torch.linspace(1.0, 0.0, NUM_TRAIN_TIMESTEPS + 1)[:-1]
    sigmas = math.exp(TRAIN_MU) / (math.exp(TRAIN_MU) + (1 / s - 1))
    one_minus = 1.0 - sigmas
    sigmas = 1.0 - one_minus / (one_minus[-1] / (1 - SHIFT_TERMINAL))
    timesteps = sigmas * NUM_TRAIN_TIMESTEPS
    y = torch.exp(-2 * ((timesteps - NUM_TRAIN_TIMESTEPS / 2) / NUM_TRAIN_TIMESTEPS) ** 2)
    y = y - y.min()
    return Schedule(sigmas, timesteps, y * (NUM_TRAIN_TIMESTEPS / y.sum()))


def model_config(transformer):
    """The transformer's own config, through any wrapper (DeepSpeed's engine, DDP: their
    ``config`` is theirs)."""
    while hasattr(transformer, "module"):
        transformer = transformer.module
    return transformer.config


def audio_frames(config, latent_frames: int, fps: float = FRAME_RATE) -> int:
    """Audio latent frames of a clip of ``latent_frames`` video latent frames, as
    ``LTX2Pipeline`` sizes them: the clip's seconds x sample rate / hop / the audio VAE's
    4x time compression (the transformer's own copies of those numbers)."""
    frames = (latent_frames - 1) * TEMPORAL_COMPRESSION + 1
    per_second = (config.audio_sampling_rate / config.audio_hop_length
                  / config.audio_scale_factor)
    return max(1, round(frames / fps * per_second))


def clip_audio_tokens(config, frames: int) -> int:
    """Audio stream tokens of a clip of ``frames`` frames: ``audio_frames`` of its video
    latent frames, the length both the video-only loss (noise) and stage 1 (the cached
    sound, ``t2av.audio_frames_of``) give the stream; the pipeline packs each audio latent
    frame's channels x mel bands into one token (``LTX2Pipeline._pack_audio_latents``)."""
    return audio_frames(config, (max(int(frames), 1) - 1) // TEMPORAL_COMPRESSION + 1)


def audio_noise(noise, shape):
    """Noise for the audio stream, from a generator seeded by the video ``noise``: fresh
    whenever the video's is, the same for the same video noise (held-out losses)."""
    import torch

    head = noise.detach().flatten()[:16].double().cpu()
    seed = int((head * 1e6).round().abs().sum()) % (2 ** 62)
    return torch.randn(shape, generator=torch.Generator().manual_seed(seed))


def predict_streams(transformer, x_t, timestep, sample: dict[str, Any], audio, dtype):
    """(the video flow [B, C, F, H, W], the audio flow [B, L, C_audio]) the transformer
    predicts for video latents ``x_t`` [B, C, F, H, W] and the audio stream's packed noisy
    latents ``audio`` [B, L, C_audio] at ``timestep``, called as ``LTX2Pipeline`` calls it
    (patchified tokens, the same timestep and sigma for both streams, the pipeline's frame
    rate)."""
    import torch
    from diffusers import LTX2Pipeline

    config = model_config(transformer)
    b, _, f, h, w = x_t.shape
    device = x_t.device
    tokens = LTX2Pipeline._pack_latents(x_t, config.patch_size, config.patch_size_t)
    t = timestep.to(device=device, dtype=torch.float32).expand(b)
    mask = sample.get("prompt_emb_mask")
    mask = mask.to(device) if mask is not None else None
    video, sound = transformer(
        hidden_states=tokens.to(dtype), audio_hidden_states=audio.to(device, dtype),
        encoder_hidden_states=sample["prompt_emb"].to(device, dtype),
        audio_encoder_hidden_states=sample["audio_prompt_emb"].to(device, dtype),
        timestep=t, sigma=t, encoder_attention_mask=mask, audio_encoder_attention_mask=mask,
        num_frames=f, height=h, width=w, fps=FRAME_RATE, audio_num_frames=audio.shape[1],
        use_cross_timestep=True, return_dict=False)
    return (LTX2Pipeline._unpack_latents(video, f, h, w, config.patch_size,
                                         config.patch_size_t), sound)


def predict(transformer, x_t, timestep, sample: dict[str, Any], audio, dtype):
    """The video flow (noise - x0) of ``predict_streams``."""
    return predict_streams(transformer, x_t, timestep, sample, audio, dtype)[0]


def flow_matching_loss(transformer, sample: dict[str, Any], schedule: Schedule, index: int,
                       noise, dtype):
    """Weighted flow-matching MSE of one clip's video (and by its ``loss_mask``:
    ``weighted_mse``), the audio stream fed noise at the same timestep."""
    config = model_config(transformer)
    x0, video_noise, _, x_t = noised(sample, schedule, index, noise, dtype)
    b, _, f, _, _ = x0.shape
    audio = audio_noise(noise, (b, audio_frames(config, f), config.audio_in_channels))
    pred = predict(transformer, x_t, schedule.timesteps[index], sample, audio, dtype)
    loss = weighted_mse(pred, video_noise - x0, sample, x0)
    return loss * schedule.weights[index].to(x0.device)


# ------------------------------------------------------------------------------------------
# Samples
# ------------------------------------------------------------------------------------------
@dataclass
class SoundClip:
    """A rendered clip with its sound: ``frames`` [F, H, W, 3] floats in [0, 1],
    ``waveform`` [channels, samples] floats in [-1, 1] at ``sample_rate``."""
    frames: Any
    waveform: Any
    sample_rate: int


def render(pipe, prompt: str, *, negative_prompt: str, generator, steps: int, cfg: float,
           height: int, width: int, num_frames: int = 121, sound: bool = False):
    """One clip: frames [F, H, W, 3] floats in [0, 1]; with ``sound`` a ``SoundClip`` that
    keeps the pipeline's sound too (the vocoder's waveform at its output rate). ``cfg`` is
    ``LTX2Pipeline``'s ``guidance_scale`` (the video's; its other guidance settings, the
    audio's among them, are the pipeline's defaults)."""
    import torch

    with torch.inference_mode():
        out = pipe(prompt=prompt, negative_prompt=negative_prompt or None,
                   guidance_scale=float(cfg), num_inference_steps=steps, height=height,
                   width=width, num_frames=num_frames, frame_rate=FRAME_RATE,
                   generator=generator, output_type="np")
    if not sound:
        return out.frames[0]
    return SoundClip(out.frames[0], out.audio[0].float().cpu(),
                     int(pipe.vocoder.config.output_sampling_rate))


# ------------------------------------------------------------------------------------------
# The contract
# ------------------------------------------------------------------------------------------
class Adapter(VideoClips, Family):
    """LTX-2 text-to-video (video only) through the family contract
    (``backend/families/base.py``)."""

    media = "video"
    vae_scale_factor = 32
    vae_temporal_factor = TEMPORAL_COMPRESSION
    offload_blocks = ("transformer_blocks",)
    quantize_skip = ("proj_in", "audio_proj_in", "proj_out", "audio_proj_out",
                     "caption_projection", "audio_caption_projection", "time_embed",
                     "audio_time_embed", "av_cross_attn")

    # Stage 1 and samples (``Family.load_encoder``, ``Family.load_pipeline``).
    encoder = Encoder
    pipeline = "LTX2Pipeline"
    loaders = {"text_encoder": load_text_encoder, "connectors": load_connectors,
               "vae": load_vae, "tokenizer": load_tokenizer, "audio_vae": load_audio_vae,
               "vocoder": load_vocoder, "scheduler": load_scheduler}

    transformer_class = staticmethod(transformer_class)
    training_schedule = staticmethod(training_schedule)
    loss_at = staticmethod(flow_matching_loss)
    render = staticmethod(render)

    def save_sample(self, result, path, cfg) -> list[Path]:
        """A clip and its frame strip; a ``SoundClip`` is written with its sound (H.264 +
        AAC in ``.mp4``, VP9 + Opus in ``.webm``)."""
        if not isinstance(result, SoundClip):
            return super().save_sample(result, path, cfg)
        path = Path(path)
        write_clip_with_sound(result.frames, result.waveform, result.sample_rate, path,
                              fps=cfg.sample_fps)
        strip = path.with_name(path.name[: -len(path.suffix)] + ".strip.png")
        frame_strip(result.frames, 4).save(strip)
        return [path, strip]

    native_names = (to_native, from_native)

    # The numbers the audio stream's length is sized by (sample rate, hop, the audio VAE's
    # time compression): the transformer's copies of the audio VAE's, the same in every
    # released variant (``published.py``).
    audio_config = SimpleNamespace(**TRANSFORMER)

    def video_tokens(self, height: int, width: int, frames: int) -> int:
        """What the transformer attends over for one clip: its video tokens, the audio
        stream's (every run feeds it the clip's audio length: noise without sound,
        ``flow_matching_loss``; the cached sound with it, ``t2av.joint_loss``) and, for
        IC-LoRA, the reference video's, appended after the clip's at the clip's frames and
        size (``in_context_downsample_factor`` 1, the most a row gives; ``condition.py``).
        Image-to-video's first frame replaces the clip's first latent frame: no tokens."""
        video = super().video_tokens(height, width, frames)
        references = 1 if self.takes_reference_video else 0
        return video * (1 + references) + clip_audio_tokens(self.audio_config, frames)

    published = CONFIGS
    published_by_variant = VARIANT_CONFIGS

    def build_tiny(self, out_dir, seed=0, variant=None):
        return tiny.build_tiny_ltx2(out_dir, seed, bwe=variant == "ltx2_3")  # its vocoder
