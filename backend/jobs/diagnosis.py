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

from backend.jobs.memory import NO_OOM_NOTE, OOM_NOTE
from backend.jobs.watch import LOG_PREFIX, STAGE_HEADER
from backend.core.rundir import DEEPSPEED_JSON
from backend.config.meta import field_meta


@dataclass
class Diagnosis:
    kind: str                 # cuda_oom | host_oom | disk_full | missing_model | ...
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


def exit_code_text(code: int | None) -> str:
    """The exit status in words: 'exited with code 1', 'killed by signal 9 (SIGKILL)'."""
    if code is None:
        return "has no exit code (its process was lost)"
    if code == 0:
        return "exited normally (code 0)"
    if code < 0:
        return f"was killed by signal {-code} ({signal_name(-code)})"
    if 128 < code < 160:
        return (f"exited with code {code} (a launcher's way of saying: killed by signal "
                f"{code - 128} ({signal_name(code - 128)}))")
    return f"exited with code {code}"


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
        fixes.append("Turn on DeepSpeed ZeRO-3 with parameter offload (zero_stage: 3, "
                     "offload_param_device: cpu, offload_optimizer_device: cpu; the low-VRAM "
                     "preset does this). Only the layers being computed stay on the GPU.")
        settings += ["zero_stage", "offload_param_device", "offload_optimizer_device"]
    if not _on(cfg, "use_gradient_checkpointing"):
        fixes.append("Turn on gradient checkpointing (use_gradient_checkpointing: true): "
                     "activations are recomputed instead of kept.")
        settings.append("use_gradient_checkpointing")
    elif zs == 3 and _on(cfg, "ds_activation_checkpointing") and not _on(
            cfg, "cpu_checkpointing"):
        fixes.append("Keep checkpointed activations in host RAM (cpu_checkpointing: true, "
                     "DeepSpeed's checkpointing under ZeRO-3).")
        settings.append("cpu_checkpointing")
    elif not _on(cfg, "use_gradient_checkpointing_offload"):
        fixes.append("Keep checkpointed activations in host RAM "
                     "(use_gradient_checkpointing_offload: true).")
        settings.append("use_gradient_checkpointing_offload")
    _smaller_images(cfg, fixes, settings, "Train",
                    "memory grows with the number of image tokens")
    rank = cfg.get("lora_rank")
    if isinstance(rank, int):
        if rank > 4:
            fixes.append(f"Lower lora_rank (now {rank}; try {rank // 2}).")
            settings.append("lora_rank")
    else:
        fixes.append("Lower lora_rank (e.g. 16 instead of 32).")
        settings.append("lora_rank")
    return _oom(fixes, settings, evidence)


def _smaller_images(cfg: dict, fixes: list[str], settings: list[str], verb: str,
                    why: str) -> None:
    """Advice to use smaller images: the fixed size when set, else max_pixels (halved)."""
    if cfg.get("height") and cfg.get("width"):
        h, w = int(cfg["height"]), int(cfg["width"])
        fixes.append(f"{verb} at a smaller fixed size (height/width now {h}x{w}; try "
                     f"{max(16, h // 2 // 16 * 16)}x{max(16, w // 2 // 16 * 16)}): {why}.")
        settings += ["height", "width"]
        return
    mp = cfg.get("max_pixels")
    now = f"now {mp}; try {mp // 2}" if isinstance(mp, int) and mp > 0 else \
        "e.g. 524288 instead of 1048576"
    fixes.append(f"Lower max_pixels ({now}): {why}.")
    settings.append("max_pixels")


def _oom(fixes: list[str], settings: list[str], evidence: str) -> Diagnosis:
    fixes.append("Make sure no other program holds GPU memory (nvidia-smi lists them).")
    return Diagnosis(
        "cuda_oom", "The GPU ran out of memory (CUDA out of memory)",
        "The stage asked the GPU for more memory than it had free. Settings that keep less "
        "on the GPU let the same run fit.", fixes, settings, evidence)


