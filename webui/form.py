"""The run form, generated from the schema (``backend.config.schema.FIELDS``).

Every field whose UI level is basic or advanced gets exactly one component, keyed by its
schema name in ``Form.components`` (elem_id ``field-<name>``) and an error line under it
(elem_id ``err-<name>``). A field whose schema entry carries ``show_if`` (``{"optimizer":
["adafactor"]}``: shown while ``optimizer`` is one of those) is visible only while that holds;
``Form.bind_show_if`` updates it whenever the controlling field changes, by hand or by a
preset, a run's settings or an import filling the form. A hidden field keeps its value and is
still part of the config, so a preset round-trips whatever is shown.

Values never travel by position: the form travels as one value, ``Form.snapshot`` (every
field's value as JSON, kept by the browser as the user edits), and ``Form.to_config`` /
``Form.to_updates`` are the only conversions between an event's inputs and a config dict.
A fill sends only the fields that change and the snapshot; what follows the form listens to
``Form.edited`` (the snapshot's change), so it runs once per edit and once per fill.
"""
from __future__ import annotations

import json
import time
import typing
from typing import Any

import gradio as gr

from backend.config.errors import ConfigError, field_problem
from backend.config.meta import field_meta
from backend.config.schema import FIELDS, RunConfig, family_defaults
from backend.config.validation import validate
from backend.core.messages import Msg
from backend.families import family_of
from webui.i18n import T, bounds_text
from webui.messages import bilingual

# The snapshot's revision: a fill sends a new one. Edits made quickly one after the other
# each read the snapshot the page holds when they start, so the browser keeps every edit
# since the last fill itself (one script runs at a time) and starts again from the
# snapshot when a fill has brought a new revision. A field whose value the snapshot already
# holds (each field a fill changed) leaves it as it is: nothing follows.
_REV = "__revision"
SNAPSHOT_JS = """(v, s) => {
  const d = JSON.parse(s || '{}');
  const kept = window.__zlForm;
  const values = kept && kept.rev === d.__revision ? kept.values : d;
  if (JSON.stringify(values[NAME]) === JSON.stringify(v)) return s;
  values[NAME] = v;
  window.__zlForm = {rev: d.__revision, values};
  return JSON.stringify(values);
}"""

def _json(values: dict) -> str:
    """The snapshot's text, written as the browser writes it (no spaces)."""
    return json.dumps(values, separators=(",", ":"), ensure_ascii=False)


GROUP_ORDER = ("run", "model", "data", "lora", "training", "distributed", "stages", "samples")


def visible_fields() -> list[str]:
    """Schema fields that the form shows (UI level basic or advanced), in schema order."""
    return [n for n in FIELDS if field_meta(n)["ui"] in ("basic", "advanced")]


def show_if(name: str) -> dict[str, list[Any]]:
    """The field's ``show_if`` condition: {controlling field: values it is shown for}
    (empty: always shown)."""
    extra = FIELDS[name].json_schema_extra or {}
    return {k: list(v) for k, v in dict(extra.get("show_if") or {}).items()}


def shown(name: str, values: dict[str, Any]) -> bool:
    """Whether ``name`` is shown for these field values (a controlling field missing from
    ``values`` counts as shown, so nothing hides by accident)."""
    return all(k not in values or values[k] in allowed for k, allowed in show_if(name).items())


def show_if_controllers() -> dict[str, list[str]]:
    """{controlling field: the fields it shows or hides}, for the fields the form has."""
    out: dict[str, list[str]] = {}
    for name in visible_fields():
        for ctl in show_if(name):
            out.setdefault(ctl, []).append(name)
    return out


def _kind(name: str) -> str:
    """How a field is edited: bool, choice, multichoice, int, float, lines, numbers, text."""
    ann = FIELDS[name].annotation
    args = [a for a in typing.get_args(ann) if a is not type(None)]
    base = args[0] if typing.get_origin(ann) is typing.Union and len(args) == 1 else ann
    origin = typing.get_origin(base)
    if base is bool:
        return "bool"
    if origin is typing.Literal:
        return "choice"
    if origin is list:
        (item,) = typing.get_args(base)
        if typing.get_origin(item) is typing.Literal:
            return "multichoice"
        return "numbers" if item in (float, int) else "lines"
    if base is int:
        return "int"
    if base is float:
        return "float"
    return "text"


def _optional(name: str) -> bool:
    return type(None) in typing.get_args(FIELDS[name].annotation)


