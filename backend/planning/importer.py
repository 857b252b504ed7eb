"""Import a command line of the reference trainer; export a run config as a shell script.

``import_commands(text, base_dir=None) -> ImportResult`` reads what a user already runs: one
or more ``accelerate launch [--config_file X.yaml] train.py --flag value ...`` commands (or
``python train.py ...``, ``python -m accelerate.commands.launch ...``), with backslash-newline
continuations, quotes, comments and several commands (lines, ``&&`` or ``;``).

- A stage-1 + stage-2 pair (``--task sft:data_process`` then ``--task sft:train``) becomes
  one split-training config: the data options come from stage 1 (stage 2's dataset folder is
  the reference's cache), the training and DeepSpeed options from stage 2, the model sources
  of both are joined. One ``sft`` command becomes a config without split training.
- ``--config_file`` is read with accelerate's own loader, its ``deepspeed_config_file`` as
  JSON. A file is taken from ``files`` (name -> contents the user gave), else from disk
  under ``base_dir`` (and next to the YAML) through the read gate ``gate``, else, when its
  name is one of the files the reference ships (each family's ``reference_launch.py``), from that table (a
  note says so). Any other missing file is named in ``notes`` and its settings are not
  imported: ``given`` then holds no distributed setting, so a form keeps its own.
- ``ImportResult.given`` holds exactly the fields the commands (and their files) set; an
  import onto a form changes those and keeps every other field as it was.
- Flags, YAML keys and JSON keys that have no counterpart are listed in ``not_understood``;
  choices ZeroLoRA makes differently (stage 1 without DeepSpeed, the run folder as output)
  are explained in ``notes``. Nothing is dropped silently.

``export_shell_script(cfg) -> str`` is the other direction: a self-contained bash script that
writes the run's run.yaml, accelerate YAML and DeepSpeed JSON (heredocs) into a run folder
and then runs the stages' exact commands.
"""
from __future__ import annotations

import contextlib
import io
import json
import os
import re
import shlex
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from backend.core import bounded, libraries
from backend.core.messages import Msg, said
from backend.config.cli import build_parser
from backend.config.errors import ConfigError
from backend.config.files import read_yaml
from backend.config.paths import REPO_ROOT
from backend.config.schema import FIELDS, NONE_WORDS, PATH_FIELDS, RunConfig
from backend.config.validation import validate
from backend.planning.plan import (DS_ACTIVATION_FIELDS, DS_FP16, DS_OFFLOAD_FIELDS, DS_ZERO_FIELDS,
                                   plan_run, shell_line)
from backend.core.readgate import UNRESTRICTED, ReadGate
from backend.core.rundir import RunDir
from backend.families import family_names, family_of, family_spec

# Options of a stage-1 command that describe the data set (stage 2's point at the cache).
DATA_KEYS = ("dataset_base_path", "dataset_metadata_path", "data_file_keys", "max_pixels",
             "height", "width", "trigger_word")
# Options the run plan sets per stage.
PLAN_KEYS = ("task", "output_path", "progress_file")
SAMPLE_MODULE = "backend.stages.sample"
# Environment that only concerns how a process runs, not what it trains.
PLUMBING_ENV = ("PYTHONUNBUFFERED", "PYTHONPATH", "ACCELERATE_USE_CPU", "OMP_NUM_THREADS",
                "MKL_NUM_THREADS", "TOKENIZERS_PARALLELISM", "HF_HUB_DISABLE_TELEMETRY")
ENV_ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")
# The reference's flags whose job ZeroLoRA's stages do by themselves: {flag: note}.
SELF_EVIDENT_FLAGS = {
    "--offload_models": Msg("import.offload_models"),
}
# Of those, the ones that matter in one-shot training (task sft), where they are imported.
KEPT_FOR_ONE_SHOT = ("--offload_models",)
SEPARATORS = {";", "&&", "||", "&", "|"}

# DeepSpeed JSON (zero_optimization) keys that map one-to-one onto schema fields.
# The DeepSpeed JSON is read back through the generator's own tables (backend/planning/plan.py).
ZERO_KEYS = tuple(key for key, _ in DS_ZERO_FIELDS)
ACT_KEYS = {key: key for key in DS_ACTIVATION_FIELDS}
FP16_STANDARD = {k: v for k, v in DS_FP16.items() if k != "enabled"}
# accelerate's own names (launch flags, YAML keys, its deepspeed_config keys) that are schema
# fields of the same name are read as they are, except machine_rank: each machine's own (a
# plan writes 0 for the main machine and --machine_rank for the others).
PER_MACHINE = ("machine_rank",)


def same_named_fields(names) -> list[str]:
    """The names in ``names`` that are schema fields read as they are, in their order."""
    return [n for n in names if n in FIELDS and n not in PER_MACHINE]


@dataclass
class ImportResult:
    config: RunConfig
    not_understood: list[str] = field(default_factory=list)   # messages (Msg)
    notes: list[str] = field(default_factory=list)    # messages (Msg), a family's as str
    # The fields the commands set, with their validated values (the rest are defaults).
    given: dict[str, Any] = field(default_factory=dict)


