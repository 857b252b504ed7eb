"""Results: render prompts × checkpoints × LoRA scales with a base-model column at the same
seed. A render is a sample-stage job run by the runner (its own process); the grid is read
from the run's samples/index.json."""
from __future__ import annotations

import gradio as gr

from backend.config.schema import FIELDS
from backend.core.messages import Msg
from backend.jobs.runner import RunnerError
from webui import jobs, services
from webui.context import TERMINAL, Ctx
from webui.form import from_widget_value, to_widget_value
from webui.i18n import T
from webui.messages import bilingual, refusal
from webui.tabs.run import with_sample_counts

RENDER_TICK_S = 2.0
# The grid shows every row: gradio caps a gallery without a fixed height at 55% of the
# window and scrolls inside it, which cut the third row of a 3-prompt grid.
GRID_CSS = """
#res-grid .grid-wrap {max-height: none !important; overflow-y: visible !important;}
#res-grid .grid-container {grid-template-rows: none !important;}
"""


def create_ui(ctx: Ctx) -> None:
    c = ctx.c
    gr.Markdown(T("res.intro"))
    c["res_render_state"] = gr.State(None)  # the render job being watched
    c["res_timer"] = gr.Timer(RENDER_TICK_S, active=False)
    with gr.Row(equal_height=False, elem_classes=["zl-bottom"]):
        c["res_run"] = gr.Dropdown(choices=[], value=None, label=T("res.run"),
                                   elem_id="res-run", scale=4, allow_custom_value=False)
        c["res_refresh"] = gr.Button(T("res.refresh"), elem_id="res-refresh", scale=1)
    with gr.Row(equal_height=False):
        with gr.Column(scale=2):
            c["res_prompts"] = gr.Textbox(label=T("res.prompts"), lines=4,
                                          elem_id="res-prompts")
            c["res_images"] = gr.Textbox(label=T("res.images"), lines=2,
                                         elem_id="res-images")
            c["res_videos"] = gr.Textbox(label=T("res.videos"), lines=2,
                                         elem_id="res-videos")
            c["res_checkpoints"] = gr.CheckboxGroup(choices=[], label=T("res.checkpoints"),
                                                    elem_id="res-checkpoints")
            c["res_scales"] = gr.Textbox(label=T("res.scales"), value="0, 1",
                                         elem_id="res-scales")
            c["res_ema"] = gr.Radio(["raw", "ema", "both"], value="raw", label=T("res.ema"),
                                    info=T("res.ema_info"), elem_id="res-ema")
        with gr.Column(scale=1):
            c["res_seed"] = gr.Number(label=T("res.seed"), precision=0,
                                      elem_id="res-seed")
            c["res_steps"] = gr.Number(label=T("res.steps"), precision=0,
                                       elem_id="res-steps")
            c["res_cfg"] = gr.Number(label=T("res.cfg"), elem_id="res-cfg")
            with gr.Row():
                c["res_height"] = gr.Number(label=T("res.height"), precision=0, step=16,
                                            elem_id="res-height", min_width=80)
                c["res_width"] = gr.Number(label=T("res.width"), precision=0, step=16,
                                           elem_id="res-width", min_width=80)
    c["res_render"] = gr.Button(T("res.render"), variant="primary", elem_id="res-render")
    c["res_status"] = gr.Markdown("", elem_id="res-status")
    c["res_set"] = gr.Dropdown(choices=[], value=None, label=T("res.set"),
                               info=T("res.set_info"), elem_id="res-set", allow_custom_value=False)
    c["res_columns"] = gr.Markdown("", elem_id="res-columns")
    c["res_grid"] = gr.Gallery(label=T("res.grid"), columns=3, elem_id="res-grid",
                               object_fit="contain", height="auto", buttons=["download"])


SETTINGS = {"res_prompts": "sample_prompts", "res_images": "sample_images",
            "res_videos": "sample_videos",
            "res_seed": "sample_seed",
            "res_steps": "sample_steps", "res_cfg": "sample_cfg",
            "res_height": "sample_height", "res_width": "sample_width",
            "res_scales": "sample_lora_scales", "res_ema": "sample_use_ema"}


