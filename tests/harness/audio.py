"""Clips with sound for the audio-video tests, written with PyAV alone: a moving square
with a sine tone muxed beside it (H.264 + AAC in MP4), a tone alone (PCM in WAV), and a
dataset of such clips (``make_sound_dataset``)."""
from __future__ import annotations

import math
from pathlib import Path

from tests.harness.clips import moving_square

FPS = 24
FRAMES = 9  # 8k+1: LTX-2's shortest clip above one frame


def tone(freq: float, rate: int, seconds: float, channels: int = 2):
    """A sine of ``freq`` Hz at half scale, [channels, samples] float32."""
    import numpy as np

    t = np.arange(int(round(rate * seconds)), dtype=np.float64) / rate
    wave = (0.5 * np.sin(2 * math.pi * freq * t)).astype(np.float32)
    return np.repeat(wave[None], channels, axis=0)


def _mux_audio(container, wave, rate: int, codec: str):
    import av
    import numpy as np

    layout = "stereo" if wave.shape[0] == 2 else "mono"
    stream = container.add_stream(codec, rate=rate)
    stream.layout = layout
    fmt = stream.codec_context.format.name
    resampler = av.AudioResampler(format=fmt, layout=layout, rate=rate,
                                  frame_size=stream.codec_context.frame_size or None)
    src = av.AudioFrame.from_ndarray(np.ascontiguousarray(wave), format="fltp", layout=layout)
    src.sample_rate = rate
    return stream, [*resampler.resample(src), *resampler.resample(None)]


def sine_clip(path: Path, freq: float = 440.0, rate: int = 16000, channels: int = 2,
              frames: int = FRAMES, fps: int = FPS, colour=(230, 30, 30), dx: int = 2,
              seconds: float | None = None) -> Path:
    """An MP4 of ``frames`` moving-square frames at ``fps`` with a ``freq`` Hz tone at
    ``rate`` Hz (as long as the frames, or ``seconds``)."""
    import av

    seconds = frames / fps if seconds is None else seconds
    with av.open(str(path), mode="w", format="mp4") as container:
        video = container.add_stream("libx264", rate=fps)
        video.width = video.height = 32
        video.pix_fmt = "yuv420p"
        audio, chunks = _mux_audio(container, tone(freq, rate, seconds, channels), rate, "aac")
        for a in moving_square(colour, dx, n=frames):
            for packet in video.encode(av.VideoFrame.from_ndarray(a, format="rgb24")):
                container.mux(packet)
        for packet in video.encode():
            container.mux(packet)
        for chunk in chunks:
            for packet in audio.encode(chunk):
                container.mux(packet)
        for packet in audio.encode():
            container.mux(packet)
    return path


def sine_wav(path: Path, freq: float = 660.0, rate: int = 16000, channels: int = 1,
             seconds: float = FRAMES / FPS) -> Path:
    """A WAV file (16-bit PCM) of a ``freq`` Hz tone."""
    import av

    with av.open(str(path), mode="w", format="wav") as container:
        audio, chunks = _mux_audio(container, tone(freq, rate, seconds, channels), rate,
                                   "pcm_s16le")
        for chunk in chunks:
            for packet in audio.encode(chunk):
                container.mux(packet)
        for packet in audio.encode():
            container.mux(packet)
    return path


def silent_clip(path: Path, frames: int = FRAMES, fps: int = FPS) -> Path:
    """An MP4 of moving-square frames with no audio stream."""
    from backend.core.media import write_video

    return write_video(moving_square((30, 60, 230), -2, n=frames), path, fps=fps)


def make_sound_dataset(folder: Path) -> Path:
    """Two rows: a clip with its own 44.1 kHz stereo tone (resampled), and a silent clip
    whose sound is a 16 kHz mono ``input_audio`` WAV."""
    folder.mkdir(parents=True, exist_ok=True)
    sine_clip(folder / "beep.mp4", freq=440.0, rate=44100)
    silent_clip(folder / "quiet.mp4")
    sine_wav(folder / "quiet.wav", freq=660.0)
    (folder / "metadata.csv").write_text(
        "video,prompt,input_audio\n"
        'beep.mp4,"a red ball rolls from left to right, zlr style",\n'
        'quiet.mp4,"a blue square slides from right to left, zlr style",quiet.wav\n',
        encoding="utf-8")
    return folder


def make_reference_dataset(folder: Path) -> Path:
    """IC-LoRA rows (columns video, prompt, in_context_videos): two silent clips, each with a
    reference clip of its own (the second one 5 frames, shorter than the clip)."""
    folder.mkdir(parents=True, exist_ok=True)
    silent_clip(folder / "red.mp4")
    silent_clip(folder / "blue.mp4")
    silent_clip(folder / "red_pose.mp4")
    silent_clip(folder / "blue_pose.mp4", frames=5)
    (folder / "metadata.csv").write_text(
        "video,prompt,in_context_videos\n"
        'red.mp4,"a red ball rolls from left to right, zlr style",red_pose.mp4\n'
        'blue.mp4,"a blue square slides from right to left, zlr style",blue_pose.mp4\n',
        encoding="utf-8")
    return folder
