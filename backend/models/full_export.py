"""A full checkpoint (``trainable_models``: a diffusers-layout folder of safetensors shards,
``backend/models/full.py``) as one ``.safetensors`` file another tool loads.

Formats:

- ``comfyui``  the trained component as ComfyUI's diffusion-model loader (UNETLoader, "Load
  Diffusion Model"; ``comfy/sd.py`` ``load_diffusion_model_state_dict``) reads it: the
  names of ComfyUI's own model for the family, fused where that model fuses (an
  attention's ``qkv``, an MLP's ``gate_up``), so no conversion on ComfyUI's side.
- ``reference`` the reference trainer's own full-training checkpoint: one
  ``step-N.safetensors`` / ``epoch-N.safetensors`` holding the trained model's state dict
  (DiffSynth-Studio ``ModelLogger.save_model``, the ``pipe.dit.`` prefix removed), under its
  model class's names.

The names per family are the family's (``Family.full_checkpoint_names``, a
``checkpoint.py`` in each family folder, which says which source each map is read from).
A tensor the family has no name for in the format is refused, naming the tensors, before
anything is written: an export never misses a weight silently.

Streaming: the shards' headers are read (the safetensors layout: an 8-byte little-endian
header length, a JSON header of dtype / shape / data offsets, then the raw bytes), the
output's header is built from them, and every output tensor is copied from its source byte
ranges in chunks of ``CHUNK`` bytes. A fused tensor is its parts' bytes one after the other
(rows are contiguous), so no tensor, fused or not, is ever held whole in memory, and every
weight is its source's bits. The free space is checked first; the file is written under a
temporary name beside its own and renamed into place (``writegate``), so a failed export
leaves nothing under the export's name.

Written to ``--out``, else ``<output_path>/export/``: ``<checkpoint>.comfyui.safetensors``,
or the reference's own name ``<checkpoint>.safetensors`` (``step-100.safetensors``).

Run:
    python -m backend.models.full_export runs/<id>/output/step-100 --format comfyui
    python -m backend.models.full_export CHECKPOINT --format reference [--out F] [--family NAME]
Tiny CPU run: a folder written by ``backend.models.full.save_component`` (the tests do this).
"""
from __future__ import annotations

import argparse
import json
import math
import shutil
import struct
import sys
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping

from backend.core import bounded, exits, rundir, writegate
from backend.core.diskspace import size_text, writing
from backend.core.messages import Msg
from backend.families import family_names, get_family, recognise
from backend.families.checkpoint_names import Named
from backend.families.common import weight_files
from backend.models.full import checkpoint_info

FORMATS = ("comfyui", "reference")
CHUNK = 64 * 2**20
# Room left on the disk beyond the file itself.
DISK_MARGIN = 64 * 2**20
# Bytes per element of each safetensors dtype.
ITEMSIZE = {"BOOL": 1, "U8": 1, "I8": 1, "F8_E5M2": 1, "F8_E4M3": 1, "F8_E8M0": 1, "I16": 2,
            "U16": 2, "F16": 2, "BF16": 2, "I32": 4, "U32": 4, "F32": 4, "C64": 8, "F64": 8,
            "I64": 8, "U64": 8}
# safetensors' own file order: dtypes in this order, last first, then names (its ``Dtype``
# enum; ``serialize`` sorts by dtype descending, then name).
DTYPE_ORDER = ("BOOL", "F4", "F6_E2M3", "F6_E3M2", "U8", "I8", "F8_E5M2", "F8_E4M3",
               "F8_E8M0", "I16", "U16", "F16", "BF16", "I32", "U32", "F32", "C64", "F64",
               "I64", "U64")
HEADER_LIMIT = 100 * 2**20


class FullExportError(ValueError):
    """Every problem of an export, one per line, each naming its flag."""

    def __init__(self, problems: list[Any]):
        self.problems = list(problems)
        self.message = Msg("fullexport.refused", lines=self.problems)
        super().__init__(self.message)