def run_choices(ctx: Ctx, request) -> list[tuple[str, str]]:
    """Training runs (those with a train stage), newest first."""
    out = []
    for r in ctx.runs(request):
        if any(s["name"] == "train" for s in r.get("stages", [])):
            label = f"{r.get('name') or 'run'} · {r['id']} · {r['status']}"
            out.append((label, r["id"]))
    return out


def show_run(ctx: Ctx, run_id: str | None, request, lang: str | None = None) -> dict:
    """Controls filled from the run's own sample settings, and its grid."""
    c = ctx.c
    run = ctx.run(run_id, request)
    if run is None:
        return {c["res_checkpoints"]: gr.CheckboxGroup(choices=[], value=[]),
                c["res_grid"]: [], c["res_columns"]: "", c["res_status"]: "",
                c["res_set"]: gr.Dropdown(choices=[], value=None)}
    cfg = jobs.run_config(run)
    names = [p.name for p in jobs.checkpoints(run)]
    # A setting the run's config predates shows its default.
    out = {c[k]: to_widget_value(field, cfg.get(field, FIELDS[field].default))
           for k, field in SETTINGS.items()}
    out[c["res_checkpoints"]] = gr.CheckboxGroup(choices=names, value=names[-1:])
    out.update(grid_outputs(ctx, run, request, lang=lang))
    out[c["res_status"]] = "" if names else bilingual(Msg("results.no_checkpoint"))
    return out


def grid_outputs(ctx: Ctx, run: dict, request, sample_set: str | None = None,
                 lang: str | None = None) -> dict:
    """The grid of one set of the run's samples (default: the newest) and the set picker, in
    the page's language ``lang`` (captions and choices are plain text)."""
    c = ctx.c
    sets = jobs.sample_sets(run, lang)
    keys = [k for _, k in sets]
    chosen = sample_set if sample_set in keys else (keys[0] if keys else None)
    images, titles, ncols = jobs.grid(run, chosen, lang)
    served = []
    for path, caption in images:
        try:
            served.append((ctx.serve(run["id"], path, request), caption))
        except gr.Error:
            continue
    header = bilingual(Msg("results.columns", titles=titles) if titles
                       else Msg("results.no_samples"))
    return {c["res_grid"]: gr.Gallery(value=served, columns=max(1, ncols)),
            c["res_columns"]: header,
            c["res_set"]: gr.Dropdown(choices=sets, value=chosen)}


