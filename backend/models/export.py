"""LoRA exports: one trained LoRA in the key format another tool loads.

Formats (one safetensors file each; tensors unchanged unless noted):

- ``reference``  what training saves: ``<module>.lora_A.default.weight`` /
  ``<module>.lora_B.default.weight`` (peft adapter name kept, no prefix, no alpha tensor;
  alpha = rank).
- ``diffusers``  ``transformer.<module>.lora_A.weight`` / ``.lora_B.weight``: loads with
  the family's pipeline's ``load_lora_weights(path)`` (no conversion step inside diffusers).
- ``comfyui``    ``diffusion_model.<module>.lora_down.weight`` (= lora_A),
  ``.lora_up.weight`` (= lora_B) and ``.alpha`` (a scalar, = rank). ComfyUI's LoRA loader
  maps ``diffusion_model.<module>`` to the model weight ``diffusion_model.<module>.weight``
  for every model (its generic key map); ``lora_up``/``lora_down`` + ``alpha`` is the pair
  every ComfyUI version reads, with the scale alpha / rank. diffusers also reads this file
  (it strips ``diffusion_model.``).

The prefixes are the family's (``Family.export_prefixes``: a family whose loaders want
other names says so there, e.g. one whose ComfyUI loader maps diffusers names only with
``transformer.``). ``<module>`` is a module name of the family's trained
component (diffusers' class), e.g. ``transformer_blocks.0.attn.to_q``. Any of the three
formats is accepted as the source.
A LoRA whose alpha differs from its rank (``lora_alpha``) has the scale alpha / rank folded
into lora_B for the formats that carry no alpha tensor.

Variants (``lora_type``):

- DoRA adds one magnitude per output feature: ``<module>.lora_magnitude_vector.default.weight``
  (reference, peft's parameter), ``transformer.<module>.lora_magnitude_vector`` (diffusers:
  its loader turns peft's ``use_dora`` on when it sees the key) and
  ``diffusion_model.<module>.dora_scale`` [out, 1] (ComfyUI). ComfyUI divides an [out, 1]
  scale by the row norms of the *base* weight where peft divides by those of the adapted
  weight, so the ComfyUI export writes m · ||W|| / ||W + s·B·A|| per row and needs the base
  weights (the run's transformer, or ``--model``); its merge then equals peft's. A
  ComfyUI DoRA file is not read back as a source.
- LoKr (peft's ``LoKrConfig``, LyCORIS's names): ``<module>.lokr_w1[.default]``,
  ``lokr_w2`` or ``lokr_w2_a`` / ``lokr_w2_b`` (and ``w1_a``/``w1_b``, ``t2``). ComfyUI
  reads the same names under ``diffusion_model.`` with ``.alpha``; it scales by alpha / r
  only when a factor is decomposed (peft always does), so a LoKr without decomposed factors
  has its scale folded into ``lokr_w1``. diffusers' loaders take LoRA keys only: a LoKr
  exports as reference or comfyui, and loads through peft (``backend.models.lora.load_lora``).

Every export is checked before it is written: each key must have the target format's
shape, and each module must be a Linear layer of the trained component with matching
in/out features. The module map comes from the component's config, built on the meta device
by the family (``Family.lora_module_map``; no weights): given with ``--model`` /
``transformer_config``, else found through the run's ``training_args.json`` beside the
checkpoint (its resolved transformer folder), else the family's published config (names
only; sizes are then not checked). The family is ``--family``, else the one the LoRA file's
metadata or the run names, else the default. safetensors metadata is
kept; ``zerolora_format``, ``zerolora_source`` and ``zerolora_verified_against`` are added,
and non-reference exports say ``format=pt`` (the training's own value moves to
``source_format``).

Exports go to ``<output_path>/export/`` (the ``export/`` folder of the run's output, never
among the checkpoints themselves, so a scan for ``step-N`` files never sees them), named
``<stem>.<format>.safetensors``; a source already in ``export/`` exports beside itself.

Run:
    python -m backend.models.export runs/<id>/output/step-100.safetensors --format diffusers
    python -m backend.models.export SRC --format comfyui [--out_dir DIR] [--model PIPELINE_OR_TRANSFORMER_DIR]
"""
from __future__ import annotations

import argparse
import json
import os
import re
import sys
from pathlib import Path
from typing import Any, Mapping

import torch
from safetensors import safe_open
from safetensors.torch import save

from backend.core import rundir, writegate
from backend.config.schema import FIELDS, RunConfig
from backend.families import default_family, family_names, get_family
from backend.families.base import Family
from backend.families.common import weight_files
from backend.models import full_export
from backend.models.hub import resolve_component_dirs

