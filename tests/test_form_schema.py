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
    shown = form.error_updates(problems)
    assert shown[form.errors["lora_rank"]].visible is True
    assert "lora_rank" in shown[form.errors["lora_rank"]].value
    assert shown[form.errors["seed"]].visible is False
