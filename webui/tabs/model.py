"""Model & preset: pick a preset (the CPU demo on a fresh start), the model family and its
sources; save the form as a preset; see what differs from the loaded preset."""
from __future__ import annotations

import gradio as gr

from backend.config.errors import ConfigError
from backend.config.presets import diff_configs, list_presets, load_preset, save_preset
from backend.config.schema import RunConfig
from backend.config.validation import validate
from backend.core.messages import Msg
from backend.jobs import slurm_runs
from webui.messages import bilingual, refusal
from webui import security
from webui.context import Ctx
from webui.i18n import T

DEFAULT_PRESET = "cpu_demo"


def base_config(ctx: Ctx) -> RunConfig:
    """Schema defaults, with the app's models folder when it was given one and where this
    server runs the stages (``--executor slurm``: executor slurm, the server's partition)."""
    server = slurm_runs.form_defaults(ctx.runner)
    return RunConfig(models_dir=str(ctx.models_dir), **server) if ctx.models_dir \
        else RunConfig(**server)


def preset_names(ctx: Ctx, user: str | None = None) -> list[str]:
    return list(dict.fromkeys(name for name, _ in list_presets(ctx.workspace, user)))


def preset_config(ctx: Ctx, name: str | None, user: str | None = None) -> dict:
    """The full config dict a preset gives (schema defaults under the preset's values)."""
    if not name:
        return base_config(ctx).to_dict()
    return load_preset(name, ctx.workspace, base=base_config(ctx),
                       **security.preset_owner(user)).to_dict()


def initial_config(ctx: Ctx) -> tuple[str | None, dict]:
    names = preset_names(ctx)
    name = DEFAULT_PRESET if DEFAULT_PRESET in names else None
    try:
        return name, preset_config(ctx, name)
    except ConfigError:
        return None, base_config(ctx).to_dict()




def diff_markdown(loaded: dict | None, current: dict, name: str | None) -> str:
    if not loaded:
        return ""
    rows = diff_configs(RunConfig.model_construct(**loaded),
                        RunConfig.model_construct(**{**loaded, **current}))
    if not rows:
        return bilingual(Msg("preset.same", name=name) if name else Msg("preset.same_defaults"))
    head = (Msg("preset.changes", n=len(rows), name=name) if name
            else Msg("preset.changes_defaults", n=len(rows)))
    heads = (Msg("preset.col_field"), Msg("preset.col_preset"), Msg("preset.col_now"))
    lines = [bilingual(head), "", "| " + " | ".join(bilingual(h) for h in heads) + " |",
             "|---|---|---|"]
    for field, a, b in rows:
        lines.append(f"| `{field}` | {_cell(a)} | {_cell(b)} |")
    return "\n".join(lines)


def _cell(v) -> str:
    text = "" if v is None else (", ".join(map(str, v)) if isinstance(v, list) else str(v))
    text = text.replace("|", "\\|").replace("\n", " ")
    if not text:
        return bilingual(Msg("word.empty"))
    return f"`{text[:60]}{'…' if len(text) > 60 else ''}`"


def create_ui(ctx: Ctx) -> None:
    c = ctx.c
    name, _ = initial_config(ctx)
    gr.Markdown(T("model.intro"))
    with gr.Row(equal_height=False, elem_classes=["zl-bottom"]):
        c["preset"] = gr.Dropdown(choices=preset_names(ctx), value=name, label=T("model.preset"),
                                  info=T("model.preset_info"), elem_id="preset", scale=3)
        c["preset_load"] = gr.Button(T("model.load"), elem_id="preset-load", scale=1)
    c["preset_msg"] = gr.Markdown("", elem_id="preset-msg")
    ctx.form.render_group("model")
    # Not a schema field: a token never reaches a file, the history or a log.
    c["hub_token"] = gr.Textbox(label=T("model.token"), info=T("model.token_info"),
                                type="password", elem_id="hub-token", max_lines=1)
    with gr.Row(equal_height=False, elem_classes=["zl-bottom"]):
        c["preset_save_name"] = gr.Textbox(label=T("model.save_name"),
                                           placeholder=T("model.save_name_ph"),
                                           elem_id="preset-save-name", scale=3)
        c["preset_save"] = gr.Button(T("model.save"), elem_id="preset-save", scale=1)
    c["preset_shared"] = gr.Checkbox(False, label=T("model.share"),
                                     elem_id="preset-shared")
    with gr.Accordion(T("model.diff"), open=True):
        c["preset_diff"] = gr.Markdown("", elem_id="preset-diff")


