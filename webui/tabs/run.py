"""Run: start, stop, resume; each stage's status; the live log (read by byte offset on a
timer); progress with step, ETA and loss; the loss plot; samples made during training; the
failure summary; GPU memory where there is a GPU.

The current run id lives in the browser (gr.BrowserState), so a reloaded page -- or a
restarted server -- shows the same run again. The timer re-reads files on each tick; it
holds no worker between ticks and stops once the run has ended and its last state is shown.
"""
from __future__ import annotations

import html
import re
import time

import gradio as gr
import pandas as pd

from backend.core.messages import Msg
from backend.jobs.diagnosis import clean_lines
from backend.jobs.runner import RunnerError
from backend.training.tracking import ONLINE
from webui import jobs, security, services
from webui.context import TERMINAL, Ctx, gpu_memory_text, human_seconds
from webui.i18n import T
from webui.messages import bilingual, bilingual_plain

TICK_S = 1.0
LOG_KEEP_BYTES = 256 * 1024
LOG_SHOW_LINES = 400
STATUS_ICON = {"queued": "○", "running": "▶", "succeeded": "✓", "failed": "✗",
               "stopped": "■", "skipped": "–"}


def new_log_state(run_id: str | None = None) -> dict:
    return {"run": run_id, "stage": None, "offset": 0, "raw": "", "samples": None,
            "losses": None, "final": False, "failure": None, "gpu": None,
            "stage_names": None}


def create_ui(ctx: Ctx) -> None:
    c = ctx.c
    c["log_state"] = gr.State(new_log_state())
    c["timer"] = gr.Timer(TICK_S, active=False)
    with gr.Row(equal_height=False, elem_classes=["zl-bottom"]):
        c["run_start"] = gr.Button(T("run.start"), variant="primary", elem_id="run-start",
                                   scale=2)
        c["run_stop"] = gr.Button(T("run.stop"), variant="stop", elem_id="run-stop", scale=1)
        c["run_resume"] = gr.Button(T("run.resume"), elem_id="run-resume", scale=1)
    c["run_active"] = gr.Markdown("", elem_id="run-active")
    c["run_problems"] = gr.Markdown("", elem_id="run-problems")
    c["run_msg"] = gr.Markdown("", elem_id="run-message")
    c["run_head"] = gr.Markdown(bilingual(Msg("runtab.no_run_yet")), elem_id="run-current")
    c["run_progress"] = gr.HTML(progress_html(None), elem_id="run-progress")
    c["run_stages"] = gr.HTML("", elem_id="run-stages")
    c["gpu"] = gr.Markdown("", elem_id="run-gpu", visible=False)
    c["failure"] = gr.Markdown("", elem_id="run-failure", visible=False,
                               elem_classes=["zl-failure"])
    with gr.Row(equal_height=False):
        c["loss_plot"] = gr.LinePlot(loss_frame([]), x="step", y="loss", color="series",
                                     color_title="", label=T("run.loss"), elem_id="loss-plot",
                                     height=260, scale=3)
        c["run_samples"] = gr.Gallery(label=T("run.samples"), columns=4, height=260,
                                      elem_id="run-samples", scale=2, buttons=["download"])
    c["log_stage"] = gr.Radio(["auto"], value="auto", label=T("run.log_stage"),
                              elem_id="log-stage")
    c["log"] = gr.Textbox("", label=T("run.log"), lines=18, max_lines=18, autoscroll=True,
                          interactive=False, elem_id="run-log", elem_classes=["zl-log"])


# ---------------------------------------------------------------------- rendering
ACTIVE = ("running", "queued")
_CODE = re.compile(r"`([^`\n]+)`")


def cell(value, limit: int | None = None) -> str:
    """A table cell (HTML) in both languages (the page shows one): a message rendered in
    each, its code spans as <code>, at most ``limit`` characters of each; plain text (a
    note written before notes were messages) as ``bilingual_plain`` shows it."""
    if not isinstance(value, Msg):
        return bilingual_plain(str(value)[:limit] if limit else str(value))

    def one(text: str) -> str:
        return _CODE.sub(r"<code>\1</code>", html.escape(text[:limit] if limit else text))

    en, zh = one(value.text("en")), one(value.text("zh"))
    return en if en == zh else f'<span class="zl-en">{en}</span><span class="zl-zh">{zh}</span>'


def error_of(e: BaseException):
    """What a refusal says: the message it carries, else its text."""
    first = e.args[0] if e.args else None
    return first if isinstance(first, Msg) else str(e)


