"""Run the real train stage and record its own peak memory when it exits.

Launched in place of ``-m backend.stages.train`` by the bench scripts (``accelerate launch
[--config_file X] bench/train_probe.py <the stage's flags>``), so the stage runs exactly as
the run plan starts it, with the generated accelerate / DeepSpeed files. At exit each rank
writes ``$ZEROLORA_PROBE_OUT.rank<R>.json``: ``torch.cuda.max_memory_allocated`` and
``max_memory_reserved`` (CUDA), ``ru_maxrss`` of the process, and the exit code.
"""
from __future__ import annotations

import atexit
import json
import os
import resource
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

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
    atexit.register(report)
    from backend.stages import train

    code = train.main(sys.argv[1:])
    _state["exit_code"] = code
    return code


if __name__ == "__main__":
    sys.exit(main())