FORMATS = ("reference", "diffusers", "comfyui")
ADAPTER = "default"
_PREFIX = dict(Family.export_prefixes)
_SUFFIX = {
    "reference": (f".lora_A.{ADAPTER}.weight", f".lora_B.{ADAPTER}.weight", None),
    "diffusers": (".lora_A.weight", ".lora_B.weight", None),
    "comfyui": (".lora_down.weight", ".lora_up.weight", ".alpha"),
}
# Any accepted source key: optional prefix, module, A/B (optionally with a peft adapter name).
_KEY_RE = re.compile(r"^(?P<module>.+?)\.(?P<kind>lora_A|lora_B|lora_down|lora_up)"
                     r"(?:\.(?P<adapter>[A-Za-z0-9_\-]+))?\.weight$")
_ALPHA_RE = re.compile(r"^(?P<module>.+)\.alpha$")
# DoRA magnitudes (peft's, with or without the adapter name, or ComfyUI's dora_scale).
_MAG_RE = re.compile(r"^(?P<module>.+?)\.(?:(?P<peft>lora_magnitude_vector)"
                     r"(?:\.(?P<adapter>[A-Za-z0-9_\-]+))?(?:\.weight)?|(?P<comfy>dora_scale))$")
_MAG_SUFFIX = {"reference": f".lora_magnitude_vector.{ADAPTER}.weight",
               "diffusers": ".lora_magnitude_vector", "comfyui": ".dora_scale"}
# LoKr factors (peft's parameters carry the adapter name, ComfyUI's none).
LOKR_PARTS = ("lokr_w1", "lokr_w2", "lokr_w1_a", "lokr_w1_b", "lokr_w2_a", "lokr_w2_b",
              "lokr_t2")
_LOKR_RE = re.compile(r"^(?P<module>.+?)\.(?P<part>lokr_(?:w1_a|w1_b|w2_a|w2_b|w1|w2|t2))"
                      r"(?:\.(?P<adapter>[A-Za-z0-9_\-]+))?$")
_CHECKPOINT_EXT = ".safetensors"
# Metadata keys that state an alpha; rewritten when the scale is folded into lora_B.
_ALPHA_META_KEYS = ("alpha", "lora_alpha", "network_alpha", "ss_network_alpha")


class LoraFormatError(ValueError):
    """A LoRA file or an export that does not fit a format; lists every problem."""

    def __init__(self, problems: list[str], source: str | None = None):
        self.problems = list(problems)
        head = f"LoRA key problems{f' in {source}' if source else ''}:"
        shown = self.problems[:20]
        more = [f"  ... and {len(self.problems) - 20} more"] if len(self.problems) > 20 else []
        super().__init__("\n".join([head] + [f"  {p}" for p in shown] + more))


# ------------------------------------------------------------------------------------------
# Reading: any format -> {module: (A [r, in], B [out, r], alpha or None)}
# ------------------------------------------------------------------------------------------
def load_lora_file(path: str | os.PathLike) -> tuple[dict[str, torch.Tensor], dict[str, str]]:
    """Tensors and safetensors metadata of a LoRA file (safetensors only; never a pickle)."""
    path = Path(path)
    if path.suffix != _CHECKPOINT_EXT:
        raise LoraFormatError([f"{path.name}: not a .safetensors file (pickled checkpoints "
                               f"are not read)"])
    if not path.is_file():
        raise FileNotFoundError(f"LoRA file not found: {path}")
    with safe_open(str(path), framework="pt", device="cpu") as f:
        metadata = dict(f.metadata() or {})
        tensors = {k: f.get_tensor(k) for k in f.keys()}
    return tensors, metadata


def detect_format(keys) -> str:
    keys = list(keys)
    if keys and all(k.startswith("diffusion_model.") for k in keys):
        return "comfyui"
    if keys and all(k.startswith("transformer.") for k in keys):
        return "diffusers"
    return "reference"


