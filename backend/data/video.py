"""Video datasets and clips: reading frames with PyAV.

A video dataset is a metadata file (``metadata.csv`` with columns ``video,prompt``, or a
.json / .jsonl list of objects) whose ``video`` names, relative to ``dataset_base_path``:

- a video file (``.mp4``, ``.webm``, ``.gif``, ``.mov``, ``.mkv``, ``.avi``), decoded with
  PyAV (the ``av`` package; no torchvision, no ``ffmpeg`` program);
- a folder of frames (images, taken in name order);
- an image, which is a one-frame video.

Without a metadata file every video in ``dataset_base_path`` with a same-named ``.txt``
caption is a sample. A column named ``image`` is read like ``video``.

Frames: ``num_frames`` frames (4k+1, the VAE's temporal grouping) are taken from the start
of a clip, every ``frame_stride``-th frame, or -- with ``video_fps``, for a video file -- the
frames nearest to 1/video_fps apart in the clip's own time (so clips of any frame rate are
resampled to the model's; a frames folder has no rate of its own and takes every
``frame_stride``-th frame). With ``frame_buckets`` (a list of 4k+1 counts) each clip is taken
at the largest count it fills that way (``bucket_frames``), and stage 2 batches by
(width, height, frames) (``clip_buckets``, ``backend.data.buckets``). A clip with fewer
frames than the (smallest) count is an error naming the row, and so is a frames folder
whose clip frames differ in size (naming the frame and both sizes). An image is a
one-frame clip whatever the counts.

Windows (``frame_extraction``, musubi-tuner's option of that name): ``head`` (the default)
trains one window per clip, from its start, as above. ``chunk`` cuts the clip into
consecutive windows that do not overlap, ``slide`` starts one every ``frame_window_stride``
source frames, ``uniform`` spreads ``frame_sample`` windows evenly from the first frame to
the last window that fits (musubi-tuner's ``np.linspace``, rounded down; windows that fall
on one start are one). A window is as long as the clip's trained frame count reaches into
(``frames_needed``: ``frame_stride`` or ``video_fps`` respected), and every window of a clip
trains at that one count (``window_starts``); each is its own sample (``Record.window``):
stage 1 caches it under a key that holds its index and first frame, and stage 2 batches it
by (width, height, frames) as any clip. Where musubi-tuner differs: it trains a clip at
every one of its ``target_frames`` that fits (each a window set of its own), this at the
largest of ``frame_buckets`` it fills; its windows are counted in frames already resampled
to the target rate, these in the clip's own frames (so with ``frame_stride`` above 1 two
chunks are one source frame apart, not one stride); its ``full`` mode has no counterpart.
A mask video or frames folder is cut with its clip's window (the same first frame); a row's
sound or reference video (``extra_inputs``) is read from the clip's start, so windows beside
them are refused (``backend.config.rules.window_problems``).

Sizes follow the image rules
(``backend.data.dataset.target_size``: fixed ``height`` x ``width``, or ``max_pixels``),
applied to every frame (cover-resize, centre-crop). Pixels map to [-1, 1]; a clip is the
tensor [1, 3, F, H, W].

Every file is opened through the run's read gate (``backend.core.readgate``): PyAV reads from the
gate's file object, never from a path of its own.

A run that trains sound (``extra_inputs: input_audio``, an audio-video family) reads each
row's ``input_audio`` file, else the clip's own audio stream (``check_clip_sound``: a clip
with neither is an error naming the row); the family decodes it.

Images or clips, by the config's family: ``check_stage_dataset(cfg, family)`` is what a stage
reads, checked before any model is touched; ``validate_any_dataset(cfg)`` the Dataset tab's
findings.

Sample clips and frame strips are written by ``backend.core.media`` (``write_video``,
``frame_strip``); ``read_video_frames`` reads such a clip back.
"""
from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass, replace
from fractions import Fraction
from pathlib import Path
from typing import Any

from backend.core import readgate
from backend.core.media_types import VIDEO_EXTS
from backend.core import messages
from backend.core.messages import Msg
from backend.config.schema import RunConfig
from backend.families import get_family
from backend.data.cache import FORMAT
from backend.data import masks
from backend.data.dataset import (IMAGE_EXTS, PROMPT_KEY, DatasetError, ImageDataset, Record,
                                  _to_rgb, check_dataset, check_input_images, checked,
                                  cover_crop, dataset_records, header_size, read_metadata_rows,
                                  read_records, size_multiple, target_size, upscale_note,
                                  validate_dataset,
                                  with_findings)

VIDEO_KEY = "video"
# The version of how clips are read (part of a stage-1 cache key).
VIDEO_LOADING = 1
# What a sample clip is written as, and at how many frames per second by default.
CLIP_SUFFIX = ".webm"


def need_av():
    try:
        import av
    except ImportError:  # pragma: no cover - a requirement
        raise DatasetError([Msg("data.need_av")]) from None
    return av


# ------------------------------------------------------------------------------------------
# Reading frames
# ------------------------------------------------------------------------------------------
def kind_of(path: Path, gate: readgate.ReadGate = readgate.UNRESTRICTED) -> str:
    """video | frames | image | unknown, from the name (and a folder for frames)."""
    suffix = path.suffix.lower()
    if suffix in VIDEO_EXTS:
        return "video"
    if suffix in IMAGE_EXTS:
        return "image"
    if gate.is_dir(path):
        return "frames"
    return "unknown"