def reference_launch_files() -> dict[str, tuple[str, str]]:
    """The launch files the reference ships, by file name: {name: (what it is, contents)},
    from each family's ``reference_launch.py`` (``LAUNCH_FILES``), where it has one."""
    import importlib

    out: dict[str, tuple[str, str]] = {}
    for name in family_names():
        try:
            module = importlib.import_module(f"backend.families.{name}.reference_launch")
        except ModuleNotFoundError:
            continue
        out.update(getattr(module, "LAUNCH_FILES", {}))
    return out


@dataclass
class _Files:
    """Where the files a command names come from: the contents the user gave (by file
    name), the disk under ``base`` through the read gate, the reference's shipped files.
    Each file found is copied into ``tmp`` (accelerate's loader reads a path)."""

    base: Path
    gate: ReadGate
    given: dict[str, str]
    tmp: Path
    notes: list[str]
    shown_base: str | None = None   # base as the caller gave it (None: not given)

    def find(self, name: str, label: Msg, near: Path | None = None) -> _Found | None:
        p = Path(name).expanduser()
        if p.name in self.given:
            self.notes.append(Msg("import.given_file", label=label, name=p.name))
            return self._copy(p.name, self.given[p.name], None, name)
        candidates = [p] if p.is_absolute() else [self.base / p]
        if near is not None and not p.is_absolute():
            candidates += [near / p, near / p.name]
        for c in candidates:
            if self.gate.is_file(c):
                try:
                    text = self.gate.read_text(c, errors="replace")
                except OSError:
                    continue
                return self._copy(c.name, text, c.parent, name)
        known = reference_launch_files()
        if p.name in known:
            what, text = known[p.name]
            self.notes.append(Msg("import.recognised", label=label, name=p.name, what=what))
            return self._copy(p.name, text, None, name)
        return None

    @property
    def where(self) -> Msg:
        """Where relative names were looked up, as the caller gave it: the ``base_dir``
        given, else no server folder at all (messages never name the server's paths)."""
        return (Msg("import.where_under", base=self.shown_base) if self.shown_base
                else Msg("import.where_server"))

    def _copy(self, name: str, text: str, folder: Path | None, given: str) -> _Found:
        out = self.tmp / f"{len(list(self.tmp.iterdir()))}-{name}"
        out.write_text(text, encoding="utf-8")
        return _Found(out, name, folder, given)


@dataclass
class _Found:
    path: Path            # a private copy to read
    name: str             # the file's own name, for messages
    folder: Path | None   # where it was on disk (its neighbours are looked up there)
    given: str = ""       # the file as the command names it (for messages)

    def shown(self, text: str) -> str:
        """``text`` (a parser's message) with the private copy named as the command names
        the file: no temporary path reaches a message (a message that names none stays a
        message)."""
        if str(self.path) not in text:
            return text
        return text.replace(str(self.path), self.given or self.name)


@dataclass
class _Command:
    index: int
    text: str
    env: dict[str, str] = field(default_factory=dict)
    launch: dict[str, Any] = field(default_factory=dict)   # accelerate settings (file + flags)
    deepspeed: dict[str, Any] | None = None                # the DeepSpeed JSON, when read
    script: str = ""
    args: dict[str, Any] = field(default_factory=dict)     # trainer flags (schema names)

    @property
    def task(self) -> str:
        return str(self.args.get("task", "sft"))

    @property
    def label(self) -> Msg:
        return Msg("import.command", n=self.index)

    @property
    def is_sample(self) -> bool:
        return self.script == SAMPLE_MODULE or self.script.replace(os.sep, "/").endswith(
            "backend/stages/sample.py")


def _drop_options(argv: list[str], names: tuple[str, ...]) -> list[str]:
    """``argv`` without the named options and their values."""
    out: list[str] = []
    skipping = False
    for tok in argv:
        if tok.split("=", 1)[0] in names:
            skipping = "=" not in tok
            continue
        if skipping and not tok.startswith("-"):
            continue
        skipping = False
        out.append(tok)
    return out


# ------------------------------------------------------------------------------------------
# Splitting text into commands
# ------------------------------------------------------------------------------------------
def split_commands(text: str) -> list[list[str]]:
    """Shell-like text → argv lists: continuations joined, comments dropped, one list per
    command (new lines, ``&&``, ``||``, ``;``, ``|`` and ``&`` separate commands). A quote
    may span lines; one never closed is a ``CommandError`` naming it (a shell would not
    run the command either)."""
    text = re.sub(r"\\\r?\n", " ", text)
    commands: list[list[str]] = []
    pending, pending_line = "", 0
    for number, line in enumerate(text.splitlines(), 1):
        chunk = f"{pending}\n{line}" if pending else line
        try:
            lex = shlex.shlex(chunk, posix=True, punctuation_chars=";&|")
            lex.whitespace_split = True
            lex.commenters = "#"
            tokens = list(lex)
        except ValueError:  # an open quote: the command goes on on the next line
            pending, pending_line = chunk, pending_line if pending else number
            continue
        pending = ""
        current: list[str] = []
        for tok in tokens:
            if tok in SEPARATORS:
                if current:
                    commands.append(current)
                current = []
            else:
                current.append(tok)
        if current:
            commands.append(current)
    if pending:
        raise CommandError(_open_quote_problem(pending, pending_line))
    return commands


