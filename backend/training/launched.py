"""How accelerate launched a stage, against the options the stage was given.

Some options of the run schema are set by the launch, not by the stage: mixed precision and
the DeepSpeed settings (``zero_stage``, ``offload_optimizer_device``,
``offload_param_device``) come from the accelerate config (and its DeepSpeed JSON) that
``accelerate launch`` read. The run plan writes both from one config, so under the runner
they agree. A person running the stage by hand may give them on the command line or in
``--config`` too; then:

- ``mixed_precision`` is applied (``accelerator_kwargs``), and refused only where the
  launch's DeepSpeed config fixes another precision;
- ``zero_stage`` and the offload devices cannot be changed from inside a launched process:
  a value that differs from what was launched is refused (``launch_problems``), naming the
  launch config to change or the ``accelerate launch`` flags that give it.

Options the user did not give (schema defaults) never contradict the launch: the launch
decides them. ``what_ran`` is what the stage records in ``training_args.json``.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from backend.core.messages import Msg

# The schema options a launch decides, and the accelerate launch flag of each.
LAUNCH_OPTIONS = {"mixed_precision": "--mixed_precision", "zero_stage": "--zero_stage",
                  "offload_optimizer_device": "--offload_optimizer_device",
                  "offload_param_device": "--offload_param_device"}


def _launcher_cmdline() -> tuple[list[str], str] | None:
    """The command line and working directory of the ``accelerate launch`` process that
    started this one (an ancestor: the launcher itself, or torchrun inside it)."""
    try:
        import psutil
        proc = psutil.Process().parent()
        for _ in range(6):
            if proc is None:
                return None
            cmd = proc.cmdline()
            text = " ".join(cmd)
            if "accelerate" in text and "launch" in text and "backend.stages" in text:
                return cmd, proc.cwd()
            proc = proc.parent()
    except Exception:  # noqa: BLE001 - an unreadable /proc only costs the file's name
        return None
    return None


def launch_description() -> str:
    """The launch in words: which accelerate config file it read (``--config_file``, else
    accelerate's default config, else none) and the launch flags that set our options."""
    found = _launcher_cmdline()
    if found is None:
        if "ACCELERATE_MIXED_PRECISION" not in os.environ:
            return "no accelerate launch (python -m without a launcher)"
        return "accelerate launch (its command line is not readable here)"
    cmd, cwd = found
    # The launcher's own arguments: after ``accelerate launch`` (or ``python -m
    # accelerate.commands.launch``), up to the stage's ``-m backend.stages...``.
    first = next((i + 1 for i, a in enumerate(cmd) if a.endswith("accelerate.commands.launch")
                  or (a == "launch" and i and cmd[i - 1].endswith("accelerate"))), 0)
    last = next((i for i, a in enumerate(cmd) if i >= first and a in ("-m", "--module")),
                len(cmd))
    cmd = cmd[first:last]
    config = None
    for i, arg in enumerate(cmd):
        if arg == "--config_file" and i + 1 < len(cmd):
            config = cmd[i + 1]
        elif arg.startswith("--config_file="):
            config = arg.split("=", 1)[1]
    if config:
        path = Path(config)
        text = f"--config_file {path if path.is_absolute() else Path(cwd) / path}"
    else:
        try:
            from accelerate.commands.config import default_config_file
        except ImportError:  # pragma: no cover - accelerate is a requirement
            default_config_file = ""
        text = (f"accelerate's default config {default_config_file}"
                if default_config_file and os.path.isfile(default_config_file)
                else "no accelerate config file (accelerate's defaults)")
    flags = []
    for i, a in enumerate(cmd):
        if a.split("=", 1)[0] in ("--use_deepspeed", "--deepspeed_config_file",
                                  *LAUNCH_OPTIONS.values()):
            value = cmd[i + 1] if "=" not in a and a != "--use_deepspeed" and i + 1 < len(
                cmd) else None
            flags.append(a if value is None else f"{a} {value}")
    return text + (f" with {' '.join(flags)}" if flags else "")


def accelerator_kwargs(cfg, option_sources: dict[str, str]) -> dict[str, Any]:
    """``Accelerator`` arguments that apply the user's own options over the launch's."""
    if "mixed_precision" in option_sources:
        return {"mixed_precision": cfg.mixed_precision}
    return {}


def what_ran(accelerator) -> dict[str, Any]:
    """The launch-decided options as this process runs them (from accelerate's state and
    the DeepSpeed config it loaded)."""
    plugin = accelerator.state.deepspeed_plugin
    ds = plugin.deepspeed_config if plugin is not None else {}
    zero = ds.get("zero_optimization", {}) or {}
    ran: dict[str, Any] = {"mixed_precision": str(accelerator.mixed_precision),
                           "zero_stage": int(zero.get("stage", 0) or 0) if plugin else 0}
    for block, name in (("offload_optimizer", "offload_optimizer_device"),
                        ("offload_param", "offload_param_device")):
        device = (zero.get(block) or {}).get("device") if plugin else None
        ran[name] = str(device).lower() if device not in (None, "") else "none"
    return ran


def launch_problems(cfg, option_sources: dict[str, str], ran: dict[str, Any]) -> list[Msg]:
    """``field: problem (got X; allowed Y)`` for each option the user gave that differs
    from what was launched."""
    problems = []
    no_deepspeed_asked = ("zero_stage" in option_sources and cfg.zero_stage > 0
                          and ran["zero_stage"] == 0)
    for name, flag in LAUNCH_OPTIONS.items():
        if name not in option_sources:
            continue
        want, got = getattr(cfg, name), ran[name]
        if str(want) == str(got) or (no_deepspeed_asked and name.startswith("offload_")):
            continue  # (the offload devices come with the DeepSpeed launch asked for)
        where = option_sources[name]
        if name == "zero_stage" and want == 0:
            how = Msg("note.launch_how_no_deepspeed")
        elif name == "mixed_precision":
            how = Msg("note.launch_how_precision", flag=flag, want=want)
        elif ran["zero_stage"] == 0 and name == "zero_stage":
            how = Msg("note.launch_how_zero", want=want, offload="".join(
                f" {LAUNCH_OPTIONS[o]} {getattr(cfg, o)}"
                for o in ("offload_optimizer_device", "offload_param_device")
                if getattr(cfg, o) != "none"))
        else:
            how = Msg("note.launch_how_decides", flag=flag, want=want)
        problems.append(Msg("note.launch_problem", name=name, got=got, want=want, where=where,
                            how=how))
    return problems