def _bounds_text(meta: dict) -> str:
    return bounds_text(meta["name"])


def _fmt_number(v: float) -> str:
    return str(int(v)) if float(v).is_integer() else repr(float(v))


def to_widget_value(name: str, value: Any) -> Any:
    """A config value as its component shows it."""
    kind = _kind(name)
    if kind in ("int", "float") and _optional(name):
        return "" if value is None else _fmt_number(value)
    if kind == "lines":
        return "\n".join(str(v) for v in (value or []))
    if kind == "numbers":
        return ", ".join(_fmt_number(v) for v in (value or []))
    if kind == "multichoice":
        return list(value or [])
    if kind == "text":
        return "" if value is None else str(value)
    return value


def from_widget_value(name: str, value: Any) -> tuple[Any, str | None]:
    """A component value as a config value; (value, problem or None)."""
    kind = _kind(name)
    if kind == "lines":
        return [line.strip() for line in str(value or "").splitlines() if line.strip()], None
    if kind == "numbers":
        out = []
        for part in str(value or "").replace(";", ",").split(","):
            part = part.strip()
            if not part:
                continue
            try:
                out.append(float(part))
            except ValueError:
                return value, field_problem(name, Msg("validation.not_a_number",
                                                      got=repr(part)))
        return out, None
    if kind == "text":
        text = "" if value is None else str(value).strip()
        return (None if (text == "" and _optional(name)) else text), None
    if kind in ("int", "float"):
        if value is None or (isinstance(value, str) and not value.strip()):
            return None, None
        if isinstance(value, str):
            value = value.strip()
            try:
                number = float(value)
            except ValueError:
                return value, None  # the schema names the field and what it allows
        else:
            number = float(value)
        if kind == "int" and number.is_integer():
            return int(number), None
        return number if kind == "float" or not isinstance(value, str) else value, None
    return value, None


