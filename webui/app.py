"""The ZeroLoRA web UI: ``create_app(runner, workspace, models_dir)`` builds the Blocks.

Each tab is a module in ``webui/tabs`` with ``create_ui(ctx)`` then ``bind_events(ctx)``;
callbacks are thin and call the backend. Nothing heavy is imported here (no torch): the
page serves as soon as gradio is up; planning previews, exports and renders load what they
need on first use, renders in their own process.

Launch with the UI's launch settings (translations, styles)::

    demo = create_app(Runner(ws), ws, models_dir)
    demo.launch(**launch_kwargs(), server_name="127.0.0.1")
"""
from __future__ import annotations

import functools
import json
import os
from pathlib import Path
from typing import Any, Callable

os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")
os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")

import gradio as gr  # noqa: E402

from backend.jobs import slurm_runs  # noqa: E402
from webui.context import Ctx, persistent_secret  # noqa: E402
from webui.form import Form  # noqa: E402
from webui.i18n import EN, I18N, ZH, T  # noqa: E402
from webui.messages import LANG_CSS  # noqa: E402
from webui.tabs import dataset, model, models, results, run, runs, training  # noqa: E402
from webui.timing import instrument  # noqa: E402

TABS = (("tab-model", "tab.model", model), ("tab-dataset", "tab.dataset", dataset),
        ("tab-training", "tab.training", training), ("tab-run", "tab.run", run),
        ("tab-results", "tab.results", results), ("tab-runs", "tab.runs", runs),
        ("tab-models", "tab.models", models))

CSS = """
.zl-header {align-items: center;}
.zl-header h1 {margin: 0; font-size: 1.6em;}
.zl-lang button {min-width: 0 !important;}
.zl-bottom {align-items: flex-end;}
.zl-error {color: var(--error-text-color, #b91c1c); font-size: 0.9em; margin-top: -6px;}
.zl-error p {margin: 0;}
.zl-group-title {font-weight: 600; padding: 4px 8px;}
.zl-progress {margin: 6px 0;}
.zl-bar {height: 14px; border-radius: 7px; background: var(--block-background-fill);
         border: 1px solid var(--border-color-primary); overflow: hidden;}
.zl-fill {height: 100%; background: var(--color-accent, #7c3aed); transition: width .4s;}
.zl-done .zl-fill {background: #16a34a;}
.zl-failed .zl-fill {background: #dc2626;}
.zl-stopped .zl-fill {background: #9ca3af;}
.zl-stats {font-size: 0.95em; margin-top: 4px;}
.zl-warn {color: #b45309;}
table.zl-stages {width: 100%; border-collapse: collapse; font-size: 0.92em;}
table.zl-stages td, table.zl-stages th {padding: 3px 8px; border-bottom: 1px solid
  var(--border-color-primary); text-align: left;}
.zl-status-failed {color: #dc2626; font-weight: 600;}
.zl-status-succeeded {color: #16a34a; font-weight: 600;}
.zl-status-running {color: #2563eb; font-weight: 600;}
.zl-log textarea {font-family: ui-monospace, monospace; font-size: 12px;}
.zl-failure {border-left: 4px solid #dc2626; padding-left: 10px;}
"""

# The language switch: gradio picks the browser's language; these buttons change it and the
# choice is remembered in the browser. gradio's own settings panel is the fallback.
LANG_JS = """
async () => {
  window.zlSetLang = async (lang, remember) => {
    if (remember) localStorage.setItem('zerolora-lang', lang);
    document.documentElement.setAttribute('data-zl-lang', lang);
    try {
      const url = performance.getEntriesByType('resource').map(e => e.name)
        .find(n => /\\/assets\\/core-[\\w-]+\\.js$/.test(n));
      const m = url ? await import(url) : null;
      if (m && typeof m.changeLocale === 'function') { m.changeLocale(lang); return; }
    } catch (e) { /* fall through */ }
    window.location.search = '?view=settings';
  };
  const saved = localStorage.getItem('zerolora-lang') || window.zlDefaultLang;
  // Text computed on the server holds both languages; this attribute picks the one shown.
  document.documentElement.setAttribute('data-zl-lang', saved ||
    ((navigator.language || '').toLowerCase().startsWith('zh') ? 'zh' : 'en'));
  if (saved) await window.zlSetLang(saved, false);
}
"""


