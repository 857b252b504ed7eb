"""LTX-2 text-to-video-and-audio (T2AV): the clip's sound trained beside its frames.

A run with ``extra_inputs: input_audio`` (the reference's ``LTX-2-T2AV-splited.sh``:
``--data_file_keys video,input_audio --extra_inputs input_audio``) binds this adapter
(``SPEC.run_adapters``). What it changes from the video-only one:

- the dataset: each row's sound is its ``input_audio`` file when the row names one, else
  the clip's own audio stream; a row with neither is refused before any stage, naming the
  row, unless ``audio_missing: silence`` (then it trains on silence); sound of another
  sample rate is resampled, with a note (``backend.data.video.check_clip_sound``);
- stage 1 also loads the audio VAE: the sound, read with PyAV at its rate and layout and cut
  to the clip's duration (its frames at ``FRAME_RATE``, the 24 fps clips are taken at and
  the pipeline sizes sound by), becomes the log-mel spectrogram of
  ``audio.mel_spectrogram``, the VAE posterior's mode, packed and normalised as
  ``LTX2Pipeline.prepare_audio_latents`` treats given latents (``_pack_audio_latents``, then
  ``_normalize_audio_latents`` with the VAE's ``latents_mean`` / ``latents_std``) and cut to
  the pipeline's audio length for the clip (``adapter.audio_frames``): ``audio_latents``
  [1, L, C_audio] in the cache;
- stage 2 noises both streams at one timestep (the audio noise drawn from the video's, as
  the video-only run does) and adds the two flow-matching MSEs, each weighted by the
  schedule's weight: the reference's ``FlowMatchSFTAudioVideoLoss``;
- samples keep the pipeline's sound: ``.mp4`` files with an AAC audio stream at the
  vocoder's output rate (LTX-2's 24 kHz as released, LTX-2.3's ``LTX2VocoderWithBWE`` at
  its bandwidth extension's 48 kHz), the vocoder checked against the audio VAE when the
  pipeline loads (``MelSettings.check_vocoder``).
"""
from __future__ import annotations

from dataclasses import replace
from typing import Any

from backend.core import readgate
from backend.core.messages import Msg
from backend.families.common import noised, weighted_mse
from backend.families.ltx2.adapter import (FRAME_RATE, Adapter, Encoder, audio_frames,
                                           audio_noise, predict_streams, render)
from backend.families.ltx2.audio import (MelSettings, mel_spectrogram, probe_sound, read_sound,
                                         silence)
from backend.families.ltx2.published import TRANSFORMER

AUDIO_INPUT = "input_audio"
TITLE = "LTX-2 (video and audio)"


def wants_sound(cfg) -> bool:
    """The run trains the sound: ``extra_inputs`` names ``input_audio``."""
    given = getattr(cfg, "extra_inputs", "") or ""
    return AUDIO_INPUT in [x.strip() for x in given.split(",")]


class SoundSource:
    """Where one clip's sound is read from: a file (the clip itself or the row's
    ``input_audio``) through the run's read gate, or None for silence."""

    def __init__(self, path, gate: readgate.ReadGate):
        self.path, self.gate = path, gate

    def read(self, mel: MelSettings, seconds: float):
        """The waveform [channels, samples] at the VAE's rate, ``seconds`` long."""
        if self.path is None:
            return silence(mel, seconds)
        with self.gate.open(self.path, "audio") as f:
            return read_sound(f, mel, seconds)[0]


class SoundEncoder(Encoder):
    """The video-only ``Encoder`` plus the audio VAE: each clip's sound -> ``audio_latents``.
    Offload modes as ``Encoder``'s; with ``model`` the audio VAE shares the device with the
    video VAE after every prompt is encoded."""

    image_modules = ("vae", "audio_vae")

    def __init__(self, text_encoder, tokenizer, connectors, vae, audio_vae, device=None,
                 offload: str = "none"):
        super().__init__(text_encoder, tokenizer, connectors, vae, device=device,
                         offload=offload)
        self.audio_vae = audio_vae
        self.mel = MelSettings.from_configs(audio_vae.config)
        if offload == "sequential":
            from accelerate import cpu_offload

            cpu_offload(audio_vae, execution_device=self.device)

    def load_sound(self, rec, cfg) -> SoundSource:
        """The sound of a dataset record (``backend.data.cache.build_cache`` asks)."""
        return SoundSource(rec.sound, readgate.for_config(cfg))

    def encode_sound(self, waveform, latent_frames: int):
        """``sound_latents`` of a waveform with this encoder's audio VAE."""
        return sound_latents(self.audio_vae, self.mel, waveform, latent_frames, self.device)

    def item_sample(self, parts: tuple, item: tuple) -> dict[str, Any]:
        pixels = item[0]()
        latents = self.encode_image(pixels)
        frames = pixels.shape[2] if pixels.ndim == 5 else 1
        waveform = item[2]().read(self.mel, frames / FRAME_RATE)
        sample = self.make_sample(parts, latents, pixels)
        return {**sample, "audio_latents": self.encode_sound(waveform, latents.shape[2])}

    def encode_sample(self, pixels, prompt: str) -> dict[str, Any]:
        """One clip trained on silence (a caller that names no sound)."""
        return self.item_sample(self.prompt_parts(prompt),
                                (lambda: pixels, prompt,
                                 lambda: SoundSource(None, readgate.UNRESTRICTED)))


