"""Runs & downloads: the run history; the LoRA (reference, diffusers or ComfyUI keys), the
configs, the logs or the whole run as a zip; a run's settings back into the form (to change
one thing and train again); delete a run. Every file handed out is a file
of a run in the history (``Ctx.run_file``); zips and exports are built in
{workspace}/downloads/<run_id>/."""
from __future__ import annotations

import html

import gradio as gr

from backend.config.errors import ConfigError
from backend.config.validation import validate
from backend.core.messages import Msg
from backend.jobs.runner import RunnerError
from webui import jobs
from webui.context import Ctx, human_bytes
from webui.i18n import T
from webui.messages import bilingual
from webui.tabs import publish
from webui.tabs.run import cell, error_of

HEADERS = ["run id", "name", "status", "stages", "created", "time", "note"]
# status and stages are shown in both languages (HTML spans; the page shows one)
DATATYPES = ["str", "html", "html", "html", "str", "str", "html"]


def headers(lang: str | None) -> list[str]:
    """The history table's column names in the page's language (gradio draws headers as
    plain text, so they follow the language switch through the server)."""
    return [Msg("runs.header", h=h).text("zh" if lang == "zh" else "en") for h in HEADERS]


def name_cell(name: str) -> str:
    """A run's name as HTML: what a user typed as it is; the name the app gives a render
    ("render <run>", ``webui.jobs``) as a message in both languages."""
    lead, sep, rest = name.partition(" ")
    if lead != "render" or not sep:
        return html.escape(name)
    return cell(Msg("runs.render_name", name=rest))


def table(runs: list[dict], lang: str | None) -> gr.Dataframe:
    """The history rows with status words, stage statuses, notes and the names the app gives
    (a render's) in both languages; every cell's text escaped."""
    rows = []
    for run, row in zip(runs, jobs.history_rows(runs)):
        rid, name, status, _, created, took, _ = row
        stages_html = " → ".join(
            f"{html.escape(s['name'])}:{cell(Msg('runtab.status', status=s['status']))}"
            for s in run.get("stages", []))
        note = run.get("failure_reason") or run.get("note") or ""
        rows.append([rid, name_cell(name), cell(Msg("runtab.status", status=status)),
                     stages_html, created, took, cell(note, 160)])
    return gr.Dataframe(value={"data": rows, "headers": headers(lang)} if rows else None,
                        headers=headers(lang))


def pick_label(run: dict, lang: str) -> str:
    """A run in the picker (plain text: in the page's language, redrawn when it changes)."""
    return Msg("runs.pick_label", name=run.get("name") or Msg("runs.unnamed"), id=run["id"],
               status=run["status"]).text(lang)


FORMATS = ("reference", "diffusers", "comfyui")