@dataclass(frozen=True)
class Source:
    """One tensor of a shard: where its bytes lie in the file (absolute offsets)."""
    file: Path
    dtype: str
    shape: tuple[int, ...]
    start: int
    end: int

    @property
    def row_bytes(self) -> int:
        return (self.end - self.start) // self.shape[0] if self.shape and self.shape[0] else 0


@dataclass(frozen=True)
class Entry:
    """One output tensor: its name, dtype, shape and the byte ranges it is copied from."""
    name: str
    dtype: str
    shape: tuple[int, ...]
    ranges: tuple[tuple[Path, int, int], ...]

    @property
    def nbytes(self) -> int:
        return sum(e - s for _, s, e in self.ranges)


# ------------------------------------------------------------------------------------------
# Reading the shards' headers
# ------------------------------------------------------------------------------------------
def read_header(path: Path) -> tuple[dict[str, Source], dict[str, str]]:
    """The tensors of one safetensors file (nothing but its header is read) and its
    metadata."""
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        if n > HEADER_LIMIT:
            raise ValueError(f"header of {n} bytes")
        header = bounded.load_json(f.read(n).decode("utf-8"), path.name)
    base = 8 + n
    meta = header.pop("__metadata__", None) or {}
    out = {k: Source(path, v["dtype"], tuple(v["shape"]), base + v["data_offsets"][0],
                     base + v["data_offsets"][1]) for k, v in header.items()}
    return out, meta


def checkpoint_tensors(folder: Path) -> dict[str, Source]:
    """Every tensor of a checkpoint folder by key. Raises FullExportError naming the
    checkpoint when it is no full checkpoint."""
    if not folder.is_dir() or not (folder / "config.json").is_file():
        raise FullExportError([Msg("fullexport.not_folder", got=str(folder))])
    files = weight_files(folder)
    if not files:
        raise FullExportError([Msg("fullexport.no_weights", got=str(folder))])
    missing = [f.name for f in files if not f.is_file()]
    if missing:
        raise FullExportError([Msg("fullexport.shard_missing", got=missing)])
    out: dict[str, Source] = {}
    for file in files:
        try:
            out.update(read_header(file)[0])
        except (OSError, ValueError, KeyError, TypeError, struct.error) as e:
            raise FullExportError([Msg("fullexport.bad_header", file=file.name,
                                       why=str(e))]) from e
    return out


# ------------------------------------------------------------------------------------------
# The plan: every output tensor from its sources' bytes
# ------------------------------------------------------------------------------------------
def plan(sources: Mapping[str, Source], names: Mapping[str, Named], family: str,
         fmt: str) -> list[Entry]:
    """The output tensors of ``names`` over ``sources``, in safetensors' own file order.
    Raises FullExportError when a source tensor has no name, or rows of one are taken other
    than exactly once."""
    taken: dict[str, list[tuple[int, int]]] = {}
    entries: list[Entry] = []
    for name, named in names.items():
        ranges, rows, dtype, inner = [], 0, None, None
        for piece in named.pieces:
            src = sources[piece.key]
            lo, hi = piece.rows if piece.rows is not None else (0, src.shape[0] if src.shape else 1)
            taken.setdefault(piece.key, []).append((lo, hi))
            if not src.shape:  # a scalar: its bytes as they are
                ranges.append((src.file, src.start, src.end))
            else:
                ranges.append((src.file, src.start + lo * src.row_bytes,
                               src.start + hi * src.row_bytes))
            rows += hi - lo
            dtype = dtype or src.dtype
            inner = src.shape[1:] if inner is None else inner
            if src.dtype != dtype or src.shape[1:] != inner:
                raise FullExportError([Msg("fullexport.bad_map", family=family, fmt=fmt,
                                           key=piece.key, got=f"{lo}:{hi}",
                                           rows=src.shape[0] if src.shape else 1)])
        first = sources[named.pieces[0].key]
        shape = ((rows, *inner) if first.shape else ()) if named.shape is None else named.shape
        entry = Entry(name, dtype, tuple(shape), tuple(ranges))
        if math.prod(entry.shape) * ITEMSIZE.get(dtype, 1) != entry.nbytes:
            raise FullExportError([Msg("fullexport.bad_map", family=family, fmt=fmt,
                                       key=named.pieces[0].key, got=str(entry.shape),
                                       rows=first.shape[0] if first.shape else 1)])
        entries.append(entry)
    problems: list[Msg] = []
    for key, spans in sorted(taken.items()):
        total = sources[key].shape[0] if sources[key].shape else 1
        spans.sort()
        at = 0
        for lo, hi in spans:
            if lo != at:
                break
            at = hi
        if at != total or sum(hi - lo for lo, hi in spans) != total:
            problems.append(Msg("fullexport.bad_map", family=family, fmt=fmt, key=key,
                                got=", ".join(f"{lo}:{hi}" for lo, hi in spans), rows=total))
    unnamed = sorted(set(sources) - set(taken))
    if unnamed:
        problems.append(Msg("fullexport.unnamed", n=len(unnamed), fmt=fmt, family=family,
                            tensors=unnamed[:12] + ([f"... +{len(unnamed) - 12}"]
                                                    if len(unnamed) > 12 else [])))
    if problems:
        raise FullExportError(problems)
    return sorted(entries, key=_file_order)


