"""Caption stage: write a caption for every image of a dataset with a vision-language model.

Reads ``dataset_base_path`` (and ``dataset_metadata_path`` for ``caption_target:
metadata``), captions the images without a caption (all of them with
``caption_overwrite``) in batches of ``caption_batch_size`` and writes each batch before
the next (``caption_dataset``; ``backend/data/captions.py`` has the rules: trigger word in
front, one line, at most ``caption_max_length`` tokens). The model is ``captioner_path`` or the family's own text
encoder (a vision-language model). Every option comes from the run schema via ``--config``
and flags; ``--journal`` lists the images this job captioned, so a resumed job (or the
same command run again) skips them.
Device: CUDA when present (bf16), else CPU (float32). Progress events (stage ``caption``):
start{total, kept}, step{step, total, eta_s} per batch (step: images captioned so far),
end{status, reason}.

GPU (the default family's text encoder in bf16 is about 16 GB; with --caption_offload
sequential a few GB, slower):
    python -m backend.stages.caption --config runs/<id>/run.yaml \\
        --dataset_base_path data/my-set --trigger_word "zlr style" --caption_batch_size 8

Tiny CPU model (seconds):
    python -m backend.families.tiny /tmp/tiny
    python -m backend.stages.caption --stages data_process \\
        --model_id_with_origin_paths /tmp/tiny --dataset_base_path /tmp/images \\
        --caption_max_length 12 --progress_file /tmp/progress.jsonl
"""
from __future__ import annotations

import argparse
import signal
import sys
import time
import traceback
from pathlib import Path
from typing import Callable

from backend.core import exits, readgate, writegate
from backend.core.media_types import IMAGE_EXTS
from backend.core.progress import ProgressWriter, progress_file_in
from backend.config.cli import parse_stage_args
from backend.config.errors import ConfigError
from backend.core.messages import Msg
from backend.stages import end_fields, reason_of
from backend.config.schema import RunConfig
from backend.data.captions import (CaptionError, caption_problems, dataset_items, load_captioner,
                                   not_image_reason, one_line, to_caption, write_captions)
from backend.data.dataset import with_trigger
from backend.planning.caption_job import STAGE


class Stopped(Exception):
    """Raised by the SIGTERM handler."""


def read_journal(path: Path | None) -> set[str]:
    """The images a job's journal lists as captioned (none without a journal)."""
    if path is None or not path.is_file():
        return set()
    return {line for line in path.read_text(encoding="utf-8").splitlines() if line}


def caption_dataset(cfg: RunConfig, captioner, *, journal: Path | None = None,
                    gate: readgate.ReadGate | None = None,
                    should_stop: Callable[[], bool] = lambda: False,
                    on_start: Callable[[int, int], None] = lambda total, kept: None,
                    on_batch: Callable[[int, int, dict[str, str]], None] =
                    lambda done, total, captions: None,
                    log: Callable[[str], None] = print) -> dict[str, int]:
    """Caption ``cfg``'s dataset with ``captioner`` (a ``Captioner``), batch by batch; each
    batch is written before the next starts and listed in ``journal``. Returns
    {"images", "captioned", "kept", "done_before"}."""
    from PIL import Image

    gate = gate or readgate.for_config(cfg)
    items = dataset_items(cfg, gate)
    done_before = read_journal(journal)
    todo = to_caption(items, cfg.caption_overwrite, done_before)
    kept = sum(1 for it in items if it.caption and not cfg.caption_overwrite)
    log(f"[caption] {len(items)} image(s) in {cfg.dataset_base_path}: {len(todo)} to caption, "
        f"{kept} keep their caption, {len(done_before)} captioned before this attempt; "
        f"writing {'.txt files' if cfg.caption_target == 'txt' else cfg.dataset_metadata_path}")
    on_start(len(todo), kept)
    captioned = 0
    size = int(cfg.caption_batch_size)
    for start in range(0, len(todo), size):
        if should_stop():
            break
        batch = todo[start:start + size]
        images = []
        for it in batch:
            try:
                with gate.open(it.path, "image") as f, Image.open(f) as im:
                    images.append(im.convert("RGB"))
            except (OSError, ValueError, SyntaxError) as e:  # UnidentifiedImageError too
                raise CaptionError([f"dataset_base_path: {it.key} does not open as an image "
                                    f"({not_image_reason(e)}) (got {it.key!r}; allowed "
                                    f"{', '.join(IMAGE_EXTS)} image files)"]) from None
        texts = captioner.caption(images, cfg.caption_template, cfg.caption_max_length)
        captions = {it.key: with_trigger(one_line(t), cfg.trigger_word)
                    for it, t in zip(batch, texts)}
        write_captions(cfg, captions, gate)
        if journal is not None:
            with open(journal, "a", encoding="utf-8") as f:
                f.write("".join(k + "\n" for k in captions))
        captioned += len(captions)
        for key, text in captions.items():
            log(f"[caption] {key}: {text}")
        on_batch(captioned, len(todo), captions)
    return {"images": len(items), "captioned": captioned, "kept": kept,
            "done_before": len(done_before)}


