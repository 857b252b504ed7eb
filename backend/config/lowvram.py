"""The low-VRAM options, read and checked: ``quant_options`` / ``fp8_models`` parsed into
entries, and which combinations of low-VRAM methods run.

Standard library and the message tables only (the schema imports it, so a bad value is
refused within a second, before torch is touched). The work itself is done by
``backend.models.quantize`` (a quantized frozen base) and ``backend.models.layer_offload``
(stage 2 with only the running block on the GPU).

``quant_options`` follows the reference trainer: entries separated by ``;``, each
``<model_id>:<glob>:<method>`` optionally followed by ``/<modules left unquantized>``
(comma-separated names or ``fnmatch`` patterns of module paths), e.g.
``org/model:transformer/*.safetensors:bitsandbytes_nf4/img_in,txt_in,proj_out``.
Without a skip list the family's own (``Family.quantize_skip``) applies; an empty one
(``<method>/``) quantizes every linear layer. The entry's glob
names the component it quantizes by its folder (``transformer/``, ``text_encoder/``,
``vae/``). ``fp8_models`` (the reference's video low-VRAM scripts) is a list (``,`` or ``;``) of
``<model_id>:<glob>`` or model names (``dit``, ``text_encoder``, ``vae``) read as the same
entries with method ``torchao_fp8``; ``offload_models`` takes the same forms.

Methods: ``bitsandbytes_nf4`` / ``bitsandbytes_fp4`` (4-bit), ``bitsandbytes_int8``,
``torchao_int8`` / ``torchao_fp8`` (weight-only); the reference trainer's newer names
(``torchao_int8_w8a16``, ``torchao_fp8_w8a16``) are the same torchao methods. Its methods we
do not run (``NOT_RUN``: NVFP4, comfy-kitchen) are refused naming the field and why.
"""
from __future__ import annotations

from dataclasses import dataclass

from backend.core.messages import Msg

# method -> (backend package, bits per quantized weight)
METHODS = {
    "bitsandbytes_nf4": ("bitsandbytes", 4),
    "bitsandbytes_fp4": ("bitsandbytes", 4),
    "bitsandbytes_int8": ("bitsandbytes", 8),
    "torchao_int8": ("torchao", 8),
    "torchao_fp8": ("torchao", 8),
}
# Other spellings of the same methods, the reference trainer's among them: since
# DiffSynth-Studio 2.1.2 its torchao methods name the activations' precision too
# (w8a16: 8-bit weights, 16-bit activations -- torchao's weight-only configs, ours).
ALIASES = {"bnb_nf4": "bitsandbytes_nf4", "nf4": "bitsandbytes_nf4",
           "bnb_fp4": "bitsandbytes_fp4", "fp4": "bitsandbytes_fp4",
           "bnb_int8": "bitsandbytes_int8", "bitsandbytes_8bit": "bitsandbytes_int8",
           "int8": "torchao_int8", "torchao_int8_weight_only": "torchao_int8",
           "torchao_int8_w8a16": "torchao_int8",
           "fp8": "torchao_fp8", "float8": "torchao_fp8", "torchao_float8": "torchao_fp8",
           "torchao_float8_weight_only": "torchao_fp8", "torchao_fp8_w8a16": "torchao_fp8"}
# The reference's methods ZeroLoRA does not run, each with why (refused naming the field,
# never dropped: a run that asked for a quantized base never trains an unquantized one).
NOT_RUN = {
    "torchao_nvfp4_w4a16": Msg("validation.quant.why_nvfp4"),
    "comfy_kitchen_int8_w8a8": Msg("validation.quant.why_comfy"),
    "comfy_kitchen_fp8_w8a8": Msg("validation.quant.why_comfy"),
}
COMPONENT_FOLDERS = ("transformer", "text_encoder", "vae")
# The reference's model names (its video scripts' --fp8_models / --offload_models dit).
MODEL_NAMES = {"dit": "transformer", "transformer": "transformer",
               "text_encoder": "text_encoder", "vae": "vae"}


@dataclass(frozen=True)
class QuantEntry:
    model_id: str
    glob: str
    method: str
    skip: tuple[str, ...] | None  # None: the family's default skip list
    field: str = "quant_options"  # the option it came from

    @property
    def component(self) -> str:
        """The component the entry quantizes, from its glob's folder (a glob without one
        names the trained component)."""
        head = self.glob.split("/", 1)[0] if "/" in self.glob else ""
        return head if head in COMPONENT_FOLDERS else "transformer"

    @property
    def backend(self) -> str:
        return METHODS[self.method][0]

    @property
    def bits(self) -> int:
        return METHODS[self.method][1]


