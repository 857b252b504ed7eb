"""The stage command line: one parser for every stage, built from the schema (``--config``
and one ``--<field>`` per option); ``parse_stage_args`` reads the file, then the flags on top.
"""
from __future__ import annotations

import argparse
from typing import Any, get_origin

from backend.config.errors import ConfigError, field_problem
from backend.config.files import read_yaml
from backend.config.meta import base_type, field_meta
from backend.config.schema import FIELDS, RunConfig
from backend.config.validation import suggest, validate_layers
from backend.core.messages import Msg

COMMAND_LINE = Msg("config.source.command_line")


def build_parser(prog: str = "backend.stages.train", extra: argparse.ArgumentParser | None = None
                 ) -> argparse.ArgumentParser:
    """A parser with ``--config`` and one ``--<field>`` per schema field.

    Values stay text here; ``validate`` converts and checks them, so a bad value is
    reported like one in a file (``field: problem (got X; allowed Y)``). Flags left out
    are absent from the namespace (the file or the default applies). A choice that was
    once a boolean (``sample_cpu_offload``) still takes the bare flag and ``--no-`` form.
    """
    parser = argparse.ArgumentParser(prog=prog, argument_default=argparse.SUPPRESS,
                                     allow_abbrev=False, parents=[extra] if extra else [],
                                     description="Options come from --config (YAML), then "
                                     "the flags below (flags win).")
    parser.add_argument("--config", help="Run config YAML written by the UI or by hand.")
    for name in FIELDS:
        meta = field_meta(name)
        help_text = meta["help"].replace("%", "%%")
        base = base_type(name)
        schema_extra = FIELDS[name].json_schema_extra or {}
        if base is bool:
            parser.add_argument(f"--{name}", action=argparse.BooleanOptionalAction,
                                help=help_text)
        elif "bare_flag" in schema_extra:
            # Once a boolean: a bare --name and --no-name keep the meaning they had.
            parser.add_argument(f"--{name}", nargs="?", const=schema_extra["bare_flag"],
                                metavar="VALUE", help=help_text)
            parser.add_argument(f"--no-{name}", dest=name, action="store_const",
                                const=schema_extra["no_flag"], help=argparse.SUPPRESS)
        elif get_origin(base) is list:
            parser.add_argument(f"--{name}", nargs="+", metavar="VALUE", help=help_text)
        else:
            parser.add_argument(f"--{name}", metavar="VALUE", help=help_text)
    return parser


def parse_stage_args(argv: list[str] | None = None, prog: str = "backend.stages.train",
                     extra: argparse.ArgumentParser | None = None
                     ) -> tuple[RunConfig, argparse.Namespace]:
    """Parse a stage's command line: --config file first, then flags on top.

    Returns (config, namespace); the namespace also carries stage-only options declared by
    ``extra`` (e.g. the sample stage's --checkpoints). Unknown flags and keys are errors
    that name them.
    """
    parser = build_parser(prog, extra)
    ns, unknown = parser.parse_known_args(argv)
    if unknown:
        flags = [u for u in unknown if u.startswith("-")] or unknown
        raise ConfigError([field_problem(u.lstrip("-").split("=")[0], Msg(
            "validation.unknown_flag", got=repr(u), suggest=suggest(u.lstrip("-").split("=")[0])))
            for u in flags], COMMAND_LINE)
    given = vars(ns)
    cli = {k: v for k, v in given.items() if k in FIELDS}
    layers: list[tuple[str, dict[str, Any]]] = []
    if given.get("config"):
        layers.append((given["config"], read_yaml(given["config"])))
    layers.append((COMMAND_LINE, cli))
    # Where each option's value came from (file or flag; absent: the schema default), for
    # messages and for the stage's checks against how accelerate launched it.
    ns.option_sources = {k: where for where, values in layers for k in values if k in FIELDS}
    # The sample stage renders from the model (and LoRA files) alone: no dataset needed.
    return validate_layers(layers, require_inputs=not prog.endswith(".sample")), ns
