"""Where every bench script's figures go: one JSON file under bench/results/."""
from __future__ import annotations

import json
from pathlib import Path


def write_result(out: str | Path, result: dict, prefix: str = "") -> dict:
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"{prefix}wrote {out}", flush=True)
    return result
