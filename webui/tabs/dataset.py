"""Dataset: a folder of images + captions, or uploads (files or a zip); captions edited in a
table and saved; a trigger word; a check with one message per file.

With sign-in on, uploads go to the user's own folder and a non-admin reads (captions,
thumbnails, the check) and writes captions only where ``webui.datasets`` allows: the
callbacks pass the signed-in user along and show a refusal as the message."""
from __future__ import annotations

import html
from pathlib import Path

import gradio as gr

from backend.config.errors import ConfigError
from backend.core.messages import Msg
from backend.config.validation import validate
from webui import datasets, security
from webui.context import Ctx
from webui.i18n import T
from webui.messages import bilingual, bilingual_plain, refusal

THUMB = 160
REPORT_HEADERS = ["level", "where", "size", "caption (with trigger word)", "message"]


def create_ui(ctx: Ctx) -> None:
    c = ctx.c
    gr.Markdown(T("data.intro"))
    ctx.form.render_group("data")
    with gr.Accordion(T("data.upload"), open=False, elem_id="upload-acc"):
        c["upload_files"] = gr.File(file_count="multiple", label=T("data.upload"),
                                    file_types=["image", ".txt", ".csv", ".json", ".jsonl",
                                                ".zip"], elem_id="upload-files")
        with gr.Row(equal_height=False, elem_classes=["zl-bottom"]):
            c["upload_name"] = gr.Textbox(label=T("data.upload_name"), value="my-dataset",
                                          elem_id="upload-name", scale=3)
            c["upload_btn"] = gr.Button(T("data.upload_btn"), elem_id="upload-btn", scale=1)
    c["data_msg"] = gr.Markdown("", elem_id="data-msg")
    with gr.Row():
        c["captions_load"] = gr.Button(T("data.load"), elem_id="captions-load")
        c["captions_save"] = gr.Button(T("data.save"), elem_id="captions-save")
        c["data_check"] = gr.Button(T("data.validate"), variant="primary", elem_id="data-check")
    c["captions"] = gr.Dataframe(headers=CAPTION_HEADERS["en"], datatype=["str", "str"],
                                 column_count=2, interactive=True, wrap=True,
                                 label=T("data.captions"), elem_id="captions",
                                 static_columns=[0], type="array")
    c["thumbs"] = gr.Gallery(label=T("data.preview"), columns=10, height=200,
                             elem_id="thumbs", visible=False, type="pil", buttons=[],
                             object_fit="contain", fit_columns=False, allow_preview=True)
    create_pairs_ui(ctx)
    with gr.Row(visible=False, elem_id="sample-suggest-row") as c["sample_suggest_row"]:
        c["sample_suggest"] = gr.Markdown("", elem_id="sample-suggest")
        c["sample_suggest_btn"] = gr.Button(T("data.suggest_btn"), size="sm",
                                            elem_id="sample-suggest-btn", scale=0)
    c["sample_suggestion"] = gr.State([])
    c["mask_preview"] = gr.Gallery(label=T("data.masks"), columns=8, height=220,
                                   elem_id="mask-preview", visible=False, type="pil",
                                   buttons=[], object_fit="contain", allow_preview=True)
    c["data_report"] = gr.Dataframe(headers=REPORT_HEADERS, label=T("data.report"),
                                    datatype=["str", "html", "str", "html", "html"],
                                    interactive=False, wrap=True, elem_id="data-report",
                                    visible=False, type="array")
    create_caption_ui(ctx)


def _thumbs(base: str, rows: list[list], user: str | None, ctx: Ctx):
    from PIL import Image

    out = []
    for path, caption in datasets.image_paths(base, rows, user=user, workspace=ctx.workspace,
                                              runner=ctx.runner):
        try:
            with Image.open(path) as im:
                im.thumbnail((THUMB, THUMB))
                out.append((im.convert("RGB"), caption))
        except OSError:
            continue
    return out


CAPTION_HEADERS = {"en": ["image", "caption"], "zh": ["图片", "描述"]}


# ---------------------------------------------------------------------- edit datasets
def create_pairs_ui(ctx: Ctx) -> None:
    """Edit datasets (rows with ``edit_image``): each pair as input image(s) → target, with
    its instruction (the caption column above edits it)."""
    ctx.c["pairs"] = gr.Gallery(label=T("data.pairs"), columns=4, height=260,
                                elem_id="edit-pairs", visible=False, type="pil", buttons=[],
                                object_fit="contain", allow_preview=True)


