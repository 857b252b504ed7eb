"""LoRA adapters: attaching (peft), collecting, saving and loading them back.

Saved files hold only the adapter tensors with the reference trainer's keys, e.g.
``transformer_blocks.0.attn.to_q.lora_A.default.weight`` (peft's adapter name kept, no
alpha tensor; alpha in the metadata, = rank unless ``lora_alpha`` says otherwise), and
safetensors metadata::

    format=zerolora-lora  rank  alpha  target_modules (comma-separated)
    base_model (lora_base_model, e.g. dit)  model_family  lora_type  step (optional)

``lora_type`` (peft's tuners): ``lora``; ``dora`` (peft's ``use_dora``: a
``lora_magnitude_vector.default.weight`` per module besides A and B); ``lokr`` (peft's
``LoKrConfig``: ``lokr_w1.default``, ``lokr_w2.default`` or ``lokr_w2_a/_b.default``).
``load_lora`` reads the type back from the keys.

Files are written atomically (temp file + rename). ``to_diffusers`` converts the keys to
the ``transformer.``-prefixed form diffusers' ``load_lora_weights`` expects.
"""
from __future__ import annotations

import functools
import json
import os
from contextlib import contextmanager, nullcontext
from pathlib import Path
from typing import Any, Iterable, Iterator

from backend.core import writegate
from backend.core.diskspace import writing
from backend.families import default_family, family_names, get_family
from backend.models.hub import local_component_dir, models_dir

FORMAT = "zerolora-lora"
ADAPTER = "default"


LORA_TYPES = ("lora", "dora", "lokr")
# Substrings of the trainable adapter parameters' names (peft's LoRA, DoRA and LoKr).
ADAPTER_PARAM_MARKS = ("lora_", "lokr_")


def lora_config(rank: int, target_modules: Iterable[str], alpha: float | None = None,
                dropout: float = 0.0, lora_type: str = "lora", lokr_factor: int = -1):
    """peft's config for ``lora_type``: LoraConfig (``use_dora`` for dora) or LoKrConfig."""
    from peft import LoKrConfig, LoraConfig

    if lora_type not in LORA_TYPES:
        raise ValueError(f"lora_type: unknown (got {lora_type!r}; allowed "
                         f"{' | '.join(LORA_TYPES)})")
    alpha = alpha if alpha is not None else rank
    if lora_type == "lokr":
        return LoKrConfig(r=rank, alpha=alpha, target_modules=list(target_modules),
                          decompose_factor=lokr_factor, init_weights=True)
    return LoraConfig(r=rank, lora_alpha=alpha, target_modules=list(target_modules),
                      lora_dropout=dropout, use_dora=lora_type == "dora",
                      init_lora_weights=True)


def add_lora(model, rank: int, target_modules: Iterable[str], adapter_name: str = ADAPTER,
             alpha: float | None = None, dropout: float = 0.0, lora_type: str = "lora",
             lokr_factor: int = -1) -> None:
    """Attach a fresh adapter to ``model`` (a diffusers model with peft support); freezes
    the base weights first so only adapter parameters train."""
    model.requires_grad_(False)
    model.add_adapter(lora_config(rank, target_modules, alpha, dropout, lora_type, lokr_factor),
                      adapter_name=adapter_name)


def adapter_options(cfg) -> dict[str, Any]:
    """``add_lora``'s keyword arguments from a run config (alpha, dropout, type, factor)."""
    return {"alpha": cfg.lora_alpha, "dropout": cfg.lora_dropout, "lora_type": cfg.lora_type,
            "lokr_factor": cfg.lokr_factor}


def lora_type_of(tensors: Iterable[str]) -> str:
    """lora | dora | lokr from a LoRA file's keys."""
    keys = list(tensors)
    if any(".lokr_" in k for k in keys):
        return "lokr"
    if any("lora_magnitude_vector" in k for k in keys):
        return "dora"
    return "lora"


def strip_prefix(key: str, prefix: str) -> str:
    for p in (prefix, "module.", "_orig_mod."):
        if p and key.startswith(p):
            key = key[len(p):]
    return key


def lora_named_parameters(model) -> list[tuple[str, Any]]:
    return [(n, p) for n, p in model.named_parameters()
            if any(mark in n for mark in ADAPTER_PARAM_MARKS)]