def problem_lines(problems: list) -> str:
    """The form's problems as a Markdown list: a message in both languages, plain text in a
    code span."""
    return "\n".join("- " + (bilingual(p) if isinstance(p, Msg) else f"`{p}`")
                     for p in problems)


def my_active_runs(ctx: Ctx, request: gr.Request | None) -> list[dict]:
    """The signed-in user's running and queued runs (without sign-in: every run), the
    running ones first, then the queue in the order it starts."""
    user = ctx.owner(request)
    runs = [r for r in ctx.runs(request)
            if r["status"] in ACTIVE and (user is None or r.get("owner") == user)]
    return sorted(runs, key=lambda r: (r["status"] != "running", r.get("created_at") or 0,
                                       r.get("seq") or 0))


def run_to_follow(followed: dict | None, active: list[dict]) -> dict | None:
    """What the Run tab shows: the followed run while it is active; once it has ended, the
    user's running run if there is one; on a page that follows none, the first active."""
    if followed is None:
        return active[0] if active else None
    if followed["status"] in ACTIVE:
        return followed
    running = [r for r in active if r["status"] == "running"]
    return running[0] if running else followed


def active_markdown(active: list[dict]) -> str:
    """The user's runs on the server right now, and what Start does while they last."""
    if not active:
        return ""
    parts = []
    for r in active:
        name = f" {r['name']}" if r.get("name") else ""
        if r["status"] == "running":
            stage = f" ({r['current_stage']})" if r.get("current_stage") else ""
            parts.append(f"▶ `{r['id']}`{name} — " + bilingual(
                Msg("runtab.status", status="running")) + stage)
        else:
            parts.append(f"○ `{r['id']}`{name} — " + bilingual(
                Msg("runtab.status", status="queued")))
    return (bilingual(Msg("runtab.your_runs")) + " " + " · ".join(parts) + "  \n" +
            bilingual(Msg("runtab.start_adds")))


def loss_frame(losses: list, val_losses: list | None = None, lang: str | None = None
               ) -> pd.DataFrame:
    """[[step, loss], ...] of training and of validation as one numeric frame with a
    ``series`` column naming each curve in the page's language (an empty frame must be
    numeric too, or the plot's axes become categories)."""
    names = series_names(lang)
    rows = [(float(s), float(v), names[0]) for s, v in losses] + \
        [(float(s), float(v), names[1]) for s, v in val_losses or []]
    return pd.DataFrame({"step": pd.Series([r[0] for r in rows], dtype="float64"),
                         "loss": pd.Series([r[1] for r in rows], dtype="float64"),
                         "series": pd.Series([r[2] for r in rows], dtype="object")})


def series_names(lang: str | None) -> tuple[str, str]:
    """The plot's legend: (training loss, validation loss) in ``lang`` (en | zh)."""
    from webui.i18n import EN, ZH

    table = ZH if (lang or "").strip() == "zh" else EN
    return table["run.train_loss"], table["run.val_loss"]


def loss_plot(losses: list, val_losses: list | None, lang: str | None) -> gr.LinePlot:
    """The plot's update: the points and the legend's entries and title (gradio fixes the
    legend from the first value unless it is given with each new one)."""
    from webui.i18n import EN, ZH

    names = series_names(lang)
    words = ZH if (lang or "").strip() == "zh" else EN
    shown = [names[0]] + ([names[1]] if val_losses else [])
    return gr.LinePlot(value=loss_frame(losses, val_losses, lang), colors_in_legend=shown,
                       color_title=words["run.series"], x_title=words["run.plot_step"],
                       y_title=words["run.plot_loss"])


