"""Models: what is in the server's models folder and fetching what a run will need.

The table lists each model folder (``{models_dir}/{owner}/{name}``): its id, where it came
from, its size on disk, its files, and whether every ``model_id:glob`` a family reads from
it is there (else what is missing, and for which families). A picked model can be verified
(sizes and hashes against what the hub listed when it was downloaded) or deleted (after the
confirmation box; with sign-in on, by admins only). Download fetches what a family, a
variant or a preset still lacks, from ModelScope or Hugging Face, with a progress bar (bytes
done of the total, speed) polled from the server's record (``backend/models/inventory.py``),
so a reloaded page shows the same download; pressing Download again resumes one that stopped.
Stop ends the running download at its next chunk, keeping what it fetched (with sign-in on:
its starter or an admin).

The same through the API (``webui/api.py``): ``/list_models``, ``/download_models``,
``/download_progress``, ``/stop_download``, ``/delete_model``, ``/verify_model``
(``api_endpoints`` below, with the same rules).
"""
from __future__ import annotations

import html
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Callable

import gradio as gr

from backend.config.errors import ConfigError
from backend.config.presets import list_presets, load_preset
from backend.core.messages import Msg
from backend.models import inventory as inv
from backend.models.inventory import InventoryError
from webui import security
from webui.context import Ctx
from webui.i18n import T
from webui.messages import bilingual, refusal
from webui.tabs.run import cell

COLUMNS = ("model", "source", "size", "files", "status")
DATATYPES = ["str", "html", "str", "number", "html"]
SOURCES = ("modelscope", "huggingface")
RECORDS = "model_downloads"  # the download records, in the workspace
TICK_S = 1.0


# ------------------------------------------------------------------------------------------
# What the tab and the API share (``where``: workspace and models_dir)
# ------------------------------------------------------------------------------------------
def models_root(where: Any) -> Path:
    return inv.models_root(where.models_dir)


def downloads(where: Any) -> inv.Downloads:
    return inv.Downloads(Path(where.workspace) / RECORDS)


def targets(where: Any, user: str | None) -> list[tuple[str, str]]:
    """(label, key) of what Download can fetch: each family (and variant), each preset the
    user may load."""
    out = [(t.title, t.key) for t in inv.family_targets()]
    owner = security.preset_owner(user)["user"]
    out += [(name, f"preset:{name}") for name, _ in list_presets(where.workspace, owner)]
    return out


def target_config(where: Any, key: str, user: str | None):
    """(run config, title) of a target; a preset read with the user's rights."""
    def preset(name: str):
        return load_preset(name, where.workspace, user=security.preset_owner(user)["user"],
                           admin=security.is_admin(user))

    cfg = inv.target_config(key, preset)
    title = next((label for label, k in targets(where, user) if k == key), key)
    return cfg, title


def start_download(where: Any, key: str, source: str | None, user: str | None) -> dict:
    """Start fetching what ``key`` lacks (``source``: modelscope | huggingface; empty: the
    target's own); refusals raise ``InventoryError``."""
    cfg, title = target_config(where, key, user)
    if source:
        if source not in SOURCES:
            raise InventoryError(Msg("models.dl_unknown_target", got=source))
        cfg = cfg.model_copy(update={"download_source": source})
    if cfg.hub_endpoint and not security.is_admin(user):
        raise InventoryError(Msg("models.dl_mirror_admin", got=cfg.hub_endpoint))
    return downloads(where).start(cfg, models_root(where), key, title, owner=user)


def request_stop(where: Any, download_id: str, user: str | None) -> dict:
    """Stop a running download (empty id: the latest): its starter or an admin."""
    return downloads(where).stop(download_id, user, admin=security.is_admin(user))


def delete(where: Any, model_id: str, user: str | None) -> int:
    """Delete a model folder (admins only when sign-in is on); returns the bytes freed."""
    if not security.is_admin(user):
        raise InventoryError(Msg("models.admin_only"))
    return inv.delete_model(models_root(where), model_id, downloads(where).busy())


def headers(lang: str | None) -> list[str]:
    return [Msg("models.header", h=h).text("zh" if lang == "zh" else "en") for h in COLUMNS]


def status_cell(e: inv.ModelEntry) -> str:
    if e.missing:
        parts = [Msg("models.missing", items=[Msg("models.need", pattern=n.pattern,
                                                      users=list(n.users))
                                                  for n in e.missing])]
    else:
        parts = [Msg("models.status_cell", s=e.status)]
    if e.partial:
        parts.append(Msg("models.unfinished", size=inv.size_text(e.partial)))
    if e.link:
        parts.append(Msg("models.link"))
    return "<br>".join(cell(p) for p in parts)