class CommandError(ValueError):
    """Command text that cannot be read as commands (one line saying why and where)."""


def _open_quote_problem(text: str, first_line: int = 1) -> Msg:
    """Which quote of ``text`` (starting on line ``first_line`` of the whole text) is
    never closed, with the text from it on (shortened)."""
    quote, start, i = None, 0, 0
    while i < len(text):
        ch = text[i]
        if quote != "'" and ch == "\\":  # an escaped character (not inside '...')
            i += 2
            continue
        if quote is None and ch == "#" and (i == 0 or text[i - 1].isspace()):
            end = text.find("\n", i)  # a comment: on to the end of its line
            i = len(text) if end < 0 else end
            continue
        if quote is None and ch in "'\"":
            quote, start = ch, i
        elif ch == quote:
            quote = None
        i += 1
    line = first_line + text.count("\n", 0, start)
    rest = " ".join(text[start:].split())
    rest = rest if len(rest) <= 60 else rest[:57] + "..."
    return Msg("import.open_quote", quote=quote or chr(39), line=line, rest=rest)


# ------------------------------------------------------------------------------------------
# Import
# ------------------------------------------------------------------------------------------
def import_commands(text: str, base_dir: str | os.PathLike | None = None, *,
                    files: dict[str, str] | None = None,
                    gate: ReadGate = UNRESTRICTED) -> ImportResult:
    """Turn the reference's command lines into a validated ``RunConfig`` (see module doc).

    ``files``: contents of launch files the user gave, by file name (they win over the disk);
    ``gate``: the read gate every file named in a command is opened through."""
    base = Path(base_dir or os.getcwd()).expanduser()
    nu: list[str] = []
    notes: list[str] = []
    trainers: list[_Command] = []
    samples: list[_Command] = []
    base_config: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="zerolora-import-") as tmp:
        found_files = _Files(base, gate, {Path(k).name: v for k, v in (files or {}).items()},
                             Path(tmp), notes,
                             os.fspath(base_dir) if base_dir is not None else None)
        for i, argv in enumerate(split_commands(text), 1):
            cmd = _read_command(i, argv, found_files, nu, notes)
            if cmd is None:
                continue
            if "config" in cmd.args:
                found = found_files.find(cmd.args.pop("config"), cmd.label)
                if found:
                    base_config.update(_read_run_config(cmd, found))
                else:
                    notes.append(Msg("import.config_not_found", label=cmd.label))
            if cmd.is_sample:
                samples.append(cmd)
            else:
                trainers.append(cmd)
    if not trainers and not samples:
        notes.append(Msg("import.no_training_command"))
    data = dict(base_config)
    data.update(_assemble(trainers, notes))
    _map_reference_files(data, notes)
    for cmd in samples:
        data.update({k: v for k, v in cmd.args.items() if k.startswith("sample_")})
    if base_dir is not None:
        # Relative paths of the commands are relative to where they were run.
        for key in PATH_FIELDS:
            value = data.get(key)
            if isinstance(value, str) and value and value.lower() not in NONE_WORDS and \
                    not os.path.isabs(value):
                data[key] = str((base / value).resolve())
    config, kept = _validated(data, nu)
    given = {k: getattr(config, k) for k in kept if k in FIELDS}
    return ImportResult(config, nu, notes, given)