def parse_quant_options(text: str | None, fp8_models: str | None = None
                        ) -> tuple[list[QuantEntry], list[Msg]]:
    """(entries, problems) of ``quant_options`` and ``fp8_models``; each problem names its
    field, the entry and what is allowed."""
    entries: list[QuantEntry] = []
    problems: list[Msg] = []
    allowed = " | ".join(list(METHODS) + [a for a in ALIASES if a.endswith("_w8a16")])
    for raw in (text or "").split(";"):
        raw = raw.strip()
        if not raw:
            continue
        # The glob may hold '/', so split the method off the right: model_id:glob:method[/skip]
        head, sep, tail = raw.rpartition(":")
        if not sep or head.count(":") < 1:
            problems.append(_problem("quant_options", Msg(
                "validation.quant.entry_form", got=repr(raw), allowed=allowed)))
            continue
        method, slash, skip = tail.partition("/")
        model_id, _, glob = head.partition(":")
        method = ALIASES.get(method.strip(), method.strip())
        if method in NOT_RUN:
            problems.append(_problem("quant_options", Msg(
                "validation.quant.not_run", method=method, why=NOT_RUN[method], got=repr(raw),
                allowed=allowed)))
            continue
        if method not in METHODS:
            problems.append(_problem("quant_options", Msg(
                "validation.quant.unknown_method", entry=repr(raw), got=repr(method),
                allowed=allowed)))
            continue
        names = tuple(s.strip() for s in skip.split(",") if s.strip()) if slash else None
        entries.append(QuantEntry(model_id.strip(), glob.strip(), method, names))
    for raw in _list_entries(fp8_models):
        raw = raw.strip()
        if not raw:
            continue
        model_id, sep, glob = raw.partition(":")
        if not sep:  # a model's name, as the reference's video scripts write it
            name = MODEL_NAMES.get(raw)
            if name is None:
                problems.append(_problem("fp8_models", Msg(
                    "validation.quant.fp8_entry_form", got=repr(raw),
                    names=" | ".join(MODEL_NAMES))))
                continue
            model_id, glob = "", f"{name}/*"
        entries.append(QuantEntry(model_id, glob, "torchao_fp8", None, "fp8_models"))
    seen: dict[str, str] = {}
    for e in entries:
        if e.component in seen and seen[e.component] != e.method:
            problems.append(_problem("quant_options", Msg(
                "validation.quant.two_methods", component=e.component,
                first=seen[e.component], second=e.method)))
        seen.setdefault(e.component, e.method)
    return entries, problems


def _problem(field: str, problem: Msg) -> Msg:
    """``field: problem`` (``backend.config.errors.field_problem``, which this module, imported
    by the schema, cannot import)."""
    return Msg("validation.field_problem", field=field, problem=problem)


def _list_entries(text: str | None) -> list[str]:
    """The entries of a ``fp8_models`` / ``offload_models`` list: separated by ``,`` (the
    reference's video scripts) or ``;`` (its newer lists, as ``quant_options``)."""
    return [e for part in (text or "").split(";") for e in part.split(",")]


def entries_for(cfg, component: str) -> list[QuantEntry]:
    entries, _ = parse_quant_options(getattr(cfg, "quant_options", None),
                                     getattr(cfg, "fp8_models", None))
    return [e for e in entries if e.component == component]


def offloaded_models(cfg) -> list[str]:
    """The components ``offload_models`` names (by model id:glob folder, or by name)."""
    out = []
    for raw in _list_entries(getattr(cfg, "offload_models", None)):
        raw = raw.strip()
        if not raw:
            continue
        glob = raw.partition(":")[2] or raw
        head = glob.split("/", 1)[0]
        out.append(MODEL_NAMES.get(head, raw))
    return out


def combination_problems(c: dict) -> list[Msg]:
    """The low-VRAM rules of ``cross_field_problems`` (``c``: every field, merged)."""
    p: list[Msg] = []
    entries, problems = parse_quant_options(c.get("quant_options"), c.get("fp8_models"))
    p += problems
    zs, n = c["zero_stage"], c["num_processes"]
    quant_tr = [e for e in entries if e.component == "transformer"]
    if quant_tr and zs == 3:
        p.append(_problem(quant_tr[0].field, Msg("validation.lowvram.zero3_quantized",
                                                 method=quant_tr[0].method)))
    for name in ("enable_model_cpu_offload", "enable_optimizer_cpu_offload"):
        if c.get(name) and zs > 0:
            other = ("offload_param_device" if name == "enable_model_cpu_offload"
                     else "offload_optimizer_device")
            p.append(_problem(name, Msg("validation.lowvram.without_deepspeed", zs=zs,
                                        other=other)))
        elif c.get(name) and n > 1:
            p.append(_problem(name, Msg("validation.lowvram.one_gpu", n=n)))
    if c.get("enable_model_cpu_offload") and any(e.backend == "torchao" for e in quant_tr):
        p.append(_problem("enable_model_cpu_offload", Msg(
            "validation.lowvram.torchao_stream", source=quant_tr[0].field)))
    dora = c.get("use_dora") or str(c.get("lora_type", "")).lower() == "dora"
    if dora and quant_tr:
        p.append(_problem(quant_tr[0].field, Msg("validation.lowvram.dora_quantized",
                                                 method=quant_tr[0].method)))
    # enable_optimizer_cpu_offload steps adamw only: 8-bit spellings (the reference's too)
    # here, the schema's other choices in ``backend.config.rules.option_problems``.
    optimizer = str(c.get("optimizer", "") or "").lower()
    if c.get("enable_optimizer_cpu_offload") and ("8bit" in optimizer or "8_bit" in optimizer):
        p.append(_problem("enable_optimizer_cpu_offload", Msg(
            "validation.lowvram.optimizer_8bit", optimizer=str(c.get("optimizer")))))
    return p