def launch_kwargs() -> dict[str, Any]:
    """What ``Blocks.launch`` needs for this UI (gradio 6 takes these at launch)."""
    return {"i18n": I18N, "css": CSS + LANG_CSS + results.GRID_CSS,
            "footer_links": ["api", "settings"]}


def create_app(runner, workspace: Path, models_dir: Path | None = None,
               user_getter: Callable[[Any], str | None] | None = None,
               lang: str | None = None) -> gr.Blocks:
    """Build the UI over ``runner`` (a ``backend.jobs.runner.Runner``) for ``workspace``.

    ``user_getter(request) -> str | None``: the signed-in user (default
    ``webui.security.user_of``); runs are listed, shown and downloaded by the rules of
    ``webui.security``. ``lang`` ("en" | "zh"): the language before the user picks one
    (default: the browser's).
    """
    if lang not in (None, "en", "zh"):
        raise ValueError(f"lang: unknown (got {lang!r}; allowed en | zh)")
    from backend.core import libraries

    libraries.threaded()  # browser events run in threads: the libraries load under a lock
    workspace = Path(workspace).expanduser().resolve()
    ctx = Ctx(runner=runner, workspace=workspace,
              models_dir=Path(models_dir).expanduser().resolve() if models_dir else None,
              user_getter=user_getter)
    initial_name, initial = model.initial_config(ctx)
    ctx.form = Form(defaults=initial,
                    server_check=functools.partial(slurm_runs.executor_problems, runner))
    c = ctx.c
    with gr.Blocks(title="ZeroLoRA", analytics_enabled=False) as demo:
        c["demo"] = demo
        c["run_id"] = gr.BrowserState(None, storage_key="zerolora-run",
                                      secret=persistent_secret(workspace))
        c["loaded"] = gr.State(initial)
        c["loaded_name"] = gr.State(initial_name)
        ctx.form.render_snapshot()
        ctx.form.render_error_state()
        with gr.Row(elem_classes=["zl-header"], equal_height=True):
            with gr.Column(scale=5):
                gr.Markdown("# ZeroLoRA", elem_id="title")
                gr.Markdown(T("app.tagline"))
            with gr.Column(scale=1, min_width=180, elem_classes=["zl-lang"]):
                with gr.Row():
                    lang_en = gr.Button("English", size="sm", elem_id="lang-en")
                    lang_zh = gr.Button("中文", size="sm", elem_id="lang-zh")
        c["lang_box"] = gr.Textbox(visible=False)
        with gr.Tabs(elem_id="tabs") as c["tabs"]:
            for tab_id, key, module in TABS:
                with gr.Tab(T(key), id=tab_id, elem_id=tab_id) as tab:
                    c[tab_id.replace("-", "_")] = tab
                    module.create_ui(ctx)
        for _, _, module in TABS:
            module.bind_events(ctx)
        ctx.form.bind_show_if()
        ctx.form.bind_snapshot()
        _bind_app_events(ctx, demo, lang_en, lang_zh, lang)
        _add_api(ctx, runner, workspace)
    demo.zerolora_ctx = ctx  # for tests and the hosting layer
    instrument(demo)  # ZEROLORA_EVENT_TIMES: each event's server time (webui/timing.py)
    return demo


