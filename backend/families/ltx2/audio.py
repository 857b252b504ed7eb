"""LTX-2's sound: reading it with PyAV, the log-mel front end of its audio VAE, and clips
written with their sound.

Reading (``read_sound``): the audio stream of a clip or of a separate audio file, decoded
with PyAV (the ``av`` package; no ``ffmpeg`` program, no torchaudio) from a file object of
the run's read gate, converted by PyAV's resampler to float samples at the audio VAE's rate
and channel layout (stereo for the released VAE's two input channels, mono for one), cut to
the clip's duration from the stream's start (a shorter stream is padded with silence).

The front end (``mel_spectrogram``) is the one the released audio VAE was trained on (the
original LTX-2 preprocessing; diffusers decodes audio but has no encoder side): a magnitude
STFT (Hann window of ``N_FFT`` samples, centred frames padded by reflection, hop
``mel_hop_length``), a Slaney-scale mel filterbank of ``mel_bins`` bands from 0 Hz to half
the sample rate with Slaney (area) normalisation, then ``log(max(mel, 1e-5))``, laid out as
the VAE takes it: [B, channels, frames, mel_bins]. Sample rate, hop, bands and channels are
the audio VAE's config (``sample_rate``, ``mel_hop_length``, ``mel_bins``, ``in_channels``);
the vocoder's config must agree, which ``MelSettings`` checks. Two vocoders are loaded (a
folder's config ``_class_name``, ``VOCODER_CLASSES``): LTX-2's ``LTX2Vocoder``, whose
upsampling turns one mel frame into ``output_sampling_rate / sample_rate * mel_hop_length``
samples, and LTX-2.3's ``LTX2VocoderWithBWE``: the same vocoder writing one hop per mel frame
at ``input_sampling_rate`` (16 kHz as released), then a bandwidth extension that takes the
log-mel of that sound (its own ``hop_length``) and writes ``prod(bwe_upsample_factors)``
samples per frame at ``output_sampling_rate`` (48 kHz), the rate its sound comes out at.
The window length is not in either config: 1024 samples (64 ms at 16 kHz), the released
preprocessing's.

Writing (``write_clip_with_sound``): frames and a waveform muxed by PyAV, H.264 + AAC in
MP4 (VP9 + Opus for ``.webm``), written atomically.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from backend.core import writegate
from backend.core.media import as_arrays
from backend.core.messages import Msg

N_FFT = 1024          # the released preprocessing's STFT window (not in the diffusers configs)
LOG_FLOOR = 1e-5      # mel magnitudes are clamped here before the log
# The vocoders the family loads, by a folder's config ``_class_name``: LTX-2's, and LTX-2.3's
# with its bandwidth extension.
VOCODER = "LTX2Vocoder"
VOCODER_BWE = "LTX2VocoderWithBWE"
VOCODER_CLASSES = (VOCODER, VOCODER_BWE)
_REQUIRED = object()


class NoSound(ValueError):
    """The file has no audio stream."""


@dataclass(frozen=True)
class MelSettings:
    """The front end's numbers, read from the audio VAE's (and the vocoder's) config."""
    sample_rate: int
    hop_length: int
    mel_bins: int
    channels: int
    n_fft: int = N_FFT

    @property
    def f_max(self) -> float:
        return self.sample_rate / 2.0

    @classmethod
    def from_configs(cls, audio_vae_config, vocoder_config=None) -> "MelSettings":
        """From the audio VAE's config (a dict or a model's config); with the vocoder's,
        checked against it (``check_vocoder``)."""
        s = cls(int(_value(audio_vae_config, "sample_rate")),
                int(_value(audio_vae_config, "mel_hop_length")),
                int(_value(audio_vae_config, "mel_bins")),
                int(_value(audio_vae_config, "in_channels")))
        if vocoder_config is not None:
            s.check_vocoder(vocoder_config)
        return s

    def check_vocoder(self, config) -> None:
        """Refuse a vocoder config (naming the vocoder) that does not fit this front end: a
        class the family does not load (``VOCODER_CLASSES``, when the config names one); an
        ``in_channels`` other than channels x mel bins; a vocoder that does not write one
        hop of sound per mel frame at its rate (``output_sampling_rate``; with a bandwidth
        extension ``input_sampling_rate``, the extension's own numbers then giving
        ``prod(bwe_upsample_factors)`` samples per ``hop_length`` at
        ``output_sampling_rate``)."""
        name = _value(config, "_class_name", None)
        if name is not None and name not in VOCODER_CLASSES:
            raise ValueError(Msg("data.vocoder_class", got=name, allowed=list(VOCODER_CLASSES)))
        bwe = name == VOCODER_BWE or _value(config, "bwe_upsample_factors", None) is not None
        got = int(_value(config, "in_channels"))
        if got != self.channels * self.mel_bins:
            raise ValueError(Msg("data.vocoder_channels", got=got, channels=self.channels,
                                 bins=self.mel_bins))
        per_frame = math.prod(_value(config, "upsample_factors"))
        rate = int(_value(config, "input_sampling_rate" if bwe else "output_sampling_rate"))
        if per_frame * self.sample_rate != self.hop_length * rate:
            raise ValueError(Msg("data.vocoder_hop", per_frame=per_frame, rate=rate,
                                 hop=self.hop_length, vae_rate=self.sample_rate))
        if bwe:
            out_rate = int(_value(config, "output_sampling_rate"))
            bwe_frame = math.prod(_value(config, "bwe_upsample_factors"))
            bwe_hop = int(_value(config, "hop_length"))
            if out_rate % rate or bwe_frame * rate != bwe_hop * out_rate:
                raise ValueError(Msg("data.vocoder_extension", per_frame=bwe_frame,
                                     out_rate=out_rate, hop=bwe_hop, rate=rate))

    def samples(self, seconds: float) -> int:
        return int(round(seconds * self.sample_rate))


def _value(config, key: str, default: Any = _REQUIRED):
    """``config[key]`` of a dict (a model's config is one too), else its attribute;
    ``default`` when given and the key is absent."""
    if isinstance(config, dict):
        return config[key] if default is _REQUIRED else config.get(key, default)
    return getattr(config, key) if default is _REQUIRED else getattr(config, key, default)


def vocoder_class(name: str | None):
    """The diffusers class of a vocoder folder's config ``_class_name``: ``LTX2Vocoder`` or
    ``LTX2VocoderWithBWE``; another is refused, naming the vocoder."""
    from diffusers.pipelines.ltx2 import vocoder

    if name not in VOCODER_CLASSES:
        raise ValueError(Msg("data.vocoder_class", got=name, allowed=list(VOCODER_CLASSES)))
    return getattr(vocoder, name)


# ------------------------------------------------------------------------------------------
# The mel front end
# ------------------------------------------------------------------------------------------
def hz_to_mel(f):
    """Slaney's mel scale: linear below 1 kHz (3 bands per 200 Hz), logarithmic above."""
    import torch

    f = torch.as_tensor(f, dtype=torch.float64)
    f_sp, min_log_hz = 200.0 / 3, 1000.0
    min_log_mel, logstep = min_log_hz / f_sp, math.log(6.4) / 27.0
    linear = f / f_sp
    log = min_log_mel + torch.log(torch.clamp(f, min=min_log_hz) / min_log_hz) / logstep
    return torch.where(f >= min_log_hz, log, linear)


def mel_to_hz(m):
    import torch

    m = torch.as_tensor(m, dtype=torch.float64)
    f_sp, min_log_hz = 200.0 / 3, 1000.0
    min_log_mel, logstep = min_log_hz / f_sp, math.log(6.4) / 27.0
    return torch.where(m >= min_log_mel, min_log_hz * torch.exp(logstep * (m - min_log_mel)),
                       f_sp * m)


def mel_filterbank(s: MelSettings):
    """[mel_bins, n_fft / 2 + 1]: triangles evenly spaced on the Slaney mel scale from 0 Hz
    to ``f_max``, each scaled to unit area (2 / its width in Hz)."""
    import torch

    freqs = torch.linspace(0, s.sample_rate / 2, s.n_fft // 2 + 1, dtype=torch.float64)
    edges = mel_to_hz(torch.linspace(float(hz_to_mel(0.0)), float(hz_to_mel(s.f_max)),
                                     s.mel_bins + 2, dtype=torch.float64))
    widths = edges[1:] - edges[:-1]
    slopes = edges.unsqueeze(1) - freqs.unsqueeze(0)          # [bins + 2, freqs]
    down = -slopes[:-2] / widths[:-1].unsqueeze(1)
    up = slopes[2:] / widths[1:].unsqueeze(1)
    fb = torch.clamp(torch.minimum(down, up), min=0)
    fb = fb * (2.0 / (edges[2:] - edges[:-2])).unsqueeze(1)
    return fb.float()


def mel_spectrogram(waveform, s: MelSettings):
    """Log-mel of ``waveform`` [B, C, N] (or [C, N]) at ``s.sample_rate``: [B, C, frames,
    mel_bins], frames = N // hop + 1 (centred frames)."""
    import torch

    if waveform.ndim == 2:
        waveform = waveform.unsqueeze(0)
    b, c, n = waveform.shape
    x = waveform.reshape(b * c, n).float()
    spec = torch.stft(x, n_fft=s.n_fft, hop_length=s.hop_length, win_length=s.n_fft,
                      window=torch.hann_window(s.n_fft, device=x.device), center=True,
                      pad_mode="reflect", return_complex=True).abs()   # [BC, freqs, T]
    mel = torch.matmul(mel_filterbank(s).to(x.device), spec)
    mel = torch.log(torch.clamp(mel, min=LOG_FLOOR))
    return mel.reshape(b, c, s.mel_bins, -1).transpose(2, 3).contiguous()


def mel_band_of(frequency: float, s: MelSettings) -> int:
    """The mel band whose triangle peaks nearest ``frequency`` (Hz)."""
    import torch

    centres = mel_to_hz(torch.linspace(float(hz_to_mel(0.0)), float(hz_to_mel(s.f_max)),
                                       s.mel_bins + 2, dtype=torch.float64))[1:-1]
    return int(torch.argmin((centres - frequency).abs()))


# ------------------------------------------------------------------------------------------
# Reading sound with PyAV
# ------------------------------------------------------------------------------------------
def _av():
    import av

    return av


def probe_sound(f) -> int | None:
    """The sample rate of the first audio stream of the open file ``f``; None when the file
    has none."""
    av = _av()
    with av.open(f, mode="r") as container:
        if not container.streams.audio:
            return None
        stream = container.streams.audio[0]
        return int(stream.rate or stream.codec_context.sample_rate or 0) or None


def read_sound(f, s: MelSettings, seconds: float):
    """(waveform [channels, samples] float32 at ``s.sample_rate``, the stream's own rate) of
    the first audio stream of the open file ``f``: converted by PyAV's resampler to the
    VAE's rate and layout, from the stream's start, cut to ``seconds`` (padded with silence
    when shorter). Raises ``NoSound`` for a file without an audio stream."""
    import numpy as np
    import torch

    av = _av()
    want = s.samples(seconds)
    layout = "stereo" if s.channels == 2 else "mono"
    resampler = av.AudioResampler(format="fltp", layout=layout, rate=s.sample_rate)
    chunks, have = [], 0
    with av.open(f, mode="r") as container:
        if not container.streams.audio:
            raise NoSound("no audio stream")
        stream = container.streams.audio[0]
        rate = int(stream.rate or stream.codec_context.sample_rate or 0)
        for frame in container.decode(stream):
            frame.pts = None  # the resampler keeps its own clock
            for out in resampler.resample(frame):
                chunks.append(out.to_ndarray())
                have += chunks[-1].shape[1]
            if have >= want:
                break
        else:
            for out in resampler.resample(None):  # flush
                chunks.append(out.to_ndarray())
    wave = (np.concatenate(chunks, axis=1) if chunks
            else np.zeros((s.channels, 0), np.float32))[:, :want]
    wave = torch.from_numpy(np.ascontiguousarray(wave, dtype=np.float32))
    if wave.shape[1] < want:
        wave = torch.nn.functional.pad(wave, (0, want - wave.shape[1]))
    return wave, rate


def silence(s: MelSettings, seconds: float):
    import torch

    return torch.zeros((s.channels, s.samples(seconds)))


# ------------------------------------------------------------------------------------------
# Writing a clip with its sound
# ------------------------------------------------------------------------------------------
def write_clip_with_sound(frames, waveform, sample_rate: int, path: str | Path,
                          fps: float = 24) -> Path:
    """``frames`` (PIL images or HxWx3 arrays, uint8 or floats in [0, 1]) and ``waveform``
    ([channels, samples] or [samples] floats in [-1, 1]) as one clip: H.264 + AAC in
    ``.mp4``, VP9 + Opus in ``.webm``; written atomically."""
    import numpy as np

    av = _av()
    path = Path(path)
    suffix = path.suffix.lower()
    codecs = {".mp4": ("mp4", "libx264", "aac"), ".webm": ("webm", "libvpx-vp9", "libopus")}
    if suffix not in codecs:
        raise ValueError(f"write_clip_with_sound: unknown clip type (got {path.suffix!r}; "
                         f"allowed .mp4, .webm)")
    fmt, vcodec, acodec = codecs[suffix]
    arrays = as_arrays(frames)
    wave = np.asarray(waveform.detach().float().cpu() if hasattr(waveform, "detach")
                      else waveform, dtype=np.float32)
    wave = np.clip(wave.reshape(1, -1) if wave.ndim == 1 else wave, -1, 1)
    layout = "stereo" if wave.shape[0] == 2 else "mono"
    wave = wave[:2] if wave.shape[0] >= 2 else wave[:1]
    h, w = arrays[0].shape[:2]
    with writegate.UNRESTRICTED.replacing(path, "clip", parents=True) as out, \
            av.open(out, mode="w", format=fmt) as container:
        video = container.add_stream(vcodec, rate=int(round(fps)))
        video.width, video.height = w - w % 2, h - h % 2
        video.pix_fmt = "yuv420p"
        if vcodec == "libvpx-vp9":
            video.options = {"crf": "30", "b:v": "0", "deadline": "realtime", "cpu-used": "8"}
        # Opus takes 48 kHz only; AAC the sound's own rate.
        rate = 48000 if acodec == "libopus" else int(sample_rate)
        audio = container.add_stream(acodec, rate=rate)
        audio.layout = layout
        for a in arrays:
            frame = av.VideoFrame.from_ndarray(a[: video.height, : video.width],
                                               format="rgb24")
            for packet in video.encode(frame):
                container.mux(packet)
        for packet in video.encode():
            container.mux(packet)
        src = av.AudioFrame.from_ndarray(np.ascontiguousarray(wave), format="fltp",
                                          layout=layout)
        src.sample_rate = int(sample_rate)
        resampler = av.AudioResampler(format=audio.codec_context.format.name, layout=layout,
                                      rate=rate, frame_size=audio.codec_context.frame_size
                                      or None)
        for frame in [*resampler.resample(src), *resampler.resample(None)]:
            for packet in audio.encode(frame):
                container.mux(packet)
        for packet in audio.encode():
            container.mux(packet)
    return path


def read_clip_sound(path: str | Path) -> tuple[Any, int]:
    """(every sample of the first audio stream of a clip ZeroLoRA wrote as [channels,
    samples] float32, its rate); raises ``NoSound`` when it has none."""
    import numpy as np

    av = _av()
    with av.open(str(path), mode="r") as container:
        if not container.streams.audio:
            raise NoSound("no audio stream")
        stream = container.streams.audio[0]
        chunks = [fr.to_ndarray().astype(np.float32) for fr in container.decode(stream)]
        rate = int(stream.rate)
    return np.concatenate(chunks, axis=1), rate