@contextmanager
def gathered_lora(model, remove_prefix: str = "", gather: bool = False
                  ) -> Iterator[dict[str, Any]]:
    """The LoRA parameters of ``model`` by saved name (prefix removed), whole for the
    block: with ``gather`` (DeepSpeed ZeRO-3) the partitioned LoRA parameters are gathered
    (every rank must enter it, and all see the full tensors); only the LoRA, never the
    frozen base model."""
    params = lora_named_parameters(model)
    context = nullcontext()
    if gather:
        import deepspeed

        context = deepspeed.zero.GatheredParameters([p for _, p in params], modifier_rank=None)
    with context:
        yield {strip_prefix(n, remove_prefix): p for n, p in params}


def collect_lora_state(model, remove_prefix: str = "", gather: bool = False
                       ) -> dict[str, Any]:
    """LoRA tensors of ``model`` on CPU, prefix removed (``gathered_lora``: every rank calls
    this under ZeRO-3)."""
    with gathered_lora(model, remove_prefix, gather) as params:
        return {n: p.detach().cpu().clone() for n, p in params.items()}


def expected_shapes(model, rank: int, target_modules: Iterable[str],
                    adapter_name: str = ADAPTER) -> dict[str, tuple[int, ...]]:
    """Keys and shapes a LoRA of ``rank`` on ``target_modules`` of ``model`` must have
    (``model`` without an adapter; names matched as peft does: equal or ``.``-suffix)."""
    import torch

    targets = list(target_modules)
    out: dict[str, tuple[int, ...]] = {}
    for name, mod in model.named_modules():
        if not any(matches(name, t) for t in targets):
            continue
        if not isinstance(mod, torch.nn.Linear):
            continue
        out[f"{name}.lora_A.{adapter_name}.weight"] = (rank, mod.in_features)
        out[f"{name}.lora_B.{adapter_name}.weight"] = (mod.out_features, rank)
    return out


def save_lora(path: str | os.PathLike, tensors: dict[str, Any], *, rank: int,
              target_modules: Iterable[str], base_model: str = "dit",
              model_family: str | None = None, extra: dict[str, Any] | None = None,
              alpha: float | None = None) -> Path:
    """Write a LoRA file atomically (``writegate.atomic_write``); ``alpha`` None means
    alpha = rank."""
    from safetensors.torch import save

    path = Path(path)
    meta = {"format": FORMAT, "rank": str(rank), "alpha": _number(alpha if alpha is not None
                                                                  else rank),
            "target_modules": ",".join(target_modules), "base_model": base_model,
            "model_family": model_family or _default_family(),
            "lora_type": lora_type_of(tensors)}
    meta.update({k: str(v) for k, v in (extra or {}).items()})
    needed = sum(v.numel() * v.element_size() for v in tensors.values())
    with writing(path, needed):
        writegate.atomic_write(path, save({k: v.contiguous() for k, v in tensors.items()},
                                          metadata=meta))
    return path


def _number(x: float) -> str:
    """A number as metadata text: 16, not 16.0."""
    return str(int(x)) if float(x).is_integer() else str(float(x))


def _default_family() -> str:
    return default_family()


def read_lora(path: str | os.PathLike, gate=None, what: str = "LoRA file"
              ) -> tuple[dict[str, Any], dict[str, str]]:
    """(tensors, metadata) of a LoRA file; with a ``backend.core.readgate`` gate, read through it
    (the bytes of the file the gate opened, so no link swapped in after a check is read)."""
    from safetensors import safe_open
    from safetensors.torch import load, load_file

    if gate is not None and gate.restricted:
        data = gate.read_bytes(path, what)
        size = int.from_bytes(data[:8], "little") if len(data) >= 8 else -1
        try:
            header = json.loads(data[8:8 + size]) if 0 < size <= len(data) - 8 else None
        except ValueError:
            header = None
        if not isinstance(header, dict):
            raise ValueError(f"{what}: not a safetensors file (got {os.fspath(path)!r})")
        meta = {str(k): str(v) for k, v in (header.get("__metadata__") or {}).items()}
        return load(data), meta
    with safe_open(str(path), framework="pt") as f:
        meta = dict(f.metadata() or {})
    return load_file(str(path)), meta


def lora_rank_and_targets(tensors: dict[str, Any], meta: dict[str, str]
                          ) -> tuple[int, int, list[str]]:
    """(rank, alpha, target module names) of a LoRA, from metadata or the keys."""
    ranks = {v.shape[0] for k, v in tensors.items() if ".lora_A." in k}
    rank = int(meta.get("rank") or (ranks.pop() if len(ranks) == 1 else 0))
    alpha = float(meta.get("alpha") or rank)
    alpha = int(alpha) if alpha.is_integer() else alpha
    if meta.get("target_modules"):
        targets = meta["target_modules"].split(",")
        family = meta.get("model_family")
        if family in family_names():  # the reference's spellings, as training mapped them
            targets = get_family(family).target_modules(targets)
    elif any(".lokr_" in k for k in tensors):
        targets = sorted({k.split(".lokr_")[0] for k in tensors if ".lokr_" in k})
    else:  # the full module paths, which peft accepts as exact names
        targets = sorted({k.split(".lora_A.")[0] for k in tensors if ".lora_A." in k})
    return rank, alpha, targets


