"""Sample stage: render test prompts with the base model and with LoRA checkpoints.

For every prompt it renders the base model once (scale 0) and each checkpoint at each
non-zero scale of ``sample_lora_scales``, all from the same seed, and writes PNGs plus
``index.json`` into ``--output_dir``::

    samples/base/p00-seed0.png            scale 0 (base model), once per prompt
    samples/step-100/p00-x1-seed0.png     checkpoint step-100 at scale 1
    samples/index.json                    {"version": 1, "images": [{prompt, prompt_index,
                                           checkpoint, checkpoint_name, scale, seed, image,
                                           steps, cfg, height, width, negative_prompt, ...}]}

Base entries have ``checkpoint: null``. ``image`` is relative to ``--output_dir``.
A video family (``Family.media == "video"``) writes each sample as a VP9 WebM clip
(``p00-seed0.webm``: ``sample_num_frames`` frames at ``sample_fps``, encoded with PyAV) and a
strip of four of its frames beside it (``p00-seed0.strip.png``, the entry's ``strip``).
A LoRA file (reference, diffusers or ComfyUI keys) is converted to diffusers keys in memory
and loaded with ``pipe.load_lora_weights``; its strength is ``pipe.set_adapters``.
``--checkpoints`` takes files or folders; a folder means its latest ``step-N`` /
``epoch-N`` checkpoint, or all of them with ``--all_checkpoints``; ``sample_use_ema`` ema
renders each one's EMA twin (``step-N-ema``) instead, both beside it as a column of its
own. Every other option
comes from the run schema (``sample_prompts``, ``sample_lora_scales``, ``sample_seed``,
``sample_steps``, ``sample_cfg``, ``sample_height``, ``sample_width``,
``sample_negative_prompt``, ``sample_cpu_offload``, ``sample_vae_tiling``) via ``--config``
and flags.
Device: CUDA when present (bf16), else CPU (float32). Progress events (stage ``sample``):
start{total}, per rendered image sample{path} then step{step, total, eta_s} (step n of
total: the images rendered so far), sample{path} for index.json, end{status, reason}.

The pipeline and its call are the family's (``Family.load_pipeline`` / ``Family.render``).

GPU (a real model needs its whole pipeline on the GPU; on a small GPU add
--sample_cpu_offload sequential --sample_vae_tiling: weights stream from host RAM module by
module, the VAE decodes in tiles; a few GB, slower; ``model`` still needs the transformer on
the GPU whole; the memory estimate gives each mode's figure):
    accelerate launch -m backend.stages.sample --config runs/<id>/run.yaml \\
        --checkpoints runs/<id>/output --output_dir runs/<id>/samples [--all_checkpoints]

Tiny CPU model (seconds; --stages sample: a config without a dataset):
    python -m backend.families.tiny /tmp/tiny
    python -m backend.stages.sample --stages sample --model_id_with_origin_paths /tmp/tiny \\
        --sample_prompts "a red circle" "a blue square" --sample_lora_scales 0 \\
        --sample_steps 2 --sample_height 64 --sample_width 64 --output_dir /tmp/samples
    (LoRA images: --checkpoints runs/<id>/output --sample_lora_scales 0 1)

Samples during training: ``render_samples(cfg, [checkpoint], output_dir, progress, step)``.
"""
from __future__ import annotations

import argparse
import os
import signal
import sys
import time
import traceback
from pathlib import Path

from backend.core import exits, readgate, rundir
from backend.config.cli import parse_stage_args
from backend.config.errors import ConfigError
from backend.core.messages import Msg
from backend.stages import end_fields, reason_of
from backend.core.progress import ProgressWriter, progress_file_in
from backend.models.quantize import keep_out_unneeded
from backend.training.samples import (plan_samples, render_samples, resolve_checkpoints,
                                      with_ema)

STAGE = "sample"


class Stopped(Exception):
    """Raised by the SIGTERM handler."""


# ------------------------------------------------------------------------------------------
# Command line
# ------------------------------------------------------------------------------------------
def stage_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(add_help=False)
    g = p.add_argument_group("sample stage")
    g.add_argument("--output_dir", default=None,
                   help=f"Folder for the PNGs and {rundir.SAMPLES_INDEX}.")
    g.add_argument("--checkpoints", nargs="*", default=[],
                   help="LoRA files or folders (a folder: its latest step-/epoch- checkpoint).")
    g.add_argument("--reuse_base_from", nargs="*", default=[],
                   help="Other sample folders whose base-model images (same prompt and "
                        "settings) are copied instead of rendered again.")
    g.add_argument("--all_checkpoints", action="store_true",
                   help="Folders give all their checkpoints, not only the latest.")
    return p


def _raise_stopped(signum, frame):  # noqa: ARG001
    raise Stopped(Msg("note.stopped_signal", signal=signal.Signals(signum).name))


def main(argv: list[str] | None = None) -> int:
    own_process = argv is None  # this process is the stage (not a caller's import)
    argv = list(sys.argv[1:] if argv is None else argv)
    is_main = int(os.environ.get("RANK", "0")) == 0
    try:
        cfg, ns = parse_stage_args(argv, prog="backend.stages.sample", extra=stage_parser())
        if not ns.output_dir:
            raise ConfigError(["output_dir: required (got None; allowed a folder for the PNGs "
                               f"and {rundir.SAMPLES_INDEX})"])
    except ConfigError as e:
        print(e, file=sys.stderr, flush=True)
        early = progress_file_in(argv)
        ProgressWriter(early, STAGE, enabled=is_main).emit(
            "end", **end_fields("failed", reason_of(e)))
        return exits.REFUSED
    if own_process:  # keep unused optional packages out of the process
        keep_out_unneeded(cfg)
    progress_file = cfg.progress_file or str(Path(cfg.output_path) / rundir.PROGRESS)
    progress = ProgressWriter(progress_file, STAGE, enabled=is_main)
    if not is_main:  # one renderer is enough; other ranks of a multi-process launch idle
        return exits.OK
    signal.signal(signal.SIGTERM, _raise_stopped)
    try:
        output_dir = Path(ns.output_dir)
        checkpoints = resolve_checkpoints(ns.checkpoints, ns.all_checkpoints,
                                          readgate.for_config(cfg))
        # configuration errors before any model is loaded
        plan_samples(cfg, with_ema(checkpoints, cfg.sample_use_ema))

        count = {"total": 0, "done": 0, "t0": time.time()}

        def start(total: int) -> None:
            print(f"[sample] {len(cfg.sample_prompts)} prompt(s), scales "
                  f"{cfg.sample_lora_scales}, {len(checkpoints)} checkpoint(s): {total} "
                  f"image(s) -> {output_dir}", flush=True)
            count.update(total=total, t0=time.time())
            progress.emit("start", total=total)

        def rendered(entry: dict) -> None:  # one step per image: the run shows n / total
            count["done"] += 1
            done, total = count["done"], count["total"]
            per_image = (time.time() - count["t0"]) / done
            progress.emit("step", step=done, total=total,
                          eta_s=round(per_image * max(0, total - done), 1))

        render_samples(cfg, checkpoints, output_dir, progress=progress, on_start=start,
                       on_image=rendered, reuse_from=ns.reuse_base_from)
    except Stopped as e:
        progress.emit("end", **end_fields("stopped", reason_of(e)))
        return exits.STOPPED
    except ConfigError as e:
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
