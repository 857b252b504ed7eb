"""The model libraries (torch, accelerate, transformers, diffusers, peft), loaded one thread
at a time.

Their packages import each other and resolve model classes lazily, on first attribute
access. Two threads doing that at once can each be handed the other's half-initialised
module (Python accepts a partial module rather than deadlock on a circular import), and one
of them fails with ``cannot import name ...``. The stage processes are single-threaded; the
app answers several browser events at once (an estimate and a Start, say), so it calls
``threaded()`` at start and everything it reaches the libraries through goes by this
module: ``get_family`` loads them and its family's classes here, and code that looks a
class up by name calls ``model_class``.
"""
from __future__ import annotations

import threading
from typing import Iterable

_LOCK = threading.RLock()
_loaded = False
_threaded = False
_classes: dict[str, type] = {}


def threaded() -> None:
    """Say that this process reaches the libraries from several threads (the app calls it
    at start): ``get_family`` then loads them, and the family's classes, under the lock
    before it hands the family out. A stage process stays lazy, so bad input is refused
    before torch is imported."""
    global _threaded
    _threaded = True


def is_threaded() -> bool:
    return _threaded


def load() -> None:
    """Import the libraries, once per process."""
    global _loaded
    if _loaded:
        return
    with _LOCK:
        if not _loaded:
            import accelerate  # noqa: F401
            import diffusers  # noqa: F401
            import peft  # noqa: F401
            import torch  # noqa: F401
            import transformers  # noqa: F401
            _loaded = True


def ready() -> None:
    """Call before importing from the libraries directly (``from accelerate...``): in the
    app (``threaded``) they are loaded under the lock first, so two browser events that
    plan a run at once never import them half-way; a stage process stays lazy."""
    if _threaded:
        load()


def model_class(name: str, libraries: Iterable[str] = ("diffusers", "transformers")) -> type:
    """The class ``name`` from the first of ``libraries`` that has it (AttributeError when
    none does). Resolved under the lock, so later ``from diffusers import name`` reads an
    attribute that is already set."""
    found = _classes.get(name)
    if found is not None:
        return found
    with _LOCK:
        load()
        import importlib

        for library in libraries:
            module = importlib.import_module(library)
            try:
                found = getattr(module, name)
            except (AttributeError, ImportError, RuntimeError):
                continue
            _classes[name] = found
            return found
    raise AttributeError(f"no class {name!r} in {', '.join(libraries)}")


def locked():
    """The lock itself, for a caller that imports a family's own modules under it."""
    return _LOCK