def frame_files(folder: Path, gate: readgate.ReadGate = readgate.UNRESTRICTED) -> list[Path]:
    return sorted((p for p in gate.list_dir(folder, "video frames folder")
                   if p.suffix.lower() in IMAGE_EXTS), key=lambda p: p.name)


class _Header:
    """A frame known by its size alone (``headers_only`` reads): nothing decoded."""

    def __init__(self, size: tuple[int, int]):
        self.size = tuple(size)

    def convert(self, mode: str) -> "_Header":
        return self


def _decode(path: Path, gate: readgate.ReadGate, cfg: RunConfig, headers_only: bool = False,
            window: "Window | None" = None) -> tuple[list[Any], float]:
    """(PIL frames, fps) of a video file, read through the gate: decoding stops once the
    frames the clip (or its ``window``) reaches into are in (the whole file only when it is
    too short); frames before the window are counted, not kept (None).
    ``headers_only``: the first frame alone is decoded, the others are counted from the
    container's packets (one per frame) and stand in by its size (``_Header``)."""
    av = need_av()
    frames: list[Any] = []
    with gate.open(path, "video") as f:
        with av.open(f, mode="r") as container:
            stream = container.streams.video[0]
            rate = float(stream.average_rate or stream.guessed_rate or Fraction(16))
            limit = frames_needed(cfg, rate) if window is None else \
                window.start + frames_needed(cfg, rate, window.frames)
            if not headers_only:
                skip = window.start if window is not None else 0  # before the window: counted
                for frame in container.decode(stream):
                    frames.append(frame.to_image() if len(frames) >= skip else None)
                    if len(frames) >= limit:
                        break
                return frames, rate
            first, packets = None, 0
            for packet in container.demux(stream):
                packets += bool(packet.size)
                if first is None:  # the last, empty packet flushes the decoder
                    first = next(iter(packet.decode()), None)
                if first is not None and packets >= limit:
                    break
    if first is None:
        return [], rate
    return [first.to_image()] + [_Header((first.width, first.height))] * (packets - 1), rate


def frame_counts(cfg: RunConfig) -> list[int]:
    """The frame counts a clip may train at, smallest first: ``frame_buckets``, else
    ``num_frames`` alone."""
    return sorted(set(cfg.frame_buckets)) or [cfg.num_frames]


def _indices(available: int, fps: float, cfg: RunConfig, wanted: int) -> list[int] | None:
    """Which of ``available`` frames make a clip of ``wanted`` frames, or None when there are
    too few: at ``video_fps`` in the clip's own time when it has one (a video file), else
    every ``frame_stride``-th frame."""
    if cfg.video_fps and fps:
        step = fps / float(cfg.video_fps)
        idx = [int(round(i * step)) for i in range(wanted)]
    else:
        idx = [i * cfg.frame_stride for i in range(wanted)]
    return idx if idx and idx[-1] < available else None


def bucket_frames(available: int, fps: float, cfg: RunConfig) -> int | None:
    """The frame count a clip of ``available`` source frames (at ``fps``; 0: a frames
    folder) trains at: the largest of ``frame_counts`` it fills, or None when it is too
    short for the smallest."""
    return next((n for n in reversed(frame_counts(cfg))
                 if _indices(available, fps, cfg, n) is not None), None)


def frames_needed(cfg: RunConfig, fps: float = 0.0, frames: int | None = None) -> int:
    """Source frames a clip of ``frames`` frames (default: the largest of ``frame_counts``)
    reaches into."""
    n = frames or frame_counts(cfg)[-1]
    if cfg.video_fps and fps:
        return int(round((n - 1) * fps / float(cfg.video_fps))) + 1
    return (n - 1) * cfg.frame_stride + 1


@dataclass(frozen=True)
class Window:
    """One window of a clip (``frame_extraction``): its ``index`` among the clip's windows,
    its first source frame ``start`` and the ``frames`` it trains at."""
    index: int
    start: int
    frames: int


