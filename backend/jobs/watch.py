"""What the UI watches while a run goes on: its logs and its progress events, read from the
end or incrementally by byte offset (never a whole multi-megabyte log)."""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from backend.core.messages import Msg

# The supervisor's own lines in a stage's log start with LOG_PREFIX; each attempt of a stage
# starts with a STAGE_HEADER line (a resumed run appends to the log).
LOG_PREFIX = "[zerolora]"
STAGE_HEADER = LOG_PREFIX + " ==== stage"


def read_tail(path: str | os.PathLike, max_bytes: int) -> str:
    """The last ``max_bytes`` of a file as text (never the whole file)."""
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - max_bytes))
            data = f.read()
    except FileNotFoundError:
        return ""
    return data.decode("utf-8", errors="replace")


def last_end_event(progress_file: Path, stage: str, since: float | None = None
                   ) -> dict | None:
    """The last ``end`` event of ``stage`` in the progress file (read from its last 256 KiB);
    with ``since`` (unix seconds), only one written at or after then (this attempt's)."""
    text = read_tail(progress_file, 256 * 1024)
    found = None
    for line in text.splitlines():
        if '"end"' not in line:
            continue
        try:
            ev = json.loads(line)
        except json.JSONDecodeError:
            continue
        if ev.get("event") == "end" and ev.get("stage") == stage:
            when = ev.get("time")
            if since is not None and not (isinstance(when, (int, float)) and when >= since):
                continue
            found = ev
    return found


def end_reason(ev: dict | None) -> "Msg | str | None":
    """An ``end`` event's reason: the stage's message (its code and parameters, which the
    stage sends as ``reason_msg``, see ``backend.stages.end_fields``) when it sent one, else
    its text (another program's words, or a stage that sends none)."""
    if not ev:
        return None
    data = ev.get("reason_msg")
    if isinstance(data, dict):
        found = Msg.from_json(data)
        if isinstance(found, Msg):
            return found
    return ev.get("reason")


def utf8_cut(data: bytes) -> int:
    """Length of ``data`` without a trailing incomplete UTF-8 character."""
    n = len(data)
    for back in range(1, min(4, n) + 1):
        b = data[n - back]
        if b & 0xC0 == 0x80:  # continuation byte: look further back for the lead byte
            continue
        if b >= 0xC0:
            need = 4 if b >= 0xF0 else 3 if b >= 0xE0 else 2
            return n - back if back < need else n
        return n
    return n


class ProgressState:
    """Summary state of one run's progress file, advanced incrementally by byte offset."""

    def __init__(self, key: tuple[int, int]):
        self.key = key
        self.offset = 0
        self.stages: dict[str, dict[str, Any]] = {}
        self.order: list[str] = []
        self.current: str | None = None
        self.losses: dict[str, list[list[float]]] = {}
        # Held-out validation loss per stage: [[step, val_loss], ...] (``validation`` events).
        self.val_losses: dict[str, list[list[float]]] = {}
        self.checkpoints: list[dict[str, Any]] = []
        self.samples: list[dict[str, Any]] = []
        self.last_time: float | None = None

    def apply(self, ev: dict[str, Any]) -> None:
        name = str(ev.get("stage") or "?")
        kind = ev.get("event")
        if name not in self.stages:
            self.stages[name] = {"status": "running", "step": 0, "total": None}
            self.order.append(name)
        st = self.stages[name]
        self.current = name
        self.last_time = ev.get("time", self.last_time)
        if kind == "start":
            st.update(status="running", step=0, total=ev.get("total"), epochs=ev.get("epochs"),
                      started=ev.get("time"), ended=None, reason=None)
        elif kind == "step":
            for k in ("step", "total", "epoch", "loss", "lr", "samples_per_s", "eta_s"):
                if ev.get(k) is not None:
                    st[k] = ev[k]
            step, loss = ev.get("step"), ev.get("loss")
            if isinstance(step, (int, float)) and isinstance(loss, (int, float)):
                losses = self.losses.setdefault(name, [])
                # A resumed attempt continues after its saved step: drop the stale tail.
                while losses and losses[-1][0] >= step:
                    losses.pop()
                losses.append([step, float(loss)])
        elif kind == "validation":
            step, value = ev.get("step"), ev.get("val_loss")
            if isinstance(step, (int, float)) and isinstance(value, (int, float)):
                st["val_loss"] = value
                vals = self.val_losses.setdefault(name, [])
                while vals and vals[-1][0] >= step:  # a resumed attempt: drop the stale tail
                    vals.pop()
                vals.append([step, float(value)])
        elif kind in ("checkpoint", "sample"):
            items = self.checkpoints if kind == "checkpoint" else self.samples
            item = {"stage": name, "step": ev.get("step"), "path": ev.get("path"),
                    "time": ev.get("time")}
            items[:] = [i for i in items if i["path"] != item["path"]] + [item]
        elif kind == "end":
            st.update(status=ev.get("status"), reason=end_reason(ev), ended=ev.get("time"))
