"""Plain-language diagnosis of a failed stage, from its exit status and log text.

The UI shows, for a failed stage: the exit code in words, the diagnoses found here (what went
wrong and which settings to change, tailored to the run's config when it is known), the
stage's own ``end`` reason and the last log lines. The full traceback stays in the log.

Only the text of the stage's latest attempt is read (a resumed run appends to its log), and
the runner's own ``[zerolora]`` lines are ignored, except the supervisor's memory note
(``backend.jobs.memory``): "out of host memory" is claimed for a SIGKILL only with its
evidence (or an allocation failure in the log).

Under ``accelerate launch`` the stage runs in a child of the launcher, which ends every
failure with a traceback of its own (``CalledProcessError`` / torch elastic's
``ChildFailedError``) and exit code 1. ``split_launcher`` sets that block apart, so messages
show the stage's own error; ``stage_exit_code`` reads the stage's own exit status (its
code, or the signal that ended it) from the launcher's report.
"""
from __future__ import annotations

import re
import signal
from dataclasses import asdict, dataclass, field
from typing import Any, Callable

from backend.core.messages import Msg
from backend.jobs.memory import NO_OOM_NOTE, OOM_NOTE
from backend.jobs.watch import LOG_PREFIX, STAGE_HEADER
from backend.core.rundir import DEEPSPEED_JSON
from backend.config.meta import field_meta


@dataclass
class Diagnosis:
    kind: str                 # cuda_oom | host_oom | disk_full | missing_model | ...
    # Messages (backend.core.messages): their English as the string, Chinese on the page.
    title: str                # one line, e.g. "The GPU ran out of memory (CUDA out of memory)"
    explanation: str          # what it means, in plain language
    fixes: list[str]          # what to do, most effective first
    settings: list[str] = field(default_factory=list)  # config fields the fixes change
    evidence: str | None = None  # the log line that matched

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


# ----------------------------------------------------------------------------- exit status


def signal_name(num: int) -> str:
    try:
        return signal.Signals(num).name
    except ValueError:
        return f"signal {num}"


def exit_code_text(code: int | None) -> Msg:
    """The exit status in words: 'exited with code 1', 'killed by signal 9 (SIGKILL)'."""
    if code is None:
        return Msg("exit.lost")
    if code == 0:
        return Msg("exit.ok")
    if code < 0:
        return Msg("exit.signal", num=-code, name=signal_name(-code))
    if 128 < code < 160:
        return Msg("exit.launcher_signal", exit=code, num=code - 128,
                   name=signal_name(code - 128))
    return Msg("exit.code", exit=code)


def killed_by_sigkill(code: int | None) -> bool:
    return code in (-9, 137)


# ----------------------------------------------------------------------------- the launcher
MEMORY_NOTE = f"{LOG_PREFIX} memory: "
_LAUNCHER_FRAME = re.compile(r"accelerate[/\\]commands[/\\](launch|accelerate_cli)\.py|"
                             r"torch[/\\]distributed[/\\](run|launch)\.py")
_ELASTIC_LOG = re.compile(r"^[EWI]\d{4} .*torch[/.]distributed[/.]elastic")


def split_launcher(text: str) -> tuple[str, str]:
    """(the stage's own output, the launcher's report): the launcher's closing traceback and
    torch elastic's log lines are set apart from what the stage printed."""
    lines = text.splitlines()
    cut = len(lines)
    for i in range(len(lines) - 1, -1, -1):
        if lines[i].startswith("Traceback (most recent call last):"):
            block = lines[i:cut]
            if any(_LAUNCHER_FRAME.search(b) for b in block):
                cut = i
            break
    stage = [ln for ln in lines[:cut] if not _ELASTIC_LOG.match(ln)]
    launcher = [ln for ln in lines[:cut] if _ELASTIC_LOG.match(ln)] + lines[cut:]
    return "\n".join(stage), "\n".join(launcher)


def stage_exit_code(code: int | None, log_text: str) -> int | None:
    """The stage process's own exit status when a launcher reported it (negative: the signal
    that ended it), else ``code``. Reads the latest attempt's launcher report:
    ``died with <Signals.SIGKILL: 9>`` / ``returned non-zero exit status 2`` (one process),
    or the root cause's ``exitcode : -9`` (torch elastic)."""
    if not code:
        return code
    _, launcher = split_launcher(attempt_text(log_text))
    if not launcher:
        return code
    root = launcher.split("Root Cause", 1)[-1] if "Root Cause" in launcher else launcher
    for pattern, sign in ((r"died with <Signals\.\w+: (\d+)>", -1),
                          (r"returned non-zero exit status (-?\d+)", 1),
                          (r"exitcode\s*:\s*(-?\d+)", 1),
                          (r"failed \(exitcode: (-?\d+)\)", 1)):
        found = re.findall(pattern, root)
        if found:
            return sign * int(found[-1])
    return code