def bind_events(ctx: Ctx) -> None:
    c = ctx.c
    show_outputs = [c[k] for k in SETTINGS] + [c["res_checkpoints"], c["res_grid"],
                                               c["res_columns"], c["res_status"], c["res_set"]]

    def refresh(data: dict, request: gr.Request):
        choices = run_choices(ctx, request)
        ids = [v for _, v in choices]
        current = data.get(c["res_run"])
        if current not in ids:
            current = data.get(c["run_id"]) if data.get(c["run_id"]) in ids else (
                ids[0] if ids else None)
        return {c["res_run"]: gr.Dropdown(choices=choices, value=current),
                **show_run(ctx, current, request, data.get(c["lang_box"]))}

    refresh_inputs = {c["res_run"], c["run_id"], c["lang_box"]}
    refresh_outputs = [c["res_run"]] + show_outputs
    c["res_refresh"].click(refresh, inputs=refresh_inputs, outputs=refresh_outputs,
                           api_visibility="private")
    c["tab_results"].select(refresh, inputs=refresh_inputs, outputs=refresh_outputs,
                            api_visibility="private")

    def pick(data: dict, request: gr.Request):
        return show_run(ctx, data[c["res_run"]], request, data.get(c["lang_box"]))

    c["res_run"].input(pick, inputs={c["res_run"], c["lang_box"]}, outputs=show_outputs,
                       api_visibility="private")

    def pick_set(data: dict, request: gr.Request):
        run = ctx.run(data[c["res_run"]], request)
        if run is None:
            return {c["res_grid"]: [], c["res_columns"]: "", c["res_set"]: gr.skip()}
        return grid_outputs(ctx, run, request, data[c["res_set"]], data.get(c["lang_box"]))

    c["res_set"].input(pick_set, inputs={c["res_run"], c["res_set"], c["lang_box"]},
                       outputs=[c["res_grid"], c["res_columns"], c["res_set"]],
                       api_visibility="private")

    def relabel(data: dict, request: gr.Request):
        """The shown grid's captions and set names in the page's new language (nothing
        else: what the user typed into the render settings stays)."""
        run = ctx.run(data[c["res_run"]], request)
        if run is None:
            return {c["res_grid"]: gr.skip()}  # (an empty dict would be one value)
        return grid_outputs(ctx, run, request, data[c["res_set"]], data.get(c["lang_box"]))

    c["lang_box"].change(relabel, inputs={c["res_run"], c["res_set"], c["lang_box"]},
                         outputs=[c["res_grid"], c["res_columns"], c["res_set"]],
                         show_progress="hidden", api_visibility="private")

    def render(data: dict, request: gr.Request):
        run = ctx.run(data[c["res_run"]], request)
        if run is None:
            return {c["res_status"]: bilingual(Msg("results.choose_run"))}
        if run["status"] not in TERMINAL:
            return {c["res_status"]: bilingual(Msg("results.not_ended", run=run["id"],
                                                   status=run["status"]))}
        settings, problems = {}, []
        for k, field in SETTINGS.items():
            value, problem = from_widget_value(field, data[c[k]])
            if problem:
                problems.append(problem)
            settings[field] = value
        if problems:
            return {c["res_status"]: refusal(problems)}
        try:
            job = services.render(ctx, run, settings, list(data[c["res_checkpoints"]] or []),
                                  ctx.owner(request))
        except services.Refused as e:
            return {c["res_status"]: refusal(e)}
        return {c["res_status"]: bilingual(Msg("results.render_queued", job=job)),
                c["res_render_state"]: {"job": job, "run": run["id"]},
                c["res_timer"]: gr.Timer(active=True)}

    c["res_render"].click(render, inputs={c[k] for k in SETTINGS} | {
        c["res_run"], c["res_checkpoints"]}, outputs=[c["res_status"], c["res_render_state"],
                                                      c["res_timer"]],
        api_visibility="private")

    def watch(data: dict, request: gr.Request):
        st = data[c["res_render_state"]]
        if not st:
            return {c["res_timer"]: gr.Timer(active=False)}
        job = ctx.run(st["job"], request)
        run = ctx.run(st["run"], request)
        if job is None or run is None:
            return {c["res_timer"]: gr.Timer(active=False), c["res_render_state"]: None}
        p = {}
        try:
            p = with_sample_counts(ctx.runner.progress(job["id"]))
        except RunnerError:
            pass
        if job["status"] not in TERMINAL:
            line = (Msg("results.rendering_count", job=job["id"], status=job["status"],
                        done=p.get("step") or 0, total=p["total"]) if p.get("total")
                    else Msg("results.rendering", job=job["id"], status=job["status"]))
            return {c["res_status"]: bilingual(line),
                    **grid_outputs(ctx, run, request, job["id"], data.get(c["lang_box"]))}
        out = {c["res_timer"]: gr.Timer(active=False), c["res_render_state"]: None,
               **grid_outputs(ctx, run, request, job["id"], data.get(c["lang_box"]))}
        if job["status"] == "succeeded":
            out[c["res_status"]] = bilingual(Msg("results.rendered", job=job["id"]))
        else:
            f = ctx.runner.failure_summary(job["id"]) or {}
            why = f.get("headline") or job.get("note") or ""
            out[c["res_status"]] = bilingual(
                Msg("results.render_ended_why", job=job["id"], status=job["status"], why=why)
                if why else Msg("results.render_ended", job=job["id"], status=job["status"]))
        return out

    c["res_timer"].tick(watch, inputs={c["res_render_state"], c["lang_box"]},
                        outputs=[c["res_timer"], c["res_render_state"], c["res_status"],
                                 c["res_grid"], c["res_columns"], c["res_set"]],
                        show_progress="hidden", api_visibility="private")
