"""Server time per event handler, for measuring how fast the page answers
(``bench/page_speed.py``).

With ``ZEROLORA_EVENT_TIMES=<file>`` in the environment, ``instrument(demo)`` wraps every
event function of the built Blocks so that each call appends one JSON line to that file::

    {"fn": "training.refresh", "id": 19, "start": 1767000000.12, "s": 0.84}

``fn`` is the handler (its module's last name and the function's), ``id`` the event's
index in the page config, ``start`` when the call began (Unix seconds), ``s`` the seconds
spent inside it (for a generator: inside its steps, not while it waits between them).
Gradio's own work around a call (reading the inputs, writing the outputs) and the queue are
not in ``s``. Without the variable nothing is wrapped and nothing is written.
"""
from __future__ import annotations

import functools
import inspect
import json
import os
import threading
import time
from typing import Any, Callable

ENV = "ZEROLORA_EVENT_TIMES"

_lock = threading.Lock()
_files: dict[str, Any] = {}


def instrument(demo) -> None:
    """Time every event function of ``demo`` (a built ``gr.Blocks``) when ``ENV`` is set."""
    path = os.environ.get(ENV)
    if not path:
        return
    fns = demo.fns.items() if isinstance(demo.fns, dict) else enumerate(demo.fns)
    for fn_id, block_fn in fns:
        fn = block_fn.fn
        if fn is None or getattr(fn, "__zl_timed__", False):
            continue
        name = f"{(fn.__module__ or '').rsplit('.', 1)[-1]}.{block_fn.name}".lstrip(".")
        block_fn.fn = timed(fn, name, fn_id, path)


def timed(fn: Callable, name: str, fn_id: int, path: str) -> Callable:
    """``fn`` with each call's time appended to ``path``; same signature, annotations and
    kind (plain, coroutine, generator or async generator), which gradio reads to pass
    ``gr.Request``, event data and dict-style inputs."""

    def record(start: float, seconds: float) -> None:
        _write(path, {"fn": name, "id": fn_id, "start": round(start, 4),
                      "s": round(seconds, 4)})

    if inspect.isasyncgenfunction(fn):
        @functools.wraps(fn)
        async def wrapper(*args, **kwargs):
            start, spent = time.time(), 0.0
            steps = fn(*args, **kwargs)
            try:
                while True:
                    t = time.perf_counter()
                    try:
                        item = await steps.__anext__()
                    except StopAsyncIteration:
                        return
                    finally:
                        spent += time.perf_counter() - t
                    yield item
            finally:
                record(start, spent)
    elif inspect.iscoroutinefunction(fn):
        @functools.wraps(fn)
        async def wrapper(*args, **kwargs):
            start, t = time.time(), time.perf_counter()
            try:
                return await fn(*args, **kwargs)
            finally:
                record(start, time.perf_counter() - t)
    elif inspect.isgeneratorfunction(fn):
        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            start, spent = time.time(), 0.0
            steps = fn(*args, **kwargs)
            try:
                while True:
                    t = time.perf_counter()
                    try:
                        item = next(steps)
                    except StopIteration as stop:
                        return stop.value
                    finally:
                        spent += time.perf_counter() - t
                    yield item
            finally:
                record(start, spent)
    else:
        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            start, t = time.time(), time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                record(start, time.perf_counter() - t)

    wrapper.__zl_timed__ = True
    return wrapper


def _write(path: str, row: dict) -> None:
    line = json.dumps(row) + "\n"
    with _lock:
        f = _files.get(path)
        if f is None:
            f = _files[path] = open(path, "a", encoding="utf-8")
        f.write(line)
        f.flush()