def window_starts(available: int, fps: float, cfg: RunConfig) -> list[int]:
    """The first source frames of the windows of a clip of ``available`` source frames (at
    ``fps``; 0: a frames folder) by ``frame_extraction`` (see the module docstring), each
    window ``frames_needed`` frames long for the count the clip trains at
    (``bucket_frames``); [] when the clip is too short for one."""
    n = bucket_frames(available, fps, cfg)
    if n is None:
        return []
    length = frames_needed(cfg, fps, n)
    last = available - length  # the last start a whole window fits from
    mode = cfg.frame_extraction
    if mode == "chunk":
        return list(range(0, last + 1, length))
    if mode == "slide":
        return list(range(0, last + 1, cfg.frame_window_stride))
    if mode == "uniform" and cfg.frame_sample > 1:
        k = cfg.frame_sample
        return sorted({i * last // (k - 1) for i in range(k)})
    return [0]


def _window_indices(available: int, fps: float, cfg: RunConfig, window: Window
                    ) -> list[int] | None:
    """``_indices`` of ``window``'s frames among ``available``, or None when it runs out."""
    idx = _indices(available - window.start, fps, cfg, window.frames)
    return [window.start + i for i in idx] if idx else None


def _taken(available: int, fps: float, cfg: RunConfig, window: Window | None) -> list[int]:
    """Which of ``available`` source frames (at ``fps``; 0: a frames folder) the clip trains
    on: ``window``'s, else those of the count it fills (``bucket_frames``) from its start.
    Raises ``ValueError`` saying why there are too few."""
    if window is not None:
        idx = _window_indices(available, fps, cfg, window)
        if idx is None:
            raise ValueError(_window_short(available, fps, cfg, window))
        return idx
    wanted = bucket_frames(available, fps, cfg)
    if wanted is None:
        raise ValueError(_too_short(available, fps, cfg))
    return _indices(available, fps, cfg, wanted)


def _window_short(n: int, fps: float, cfg: RunConfig, window: Window) -> Msg:
    """Why ``window`` does not fit ``n`` source frames (a mask shorter than its clip)."""
    return Msg("data.too_short_window", n=n, index=window.index + 1, start=window.start,
               needed=window.start + frames_needed(cfg, fps, window.frames),
               mode=cfg.frame_extraction)


def source_frames(path: Path, cfg: RunConfig, *, headers_only: bool = False
                  ) -> tuple[int, float]:
    """(source frames, fps; 0 for a frames folder) of a video file or frames folder, read
    through the run's read gate: a video's frames decoded and counted, or with
    ``headers_only`` its packets counted (one per frame), nothing kept."""
    gate = readgate.for_config(cfg)
    if kind_of(path, gate) == "frames":
        return len(frame_files(path, gate)), 0.0
    av = need_av()
    with gate.open(path, "video") as f, av.open(f, mode="r") as container:
        stream = container.streams.video[0]
        rate = float(stream.average_rate or stream.guessed_rate or Fraction(16))
        if headers_only:
            return sum(1 for packet in container.demux(stream) if packet.size), rate
        return sum(1 for _ in container.decode(stream)), rate


def clip_windows(path: str | Path, cfg: RunConfig, *, headers_only: bool = False
                 ) -> list[Window] | None:
    """The windows a clip trains as (``window_starts``), or None for one sample from its
    start as ``read_frames`` reads it (``frame_extraction: head``, or an image)."""
    path = Path(path)
    if cfg.frame_extraction == "head" or kind_of(path, readgate.for_config(cfg)) == "image":
        return None
    available, fps = source_frames(path, cfg, headers_only=headers_only)
    n = bucket_frames(available, fps, cfg)
    if n is None:
        raise ValueError(_too_short(available, fps, cfg))
    return [Window(k, start, n) for k, start in enumerate(window_starts(available, fps, cfg))]


def _too_short(n: int, fps: float, cfg: RunConfig) -> Msg:
    """Why a clip of ``n`` source frames (at ``fps``; 0: a frames folder) is too short."""
    smallest = frame_counts(cfg)[0]
    short = dict(n=n, needed=frames_needed(cfg, fps, smallest))
    if cfg.frame_buckets:
        short["buckets"] = frame_counts(cfg)
        if not fps:
            return Msg("data.too_short_bucket_frames", stride=cfg.frame_stride, **short)
        if cfg.video_fps:
            return Msg("data.too_short_bucket_video", fps=fps, video_fps=cfg.video_fps,
                       **short)
        return Msg("data.too_short_bucket_video_stride", fps=fps, stride=cfg.frame_stride,
                   **short)
    short["num"] = smallest
    if not fps:
        return Msg("data.too_short_frames", stride=cfg.frame_stride, **short)
    if cfg.video_fps:
        return Msg("data.too_short_video", fps=fps, video_fps=cfg.video_fps, **short)
    return Msg("data.too_short_video_stride", fps=fps, stride=cfg.frame_stride, **short)


def read_frames(path: str | Path, cfg: RunConfig, *, headers_only: bool = False,
                window: Window | None = None) -> tuple[list[Any], list[str]]:
    """(the clip's PIL RGB frames at the training size, notes) of a video, frames folder or
    image, opened through the run's read gate: as many frames as ``bucket_frames`` gives it
    from its start, or ``window``'s frames (an image is one frame, whatever the window).
    Raises ``ValueError`` saying what is wrong (too short, unreadable, no frames).
    ``headers_only`` asks the same questions from image headers and
    a video's first frame and packets (a check before a run is accepted,
    ``backend.planning.preflight``) and returns no frames."""
    frames, notes, (w, h) = _select(path, cfg, headers_only, window)
    if headers_only:
        return [], notes
    return [cover_crop(fr, w, h) for fr in frames], notes


def clip_shape(path: str | Path, cfg: RunConfig, window: Window | None = None
               ) -> tuple[int, int, int]:
    """(width, height, frames) a clip (or its ``window``) trains at, from headers
    (``read_frames``'s checks)."""
    frames, _, (w, h) = _select(path, cfg, True, window)
    return w, h, len(frames)


def _select(path: str | Path, cfg: RunConfig, headers_only: bool, window: Window | None = None
            ) -> tuple[list[Any], list[str], tuple[int, int]]:
    """(the clip's frames as read, PIL images or ``_Header``s; notes; the training size)."""
    from PIL import Image

    gate = readgate.for_config(cfg)
    path = Path(path)
    kind = kind_of(path, gate)
    notes: list[str] = []
    if kind == "image":
        with gate.open(path, "image") as f, Image.open(f) as im:
            if headers_only:
                rgb = _Header(header_size(im))
            else:
                im.load()
                rgb, notes = _to_rgb(im)
        frames = [rgb]
    elif kind == "frames":
        files = frame_files(path, gate)
        if not files:
            raise ValueError(Msg("data.no_frames_folder", exts=", ".join(IMAGE_EXTS),
                                 name=path.name))
        idx = _taken(len(files), 0.0, cfg, window)
        frames = []
        for i in idx:
            with gate.open(files[i], "image") as f, Image.open(f) as im:
                if headers_only:
                    frames.append(_Header(header_size(im)))
                else:
                    im.load()
                    frames.append(_to_rgb(im)[0])
            if frames[-1].size != frames[0].size:  # never resized into the clip unsaid
                (w, h), (w0, h0) = frames[-1].size, frames[0].size
                raise ValueError(Msg("data.frame_size", name=files[i].name, w=w, h=h,
                                     first=files[idx[0]].name, w0=w0, h0=h0))
    elif kind == "video":
        try:
            frames_all, fps = _decode(path, gate, cfg, headers_only, window)
        except FileNotFoundError:
            raise
        except Exception as e:  # noqa: BLE001 - PyAV's own errors name the codec problem
            raise ValueError(Msg("data.cannot_decode", name=path.name,
                                 why=" ".join(str(e).split()))) from None
        if not frames_all:
            raise ValueError(Msg("data.no_frames_video", name=path.name))
        idx = _taken(len(frames_all), fps, cfg, window)
        frames = [frames_all[i].convert("RGB") for i in idx]
    else:
        raise ValueError(Msg("data.not_a_clip", name=path.name,
                             exts=", ".join(VIDEO_EXTS + IMAGE_EXTS)))
    m = size_multiple(cfg)
    w, h = target_size(*frames[0].size, cfg, m)
    if w < m or h < m:
        raise ValueError(Msg("data.frames_too_small", w=frames[0].size[0],
                             h=frames[0].size[1], m=m))
    up = upscale_note(*frames[0].size, w, h)
    if up:
        notes.append(up)
    return frames, notes, (w, h)


def load_clip(path: str | Path, cfg: RunConfig, window: Window | None = None):
    """The training tensor of a clip (or its ``window``): [1, 3, F, H, W] float32 in
    [-1, 1]."""
    import numpy as np
    import torch

    frames, _ = read_frames(path, cfg, window=window)
    arr = torch.from_numpy(np.stack([np.asarray(f, dtype=np.float32) for f in frames]))
    return (arr / 127.5 - 1.0).permute(3, 0, 1, 2).unsqueeze(0).contiguous()


def load_clip_record(rec: Record, cfg: RunConfig):
    """``load_clip`` of a record: its clip, or its window of the clip (stage 1's loader)."""
    return load_clip(rec.image, cfg, rec.window)


# ------------------------------------------------------------------------------------------
# Records and checks
# ------------------------------------------------------------------------------------------
def read_video_records(cfg: RunConfig) -> tuple[list[Record], list[str]]:
    """(records, problems) of a video dataset, without decoding anything."""
    return dataset_records(cfg, "video", VIDEO_EXTS, _video_column, read_metadata_rows)


def _video_column(row: dict) -> tuple[str | None, str]:
    """The row's clip column (``video``, or ``image`` as the reference's image rows name
    it), or None and what is missing."""
    key = VIDEO_KEY if VIDEO_KEY in row else "image" if "image" in row else None
    if key is None or PROMPT_KEY not in row:
        missing = [k for k, ok in ((VIDEO_KEY, key), (PROMPT_KEY, PROMPT_KEY in row)) if not ok]
        columns = ", ".join(map(str, row)) or Msg("data.none")
        return None, lambda where: Msg("data.row_missing_video", where=where, keys=missing,
                                       columns=columns)
    return key, None


def inspect_video_record(rec: Record, cfg: RunConfig, *, headers_only: bool = False
                         ) -> dict[str, Any]:
    """One finding per record, as ``backend.data.dataset.inspect_record`` gives for images, plus
    ``frames`` (the clip's frame count) and, with ``frame_extraction`` other than head,
    ``windows`` (how many samples the clip gives) and ``window_starts`` (their first source
    frames), said in the finding's message. ``headers_only``: see ``read_frames`` (the same
    errors; no frame count or size)."""
    info: dict[str, Any] = {"level": "ok", "file": str(rec.image), "row": rec.row,
                            "where": rec.where, "caption": rec.prompt, "message": "",
                            "original_size": None, "size": None, "frames": None}
    errs: list[str] = []
    warns: list[str] = []
    if not rec.prompt.strip():
        errs.append(Msg("data.empty_caption"))
    gate = readgate.for_config(cfg)
    if not (gate.is_file(rec.image) or gate.is_dir(rec.image)):
        errs.append(Msg("data.video_not_found", name=rec.name or rec.image.name))
    else:
        try:
            frames, notes = read_frames(rec.image, cfg, headers_only=headers_only)
            if frames:
                info["frames"] = len(frames)
                info["size"] = list(frames[0].size)
            warns += notes
            windows = clip_windows(rec.image, cfg, headers_only=headers_only)
            if windows is not None:
                info["frames"] = windows[0].frames
                info["windows"] = len(windows)
                info["window_starts"] = [w.start for w in windows]
                info["message"] = Msg("data.clip_windows", n=len(windows),
                                      frames=windows[0].frames, mode=cfg.frame_extraction,
                                      starts=[w.start for w in windows])
        except (OSError, ValueError) as e:
            errs.append(clip_problem(e, rec))
    return with_findings(info, rec, errs, warns)


def windowed(records: list[Record], findings: list[dict[str, Any]]) -> list[Record]:
    """``records`` with each clip that has windows (its finding's ``window_starts``,
    ``inspect_video_record``) as one record per window (``Record.window``), in order."""
    out: list[Record] = []
    for rec, f in zip(records, findings):
        starts = f.get("window_starts")
        if starts is None:
            out.append(rec)
            continue
        out += [replace(rec, window=Window(k, start, f["frames"]))
                for k, start in enumerate(starts)]
    return out


def window_summary(cfg: RunConfig, findings: list[dict[str, Any]]) -> Msg | None:
    """The Dataset check's count of samples with ``frame_extraction`` other than head:
    "N clips -> M windows" over the findings without an error; None with head."""
    if cfg.frame_extraction == "head":
        return None
    ok = [f for f in findings if f.get("file") and f.get("level") != "error"]
    return Msg("data.windows_total", clips=len(ok), windows=sum(f.get("windows") or 1
                                                               for f in ok),
               mode=cfg.frame_extraction)


def clip_problem(e: BaseException, rec: Record) -> Msg:
    """What reading ``rec``'s clip raised, as a message: the one ``read_frames`` raised
    with, else the library's own words naming the file."""
    said = messages.said(e)
    if isinstance(said, Msg):
        return said
    return Msg("data.cannot_read_clip", name=rec.name or rec.image.name,
               why=" ".join(str(e).split()))


def validate_video_dataset(cfg: RunConfig) -> list[dict[str, Any]]:
    records, problems = read_video_records(cfg)
    out = [{"level": "error", "file": None, "row": None, "where": "", "caption": "",
            "message": p, "original_size": None, "size": None, "frames": None}
           for p in problems]
    return out + [inspect_video_record(r, cfg) for r in records]


def validate_any_dataset(cfg: RunConfig) -> list[dict[str, Any]]:
    """The Dataset tab's findings for the config's family: clips for a video family
    (``validate_video_dataset``), images otherwise (``backend.data.dataset.validate_dataset``)."""
    if get_family(cfg.model_family).media == "video":
        return validate_video_dataset(cfg)
    return validate_dataset(cfg)


def check_video_dataset(cfg: RunConfig, log=None, *, headers_only: bool = False
                        ) -> list[Record]:
    """The video dataset's records, a clip's windows each a record of its own
    (``windowed``); raises ``DatasetError`` listing every problem (each naming its row:
    missing, unreadable, too short). ``headers_only``: the same checks
    from headers and a clip's first frame (``read_frames``)."""
    records, problems = read_video_records(cfg)
    findings = [inspect_video_record(r, cfg, headers_only=headers_only) for r in records]
    records = windowed(checked(records, problems, findings, log), findings)
    summary = window_summary(cfg, findings)
    if summary is not None and log is not None:
        log(f"[data] {summary}")
    return records


def check_stage_dataset(cfg: RunConfig, family, log=None, *, headers_only: bool = False
                        ) -> list[Record]:
    """What a stage reads from a dataset (stage 1, one-shot training), checked before any
    model is touched: clips for a video ``family`` (``check_video_dataset``), else images
    (``backend.data.dataset.check_dataset``) and an edit model's input images
    (``check_input_images``). Raises ``DatasetError`` listing every problem.
    ``headers_only``: the same checks from headers (``backend.planning.preflight``, before a run
    is accepted)."""
    if family.media == "video":  # clips decoded with PyAV
        records = check_video_dataset(cfg, log, headers_only=headers_only)
        records = check_clip_masks(cfg, records, log, headers_only=headers_only)
        records = check_clip_sound(cfg, records, family, log, headers_only=headers_only)
        return check_reference_videos(cfg, records, family)
    records = check_dataset(cfg, log, headers_only=headers_only)
    records = check_input_images(cfg, records, family.input_images, family.title,
                                 headers_only=headers_only)
    return masks.check_masks(cfg, records, log, headers_only=headers_only)


# ------------------------------------------------------------------------------------------
# A clip's sound (an audio-video model: ``extra_inputs: input_audio``)
# ------------------------------------------------------------------------------------------
SOUND_KEY = "input_audio"


def check_clip_sound(cfg: RunConfig, records: list[Record], family, log=None, *,
                     headers_only: bool = False) -> list[Record]:
    """``records`` with each one's sound source filled in (``Record.sound``) for a run that
    trains sound (``extra_inputs`` names ``input_audio``): the row's ``input_audio`` file,
    else the clip itself. Each source is opened through the run's read gate and asked for
    an audio stream by the family (``probe_sound``; ``sound_rate`` the rate it trains at).
    Raises ``DatasetError`` listing every problem, naming the row: a model that makes no
    sound, one-shot ``sft`` (sound is encoded in stage 1 only), a missing or unreadable
    file, no audio stream (unless ``audio_missing: silence``: then the clip trains on
    silence, said in the log); sound at another rate is resampled, said in the log.
    ``headers_only`` (a run checked before it is accepted): its task is the run plan's, one
    shot when ``split_training`` is off."""
    if SOUND_KEY not in [k.strip() for k in (cfg.extra_inputs or "").split(",")]:
        return records
    probe = family.probe_sound
    if probe is None:
        raise DatasetError([Msg("data.takes_no_sound", model=family.title,
                                got=cfg.extra_inputs)])
    one_shot = cfg.task == "sft" and (not cfg.split_training or not headers_only)
    if one_shot:  # one-shot training encodes pixels and captions only
        raise DatasetError([Msg("data.sound_needs_split", got=cfg.task)])
    gate = readgate.for_config(cfg)
    base = Path(cfg.dataset_base_path).expanduser()
    rows = (read_metadata_rows(Path(cfg.dataset_metadata_path).expanduser(), gate)
            if cfg.dataset_metadata_path else [])
    problems: list[str] = []
    notes: list[str] = []
    out: list[Record] = []
    for rec in records:
        row = rows[rec.row - 1] if rec.row and rec.row <= len(rows) else {}
        cell = row.get(SOUND_KEY) if isinstance(row, dict) else None
        name = str(cell).strip() if cell is not None and str(cell).strip() else None
        path = Path(os.path.abspath(base / name)) if name else rec.image
        shown = name or rec.name or rec.image.name
        rate = None
        if name or kind_of(path, gate) == "video":  # a frames folder or an image: silent
            if not gate.is_file(path):
                problems.append(Msg("data.sound_not_found", where=rec.where, name=shown))
                continue
            try:
                with gate.open(path, "audio") as f:
                    rate = probe(f)
            except Exception as e:  # noqa: BLE001 - PyAV's own errors say what
                problems.append(Msg("data.cannot_read_sound", where=rec.where, name=shown,
                                    why=" ".join(str(e).split())))
                continue
        if rate is None:
            if cfg.audio_missing != "silence":
                problems.append(Msg("data.no_sound", where=rec.where, name=shown))
                continue
            notes.append(Msg("data.silence", where=rec.where, name=shown))
            out.append(replace(rec, sound=None))
            continue
        if rate != family.sound_rate:
            notes.append(Msg("data.sound_resampled", where=rec.where, name=shown, rate=rate,
                             to=family.sound_rate))
        out.append(replace(rec, sound=path))
    if problems:
        raise DatasetError(problems)
    for note in notes if log is not None else ():
        log(f"[data] note: {note}")
    return out


# ------------------------------------------------------------------------------------------
# IC-LoRA: a reference video per row (``extra_inputs: in_context_videos``)
# ------------------------------------------------------------------------------------------
REFERENCE_KEY = "in_context_videos"
FACTOR_KEY = "in_context_downsample_factor"


@dataclass(frozen=True)
class ReferenceVideo:
    """A row's reference video: ``path``, trained at the clip's size divided by ``factor``
    (the row's ``in_context_downsample_factor`` when ``extra_inputs`` names it, else 1) and
    as many frames as the clip (``load``)."""
    path: Path
    factor: int
    clip: Path
    cfg: RunConfig

    def load(self):
        """[1, 3, F, H / factor, W / factor] in [-1, 1]: the reference's frames at the
        clip's rate, cut to the clip's F frames or padded with black ones (the reference
        trainer's ``check_in_context_video``)."""
        import torch

        w, h, frames = clip_shape(self.clip, self.cfg)
        cfg = self.cfg.model_copy(update={"width": w // self.factor,
                                          "height": h // self.factor,
                                          "frame_buckets": list(range(1, frames + 1))})
        pixels = load_clip(self.path, cfg)[:, :, :frames]
        if pixels.shape[2] < frames:
            black = -torch.ones((*pixels.shape[:2], frames - pixels.shape[2],
                                 *pixels.shape[3:]))
            pixels = torch.cat([pixels, black], dim=2)
        return pixels


def check_reference_videos(cfg: RunConfig, records: list[Record], family) -> list[Record]:
    """``records`` with each one's reference video (``Record.reference``) for an IC-LoRA
    run (``extra_inputs`` names ``in_context_videos``): the row's ``in_context_videos``
    (one path, or the first of a list). Raises ``DatasetError`` for a ``family`` that
    takes none (``takes_reference_video``), or listing every row without one, whose file
    is missing, or whose ``in_context_downsample_factor`` does not divide the clip's size
    into the model's multiple."""
    names = [k.strip() for k in (cfg.extra_inputs or "").split(",")]
    if REFERENCE_KEY not in names:
        return records
    if not family.takes_reference_video:
        raise DatasetError([Msg("data.takes_no_reference", model=family.title,
                                got=cfg.extra_inputs)])
    gate = readgate.for_config(cfg)
    base = Path(cfg.dataset_base_path).expanduser()
    rows = (read_metadata_rows(Path(cfg.dataset_metadata_path).expanduser(), gate)
            if cfg.dataset_metadata_path else [])
    m = size_multiple(cfg)
    problems: list[Msg] = []
    out: list[Record] = []
    for rec in records:
        row = rows[rec.row - 1] if rec.row and rec.row <= len(rows) else {}
        cell = row.get(REFERENCE_KEY) if isinstance(row, dict) else None
        if isinstance(cell, list):
            cell = cell[0] if cell else None
        name = str(cell).strip() if cell is not None and str(cell).strip() else None
        if name is None:
            problems.append(Msg("data.no_reference_video", where=rec.where))
            continue
        path = Path(os.path.abspath(base / name))
        if not (gate.is_file(path) or gate.is_dir(path)):
            problems.append(Msg("data.reference_not_found", where=rec.where, name=name))
            continue
        given = row.get(FACTOR_KEY) if FACTOR_KEY in names else None
        given = 1 if given is None or str(given).strip() == "" else given
        try:
            factor = int(str(given).strip())
        except ValueError:
            factor = 0
        sizes = [s for s in (cfg.height, cfg.width) if s]
        if factor < 1 or any(s % factor or (s // factor) % m for s in sizes):
            problems.append(Msg("data.bad_downsample_factor", where=rec.where, got=given, m=m))
            continue
        out.append(replace(rec, reference=ReferenceVideo(path, factor, rec.image, cfg)))
    if problems:
        raise DatasetError(problems)
    return out


# ------------------------------------------------------------------------------------------
# Masks of clips (``masked_loss``; images: ``backend.data.masks``)
# ------------------------------------------------------------------------------------------
def source_size(path: Path, gate: readgate.ReadGate) -> tuple[int, int]:
    """(width, height) of an image, a frames folder's first frame or a video's first frame,
    from headers (a video's first frame decoded)."""
    from PIL import Image

    kind = kind_of(path, gate)
    if kind == "frames":
        files = frame_files(path, gate)
        if not files:
            raise ValueError(Msg("data.no_frames_folder", exts=", ".join(IMAGE_EXTS),
                                 name=path.name))
        path, kind = files[0], "image"
    if kind == "image":
        with gate.open(path, "image") as f, Image.open(f) as im:
            return tuple(header_size(im))
    av = need_av()
    with gate.open(path, "video") as f, av.open(f, mode="r") as container:
        for frame in container.decode(container.streams.video[0]):
            return frame.width, frame.height
    raise ValueError(Msg("data.no_frames_video", name=path.name))


def clip_sizes(records: list[Record], cfg: RunConfig) -> list[tuple[int, int] | None]:
    gate = readgate.for_config(cfg)
    out: list[tuple[int, int] | None] = []
    for rec in records:
        try:
            out.append(source_size(rec.image, gate))
        except Exception:  # noqa: BLE001 - the clip's own check names it
            out.append(None)
    return out


def inspect_clip_mask(rec: Record, cfg: RunConfig, mask, size, *, headers_only: bool = False
                      ) -> tuple[bool, list, list]:
    """``backend.data.masks.inspect_mask`` for a clip: its mask an image (the whole clip),
    a video or a frames folder (per frame, taken as the clip's frames are), of the clip's
    size."""
    if mask is None or size is None or mask == masks.ALPHA:
        return False, [], []
    try:
        at = at_clip_frames(rec, cfg)
    except (OSError, ValueError):  # the clip's own check names it
        return False, [], []
    try:
        got = source_size(Path(mask), readgate.for_config(cfg))
        if got == tuple(size) and kind_of(Path(mask), readgate.for_config(cfg)) != "image":
            read_frames(mask, at, headers_only=True, window=rec.window)  # enough frames
    except Exception as e:  # noqa: BLE001 - PyAV's and PIL's own errors say what
        said = messages.said(e)
        return False, [Msg("diagnosis.mask_unreadable", name=Path(mask).name,
                           why=said if isinstance(said, Msg) else " ".join(str(e).split()))
                       ], []
    if got != tuple(size):
        return False, [Msg("diagnosis.mask_size", name=Path(mask).name, mw=got[0], mh=got[1],
                           w=size[0], h=size[1])], []
    return True, [], []


def check_clip_masks(cfg: RunConfig, records: list[Record], log=None, *,
                     headers_only: bool = False) -> list[Record]:
    """``backend.data.masks.check_masks`` for clips."""
    if not cfg.masked_loss:
        return records
    return masks.check_masks(cfg, records, log, clips=True, sizes=clip_sizes(records, cfg),
                             inspect=inspect_clip_mask, headers_only=headers_only)


def at_clip_frames(rec: Record, cfg: RunConfig) -> RunConfig:
    """``cfg`` for reading ``rec``'s mask frame for frame with its clip: with
    ``frame_buckets``, the one count the clip trains at (a mask video or frames folder as
    short as that is enough; one longer is cut there as the clip is). A window's mask is
    read at the window (``Record.window``)."""
    if not cfg.frame_buckets:
        return cfg
    frames = rec.window.frames if rec.window is not None else clip_shape(rec.image, cfg)[2]
    return cfg.model_copy(update={"frame_buckets": [frames]})


def load_clip_mask(rec: Record, cfg: RunConfig):
    """The mask of a clip record at its training size: [1, F, H, W] float32 in [0, 1]
    (F: the clip's frames, or 1 for one mask over the whole clip), or None (weight 1)."""
    import numpy as np
    import torch

    if rec.mask is None:
        return None
    frames, _ = read_frames(rec.mask, at_clip_frames(rec, cfg), window=rec.window)
    arr = np.stack([np.asarray(f.convert("L"), dtype=np.float32) for f in frames])
    return (torch.from_numpy(arr) / 255.0).unsqueeze(0)


def mask_findings(cfg: RunConfig, previews: int = 0
                  ) -> tuple[list[dict[str, Any]], Any, list[tuple]]:
    """The Dataset tab's findings about masks (every problem as an error naming the row,
    ``validate_dataset``'s form), the count of items without one (a message; None when
    ``masked_loss`` is off or nothing could be checked) and up to ``previews`` images with
    their masks over them (``masks.mask_previews``; images only, none while a mask has a
    problem)."""
    if not cfg.masked_loss:
        return [], None, []
    clips = get_family(cfg.model_family).media == "video"
    records, problems = (read_video_records if clips else read_records)(cfg)
    if problems or not records:
        return [], None, []
    report = masks.mask_report(
        cfg, records, clips=clips, sizes=clip_sizes(records, cfg) if clips else None,
        inspect=inspect_clip_mask if clips else None)

    def finding(level: str, message) -> dict[str, Any]:
        return {"level": level, "file": None, "row": None, "where": "", "caption": "",
                "message": message, "original_size": None, "size": None}

    findings = [finding("error", m) for m in report["problems"]]
    for _, errs, warns in report["per_record"]:
        findings += [finding("error", m) for m in errs] + [finding("warning", m) for m in warns]
    shown = [] if clips or not previews or any(f["level"] == "error" for f in findings) \
        else masks.mask_previews(cfg, report["records"], previews)
    return findings, Msg("diagnosis.mask_count", without=report["without"], n=len(records),
                         then=cfg.mask_missing), shown


# ------------------------------------------------------------------------------------------
# Stage-1 cache entries
# ------------------------------------------------------------------------------------------
def _digest(path: Path, gate: readgate.ReadGate) -> str:
    return gate.digest(frame_files(path, gate) if gate.is_dir(path) else [path], "video")


def plan_clips(cfg: RunConfig, records: list[Record], model_fp: list) -> list[dict[str, Any]]:
    """Manifest entries of a video dataset (``backend.data.cache.plan`` for clips): the key
    covers the clip's bytes, caption, frame settings (with ``frame_buckets``, the buckets
    and the count the clip trains at), size and the encoder files, and a window's index and
    first frame (``frame_extraction``; an entry without a window keeps the key it had
    before windows). Each entry's ``frames`` is its clip's frame count, which stage 2
    batches by (``clip_buckets``)."""
    gate = readgate.for_config(cfg)
    entries = []
    for rec in records:
        frames, _ = read_frames(rec.image, cfg, window=rec.window)
        size = frames[0].size
        payload = {"format": FORMAT, "family": cfg.model_family,
                   "video": _digest(rec.image, gate), "prompt": rec.prompt,
                   "size": list(size), "frames": len(frames),
                   "resize": [cfg.height, cfg.width, cfg.max_pixels],
                   "sampling": [cfg.num_frames, cfg.frame_stride, cfg.video_fps],
                   "model": model_fp, "loading": VIDEO_LOADING}
        if cfg.frame_buckets:  # the counts a clip chose from (its own: ``frames``)
            payload["frame_buckets"] = frame_counts(cfg)
        if rec.sound is not None and rec.sound != rec.image:  # a separate sound file
            payload["sound"] = gate.digest([rec.sound], "audio")
        if rec.reference is not None:  # IC-LoRA: the reference video and its scale
            payload["reference"] = [_digest(rec.reference.path, gate), rec.reference.factor]
        if rec.window is not None:  # one window of the clip: which, and where it starts
            payload["window"] = [rec.window.index, rec.window.start]
        key = hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()
        entries.append({"key": key, "file": f"{key[:32]}.safetensors", "image": str(rec.image),
                        "prompt": rec.prompt, "width": size[0], "height": size[1],
                        "frames": len(frames)})
        if rec.window is not None:
            entries[-1].update(window=rec.window.index, start=rec.window.start)
    return entries


def clip_buckets(records: list[Record], cfg: RunConfig) -> list[tuple[int, int, int]]:
    """The bucket (width, height, frames) of each record's clip (or window), from headers: a
    batch (``backend.data.buckets.BucketBatchSampler``) holds clips of one bucket only."""
    return [clip_shape(rec.image, cfg, rec.window) for rec in records]


# ------------------------------------------------------------------------------------------
# Clips ZeroLoRA wrote (``backend.core.media.write_video``)
# ------------------------------------------------------------------------------------------
def read_video_frames(path: str | Path) -> list[Any]:
    """Every frame of a clip ZeroLoRA wrote, as RGB uint8 arrays (tests and the UI's strip)."""
    av = need_av()
    with av.open(str(path), mode="r") as container:
        return [f.to_ndarray(format="rgb24") for f in container.decode(video=0)]


class ClipDataset(ImageDataset):
    """Records as training items {"pixels": [1, 3, F, H, W], "prompt": str} (one-shot
    ``sft`` of a video family; a window of a clip read as its record says), repeated
    ``repeat`` times."""
    load = staticmethod(load_clip)

    def __getitem__(self, i: int) -> dict[str, Any]:
        rec = self.records[i % len(self.records)]
        if rec.window is None:
            return super().__getitem__(i)
        item = {"pixels": load_clip(rec.image, self.cfg, rec.window), "prompt": rec.prompt}
        if self.mask_loader is not None:
            item["mask"] = self.mask_loader(rec, self.cfg)
        return item