def load_lora(model, path: str | os.PathLike, adapter_name: str = ADAPTER,
              strict: bool = True) -> dict[str, str]:
    """Attach the LoRA in ``path`` to ``model`` as ``adapter_name``; return its metadata.

    Accepts our key format (``...lora_A.default.weight``) and the diffusers one
    (``transformer.``-prefixed, no adapter name). With ``strict`` a key that matches no
    module of ``model`` is an error naming it.
    """
    from peft.utils import set_peft_model_state_dict

    tensors, meta = read_lora(path)
    kind = lora_type_of(tensors)
    if kind != "lokr":
        tensors, folded = from_any_format(tensors, meta)
    else:
        folded = False
    rank, alpha, targets = lora_rank_and_targets(tensors, meta)
    if folded:  # the converter put alpha / rank into lora_B
        alpha = rank
    model.add_adapter(lora_config(rank, targets, alpha, lora_type=kind),
                      adapter_name=adapter_name)
    result = set_peft_model_state_dict(model, peft_keys(tensors), adapter_name=adapter_name)
    unexpected = [k for k in getattr(result, "unexpected_keys", [])
                  if any(mark in k for mark in ADAPTER_PARAM_MARKS)]
    if strict and unexpected:
        raise ValueError(f"{path}: LoRA keys match no module of the model: "
                         f"{', '.join(unexpected[:5])}{' ...' if len(unexpected) > 5 else ''}")
    return meta


def init_from_checkpoint(model, path: str | os.PathLike, adapter_name: str = ADAPTER,
                         gate=None) -> int:
    """Copy the tensors of a LoRA file into ``model``'s existing adapter (``lora_checkpoint``);
    returns how many tensors were loaded. Shapes must match (same rank and targets). With a
    read gate the file is read through it."""
    from peft.utils import set_peft_model_state_dict

    tensors, meta = read_lora(path, gate, "lora_checkpoint")
    if lora_type_of(tensors) != "lokr":
        tensors, _ = from_any_format(tensors, meta)
    result = set_peft_model_state_dict(model, peft_keys(tensors), adapter_name=adapter_name)
    unexpected = [k for k in getattr(result, "unexpected_keys", [])
                  if any(mark in k for mark in ADAPTER_PARAM_MARKS)]
    if unexpected:
        raise ValueError(f"lora_checkpoint: keys match no LoRA module: "
                         f"{', '.join(unexpected[:5])}")
    return len(tensors)


def to_diffusers(tensors: dict[str, Any]) -> dict[str, Any]:
    """Any accepted LoRA keys → diffusers' (``backend.models.export``'s converter)."""
    from backend.models.export import build_state_dict, split_modules
    return build_state_dict(split_modules(tensors), "diffusers")[0]


def peft_keys(tensors: dict[str, Any]) -> dict[str, Any]:
    """Our keys as ``set_peft_model_state_dict`` wants them: no adapter name, a DoRA
    magnitude without ``.weight``."""
    out = {}
    for k, v in tensors.items():
        k = k.replace(f".{ADAPTER}.", ".")
        if k.endswith(f".{ADAPTER}"):
            k = k[: -len(ADAPTER) - 1]
        if k.endswith(".lora_magnitude_vector.weight"):
            k = k[: -len(".weight")]
        out[k] = v
    return out


def from_any_format(tensors: dict[str, Any], meta: dict[str, str] | None = None
                    ) -> tuple[dict[str, Any], bool]:
    """Any accepted LoRA or DoRA keys → ours, and whether an alpha other than the rank was
    folded into lora_B on the way (``backend.models.export``'s converter)."""
    from backend.models.export import build_state_dict, split_modules
    return build_state_dict(split_modules(tensors, meta), "reference")


def from_diffusers(tensors: dict[str, Any]) -> dict[str, Any]:
    """Any accepted LoRA keys (ours, diffusers', ComfyUI's) → ours, through
    ``backend.models.export``'s converter (an alpha other than the rank is folded into lora_B)."""
    from backend.models.export import build_state_dict, split_modules
    return build_state_dict(split_modules(tensors), "reference")[0]


