"""Extract a LoRA from a full fine-tune: the change of each Linear weight, by truncated SVD.

For every Linear layer of the trained component (the family's module map,
``Family.lora_module_map``), the change ``D = W_tuned - W_base`` (float32, on ``--device``,
one matrix at a time) is factored by its top ``r`` singular values as
``lora_B = U_r·√S_r`` [out, r] and ``lora_A = √S_r·V_rᵀ`` [r, in]: ``B·A`` is D's best
rank-r approximation, and the LoRA applies at scale 1 (alpha = rank).

- ``--rank R`` keeps R singular values per module (at most min(out, in));
  ``--energy f`` keeps per module the fewest whose squares hold the fraction f of
  ``||D||²`` (the change's "energy"). The log says per module the rank kept and the share of
  its energy kept, and sums up the whole model.
- The file has one rank, the largest kept (a module that kept fewer has zero rows in A and
  zero columns in B, which change nothing), so it is a ZeroLoRA LoRA like a trained one
  (``backend.models.lora.save_lora``: keys, metadata, alpha = rank) that every loader,
  the sample stage and the exports read as they read a trained LoRA.
- Tensors that changed but are no Linear weight (biases, norms, modulation tables,
  embeddings, convolutions): ``--other diff`` keeps their full difference, ``--other drop``
  leaves them out with a warning that says their share of the whole change (squared norm).
  ComfyUI's format carries them in the LoRA file as ``<module>.diff`` (weights and other
  parameters) and ``<module>.diff_b`` (biases); the reference and diffusers formats cannot
  (their loaders read LoRA keys only), so they go beside the LoRA as
  ``<out stem>.diff.safetensors``, keyed by the model's own parameter names
  (``base + diff`` is the tuned tensor), and the log says so.
- Tensors that did not change are skipped.

Weights are read key by key from the folders' safetensors files (one file or shards with an
index); nothing is unpickled. ``--format diffusers | comfyui`` writes the LoRA through
``backend.models.export`` (its key names, its checks against the module map). The
metadata adds ``extract_*`` entries: the rule (rank or energy), the energy kept, the ranks,
and the base and tuned folders.

Run:
    python -m backend.models.extract --base BASE/transformer --tuned RUN/transformer \\
        --out lora.safetensors --rank 64 [--device cuda] [--format comfyui]
    python -m backend.models.extract --base ... --tuned ... --out lora.safetensors --energy 0.9
Tiny CPU run (a model against itself with its weights changed shows the full path):
    python -m backend.families.tiny /tmp/tiny
    python -m backend.models.extract --base /tmp/tiny/transformer --tuned TUNED \\
        --out /tmp/x.safetensors --rank 4
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from backend.config.errors import field_problem
from backend.core import exits, writegate
from backend.core.diskspace import writing
from backend.core.messages import Msg
from backend.families import default_family, family_names, get_family, recognise
from backend.families.common import weight_files
from backend.models.lora import save_lora

FORMATS = ("reference", "diffusers", "comfyui")
OTHER = ("diff", "drop")
DEVICES = ("cpu", "cuda")
# Full SVD below this size; a fixed rank well under it uses the randomised SVD
# (torch.svd_lowrank, 2·rank + 16 columns, 6 power iterations: within 0.1% of the best
# energy on a noisy 2048x1536 change; B·A is still a projection of D, so the energy figures
# stay exact for what is kept).
LOWRANK_MIN = 1024
OVERSAMPLE = 16
# config.json keys that say nothing about the architecture.
_CONFIG_NOISE = ("_diffusers_version", "_name_or_path", "_use_default_values",
                 "_commit_hash")
DIFF_SUFFIX = ".diff.safetensors"


class ExtractError(ValueError):
    """Every problem of an extraction's inputs, one per line, each naming its flag."""

    def __init__(self, problems: list[Any]):
        self.problems = list(problems)
        self.message = Msg("extract.refused", lines=self.problems)
        super().__init__(str(self.message))