def _read_command(index: int, argv: list[str], files: _Files, nu: list[str],
                  notes: list[str]) -> _Command | None:
    text = shlex.join(argv)
    cmd = _Command(index, text)
    while argv and ENV_ASSIGNMENT.match(argv[0]):
        name, value = argv[0].split("=", 1)
        cmd.env[name] = value
        argv = argv[1:]
    if argv and argv[0] in ("env", "export") and len(argv) > 1:
        argv = argv[1:]
        while argv and ENV_ASSIGNMENT.match(argv[0]):
            name, value = argv[0].split("=", 1)
            cmd.env[name] = value
            argv = argv[1:]
    if not argv:
        return None
    prog = os.path.basename(argv[0])
    launch_args: list[str] | None = None
    rest: list[str]
    if prog == "accelerate" and len(argv) > 1 and argv[1] == "launch":
        launch_args = argv[2:]
    elif prog.startswith("python") and argv[1:3] == ["-m", "accelerate.commands.launch"]:
        launch_args = argv[3:]
    elif prog.startswith("python") and argv[1:3] == ["-m", "accelerate.commands.accelerate_cli"]\
            and argv[3:4] == ["launch"]:
        launch_args = argv[4:]
    if launch_args is not None:
        parsed = _parse_launch(cmd, launch_args, files, nu, notes)
        if parsed is None:
            return None
        cmd.script, rest = parsed
    elif prog.startswith("python"):
        rest = argv[1:]
        while rest and rest[0] in ("-u", "-O", "-B"):
            rest = rest[1:]
        if rest[:1] == ["-m"] and len(rest) > 1:
            cmd.script, rest = rest[1], rest[2:]
        elif rest and not rest[0].startswith("-"):
            cmd.script, rest = rest[0], rest[1:]
        else:
            notes.append(Msg("import.skipped", label=cmd.label, text=text))
            return None
    else:
        notes.append(Msg("import.skipped", label=cmd.label, text=text))
        return None
    for name, value in cmd.env.items():
        if name == "CUDA_VISIBLE_DEVICES" and re.fullmatch(r"\d+(,\d+)*", value):
            cmd.launch.setdefault("gpu_ids", value)
        elif name in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"):
            cmd.launch["offline"] = value.strip().lower() in ("1", "true", "yes", "on")
        elif name not in PLUMBING_ENV:
            nu.append(Msg("import.unknown_env", label=cmd.label, name=name, value=value))
    if cmd.is_sample:
        # The sample stage's own options point into the run folder.
        rest = _drop_options(rest, ("--output_dir", "--checkpoints", "--all_checkpoints"))
    for flag, note in SELF_EVIDENT_FLAGS.items():
        if flag in KEPT_FOR_ONE_SHOT and _task_flag(rest) == "sft":
            continue  # one-shot training loads every model: the option does its job there
        if any(tok.split("=", 1)[0] == flag for tok in rest):
            rest = _drop_options(rest, (flag,))
            notes.append(Msg("import.labelled", label=cmd.label, note=note))
    _parse_trainer_args(cmd, rest, nu)
    if cmd.launch.pop("_no_config_file", False) and cmd.task != "sft:data_process":
        notes.append(Msg("import.no_config_file", label=cmd.label))
    return cmd


def _task_flag(argv: list[str]) -> str | None:
    for i, tok in enumerate(argv):
        if tok == "--task" and i + 1 < len(argv):
            return argv[i + 1]
        if tok.startswith("--task="):
            return tok.split("=", 1)[1]
    return None


def _parse_trainer_args(cmd: _Command, argv: list[str], nu: list[str]) -> None:
    parser = build_parser("trainer")
    with contextlib.redirect_stderr(io.StringIO()):
        try:
            ns, unknown = parser.parse_known_args(argv)
        except SystemExit:  # e.g. a schema flag without its value
            nu.append(Msg("import.unreadable_flags", label=cmd.label, flags=shlex.join(argv)))
            return
    cmd.args = {k: v for k, v in vars(ns).items() if k in FIELDS or k == "config"}
    # Group the unknown tokens as "--flag value ..." for the report.
    group: list[str] = []
    for tok in unknown + ["--"]:
        if tok.startswith("-") and group:
            nu.append(Msg("import.unknown_flag", label=cmd.label, flag=shlex.join(group)))
            group = []
        group.append(tok)


def _parse_launch(cmd: _Command, args: list[str], files: _Files, nu: list[str],
                  notes: list[str]) -> tuple[str, list[str]] | None:
    libraries.ready()
    from accelerate.commands.launch import launch_command_parser

    parser = launch_command_parser()
    with contextlib.redirect_stderr(io.StringIO()), contextlib.redirect_stdout(io.StringIO()):
        try:
            ns = parser.parse_args(args)
        except SystemExit:
            nu.append(Msg("import.unreadable_launch", label=cmd.label,
                          options=shlex.join(args)))
            return None
    given = set(getattr(ns, "nondefault", set())) - {"training_script", "training_script_args",
                                                      "module", "config_file"}
    if ns.config_file:
        found = files.find(ns.config_file, cmd.label)
        if found is None:
            cmd.launch["_config_missing"] = True
            notes.append(Msg("import.accelerate_missing", label=cmd.label,
                             file=ns.config_file, where=files.where))
        else:
            _read_accelerate_yaml(cmd, found, files, nu, notes)
    else:
        cmd.launch["_no_config_file"] = True
    fields = set(same_named_fields(given))
    for name in sorted(given):
        value = getattr(ns, name)
        if name in fields:
            cmd.launch[name] = value
        elif name == "deepspeed_config_file":
            found = files.find(value, cmd.label)
            if found:
                _read_deepspeed_json(cmd, found, nu)
            else:
                notes.append(Msg("import.deepspeed_missing", label=cmd.label, file=value,
                                 where=files.where))
        elif name in ("use_deepspeed", "multi_gpu", "debug", "quiet", "same_network",
                      "machine_rank", "rdzv_backend", "cpu"):
            if name == "use_deepspeed" and value:
                cmd.launch.setdefault("zero_stage", cmd.launch.get("zero_stage") or 2)
            elif name == "cpu" and value:
                notes.append(Msg("import.cpu_flag", label=cmd.label))
        else:
            nu.append(Msg("import.unknown_launch_option", label=cmd.label, name=name,
                          value=value))
    script = ns.training_script
    return script, list(ns.training_script_args)