def sound_latents(audio_vae, mel: MelSettings, waveform, latent_frames: int, device="cpu"):
    """A waveform [channels, samples] of a clip of ``latent_frames`` video latent frames
    -> its normalised packed audio latents [1, L, C x M], L the pipeline's length for the
    clip: the mel front end, the VAE posterior's mode cut to L, ``LTX2Pipeline``'s
    ``_pack_audio_latents`` and ``_normalize_audio_latents``."""
    import torch
    from diffusers import LTX2Pipeline

    spec = mel_spectrogram(waveform.unsqueeze(0), mel)
    with torch.no_grad():
        z = audio_vae.encode(spec.to(device=device, dtype=audio_vae.dtype)).latent_dist.mode()
    length = audio_frames_of(audio_vae.config, audio_vae.temporal_compression_ratio,
                             latent_frames)
    if z.shape[2] < length:
        raise ValueError(f"audio_vae: {z.shape[2]} latent frames of sound, {length} needed")
    packed = LTX2Pipeline._pack_audio_latents(z[:, :, :length])
    return LTX2Pipeline._normalize_audio_latents(packed, audio_vae.latents_mean,
                                                 audio_vae.latents_std)


def audio_frames_of(audio_vae_config, compression: int, latent_frames: int) -> int:
    """``adapter.audio_frames`` from the audio VAE's numbers (stage 1 has no transformer)."""
    class Numbers:
        audio_sampling_rate = audio_vae_config.sample_rate
        audio_hop_length = audio_vae_config.mel_hop_length
        audio_scale_factor = compression
    return audio_frames(Numbers, latent_frames)


def joint_loss(transformer, sample: dict[str, Any], schedule, index: int, noise, dtype):
    """The video's weighted flow-matching MSE (by its ``loss_mask``: ``weighted_mse``) plus
    the audio's, both at schedule entry ``index`` and times its weight."""
    import torch.nn.functional as F

    x0, video_noise, sigma, x_t = noised(sample, schedule, index, noise, dtype)
    a0 = sample["audio_latents"].to(device=x0.device, dtype=dtype)
    a_noise = audio_noise(noise, a0.shape).to(device=x0.device, dtype=dtype)
    a_t = (1 - sigma) * a0 + sigma * a_noise
    video, sound = predict_streams(transformer, x_t, schedule.timesteps[index], sample, a_t,
                                   dtype)
    loss = weighted_mse(video, video_noise - x0, sample, x0) + F.mse_loss(
        sound.float(), (a_noise - a0).float())
    return loss * schedule.weights[index].to(x0.device)


class SoundAdapter(Adapter):
    """LTX-2's adapter bound to a T2AV run: stage 1 loads the audio VAE, the loss covers
    both streams, samples keep their sound."""

    title = TITLE
    sample_suffix = ".mp4"
    # The rate sound is trained at: the released audio VAE's, as the transformer's config
    # repeats it (the dataset is checked before any model file is read).
    sound_rate = int(TRANSFORMER["audio_sampling_rate"])

    def __init__(self, spec):
        self.spec = replace(spec, components=tuple(
            replace(c, stages=("data_process", "sample")) if c.name == "audio_vae" else c
            for c in spec.components))
        self.encoder = SoundEncoder

    @classmethod
    def for_run(cls, base: Adapter, cfg) -> "SoundAdapter | None":
        """A ``SoundAdapter`` when ``extra_inputs`` names ``input_audio``; None otherwise."""
        return cls(base.spec) if wants_sound(cfg) else None

    def for_config(self, cfg):
        return self

    def load_pipeline(self, dirs, dtype=None):
        """The sample pipeline, its vocoder checked against its audio VAE (a vocoder that
        does not write one hop of sound per mel frame is refused, naming it)."""
        pipe = super().load_pipeline(dirs, dtype)
        MelSettings.from_configs(pipe.audio_vae.config, pipe.vocoder.config)
        return pipe

    def loss_at(self, transformer, sample, schedule, index, noise, dtype):
        if "audio_latents" not in sample:
            raise ValueError(Msg("data.cache_without_sound"))
        return joint_loss(transformer, sample, schedule, index, noise, dtype)

    def render(self, pipe, prompt, *, negative_prompt, generator, steps, cfg, height, width,
               num_frames=121):
        return render(pipe, prompt, negative_prompt=negative_prompt, generator=generator,
                      steps=steps, cfg=cfg, height=height, width=width, num_frames=num_frames,
                      sound=True)

    def probe_sound(self, f) -> int | None:
        """The sample rate of an open file's first audio stream; None: it has none."""
        return probe_sound(f)