def memory_note(log_text: str) -> str | None:
    """The supervisor's memory note of the latest attempt (``backend.jobs.memory``)."""
    start = log_text.rfind(STAGE_HEADER)
    text = log_text[start:] if start >= 0 else log_text
    notes = [ln[len(MEMORY_NOTE):] for ln in text.splitlines() if ln.startswith(MEMORY_NOTE)]
    return notes[-1] if notes else None


def stage_text(log_text: str) -> str:
    """The latest attempt's output as the stage printed it (no runner lines, no launcher
    traceback)."""
    return split_launcher(attempt_text(log_text))[0]


# ----------------------------------------------------------------------------- config


def parse_config(config_yaml: str | None) -> dict[str, Any]:
    if not config_yaml:
        return {}
    try:
        import yaml

        data = yaml.safe_load(config_yaml)
    except Exception:  # noqa: BLE001 - a broken YAML just means generic advice
        return {}
    return data if isinstance(data, dict) else {}


def _get(cfg: dict, name: str) -> Any:
    """A setting of the run, or the schema's default when its config leaves it out."""
    if name in cfg:
        return cfg[name]
    return field_meta(name)["default"]


def _on(cfg: dict, key: str) -> bool:
    return bool(_get(cfg, key))


def _next_choice(name: str, now: Any) -> str | None:
    """The schema's next choice of ``name`` after ``now`` (offload modes go none -> model ->
    sequential); None after the last one or for a value that is not a choice."""
    choices = [str(c) for c in field_meta(name)["choices"]]
    now = str(now) if now else str(field_meta(name)["default"])
    i = choices.index(now) if now in choices else -1
    return choices[i + 1] if 0 <= i < len(choices) - 1 else None


# ----------------------------------------------------------------------------- rules