def _cuda_oom_encoding(cfg: dict, evidence: str) -> Diagnosis:
    """Stage 1 holds the text encoder and the VAE, never the transformer."""
    fixes: list[str] = []
    settings: list[str] = []
    now = _get(cfg, "data_process_offload")
    nxt = _next_choice("data_process_offload", now)
    if nxt:
        fixes.append(f"Offload the encoders (data_process_offload now {now}; try {nxt}): "
                     f"'model' puts the text encoder and the VAE on the GPU one at a time, "
                     f"'sequential' streams their weights from host RAM layer by layer. The "
                     f"cache is the same either way.")
        settings.append("data_process_offload")
    _smaller_images(cfg, fixes, settings, "Encode", "the VAE's memory grows with the image area")
    return _oom(fixes, settings, evidence)


def _cuda_oom_sampling(cfg: dict, evidence: str) -> Diagnosis:
    """The sample stage holds the whole pipeline: transformer, text encoder and VAE."""
    fixes: list[str] = []
    settings: list[str] = []
    now = _get(cfg, "sample_cpu_offload")
    now = {True: "model", False: "none"}.get(now, now)  # the schema's old boolean spelling
    nxt = _next_choice("sample_cpu_offload", now)
    if nxt:
        fixes.append(f"Offload the pipeline (sample_cpu_offload now {now}; try {nxt}): "
                     f"'model' keeps one component on the GPU at a time, 'sequential' streams "
                     f"weights from host RAM layer by layer (slow, but a few GB).")
        settings.append("sample_cpu_offload")
    if not _on(cfg, "sample_vae_tiling"):
        fixes.append("Decode in tiles (sample_vae_tiling: true): the VAE decoder's memory "
                     "stops growing with the image size.")
        settings.append("sample_vae_tiling")
    h, w = cfg.get("sample_height"), cfg.get("sample_width")
    if h and w:
        fixes.append(f"Render smaller samples (sample_height/sample_width now {h}x{w}).")
        settings += ["sample_height", "sample_width"]
    return _oom(fixes, settings, evidence)


def _host_oom(cfg: dict, evidence: str, stage: str | None = None) -> Diagnosis:
    fixes = ["Close other programs that use a lot of RAM, or add swap space."]
    settings: list[str] = []
    if cfg.get("dataset_num_workers"):
        fixes.append(f"Use fewer DataLoader workers (dataset_num_workers now "
                     f"{cfg['dataset_num_workers']}; try 0).")
        settings.append("dataset_num_workers")
    if "nvme" not in (cfg.get("offload_param_device"), cfg.get("offload_optimizer_device")) \
            and (cfg.get("offload_param_device") == "cpu"
                 or cfg.get("offload_optimizer_device") == "cpu"):
        fixes.append("ZeRO CPU offload keeps parameters and optimizer states in RAM: offload "
                     "to an NVMe folder instead (offload_param_device / "
                     "offload_optimizer_device: nvme, offload_nvme_path).")
        settings += ["offload_param_device", "offload_optimizer_device", "offload_nvme_path"]
    if _on(cfg, "use_gradient_checkpointing_offload") or _on(cfg, "cpu_checkpointing"):
        fixes.append("Activation offload also lives in RAM: turn off "
                     "use_gradient_checkpointing_offload / cpu_checkpointing if the GPU has room.")
        settings += ["use_gradient_checkpointing_offload", "cpu_checkpointing"]
    if _on(cfg, "pin_memory"):
        fixes.append("Pinned (page-locked) memory cannot be swapped: try pin_memory: false.")
        settings.append("pin_memory")
    fixes.append("Lower max_pixels: smaller images need less RAM for cached activations.")
    settings.append("max_pixels")
    return Diagnosis(
        "host_oom", "The stage ran out of host memory (RAM)",
        "The stage needed more host memory than there was: an allocation failed, or the "
        "kernel's out-of-memory killer ended it (the evidence below; `dmesg` or `journalctl "
        "-k` shows 'Out of memory: Killed process'). Offloading to the CPU trades GPU memory "
        "for RAM.", fixes, settings, evidence)