def progress_html(p: dict | None) -> str:
    if not p:
        return '<div class="zl-progress"><div class="zl-bar"><div class="zl-fill" ' \
               'style="width:0%"></div></div><div class="zl-stats">–</div></div>'
    frac = p.get("fraction")
    status = p.get("status")
    if status == "succeeded":
        frac = 1.0
    pct = 0.0 if frac is None else max(0.0, min(1.0, float(frac))) * 100
    bits = []
    if p.get("stage"):
        bits.append(bilingual(Msg("runtab.stage", stage=html.escape(str(p["stage"])))))
    if p.get("total"):
        bits.append(bilingual(Msg("runtab.step", step=p.get("step") or 0, total=p["total"],
                                  pct=pct)))
    if p.get("epoch") is not None:
        bits.append(bilingual(Msg("runtab.epoch", epoch=p["epoch"])))
    if p.get("loss") is not None:
        bits.append(bilingual(Msg("runtab.loss", loss=float(p["loss"]))))
    if p.get("val_losses"):  # the latest held-out loss, beside the training loss
        v_step, v_loss = p["val_losses"][-1]
        bits.append(bilingual(Msg("runtab.val_loss", loss=float(v_loss), step=int(v_step))))
    if p.get("eta_s") is not None and status == "running":
        bits.append(bilingual(Msg("runtab.eta", eta=human_seconds(p["eta_s"]))))
    if p.get("samples_per_s"):
        bits.append(bilingual(Msg("runtab.speed", speed=float(p["samples_per_s"]))))
    quiet = p.get("seconds_since_output")
    if status == "running" and quiet is not None and quiet > 120:
        quiet_text = bilingual(Msg("runtab.quiet", time=human_seconds(quiet)))
        bits.append(f"<span class='zl-warn'>{quiet_text}</span>")
    cls = {"failed": " zl-failed", "stopped": " zl-stopped", "succeeded": " zl-done"}.get(
        status or "", "")
    return (f'<div class="zl-progress{cls}" data-status="{html.escape(str(status))}">'
            f'<div class="zl-bar"><div class="zl-fill" style="width:{pct:.1f}%"></div></div>'
            f'<div class="zl-stats">'
            f'{" · ".join(bits) or cell(Msg("runtab.status", status=str(status or "–")))}'
            f'</div></div>')


def stages_html(run: dict, progress: dict | None) -> str:
    per = (progress or {}).get("stages", {})
    rows = []
    for s in run.get("stages", []):
        st = s["status"]
        p = per.get(s["name"], {})
        took = ""
        if s.get("started_at"):
            took = human_seconds((s.get("ended_at") or time.time()) - s["started_at"])
        step = f"{p.get('step') or 0}/{p['total']}" if p.get("total") else ""
        code = "" if s.get("exit_code") is None else str(s["exit_code"])
        note = cell(p.get("reason") or s.get("note") or "", 200)
        rows.append(f"<tr data-stage='{html.escape(s['name'])}' data-status='{st}'>"
                    f"<td>{STATUS_ICON.get(st, '')} <b>{html.escape(s['name'])}</b></td>"
                    f"<td class='zl-status-{st}'>{cell(Msg('runtab.status', status=st))}</td>"
                    f"<td>{step}</td><td>{took}</td><td>{code}</td><td>{note}</td></tr>")
    head = "".join(f"<th>{cell(Msg('runs.header', h=h))}</th>"
                   for h in ("stage", "status", "steps", "time", "exit code", "note"))
    return ("<table class='zl-stages'><thead><tr>" + head + "</tr></thead><tbody>"
            + "".join(rows) + "</tbody></table>")


def head_markdown(run: dict) -> str:
    st = run["status"]
    name = f" — {run['name']}" if run.get("name") else ""
    extras = []
    if run.get("attempt") and run["attempt"] > 1:
        extras.append(Msg("runtab.attempt", n=run["attempt"]))
    if st == "stopped":
        extras.append(Msg("runtab.extra_note", note=run.get("note") or run.get("stop_reason")
                          or Msg("status.stopped")))
    if run.get("slurm_job_id") and st in ("queued", "running", "succeeded") and run.get("note"):
        extras.append(Msg("runtab.extra_note", note=run["note"]))  # SLURM: job id, nodes
    if run.get("stop_requested") and st == "running":
        extras.append(Msg("runtab.stopping"))
    if run.get("resumable"):
        extras.append(Msg("runtab.resumable"))
    return bilingual(Msg("runtab.head", icon=STATUS_ICON.get(st, ""), id=run["id"], name=name,
                         status=st, extras=extras))