@dataclass
class Module:
    """One Linear's result: the rank kept, the energy kept and the change's whole energy."""
    rank: int
    kept: float
    total: float

    @property
    def share(self) -> float:
        return self.kept / self.total if self.total > 0 else 1.0


@dataclass
class Extracted:
    path: Path
    rank: int  # the file's rank (the largest kept)
    modules: dict[str, Module]
    other: dict[str, float]  # changed non-Linear tensors: squared norm of their change
    unchanged: int
    carried: list[str]  # the other tensors written (ComfyUI file or the .diff file)
    diff_path: Path | None = None
    said: list[Msg] = field(default_factory=list)

    @property
    def linear_total(self) -> float:
        return sum(m.total for m in self.modules.values())

    @property
    def kept_share(self) -> float:
        total = self.linear_total
        return sum(m.kept for m in self.modules.values()) / total if total > 0 else 1.0

    @property
    def other_share(self) -> float:
        whole = self.linear_total + sum(self.other.values())
        return sum(self.other.values()) / whole if whole > 0 else 0.0


# ------------------------------------------------------------------------------------------
# Reading the two folders
# ------------------------------------------------------------------------------------------
class Weights:
    """The tensors of a model folder by key, read one at a time (``safe_open``)."""

    def __init__(self, folder: Path, stack: ExitStack):
        from safetensors import safe_open

        self.handles: dict[str, Any] = {}
        for file in weight_files(folder):
            f = stack.enter_context(safe_open(str(file), framework="pt", device="cpu"))
            for key in f.keys():
                self.handles[key] = f

    def shape(self, key: str) -> tuple[int, ...]:
        return tuple(self.handles[key].get_slice(key).get_shape())

    def get(self, key: str):
        return self.handles[key].get_tensor(key)


def _folder_problems(flag: str, folder: Path) -> list[Msg]:
    if not folder.is_dir():
        return [field_problem(flag, Msg("extract.not_folder", got=str(folder)))]
    problems = []
    if not (folder / "config.json").is_file():
        problems.append(field_problem(flag, Msg("extract.no_config", got=str(folder))))
    files = weight_files(folder)
    if not files:
        problems.append(field_problem(flag, Msg("extract.no_weights", got=str(folder))))
    missing = [f.name for f in files if not f.is_file()]
    if missing:
        problems.append(field_problem(flag, Msg("extract.shard_missing", got=missing)))
    return problems


def _config(folder: Path) -> dict[str, Any]:
    data = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    return {k: v for k, v in data.items() if k not in _CONFIG_NOISE}


def check(base: Path, tuned: Path, out: Path, rank: int | None, energy: float | None,
          device: str, fmt: str, other: str, family: str | None) -> list[Msg]:
    """Every problem of the inputs, each naming its flag (nothing is read but headers)."""
    problems: list[Msg] = []
    if (rank is None) == (energy is None):
        problems.append(field_problem("--rank/--energy", Msg("extract.rank_or_energy")))
    if rank is not None and rank < 1:
        problems.append(field_problem("--rank", Msg("extract.rank_low", got=rank)))
    if energy is not None and not 0 < energy <= 1:
        problems.append(field_problem("--energy", Msg("extract.energy_range", got=energy)))
    if fmt not in FORMATS:
        problems.append(field_problem("--format", Msg("extract.choice", got=fmt,
                                                      allowed=" | ".join(FORMATS))))
    if other not in OTHER:
        problems.append(field_problem("--other", Msg("extract.choice", got=other,
                                                     allowed=" | ".join(OTHER))))
    if family is not None and family not in family_names():
        problems.append(field_problem("--model_family", Msg(
            "extract.choice", got=family, allowed=" | ".join(family_names()))))
    if device not in DEVICES and not device.startswith("cuda:"):
        problems.append(field_problem("--device", Msg("extract.choice", got=device,
                                                      allowed=" | ".join(DEVICES))))
    elif device.startswith("cuda"):
        import torch

        if not torch.cuda.is_available():
            problems.append(field_problem("--device", Msg("extract.no_cuda", got=device)))
    if out.suffix != ".safetensors":
        problems.append(field_problem("--out", Msg("extract.out_suffix", got=str(out))))
    elif out.is_dir():
        problems.append(field_problem("--out", Msg("extract.out_folder", got=str(out))))
    folders = _folder_problems("--base", base) + _folder_problems("--tuned", tuned)
    problems += folders
    if folders:
        return problems
    a, b = _config(base), _config(tuned)
    if a != b:
        keys = sorted(k for k in set(a) | set(b) if a.get(k) != b.get(k))
        problems.append(field_problem("--tuned", Msg("extract.config_differs", keys=keys)))
        return problems
    with ExitStack() as stack:
        wb, wt = Weights(base, stack), Weights(tuned, stack)
        only_base = sorted(set(wb.handles) - set(wt.handles))
        only_tuned = sorted(set(wt.handles) - set(wb.handles))
        if only_base or only_tuned:
            problems.append(field_problem("--tuned", Msg(
                "extract.keys_differ", missing=only_base[:5] or "-",
                extra=only_tuned[:5] or "-")))
        shapes = [f"{k} {wb.shape(k)} / {wt.shape(k)}"
                  for k in sorted(set(wb.handles) & set(wt.handles))
                  if wb.shape(k) != wt.shape(k)]
        if shapes:
            problems.append(field_problem("--tuned", Msg("extract.shapes_differ",
                                                         tensors=shapes[:5])))
    return problems