class Form:
    """The components of the run form, keyed by schema field name."""

    def __init__(self, defaults: dict[str, Any] | None = None,
                 server_check: typing.Callable[[RunConfig], list] | None = None):
        """``server_check(cfg)``: what this server refuses of a valid config (a run sent
        to SLURM by a server that runs its stages itself), shown as the schema's problems."""
        self.defaults = RunConfig().to_dict()
        self.defaults.update(defaults or {})
        self.server_check = server_check
        self.components: dict[str, gr.components.Component] = {}
        self.errors: dict[str, gr.Markdown] = {}

    # ------------------------------------------------------------------ building
    def render_field(self, name: str) -> gr.components.Component:
        if name in self.components:
            raise ValueError(f"{name}: the form already has a component for this field")
        meta = field_meta(name)
        kind = _kind(name)
        value = to_widget_value(name, self.defaults.get(name))
        common = dict(label=T(f"label.{name}"), info=T(f"help.{name}"), elem_id=f"field-{name}",
                      elem_classes=["zl-field"], visible=shown(name, self.defaults))
        if kind == "bool":
            comp = gr.Checkbox(value=bool(value), **common)
        elif kind == "choice":
            comp = gr.Dropdown(choices=meta["choices"], value=value, **common)
        elif kind == "multichoice":
            comp = gr.CheckboxGroup(choices=meta["choices"], value=value, **common)
        elif kind in ("int", "float") and _optional(name):
            # Empty means "unset": a Number box cannot be empty, so a one-line text box.
            comp = gr.Textbox(value=value, lines=1, max_lines=1,
                              placeholder=T(f"unset.{name}"), **common)
        elif kind in ("int", "float"):
            # No minimum/maximum on the box: gradio would refuse the whole event with a
            # pop-up; the schema's message appears under the field instead.
            comp = gr.Number(value=value, precision=0 if kind == "int" else None,
                             step=meta.get("multiple_of", 1) if kind == "int" else 1e-6,
                             placeholder=_bounds_text(meta) or None, **common)
        elif kind == "lines":
            comp = gr.Textbox(value=value, lines=3, max_lines=12, **common)
        else:
            comp = gr.Textbox(value=value, lines=1, max_lines=4 if kind == "numbers" else 1,
                              **common)
        self.components[name] = comp
        self.errors[name] = gr.Markdown("", visible=False, elem_id=f"err-{name}",
                                        elem_classes=["zl-error"])
        return comp

    def render_group(self, group: str, *, with_basic: bool = True,
                     with_advanced: bool = True, columns: int = 2) -> None:
        """The group's basic fields, then its advanced ones in a closed accordion."""
        names = [n for n in visible_fields() if field_meta(n)["group"] == group]
        basic = [n for n in names if field_meta(n)["ui"] == "basic"]
        advanced = [n for n in names if field_meta(n)["ui"] == "advanced"]
        if with_basic and basic:
            self._grid(basic, columns)
        if with_advanced and advanced:
            with gr.Accordion(T(f"advanced.{group}"), open=False,
                              elem_id=f"adv-{group}"):
                self._grid(advanced, columns)

    def _grid(self, names: list[str], columns: int) -> None:
        for i in range(0, len(names), columns):
            with gr.Row(equal_height=False):
                for name in names[i:i + columns]:
                    with gr.Column(min_width=240):
                        self.render_field(name)

    def render_rest(self, columns: int = 2) -> None:
        """Every visible field not rendered yet, so the form always covers the schema."""
        missing = [n for n in visible_fields() if n not in self.components]
        for group in dict.fromkeys(field_meta(n)["group"] for n in missing):
            names = [n for n in missing if field_meta(n)["group"] == group]
            with gr.Accordion(T(f"group.{group}") if f"group.{group}" in _known_groups()
                              else str(group), open=False):
                self._grid(names, columns)

    def bind_show_if(self) -> None:
        """Show or hide each ``show_if`` field as its controlling field changes (the change
        event fires for a value typed in and for one a preset or an import puts in)."""
        for ctl, names in show_if_controllers().items():
            if ctl not in self.components:
                continue
            deps = [self.components[n] for n in names if n in self.components]

            def update(value, _names=tuple(n for n in names if n in self.components), _ctl=ctl):
                return [gr.update(visible=shown(n, {_ctl: value})) for n in _names]

            self.components[ctl].change(update, inputs=self.components[ctl], outputs=deps,
                                        show_progress="hidden", api_visibility="private",
                                        queue=False)

    # ------------------------------------------------------------------ values
    # The form travels as one value: ``snapshot``, a hidden text box holding every field's
    # value as JSON. A field's change copies it in, in the browser (``bind_snapshot``: no
    # server call), a fill sends it with the fields it changes; every event that reads
    # the form takes the snapshot, not a hundred and more components. (The page keeps a
    # loading status for each input of every event it has run and walks them all at each
    # status change of any event: with the form as inputs, a preset pick took seconds of
    # browser time.)
    def render_snapshot(self) -> gr.Textbox:
        values = {n: to_widget_value(n, self.defaults.get(n)) for n in visible_fields()}
        self.snapshot = gr.Textbox(_json({**values, _REV: 0}), visible=False,
                                   elem_id="form-values")
        return self.snapshot

    def bind_snapshot(self) -> None:
        """Each field's new value (its ``change`` event: typed, pasted or filled in, also by
        a fill) is written into the snapshot, in the browser (``SNAPSHOT_JS``)."""
        for name, comp in self.components.items():
            comp.change(None, inputs=[comp, self.snapshot], outputs=[self.snapshot],
                       js=SNAPSHOT_JS.replace("NAME", json.dumps(name)),
                       show_progress="hidden", queue=False)

    @property
    def inputs(self) -> set:
        return {self.snapshot}

    def values(self, data: dict) -> dict[str, Any]:
        """An event's inputs → {field name: the value its component shows}."""
        try:
            values = json.loads(data.get(self.snapshot) or "{}")
        except ValueError:
            values = {}
        return {n: v for n, v in values.items() if n in self.components} \
            if isinstance(values, dict) else {}

    def event_inputs(self, values: dict[str, Any]) -> dict:
        """{field name: widget value} → the inputs an event that reads the form gets."""
        return {self.snapshot: _json(values)}

    def to_config(self, data: dict) -> tuple[dict[str, Any], list[str]]:
        """An event's inputs → a config dict of every visible field, plus parse problems."""
        out, problems = {}, []
        for name, raw in self.values(data).items():
            value, problem = from_widget_value(name, raw)
            if problem:
                problems.append(problem)
            else:
                out[name] = value
        return out, problems

    def check(self, data: dict) -> tuple[RunConfig | None, dict[str, Any], list[str]]:
        """(validated config or None, config dict, every problem as schema text)."""
        cfg_dict, problems = self.to_config(data)
        try:
            cfg = validate(cfg_dict)
        except ConfigError as e:
            return None, cfg_dict, problems + list(e.problems)
        if problems:
            return None, cfg_dict, problems
        refused = list(self.server_check(cfg)) if self.server_check else []
        if refused:
            return None, cfg_dict, refused
        return cfg, cfg_dict, []

    # ------------------------------------------------------------------ filling and editing
    # A handler that fills fields (a preset, a family's defaults, an import, a run's
    # settings) sends only the fields whose shown value changes, and the snapshot with them:
    # the listeners of "the form changed" (the checks, the estimate, the generated files)
    # follow the snapshot, so they run once for the whole fill and once per edit.
    @property
    def edited(self) -> list:
        """The trigger of "the form changed": an edit of any field, or a fill."""
        return [self.snapshot.change]

    @property
    def fill_outputs(self) -> list:
        """What a handler that fills fields lists as outputs: the snapshot first, so the page
        holds it before each filled field's change reads it."""
        return [self.snapshot] + list(self.components.values())

    def to_updates(self, cfg: dict[str, Any], shown: dict) -> dict:
        """A config dict → {component: value} for every field it names (and the form shows)
        whose component does not show that value already, and the snapshot with them (none
        when no field changes). ``shown``: the event's inputs, which hold the snapshot (the
        fields ``cfg`` leaves out keep their values in it)."""
        if self.snapshot not in shown:
            raise KeyError("a handler that fills the form takes its snapshot as an input "
                           "(Form.inputs)")
        now = self.values(shown)
        out = {}
        for k, v in cfg.items():
            comp = self.components.get(k)
            if comp is None:
                continue
            value = to_widget_value(k, v)
            if k not in now or now[k] != value:
                out[comp] = value
                now[k] = value
        now[_REV] = time.monotonic_ns()
        return {**out, self.snapshot: _json(now)} if out else {}

    def family_switch(self, values: dict[str, Any], old: str, new: str) -> dict[str, Any]:
        """Field values after the family changes from ``old`` to ``new``: a field still at
        the old family's default takes the new family's; what the user typed stays."""
        before, after = family_defaults(old), family_defaults(new)
        out = {}
        for name, value in values.items():
            parsed, problem = from_widget_value(name, value)
            if name != "model_family" and not problem and parsed == before.get(name) \
                    and after.get(name) != before.get(name):
                out[name] = after[name]
        return out

    def full_config(self, cfg: dict[str, Any]) -> dict[str, Any]:
        """The family's defaults under ``cfg`` (the values a preset leaves out)."""
        base = family_defaults(family_of(cfg)[0])
        base.update(cfg)
        return {k: v for k, v in base.items() if k in self.components}

    def render_error_state(self) -> gr.State:
        """The error lines the page shows ({field: text}), so a check sends only those that
        change."""
        self.errors_shown = gr.State({})
        return self.errors_shown

    @property
    def error_outputs(self) -> list:
        return [self.errors[n] for n in self.components] + [self.errors_shown]

    def error_updates(self, problems: list[str], shown: dict | None) -> dict:
        """Problems → the error line of each field whose line changes from ``shown`` (hidden
        where the field has none), and the lines now shown."""
        by_field: dict[str, list[str]] = {}
        for p in problems:
            by_field.setdefault(_problem_field(p), []).append(p)
        now = {name: "\n\n".join("⚠ " + bilingual(p) for p in by_field[name])
               for name in self.errors if name in by_field}
        shown = shown or {}
        out = {md: gr.update(value=now.get(name, ""), visible=name in now)
               for name, md in self.errors.items() if now.get(name) != shown.get(name)}
        return {**out, self.errors_shown: now}


def _known_groups() -> set[str]:
    from webui.i18n import EN
    return {k for k in EN if k.startswith("group.")}


def _problem_field(problem: str) -> str:
    """The field a problem line names (``field: problem``)."""
    if isinstance(problem, Msg) and problem.code == "validation.field_problem":
        return str(problem.params["field"])
    return str(problem).split(":", 1)[0].strip()


def problems_markdown(problems: list[str]) -> str:
    """The problems summary, each line in both languages (the page shows one)."""
    if not problems:
        return bilingual(Msg("problems.none"))
    lines = [bilingual(Msg("problems.count", n=len(problems))), ""]
    for p in problems:
        if isinstance(p, Msg) and p.code == "validation.field_problem":
            field, sep, rest = str(p.params["field"]), ":", p.params["problem"]
        else:
            field, sep, rest = str(p).partition(":")
            rest = rest.strip()
        lines.append(f"- `{field}`: " + bilingual(rest) if sep and " " not in field
                     else "- " + bilingual(p))
    return "\n".join(lines)