def failure_markdown(f: dict | None) -> str:
    """A failed run's summary (``Runner.failure_summary``) as Markdown, each sentence in
    both languages; the log's own lines as they are."""
    if not f:
        return ""
    lines = ["### ✗ " + bilingual(f.get("headline") or Msg("note.run_failed"))]
    if f.get("exit_text") and f["exit_text"] not in (f.get("headline") or ""):
        lines.append(bilingual(Msg("runtab.exit", how=f["exit_text"])))
    for d in f.get("diagnoses") or []:
        lines += ["", bilingual(Msg("runtab.diagnosis_title", title=d.get("title") or "")), "",
                  bilingual(d.get("explanation") or "")]
        if d.get("fixes"):
            lines += ["", bilingual(Msg("runtab.what_to_change"))] + [
                "1. " + bilingual(x) for x in d["fixes"]]
        if d.get("settings"):
            lines += ["", bilingual(Msg("runtab.settings",
                                        names=[f"`{s}`" for s in d["settings"]]))]
    if f.get("end_reason") and not f.get("diagnoses"):
        lines += ["", bilingual(Msg("runtab.reason", why=f["end_reason"]))]
    elif f.get("error_line") and not f.get("diagnoses"):
        lines += ["", bilingual(Msg("runtab.error_line", line=f["error_line"]))]
    last = f.get("last_lines") or []
    if last:
        lines += ["", bilingual(Msg("runtab.last_lines")), "```", *last[-15:], "```"]
    if f.get("log_path"):
        lines += ["", bilingual(Msg("runtab.full_log", path=f["log_path"]))]
    return "\n".join(lines)


# ---------------------------------------------------------------------- tick
def with_sample_counts(prog: dict) -> dict:
    """A stage that only renders (sample) reports one ``sample`` event per image and no
    ``step``: count those as its steps so its bar moves too."""
    images = (".png", ".jpg", ".jpeg", ".webp")
    for name, st in prog.get("stages", {}).items():
        if name != "sample" or not st.get("total"):
            continue
        done = sum(1 for s in prog.get("samples", []) if s.get("stage") == name and
                   str(s.get("path", "")).lower().endswith(images) and
                   (s.get("time") or 0) >= (st.get("started") or 0))
        st["step"] = min(done, st["total"])
        if prog.get("stage") == name:
            prog["step"] = st["step"]
            prog["fraction"] = st["step"] / st["total"]
    return prog


def pick_log_stage(run: dict, choice: str | None) -> str | None:
    names = [s["name"] for s in run.get("stages", [])]
    if choice and choice != "auto" and choice in names:
        return choice
    if run.get("current_stage"):
        return run["current_stage"]
    started = [s["name"] for s in run.get("stages", []) if s["status"] not in ("queued",
                                                                                "skipped")]
    if run["status"] == "failed":
        failed = [s["name"] for s in run["stages"] if s["status"] == "failed"]
        if failed:
            return failed[-1]
    return started[-1] if started else (names[0] if names else None)


