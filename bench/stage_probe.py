"""Run a real stage and record its own peak memory when it exits.

The bench scripts launch it in place of ``-m`` in a stage's planned command, the module
becoming its first argument, so the stage runs exactly as the run plan starts it (the
generated accelerate / DeepSpeed files, the same flags)::

    accelerate launch --config_file X bench/stage_probe.py backend.stages.train <flags>
    python bench/stage_probe.py backend.stages.sample <flags>

At exit each rank writes ``$ZEROLORA_PROBE_OUT.rank<R>.json``: ``torch.cuda.
max_memory_allocated`` and ``max_memory_reserved`` (CUDA), ``ru_maxrss`` of the process,
and the exit code.
"""
from __future__ import annotations

import atexit
import importlib
import json
import os
import resource
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
STAGES = ("backend.stages.train", "backend.stages.sample")

_state = {"exit_code": None}


def report() -> None:
    out = os.environ.get("ZEROLORA_PROBE_OUT")
    if not out:
        return
    data = {"exit_code": _state["exit_code"],
            "ru_maxrss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024}
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_available() and torch.cuda.is_initialized():
        data["max_memory_allocated_bytes"] = int(torch.cuda.max_memory_allocated())
        data["max_memory_reserved_bytes"] = int(torch.cuda.max_memory_reserved())
    rank = os.environ.get("RANK", "0")
    Path(f"{out}.rank{rank}.json").write_text(json.dumps(data))


def main() -> int:
    if len(sys.argv) < 2 or sys.argv[1] not in STAGES:
        print(f"usage: stage_probe.py {{{' | '.join(STAGES)}}} <stage flags>", file=sys.stderr)
        return 2
    atexit.register(report)
    code = importlib.import_module(sys.argv[1]).main(sys.argv[2:])
    _state["exit_code"] = code
    return code


if __name__ == "__main__":
    sys.exit(main())
