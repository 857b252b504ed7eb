"""How a full checkpoint's tensors are named in another tool's single file: the contract's
``Family.full_checkpoint_names`` returns ``{output key: Named}`` (``backend.models.
full_export`` writes it).

A ``Named`` tensor is made of ``Piece``s of the checkpoint's own tensors (diffusers' keys),
stacked along their first dimension in order: a rename is one whole piece, a fused layer
(ComfyUI's ``qkv``) the parts one after the other, a swap of halves (the original FLUX
models' ``shift, scale`` against diffusers' ``scale, shift``) two row ranges of one tensor;
``shape`` reshapes the result (same elements, e.g. a table of six vectors stored flat). Rows
are contiguous in a safetensors file, so every output tensor is a run of byte ranges of
the source: nothing is computed, every weight round-trips bit-exactly.

A source key that no ``Named`` uses is a tensor the format has no name for:
``full_export`` refuses the export and names it, rather than writing a file without it.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Callable, Mapping


@dataclass(frozen=True)
class Piece:
    """Rows ``rows`` = [start, stop) of the checkpoint's tensor ``key`` (None: all of it)."""
    key: str
    rows: tuple[int, int] | None = None


@dataclass(frozen=True)
class Named:
    """An output tensor: its pieces stacked along the first dimension, then reshaped to
    ``shape`` when given."""
    pieces: tuple[Piece, ...]
    shape: tuple[int, ...] | None = None


Names = dict[str, Named]


def renamed(shapes: Mapping[str, tuple[int, ...]], rename: Callable[[str], str | None]
            ) -> Names:
    """Each key renamed whole by ``rename`` (None: no name for it, left out)."""
    out: Names = {}
    for key in shapes:
        new = rename(key)
        if new is not None:
            out[new] = Named((Piece(key),))
    return out


def by_patterns(patterns: tuple[str, ...]) -> Callable[[str], str | None]:
    """A rename that keeps a key that fully matches one of ``patterns`` (regular
    expressions) as it is: a tool whose model has the diffusers names."""
    compiled = re.compile("|".join(f"(?:{p})" for p in patterns))
    return lambda key: key if compiled.fullmatch(key) else None


def fuse(shapes: Mapping[str, tuple[int, ...]], out: Names, fused: str,
         parts: tuple[str, ...]) -> None:
    """Add ``fused`` = the ``parts`` stacked in order, when all of them are there."""
    if all(p in shapes for p in parts):
        out[fused] = Named(tuple(Piece(p) for p in parts))


def swapped_halves(key: str, shape: tuple[int, ...]) -> Named:
    """``key`` with the two halves of its first dimension swapped."""
    half = shape[0] // 2
    return Named((Piece(key, (half, shape[0])), Piece(key, (0, half))))


def keyed(suffixes: Mapping[str, str], prefix_from: str, prefix_to: str,
          shapes: Mapping[str, tuple[int, ...]], out: Names) -> None:
    """``prefix_from + s`` -> ``prefix_to + suffixes[s]`` for each suffix present."""
    for src, dst in suffixes.items():
        if prefix_from + src in shapes:
            out[prefix_to + dst] = Named((Piece(prefix_from + src),))


def block_indices(shapes: Mapping[str, tuple[int, ...]], prefix: str) -> list[int]:
    """The block numbers N of keys ``<prefix>.N.…``, sorted."""
    pat = re.compile(rf"^{re.escape(prefix)}\.(\d+)\.")
    return sorted({int(m[1]) for k in shapes if (m := pat.match(k))})