def _killed(cfg: dict, evidence: str, stage: str | None = None) -> Diagnosis:
    return Diagnosis(
        "killed", "Killed by signal 9 (SIGKILL) from outside the run",
        "The stage's process was ended with SIGKILL without a stop request, and nothing shows "
        "it ran out of memory (no OOM-killer record, memory below its limit). Something else "
        "ended it: a person (kill -9), a job scheduler or time limit, or a container runtime.",
        ["Check what else on this machine stops processes (schedulers, time limits, other "
         "users).",
         "Resume the run: training continues from its last saved state (more often with a "
         "smaller save_steps)."],
        ["save_steps"], evidence)


def _disk_full(cfg: dict, evidence: str, stage: str | None = None) -> Diagnosis:
    return Diagnosis(
        "disk_full", "The disk is full",
        "Writing a file (cache, checkpoint or training state) failed because the disk has no "
        "space left.",
        ["Free disk space: delete old runs and their caches in the run history.",
         "Save fewer checkpoints (a larger save_steps, or keep_last_n_checkpoints).",
         "Put the workspace on a larger disk."],
        ["save_steps", "keep_last_n_checkpoints"], evidence)


# The file a "File too large" line names: the stage's own message, or Python's OSError.
_TOO_LARGE_FILE = (re.compile(r"file size limit reached writing (.+?): "),
                   re.compile(r"\[Errno 27\] File too large: '([^']+)'"))


def _file_too_large(cfg: dict, evidence: str, stage: str | None = None) -> Diagnosis:
    found = [m.group(1) for pat in _TOO_LARGE_FILE for m in [pat.search(evidence)] if m]
    what = f"Writing {found[0]}" if found else "Writing a file (cache, checkpoint or state)"
    return Diagnosis(
        "file_too_large", "A file passed the largest file size this process may write "
        "(ulimit -f)",
        f"{what} failed with 'File too large' (EFBIG, os error 27): the operating system "
        "refuses to let a file of the stage's processes grow past their file-size limit "
        "(ulimit -f, RLIMIT_FSIZE), which the app passes on to every run. The disk is not "
        "full; no setting of the run changes this.",
        ["Raise the file-size limit where the app is started: `ulimit -f unlimited` in its "
         "shell (or LimitFSIZE=infinity in its systemd unit, fsize in "
         "/etc/security/limits.conf), then restart the app and resume or start the run "
         "again.",
         "If `ulimit -f` already says unlimited, the file system holding the workspace has a "
         "largest file size (FAT32: 4 GiB): put the workspace on another file system."],
        [], evidence)


def _missing_model(cfg: dict, evidence: str, stage: str | None = None) -> Diagnosis:
    captioner = str(_get(cfg, "captioner_path") or "").strip()
    if captioner and (stage == "caption" or captioner in evidence):
        # The caption stage loads captioner_path (when set) instead of the model sources.
        return _missing_captioner(cfg, evidence, captioner)
    fixes = ["Check the model source (model_id_with_origin_paths or model_paths) and "
             "models_dir: the files must exist there."]
    if _on(cfg, "offline"):
        fixes.append("The run is offline (offline: true), so nothing is downloaded: download "
                     "the model once with offline off, or copy it into models_dir.")
    else:
        fixes.append("Download the model (or let the run download it: offline: false, and the "
                     "right download_source / hub_endpoint).")
    fixes.append("A file that exists but does not load is incomplete: delete it and download "
                 "it again.")
    return Diagnosis(
        "missing_model", "Model files are missing or unreadable",
        "The stage could not find or read the model weights, config or tokenizer it needs.",
        fixes, ["model_id_with_origin_paths", "model_paths", "models_dir", "offline"],
        evidence)