def _read_accelerate_yaml(cmd: _Command, found: _Found, files: _Files, nu: list[str],
                          notes: list[str]) -> None:
    libraries.ready()
    from accelerate.commands.config.config_args import load_config_from_file

    path = Path(found.name)
    _check_accelerate_mapping(cmd, found)
    try:
        conf = load_config_from_file(str(found.path))
    except (ValueError, TypeError, OSError) as e:
        nu.append(Msg("import.unreadable_accelerate", label=cmd.label, file=str(path),
                      error=found.shown(" ".join(str(e).split()))))
        return
    d = conf.to_dict()
    dist = str(d.get("distributed_type", "NO"))
    launch = cmd.launch
    for key in same_named_fields(d):
        if d.get(key) is not None:
            launch[key] = d[key]
    if d.get("main_process_port") is None:
        launch.pop("main_process_port", None)
    if launch.get("num_processes") == -1:
        launch.pop("num_processes")
    if d.get("debug"):
        notes.append(Msg("import.debug", label=cmd.label, file=path.name))
    if d.get("use_cpu"):
        notes.append(Msg("import.use_cpu", label=cmd.label, file=path.name))
    if dist in ("FSDP", "MEGATRON_LM", "XLA") or d.get("fsdp_config"):
        nu.append(Msg("import.unsupported_distributed", label=cmd.label, dist=dist,
                      file=path.name))
    ds = dict(d.get("deepspeed_config") or {})
    if dist == "DEEPSPEED":
        launch.setdefault("zero_stage", None)
        ds_file = ds.pop("deepspeed_config_file", None)
        if ds_file:
            ds_found = files.find(ds_file, cmd.label, near=found.folder)
            if ds_found:
                _read_deepspeed_json(cmd, ds_found, nu)
            else:
                notes.append(Msg("import.deepspeed_missing_named", label=cmd.label,
                                 file=ds_file, yaml=path.name, where=files.where))
        if "zero3_init_flag" in ds:
            launch["zero3_init_flag"] = bool(ds.pop("zero3_init_flag"))
        for key in same_named_fields(list(ds)):
            if key in ds:
                value = ds.pop(key)
                launch[key] = None if value == "auto" else value
        for key in ("offload_optimizer_nvme_path", "offload_param_nvme_path"):
            value = ds.pop(key, None)
            if value and value != "none":
                launch["offload_nvme_path"] = value
        ds.pop("zero3_save_16bit_model", None)
        ds.pop("deepspeed_multinode_launcher", None)
        for key, value in ds.items():
            nu.append(Msg("import.unknown_key", label=cmd.label, key=f"deepspeed_config.{key}",
                          value=repr(value), file=path.name))
    if launch.get("zero_stage", 0) is None:
        launch.pop("zero_stage")
        launch.setdefault("_deepspeed", True)


ACCELERATE_CONFIG_ALLOWED = Msg("import.allowed_accelerate")


def _not_a(what: Msg, flag: str, cmd: _Command, found: _Found, got: Msg | str,
           allowed: Msg) -> ConfigError:
    """``flag``'s file is not ``what``: ``got`` a message, or a parser's own words."""
    if not isinstance(got, Msg):
        got = Msg("import.got_raw", text=got)
    return ConfigError([Msg("import.not_a", flag=flag, what=what, given=found.given,
                            label=cmd.label, got=got, allowed=allowed)])


def _binary(text: str) -> bool:
    """Text read with ``errors="replace"`` from a file that is not UTF-8 text."""
    return "\ufffd" in text or "\x00" in text


def _read_run_config(cmd: _Command, found: _Found) -> dict[str, Any]:
    """The run options of a ``--config`` file; a ``ConfigError`` naming the flag and the
    file as the command names it (never the private copy) when it is none."""
    allowed = Msg("import.allowed_run_config")
    if _binary(found.path.read_text(encoding="utf-8")):
        raise _not_a(Msg("import.what_run_config"), "--config", cmd, found,
                     Msg("import.got_binary"), allowed)
    try:
        return read_yaml(found.path)
    except ConfigError as e:
        raise ConfigError([found.shown(p) for p in e.problems],
                          f"--config {found.given}") from None
    except Exception as e:  # noqa: BLE001 - a parser's own error: said, never a traceback
        raise _not_a(Msg("import.what_run_config"), "--config", cmd, found,
                     found.shown(" ".join(str(e).split())), allowed) from None