def _bind_app_events(ctx: Ctx, demo: gr.Blocks, lang_en, lang_zh, lang: str | None) -> None:
    c = ctx.c
    tabs = [c[tab_id.replace("-", "_")] for tab_id, _, _ in TABS]

    def tab_labels(chosen: str | None):
        """gradio's tab bar does not follow a language change: relabel it in plain text."""
        table = {"en": EN, "zh": ZH}.get((chosen or "").strip())
        if table is None:
            return [gr.skip()] * (len(tabs) + 1)
        # The language also goes into lang_box, for text the server draws per language.
        return [gr.Tab(label=table[key]) for _, key, _ in TABS] + [chosen.strip()]

    for button, code in ((lang_en, "en"), (lang_zh, "zh")):
        button.click(tab_labels, inputs=[c["lang_box"]], outputs=tabs + [c["lang_box"]],
                     show_progress_on=[c["lang_box"]], js=f"(x) => {{ window.zlSetLang && window.zlSetLang('{code}', true); "
                        f"return '{code}'; }}", show_progress="hidden",
                     api_visibility="private")
    default = f"window.zlDefaultLang = {json.dumps(lang)};" if lang else ""
    demo.load(None, js=LANG_JS.replace("async () => {", "async () => {" + default, 1))
    demo.load(tab_labels, inputs=[c["lang_box"]], outputs=tabs + [c["lang_box"]],
              show_progress="hidden", show_progress_on=[c["lang_box"]],
              js=f"(x) => localStorage.getItem('zerolora-lang') || {json.dumps(lang or '')} || "
                 f"((navigator.language || '').toLowerCase().startsWith('zh') ? 'zh' : 'en')",
              api_visibility="private")

    # Reattach to the run this browser was following, or (a fresh browser, or that run
    # has ended) to the user's running run; a page opened during a run opens on the Run tab.
    def on_load(data: dict, request: gr.Request):
        shown = run.run_to_follow(ctx.run(data[c["run_id"]], request),
                                  run.my_active_runs(ctx, request))
        if shown is None:
            return {c["timer"]: gr.Timer(active=False)}
        out = {c["timer"]: gr.Timer(active=True), c["log_state"]: run.new_log_state(shown["id"])}
        if shown["id"] != data[c["run_id"]]:
            out[c["run_id"]] = shown["id"]
        if shown["status"] in run.ACTIVE:
            out[c["tabs"]] = gr.Tabs(selected="tab-run")
        return out

    on_tick, t_inputs, t_outputs = c["on_tick"]
    load_outputs = [c["timer"], c["log_state"], c["run_id"], c["tabs"]]
    demo.load(on_load, inputs={c["run_id"]}, outputs=load_outputs,
              show_progress_on=[c["run_msg"]], api_visibility="private").then(on_tick, inputs=t_inputs, outputs=t_outputs,
                                             show_progress="hidden", api_visibility="private")

    # The stored run id is read from localStorage when its component mounts, which on a
    # slow page can be after the load event above: follow it when it arrives.
    def on_stored(data: dict, request: gr.Request):
        run_id = data[c["run_id"]]
        if not run_id or (data[c["log_state"]] or {}).get("run") == run_id:
            return {c["timer"]: gr.skip(), c["log_state"]: gr.skip()}
        return on_load({c["run_id"]: run_id}, request)

    c["run_id"].change(on_stored, inputs={c["run_id"], c["log_state"]},
                       outputs=load_outputs, show_progress="hidden",
                       show_progress_on=[c["run_msg"]], api_visibility="private").then(
        on_tick, inputs=t_inputs, outputs=t_outputs, show_progress="hidden",
        api_visibility="private")


def _add_api(ctx: Ctx, runner, workspace: Path) -> None:
    """The scripted API (``webui/api.py``, the hosting layer's) when it is there."""
    try:
        from webui import api
    except ImportError:
        return
    add = getattr(api, "add_api_endpoints", None)
    if add is None:
        return
    import inspect
    params = inspect.signature(add).parameters
    kwargs = {k: v for k, v in {"workspace": workspace, "ctx": ctx, "form": ctx.form,
                                "user_getter": ctx.user_getter,
                                "models_dir": ctx.models_dir}.items() if k in params}
    add(runner, **kwargs)