def create_ui(ctx: Ctx) -> None:
    c = ctx.c
    with gr.Row(equal_height=False, elem_classes=["zl-bottom"]):
        c["runs_refresh"] = gr.Button(T("runs.refresh"), elem_id="runs-refresh", scale=1)
        c["runs_pick"] = gr.Dropdown(choices=[], value=None, label=T("runs.select"),
                                     elem_id="runs-pick", scale=4)
        c["runs_open"] = gr.Button(T("runs.open"), elem_id="runs-open", scale=1)
        c["runs_reuse"] = gr.Button(T("runs.reuse"), elem_id="runs-reuse", scale=1)
    c["runs_table"] = gr.Dataframe(headers=HEADERS, datatype=DATATYPES, interactive=False,
                                   wrap=True,
                                   label=T("runs.history"), elem_id="runs-table", type="array")
    c["runs_info"] = gr.Markdown("", elem_id="runs-info")
    with gr.Row(equal_height=False):
        with gr.Column():
            c["dl_format"] = gr.Radio(list(FORMATS), value="diffusers", label=T("runs.format"),
                                      info=T("runs.format_info"), elem_id="dl-format")
            c["dl_checkpoint"] = gr.Dropdown(choices=[], value=None,
                                             label=T("runs.checkpoint"),
                                             elem_id="dl-checkpoint")
            with gr.Row():
                c["dl_lora"] = gr.Button(T("runs.dl_lora"), variant="primary",
                                         elem_id="dl-lora")
                c["dl_zip"] = gr.Button(T("runs.dl_zip"), elem_id="dl-zip")
            with gr.Row():
                c["dl_configs"] = gr.Button(T("runs.dl_configs"), elem_id="dl-configs")
                c["dl_logs"] = gr.Button(T("runs.dl_logs"), elem_id="dl-logs")
            with gr.Row(equal_height=False, elem_classes=["zl-bottom"]):
                c["extract_rank"] = gr.Number(value=64, precision=0, minimum=1,
                                              label=T("runs.extract_rank"),
                                              info=T("runs.extract_rank_info"),
                                              elem_id="extract-rank")
                c["extract_btn"] = gr.Button(T("runs.extract"), elem_id="extract-btn")
        with gr.Column():
            c["dl_file"] = gr.File(label=T("runs.file"), interactive=False, elem_id="dl-file")
            c["dl_msg"] = gr.Markdown("", elem_id="dl-msg")
            with gr.Row(equal_height=False, elem_classes=["zl-bottom"]):
                c["del_confirm"] = gr.Checkbox(label=T("runs.delete_confirm"), value=False,
                                               elem_id="del-confirm")
                c["del_btn"] = gr.Button(T("runs.delete"), variant="stop", elem_id="del-btn")
    publish.create_ui(ctx)  # the picked run's LoRA to the Hugging Face Hub


def _info(ctx: Ctx, run: dict | None) -> str:
    if run is None:
        return ""
    try:
        disk = human_bytes(ctx.runner.disk_usage(run["id"]))
    except RunnerError:
        disk = "?"
    ckpts = [p.name for p in jobs.checkpoints(run)]
    lines = [Msg("runs.summary", id=run["id"], status=run["status"], folder=run["run_dir"],
                 disk=disk),
             Msg("runs.checkpoints", names=ckpts) if ckpts else Msg("runs.no_checkpoints")]
    if run.get("failure_reason"):
        lines.append(Msg("runs.failure", why=run["failure_reason"]))
    return "  \n".join(bilingual(x) for x in lines)


def bind_events(ctx: Ctx) -> None:
    """The tab's events, group by group (the order gradio registers them in is kept)."""
    refresh, outputs = _bind_history(ctx)
    _bind_open_reuse(ctx)
    _bind_downloads(ctx)
    _bind_extract(ctx)
    _bind_delete(ctx, refresh, outputs)
    publish.bind_events(ctx)


def _picked(ctx: Ctx, run_id: str | None, request) -> dict:
    """The run info and checkpoint choices of the picked run."""
    c = ctx.c
    run = ctx.run(run_id, request)
    names = [p.name for p in jobs.checkpoints(run)] if run else []
    return {c["runs_info"]: _info(ctx, run),
            c["dl_checkpoint"]: gr.Dropdown(choices=names,
                                            value=names[-1] if names else None)}