def _check_accelerate_mapping(cmd: _Command, found: _Found) -> None:
    """A ``--config_file`` that is no accelerate config at all (not YAML text, or YAML that
    is not a mapping: a binary file, ``/etc/passwd``) is a ``ConfigError`` naming the flag
    and the file as the command names it; accelerate's loader would fail on it with a
    traceback (``'str' object has no attribute 'get'``) or name the private copy."""
    import yaml

    def refused(got: Msg) -> ConfigError:
        return _not_a(Msg("import.what_accelerate"), "--config_file", cmd, found, got,
                      ACCELERATE_CONFIG_ALLOWED)

    text = found.path.read_text(encoding="utf-8")
    if _binary(text):
        raise refused(Msg("import.got_binary"))
    try:
        # Bounded: size, nesting and what YAML aliases expand to (backend/core/bounded.py).
        bounded.check_size(text, "--config_file")
        data = yaml.load(text, Loader=bounded.loader("--config_file"))
    except bounded.ParseError as e:
        raise ConfigError([said(e)]) from None
    except yaml.YAMLError as e:
        problem = getattr(e, "problem", None) or getattr(e, "reason", None) or str(e)
        mark = getattr(e, "problem_mark", None)
        where = (Msg("import.at_line", line=mark.line + 1, column=mark.column + 1) if mark
                 else "")
        raise refused(Msg("import.got_invalid_yaml", problem=" ".join(str(problem).split()),
                          where=where)) from None
    if not isinstance(data, dict):
        kind = (Msg("import.kind_empty") if data is None
                else Msg("import.kind_type", type=type(data).__name__))
        raise refused(Msg("import.got_not_mapping", kind=kind))


def _read_deepspeed_json(cmd: _Command, found: _Found, nu: list[str]) -> None:
    try:
        # Bounded: size, nesting and count of values (backend/core/bounded.py).
        ds = bounded.load_json(bounded.read_text(found.path, found.name), found.name)
    except (OSError, ValueError) as e:
        nu.append(Msg("import.unreadable_deepspeed", label=cmd.label, file=found.name,
                      error=said(e)))
        return
    if not isinstance(ds, dict):
        nu.append(Msg("import.deepspeed_not_object", label=cmd.label, file=found.name))
        return
    cmd.deepspeed = ds
    out = cmd.launch
    where = found.name
    ds = dict(ds)
    zero = dict(ds.pop("zero_optimization", {}) or {})
    if "stage" in zero:
        out["zero_stage"] = zero.pop("stage")
    for which, name in DS_OFFLOAD_FIELDS.items():
        block = dict(zero.pop(which, None) or {})
        if not block:
            out[name] = "none"  # the file is the whole DeepSpeed config: no such offload
            continue
        out[name] = block.pop("device", "none")
        if "pin_memory" in block:
            pin = bool(block.pop("pin_memory"))
            if "pin_memory" in out and out["pin_memory"] != pin:
                nu.append(Msg("import.pin_memory_differs", label=cmd.label, which=which,
                              pin=pin, file=where))
            out["pin_memory"] = pin
        if block.get("nvme_path"):
            out["offload_nvme_path"] = block.pop("nvme_path")
        block.pop("nvme_path", None)
        for key, value in block.items():
            nu.append(Msg("import.unknown_key", label=cmd.label,
                          key=f"zero_optimization.{which}.{key}", value=repr(value), file=where))
    for key in ZERO_KEYS:
        if key in zero:
            value = zero.pop(key)
            if value == "auto":
                nu.append(Msg("import.zero_auto", label=cmd.label, key=key, file=where))
            else:
                out[key] = value
    gather = zero.pop("stage3_gather_16bit_weights_on_model_save", True)
    if gather is False:
        nu.append(Msg("import.no_gather", label=cmd.label, file=where))
    for key, value in zero.items():
        nu.append(Msg("import.unknown_key", label=cmd.label, key=f"zero_optimization.{key}",
                      value=repr(value), file=where))
    act = ds.pop("activation_checkpointing", None)
    out["ds_activation_checkpointing"] = act is not None
    for key, value in dict(act or {}).items():
        if key in ACT_KEYS:
            out[ACT_KEYS[key]] = bool(value)
        else:
            nu.append(Msg("import.unknown_key", label=cmd.label,
                          key=f"activation_checkpointing.{key}", value=repr(value), file=where))
    for dtype in ("fp16", "bf16"):
        block = dict(ds.pop(dtype, None) or {})
        enabled = block.pop("enabled", "auto")
        if enabled is True or str(enabled).lower() == "true":
            out["_ds_precision"] = dtype
        if dtype == "fp16":
            odd = {k: v for k, v in block.items() if FP16_STANDARD.get(k, object()) != v}
            for key, value in odd.items():
                nu.append(Msg("import.unknown_key", label=cmd.label, key=f"fp16.{key}",
                              value=repr(value), file=where))
        else:
            for key, value in block.items():
                nu.append(Msg("import.unknown_key", label=cmd.label, key=f"bf16.{key}",
                              value=repr(value), file=where))
    for key in ("gradient_accumulation_steps", "gradient_clipping"):
        value = ds.pop(key, "auto")
        if value != "auto":
            out[key] = value
    micro = ds.pop("train_micro_batch_size_per_gpu", "auto")
    if isinstance(micro, int) and not isinstance(micro, bool):
        out["batch_size"] = micro  # DeepSpeed's micro-batch is the form's batch_size
    elif micro != "auto":
        nu.append(Msg("import.unknown_key", label=cmd.label,
                      key="train_micro_batch_size_per_gpu", value=repr(micro), file=where))
    ds.pop("train_batch_size", None)
    for key in ("wall_clock_breakdown", "steps_per_print", "zero_allow_untested_optimizer"):
        ds.pop(key, None)
    for key, value in ds.items():
        nu.append(Msg("import.unknown_key", label=cmd.label, key=key, value=_short_json(value),
                      file=where))