def _file_order(entry: Entry) -> tuple[int, str]:
    rank = DTYPE_ORDER.index(entry.dtype) if entry.dtype in DTYPE_ORDER else -1
    return (-rank, entry.name)


# ------------------------------------------------------------------------------------------
# The streaming writer
# ------------------------------------------------------------------------------------------
def header_bytes(entries: list[Entry], metadata: Mapping[str, str] | None) -> bytes:
    """The 8-byte length and the JSON header (padded with spaces to a multiple of 8, as
    safetensors writes it) of ``entries`` laid out one after the other in order."""
    header: dict[str, Any] = {}
    if metadata:
        header["__metadata__"] = {str(k): str(v) for k, v in metadata.items()}
    at = 0
    for e in entries:
        header[e.name] = {"dtype": e.dtype, "shape": list(e.shape),
                          "data_offsets": [at, at + e.nbytes]}
        at += e.nbytes
    text = json.dumps(header, separators=(",", ":")).encode("utf-8")
    text += b" " * ((8 - len(text) % 8) % 8)
    return struct.pack("<Q", len(text)) + text


def write_streaming(out: Path, entries: list[Entry], metadata: Mapping[str, str] | None,
                    chunk: int = CHUNK) -> int:
    """Write ``entries`` to ``out`` (atomically), copying each one's byte ranges in chunks
    of ``chunk`` bytes; return the file's size."""
    head = header_bytes(entries, metadata)
    size = len(head) + sum(e.nbytes for e in entries)
    with writing(out, size), ExitStack() as stack, \
            writegate.UNRESTRICTED.replacing(out, "file", parents=True) as f:
        handles: dict[Path, Any] = {}
        f.write(head)
        for entry in entries:
            for file, start, end in entry.ranges:
                if file not in handles:
                    handles[file] = stack.enter_context(open(file, "rb"))
                src = handles[file]
                src.seek(start)
                left = end - start
                while left:
                    block = src.read(min(chunk, left))
                    if not block:
                        raise OSError(f"{file}: ends before its header says")
                    f.write(block)
                    left -= len(block)
    return size


def save_tensors_streaming(tensors: Mapping[str, Any], out: Path,
                           metadata: Mapping[str, str] | None = None) -> int:
    """``tensors`` (torch, on the CPU) written through the streaming writer, from a
    temporary safetensors file of each: what ``safetensors.torch.save_file`` writes for
    them (tests compare the two)."""
    import tempfile

    from safetensors.torch import save_file

    with tempfile.TemporaryDirectory() as tmp:
        sources: dict[str, Source] = {}
        for i, (name, value) in enumerate(tensors.items()):
            path = Path(tmp) / f"{i}.safetensors"
            save_file({"t": value.contiguous()}, str(path))
            sources[name] = read_header(path)[0]["t"]
        entries = sorted((Entry(k, s.dtype, s.shape, ((s.file, s.start, s.end),))
                          for k, s in sources.items()), key=_file_order)
        return write_streaming(out, entries, metadata)