def stage_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(add_help=False)
    g = p.add_argument_group("caption stage")
    g.add_argument("--journal", default=None,
                   help="File listing the images this job captioned (appended per batch; "
                        "listed images are skipped when the job runs again).")
    return p


def _raise_stopped(signum, frame):  # noqa: ARG001
    raise Stopped(Msg("note.stopped_signal", signal=signal.Signals(signum).name))


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        cfg, ns = parse_stage_args(argv, prog="backend.stages.caption", extra=stage_parser())
    except ConfigError as e:
        print(e, file=sys.stderr, flush=True)
        ProgressWriter(progress_file_in(argv), STAGE).emit(
            "end", **end_fields("failed", reason_of(e)))
        return exits.REFUSED
    progress = ProgressWriter(cfg.progress_file, STAGE)
    signal.signal(signal.SIGTERM, _raise_stopped)
    try:
        import torch

        cuda = torch.cuda.is_available()
        device = "cuda" if cuda else "cpu"
        dtype = torch.bfloat16 if cuda else torch.float32
        journal = Path(ns.journal) if ns.journal else None
        problems = caption_problems(cfg)  # before the model loads
        if problems:
            raise CaptionError(problems)
        # Where the captions go must be writable for this run (its write_roots).
        if cfg.caption_target == "metadata":
            writegate.for_config(cfg).check(cfg.dataset_metadata_path, "dataset_metadata_path")
        else:
            writegate.for_config(cfg).check(cfg.dataset_base_path, "dataset_base_path")
        captioner = load_captioner(cfg, device, dtype)
        t0 = {"t": time.time()}

        def start(total: int, kept: int) -> None:
            t0["t"] = time.time()
            progress.emit("start", total=total, kept=kept)

        def batch(done: int, total: int, captions: dict) -> None:
            per = (time.time() - t0["t"]) / max(done, 1)
            progress.emit("step", step=done, total=total,
                          eta_s=round(per * max(0, total - done), 1))

        summary = caption_dataset(cfg, captioner, journal=journal, on_start=start,
                                  on_batch=batch)
        print(f"[caption] done: {summary['captioned']} captioned, {summary['kept']} kept "
              f"their caption, {summary['images']} image(s)", flush=True)
    except Stopped as e:
        progress.emit("end", **end_fields("stopped", reason_of(e)))
        return exits.STOPPED
    except (ConfigError, CaptionError, writegate.WriteRefused) as e:
        print(e, file=sys.stderr, flush=True)
        progress.emit("end", **end_fields("failed", reason_of(e)))
        return exits.REFUSED
    except Exception as e:  # noqa: BLE001 - the stage's one-line reason; traceback to the log
        traceback.print_exc()
        progress.emit("end", **end_fields("failed", reason_of(e, with_type=True)))
        return exits.of_unexpected(e)
    progress.end("succeeded")
    return exits.OK


if __name__ == "__main__":
    sys.exit(main())