def _bind_history(ctx: Ctx):
    """The history table and the run picker (refresh, the tab, the language, a pick, a
    table row). Returns the refresh callback and its outputs (deleting a run refreshes)."""
    c = ctx.c

    def refresh(data: dict, request: gr.Request):
        runs = ctx.runs(request)
        ids = [r["id"] for r in runs]
        pick = data.get(c["runs_pick"])
        if pick not in ids:
            trained = [r["id"] for r in runs if any(s["name"] == "train"
                                                    for s in r.get("stages", []))]
            pick = data.get(c["run_id"]) if data.get(c["run_id"]) in ids else (
                (trained or ids or [None])[0])
        lang = "zh" if data.get(c["lang_box"]) == "zh" else "en"
        return {c["runs_table"]: table(runs, data.get(c["lang_box"])),
                c["runs_pick"]: gr.Dropdown(choices=[(pick_label(r, lang), r["id"])
                                                     for r in runs], value=pick),
                **_picked(ctx, pick, request)}

    inputs = {c["runs_pick"], c["run_id"], c["lang_box"]}
    outputs = [c["runs_table"], c["runs_pick"], c["runs_info"], c["dl_checkpoint"]]
    # One listener for the button, the tab and the language: an older refresh (the page's
    # first language, sent on load) can never land after a newer one (another language).
    gr.on([c["runs_refresh"].click, c["tab_runs"].select, c["lang_box"].change], refresh,
          inputs=inputs, outputs=outputs, trigger_mode="always_last",
          api_visibility="private")

    def pick(data: dict, request: gr.Request):
        return _picked(ctx, data[c["runs_pick"]], request)

    c["runs_pick"].input(pick, inputs={c["runs_pick"]},
                         outputs=[c["runs_info"], c["dl_checkpoint"]], api_visibility="private")

    def table_select(evt: gr.SelectData, request: gr.Request):
        row = evt.row_value or []
        run_id = row[0] if row else None
        return {c["runs_pick"]: gr.Dropdown(value=run_id), **_picked(ctx, run_id, request)}

    c["runs_table"].select(table_select, inputs=None,
                           outputs=[c["runs_pick"], c["runs_info"], c["dl_checkpoint"]],
                           api_visibility="private")
    return refresh, outputs


def _bind_open_reuse(ctx: Ctx) -> None:
    """Open the picked run on the Run tab; put its settings back into the form."""
    c = ctx.c

    def open_run(data: dict, request: gr.Request):
        run = ctx.run(data[c["runs_pick"]], request)
        if run is None:
            return {c["dl_msg"]: bilingual(Msg("runs.choose_first"))}
        return {**c["follow"](run["id"], bilingual(Msg("runs.showing", id=run["id"]))),
                c["tabs"]: gr.Tabs(selected="tab-run")}

    c["runs_open"].click(open_run, inputs={c["runs_pick"]},
                         outputs=c["follow_outputs"] + [c["tabs"], c["dl_msg"]],
                         show_progress_on=[c["dl_msg"]], api_visibility="private").then(
        c["on_tick"][0], inputs=c["on_tick"][1], outputs=c["on_tick"][2],
        show_progress="hidden", api_visibility="private")

    def reuse(data: dict, request: gr.Request):
        """The picked run's settings into the form (paths the plan sets stay out: a new run
        gets its own folder)."""
        run = ctx.run(data[c["runs_pick"]], request)
        if run is None:
            return {c["dl_msg"]: bilingual(Msg("runs.choose_first_x"))}
        try:
            cfg = validate(jobs.run_config(run), require_inputs=False).to_dict()
        except ConfigError as e:
            return {c["dl_msg"]: bilingual(Msg("runs.no_longer_valid")) +
                    "  \n" + "  \n".join(bilingual(p) for p in e.problems)}
        form = ctx.form
        # Said on the Training tab, where the user lands, not on the tab just left.
        return {**form.to_updates(form.full_config(cfg), data), c["dl_msg"]: "",
                c["train_notice"]: bilingual(Msg("runs.form_holds", id=run["id"])),
                c["tabs"]: gr.Tabs(selected="tab-training")}

    c["runs_reuse"].click(reuse, inputs=ctx.form.inputs | {c["runs_pick"]},
                          outputs=ctx.form.fill_outputs + [
                              c["dl_msg"], c["train_notice"], c["tabs"]],
                          show_progress_on=[c["dl_msg"]],
                          api_visibility="private")