# ------------------------------------------------------------------------------------------
# The export
# ------------------------------------------------------------------------------------------
def export_path(checkpoint: Path, fmt: str) -> Path:
    """``<output_path>/export/<name>.comfyui.safetensors`` or the reference's own
    ``<name>.safetensors`` (``step-100.safetensors``)."""
    stem = checkpoint.name if fmt == "reference" else f"{checkpoint.name}.{fmt}"
    return checkpoint.parent / rundir.EXPORT / f"{stem}.safetensors"


def _family_of(checkpoint: Path, family: str | None) -> str | None:
    if family is not None:
        return family if family in family_names() else None
    named = checkpoint_info(checkpoint).get("model_family")
    if named in family_names():
        return named
    found = recognise(str(checkpoint))
    return found[0] if found else None


def export_full(checkpoint: str | Path, fmt: str, out: str | Path | None = None, *,
                family: str | None = None, log: Callable[[Any], None] = print,
                chunk: int = CHUNK) -> Path:
    """Write the full checkpoint folder ``checkpoint`` as one ``fmt`` file; return its
    path. Raises FullExportError, naming the flags, before anything is written."""
    checkpoint = Path(checkpoint)
    problems: list[Msg] = []
    if fmt not in FORMATS:
        problems.append(Msg("fullexport.format", got=fmt, allowed=" | ".join(FORMATS)))
    target = Path(out) if out is not None else export_path(checkpoint, fmt)
    if target.suffix != ".safetensors":
        problems.append(Msg("fullexport.out_suffix", got=str(target)))
    elif checkpoint.resolve() in (target.resolve(), *target.resolve().parents):
        problems.append(Msg("fullexport.out_is_source", got=str(target)))
    name = _family_of(checkpoint, family)
    if name is None:
        problems.append(Msg("fullexport.family", got=family or "-",
                            allowed=" | ".join(family_names())))
    if problems:
        raise FullExportError(problems)
    sources = checkpoint_tensors(checkpoint)
    adapter = get_family(name)
    names = adapter.full_checkpoint_names({k: s.shape for k, s in sources.items()}, fmt)
    if names is None:
        known = [f for f in FORMATS
                 if adapter.full_checkpoint_names({k: s.shape for k, s in sources.items()},
                                                  f) is not None]
        raise FullExportError([Msg("fullexport.no_names", family=name, fmt=fmt,
                                   allowed=" | ".join(known) or "-")])
    entries = plan(sources, names, name, fmt)
    info = checkpoint_info(checkpoint)
    metadata = {"format": "pt", "zerolora_format": fmt, "zerolora_source": checkpoint.name,
                "model_family": name}
    if "step" in info:
        metadata["step"] = str(info["step"])
    needed = len(header_bytes(entries, metadata)) + sum(e.nbytes for e in entries)
    folder = target.parent
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent
    free = shutil.disk_usage(folder).free
    if free < needed + DISK_MARGIN:
        raise FullExportError([Msg("fullexport.no_space", free=size_text(free),
                                   folder=str(folder), needed=size_text(needed))])
    size = write_streaming(target, entries, metadata, chunk)
    log(Msg("fullexport.written", path=str(target), n=len(entries), size=size_text(size),
            fmt=fmt))
    return target


def build_parser(prog: str = "python -m backend.models.full_export") -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=prog, description=__doc__.split("\n")[0])
    parser.add_argument("checkpoint", help="a full checkpoint folder (output/step-N)")
    parser.add_argument("--format", dest="fmt", required=True, choices=FORMATS,
                        help="comfyui: the file ComfyUI's Load Diffusion Model reads; "
                             "reference: the reference trainer's step-N.safetensors")
    parser.add_argument("--out", default=None,
                        help="the file to write (default: export/ beside the checkpoint)")
    parser.add_argument("--family", default=None, choices=family_names(),
                        help="model family (default: the one the checkpoint names)")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        out = export_full(args.checkpoint, args.fmt, args.out, family=args.family,
                          log=lambda m: print(m, flush=True))
    except FullExportError as e:
        print(e, file=sys.stderr)
        return exits.REFUSED
    print(out)
    return exits.OK


if __name__ == "__main__":
    sys.exit(main())
