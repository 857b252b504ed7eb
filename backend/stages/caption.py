"""Caption stage: write a caption for every image of a dataset with a vision-language model.

Reads ``dataset_base_path`` (and ``dataset_metadata_path`` for ``caption_target:
metadata``), captions the images without a caption (all of them with
``caption_overwrite``) in batches of ``caption_batch_size`` and writes each batch before
the next (``backend/data/captions.py`` has the rules: trigger word in front, one line, at most
``caption_max_length`` tokens). The model is ``captioner_path`` or the family's own text
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

from backend.data.captions import STAGE, CaptionError, caption_dataset, load_captioner
from backend.core import writegate
from backend.config.schema import ConfigError, parse_stage_args
from backend.core.progress import ProgressWriter, progress_file_in


class Stopped(Exception):
    """Raised by the SIGTERM handler."""


def stage_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(add_help=False)
    g = p.add_argument_group("caption stage")
    g.add_argument("--journal", default=None,
                   help="File listing the images this job captioned (appended per batch; "
                        "listed images are skipped when the job runs again).")
    return p


def _raise_stopped(signum, frame):  # noqa: ARG001
    raise Stopped(f"stopped by signal {signal.Signals(signum).name}")


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        cfg, ns = parse_stage_args(argv, prog="backend.stages.caption", extra=stage_parser())
    except ConfigError as e:
        print(e, file=sys.stderr, flush=True)
        ProgressWriter(progress_file_in(argv), STAGE).end(
            "failed", str(e).replace("\n", " "))
        return 2
    progress = ProgressWriter(cfg.progress_file, STAGE)
    signal.signal(signal.SIGTERM, _raise_stopped)
    try:
        import torch

        cuda = torch.cuda.is_available()
        device = "cuda" if cuda else "cpu"
        dtype = torch.bfloat16 if cuda else torch.float32
        journal = Path(ns.journal) if ns.journal else None
        from backend.data.captions import caption_problems

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
        progress.end("stopped", str(e))
        return 143
    except (ConfigError, CaptionError, writegate.WriteRefused) as e:
        print(e, file=sys.stderr, flush=True)
        progress.end("failed", str(e).replace("\n", " "))
        return 2
    except Exception as e:  # noqa: BLE001 - the stage's one-line reason; traceback to the log
        traceback.print_exc()
        progress.end("failed", f"{type(e).__name__}: {e}")
        return 1
    progress.end("succeeded")
    return 0


if __name__ == "__main__":
    sys.exit(main())