def split_modules(state_dict: Mapping[str, torch.Tensor], metadata: Mapping[str, str] | None = None,
                  source: str | None = None) -> dict[str, tuple[torch.Tensor, torch.Tensor, float | None]]:
    """Group LoRA tensors by module, whatever the source format.

    alpha is None when the file states none (then alpha = rank, the reference convention).
    """
    problems: list[str] = []
    prefix = _PREFIX[detect_format(state_dict)]
    parts: dict[str, dict[str, Any]] = {}
    adapters: set[str] = set()
    for key, value in state_dict.items():
        name = key[len(prefix):]
        m = _KEY_RE.match(name)
        if m:
            kind = "A" if m["kind"] in ("lora_A", "lora_down") else "B"
            if m["adapter"]:
                adapters.add(m["adapter"])
            slot = parts.setdefault(m["module"], {})
            if kind in slot:
                problems.append(f"{key}: second lora_{kind} for module {m['module']}")
            slot[kind] = value
            continue
        m = _MAG_RE.match(name)
        if m:
            if m["comfy"]:
                problems.append(f"{key}: a ComfyUI DoRA scale is relative to the base weight "
                                f"and is not read back (allowed: the reference or diffusers "
                                f"export of the DoRA)")
                continue
            parts.setdefault(m["module"], {})["magnitude"] = value
            continue
        if _LOKR_RE.match(name):
            problems.append(f"{key}: a LoKr factor in a LoRA file (a LoKr file holds only "
                            f"lokr_ keys)")
            continue
        m = _ALPHA_RE.match(name)
        if m:
            parts.setdefault(m["module"], {})["alpha"] = float(value.float().item())
            continue
        problems.append(f"{key}: not a LoRA key (expected <module>.lora_A/lora_B"
                        f"[.<adapter>].weight, <module>.lora_down/lora_up.weight or "
                        f"<module>.alpha, with an optional transformer. / diffusion_model. "
                        f"prefix)")
    if len(adapters) > 1:
        problems.append(f"several peft adapters in one file (got {sorted(adapters)}; allowed one)")
    meta_alpha = _metadata_alpha(metadata or {})
    modules: dict[str, tuple[torch.Tensor, torch.Tensor, float | None]] = {}
    for module, slot in sorted(parts.items()):
        if "A" not in slot or "B" not in slot:
            missing = "lora_A/lora_down" if "A" not in slot else "lora_B/lora_up"
            problems.append(f"{module}: {missing} missing")
            continue
        a, b = slot["A"], slot["B"]
        if a.ndim != 2 or b.ndim != 2 or a.shape[0] != b.shape[1]:
            problems.append(f"{module}: lora_A {tuple(a.shape)} and lora_B {tuple(b.shape)} "
                            f"do not form a LoRA (expected [r, in] and [out, r])")
            continue
        alpha = slot.get("alpha", meta_alpha)
        if "magnitude" in slot:  # DoRA: [out] magnitudes as a fourth member
            mag = slot["magnitude"].reshape(-1)
            if mag.shape[0] != b.shape[0]:
                problems.append(f"{module}: DoRA magnitude {tuple(mag.shape)} does not match "
                                f"lora_B's {b.shape[0]} outputs")
                continue
            modules[module] = (a, b, alpha, mag)
        else:
            modules[module] = (a, b, alpha)
    if not modules and not problems:
        problems.append("no LoRA tensors in the file")
    if problems:
        raise LoraFormatError(problems, source)
    return modules


def _metadata_alpha(metadata: Mapping[str, str]) -> float | None:
    for key in ("lora_alpha", "alpha"):
        if key in metadata:
            try:
                return float(metadata[key])
            except ValueError:
                return None
    return None


# ------------------------------------------------------------------------------------------
# Writing: {module: (A, B, alpha)} -> a format's state dict
# ------------------------------------------------------------------------------------------
def _folded(a: torch.Tensor, b: torch.Tensor, alpha: float | None) -> tuple[torch.Tensor, bool]:
    """lora_B with alpha / rank folded in (unchanged when alpha is None or equals the rank)."""
    rank = a.shape[0]
    if alpha is None or alpha == rank:
        return b, False
    return (b.float() * (alpha / rank)).to(b.dtype), True


def family_prefixes(family: str | None = None) -> dict[str, str]:
    """Key prefix of the trained component per format, as the family's loaders want them."""
    return dict(get_family(family or default_family()).export_prefixes)


def _block_of(module: str, name: str) -> str | None:
    """``module``'s block prefix when it is ``name`` inside a block (or ``name`` itself)."""
    if module == name:
        return ""
    return module[: -len(name)] if module.endswith("." + name) else None