def bind_events(ctx: Ctx) -> None:
    c, form = ctx.c, ctx.form

    def load(data: dict, request: gr.Request):
        name = data[c["preset"]]
        try:
            cfg = preset_config(ctx, name, ctx.owner(request))
        except ConfigError as e:
            return {c["preset_msg"]: refusal(e.problems)}
        return {**form.to_updates(form.full_config(cfg), data), c["loaded"]: cfg,
                c["loaded_name"]: name, c["preset_msg"]: bilingual(Msg("preset.loaded", name=name)),
                c["preset_diff"]: diff_markdown(cfg, cfg, name)}

    outputs = form.fill_outputs + [c["loaded"], c["loaded_name"], c["preset_msg"],
                                   c["preset_diff"]]
    # A pick is the drop-down's ``select`` (its ``input`` fires twice per pick: two fills).
    for trigger in (c["preset"].select, c["preset_load"].click):
        trigger(load, inputs=form.inputs | {c["preset"]}, outputs=outputs,
                show_progress_on=[c["preset_msg"]], api_visibility="private")

    def presets_now(data: dict, request: gr.Request):
        """Presets saved since the app started (in any session) show up on page load."""
        names = preset_names(ctx, ctx.owner(request))
        value = data[c["preset"]]
        return gr.Dropdown(choices=names, value=value if value in names else None)

    c["demo"].load(presets_now, inputs={c["preset"]}, outputs=[c["preset"]],
                   show_progress="hidden", api_visibility="private")

    def save(data: dict, request: gr.Request):
        name = (data[c["preset_save_name"]] or "").strip()
        user = ctx.owner(request)
        cfg_dict, problems = form.to_config(data)
        if problems:
            return {c["preset_msg"]: refusal(problems)}
        try:
            cfg = validate(cfg_dict, require_inputs=False)
            path = save_preset(cfg, name, ctx.workspace, base=base_config(ctx),
                               shared=bool(data[c["preset_shared"]]),
                               **security.preset_owner(user))
        except ConfigError as e:
            return {c["preset_msg"]: refusal(e.problems)}
        return {c["preset_msg"]: bilingual(Msg("preset.saved", name=name, file=path.name)),
                c["preset"]: gr.Dropdown(choices=preset_names(ctx, user), value=name),
                c["loaded"]: cfg.to_dict(), c["loaded_name"]: name,
                c["preset_diff"]: diff_markdown(cfg.to_dict(), cfg_dict, name)}

    # Choosing another family fills its defaults where the form still shows the old one's.
    family = form.components.get("model_family")
    if family is not None:
        c["family_shown"] = gr.State(form.defaults.get("model_family"))

        def family_changed(data: dict):
            new = data[family]  # the family's own value: its change may beat the snapshot's
            old = data[c["family_shown"]] or new
            values = {**form.values(data), "model_family": new}
            return {**form.to_updates(form.family_switch(values, old, new), data),
                    c["family_shown"]: new}

        family.change(family_changed, inputs=form.inputs | {family, c["family_shown"]},
                      outputs=form.fill_outputs + [c["family_shown"]], show_progress="hidden",
                      show_progress_on=[family], api_visibility="private")

    c["preset_save"].click(save, inputs=form.inputs | {c["preset_save_name"],
                                                       c["preset_shared"]},
                           outputs=[c["preset_msg"], c["preset"], c["loaded"],
                                    c["loaded_name"], c["preset_diff"]],
                           api_visibility="private")