def table(entries: list[inv.ModelEntry], lang: str | None) -> gr.Dataframe:
    rows = [[e.model_id, cell(Msg("models.source_cell", s=e.source)), inv.size_text(e.size),
             len(e.files), status_cell(e)] for e in entries]
    return gr.Dataframe(value={"data": rows, "headers": headers(lang)} if rows else None,
                        headers=headers(lang))


def summary(where: Any, entries: list[inv.ModelEntry], user: str | None) -> str:
    if not entries:
        return bilingual(Msg("models.empty"))
    size = inv.size_text(sum(e.size for e in entries))
    if security.is_admin(user):  # the server's path, for those who run it
        return bilingual(Msg("models.folder", path=str(models_root(where)), n=len(entries),
                             size=size))
    return bilingual(Msg("models.count", n=len(entries), size=size))


def progress_html(rec: dict | None) -> str:
    """The download's bar, its figures and how it ended (the record as the server keeps it)."""
    if not rec:
        return ('<div class="zl-progress" id="models-bar" data-status="none"><div '
                'class="zl-bar"><div class="zl-fill" style="width:0%"></div></div></div>')
    status = str(rec.get("status"))
    pct = inv.progress_fraction(rec) * 100
    lines = [cell(Msg("models.dl_line", title=str(rec.get("title")),
                           source=str(rec.get("source")), state=status))]
    if rec.get("bytes_total") is None and status == "running":
        lines.append(cell(Msg("models.dl_listing")))
    elif rec.get("bytes_total"):
        lines.append(cell(Msg("models.dl_progress",
                                   done=inv.size_text(rec.get("bytes_done")),
                                   total=inv.size_text(rec.get("bytes_total")),
                                   speed=inv.size_text(rec.get("speed") or 0))))
    if rec.get("message") and status != "running":
        lines.append(cell(Msg.from_json(rec["message"])))
    cls = {"failed": " zl-failed", "interrupted": " zl-stopped", "stopped": " zl-stopped",
           "succeeded": " zl-done"}.get(status, "")
    return (f'<div class="zl-progress{cls}" id="models-bar" data-status="{html.escape(status)}"'
            f' data-done="{int(rec.get("bytes_done") or 0)}" '
            f'data-total="{int(rec.get("bytes_total") or 0)}">'
            f'<div class="zl-bar"><div class="zl-fill" style="width:{pct:.1f}%"></div></div>'
            f'<div class="zl-stats">{"<br>".join(lines)}</div></div>')


def needs_markdown(where: Any, key: str | None, user: str | None) -> str:
    """What a target reads, each source present or missing."""
    if not key:
        return ""
    try:
        cfg, title = target_config(where, key, user)
        states = inv.source_states(models_root(where), cfg)
    except (InventoryError, ConfigError, ValueError) as e:
        return refusal(getattr(e, "message", e))
    lines = [Msg("models.need_present", spec=src.spec) if done else
             Msg("models.need_missing", spec=src.spec) for src, done in states]
    missing = sum(not done for _, done in states)
    head = Msg("models.needs_some", target=title, n=missing, total=len(states)) if missing \
        else Msg("models.needs_done", target=title)
    return "  \n".join(bilingual(x) for x in [head] + lines)


# ------------------------------------------------------------------------------------------
# The tab
# ------------------------------------------------------------------------------------------
def create_ui(ctx: Ctx) -> None:
    c = ctx.c
    gr.Markdown(T("models.intro"))
    with gr.Row(equal_height=False, elem_classes=["zl-bottom"]):
        c["models_refresh"] = gr.Button(T("models.refresh"), elem_id="models-refresh", scale=1)
        c["models_summary"] = gr.Markdown("", elem_id="models-summary")
    c["models_table"] = gr.Dataframe(headers=list(COLUMNS), datatype=DATATYPES,
                                     interactive=False, wrap=True, label=T("models.table"),
                                     elem_id="models-table", type="array")
    with gr.Row(equal_height=False, elem_classes=["zl-bottom"]):
        c["models_pick"] = gr.Dropdown(choices=[], value=None, label=T("models.pick"),
                                       elem_id="models-pick", scale=3)
        c["models_verify"] = gr.Button(T("models.verify"), elem_id="models-verify", scale=1)
        c["models_confirm"] = gr.Checkbox(label=T("models.delete_confirm"), value=False,
                                          elem_id="models-confirm", scale=2)
        c["models_delete"] = gr.Button(T("models.delete"), variant="stop",
                                       elem_id="models-delete", scale=1)
    c["models_msg"] = gr.Markdown("", elem_id="models-msg")
    gr.Markdown(T("models.dl_intro"))
    with gr.Row(equal_height=False, elem_classes=["zl-bottom"]):
        c["models_target"] = gr.Dropdown(choices=[], value=None, label=T("models.target"),
                                         elem_id="models-target", scale=3)
        c["models_source"] = gr.Dropdown(list(SOURCES), value=SOURCES[0],
                                         label=T("models.source"), elem_id="models-source",
                                         scale=1)
        c["models_download"] = gr.Button(T("models.download"), variant="primary",
                                         elem_id="models-download", scale=1)
        c["models_stop"] = gr.Button(T("models.stop"), variant="stop", elem_id="models-stop",
                                     scale=1)
    c["models_needs"] = gr.Markdown("", elem_id="models-needs")
    c["models_progress"] = gr.HTML(progress_html(None), elem_id="models-progress")
    c["models_timer"] = gr.Timer(TICK_S, active=False)