def _short_json(value: Any) -> str:
    s = json.dumps(value)
    return s if len(s) <= 60 else s[:57] + "..."


def _assemble(trainers: list[_Command], notes: list[str]) -> dict[str, Any]:
    """Join the commands' options into one mapping of schema fields."""
    stage1 = [c for c in trainers if c.task == "sft:data_process"]
    stage2 = [c for c in trainers if c.task == "sft:train"]
    whole = [c for c in trainers if c.task == "sft"]
    for extra in (stage1[1:], stage2[1:], whole[1:]):
        for c in extra:
            notes.append(Msg("import.another_command", label=c.label))
    s1 = stage1[0] if stage1 else None
    s2 = stage2[0] if stage2 else None
    one = whole[0] if whole else None
    data: dict[str, Any] = {}
    if one and (s1 or s2):
        notes.append(Msg("import.sft_with_split", label=one.label))
    if s1 or s2:
        data["split_training"] = True
        stages = (["data_process"] if s1 else []) + (["train", "sample"] if s2 else [])
        data["stages"] = stages
        if s2:
            data.update(_args(s2))
        if s1:
            first = _args(s1)
            if s2:
                # Stage 2 reads the reference's cache: the data set is stage 1's.
                if "dataset_base_path" in data:
                    notes.append(Msg("import.reference_cache", label=s2.label,
                                     path=data["dataset_base_path"], first=s1.label))
                data.pop("dataset_base_path", None)
                data.pop("dataset_metadata_path", None)
                for key, value in first.items():
                    if key in DATA_KEYS or key not in data:
                        data[key] = value
                    elif key == "model_id_with_origin_paths" or key in PLAN_KEYS:
                        continue
                    elif data[key] != value and key != "dataset_repeat":
                        notes.append(Msg("import.stages_differ", key=key, first=s1.label,
                                         value=value, second=s2.label, other=data[key]))
                sources = _join_sources(_args(s2).get("model_id_with_origin_paths"),
                                        first.get("model_id_with_origin_paths"))
                if sources:
                    data["model_id_with_origin_paths"] = sources
            else:
                data.update(first)
        if s1 and (s1.deepspeed is not None or s1.launch.get("_deepspeed") or
                   s1.launch.get("zero_stage")):
            notes.append(Msg("import.stage1_no_deepspeed", label=s1.label))
        data.update(_distributed(s2, notes))
    elif one:
        data["split_training"] = False
        data["stages"] = ["train", "sample"]
        data.update(_args(one))
        data.update(_distributed(one, notes))
    for key in PLAN_KEYS:
        if key in data:
            if key == "output_path":
                notes.append(Msg("import.output_path", path=data[key]))
            data.pop(key)
    return data


def _map_reference_files(data: dict[str, Any], notes: list[str]) -> None:
    """The reference's files of an original repository (pickles among them) named as the
    same components of the family's diffusers-layout repository; never read. Its tokenizer
    at a repository's root, ``model_id:``, is written ``model_id:./``."""
    tokenizer = data.get("tokenizer_path")
    if isinstance(tokenizer, str) and tokenizer.strip().endswith(":") and \
            tokenizer.strip() != ":":
        data["tokenizer_path"] = tokenizer.strip() + "./"
        notes.append(Msg("import.tokenizer_root", given=tokenizer,
                         root=data["tokenizer_path"]))
    sources = data.get("model_id_with_origin_paths")
    if not isinstance(sources, str):
        return
    mapped, mapped_notes = family_spec(family_of(data)[0]).map_reference_sources(sources)
    if mapped_notes:
        data["model_id_with_origin_paths"] = mapped
        notes.extend(mapped_notes)


def _args(cmd: _Command) -> dict[str, Any]:
    return dict(cmd.args)


def _join_sources(*specs: str | None) -> str | None:
    out: list[str] = []
    for spec in specs:
        for entry in (spec or "").split(","):
            entry = entry.strip()
            if entry and entry not in out:
                out.append(entry)
    return ",".join(out) or None


def _distributed(cmd: _Command | None, notes: list[str]) -> dict[str, Any]:
    """accelerate/DeepSpeed settings of the training command as schema fields."""
    if cmd is None:
        return {}
    launch = dict(cmd.launch)
    missing = launch.pop("_config_missing", False)
    ds_precision = launch.pop("_ds_precision", None)
    deepspeed = launch.pop("_deepspeed", False) or cmd.deepspeed is not None
    out = {k: v for k, v in launch.items() if v is not None}
    if out.get("zero_stage") != 3:
        out.pop("zero3_init_flag", None)  # meaningful for ZeRO-3 only
    if not cmd.args.get("use_gradient_checkpointing") and out.pop(
            "ds_activation_checkpointing", False) and out.get("zero_stage"):
        notes.append(Msg("import.activation_no_effect", label=cmd.label))
    if deepspeed and not out.get("zero_stage"):
        notes.append(Msg("import.no_zero_stage", label=cmd.label))
    if "mixed_precision" not in out and missing:
        pass  # its launch file was not found: the precision stays the form's
    elif "mixed_precision" not in out:
        if ds_precision:
            out["mixed_precision"] = ds_precision
        else:
            notes.append(Msg("import.no_precision", label=cmd.label))
    elif ds_precision and ds_precision != out["mixed_precision"]:
        notes.append(Msg("import.precision_differs", label=cmd.label, ds=ds_precision,
                         accelerate=out["mixed_precision"]))
    return out