def _missing_captioner(cfg: dict, evidence: str, captioner: str) -> Diagnosis:
    fixes = [f"Check captioner_path ({captioner}): a local Qwen2.5-VL or Qwen3-VL model "
             f"folder, or model_id:folder/ found under models_dir."]
    if _on(cfg, "offline"):
        fixes.append("The run is offline (offline: true), so nothing is downloaded: download "
                     "the captioning model once with offline off, or copy it into "
                     "models_dir.")
    else:
        fixes.append("Download the captioning model (or let the run download it: offline: "
                     "false, and the right download_source / hub_endpoint).")
    fixes.append("Or leave captioner_path empty to caption with the model family's own text "
                 "encoder, where it is a vision-language model.")
    return Diagnosis(
        "missing_model", "The captioning model's files are missing or unreadable",
        "The caption stage could not find or read the model named in captioner_path.",
        fixes, ["captioner_path", "models_dir", "offline"], evidence)


def _deepspeed_config(cfg: dict, evidence: str, stage: str | None = None) -> Diagnosis:
    return Diagnosis(
        "deepspeed_config", "The DeepSpeed configuration was rejected",
        "DeepSpeed refused the run's DeepSpeed settings "
        f"({DEEPSPEED_JSON.format(stage='<stage>')} in the run folder).",
        ["Start from a preset (e.g. the ZeRO-3 CPU-offload one) and change one setting at a "
         "time.",
         "Parameter offload needs zero_stage 3; optimizer offload needs zero_stage 1-3.",
         "With several processes the batch size must equal micro batch x "
         "gradient_accumulation_steps x num_processes: check num_processes against the GPUs "
         "in gpu_ids.",
         "Stage 1 (data_process) has no optimizer and must run without DeepSpeed."],
        ["zero_stage", "offload_param_device", "offload_optimizer_device", "num_processes",
         "gradient_accumulation_steps"], evidence)


def _no_gpu(cfg: dict, evidence: str, stage: str | None = None) -> Diagnosis:
    return Diagnosis(
        "no_gpu", "The GPU was not found or the GPU selection is wrong",
        "The stage expected a GPU that it could not use: no driver, a GPU id that does not "
        "exist, or more processes than selected GPUs.",
        ["Check gpu_ids against the GPUs on this machine (nvidia-smi).",
         "num_processes must not exceed the number of selected GPUs."],
        ["gpu_ids", "num_processes"], evidence)


def _port_in_use(cfg: dict, evidence: str, stage: str | None = None) -> Diagnosis:
    return Diagnosis(
        "port_in_use", "The distributed port is already in use",
        "Another run (or a stale process) uses the port the processes talk over.",
        ["Pick another main_process_port, or wait for the other run to end."],
        ["main_process_port"], evidence)


def _build_failed(cfg: dict, evidence: str, stage: str | None = None) -> Diagnosis:
    return Diagnosis(
        "op_build", "A DeepSpeed extension failed to compile",
        "DeepSpeed compiles some of its operations on first use; the compiler or CUDA "
        "toolkit it needs is missing or does not match.",
        ["Install a C++ compiler (and ninja); for GPU ops, a CUDA toolkit matching torch.",
         "Or turn off the feature that needs the op (e.g. offload_optimizer_device: none)."],
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
                end_reason: str | None = None, config_yaml: str | None = None) -> str:
    """One line for the run history: what failed and the most likely why."""
    exit_code = stage_exit_code(exit_code, log_text)
    head = f"stage '{stage}' {exit_code_text(exit_code)}"
    found = diagnose(exit_code, log_text, end_reason=end_reason, config_yaml=config_yaml,
                     stage=stage)
    if found:
        return f"{head}: {found[0].title}"
    why = end_reason or last_error_line(log_text)
    return f"{head}: {why}" if why else head


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
    headline = (f"Stage '{stage}' {exit_code_text(exit_code)}"
                + (f": {found[0].title}." if found else f": {own}" if own else "."))
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