def _bind_downloads(ctx: Ctx) -> None:
    """The four download buttons: the LoRA, the configs, the logs, the whole run."""
    c = ctx.c

    def download(kind: str):
        def fn(data: dict, request: gr.Request):
            run = ctx.run(data[c["runs_pick"]], request)
            if run is None:
                return {c["dl_msg"]: bilingual(Msg("runs.choose_first_x")), c["dl_file"]: None}
            out_dir = ctx.downloads_dir(run)
            try:
                if kind == "lora":
                    path = jobs.lora_download(run, data[c["dl_checkpoint"]],
                                              data[c["dl_format"]])
                elif kind == "configs":
                    path = jobs.configs_zip(run, out_dir)
                elif kind == "logs":
                    path = jobs.logs_zip(run, out_dir)
                else:
                    path = jobs.run_zip(run, out_dir)
            except (ValueError, OSError) as e:
                return {c["dl_msg"]: bilingual(Msg("runs.error", why=error_of(e))),
                        c["dl_file"]: None}
            served = ctx.serve(run["id"], path, request)
            return {c["dl_file"]: served,
                    c["dl_msg"]: bilingual(Msg("runs.download_ready", file=path.name,
                                               size=human_bytes(path.stat().st_size)))}
        return fn

    dl_inputs = {c["runs_pick"], c["dl_checkpoint"], c["dl_format"]}
    for kind, btn in (("lora", "dl_lora"), ("configs", "dl_configs"), ("logs", "dl_logs"),
                      ("zip", "dl_zip")):
        c[btn].click(download(kind), inputs=dl_inputs, outputs=[c["dl_file"], c["dl_msg"]],
                     api_visibility="private")


def _bind_extract(ctx: Ctx) -> None:
    """Extract LoRA: a job of its own that writes a LoRA of the picked full checkpoint into
    the run's output/export/ (``backend/planning/extract_job.py``)."""
    c = ctx.c

    def extract(data: dict, request: gr.Request):
        run = ctx.run(data[c["runs_pick"]], request)
        if run is None:
            return {c["dl_msg"]: bilingual(Msg("runs.choose_first_x"))}
        try:
            job_id = jobs.submit_extract(ctx.runner, run, data[c["dl_checkpoint"]],
                                         data[c["extract_rank"]], owner=ctx.owner(request))
        except ConfigError as e:
            return {c["dl_msg"]: "  \n".join(bilingual(p) for p in e.problems)}
        except (ValueError, OSError) as e:
            return {c["dl_msg"]: bilingual(Msg("runs.error", why=error_of(e)))}
        return {c["dl_msg"]: bilingual(Msg("runs.extract_queued", id=job_id))}

    c["extract_btn"].click(extract, inputs={c["runs_pick"], c["dl_checkpoint"],
                                            c["extract_rank"]},
                           outputs=[c["dl_msg"]], show_progress_on=[c["dl_msg"]],
                           api_visibility="private")


def _bind_delete(ctx: Ctx, refresh, outputs: list) -> None:
    """Delete the picked run (after the confirm box), then refresh the history."""
    c = ctx.c

    def delete(data: dict, request: gr.Request):
        run = ctx.run(data[c["runs_pick"]], request)
        if run is None:
            return {c["dl_msg"]: bilingual(Msg("runs.choose_first_x"))}
        if not data[c["del_confirm"]]:
            return {c["dl_msg"]: bilingual(Msg("runs.tick_box"))}
        try:
            ctx.runner.delete(run["id"])
        except RunnerError as e:
            return {c["dl_msg"]: bilingual(Msg("runs.error", why=error_of(e)))}
        out = refresh({c["runs_pick"]: None, c["run_id"]: None,
                       c["lang_box"]: data.get(c["lang_box"])}, request)
        out.update({c["dl_msg"]: bilingual(Msg("runs.deleted", id=run["id"])),
                    c["del_confirm"]: False, c["dl_file"]: None})
        return out

    c["del_btn"].click(delete, inputs={c["runs_pick"], c["del_confirm"], c["lang_box"]},
                       outputs=outputs + [c["dl_msg"], c["del_confirm"], c["dl_file"]],
                       api_visibility="private")
