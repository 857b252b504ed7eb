"""The web form is a view of the schema: one component per shown field, none without a field.

Builds the real app (no server) and reads the components it rendered, so a field added to
``backend/config/schema.py`` without a form component -- or a form component left behind after a
field was removed or hidden -- fails here.
"""
from __future__ import annotations

import os

import pytest

os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")


@pytest.fixture(scope="module")
def app(tmp_path_factory):
    from backend.jobs.runner import Runner
    from webui.app import create_app

    ws = tmp_path_factory.mktemp("form-ws")
    return create_app(Runner(ws, auto_start=False), ws)


def _rendered_fields(demo, prefix: str) -> list[str]:
    return [b.elem_id[len(prefix):] for b in demo.blocks.values()
            if isinstance(getattr(b, "elem_id", None), str) and b.elem_id.startswith(prefix)]


def test_every_shown_field_has_exactly_one_component(app):
    from backend.config.meta import field_meta
    from backend.config.schema import FIELDS

    shown = {n for n in FIELDS if field_meta(n)["ui"] in ("basic", "advanced")}
    hidden = {n for n in FIELDS if field_meta(n)["ui"] == "hidden"}
    rendered = _rendered_fields(app, "field-")
    assert sorted(n for n in set(rendered) if rendered.count(n) > 1) == []
    assert sorted(shown - set(rendered)) == [], "schema fields without a form component"
    assert sorted(set(rendered) - shown) == [], "form components without a shown field"
    assert hidden and not hidden & set(rendered)
    # ...and each has its error line right under it.
    assert sorted(_rendered_fields(app, "err-")) == sorted(rendered)


def test_form_registry_matches_rendered_components(app):
    form = app.zerolora_ctx.form
    for name, comp in form.components.items():
        assert comp.elem_id == f"field-{name}"
        assert app.blocks[comp._id] is comp


def test_basic_fields_come_before_advanced_ones(app):
    """Advanced fields sit inside an accordion; basic ones do not."""
    import gradio as gr

    from backend.config.meta import field_meta

    form = app.zerolora_ctx.form
    for name, comp in form.components.items():
        in_accordion = False
        parent = comp.parent
        while parent is not None:
            if isinstance(parent, gr.Accordion):
                in_accordion = True
                break
            parent = parent.parent
        assert in_accordion == (field_meta(name)["ui"] == "advanced"), name


@pytest.mark.parametrize("preset", ["cpu_demo", "qwen_image_low_vram"])
def test_values_round_trip_through_the_form(app, preset):
    """config -> component values -> config gives the same config (no value by position)."""
    from backend.config.presets import load_preset
    from backend.config.schema import RunConfig

    form = app.zerolora_ctx.form
    cfg = load_preset(preset).to_dict()
    shown = form.full_config(cfg)
    updates = form.to_updates(shown)  # {component: widget value}
    back, problems = form.to_config(updates)
    assert problems == []
    assert back == shown
    assert set(back) == set(form.components)
    RunConfig.model_validate({**cfg, **back})


def test_bad_values_are_reported_by_field(app):
    form = app.zerolora_ctx.form
    values = form.to_updates(form.full_config({}))
    values[form.components["lora_rank"]] = 0
    values[form.components["sample_lora_scales"]] = "0, lots"
    values[form.components["max_steps"]] = "ten"
    cfg, _, problems = form.check(values)
    assert cfg is None
    fields = [p.split(":", 1)[0] for p in problems]
    assert {"lora_rank", "sample_lora_scales", "max_steps"} <= set(fields)
    sent = form.error_updates(problems, {})
    assert sent[form.errors["lora_rank"]]["visible"] is True
    assert "lora_rank" in sent[form.errors["lora_rank"]]["value"]
    assert form.errors["seed"] not in sent  # hidden, as it was: nothing to send
    now = sent[form.errors_shown]
    assert set(now) == {p.split(":", 1)[0] for p in problems}
    # The same problems again send no error line; one fixed sends just its line, hidden.
    assert form.error_updates(problems, now) == {form.errors_shown: now}
    fewer = [p for p in problems if not p.startswith("lora_rank:")]
    sent = form.error_updates(fewer, now)
    assert sent[form.errors["lora_rank"]] == {"__type__": "update", "value": "",
                                               "visible": False}
    assert set(sent) == {form.errors["lora_rank"], form.errors_shown}


def test_a_fill_sends_the_fields_that_change_and_one_revision(app):
    """A preset fills only the fields it changes, and every handler that fills fields sends
    the form's revision with them: what follows the form runs once per fill."""
    from backend.config.presets import load_preset

    form = app.zerolora_ctx.form
    shown = form.to_updates(form.full_config(load_preset("cpu_demo").to_dict()))
    rev = shown.pop(form.revision)
    other = form.to_updates(form.full_config(load_preset("cpu_demo_zero3").to_dict()), shown)
    assert other.pop(form.revision) != rev
    changed = {name for name, comp in form.components.items() if comp in other}
    assert "zero_stage" in changed and 0 < len(changed) < len(form.components) / 4, changed
    assert form.to_updates(form.full_config(load_preset("cpu_demo").to_dict()),
                           shown) == {}  # nothing changes: nothing to follow
    fns = app.fns.values() if isinstance(app.fns, dict) else app.fns
    fields = {comp._id for comp in form.components.values()}
    fills = [fn for fn in fns if fields & {o._id for o in fn.outputs}]
    assert len(fills) >= 6, [fn.name for fn in fills]
    for fn in fills:
        if fn.name == "update":  # a show_if field's visibility, not its value
            continue
        assert form.revision._id in {o._id for o in fn.outputs}, \
            f"{fn.name} fills fields without the form's revision (use Form.to_updates)"
    # The checks and the estimate follow edits and fills, not each field's change event.
    refresh = [fn for fn in fns if fn.name == "refresh" and form.errors_shown._id in
               {o._id for o in fn.outputs}]
    assert len(refresh) == 1
    triggers = {(t[0], t[1]) for t in refresh[0].targets}
    assert (form.revision._id, "change") in triggers
    assert (form.components["lora_rank"]._id, "input") in triggers
    assert (form.components["lora_rank"]._id, "change") not in triggers
