"""The stages a run is made of (``python -m backend.stages.<name>``), and how each says why it
ended: the ``end`` event's ``reason`` is one line of English (what the CLI and the API read)
and, when the reason is a message (``backend.core.messages``), ``reason_msg`` carries its
code and parameters, so the runner and the page say it in their language
(``backend.jobs.watch.end_reason`` reads it back). An error of another program stays its
own words: a ``reason`` with no ``reason_msg``."""
from __future__ import annotations

from typing import Any

from backend.core.messages import Msg

REASON_MAX = 500


def reason_of(e: BaseException, with_type: bool = False) -> "Msg | str":
    """What an error says, for an ``end`` event: the message it carries (its one-line form
    ``line_msg`` where it has one, else ``msg`` or its first argument when that is a
    message), else its text on one line (``with_type``: after its class name)."""
    for found in (getattr(e, "line_msg", None), getattr(e, "msg", None),
                  e.args[0] if e.args else None):
        if isinstance(found, Msg):
            return found
    text = " ".join(str(e).split()) or type(e).__name__
    return (f"{type(e).__name__}: {text}" if with_type else text)[:REASON_MAX]


def end_fields(status: str, reason: Any = None, **fields: Any) -> dict[str, Any]:
    """The fields of an ``end`` event: ``status``, ``reason`` on one line (as
    ``ProgressWriter.end`` writes it) and its message as ``reason_msg``; ``fields`` as they
    are."""
    out: dict[str, Any] = {"status": status, **fields}
    if reason:
        out["reason"] = " ".join(str(reason).split())[:REASON_MAX]
        if isinstance(reason, Msg):
            out["reason_msg"] = reason.to_json()
    else:
        out.pop("reason", None)
    return out