def _validated(data: dict[str, Any], nu: list[str]) -> tuple[RunConfig, list[str]]:
    """Validate; options that fail are reported and left at their defaults. Returns the
    config and the keys of ``data`` it took."""
    data = dict(data)
    for _ in range(len(data) + 1):
        try:
            return validate(data, require_inputs=False), list(data)
        except ConfigError as e:
            dropped = False
            for problem in e.problems:
                key = problem.split(":", 1)[0]
                if key in data:
                    nu.append(Msg("import.left_default", problem=problem))
                    data.pop(key)
                    dropped = True
            if not dropped:
                raise
    return validate(data, require_inputs=False), list(data)


# ------------------------------------------------------------------------------------------
# Export
# ------------------------------------------------------------------------------------------
def export_shell_script(cfg: RunConfig, *, cuda: bool | None = None) -> str:
    """A self-contained bash script that writes the run's files and runs its stages.

    ``bash run.sh [RUN_DIR]`` (default ``./zerolora-run``): run.yaml, the accelerate YAMLs
    and the DeepSpeed JSON are written there from heredocs, then the stage commands run from
    that folder. ``ZEROLORA_ROOT`` (default: this checkout) and ``PYTHON`` can be set.
    Data and model paths are absolute (resolved where the script was exported).
    """
    with tempfile.TemporaryDirectory(prefix="zerolora-export-") as tmp:
        run_dir = Path(tmp).resolve() / "run"
        plans = plan_run(cfg, run_dir, cuda=cuda)
        prefix = str(run_dir)

        def rel(text: str) -> str:
            return text.replace(prefix + os.sep, "").replace(prefix, ".")

        # run.yaml first, then the accelerate YAMLs and DeepSpeed JSONs by name.
        files = [p for p in RunDir(run_dir).config_files() if p.suffix in (".yaml", ".json")]
        out = [
            "#!/usr/bin/env bash",
            "# ZeroLoRA run script (exported): writes the run's files into RUN_DIR, then runs",
            "# its stages in order. Usage: bash THIS_SCRIPT [RUN_DIR]   (default "
            "./zerolora-run)",
            "# ZEROLORA_ROOT: the ZeroLoRA folder; PYTHON: the Python with its requirements.",
            "set -euo pipefail",
            f"ZEROLORA_ROOT=\"${{ZEROLORA_ROOT:-{_dq(str(REPO_ROOT))}}}\"",
            "PYTHON=\"${PYTHON:-python}\"",
            "RUN_DIR=\"${1:-zerolora-run}\"",
            "mkdir -p \"$RUN_DIR\"",
            "cd \"$RUN_DIR\"",
            "export PYTHONPATH=\"$ZEROLORA_ROOT${PYTHONPATH:+:$PYTHONPATH}\"",
            "",
        ]
        for p in files:
            body = rel(p.read_text(encoding="utf-8"))
            delim = "ZEROLORA_EOF"
            while delim in body.splitlines():
                delim += "_"
            out += [f"cat > {shlex.quote(p.name)} <<'{delim}'", body.rstrip("\n"), delim, ""]
        for i, plan in enumerate(plans, 1):
            local = type(plan)(plan.name, [rel(a) for a in plan.argv], dict(plan.env))
            line = shell_line(local, python='"$PYTHON"')
            out += [f"# --- stage {i}/{len(plans)}: {plan.name}", line, ""]
    return "\n".join(out)


def _dq(text: str) -> str:
    """Text for inside double quotes in bash."""
    return re.sub(r'(["\\$`])', r"\\\1", text)


def main(argv: list[str] | None = None) -> int:
    """``python -m backend.planning.importer FILE [--base_dir DIR]``: print the imported config."""
    import argparse

    parser = argparse.ArgumentParser(prog="python -m backend.planning.importer",
                                     description="Import reference trainer commands.")
    parser.add_argument("file", help="a text file with the commands ('-' for stdin)")
    parser.add_argument("--base_dir", default=None, help="where relative config files are")
    args = parser.parse_args(argv)
    text = sys.stdin.read() if args.file == "-" else Path(args.file).read_text(encoding="utf-8")
    try:
        result = import_commands(text, args.base_dir)
    except (ConfigError, CommandError) as e:
        print(e, file=sys.stderr)
        return 2
    print(result.config.to_yaml(only_changed=True), end="")
    for line in result.notes:
        print(f"# note: {line}")
    for line in result.not_understood:
        print(f"# not understood: {line}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