def fuse_modules(modules: Mapping[str, tuple], fused: Mapping[str, tuple[str, ...]]
                 ) -> dict[str, tuple]:
    """The LoRAs of layers a tool keeps fused (``Family.fused_modules``) as one LoRA on the
    fused layer: its down is the parts' downs stacked, its up block-diagonal (each part's
    rows, zero for a part that has no LoRA), each part's alpha / rank folded in, so
    ``up @ down`` is the parts' changes stacked exactly (alpha = rank: scale 1). A DoRA part
    keeps its own module."""
    out = dict(modules)
    for name, parts in fused.items():
        blocks = sorted({b for m in modules for p in parts
                         if (b := _block_of(m, p)) is not None})
        for block in blocks:
            got = [modules.get(block + p) for p in parts]
            present = [v for v in got if v is not None]
            if any(len(v) > 3 for v in present):
                continue
            rows = present[0][1].shape[0]  # the parts' outputs are of one size
            downs = [a for a, _, _ in present]
            rank = sum(a.shape[0] for a in downs)
            up = torch.zeros(rows * len(parts), rank, dtype=present[0][1].dtype)
            col = 0
            for i, v in enumerate(got):
                if v is None:
                    continue
                a, b, alpha = v
                r = a.shape[0]
                scale = (float(alpha) / r) if alpha is not None else 1.0
                up[i * rows:(i + 1) * rows, col:col + r] = b * scale
                col += r
                del out[block + parts[i]]
            out[block + name] = (torch.cat(downs, 0), up, float(rank))
    return out


def split_fused(modules: Mapping[str, tuple], fused: Mapping[str, tuple[str, ...]]
                ) -> dict[str, tuple]:
    """``fuse_modules``'s inverse for any LoRA on a fused layer: each part keeps the down
    and its own rows of the up (exact: the fused change's rows are the parts' changes)."""
    out = dict(modules)
    for name, parts in fused.items():
        for module in list(modules):
            block = _block_of(module, name)
            if block is None or len(modules[module]) > 3:
                continue
            a, b, alpha = out.pop(module)
            rows = b.shape[0] // len(parts)
            for i, p in enumerate(parts):
                out[block + p] = (a.clone(), b[i * rows:(i + 1) * rows].clone(), alpha)
    return out


def native_modules(modules: Mapping[str, tuple], family: str | None, source_format: str
                   ) -> dict[str, tuple]:
    """A LoRA read from ``source_format`` with the family's fused layers split back into
    the diffusers modules they stand for."""
    if family not in family_names():
        return dict(modules)
    return split_fused(modules, get_family(family).fused_modules.get(source_format, {}))


def build_state_dict(modules: Mapping[str, tuple[torch.Tensor, torch.Tensor, float | None]],
                     fmt: str, prefixes: Mapping[str, str] | None = None, rename=None
                     ) -> tuple[dict[str, torch.Tensor], bool]:
    """The state dict of ``fmt`` (key prefixes: ``prefixes``, default the contract's); also
    whether an alpha was folded into lora_B."""
    if fmt not in FORMATS:
        raise ValueError(f"format: unknown (got {fmt!r}; allowed {' | '.join(FORMATS)})")
    prefix = (prefixes or _PREFIX)[fmt]
    a_suffix, b_suffix, alpha_suffix = _SUFFIX[fmt]
    out: dict[str, torch.Tensor] = {}
    folded_any = False
    for module, (a, b, alpha, *dora) in modules.items():
        key = prefix + (rename(module, fmt) if rename is not None else module)
        if dora and fmt == "comfyui":
            raise ValueError("comfyui DoRA exports need the base weights: use dora_scales()")
        if dora:
            out[key + _MAG_SUFFIX[fmt]] = dora[0].contiguous()
        if alpha_suffix:
            out[key + a_suffix] = a.contiguous()
            out[key + b_suffix] = b.contiguous()
            out[key + alpha_suffix] = torch.tensor(float(alpha if alpha is not None else a.shape[0]))
        else:
            b2, folded = _folded(a, b, alpha)
            folded_any |= folded
            out[key + a_suffix] = a.contiguous()
            out[key + b_suffix] = b2.contiguous()
    return out, folded_any


def to_diffusers_state_dict(state_dict: Mapping[str, torch.Tensor],
                            metadata: Mapping[str, str] | None = None) -> dict[str, torch.Tensor]:
    """Any accepted LoRA state dict -> diffusers keys, in memory (for ``load_lora_weights``)."""
    return build_state_dict(split_modules(state_dict, metadata), "diffusers")[0]


def load_as_diffusers(path: str | os.PathLike) -> dict[str, torch.Tensor]:
    """Read a LoRA file of any accepted format as a diffusers state dict (a family's fused
    layers, named in the file's metadata, split back)."""
    tensors, metadata = load_lora_file(path)
    modules = native_modules(split_modules(tensors, metadata, str(path)),
                             metadata.get("model_family"), detect_format(tensors))
    return build_state_dict(modules, "diffusers")[0]


