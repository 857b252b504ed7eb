"""Writing media: sample clips and frame strips.

``write_video(frames, path, fps)`` encodes VP9 WebM (``.webm``: plays in Chromium and
Firefox) or H.264 MP4 (``.mp4``) with PyAV; ``frame_strip(frames, n)`` is one image of ``n``
frames side by side for quick looks. Frames are PIL images or HxWx3 arrays, uint8 or floats
in [0, 1] (diffusers' ``"np"`` output). numpy, PIL and av load when called: standard library
only at import time.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

from backend.core import writegate


def _av():
    try:
        import av
    except ImportError:  # pragma: no cover - a requirement
        raise ImportError("writing clips needs the av package (pip install av)") from None
    return av


def as_arrays(frames) -> list[Any]:
    """``frames`` as RGB uint8 arrays [H, W, 3]."""
    import numpy as np

    out = []
    for f in frames:
        a = np.asarray(f)
        if a.dtype != np.uint8:  # floats in [0, 1] (diffusers' "np" output)
            a = np.clip(np.rint(a.astype(np.float64) * 255.0), 0, 255).astype(np.uint8)
        if a.ndim == 2:
            a = np.stack([a] * 3, axis=-1)
        out.append(np.ascontiguousarray(a[..., :3]))
    return out


def write_video(frames, path: str | Path, fps: int = 16) -> Path:
    """Encode ``frames`` (PIL images or HxWx3 arrays, uint8 or floats in [0, 1]) as a clip:
    VP9 in WebM for ``.webm``, H.264 in MP4 for ``.mp4``; written atomically."""
    av = _av()
    path = Path(path)
    arrays = as_arrays(frames)
    if not arrays:
        raise ValueError("write_video: no frames")
    h, w = arrays[0].shape[:2]
    codec = {".webm": "libvpx-vp9", ".mp4": "libx264"}.get(path.suffix.lower())
    if codec is None:
        raise ValueError(f"write_video: unknown clip type (got {path.suffix!r}; allowed .webm, "
                         f".mp4)")
    fmt = {".webm": "webm", ".mp4": "mp4"}[path.suffix.lower()]
    with writegate.UNRESTRICTED.replacing(path, "clip", parents=True) as out, \
            av.open(out, mode="w", format=fmt) as container:
        stream = container.add_stream(codec, rate=int(fps))
        stream.width, stream.height = w - w % 2, h - h % 2
        stream.pix_fmt = "yuv420p"
        if codec == "libvpx-vp9":
            stream.options = {"crf": "30", "b:v": "0", "deadline": "realtime", "cpu-used": "8"}
        for a in arrays:
            frame = av.VideoFrame.from_ndarray(a[: stream.height, : stream.width], format="rgb24")
            for packet in stream.encode(frame):
                container.mux(packet)
        for packet in stream.encode():
            container.mux(packet)
    return path


def frame_strip(frames, n: int = 4):
    """``n`` frames evenly spread over the clip, side by side, as one PIL image."""
    from PIL import Image

    arrays = as_arrays(frames)
    n = max(1, min(n, len(arrays)))
    picks = [arrays[round(i * (len(arrays) - 1) / max(n - 1, 1))] for i in range(n)]
    h, w = picks[0].shape[:2]
    strip = Image.new("RGB", (w * n, h))
    for i, a in enumerate(picks):
        strip.paste(Image.fromarray(a), (i * w, 0))
    return strip
