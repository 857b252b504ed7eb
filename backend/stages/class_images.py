"""Class images stage: the base model renders the class images prior preservation lacks.

With ``prior_preservation`` and a ``class_prompt``, the run plan runs this stage before
stage 1: it renders, with the family's pipeline (no LoRA) and the sample settings, the
``num_class_images`` minus those of ``class_data_path`` into ``--output_dir`` (the run
folder's ``classes/``), each with its caption, skipping those already there; stage 1 then
caches them (``--class_images_dir``). Why a stage of its own, the file layout and the reuse
rule: ``backend/training/class_images.py``.

    python -m backend.stages.class_images --config runs/<id>/run.yaml \\
        --output_dir runs/<id>/classes

Tiny CPU model (seconds)::

    python -m backend.families.tiny /tmp/tiny
    python -m backend.stages.class_images --model_id_with_origin_paths /tmp/tiny \\
        --dataset_base_path backend/assets/demo_dataset --prior_preservation \\
        --class_prompt "a shape" --num_class_images 2 --sample_steps 2 \\
        --sample_height 64 --sample_width 64 --output_dir /tmp/classes

Device: CUDA when present (bf16), else CPU (float32); one process (other ranks of a
multi-process launch idle). Progress events (stage ``class_images``): start{total} (the
images to render), step{step, total, eta_s} per image, end{status, reason, rendered,
reused, given}. Exit codes: 0 succeeded (nothing to render included); 2 refused (options,
the class folder, a model that cannot render class images); 143 stopped by SIGTERM between
two images (those written stay); 1 failed.
"""
from __future__ import annotations

import argparse
import os
import signal
import sys
import time
import traceback
from pathlib import Path

from backend.config.cli import parse_stage_args
from backend.config.errors import ConfigError
from backend.core import exits, rundir
from backend.core.messages import Msg
from backend.core.progress import ProgressWriter, progress_file_in
from backend.data.dataset import DatasetError
from backend.families import get_family
from backend.models.hub import HubError
from backend.models.quantize import keep_out_unneeded
from backend.stages import end_fields, reason_of
from backend.training.class_images import STAGE, elapsed, render_missing
from backend.training.loop import StageError, Stopper, log

USER_ERRORS = (ConfigError, StageError, DatasetError, HubError)


def stage_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(add_help=False)
    g = p.add_argument_group("class images stage")
    g.add_argument("--output_dir", default=None,
                   help="Folder for the class images and their captions (the run folder's "
                        "classes/; never the user's class_data_path).")
    return p


def main(argv: list[str] | None = None) -> int:
    own_process = argv is None
    argv = list(sys.argv[1:] if argv is None else argv)
    is_main = int(os.environ.get("RANK", "0")) == 0
    try:
        cfg, ns = parse_stage_args(argv, prog="backend.stages.class_images",
                                   extra=stage_parser())
        if not ns.output_dir:
            raise ConfigError([Msg("note.class_images_output_dir")])
    except ConfigError as e:
        print(e, file=sys.stderr, flush=True)
        ProgressWriter(progress_file_in(argv), STAGE, enabled=is_main).emit(
            "end", **end_fields("failed", reason_of(e)))
        return exits.REFUSED
    if own_process:
        keep_out_unneeded(cfg)
    progress_file = cfg.progress_file or str(Path(ns.output_dir) / rundir.PROGRESS)
    progress = ProgressWriter(progress_file, STAGE, enabled=is_main)
    if not is_main:
        return exits.OK
    stopper = Stopper()
    stopper.install()
    t0 = time.time()

    def start(total: int) -> None:
        nonlocal t0
        t0 = time.time()
        progress.emit("start", total=total)

    def rendered(done: int, total: int) -> None:
        progress.emit("step", step=done, total=total, eta_s=elapsed(t0, done, total))

    try:
        family = get_family(cfg.model_family).for_config(cfg)
        result = render_missing(cfg, family, ns.output_dir, log=log, on_start=start,
                                on_image=rendered, should_stop=stopper.is_set)
    except USER_ERRORS as e:
        print(f"error: {e}", file=sys.stderr, flush=True)
        progress.emit("end", **end_fields("failed", reason_of(e)))
        return exits.REFUSED
    except Exception as e:  # noqa: BLE001 - the stage's one-line reason; traceback to the log
        traceback.print_exc()
        progress.emit("end", **end_fields("failed", reason_of(e, with_type=True)))
        return exits.of_unexpected(e)
    fields = {k: result[k] for k in ("rendered", "reused", "given")}
    if result["stopped"]:
        progress.emit("end", **end_fields("stopped", Msg(
            "note.class_images_stopped", signal=signal.Signals(stopper.signal).name,
            n=result["rendered"]), **fields))
        return exits.STOPPED
    progress.emit("end", **end_fields("succeeded", **fields))
    return exits.OK


if __name__ == "__main__":
    sys.exit(main())