def bind_events(ctx: Ctx) -> None:
    c = ctx.c

    def refresh(data: dict, request: gr.Request):
        user = ctx.owner(request)
        entries = inv.list_models(models_root(ctx))
        ids = [e.model_id for e in entries]
        pick = data.get(c["models_pick"])
        choices = targets(ctx, user)
        target = data.get(c["models_target"])
        if target not in [k for _, k in choices]:
            target = choices[0][1] if choices else None
        rec = downloads(ctx).latest()
        return {c["models_table"]: table(entries, data.get(c["lang_box"])),
                c["models_summary"]: summary(ctx, entries, user),
                c["models_pick"]: gr.Dropdown(choices=ids, value=pick if pick in ids else None),
                c["models_target"]: gr.Dropdown(choices=choices, value=target),
                c["models_needs"]: needs_markdown(ctx, target, user),
                c["models_progress"]: progress_html(rec),
                c["models_timer"]: gr.Timer(active=bool(rec and rec["status"] == "running"))}

    inputs = {c["models_pick"], c["models_target"], c["lang_box"]}
    outputs = [c["models_table"], c["models_summary"], c["models_pick"], c["models_target"],
               c["models_needs"], c["models_progress"], c["models_timer"]]
    gr.on([c["models_refresh"].click, c["tab_models"].select, c["lang_box"].change], refresh,
          inputs=inputs, outputs=outputs, trigger_mode="always_last", api_visibility="private")

    def pick_target(data: dict, request: gr.Request):
        key = data[c["models_target"]]
        try:
            source = target_config(ctx, key, ctx.owner(request))[0].download_source
        except (InventoryError, ConfigError, ValueError):
            source = gr.skip()
        return {c["models_needs"]: needs_markdown(ctx, key, ctx.owner(request)),
                c["models_source"]: source}

    c["models_target"].input(pick_target, inputs={c["models_target"]},
                             outputs=[c["models_needs"], c["models_source"]],
                             api_visibility="private")

    def download(data: dict, request: gr.Request):
        try:
            rec = start_download(ctx, data[c["models_target"]], data[c["models_source"]],
                                 ctx.owner(request))
        except InventoryError as e:
            return {c["models_msg"]: refusal(e.message)}
        return {c["models_msg"]: bilingual(Msg("models.dl_started", target=rec["title"],
                                               source=rec["source"])),
                c["models_progress"]: progress_html(rec),
                c["models_timer"]: gr.Timer(active=rec["status"] == "running")}

    c["models_download"].click(download, inputs={c["models_target"], c["models_source"]},
                               outputs=[c["models_msg"], c["models_progress"],
                                        c["models_timer"]],
                               show_progress_on=[c["models_msg"]], api_visibility="private")

    def stop(data: dict, request: gr.Request):
        try:
            rec = request_stop(ctx, "", ctx.owner(request))
        except InventoryError as e:
            return {c["models_msg"]: refusal(e.message)}
        return {c["models_msg"]: bilingual(Msg("models.dl_stopping", target=rec["title"])),
                c["models_timer"]: gr.Timer(active=True)}

    c["models_stop"].click(stop, inputs=set(), outputs=[c["models_msg"], c["models_timer"]],
                           show_progress_on=[c["models_msg"]], api_visibility="private")

    def tick(data: dict, request: gr.Request):
        rec = downloads(ctx).latest()
        if rec and rec["status"] == "running":
            return {c["models_progress"]: progress_html(rec)}
        # ended: the bar's last state, the table and the target's sources as they are now;
        # polling goes on when Download started another one meanwhile
        out = refresh(data, request)
        again = downloads(ctx).latest()
        out[c["models_timer"]] = gr.Timer(active=bool(again and again["status"] == "running"))
        return out

    c["models_timer"].tick(tick, inputs=inputs, outputs=outputs, show_progress="hidden",
                           api_visibility="private")

    def remove(data: dict, request: gr.Request):
        model_id = data[c["models_pick"]]
        if not model_id:
            return {c["models_msg"]: refusal(Msg("models.choose"))}
        if not data[c["models_confirm"]]:
            return {c["models_msg"]: bilingual(Msg("models.tick_box"))}
        try:
            freed = delete(ctx, model_id, ctx.owner(request))
        except InventoryError as e:
            return {c["models_msg"]: refusal(e.message)}
        out = refresh({**data, c["models_pick"]: None}, request)
        out.update({c["models_msg"]: bilingual(Msg("models.deleted", id=model_id,
                                                   size=inv.size_text(freed))),
                    c["models_confirm"]: False})
        return out

    c["models_delete"].click(remove, inputs=inputs | {c["models_confirm"]},
                             outputs=outputs + [c["models_msg"], c["models_confirm"]],
                             api_visibility="private")

    def verify(data: dict, request: gr.Request):
        model_id = data[c["models_pick"]]
        if not model_id:
            return {c["models_msg"]: refusal(Msg("models.choose"))}
        try:
            found = inv.verify_model(models_root(ctx), model_id)
        except InventoryError as e:
            return {c["models_msg"]: refusal(e.message)}
        lines = [found.summary()] + found.problems
        return {c["models_msg"]: ("✓ " if found.ok else "") +
                "  \n".join(bilingual(x) for x in lines)}

    c["models_verify"].click(verify, inputs={c["models_pick"]}, outputs=[c["models_msg"]],
                             show_progress_on=[c["models_msg"]], api_visibility="private")