def _cuda_oom(cfg: dict, evidence: str, stage: str | None = None) -> Diagnosis:
    if stage == "data_process":
        return _cuda_oom_encoding(cfg, evidence)
    if stage == "sample":
        return _cuda_oom_sampling(cfg, evidence)
    fixes: list[str] = []
    settings: list[str] = []
    zs = cfg.get("zero_stage")
    off_param = _get(cfg, "offload_param_device")
    if zs != 3 or off_param in (None, "none"):
        fixes.append(Msg("diagnosis.fix_zero3"))
        settings += ["zero_stage", "offload_param_device", "offload_optimizer_device"]
    if not _on(cfg, "use_gradient_checkpointing"):
        fixes.append(Msg("diagnosis.fix_gradient_checkpointing"))
        settings.append("use_gradient_checkpointing")
    elif zs == 3 and _on(cfg, "ds_activation_checkpointing") and not _on(
            cfg, "cpu_checkpointing"):
        fixes.append(Msg("diagnosis.fix_cpu_checkpointing"))
        settings.append("cpu_checkpointing")
    elif not _on(cfg, "use_gradient_checkpointing_offload"):
        fixes.append(Msg("diagnosis.fix_checkpointing_offload"))
        settings.append("use_gradient_checkpointing_offload")
    _smaller_images(cfg, fixes, settings, Msg("diagnosis.verb_train"),
                    Msg("diagnosis.why_image_tokens"))
    rank = cfg.get("lora_rank")
    if cfg.get("trainable_models"):  # a full fine-tune: no LoRA; Adam's states of every weight
        if _get(cfg, "offload_optimizer_device") != "nvme":
            fixes.append(Msg("diagnosis.fix_full_nvme"))
            settings += ["offload_optimizer_device", "offload_nvme_path"]
        fixes.append(Msg("diagnosis.fix_full_to_lora"))
        settings.append("trainable_models")
    elif isinstance(rank, int):
        if rank > 4:
            fixes.append(Msg("diagnosis.fix_lora_rank_now", rank=rank, half=rank // 2))
            settings.append("lora_rank")
    else:
        fixes.append(Msg("diagnosis.fix_lora_rank"))
        settings.append("lora_rank")
    return _oom(fixes, settings, evidence)


def _smaller_images(cfg: dict, fixes: list[str], settings: list[str], verb: Msg,
                    why: Msg) -> None:
    """Advice to use smaller images: the fixed size when set, else max_pixels (halved)."""
    if cfg.get("height") and cfg.get("width"):
        h, w = int(cfg["height"]), int(cfg["width"])
        fixes.append(Msg("diagnosis.fix_fixed_size", verb=verb, h=h, w=w,
                         h2=max(16, h // 2 // 16 * 16), w2=max(16, w // 2 // 16 * 16), why=why))
        settings += ["height", "width"]
        return
    mp = cfg.get("max_pixels")
    now = Msg("diagnosis.now_try", now=mp, then=mp // 2) if isinstance(mp, int) and mp > 0 \
        else Msg("diagnosis.max_pixels_example")
    fixes.append(Msg("diagnosis.fix_max_pixels", now=now, why=why))
    settings.append("max_pixels")


def _oom(fixes: list[str], settings: list[str], evidence: str) -> Diagnosis:
    fixes.append(Msg("diagnosis.fix_other_programs"))
    return Diagnosis(
        "cuda_oom", Msg("diagnosis.cuda_oom"), Msg("diagnosis.cuda_oom_explained"),
        fixes, settings, evidence)


def _cuda_oom_encoding(cfg: dict, evidence: str) -> Diagnosis:
    """Stage 1 holds the text encoder and the VAE, never the transformer."""
    fixes: list[str] = []
    settings: list[str] = []
    now = _get(cfg, "data_process_offload")
    nxt = _next_choice("data_process_offload", now)
    if nxt:
        fixes.append(Msg("diagnosis.fix_offload_encoders", now=now, then=nxt))
        settings.append("data_process_offload")
    _smaller_images(cfg, fixes, settings, Msg("diagnosis.verb_encode"),
                    Msg("diagnosis.why_vae_area"))
    return _oom(fixes, settings, evidence)


def _cuda_oom_sampling(cfg: dict, evidence: str) -> Diagnosis:
    """The sample stage holds the whole pipeline: transformer, text encoder and VAE."""
    fixes: list[str] = []
    settings: list[str] = []
    now = _get(cfg, "sample_cpu_offload")
    now = {True: "model", False: "none"}.get(now, now)  # the schema's old boolean spelling
    nxt = _next_choice("sample_cpu_offload", now)
    if nxt:
        fixes.append(Msg("diagnosis.fix_offload_pipeline", now=now, then=nxt))
        settings.append("sample_cpu_offload")
    if not _on(cfg, "sample_vae_tiling"):
        fixes.append(Msg("diagnosis.fix_vae_tiling"))
        settings.append("sample_vae_tiling")
    h, w = cfg.get("sample_height"), cfg.get("sample_width")
    if h and w:
        fixes.append(Msg("diagnosis.fix_smaller_samples", h=h, w=w))
        settings += ["sample_height", "sample_width"]
    return _oom(fixes, settings, evidence)


def _host_oom(cfg: dict, evidence: str, stage: str | None = None) -> Diagnosis:
    fixes = [Msg("diagnosis.fix_close_programs")]
    settings: list[str] = []
    if cfg.get("dataset_num_workers"):
        fixes.append(Msg("diagnosis.fix_fewer_workers", now=cfg["dataset_num_workers"]))
        settings.append("dataset_num_workers")
    if "nvme" not in (cfg.get("offload_param_device"), cfg.get("offload_optimizer_device")) \
            and (cfg.get("offload_param_device") == "cpu"
                 or cfg.get("offload_optimizer_device") == "cpu"):
        fixes.append(Msg("diagnosis.fix_offload_nvme"))
        settings += ["offload_param_device", "offload_optimizer_device", "offload_nvme_path"]
    if _on(cfg, "use_gradient_checkpointing_offload") or _on(cfg, "cpu_checkpointing"):
        fixes.append(Msg("diagnosis.fix_activation_offload_ram"))
        settings += ["use_gradient_checkpointing_offload", "cpu_checkpointing"]
    if _on(cfg, "pin_memory"):
        fixes.append(Msg("diagnosis.fix_pin_memory"))
        settings.append("pin_memory")
    fixes.append(Msg("diagnosis.fix_max_pixels_ram"))
    settings.append("max_pixels")
    return Diagnosis(
        "host_oom", Msg("diagnosis.host_oom"), Msg("diagnosis.host_oom_explained"),
        fixes, settings, evidence)


def _killed(cfg: dict, evidence: str, stage: str | None = None) -> Diagnosis:
    return Diagnosis(
        "killed", Msg("diagnosis.killed"), Msg("diagnosis.killed_explained"),
        [Msg("diagnosis.fix_what_stops"), Msg("diagnosis.fix_resume")],
        ["save_steps"], evidence)


def _disk_full(cfg: dict, evidence: str, stage: str | None = None) -> Diagnosis:
    return Diagnosis(
        "disk_full", Msg("diagnosis.disk_full"), Msg("diagnosis.disk_full_explained"),
        [Msg("diagnosis.fix_free_disk"), Msg("diagnosis.fix_fewer_checkpoints"),
         Msg("diagnosis.fix_larger_disk")],
        ["save_steps", "keep_last_n_checkpoints"], evidence)


# The file a "File too large" line names: the stage's own message, or Python's OSError.
_TOO_LARGE_FILE = (re.compile(r"file size limit reached writing (.+?): "),
                   re.compile(r"\[Errno 27\] File too large: '([^']+)'"))


def _file_too_large(cfg: dict, evidence: str, stage: str | None = None) -> Diagnosis:
    found = [m.group(1) for pat in _TOO_LARGE_FILE for m in [pat.search(evidence)] if m]
    what = Msg("diagnosis.writing_file", file=found[0]) if found else \
        Msg("diagnosis.writing_a_file")
    return Diagnosis(
        "file_too_large", Msg("diagnosis.file_too_large"),
        Msg("diagnosis.file_too_large_explained", what=what),
        [Msg("diagnosis.fix_ulimit"), Msg("diagnosis.fix_file_system")],
        [], evidence)


def _missing_model(cfg: dict, evidence: str, stage: str | None = None) -> Diagnosis:
    captioner = str(_get(cfg, "captioner_path") or "").strip()
    if captioner and (stage == "caption" or captioner in evidence):
        # The caption stage loads captioner_path (when set) instead of the model sources.
        return _missing_captioner(cfg, evidence, captioner)
    fixes = [Msg("diagnosis.fix_model_source")]
    if _on(cfg, "offline"):
        fixes.append(Msg("diagnosis.fix_offline_model"))
    else:
        fixes.append(Msg("diagnosis.fix_download_model"))
    fixes.append(Msg("diagnosis.fix_incomplete_file"))
    return Diagnosis(
        "missing_model", Msg("diagnosis.missing_model"),
        Msg("diagnosis.missing_model_explained"),
        fixes, ["model_id_with_origin_paths", "model_paths", "models_dir", "offline"],
        evidence)


def _missing_captioner(cfg: dict, evidence: str, captioner: str) -> Diagnosis:
    fixes = [Msg("diagnosis.fix_captioner_path", path=captioner)]
    if _on(cfg, "offline"):
        fixes.append(Msg("diagnosis.fix_offline_captioner"))
    else:
        fixes.append(Msg("diagnosis.fix_download_captioner"))
    fixes.append(Msg("diagnosis.fix_empty_captioner"))
    return Diagnosis(
        "missing_model", Msg("diagnosis.missing_captioner"),
        Msg("diagnosis.missing_captioner_explained"),
        fixes, ["captioner_path", "models_dir", "offline"], evidence)


def _deepspeed_config(cfg: dict, evidence: str, stage: str | None = None) -> Diagnosis:
    return Diagnosis(
        "deepspeed_config", Msg("diagnosis.deepspeed_config"),
        Msg("diagnosis.deepspeed_config_explained",
            file=DEEPSPEED_JSON.format(stage='<stage>')),
        [Msg("diagnosis.fix_preset"), Msg("diagnosis.fix_offload_stages"),
         Msg("diagnosis.fix_batch_size"), Msg("diagnosis.fix_stage1_plain")],
        ["zero_stage", "offload_param_device", "offload_optimizer_device", "num_processes",
         "gradient_accumulation_steps"], evidence)


def _no_gpu(cfg: dict, evidence: str, stage: str | None = None) -> Diagnosis:
    return Diagnosis(
        "no_gpu", Msg("diagnosis.no_gpu"), Msg("diagnosis.no_gpu_explained"),
        [Msg("diagnosis.fix_gpu_ids"), Msg("diagnosis.fix_num_processes")],
        ["gpu_ids", "num_processes"], evidence)


def _port_in_use(cfg: dict, evidence: str, stage: str | None = None) -> Diagnosis:
    return Diagnosis(
        "port_in_use", Msg("diagnosis.port_in_use"), Msg("diagnosis.port_in_use_explained"),
        [Msg("diagnosis.fix_port")],
        ["main_process_port"], evidence)


def _build_failed(cfg: dict, evidence: str, stage: str | None = None) -> Diagnosis:
    return Diagnosis(
        "op_build", Msg("diagnosis.op_build"), Msg("diagnosis.op_build_explained"),
        [Msg("diagnosis.fix_compiler"), Msg("diagnosis.fix_turn_off_op")],
        ["offload_optimizer_device"], evidence)


Rule = tuple[str, re.Pattern, Callable[[dict, str, "str | None"], Diagnosis]]
RULES: list[Rule] = [
    ("cuda_oom", re.compile(
        r"CUDA out of memory|torch\.(cuda\.)?OutOfMemoryError|CUDA error: out of memory|"
        r"CUBLAS_STATUS_ALLOC_FAILED|HIP out of memory|cudaErrorMemoryAllocation"), _cuda_oom),
    ("file_too_large", re.compile(
        r"file size limit reached writing|File too large|FileTooLarge|os error 27\b|"
        r"\[Errno 27\]|\bEFBIG\b", re.I), _file_too_large),
    ("disk_full", re.compile(
        r"No space left on device|\bENOSPC\b|\[Errno 28\]|Disk quota exceeded|"
        r"PytorchStreamWriter failed writing", re.I), _disk_full),
    ("missing_model", re.compile(
        r"does not appear to have a file named|Error no file named|"
        r"is not a local folder and is not a valid model identifier|LocalEntryNotFoundError|"
        r"Cannot find the requested files in the local cache|"
        r"(FileNotFoundError|No such file or directory).*(\.safetensors|model_index\.json|"
        r"config\.json|tokenizer|diffusion_pytorch_model|/models/)|"
        r"SafetensorError: Error while deserializing|HeaderTooLarge|"
        r"\bmodel files? (?:is |are )?(?:missing|not found)", re.I), _missing_model),
    ("deepspeed_config", re.compile(
        r"DeepSpeedConfigError|deepspeed[/.]runtime[/.](zero[/.])?config|"
        r"Check batch related parameters|train_batch_size is not equal to|"
        r"DeepSpeed config values (that )?mismatch|DeepSpeedZeroConfig|"
        r"Invalid DeepSpeed config|ds_config.*(invalid|error)", re.I), _deepspeed_config),
    ("no_gpu", re.compile(
        r"No CUDA GPUs are available|Found no NVIDIA driver|invalid device ordinal|"
        r"Torch not compiled with CUDA enabled|NVIDIA driver on your system is too old",
        re.I), _no_gpu),
    ("port_in_use", re.compile(r"Address already in use|EADDRINUSE", re.I), _port_in_use),
    ("op_build", re.compile(
        r"Error building extension|ninja: build stopped|CUDA_HOME does not exist|"
        r"MissingCUDAException", re.I), _build_failed),
    ("host_oom", re.compile(
        r"DefaultCPUAllocator: (can't allocate memory|not enough memory)|\bMemoryError\b|"
        r"std::bad_alloc|Cannot allocate memory|^" + re.escape(OOM_NOTE), re.M), _host_oom),
    ("killed", re.compile(r"^" + re.escape(NO_OOM_NOTE), re.M), _killed),
]


def attempt_text(log_text: str) -> str:
    """The log of the stage's latest attempt, without the runner's own lines."""
    start = log_text.rfind(STAGE_HEADER)
    if start >= 0:
        log_text = log_text[start:]
    return "\n".join(line for line in log_text.splitlines()
                     if not line.startswith(LOG_PREFIX))


def diagnose(exit_code: int | None, log_text: str, *, end_reason: str | None = None,
             stop_requested: bool = False, config: dict | None = None,
             config_yaml: str | None = None, stage: str | None = None) -> list[Diagnosis]:
    """Known failures found in a stage's exit status and log, most likely first. ``stage``
    (data_process, train, sample) picks the advice: each stage holds different models."""
    exit_code = stage_exit_code(exit_code, log_text)
    if exit_code == 0 or stop_requested:
        return []
    cfg = config if config is not None else parse_config(config_yaml)
    text = stage_text(log_text)
    if end_reason:
        text += "\n" + end_reason
    note = memory_note(log_text)
    if killed_by_sigkill(exit_code):
        # Out of memory only with evidence: the supervisor's note, or the log's own words.
        text += "\n" + (note or f"{NO_OOM_NOTE}no memory record for this attempt "
                                f"({exit_code_text(exit_code)})")
    found: list[Diagnosis] = []
    for kind, pattern, build in RULES:
        match = None
        for match in pattern.finditer(text):
            pass  # the last match: closest to the failure
        if match is None:
            continue
        line_start = text.rfind("\n", 0, match.start()) + 1
        line_end = text.find("\n", match.end())
        evidence = text[line_start: line_end if line_end >= 0 else len(text)].strip()[:300]
        found.append(build(cfg, evidence, stage))
    if killed_by_sigkill(exit_code):
        # SIGKILL without a stop request: what ended it comes first, whatever else the log
        # says (out of memory with evidence, else killed from outside).
        if any(d.kind == "host_oom" for d in found):
            found = [d for d in found if d.kind != "killed"]
        found.sort(key=lambda d: d.kind not in ("host_oom", "killed"))
    return found


ERROR_LINE = re.compile(r"^\s*(\w+\.)*\w*(Error|Exception|Exit)\b.*|^\s*error\b.*", re.I)
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


def clean_lines(text: str) -> list[str]:
    """Log lines as a person sees them: a progress bar's carriage-return rewrites collapsed to
    their last state, colour codes removed."""
    lines = []
    for raw in text.splitlines():
        raw = raw.rstrip("\r")
        if "\r" in raw:
            raw = raw.rsplit("\r", 1)[-1]
        lines.append(ANSI.sub("", raw))
    return lines


def last_error_line(log_text: str) -> str | None:
    """The stage's own last error line (never the launcher's closing traceback)."""
    lines = clean_lines(stage_text(log_text))
    # A ConfigError the stage printed ends the stage: its message (and first problem) is the
    # error, even where a traceback printed after it restates its first line.
    for i in range(len(lines) - 1, -1, -1):
        if lines[i].startswith("Invalid run config"):
            nxt = lines[i + 1].strip() if i + 1 < len(lines) else ""
            return f"{lines[i].strip()} {nxt}".strip()[:300]
    for line in reversed(lines):
        if ERROR_LINE.match(line) and line.strip():
            return line.strip()[:300]
    return None


def reason_line(stage: str, exit_code: int | None, log_text: str, *,
                end_reason: str | None = None, config_yaml: str | None = None) -> Msg:
    """One line for the run history: what failed and the most likely why (a message: the
    diagnosis's title, the stage's own ``end`` reason -- a message when the stage sent one
    -- or its last error line, another program's words)."""
    exit_code = stage_exit_code(exit_code, log_text)
    how = exit_code_text(exit_code)
    found = diagnose(exit_code, log_text, end_reason=end_reason, config_yaml=config_yaml,
                     stage=stage)
    if found:
        return Msg("note.stage_exit_why", stage=stage, how=how, why=found[0].title)
    why = end_reason or last_error_line(log_text)
    return Msg("note.stage_exit_why", stage=stage, how=how, why=why) if why else \
        Msg("note.stage_exit", stage=stage, how=how)


def summarize(stage: str, exit_code: int | None, log_text: str, *,
              end_reason: str | None = None, stop_requested: bool = False,
              config_yaml: str | None = None, last_lines: list[str] | None = None
              ) -> dict[str, Any]:
    """Everything the UI shows for a failed stage: its own exit status, error line and last
    lines (the launcher's closing traceback left in the log)."""
    exit_code = stage_exit_code(exit_code, log_text)
    found = diagnose(exit_code, log_text, end_reason=end_reason,
                     stop_requested=stop_requested, config_yaml=config_yaml, stage=stage)
    if last_lines is None:
        last_lines = clean_lines(stage_text(log_text))[-40:]
    own = end_reason or last_error_line(log_text)
    how = exit_code_text(exit_code)
    headline = (Msg("diagnosis.headline_title", stage=stage, how=how, title=found[0].title)
                if found else Msg("diagnosis.headline_why", stage=stage, how=how, why=own)
                if own else Msg("diagnosis.headline", stage=stage, how=how))
    return {
        "stage": stage,
        "exit_code": exit_code,
        "exit_text": exit_code_text(exit_code),
        "headline": headline,
        "diagnoses": [d.to_dict() for d in found],
        "end_reason": end_reason,
        "error_line": last_error_line(log_text),
        "last_lines": last_lines,
    }