# ------------------------------------------------------------------------------------------
# The factorisation
# ------------------------------------------------------------------------------------------
def factor(delta, rank: int | None = None, energy: float | None = None):
    """(lora_A [r, in], lora_B [out, r], r, kept energy, whole energy) of one change (float32,
    on its device): the top singular values, a fixed ``rank`` (capped) or the fewest that
    hold ``energy`` of ``||delta||²``."""
    import torch

    smallest = min(delta.shape)
    total = float(delta.pow(2).sum(dtype=torch.float64))
    if energy is None and rank < smallest // 4 and smallest > LOWRANK_MIN:
        u, s, v = torch.svd_lowrank(delta, q=min(2 * rank + OVERSAMPLE, smallest), niter=6)
        vh = v.T
    else:
        u, s, vh = torch.linalg.svd(delta, full_matrices=False)
    s2 = s.double().pow(2)
    if energy is not None:
        share = s2.cumsum(0) / total
        r = min(int((share < energy).sum()) + 1, s.numel())
    else:
        r = min(rank, s.numel())
    root = s[:r].sqrt()
    lora_b = u[:, :r] * root
    lora_a = root[:, None] * vh[:r]
    return lora_a, lora_b, r, float(s2[:r].sum()), total


def _padded(a, b, rank: int):
    """A and B with zero rows / columns up to ``rank`` (B·A unchanged)."""
    import torch

    extra = rank - a.shape[0]
    if extra == 0:
        return a, b
    return (torch.cat([a, a.new_zeros(extra, a.shape[1])]),
            torch.cat([b, b.new_zeros(b.shape[0], extra)], dim=1))


def _pct(x: float) -> str:
    return f"{100 * x:.2f}%"