def tick(ctx: Ctx, run_id: str | None, state: dict, choice: str | None,
         request: gr.Request | None, lang: str | None = None) -> dict:
    """Everything the Run tab shows for ``run_id``, skipping what has not changed."""
    c = ctx.c
    skip = gr.skip()
    out = {k: skip for k in ("run_head", "run_progress", "run_stages", "gpu", "failure",
                             "loss_plot", "run_samples", "log", "log_stage", "timer",
                             "run_active", "run_id")}
    state = dict(state or new_log_state())
    active = my_active_runs(ctx, request)
    shown = state.setdefault("shown", {})
    if shown.get("run_active") != active_markdown(active):
        shown["run_active"] = out["run_active"] = active_markdown(active)
    followed = ctx.run(run_id, request)
    run = followed
    if followed is None or (followed["status"] not in ACTIVE and state.get("final")):
        run = run_to_follow(followed, active)
    if run is None:
        out["timer"] = gr.Timer(active=False)
        if run_id:
            out["run_head"] = bilingual(Msg("runtab.not_in_history", id=run_id))
        return _keyed(c, out, state)
    if run is not followed:  # the followed run ended (or was never set): show the running one
        out["run_id"] = run["id"]
    if state.get("run") != run["id"]:
        state = new_log_state(run["id"])
        shown = state["shown"] = {"run_active": shown.get("run_active")}
    ctx.reattach_now_and_then()
    try:
        prog = with_sample_counts(ctx.runner.progress(run["id"]))
    except RunnerError:
        prog = None
    if run["status"] in TERMINAL and state.get("final"):
        # The tick that stops the timer sends the whole view: ticks from other events (the
        # start button's, a language switch's) carry the state the page had when they were
        # sent and may land out of order, so "unchanged" cannot be trusted for the last one.
        shown.clear()
        state.pop("losses", None)
        state.pop("samples", None)
    for key, value in (("run_head", head_markdown(run)), ("run_progress", progress_html(prog)),
                       ("run_stages", stages_html(run, prog))):
        if shown.get(key) != value:  # send only what changed since the last tick
            shown[key] = value
            out[key] = value
    names = ["auto"] + [s["name"] for s in run.get("stages", [])]
    if names != state.get("stage_names"):  # a component update only when the list changes
        state["stage_names"] = names
        out["log_stage"] = gr.Radio(choices=names, value=choice if choice in names else "auto")

    # log, by offset
    stage = pick_log_stage(run, choice)
    if stage != state.get("stage"):
        state.update(stage=stage, offset=0, raw="")
    if stage:
        try:
            new, offset = ctx.runner.tail_log(run["id"], stage, state["offset"])
        except RunnerError:
            new, offset = "", state["offset"]
        if new or offset != state["offset"] or not state["raw"]:
            raw = (state["raw"] + new)[-LOG_KEEP_BYTES:]
            state.update(raw=raw, offset=offset)
            out["log"] = f"[{stage}]\n" + security.redact(
                "\n".join(clean_lines(raw)[-LOG_SHOW_LINES:]))

    if prog is not None:
        losses, val_losses = prog.get("losses") or [], prog.get("val_losses") or []
        drawn = [len(losses), len(val_losses), lang or "en"]
        if drawn != state.get("losses"):  # new points, or the page's language changed
            state["losses"] = drawn
            out["loss_plot"] = loss_plot(losses, val_losses, lang)
        images = jobs.sample_images(prog)
        if len(images) != state.get("samples"):
            state["samples"] = len(images)
            served = []
            for p in images[-24:]:
                try:
                    served.append((ctx.serve(run["id"], p, request), _sample_caption(p)))
                except gr.Error:
                    continue
            out["run_samples"] = served

    if run["status"] == "failed":
        if state.get("failure") is None:
            summary = ctx.runner.failure_summary(run["id"])
            state["failure"] = security.redact(failure_markdown(summary))
        out["failure"] = gr.Markdown(value=state["failure"], visible=True)
    elif state.get("failure") is not None or not state.get("final"):
        state["failure"] = None
        out["failure"] = gr.Markdown(value="", visible=False)

    gpu = gpu_memory_text() if run["status"] == "running" else None
    if gpu != state.get("gpu"):
        state["gpu"] = gpu
        out["gpu"] = gr.Markdown(value=bilingual(Msg("runtab.gpu_memory", lines=gpu))
                                 if gpu else "",
                                 visible=bool(gpu))

    if run["status"] in TERMINAL:
        if state.get("final") and not active:
            out["timer"] = gr.Timer(active=False)
        state["final"] = True  # one more tick after the end, to pick up the last lines
    else:
        state["final"] = False
    return _keyed(c, out, state)


def _sample_caption(path: str) -> str:
    from pathlib import Path
    p = Path(path)
    return f"{p.parent.name}/{p.name}"


def _keyed(c: dict, out: dict, state: dict) -> dict:
    keyed = {c[k]: v for k, v in out.items()}
    keyed[c["log_state"]] = state
    return keyed


def tick_outputs(c: dict) -> list:
    return [c[k] for k in ("run_head", "run_progress", "run_stages", "gpu", "failure",
                           "loss_plot", "run_samples", "log", "log_stage", "timer",
                           "run_active", "run_id", "log_state")]