def edit_pairs(base: str, metadata: str | None, user: str | None, ctx: Ctx,
               limit: int = 24) -> list:
    """(picture of input image(s) → target, instruction) of the first rows of an edit
    dataset; empty for a dataset without ``edit_image``. Files outside the folder are
    left out, as the image preview does."""
    from PIL import Image, ImageDraw

    from backend.data.dataset import EDIT_IMAGE_KEY, IMAGE_KEY, PROMPT_KEY, _input_names

    if not metadata:
        return []
    rows = [r for r in datasets._read_rows(Path(metadata).expanduser())
            if r.get(EDIT_IMAGE_KEY)][:limit]
    if not rows:
        return []
    datasets.image_paths(base, [], user=user, workspace=ctx.workspace, runner=ctx.runner)
    folder = Path(base).expanduser().resolve()

    def thumb(name: str):
        p = (folder / str(name)).resolve()
        if folder not in p.parents or not p.is_file():
            return None
        try:
            with Image.open(p) as im:
                im = im.convert("RGB")
                im.thumbnail((THUMB, THUMB))
                return im
        except OSError:
            return None

    out = []
    for r in rows:
        inputs = [t for t in map(thumb, _input_names(r[EDIT_IMAGE_KEY]) or []) if t]
        target = thumb(r.get(IMAGE_KEY) or "")
        if not inputs or target is None:
            continue
        gap = 36  # the arrow between the inputs and the target
        h = max(im.height for im in inputs + [target])
        pic = Image.new("RGB", (sum(im.width for im in inputs) + gap + target.width, h),
                        "white")
        x = 0
        for im in inputs:
            pic.paste(im, (x, (h - im.height) // 2))
            x += im.width
        draw, y = ImageDraw.Draw(pic), h // 2
        draw.line([(x + 6, y), (x + gap - 8, y)], fill=(60, 60, 60), width=3)
        draw.polygon([(x + gap - 10, y - 7), (x + gap - 10, y + 7), (x + gap - 2, y)],
                     fill=(60, 60, 60))
        pic.paste(target, (x + gap, (h - target.height) // 2))
        out.append((pic, str(r.get(PROMPT_KEY) or "")[:120]))
    return out


def pairs_update(base: str, metadata: str | None, user: str | None, ctx: Ctx):
    try:
        pairs = edit_pairs(base, metadata, user, ctx)
    except (datasets.DatasetFolderError, OSError, ValueError):
        pairs = []
    return gr.Gallery(value=pairs or None, visible=bool(pairs))


def bind_events(ctx: Ctx) -> None:
    """The tab's events, group by group (the order gradio registers them in is kept)."""
    _bind_caption_headers(ctx)
    _bind_caption_table(ctx)
    _bind_upload(ctx)
    _bind_check(ctx)
    bind_caption_events(ctx)


def _bind_caption_headers(ctx: Ctx) -> None:
    c = ctx.c

    def caption_headers(data: dict):
        """gradio draws headers as plain text: they follow the language through the server."""
        rows = data[c["captions"]]
        rows = rows if isinstance(rows, list) else []
        hdrs = CAPTION_HEADERS.get(data[c["lang_box"]] or "en", CAPTION_HEADERS["en"])
        return {c["captions"]: gr.Dataframe(value={"data": rows or [["", ""]],
                                                   "headers": hdrs}, headers=hdrs)}

    c["lang_box"].change(caption_headers, inputs={c["captions"], c["lang_box"]},
                         outputs=[c["captions"]], show_progress="hidden",
                         api_visibility="private")


def _bind_caption_table(ctx: Ctx) -> None:
    """Load (button and opening the tab) and save the caption table."""
    c, form = ctx.c, ctx.form
    base_c = form.components["dataset_base_path"]
    meta_c = form.components["dataset_metadata_path"]

    def load_captions(data: dict, request: gr.Request):
        base, meta = data[base_c] or "", (data[meta_c] or "").strip() or None
        user = ctx.owner(request)
        try:
            rows = datasets.read_captions(base, meta, user=user, workspace=ctx.workspace,
                                          runner=ctx.runner)
            thumbs = _thumbs(base, rows, user, ctx)
        except (datasets.DatasetFolderError, OSError, ValueError) as e:
            return {c["data_msg"]: refusal(e), c["captions"]: [], c["thumbs"]:
                    gr.Gallery(value=None, visible=False)}
        loaded = Msg("dataset.loaded", n=len(rows), file=Path(meta).name) if meta else \
            Msg("dataset.loaded_txt", n=len(rows))
        return {c["data_msg"]: bilingual(loaded),
                c["captions"]: rows,
                c["thumbs"]: gr.Gallery(value=thumbs, visible=bool(rows)),
                c["pairs"]: pairs_update(base, meta, user, ctx)}

    load_outputs = [c["data_msg"], c["captions"], c["thumbs"], c["pairs"]]
    c["captions_load"].click(load_captions, inputs={base_c, meta_c}, outputs=load_outputs,
                             api_visibility="private")
    c["tab_dataset"].select(load_captions, inputs={base_c, meta_c}, outputs=load_outputs,
                            api_visibility="private")

    def save_captions(data: dict, request: gr.Request):
        base, meta = data[base_c] or "", (data[meta_c] or "").strip() or None
        rows = data[c["captions"]]
        rows = rows.values.tolist() if hasattr(rows, "values") else (rows or [])
        why = caption_lock(ctx, base)  # a caption run writes these captions now
        if why:
            return {c["data_msg"]: bilingual(why)}
        try:
            n = datasets.save_captions(base, meta, rows, user=ctx.owner(request),
                                       workspace=ctx.workspace)
        except (datasets.DatasetFolderError, OSError, ValueError) as e:
            return {c["data_msg"]: refusal(e)}
        return {c["data_msg"]: bilingual(Msg("dataset.saved", n=n, file=Path(meta).name)
                                         if meta else Msg("dataset.saved_txt", n=n))}

    c["captions_save"].click(save_captions, inputs={base_c, meta_c, c["captions"]},
                             outputs=[c["data_msg"]], api_visibility="private")


def _bind_upload(ctx: Ctx) -> None:
    """Uploads (files or a zip) into a new dataset folder, which the form then points at."""
    c, form = ctx.c, ctx.form
    base_c = form.components["dataset_base_path"]
    meta_c = form.components["dataset_metadata_path"]

    def upload(data: dict, request: gr.Request):
        files = data[c["upload_files"]] or []
        user = ctx.owner(request)
        try:
            folder, meta, notes = datasets.add_uploads(ctx.workspace, data[c["upload_name"]],
                                                       [str(f) for f in files], user=user)
            rows = datasets.read_captions(str(folder), meta, user=user,
                                          workspace=ctx.workspace, runner=ctx.runner)
            thumbs = _thumbs(str(folder), rows, user, ctx)
        except (datasets.DatasetFolderError, OSError) as e:
            return {c["data_msg"]: refusal(e)}
        msg = [bilingual(Msg("dataset.uploaded", folder=str(folder), n=len(rows)))] + \
            [f"- {bilingual(n)}" for n in notes]
        return {c["data_msg"]: "\n".join(msg),
                **form.to_updates({"dataset_base_path": str(folder),
                                   "dataset_metadata_path": meta or ""}, data),
                c["captions"]: rows, c["upload_files"]: None,
                c["thumbs"]: gr.Gallery(value=thumbs, visible=bool(rows))}

    c["upload_btn"].click(upload, inputs=form.inputs | {c["upload_files"], c["upload_name"]},
                          outputs=[form.snapshot, c["data_msg"], base_c, meta_c, c["captions"],
                                   c["upload_files"], c["thumbs"]], api_visibility="private")


def _suggestion_outputs(c: dict, offer: list[str]) -> dict:
    """The sample-prompt offer row showing ``offer`` (hidden when empty)."""
    text = (bilingual(Msg("samples.suggest")) + "  \n" +
            "  \n".join(f"- {p}" for p in offer)) if offer else ""
    return {c["sample_suggest_row"]: gr.Row(visible=bool(offer)),
            c["sample_suggest"]: text, c["sample_suggestion"]: offer}


def _check_config(form, data: dict) -> tuple[object | None, dict, list[str]]:
    """The form as a config for the data check: (RunConfig, the form's config dict, []) or
    (None, dict, the problems of the data fields). Problems elsewhere in the form leave a
    config of the data fields alone."""
    cfg_dict, problems = form.to_config(data)
    try:
        return validate(cfg_dict), cfg_dict, []
    except ConfigError as e:
        problems += e.problems
    data_problems = [p for p in problems if p.split(":", 1)[0] in
                     ("dataset_base_path", "dataset_metadata_path", "trigger_word",
                      "max_pixels", "height", "width", "data_file_keys",
                      "frame_buckets", "frame_extraction", "frame_window_stride",
                      "frame_sample")]
    if data_problems:
        return None, cfg_dict, data_problems
    # problems elsewhere in the form: check the data with what we have
    return (validate({k: v for k, v in cfg_dict.items() if k in _DATA_KEYS},
                     require_inputs=False), cfg_dict, [])


def _report_rows(findings: list[dict]) -> list[list[str]]:
    """The check's findings as rows of the report table (``REPORT_HEADERS``)."""
    mark = {"ok": "✓ ", "warning": "⚠ "}
    return [[mark.get(f["level"], "✗ ") + f["level"], bilingual_plain(f.get("where") or ""),
             "×".join(map(str, f["size"])) if f.get("size") else "",
             html.escape(f.get("caption") or ""), bilingual_plain(f.get("message") or "")]
            for f in findings]


def _report_head(findings: list[dict]) -> Msg:
    """The check's one-line verdict, with the warnings when nothing is wrong."""
    bad = [f for f in findings if f["level"] == "error"]
    warned = [f for f in findings if f["level"] == "warning"]
    if bad:
        return Msg("dataset.check_bad", bad=len(bad), items=len(findings))
    if warned:
        return Msg("dataset.check_ok_warned", n=len(findings), warned=len(warned),
                   warnings=[f["message"] for f in warned])
    return Msg("dataset.check_ok", n=len(findings))


def _bind_check(ctx: Ctx) -> None:
    """The check (one message per file, the bucket plan) and its sample-prompt offer."""
    c, form = ctx.c, ctx.form

    def check(data: dict, request: gr.Request):
        from backend.data.dataset import validate_input_images
        from backend.data.video import mask_findings, validate_any_dataset, window_summary

        cfg, cfg_dict, data_problems = _check_config(form, data)
        if cfg is None:
            return {c["data_msg"]: refusal(data_problems),
                    c["data_report"]: gr.Dataframe(visible=False)}
        refused = datasets.access_problems(cfg.dataset_base_path, cfg.dataset_metadata_path,
                                           ctx.owner(request), ctx.workspace,
                                           runner=ctx.runner)
        if refused:  # the check reads every image and caption: not outside your folders
            return {c["data_msg"]: refusal(refused),
                    c["data_report"]: gr.Dataframe(visible=False)}
        cfg = security.with_file_policy(cfg, ctx.owner(request), ctx.workspace,
                                        models_dir=ctx.models_dir, runner=ctx.runner)
        findings = validate_any_dataset(cfg)  # every file through the read gate
        findings += validate_input_images(cfg)  # edit models: the rows' input images
        # masked_loss: each mask, how many lack one, and the masks over their images
        masks, without, overlays = mask_findings(cfg, previews=24)
        findings += masks
        head = bilingual(_report_head(findings)) + bucket_plan_section(cfg, cfg_dict, findings)
        windows = window_summary(cfg, findings)  # "N clips → M windows" (frame_extraction)
        if windows is not None:
            head += "\n\n" + bilingual(windows)
        if without is not None:
            head += "\n\n" + bilingual(without)
        offer = prompt_suggestion(cfg.sample_prompts,
                                  [f.get("caption") or "" for f in findings], cfg.trigger_word)
        return {c["data_msg"]: head,
                c["data_report"]: gr.Dataframe(value=_report_rows(findings), visible=True),
                c["mask_preview"]: gr.Gallery(value=overlays or None, visible=bool(overlays)),
                **_suggestion_outputs(c, offer)}

    suggest_outputs = [c["sample_suggest_row"], c["sample_suggest"], c["sample_suggestion"]]
    c["data_check"].click(check, inputs=form.inputs,
                          outputs=[c["data_msg"], c["data_report"], c["mask_preview"]]
                          + suggest_outputs,
                          show_progress_on=[c["data_msg"]], api_visibility="private")

    def use_suggestion(data: dict):
        offer = data[c["sample_suggestion"]] or []
        if not offer:
            return {c["sample_suggest_row"]: gr.Row(visible=False)}
        return {**form.to_updates({"sample_prompts": offer}, data),
                c["data_msg"]: bilingual(Msg("samples.set", n=len(offer))),
                **_suggestion_outputs(c, [])}

    c["sample_suggest_btn"].click(
        use_suggestion, inputs=form.inputs | {c["sample_suggestion"]},
        outputs=[form.snapshot, form.components["sample_prompts"], c["data_msg"]] +
        suggest_outputs,
        show_progress_on=[c["data_msg"]], api_visibility="private")


SUGGESTED_PROMPTS = 2


def prompt_suggestion(sample_prompts: list[str], captions: list[str], trigger: str
                      ) -> list[str]:
    """Captions of the dataset (trigger word included) to offer as sample prompts, when the
    form's prompts say nothing of this dataset (e.g. still the demo's): none of them is one
    of its captions or holds its trigger word. Empty when there is nothing to offer."""
    captions = [c.strip() for c in captions if c and c.strip()]
    prompts = [p.strip() for p in sample_prompts or [] if p and p.strip()]
    trigger = (trigger or "").strip()
    if not captions or any(p in captions or (trigger and trigger in p) for p in prompts):
        return []
    return list(dict.fromkeys(captions))[:SUGGESTED_PROMPTS]


_DATA_KEYS = ("dataset_base_path", "dataset_metadata_path", "data_file_keys", "trigger_word",
              "max_pixels", "height", "width", "dataset_repeat", "dataset_num_workers",
              "frame_buckets", "frame_extraction", "frame_window_stride", "frame_sample")


# ---------------------------------------------------------------------- writing captions
CAPTION_TICK_S = 2.0
# The fields a caption job reads (checked on their own when the rest of the form has
# problems elsewhere).
_CAPTION_KEYS = _DATA_KEYS + (
    "model_family", "model_id_with_origin_paths", "model_paths", "tokenizer_path",
    "models_dir", "offline", "download_source", "hub_endpoint", "gpu_ids",
    "caption_template", "caption_max_length", "caption_overwrite", "caption_batch_size",
    "caption_target", "captioner_path", "caption_offload")


def create_caption_ui(ctx: Ctx) -> None:
    """The "Write captions" section: its fields (the schema's ``captions`` group), the
    estimate, Start / Stop, a progress line and the before → after review."""
    c = ctx.c
    with gr.Group(elem_id="caption-section"):
        gr.Markdown(T("group.captions"), elem_classes=["zl-group-title"])
        gr.Markdown(T("caption.intro"))
        ctx.form.render_group("captions")
        c["caption_estimate"] = gr.Markdown("", elem_id="caption-estimate")
        with gr.Row():
            c["caption_start"] = gr.Button(T("caption.start"), variant="primary",
                                           elem_id="caption-start")
            c["caption_stop"] = gr.Button(T("caption.stop"), elem_id="caption-stop")
        c["caption_msg"] = gr.Markdown("", elem_id="caption-msg")
        c["caption_review"] = gr.Dataframe(headers=["image", "before", "after"],
                                           label=T("caption.review"), interactive=False,
                                           wrap=True, visible=False, type="array",
                                           elem_id="caption-review")
    # {"run_id": ..., "before": {image: caption}} of the job this page follows.
    c["caption_job"] = gr.State(None)
    c["caption_timer"] = gr.Timer(CAPTION_TICK_S, active=False)


def caption_config(form, data: dict) -> tuple[object | None, list[str]]:
    """The form as a config for captioning: (RunConfig, []) or (None, the problems of the
    fields captioning reads)."""
    cfg_dict, problems = form.to_config(data)
    try:
        return validate(cfg_dict), []
    except ConfigError as e:
        problems += e.problems
    own = [p for p in problems if p.split(":", 1)[0] in _CAPTION_KEYS]
    if own:
        return None, own
    try:  # problems elsewhere in the form (training): caption with what we have
        return validate({k: v for k, v in cfg_dict.items() if k in _CAPTION_KEYS},
                        require_inputs=False), []
    except ConfigError as e:
        return None, e.problems


def caption_estimate_text(ctx: Ctx, cfg, user: str | None) -> str:
    """The estimate line for ``cfg``; a ``captioner_path`` folder's config.json is read
    through the user's read gate."""
    import json

    from backend.core import readgate
    from backend.planning.estimator import caption_estimate

    config = None
    try:
        if cfg.captioner_path:
            path = Path(cfg.captioner_path).expanduser() / "config.json"
            gated = security.with_file_policy(cfg, user, ctx.workspace,
                                              models_dir=ctx.models_dir, runner=ctx.runner)
            config = json.loads(readgate.for_config(gated).read_text(path, "captioner_path"))
        return bilingual(caption_memory(caption_estimate(cfg, config)))
    except Exception:  # noqa: BLE001 - no estimate for a model we cannot read
        return ""


def caption_memory(est: dict) -> Msg:
    """The captioning model's memory line (``estimator.caption_estimate``'s figures)."""
    return Msg("caption.memory", params=est["params"] / 1e9, weights=est["weights_gb"],
               batch=est["batch"], none=est["gpu_gb"]["none"],
               sequential=est["gpu_gb"]["sequential"])


def caption_lock(ctx: Ctx, folder: str | None) -> Msg | None:
    """Why the caption editor of ``folder`` is read-only now (a caption run writes it), or
    None."""
    from backend.planning.caption_job import active_caption_runs

    busy = active_caption_runs(ctx.runner, folder) if folder else []
    if not busy:
        return None
    return Msg("caption.lock", run=busy[0]["id"])


def _locked_updates(c: dict, why: str | None) -> dict:
    return {c["captions"]: gr.Dataframe(interactive=why is None),
            c["captions_save"]: gr.Button(interactive=why is None)}


def review_rows(before: dict[str, str], after: list[list]) -> list[list[str]]:
    """[image, before, after] of the images whose caption changed."""
    return [[str(img), before.get(str(img), ""), str(cap)] for img, cap in after
            if before.get(str(img), "") != str(cap)]


def bind_caption_events(ctx: Ctx) -> None:
    """The "Write captions" events: the estimate, Start, the progress tick, Stop and the
    lock on opening the tab (registered in this order)."""
    _bind_caption_estimate(ctx)
    _bind_caption_start(ctx)
    _bind_caption_tick(ctx)
    _bind_caption_stop(ctx)
    _bind_caption_lock(ctx)


def _caption_fields(form) -> list:
    """What a caption job's events read: the form (its snapshot) and the dataset's two
    fields as they are shown."""
    return [form.snapshot] + [form.components[n] for n in ("dataset_base_path",
                                                            "dataset_metadata_path")]


def _caption_outputs(c: dict) -> list:
    """What Start, the tick and Stop update."""
    return [c["caption_msg"], c["caption_job"], c["caption_timer"], c["caption_review"],
            c["captions"], c["captions_save"], c["data_msg"], c["thumbs"]]


def _estimate_update(ctx: Ctx, data: dict, request: gr.Request) -> dict:
    cfg, _ = caption_config(ctx.form, data)
    return {ctx.c["caption_estimate"]: caption_estimate_text(ctx, cfg, ctx.owner(request))
            if cfg is not None else ""}


def _bind_caption_estimate(ctx: Ctx) -> None:
    c, form = ctx.c, ctx.form
    fields = _caption_fields(form)

    def estimate(data: dict, request: gr.Request):
        return _estimate_update(ctx, data, request)

    gr.on(form.edited, estimate, inputs=set(fields), outputs=[c["caption_estimate"]],
          show_progress="hidden", api_visibility="private", trigger_mode="always_last")


def _bind_caption_start(ctx: Ctx) -> None:
    c, form = ctx.c, ctx.form

    def start(data: dict, request: gr.Request):
        from webui import services

        user = ctx.owner(request)
        cfg, problems = caption_config(form, data)
        if cfg is None:
            return {c["caption_msg"]: refusal(problems)}
        try:
            before = dict(map(tuple, datasets.read_captions(
                cfg.dataset_base_path, cfg.dataset_metadata_path
                if cfg.caption_target == "metadata" else None, user=user,
                workspace=ctx.workspace, runner=ctx.runner)))
            run_id = services.caption(ctx, cfg, user)
        except services.Refused as e:
            return {c["caption_msg"]: refusal(e)}
        except (datasets.DatasetFolderError, OSError, ValueError) as e:
            return {c["caption_msg"]: refusal(e)}
        meta = cfg.dataset_metadata_path if cfg.caption_target == "metadata" else None
        return {c["caption_msg"]: bilingual(Msg("caption.queued", run=run_id)),
                c["caption_job"]: {"run_id": run_id, "before": before, "meta": meta,
                                   "base": cfg.dataset_base_path},
                c["caption_timer"]: gr.Timer(active=True),
                c["caption_review"]: gr.Dataframe(visible=False),
                c["data_msg"]: bilingual(caption_lock(ctx, cfg.dataset_base_path) or ""),
                **_locked_updates(c, "busy")}

    c["caption_start"].click(start, inputs=set(_caption_fields(form)),
                             outputs=_caption_outputs(c), api_visibility="private")


def _caption_end_message(ctx: Ctx, run: dict) -> str:
    """What the page says of a caption run that has ended."""
    status = run["status"]
    if status == "succeeded":
        p = ctx.runner.progress(run["id"])
        return bilingual(Msg("caption.finished", run=run["id"], n=p.get("step") or 0))
    reason = run.get("failure_reason") or run.get("stop_reason") or ""
    summary = ctx.runner.failure_summary(run["id"]) or {}
    reason = summary.get("end_reason") or reason
    return bilingual(Msg("caption.ended", run=run["id"], status=status)) + \
        (f"  \n{security.redact(str(reason))}" if reason else "")


def _bind_caption_tick(ctx: Ctx) -> None:
    """While a caption run goes: its progress; when it ends: the table, the before → after
    review and the thumbnails of what it wrote, and the editor unlocked."""
    from backend.jobs.history import TERMINAL

    c, form = ctx.c, ctx.form
    base_c = form.components["dataset_base_path"]
    meta_c = form.components["dataset_metadata_path"]

    def tick(data: dict, request: gr.Request):
        job = data[c["caption_job"]] or {}
        run = ctx.run(job.get("run_id"), request)
        if run is None:
            return {c["caption_timer"]: gr.Timer(active=False)}
        status = run["status"]
        if status not in TERMINAL:
            p = ctx.runner.progress(run["id"])
            line = (Msg("caption.progress_count", run=run["id"], status=status,
                        done=p["step"] or 0, total=p["total"]) if p.get("total") is not None
                    else Msg("caption.progress", run=run["id"], status=status))
            return {c["caption_msg"]: bilingual(line)}
        out = {c["caption_timer"]: gr.Timer(active=False), **_locked_updates(c, None),
               c["caption_msg"]: _caption_end_message(ctx, run)}
        try:
            user = ctx.owner(request)
            base, meta = data[base_c] or "", (data[meta_c] or "").strip() or None
            if "base" in job:  # what the job wrote
                base, meta = job["base"], job.get("meta")
            rows = datasets.read_captions(base, meta, user=user, workspace=ctx.workspace,
                                          runner=ctx.runner)
            review = review_rows(job.get("before") or {}, rows)
            out.update({c["captions"]: gr.Dataframe(value=rows, interactive=True),
                        c["caption_review"]: gr.Dataframe(value=review, visible=bool(review)),
                        c["thumbs"]: gr.Gallery(value=_thumbs(base, rows, user, ctx),
                                                visible=bool(rows))})
        except (datasets.DatasetFolderError, OSError, ValueError) as e:
            out[c["data_msg"]] = refusal(e)
        return out

    c["caption_timer"].tick(tick, inputs={c["caption_job"], base_c, meta_c},
                            outputs=_caption_outputs(c), show_progress="hidden",
                            api_visibility="private")


def _bind_caption_stop(ctx: Ctx) -> None:
    from backend.jobs.history import TERMINAL

    c = ctx.c
    base_c = ctx.form.components["dataset_base_path"]

    def stop(data: dict, request: gr.Request):
        job = data[c["caption_job"]] or {}
        run = ctx.run(job.get("run_id"), request)
        if run is None:
            from backend.planning.caption_job import active_caption_runs

            user = ctx.owner(request)
            mine = [r for r in active_caption_runs(ctx.runner, data[base_c])
                    if security.can_access(user, r)]
            run = mine[0] if mine else None
        if run is None or run["status"] in TERMINAL:
            return {c["caption_msg"]: bilingual(Msg("caption.none_to_stop"))}
        ctx.runner.stop(run["id"])
        return {c["caption_msg"]: bilingual(Msg("caption.stopping", run=run["id"])),
                c["caption_job"]: {"run_id": run["id"], "before": job.get("before") or {}},
                c["caption_timer"]: gr.Timer(active=True)}

    c["caption_stop"].click(stop, inputs={c["caption_job"], base_c},
                            outputs=_caption_outputs(c), api_visibility="private")


def _bind_caption_lock(ctx: Ctx) -> None:
    c, form = ctx.c, ctx.form
    base_c = form.components["dataset_base_path"]

    def lock_state(data: dict, request: gr.Request):
        """On opening the tab: a caption run writing this folder locks the editor, and
        this page follows it."""
        from backend.planning.caption_job import active_caption_runs

        folder = data[base_c]
        why = caption_lock(ctx, folder)
        out = {**_locked_updates(c, why), **_estimate_update(ctx, data, request)}
        if why:
            run = active_caption_runs(ctx.runner, folder)[0]
            job = data[c["caption_job"]] or {}
            if job.get("run_id") != run["id"]:
                out[c["caption_job"]] = {"run_id": run["id"], "before": {}}
            out.update({c["data_msg"]: bilingual(why), c["caption_timer"]: gr.Timer(active=True)})
        return out

    c["tab_dataset"].select(lock_state, inputs=set(_caption_fields(form)) | {c["caption_job"]},
                            outputs=_caption_outputs(c) + [c["caption_estimate"]],
                            show_progress="hidden", api_visibility="private")


# ---------------------------------------------------------------------- bucket plan
PLAN_KEYS = ("batch_size", "aspect_buckets", "bucket_remainder", "validation_samples")


def bucket_plan_section(cfg, cfg_dict: dict, findings: list[dict]) -> str:
    """The check's bucket plan (``backend.data.dataset.dataset_bucket_plan``) when ``batch_size``
    > 1 or ``aspect_buckets`` is on; empty otherwise, or while those fields have problems
    (shown next to them in the Training tab). The check's config holds only the data fields
    when the form has problems elsewhere: the batch fields are then taken from the form."""
    from backend.data.dataset import dataset_bucket_plan

    if any(getattr(cfg, k) != cfg_dict.get(k, getattr(cfg, k)) for k in PLAN_KEYS):
        try:
            opts = validate({**{k: v for k, v in cfg_dict.items() if k in _DATA_KEYS},
                             **{k: cfg_dict[k] for k in PLAN_KEYS if k in cfg_dict}},
                            require_inputs=False)
        except ConfigError:
            return ""
        rebucket = opts.aspect_buckets != cfg.aspect_buckets
        cfg = cfg.model_copy(update={k: getattr(opts, k) for k in PLAN_KEYS})
        if rebucket:  # the training sizes change with aspect_buckets
            from backend.data.video import validate_any_dataset
            findings = validate_any_dataset(cfg)
    if cfg.batch_size <= 1 and not cfg.aspect_buckets and not cfg.frame_buckets and \
            cfg.frame_extraction == "head":
        return ""
    return "\n\n" + bucket_plan_markdown(dataset_bucket_plan(cfg, findings),
                                          cfg.bucket_remainder)


def bucket_plan_markdown(plan: dict, remainder: str) -> str:
    """``dataset_bucket_plan``'s plain data as a table, each line in both languages."""
    from webui.messages import bilingual_plain

    rows = plan["rows"]
    total = sum(r["batches"] for r in rows)
    lines = [bilingual(Msg("bucket.head", batch_size=plan["batch_size"], remainder=remainder,
                           batches=total)), ""]
    clips = any("frames" in r for r in rows)  # video buckets: (frames, size)
    heads = ((Msg("bucket.col_frames"),) * clips + (Msg("bucket.col_bucket"),
             Msg("bucket.col_images"), Msg("bucket.col_batches"), Msg("bucket.col_padded"),
             Msg("bucket.col_dropped")))
    lines += ["| " + " | ".join(bilingual_plain(h) for h in heads) + " |",
              "|" + "---:|" * clips + "---|---:|---:|---:|---:|"]
    lines += [f"| {str(r.get('frames', '')) + ' | ' if clips else ''}"
              f"{r['size'][0]}×{r['size'][1]} | {r['images']} | {r['batches']} | "
              f"{r['padded']} | {r['dropped']} |" for r in rows]
    dropped = sum(r["dropped"] for r in rows)
    if rows and not total:
        lines += ["", bilingual(Msg("bucket.none_full"))]
    elif dropped:
        lines += ["", bilingual(Msg("bucket.dropped", n=dropped))]
    if plan.get("held_out"):
        lines += ["", bilingual(Msg("bucket.held_out", n=plan["held_out"]))]
    return "\n".join(lines)