# ------------------------------------------------------------------------------------------
# Verification against the transformer's module map
# ------------------------------------------------------------------------------------------
def transformer_linear_shapes(config: Mapping[str, Any] | None,
                              family: str | None = None) -> dict[str, tuple[int, int]]:
    """{module name: (in_features, out_features)} of every Linear of the family's trained
    component, built from ``config`` (None: the published one) on the meta device."""
    return get_family(family or default_family()).lora_module_map(config)


def read_transformer_config(where: str | os.PathLike | Mapping[str, Any]) -> dict[str, Any]:
    """A transformer config from a dict, a config.json, a transformer folder or a pipeline folder."""
    if isinstance(where, Mapping):
        return dict(where)
    p = Path(where)
    for candidate in (p, p / "config.json", p / "transformer" / "config.json"):
        if candidate.is_file():
            return json.loads(candidate.read_text(encoding="utf-8"))
    raise FileNotFoundError(f"model: no transformer config.json in {p} (allowed a pipeline folder, "
                            f"its transformer/ folder or a config.json)")


def _config_from_training_args(src: Path) -> tuple[dict[str, Any], str, str] | None:
    """(transformer config, where, family) of the run that wrote ``src``, when its files
    are local."""
    for folder in (src.parent, src.parent.parent):
        args_file = folder / rundir.TRAINING_ARGS
        if not args_file.is_file():
            continue
        try:
            data = json.loads(args_file.read_text(encoding="utf-8"))
            family = data.get("model_family") or default_family()
            tdir = (data.get("resolved_components") or {}).get("transformer")
            if tdir and (Path(tdir) / "config.json").is_file():
                return read_transformer_config(tdir), str(tdir), family

            known = {k: v for k, v in data.items() if k in FIELDS}
            cfg = RunConfig.model_validate(known).model_copy(update={"offline": True})
            trained = get_family(cfg.model_family).spec.trained_component
            tdir = resolve_component_dirs(cfg, [trained])[trained]
            return read_transformer_config(tdir), str(tdir), family
        except Exception:  # noqa: BLE001 - the run's model is not here; fall back to the stock map
            return None
    return None


def verify_state_dict(state_dict: Mapping[str, torch.Tensor], fmt: str,
                      shapes: Mapping[str, tuple[int, int]], check_sizes: bool = True,
                      prefixes: Mapping[str, str] | None = None, unrename=None) -> None:
    """Raise LoraFormatError unless every key has ``fmt``'s form and maps to a Linear module."""
    prefix = (prefixes or _PREFIX)[fmt]
    a_suffix, b_suffix, alpha_suffix = _SUFFIX[fmt]
    problems: list[str] = []
    seen: dict[str, dict[str, torch.Tensor]] = {}
    for key, value in state_dict.items():
        if not key.startswith(prefix):
            problems.append(f"{key}: {fmt} keys start with {prefix!r}")
            continue
        name = key[len(prefix):]
        for part, suffix in (("A", a_suffix), ("B", b_suffix), ("alpha", alpha_suffix),
                             ("magnitude", _MAG_SUFFIX[fmt])):
            if suffix and name.endswith(suffix):
                module = name[: -len(suffix)]
                seen.setdefault(module, {})[part] = value
                break
        else:
            problems.append(f"{key}: {fmt} keys end with "
                            f"{' | '.join(s for s in _SUFFIX[fmt] if s)}")
    need = {"A", "B"} | ({"alpha"} if alpha_suffix else set())
    for named, got in sorted(seen.items()):
        module = unrename(named, fmt) if unrename is not None else named
        if module not in shapes:
            problems.append(f"{prefix}{named}: no Linear module {module!r} in the "
                            f"model")
            continue
        if need - set(got):
            problems.append(f"{prefix}{named}: missing {sorted(need - set(got))}")
            continue
        if check_sizes:
            fin, fout = shapes[module]
            a, b = got["A"], got["B"]
            if a.shape[1] != fin or b.shape[0] != fout:
                problems.append(f"{prefix}{named}: LoRA maps {a.shape[1]} -> {b.shape[0]} "
                                f"features, the module maps {fin} -> {fout}")
    if not seen:
        problems.append("no LoRA keys")
    if problems:
        raise LoraFormatError(problems, f"the {fmt} export")


