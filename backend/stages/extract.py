"""Extract stage: a LoRA from a full fine-tune's checkpoint, as a run of its own (the Runs
tab's "Extract LoRA"), through ``backend.models.extract`` (its runbook and flags).

    python -m backend.stages.extract --base BASE/transformer --tuned RUN/output/step-N \\
        --out RUN/output/export/step-N-lora-r64.safetensors --rank 64 \\
        --progress_file JOB/progress.jsonl

Progress events (stage ``extract``): start, then end{status, reason, path}. Exit codes as
every stage's (``backend/core/exits.py``): 0 written; 2 refused (a flag, a folder, another
architecture: the message names the flag); 3 the disk or memory ran out; 1 unexpected.
"""
from __future__ import annotations

import sys
import traceback
from pathlib import Path

from backend.core import exits
from backend.core.diskspace import DiskFullError, FileSizeLimitError
from backend.core.progress import ProgressWriter
from backend.models import extract
from backend.stages import end_fields, reason_of

STAGE = "extract"


def main(argv: list[str] | None = None) -> int:
    parser = extract.build_parser(prog="python -m backend.stages.extract")
    parser.add_argument("--progress_file", default=None,
                        help="progress events (default: beside --out)")
    args = parser.parse_args(argv)
    progress = ProgressWriter(args.progress_file or str(Path(args.out).with_suffix(".jsonl")),
                              STAGE)
    progress.emit("start", total=1)
    try:
        result = extract.run(args)
    except extract.ExtractError as e:
        print(e, file=sys.stderr, flush=True)
        progress.emit("end", **end_fields("failed", reason_of(e)))
        return exits.REFUSED
    except (DiskFullError, FileSizeLimitError) as e:
        print(f"error: {e}", file=sys.stderr, flush=True)
        progress.emit("end", **end_fields("failed", reason_of(e)))
        return exits.RESOURCES
    except BaseException as e:  # noqa: BLE001 - the stage always ends with an event
        traceback.print_exc()
        progress.emit("end", **end_fields("failed", reason_of(e, with_type=True)))
        return exits.of_unexpected(e)
    progress.emit("step", step=1, total=1)
    progress.emit("end", **end_fields("succeeded", path=str(result.path)))
    return exits.OK


if __name__ == "__main__":
    sys.exit(main())