# ------------------------------------------------------------------------------------------
# The API (``webui/api.py``)
# ------------------------------------------------------------------------------------------
def api_endpoints(where: Any, who: Callable, fail: Callable[[str], Exception]
                  ) -> tuple[Callable, ...]:
    """``/list_models``, ``/download_models``, ``/download_progress``, ``/stop_download``,
    ``/delete_model``, ``/verify_model``: plain values, English text; refusals raise
    ``fail(text)``."""
    where = SimpleNamespace(workspace=where.workspace, models_dir=where.models_dir)

    def list_models(request: gr.Request = None) -> list:
        """The models folder: each model's id, source, bytes, files and status."""
        who(request)
        return [e.to_json() for e in inv.list_models(models_root(where))]

    def download_models(target: str, source: str = "", request: gr.Request = None) -> dict:
        """Fetch what a family (``family:<name>[:<variant>]``) or preset (``preset:<name>``)
        still lacks (source: modelscope | huggingface; empty: its own); returns the progress
        record to poll with /download_progress."""
        try:
            return _plain(start_download(where, target, source, who(request)))
        except InventoryError as e:
            raise fail(str(e.message)) from None

    def download_progress(download_id: str = "", request: gr.Request = None) -> dict:
        """A download's progress record (empty id: the latest): status, bytes_done,
        bytes_total, speed (bytes/s)."""
        who(request)
        try:
            rec = downloads(where).record(download_id) if download_id else \
                downloads(where).latest()
        except InventoryError as e:
            raise fail(str(e.message)) from None
        return _plain(rec) if rec else {}

    def stop_download(download_id: str = "", request: gr.Request = None) -> dict:
        """Stop a running download (empty id: the latest) at its next chunk; what it fetched
        stays, and /download_models resumes it. Its starter or an admin only."""
        try:
            return _plain(request_stop(where, download_id, who(request)))
        except InventoryError as e:
            raise fail(str(e.message)) from None

    def delete_model(model_id: str, request: gr.Request = None) -> dict:
        """Delete a model folder (admins only when sign-in is on)."""
        try:
            freed = delete(where, model_id, who(request))
        except InventoryError as e:
            raise fail(str(e.message)) from None
        return {"deleted": model_id, "bytes": freed}

    def verify_model(model_id: str, request: gr.Request = None) -> dict:
        """Check a model's files against the sizes and hashes the hub listed."""
        who(request)
        try:
            return inv.verify_model(models_root(where), model_id).to_json()
        except InventoryError as e:
            raise fail(str(e.message)) from None

    return (list_models, download_models, download_progress, stop_download, delete_model,
            verify_model)


def _plain(rec: dict) -> dict:
    """A record for the API: its message as English text."""
    out = dict(rec)
    if isinstance(out.get("message"), dict):
        out["message"] = str(Msg.from_json(out["message"]))
    return out