# ------------------------------------------------------------------------------------------
# DoRA for ComfyUI, and LoKr
# ------------------------------------------------------------------------------------------
def base_weights(where: str | os.PathLike | None, modules: list[str]) -> dict[str, torch.Tensor]:
    """The base ``<module>.weight`` tensors of the trained component (float32), read from the
    safetensors files of ``where`` (a pipeline folder, its transformer folder or its
    config.json). Raises LoraFormatError naming what is missing."""
    folder = None
    if where is not None:
        p = Path(where)
        for candidate in (p.parent if p.is_file() else p, p / "transformer"):
            if candidate.is_dir() and weight_files(candidate):
                folder = candidate
                break
    if folder is None:
        raise LoraFormatError([f"model: the ComfyUI export of a DoRA needs the base model's "
                               f"weights (ComfyUI's dora_scale is relative to them; got "
                               f"{where or 'no model folder'}; allowed --model with the "
                               f"pipeline or transformer folder the LoRA was trained on)"])
    need = {f"{m}.weight": m for m in modules}
    out: dict[str, torch.Tensor] = {}
    for file in weight_files(folder):
        with safe_open(str(file), framework="pt", device="cpu") as f:
            for key in f.keys():
                if key in need:
                    out[need[key]] = f.get_tensor(key).float()
    missing = sorted(set(modules) - set(out))
    if missing:
        raise LoraFormatError([f"{m}: no base weight {m}.weight in {folder}" for m in missing])
    return out


def dora_scales(modules: Mapping[str, tuple], weights: Mapping[str, torch.Tensor]
                ) -> dict[str, torch.Tensor]:
    """ComfyUI's ``dora_scale`` [out, 1] per DoRA module: ComfyUI multiplies W + s·B·A by
    dora_scale / (||W|| + eps) per output row (base weight norms), peft by m / ||W + s·B·A||;
    so dora_scale = m · (||W|| + eps) / ||W + s·B·A||."""
    out = {}
    for module, (a, b, alpha, *dora) in modules.items():
        if not dora:
            continue
        w = weights[module].float()
        scale = (alpha if alpha is not None else a.shape[0]) / a.shape[0]
        adapted = w + scale * (b.float() @ a.float())
        eps = torch.finfo(torch.float32).eps
        value = dora[0].float() * (w.norm(dim=1) + eps) / adapted.norm(dim=1)
        out[module] = value.reshape(-1, 1).to(a.dtype).contiguous()
    return out


def is_lokr(state_dict: Mapping[str, Any]) -> bool:
    return any(_LOKR_RE.match(k) for k in state_dict)


def split_lokr(state_dict: Mapping[str, torch.Tensor], metadata: Mapping[str, str] | None,
               source: str | None = None) -> dict[str, tuple[dict[str, torch.Tensor], float]]:
    """{module: (factors, scale)} of a LoKr file as training writes it (peft's names with
    the adapter name; scale = alpha / rank from its metadata, as peft applies it)."""
    meta = metadata or {}
    problems: list[str] = []
    if detect_format(state_dict) != "reference":
        problems.append("a LoKr is read back only as training wrote it (the reference "
                        "format); ComfyUI LoKr files are not read")
    try:
        rank = float(meta["rank"])
        alpha = float(meta.get("alpha") or rank)
    except (KeyError, ValueError):
        problems.append("metadata: a LoKr file states its rank (and alpha)")
        rank = alpha = 1.0
    modules: dict[str, dict[str, torch.Tensor]] = {}
    for key, value in state_dict.items():
        m = _LOKR_RE.match(key)
        if not m:
            problems.append(f"{key}: not a LoKr key (expected <module>.lokr_w1/w2[_a|_b]"
                            f".<adapter>)")
            continue
        modules.setdefault(m["module"], {})[m["part"]] = value
    for module, parts in modules.items():
        if "lokr_t2" in parts:
            problems.append(f"{module}: lokr_t2 (a convolution factor) has no Linear layer")
        for w in ("w1", "w2"):
            if f"lokr_{w}" not in parts and not {f"lokr_{w}_a", f"lokr_{w}_b"} <= set(parts):
                problems.append(f"{module}: lokr_{w} (or lokr_{w}_a and lokr_{w}_b) missing")
    if problems:
        raise LoraFormatError(problems, source)
    return {m: (parts, alpha / rank) for m, parts in sorted(modules.items())}


def _lokr_factor(parts: Mapping[str, torch.Tensor], w: str) -> torch.Tensor:
    if f"lokr_{w}" in parts:
        return parts[f"lokr_{w}"].float()
    return parts[f"lokr_{w}_a"].float() @ parts[f"lokr_{w}_b"].float()