# ------------------------------------------------------------------------------------------
# Extraction
# ------------------------------------------------------------------------------------------
def extract_lora(base: str | Path, tuned: str | Path, out: str | Path, *,
                 rank: int | None = None, energy: float | None = None, device: str = "cpu",
                 fmt: str = "reference", model_family: str | None = None,
                 other: str = "diff", log: Callable[[Any], None] = print) -> Extracted:
    """Write the LoRA of ``tuned - base`` (two transformer folders) to ``out``; see the
    module docstring. Raises ExtractError, naming the flags, before any work."""
    import torch

    base, tuned, out = Path(base), Path(tuned), Path(out)
    problems = check(base, tuned, out, rank, energy, device, fmt, other, model_family)
    if problems:
        raise ExtractError(problems)
    said: list[Msg] = []

    def say(m: Msg) -> None:
        said.append(m)
        log(m)

    family = model_family
    if family is None:
        found = recognise(str(base))
        family = found[0] if found else default_family()
        how = Msg("extract.family_found") if found else Msg("extract.family_default")
        say(Msg("extract.family", family=family, how=how))
    adapter = get_family(family)
    linear = adapter.lora_module_map(_config(base))
    weight_of = {f"{m}.weight": m for m in linear}

    factors: dict[str, tuple[Any, Any]] = {}
    modules: dict[str, Module] = {}
    other_sq: dict[str, float] = {}
    diffs: dict[str, Any] = {}
    unchanged = 0
    with ExitStack() as stack, torch.no_grad():
        wb, wt = Weights(base, stack), Weights(tuned, stack)
        for key in sorted(wb.handles):
            b, t = wb.get(key), wt.get(key)
            if torch.equal(b, t):
                unchanged += 1
                continue
            if key in weight_of and b.ndim == 2:
                delta = t.to(device, torch.float32) - b.to(device, torch.float32)
                del b, t
                a_, b_, r, kept, total = factor(delta, rank, energy)
                del delta
                module = weight_of[key]
                factors[module] = (a_.cpu(), b_.cpu())
                modules[module] = Module(r, kept, total)
                say(Msg("extract.module", module=module, rank=r,
                        kept=_pct(modules[module].share)))
                continue
            delta = t.float() - b.float()
            other_sq[key] = float(delta.pow(2).sum(dtype=torch.float64))
            if other == "diff":
                diffs[key] = delta
    if not modules and not other_sq:
        raise ExtractError([field_problem("--tuned", Msg("extract.nothing_changed"))])

    file_rank = max((m.rank for m in modules.values()), default=0)
    result = Extracted(out, file_rank, modules, other_sq, unchanged, [], said=said)
    if not modules:
        raise ExtractError([field_problem("--tuned", Msg(
            "extract.no_linear_change", n=len(other_sq)))])
    ranks = [m.rank for m in modules.values()]
    say(Msg("extract.summary", n=len(modules), rank=file_rank, low=min(ranks), high=max(ranks),
            kept=_pct(result.kept_share), others=len(other_sq),
            other_share=_pct(result.other_share), unchanged=unchanged))
    if other_sq and other == "drop":
        say(Msg("extract.other_dropped", n=len(other_sq), share=_pct(result.other_share)))

    from backend.models.export import build_state_dict  # torch at its top: loaded here

    padded = {m: (*_padded(a, b, file_rank), None) for m, (a, b) in sorted(factors.items())}
    tensors = build_state_dict(padded, "reference")[0]
    meta = {"extract_rule": f"rank={rank}" if rank is not None else f"energy={energy}",
            "extract_energy_kept": f"{result.kept_share:.6f}",
            "extract_rank_min": str(min(ranks)), "extract_rank_max": str(max(ranks)),
            "extract_other": other, "extract_other_share": f"{result.other_share:.6f}",
            "extract_base": str(base.resolve()), "extract_tuned": str(tuned.resolve())}
    if energy is not None:
        meta["extract_energy"] = str(energy)
    targets = sorted(modules)
    if fmt == "reference":
        save_lora(out, tensors, rank=file_rank, target_modules=targets, model_family=family,
                  extra=meta)
    else:
        _write_export(out, tensors, fmt, base, family, file_rank, targets, meta,
                      diffs if fmt == "comfyui" else {}, result, say)
    if diffs and fmt != "comfyui":
        result.diff_path = _write_diffs(out, diffs, family, meta)
        result.carried = sorted(diffs)
        say(Msg("extract.other_beside", fmt=fmt, n=len(diffs), share=_pct(result.other_share),
                path=str(result.diff_path)))
    say(Msg("extract.written", path=str(out)))
    return result