# ---------------------------------------------------------------------- events
def bind_events(ctx: Ctx) -> None:
    c, form = ctx.c, ctx.form
    outs = tick_outputs(c)

    def on_tick(data: dict, request: gr.Request):
        return tick(ctx, data[c["run_id"]], data[c["log_state"]], data[c["log_stage"]],
                    request, lang=data.get(c["lang_box"]))

    tick_inputs = {c["run_id"], c["log_state"], c["log_stage"], c["lang_box"]}
    c["timer"].tick(on_tick, inputs=tick_inputs, outputs=outs, show_progress="hidden",
                    api_visibility="private", trigger_mode="always_last")
    c["log_stage"].input(on_tick, inputs=tick_inputs, outputs=outs, show_progress="hidden",
                         api_visibility="private")
    # The plot's legend is drawn on the server: redraw it in the language picked.
    c["lang_box"].change(on_tick, inputs=tick_inputs, outputs=outs, show_progress="hidden",
                         api_visibility="private")

    def follow(run_id: str, msg: str):
        """Outputs that make the page show ``run_id`` from now on."""
        return {c["run_id"]: run_id, c["log_state"]: new_log_state(run_id),
                c["timer"]: gr.Timer(active=True), c["run_msg"]: msg,
                c["run_problems"]: "", c["log_stage"]: gr.Radio(value="auto")}

    follow_outputs = [c["run_id"], c["log_state"], c["timer"], c["run_msg"], c["run_problems"],
                      c["log_stage"]]
    # Tracker keys typed in the Training tab (``training.tracker_key_fields``): this run's own.
    keys = {c[t.key_field] for t in ONLINE}

    def tracker_keys(data: dict) -> dict[str, str]:
        return {t.key_field: data.get(c[t.key_field]) or "" for t in ONLINE}

    def start(data: dict, request: gr.Request):
        cfg, _, problems = form.check(data)
        if cfg is None:
            return {c["run_msg"]: bilingual(Msg("runtab.not_started_problems",
                                                n=len(problems))),
                    c["run_problems"]: problem_lines(problems)}
        before = my_active_runs(ctx, request)
        try:
            run_id = services.start_run(ctx, cfg, ctx.owner(request), name=cfg.run_name,
                                        hub_token=data[c["hub_token"]],
                                        tracker_keys=tracker_keys(data))
        except services.Refused as e:
            return {c["run_msg"]: bilingual(Msg("runtab.not_started", why=e.headline)),
                    c["run_problems"]: problem_lines(e.problems)}
        if not before:
            return follow(run_id, bilingual(Msg("runtab.started", id=run_id)))
        # Queued behind the user's own runs: the tab keeps showing the one that runs.
        ahead = before[0]
        msg = bilingual(Msg("runtab.queued", id=run_id, n=len(before), ahead=ahead["id"],
                            status=ahead["status"]))
        if data[c["run_id"]] == ahead["id"]:
            return {c["run_msg"]: msg, c["run_problems"]: ""}
        return follow(ahead["id"], msg)

    # What Start or Resume refused is about the form as it was: an edit (or a fill) clears
    # it in the browser, at once and in the order the person acted, so no answer from the
    # server that lands late can clear a newer refusal or keep an older one.
    for trigger in form.edited:
        trigger(None, js="() => ''", outputs=[c["run_problems"]], show_progress="hidden",
                api_visibility="private")

    c["run_start"].click(start, inputs=form.inputs | {c["hub_token"], c["run_id"]} | keys,
                         outputs=follow_outputs,
                         api_visibility="private").then(
        on_tick, inputs=tick_inputs, outputs=outs, show_progress="hidden",
        api_visibility="private")

    def stop(data: dict, request: gr.Request):
        run = ctx.run(data[c["run_id"]], request)
        if run is None:
            return {c["run_msg"]: bilingual(Msg("runtab.no_run_to_stop"))}
        if run["status"] not in ("running", "queued"):
            return {c["run_msg"]: bilingual(Msg("runtab.nothing_to_stop", id=run["id"],
                                                status=run["status"]))}
        try:
            ctx.runner.stop(run["id"])
        except RunnerError as e:
            return {c["run_msg"]: bilingual(Msg("runtab.refused", why=error_of(e)))}
        return {c["run_msg"]: bilingual(Msg("runtab.stopping_run", id=run["id"])),
                c["timer"]: gr.Timer(active=True)}

    c["run_stop"].click(stop, inputs={c["run_id"]}, outputs=[c["run_msg"], c["timer"]],
                        api_visibility="private")

    def resume(data: dict, request: gr.Request):
        run = ctx.run(data[c["run_id"]], request)
        if run is None:
            return {c["run_msg"]: bilingual(Msg("runtab.no_run_to_resume"))}
        try:
            run_id = services.resume_run(ctx, run, ctx.owner(request),
                                         hub_token=data[c["hub_token"]],
                                         tracker_keys=tracker_keys(data))
        except services.Refused as e:
            return {c["run_msg"]: bilingual(Msg("runtab.not_resumed", why=e.headline)),
                    c["run_problems"]: problem_lines(e.problems)}
        return follow(run_id, bilingual(Msg("runtab.resumed", id=run_id)))

    c["run_resume"].click(resume, inputs={c["run_id"], c["hub_token"]} | keys,
                          outputs=follow_outputs,
                          api_visibility="private").then(
        on_tick, inputs=tick_inputs, outputs=outs, show_progress="hidden",
        api_visibility="private")

    c["follow"] = follow
    c["follow_outputs"] = follow_outputs
    c["on_tick"] = (on_tick, tick_inputs, outs)