def lokr_delta(parts: Mapping[str, torch.Tensor], scale: float) -> torch.Tensor:
    """The weight update of one LoKr module: scale · kron(w1, w2) [out, in]."""
    return scale * torch.kron(_lokr_factor(parts, "w1"), _lokr_factor(parts, "w2"))


def lokr_state_dict(modules: Mapping[str, tuple[dict[str, torch.Tensor], float]], fmt: str,
                    prefixes: Mapping[str, str], shapes: Mapping[str, tuple[int, int]],
                    check_sizes: bool = True) -> dict[str, torch.Tensor]:
    """A LoKr as ``fmt`` (reference: peft's names; comfyui: LyCORIS's names with ``.alpha``,
    the scale folded into lokr_w1 where ComfyUI would not apply the alpha)."""
    if fmt == "diffusers":
        raise LoraFormatError(["format: diffusers' LoRA loaders read LoRA (A/B) keys only, "
                               "not LoKr factors (got a LoKr; allowed reference | comfyui, or "
                               "load it through peft)"])
    problems: list[str] = []
    out: dict[str, torch.Tensor] = {}
    prefix = prefixes[fmt]
    for module, (parts, scale) in modules.items():
        if module not in shapes:
            problems.append(f"{prefix}{module}: no Linear module {module!r} in the model")
            continue
        w1, w2 = _lokr_factor(parts, "w1"), _lokr_factor(parts, "w2")
        fin, fout = shapes[module]
        if check_sizes and (w1.shape[0] * w2.shape[0], w1.shape[1] * w2.shape[1]) != (fout, fin):
            problems.append(f"{prefix}{module}: LoKr maps {w1.shape[1] * w2.shape[1]} -> "
                            f"{w1.shape[0] * w2.shape[0]} features, the module maps "
                            f"{fin} -> {fout}")
            continue
        key = prefix + module
        if fmt == "reference":
            for part, value in parts.items():
                out[f"{key}.{part}.{ADAPTER}"] = value.contiguous()
            continue
        dims = [parts[f"lokr_{w}_b"].shape[0] for w in ("w1", "w2") if f"lokr_{w}_b" in parts]
        for part, value in parts.items():
            out[f"{key}.{part}"] = value.contiguous()
        if dims:  # ComfyUI: alpha / r of the (last) decomposed factor
            out[f"{key}.alpha"] = torch.tensor(float(scale * dims[-1]))
        elif scale != 1.0:  # ComfyUI applies no alpha: fold the scale into w1
            out[f"{key}.lokr_w1"] = (parts["lokr_w1"].float() * scale).to(
                parts["lokr_w1"].dtype).contiguous()
    if problems:
        raise LoraFormatError(problems, f"the {fmt} export")
    return out


# ------------------------------------------------------------------------------------------
# Export
# ------------------------------------------------------------------------------------------
def export_path(src: str | os.PathLike, fmt: str, out_dir: str | os.PathLike | None = None) -> Path:
    """``<output_path>/export/<stem>.<fmt>.safetensors`` (or ``out_dir/...``)."""
    src = Path(src)
    stem = src.name[: -len(_CHECKPOINT_EXT)] if src.name.endswith(_CHECKPOINT_EXT) else src.stem
    for f in FORMATS:  # step-10.diffusers -> step-10
        if stem.endswith("." + f):
            stem = stem[: -len(f) - 1]
    if out_dir is None:
        out_dir = src.parent if src.parent.name == rundir.EXPORT else src.parent / rundir.EXPORT
    return Path(out_dir) / f"{stem}.{fmt}.safetensors"


