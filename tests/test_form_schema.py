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
    updates = form.to_updates(shown, form.event_inputs({}))  # {component: widget value}
    back, problems = form.to_config(updates)
    assert problems == []
    assert back == shown
    assert set(back) == set(form.components)
    RunConfig.model_validate({**cfg, **back})


def test_bad_values_are_reported_by_field(app):
    form = app.zerolora_ctx.form
    values = form.values(form.to_updates(form.full_config({}), form.event_inputs({})))
    values.update(lora_rank=0, sample_lora_scales="0, lots", max_steps="ten")
    cfg, _, problems = form.check(form.event_inputs(values))
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


def test_a_fill_sends_the_fields_that_change_and_the_form_travels_as_one_value(app):
    """A preset fills only the fields it changes, with the form's snapshot (every field's
    value, one JSON text); every handler that fills fields sends the snapshot, every event
    that reads the form takes it instead of the fields, and what follows the form listens
    to the snapshot: once per fill, once per edit."""
    import json

    from backend.config.presets import load_preset

    form = app.zerolora_ctx.form
    shown = form.to_updates(form.full_config(load_preset("cpu_demo").to_dict()),
                            form.event_inputs({}))
    snap = shown[form.snapshot]
    assert json.loads(snap)["lora_rank"] == load_preset("cpu_demo").lora_rank
    other = form.to_updates(form.full_config(load_preset("cpu_demo_zero3").to_dict()),
                            {form.snapshot: snap})
    changed = {name for name, comp in form.components.items() if comp in other}
    assert "zero_stage" in changed and 0 < len(changed) < len(form.components) / 4, changed
    after = json.loads(other[form.snapshot])
    assert after["zero_stage"] == 3 and after["lora_rank"] == json.loads(snap)["lora_rank"]
    assert form.to_updates(form.full_config(load_preset("cpu_demo").to_dict()),
                           {form.snapshot: snap}) == {}  # nothing changes: nothing to follow
    # A fill of a few fields keeps every other value of the snapshot; a handler that fills
    # without the snapshot among its inputs is refused.
    edited = json.dumps({**json.loads(snap), "lora_rank": 7})
    few = form.to_updates({"dataset_base_path": "/data/cats"}, {form.snapshot: edited})
    assert set(few) == {form.components["dataset_base_path"], form.snapshot}
    assert json.loads(few[form.snapshot])["lora_rank"] == 7
    with pytest.raises(KeyError, match="snapshot"):
        form.to_updates({"dataset_base_path": "/data/cats"}, {})
    cfg, _, problems = form.check({form.snapshot: snap})
    assert not problems and cfg.lora_rank == load_preset("cpu_demo").lora_rank
    fns = list(app.fns.values() if isinstance(app.fns, dict) else app.fns)
    fields = {comp._id for comp in form.components.values()}
    fills = [fn for fn in fns if fn.fn is not None and fields & {o._id for o in fn.outputs}]
    assert len(fills) >= 6, [fn.name for fn in fills]
    for fn in fills:
        if fn.name == "update":  # a show_if field's visibility, not its value
            continue
        assert form.snapshot._id in {o._id for o in fn.outputs}, \
            f"{fn.name} fills fields without the form's snapshot (use Form.to_updates)"
    # No server event takes more than two fields as inputs: the snapshot carries the form.
    heavy = [f"{fn.name}: {len(fields & {i._id for i in fn.inputs})}" for fn in fns
             if fn.fn is not None and len(fields & {i._id for i in fn.inputs}) > 2]
    assert not heavy, f"events reading the form field by field: {heavy}"
    # Each field's edit writes the snapshot in the browser (no server call).
    mirrors = [fn for fn in fns if fn.fn is None and fn.js and
               [o._id for o in fn.outputs] == [form.snapshot._id]]
    assert {fn.inputs[0]._id for fn in mirrors} == fields
    # The checks and the estimate follow the snapshot, not each field's events.
    refresh = [fn for fn in fns if fn.name == "refresh" and form.errors_shown._id in
               {o._id for o in fn.outputs}]
    assert len(refresh) == 1
    triggers = {(t[0], t[1]) for t in refresh[0].targets}
    assert (form.snapshot._id, "change") in triggers
    assert not {t for t in triggers if t[0] in fields}, triggers


def test_an_event_with_many_outputs_shows_its_progress_on_one_place(app):
    """The page keeps a loading status for every component an event shows progress on,
    and walks all of them at each status change of any event: an event that writes the
    form names the one place its progress shows (``show_progress_on``), so its fields
    never become pending and the page stays light."""
    fns = app.fns.values() if isinstance(app.fns, dict) else app.fns
    big = [fn for fn in fns if len(fn.outputs) > 16]
    assert len(big) >= 6, [fn.name for fn in big]
    loose = [f"{fn.name} ({len(fn.outputs)} outputs)" for fn in big
             if not fn.show_progress_on or len(fn.show_progress_on) > 2]
    assert not loose, f"events showing progress on every output: {loose}"


def test_no_event_shows_its_progress_on_a_layout(app):
    """A loading status kept on a layout (the tabs, a tab, a row) is walked with everything
    inside it at each status change of any event: on the tabs, the whole page at every
    event (about 3 s of each preset pick went there). An event whose outputs are layouts
    shows its progress on a component of its own."""
    from gradio.blocks import BlockContext

    fns = app.fns.values() if isinstance(app.fns, dict) else app.fns
    on_layout = [f"{fn.name}: {type(t).__name__} {t.elem_id}" for fn in fns if fn.fn is not None
                 for t in (fn.show_progress_on or fn.outputs)
                 if isinstance(t, BlockContext) and getattr(t, "children", None)]
    assert not on_layout, on_layout

