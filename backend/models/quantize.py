"""A quantized frozen base: the ``nn.Linear`` layers of a loaded model replaced by
bitsandbytes' ``Linear4bit`` (nf4 or fp4) / ``Linear8bitLt`` (int8), or their weights made
torchao's weight-only int8 / float8 tensors (``quantize_`` with a filter), after load.

Quantizing after load (rather than diffusers' ``BitsAndBytesConfig`` / ``TorchAoConfig`` at
``from_pretrained``) works the same for every family's loader, on the CPU as on a GPU, and
leaves the skip rule in one place. Modules left unquantized: the entry's list, else the
family's ``quantize_skip`` (names or ``fnmatch`` patterns of module paths; a name also
covers everything below it). peft then puts its LoRA on top of the quantized layers
(``TorchaoLoraLinear`` for torchao; the plain LoRA layer around bitsandbytes' modules), the
LoRA weights stay float32 and the saved LoRA holds only them, so it loads into the
unquantized pipeline.

A missing package is named: ``pip install bitsandbytes`` / ``pip install torchao``.
"""
from __future__ import annotations

import fnmatch
import logging
import sys
from typing import Callable

from backend.config.lowvram import QuantEntry, entries_for, parse_quant_options


class QuantizeError(RuntimeError):
    """A quantization the user asked for cannot run here (the message says why)."""


# transformers and diffusers import these on start-up whenever they are installed (their
# quantizer registries): ~2.5 s of CPU per stage process, and torchao's import logs
# "Failed to load ...so" for its GPU kernels plus torch's pytree deprecation warnings.
OPTIONAL_PACKAGES = ("torchao", "bitsandbytes")


def packages_needed(cfg) -> set[str]:
    """Which of ``OPTIONAL_PACKAGES`` the run asks for: a quantized component, the 8-bit
    optimizer, torchao's optimizer offload, or a customized optimizer from one of them."""
    entries, _ = parse_quant_options(getattr(cfg, "quant_options", None),
                                     getattr(cfg, "fp8_models", None))
    need = {e.backend for e in entries}
    if getattr(cfg, "optimizer", None) == "adamw8bit":
        need.add("bitsandbytes")
    if getattr(cfg, "enable_optimizer_cpu_offload", False):
        need.add("torchao")
    custom = (getattr(cfg, "customized_optimizer", None) or "").split(".")[0]
    need.update(p for p in OPTIONAL_PACKAGES if p == custom)
    return need


def keep_out_unneeded(cfg) -> list[str]:
    """In a stage process, before torch, transformers or diffusers are imported: mark the
    optional packages the run does not ask for as absent (``sys.modules[name] = None``, which
    ``importlib.util.find_spec`` reports as not installed), and import torchao quietly when
    it is asked for. Returns the names kept out. Only for a stage's own process: the
    packages stay unimportable there."""
    need = packages_needed(cfg)
    kept_out = [p for p in OPTIONAL_PACKAGES if p not in need and p not in sys.modules]
    for name in kept_out:
        sys.modules[name] = None
    if "torchao" in need:
        import_torchao_quietly()
    return kept_out


class _EnumPytreeNotice(logging.Filter):
    """torch's notice that torchao registers Enum classes as pytree constants (a deprecation
    aimed at torchao's authors; nothing a user can change)."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "is an Enum subclass and is now natively supported" not in str(record.msg)


def import_torchao_quietly() -> None:
    """Import torchao (if installed) without the log lines users cannot act on: its
    "Failed to load <kernel>.so" warnings for GPU kernels this machine lacks, and torch's
    pytree Enum deprecation notice it triggers."""
    if "torchao" in sys.modules:
        return
    logging.getLogger("torchao").setLevel(logging.ERROR)
    pytree = logging.getLogger("torch.utils._pytree")
    notice = _EnumPytreeNotice()
    pytree.addFilter(notice)
    try:
        import torchao  # noqa: F401
    except ImportError:
        pass  # named by _require where the package is used
    finally:
        pytree.removeFilter(notice)


def _skipped(name: str, skip: tuple[str, ...]) -> bool:
    for pat in skip:
        if name == pat or name.startswith(pat + ".") or fnmatch.fnmatchcase(name, pat) \
                or fnmatch.fnmatchcase(name, pat.rstrip(".*")):
            return True
    return False


def _require(package: str, method: str):
    try:
        return __import__(package)
    except ImportError:
        raise QuantizeError(f"quant_options: {method} needs the {package} package (pip "
                            f"install {package})") from None


def quantize_model(model, entry: QuantEntry, default_skip: tuple[str, ...] = (),
                   compute_dtype=None, device=None, log: Callable[[str], None] = print,
                   defer: bool = False) -> dict[str, int]:
    """Quantize ``model``'s linear layers in place. With ``device`` each quantized layer
    moves there as it is quantized (so the full-precision model never sits on the GPU),
    else it is quantized where it is; ``defer``: bitsandbytes' layers are quantized where
    they next move (layer offload moves one block at a time). Returns counts:
    ``quantized``, ``skipped`` and the quantized layers' weight ``bytes`` before."""
    import torch

    skip = entry.skip if entry.skip is not None else tuple(default_skip)
    targets = [(n, m) for n, m in model.named_modules() if isinstance(m, torch.nn.Linear)]
    chosen = [(n, m) for n, m in targets if not _skipped(n, skip)]
    counts = {"quantized": len(chosen), "skipped": len(targets) - len(chosen),
              "bytes": sum(m.weight.numel() * m.weight.element_size() for _, m in chosen)}
    if entry.backend == "bitsandbytes":
        _bnb(model, chosen, entry.method, compute_dtype, device, defer)
    else:
        _torchao(model, {id(m) for _, m in chosen}, entry.method, device)
    for p in model.parameters():
        p.requires_grad_(False)
    log(f"[quantize] {entry.component}: {counts['quantized']} linear layers {entry.method}, "
        f"{counts['skipped']} left in full precision ({', '.join(skip) or 'none named'})")
    return counts


