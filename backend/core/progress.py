"""Progress events: one JSON object per line, appended by a stage, read by the runner and UI.

Every event has ``time`` (unix seconds), ``stage`` (data_process | train | sample) and
``event``:

- ``start``       total (int, steps or samples), epochs (int, optional); the train stage adds
                  steps_per_epoch, num_processes and batch_size
- ``step``        step, total, epoch, loss, lr, samples_per_s, eta_s (the sample stage:
                  step, total, eta_s, one per image rendered)
- ``validation``  step, val_loss, samples (the held-out validation loss at fixed noise and
                  timesteps, ``validation_samples``; at step 0, every
                  ``validation_every_n_steps`` or each checkpoint, and the last step)
- ``checkpoint``  step, path
- ``sample``      step, path (an image or an index JSON)
- ``end``         status (succeeded | failed | stopped), reason (one line, for failed/stopped)

The last event of a stage is always ``end``. Only rank 0 writes (the writer is disabled
elsewhere), so the UI never parses tqdm text.
"""
from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any


class ProgressWriter:
    def __init__(self, path: str | os.PathLike | None, stage: str, enabled: bool = True):
        self.path = Path(path) if path else None
        self.stage = stage
        self.enabled = enabled and self.path is not None
        if self.enabled:
            self.path.parent.mkdir(parents=True, exist_ok=True)

    def emit(self, event: str, **fields: Any) -> None:
        if not self.enabled:
            return
        record = {"time": round(time.time(), 3), "stage": self.stage, "event": event, **fields}
        line = json.dumps(record, default=str) + "\n"
        # One write per line in append mode: readers never see half a record from us.
        try:
            with open(self.path, "a", encoding="utf-8") as f:
                f.write(line)
                f.flush()
        except OSError as e:  # e.g. a full disk: the stage goes on (or ends) all the same
            import sys
            print(f"[progress] could not write a {event} event to {self.path}: {e}",
                  file=sys.stderr, flush=True)

    def end(self, status: str = "succeeded", reason: str | None = None) -> None:
        fields: dict[str, Any] = {"status": status}
        if reason:
            fields["reason"] = " ".join(str(reason).split())[:500]
        self.emit("end", **fields)


def read_events(path: str | os.PathLike, offset: int = 0) -> tuple[list[dict], int]:
    """Read complete event lines from byte ``offset``; return (events, new_offset).

    A trailing partial line (a writer mid-append) is left for the next call.
    """
    p = Path(path)
    if not p.exists():
        return [], offset
    with open(p, "rb") as f:
        f.seek(offset)
        data = f.read()
    end = data.rfind(b"\n")
    if end < 0:
        return [], offset
    events = []
    for raw in data[: end + 1].splitlines():
        raw = raw.strip()
        if not raw:
            continue
        try:
            events.append(json.loads(raw))
        except json.JSONDecodeError:
            continue
    return events, offset + end + 1


def progress_file_in(argv: list[str]) -> str | None:
    """The ``--progress_file`` a stage's command line names (for reporting a failure to
    parse the rest of it), else None."""
    for i, a in enumerate(argv):
        if a == "--progress_file" and i + 1 < len(argv):
            return argv[i + 1]
        if a.startswith("--progress_file="):
            return a.split("=", 1)[1]
    return None