def export_lora(src: str | os.PathLike, fmt: str, out_dir: str | os.PathLike | None = None,
                transformer_config: str | os.PathLike | Mapping[str, Any] | None = None,
                family: str | None = None) -> Path:
    """Write ``src`` (a LoRA in any accepted format) as ``fmt``; return the written path.

    Checked against the transformer's module map before anything is written.
    """
    if fmt not in FORMATS:
        raise ValueError(f"format: unknown (got {fmt!r}; allowed {' | '.join(FORMATS)})")
    src = Path(src)
    tensors, metadata = load_lora_file(src)
    lokr = is_lokr(tensors)
    modules = {} if lokr else split_modules(tensors, metadata, str(src))

    family = family or metadata.get("model_family")
    source_format = detect_format(tensors)
    if family in family_names() and source_format != "reference":
        # A family whose tools name modules their own way: back to diffusers' names.
        back = get_family(family).import_module_name
        modules = {back(m, source_format): v for m, v in modules.items()}
        modules = native_modules(modules, family, source_format)
    if transformer_config is not None:
        config, against = read_transformer_config(transformer_config), str(transformer_config)
        check_sizes = True
    else:
        found = _config_from_training_args(src)
        if found:
            (config, against, run_family), check_sizes = found, True
            family = family or run_family
        else:  # the family's published config; names only
            config, against, check_sizes = None, None, False
    if family is not None and family not in family_names():
        raise ValueError(f"family: unknown (got {family!r}; allowed "
                         f"{' | '.join(family_names())})")
    family = family or default_family()
    against = against or f"the published {family} module names"
    prefixes = family_prefixes(family)
    adapter = get_family(family)
    rename, unname = adapter.export_module_name, adapter.import_module_name
    shapes = transformer_linear_shapes(config, family)
    if lokr:
        state_dict = lokr_state_dict(split_lokr(tensors, metadata, str(src)), fmt, prefixes,
                                     shapes, check_sizes)
        folded = False
    elif fmt == "comfyui" and any(len(v) == 4 for v in modules.values()):
        weights = base_weights(transformer_config if transformer_config is not None and
                               not isinstance(transformer_config, Mapping) else against,
                               [m for m, v in modules.items() if len(v) == 4])
        plain = {m: v[:3] for m, v in modules.items()}
        state_dict, folded = build_state_dict(plain, fmt, prefixes, rename)
        verify_state_dict(state_dict, fmt, shapes, check_sizes, prefixes, unname)
        for module, scale in dora_scales(modules, weights).items():
            state_dict[prefixes[fmt] + rename(module, fmt) + _MAG_SUFFIX[fmt]] = scale
    else:
        state_dict, folded = build_state_dict(modules, fmt, prefixes, rename)
        verify_state_dict(state_dict, fmt, shapes, check_sizes, prefixes, unname)
        fused = adapter.fused_modules.get(fmt)
        if fused:  # checked as the model's modules, written as the tool's fused layers
            state_dict, folded = build_state_dict(fuse_modules(modules, fused), fmt, prefixes,
                                                  rename)

    meta = {str(k): str(v) for k, v in metadata.items()}
    if folded:
        meta.pop("lora_adapter_metadata", None)
        for key in _ALPHA_META_KEYS:
            if key in meta:
                meta[key] = str(next(iter(modules.values()))[0].shape[0])
    if fmt == "reference" and "source_format" in meta:
        meta["format"] = meta.pop("source_format")  # back to what training wrote
    elif fmt != "reference" and meta.get("format", "pt") != "pt":
        meta["source_format"] = meta["format"]  # e.g. zerolora-lora: not what this file is
    if fmt != "reference" or "format" not in meta:
        meta["format"] = "pt"
    meta["zerolora_format"] = fmt
    meta["zerolora_source"] = src.name
    meta["zerolora_verified_against"] = against

    out = export_path(src, fmt, out_dir)
    if out.resolve() == src.resolve():
        raise ValueError(f"out_dir: the export would overwrite its source {src}")
    out.parent.mkdir(parents=True, exist_ok=True)
    writegate.atomic_write(out, save(state_dict, metadata=meta))
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m backend.models.export",
                                     description="Export a LoRA checkpoint for another tool.")
    parser.add_argument("src", help="LoRA .safetensors (reference, diffusers or comfyui keys)")
    parser.add_argument("--format", required=True, choices=FORMATS, dest="fmt",
                        help="target key format")
    parser.add_argument("--out_dir", default=None,
                        help="folder to write to (default: export/ beside the checkpoint)")
    parser.add_argument("--model", default=None,
                        help="pipeline folder, transformer folder or config.json to check the "
                             "keys and sizes against (default: the run's model, else the "
                             "family's published module names)")
    parser.add_argument("--family", default=None, choices=family_names(),
                        help="model family (default: the LoRA file's or the run's)")
    args = parser.parse_args(argv)
    if Path(args.src).is_dir():  # a full checkpoint folder: backend.models.full_export
        out = (None if args.out_dir is None else
               Path(args.out_dir) / full_export.export_path(Path(args.src), args.fmt).name)
        return full_export.main([args.src, "--format", args.fmt]
                                + (["--out", str(out)] if out else [])
                                + (["--family", args.family] if args.family else []))
    try:
        out = export_lora(args.src, args.fmt, args.out_dir, args.model, args.family)
    except (LoraFormatError, FileNotFoundError, ValueError) as e:
        print(f"export failed: {e}", file=sys.stderr)
        return 1
    print(out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