def _write_export(out: Path, tensors: dict, fmt: str, base: Path, family: str, rank: int,
                  targets: list[str], meta: dict, diffs: dict, result: Extracted,
                  say: Callable[[Msg], None]) -> None:
    """The LoRA as ``fmt`` through ``backend.models.export`` (checked against the base's
    module map), with ComfyUI's ``.diff`` / ``.diff_b`` keys added for ``diffs``."""
    from safetensors.torch import save

    from backend.models.export import export_lora, family_prefixes, load_lora_file

    out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=out.parent, prefix=".extract-") as tmp:
        src = Path(tmp) / out.name
        save_lora(src, tensors, rank=rank, target_modules=targets, model_family=family,
                  extra=meta)
        exported = export_lora(src, fmt, out_dir=tmp, transformer_config=base, family=family)
        state, file_meta = load_lora_file(exported)
    prefix = family_prefixes(family)["comfyui"]
    rename = get_family(family).export_module_name
    unnamed = []
    for key, delta in sorted(diffs.items()):
        module, suffix = (key[:-len(".bias")], ".diff_b") if key.endswith(".bias") else \
            (key[:-len(".weight")], ".diff") if key.endswith(".weight") else (key, ".diff")
        try:
            name = rename(module, fmt)
        except KeyError:  # a family whose ComfyUI names cover its LoRA modules only
            unnamed.append(key)
            continue
        state[prefix + name + suffix] = delta.contiguous()
        result.carried.append(key)
    if unnamed:
        share = sum(result.other[k] for k in unnamed) / (
            result.linear_total + sum(result.other.values()))
        say(Msg("extract.other_unnamed", n=len(unnamed), share=_pct(share),
                tensors=unnamed[:5]))
    file_meta["zerolora_source"] = str(result.path.name)
    data = save(state, metadata=file_meta)
    with writing(out, len(data)):
        writegate.atomic_write(out, data)


def diff_path(out: str | Path) -> Path:
    """Where the other tensors' differences go beside a reference or diffusers LoRA."""
    out = Path(out)
    return out.with_name(out.name[: -len(".safetensors")] + DIFF_SUFFIX)


def _write_diffs(out: Path, diffs: dict, family: str, meta: dict) -> Path:
    from safetensors.torch import save

    path = diff_path(out)
    data = save({k: v.contiguous() for k, v in diffs.items()},
                metadata={"format": "zerolora-diff", "model_family": family, **meta})
    with writing(path, len(data)):
        writegate.atomic_write(path, data)
    return path


def build_parser(prog: str = "python -m backend.models.extract") -> argparse.ArgumentParser:
    """The command line (the extract stage adds its own flags to it)."""
    parser = argparse.ArgumentParser(prog=prog, description=__doc__.split("\n")[0])
    parser.add_argument("--base", required=True, help="the base model's transformer folder")
    parser.add_argument("--tuned", required=True,
                        help="the fine-tuned transformer folder (same architecture)")
    parser.add_argument("--out", required=True, help="the LoRA file to write (.safetensors)")
    parser.add_argument("--rank", type=int, default=None,
                        help="singular values kept per module (at most min(out, in))")
    parser.add_argument("--energy", type=float, default=None,
                        help="per module, the fewest singular values that keep this fraction "
                             "of the change's squared norm, in (0, 1]")
    parser.add_argument("--device", default="cpu", help="cpu | cuda (the SVDs run there)")
    parser.add_argument("--format", dest="fmt", default="reference", choices=FORMATS,
                        help="key format of the file (default: %(default)s, a ZeroLoRA LoRA)")
    parser.add_argument("--model_family", default=None, choices=family_names(),
                        help="model family (default: recognised from --base's config)")
    parser.add_argument("--other", default="diff", choices=OTHER,
                        help="changed tensors that are no Linear weight: keep their full "
                             "difference (diff) or leave them out (drop)")
    return parser


def run(args: argparse.Namespace) -> Extracted:
    """``extract_lora`` with a parsed command line's values, logging to stdout."""
    return extract_lora(args.base, args.tuned, args.out, rank=args.rank, energy=args.energy,
                        device=args.device, fmt=args.fmt, model_family=args.model_family,
                        other=args.other, log=lambda m: print(m, flush=True))


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        run(args)
    except ExtractError as e:
        print(e, file=sys.stderr)
        return exits.REFUSED
    return exits.OK


if __name__ == "__main__":
    sys.exit(main())