def merge_lora_file(model, path: str | os.PathLike, scale: float = 1.0,
                    adapter_name: str = "merged") -> int:
    """Merge the LoRA in ``path`` into ``model``'s base weights at ``scale`` and remove the
    adapter again, so the model's parameters are the merged ones and no trace of the extra
    LoRA is left to be saved. Returns the number of merged modules."""
    from contextlib import nullcontext

    from peft.tuners.tuners_utils import BaseTunerLayer

    load_lora(model, path, adapter_name=adapter_name)
    merged = 0
    for module in model.modules():
        if isinstance(module, BaseTunerLayer) and any(
                adapter_name in getattr(module, name, {})
                for name in ("lora_A", "lokr_w1", "lokr_w1_a")):
            if scale != 1.0:
                module.scale_layer(scale)
            base = list(module.get_base_layer().parameters())
            if any(hasattr(p, "ds_id") for p in base):
                # ZeRO-3 partitioned (zero3_init_flag): merge into the gathered weight on
                # rank 0, which is partitioned again on the way out.
                import deepspeed
                gathered = deepspeed.zero.GatheredParameters(base, modifier_rank=0)
            else:
                gathered = nullcontext()
            with gathered:
                module.merge(adapter_names=[adapter_name])
            merged += 1
    model.delete_adapters(adapter_name)
    return merged


def checkpoint_info(path: str | os.PathLike) -> dict[str, Any]:
    """Metadata and tensor count of a LoRA file, for listings."""
    from safetensors import safe_open

    with safe_open(str(path), framework="pt") as f:
        meta = dict(f.metadata() or {})
        n = len(list(f.keys()))
    return {"path": str(path), "tensors": n, **meta}


def write_json_atomic(path: str | os.PathLike, data: Any) -> Path:
    text = json.dumps(data, indent=2, default=str)
    with writing(path, len(text.encode())):
        return writegate.atomic_write(path, text)


# ------------------------------------------------------------------------------------------
# Target modules against the model
# ------------------------------------------------------------------------------------------
@functools.lru_cache(maxsize=8)
def _linear_names(family_name: str, config_json: str) -> tuple[str, ...]:
    """Names of the trained component's Linear layers (built on the meta device, cached)."""
    return tuple(get_family(family_name).lora_module_map(json.loads(config_json)))


def matches(module: str, target: str) -> bool:
    """peft's rule for a list of target names: the module's name, or its last dotted parts."""
    return module == target or module.endswith("." + target)


def shown_model_file(cfg, path: str | os.PathLike) -> str:
    """A model file as a message names it: inside the models folder, by its place there
    (``<model>/transformer/config.json in models_dir``, the model id first, as the
    sources name it); elsewhere (a local path the user gave), as it is. Messages never
    name the server's models folder."""
    p = Path(path)
    root = models_dir(cfg)
    for candidate in (Path(os.path.abspath(p)), p.parent.resolve() / p.name):
        try:
            return f"{candidate.relative_to(root).as_posix()} in models_dir"
        except ValueError:
            continue
    return str(p)


def target_module_problems(cfg, config: dict | None = None, where: str | None = None
                           ) -> list[str]:
    """``lora_target_modules: ...`` naming every target that matches no Linear layer of the
    trained component (as peft would match it), or []. The module list is the family's
    ``lora_module_map`` on the meta device from ``config`` (default: the component's local
    config.json when its folder is on disk, else the family's published config).

    The one check the runner makes before a run's first stage and the train stage makes
    before it loads the model."""
    family = get_family(cfg.model_family)
    component = family.spec.trained_component
    if config is None:
        folder = local_component_dir(cfg, component)
        if folder is not None and (folder / "config.json").is_file():
            config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
            where = where or shown_model_file(cfg, folder / "config.json")
        else:
            config = family.published_configs()[component]
            where = where or f"the published {family.spec.title} {component} config"
    modules = _linear_names(family.spec.name, json.dumps(config, sort_keys=True))
    names = cfg.target_modules()
    bad = [n for n, t in zip(names, family.target_modules(names))
           if not any(matches(m, t) for m in modules)]
    if not bad:
        return []
    import difflib

    ends = sorted({".".join(m.split(".")[-2:]) if m.split(".")[-1].isdigit()
                   else m.split(".")[-1] for m in modules})
    close = {n: difflib.get_close_matches(n, ends, n=1, cutoff=0.6) for n in bad}
    hints = "; ".join(f"{n} -> {c[0]}?" for n, c in close.items() if c)
    return [f"lora_target_modules: {', '.join(bad)} match no Linear layer of the {component} "
            f"(got {cfg.lora_target_modules!r}; allowed names that end a layer's path, e.g. "
            f"{', '.join(ends[:30])}{'; did you mean ' + hints if hints else ''}; module "
            f"list from {where})"]