def _bnb(model, chosen, method: str, compute_dtype, device, defer: bool) -> None:
    _require("bitsandbytes", method)
    import warnings

    import torch
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import bitsandbytes as bnb

    for name, lin in chosen:
        dtype = compute_dtype or lin.weight.dtype
        bias = lin.bias is not None
        weight = lin.weight.data
        if method in ("bitsandbytes_nf4", "bitsandbytes_fp4"):
            kind = method.rsplit("_", 1)[1]  # nf4 | fp4
            q = bnb.nn.Linear4bit(lin.in_features, lin.out_features, bias=bias,
                                  compute_dtype=dtype, quant_type=kind,
                                  device=weight.device)
            q.weight = bnb.nn.Params4bit(weight.float().cpu(), requires_grad=False,
                                         quant_type=kind)
        else:
            q = bnb.nn.Linear8bitLt(lin.in_features, lin.out_features, bias=bias,
                                    has_fp16_weights=False, threshold=0.0,
                                    device=weight.device)
            q.weight = bnb.nn.Int8Params(weight.float().cpu(), requires_grad=False,
                                         has_fp16_weights=False)
        if bias:
            q.bias = torch.nn.Parameter(lin.bias.data.to(dtype), requires_grad=False)
        if not defer:
            q = q.to(device or weight.device)  # quantizes (on the CPU as on a GPU)
        parent, _, child = name.rpartition(".")
        setattr(model.get_submodule(parent) if parent else model, child, q)


def _torchao(model, chosen_ids: set[int], method: str, device) -> None:
    import_torchao_quietly()
    _require("torchao", method)
    from torchao.quantization import (Float8WeightOnlyConfig, Int8WeightOnlyConfig,
                                      quantize_)

    config = Int8WeightOnlyConfig() if method == "torchao_int8" else Float8WeightOnlyConfig()
    quantize_(model, config, filter_fn=lambda m, fqn: id(m) in chosen_ids, device=device)


def quantize_component(cfg, model, component: str, default_skip: tuple[str, ...] = (),
                       compute_dtype=None, device=None, log: Callable[[str], None] = print,
                       defer: bool = False):
    """Apply the run's quant_options / fp8_models entry for ``component`` (if any)."""
    for entry in entries_for(cfg, component):
        quantize_model(model, entry, default_skip, compute_dtype, device, log, defer)
    return model


def quantize_frozen(cfg, holder, components=("text_encoder", "vae"),
                    log: Callable[[str], None] = print):
    """Quantize the frozen encoders of stage 1, one-shot training and samples in place:
    ``holder`` is a family's ``Encoder`` or a diffusers pipeline (both name them
    ``text_encoder`` and ``vae``). Each is quantized where it sits; returns ``holder``."""
    for component in components:
        module = getattr(holder, component, None)
        if module is not None:
            dtype = getattr(module, "dtype", None)
            quantize_component(cfg, module, component, (), dtype, None, log)
    return holder


def is_quantized(module) -> bool:
    """Whether ``module`` has a quantized weight (bitsandbytes or torchao)."""
    w = getattr(module, "weight", None)
    return w is not None and (type(w).__module__.split(".")[0] in ("bitsandbytes", "torchao")
                              or w.dtype in _low_dtypes())


def _low_dtypes():
    import torch
    return (torch.uint8, torch.int8, torch.float8_e4m3fn)
