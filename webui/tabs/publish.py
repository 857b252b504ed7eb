"""Publish (the Runs tab's accordion): the picked run's LoRA (or a full fine-tune's
checkpoint) with its model card to the Hugging Face Hub or ModelScope, at the address the
server points at (``webui/publishing.py``, ``backend/publish``).

The hub, the repository name, private or public, the formats, the checkpoint and a token (a
password box: kept in the page and in memory for the call, never written). Preview stages
exactly what would be sent and shows the card and the file list; nothing leaves the server.
Publish shows each step as it happens (on ModelScope, the bytes sent so far, one line that
moves; huggingface_hub offers no progress hook, so there the size is said once) and ends
with the repository's address; a refusal says why in the page's language (the same name can
be tried again, or added to with "existing").
"""
from __future__ import annotations

import queue
import threading

import gradio as gr

from backend.config.errors import ConfigError
from backend.core.messages import Msg
from backend.publish.hub import DEFAULT_DESTINATION, DESTINATIONS, FORMATS
from webui import jobs, publishing, security
from webui.context import Ctx
from webui.i18n import T
from webui.messages import bilingual, refusal


def create_ui(ctx: Ctx) -> None:
    c = ctx.c
    with gr.Accordion(T("pub.title"), open=False, elem_id="publish-acc"):
        gr.Markdown(T("pub.intro"))
        c["pub_destination"] = gr.Radio(list(DESTINATIONS), value=DEFAULT_DESTINATION,
                                        label=T("pub.destination"),
                                        info=T("pub.destination_info"),
                                        elem_id="pub-destination")
        with gr.Row(equal_height=False, elem_classes=["zl-bottom"]):
            c["pub_repo"] = gr.Textbox(label=T("pub.repo"), placeholder="you/my-lora",
                                       elem_id="pub-repo", scale=3)
            c["pub_private"] = gr.Checkbox(label=T("pub.private"), value=True,
                                           elem_id="pub-private", scale=1)
            c["pub_existing"] = gr.Checkbox(label=T("pub.existing"), value=False,
                                            elem_id="pub-existing", scale=1)
        with gr.Row(equal_height=False):
            c["pub_formats"] = gr.CheckboxGroup(list(FORMATS), value=list(FORMATS),
                                                label=T("pub.formats"),
                                                info=T("pub.formats_info"),
                                                elem_id="pub-formats")
            c["pub_checkpoint"] = gr.Dropdown(choices=[], value=None,
                                              label=T("runs.checkpoint"),
                                              elem_id="pub-checkpoint")
        c["pub_token"] = gr.Textbox(type="password", label=T("pub.token"),
                                    info=T("pub.token_info"), elem_id="pub-token")
        with gr.Row():
            c["pub_preview"] = gr.Button(T("pub.preview"), elem_id="pub-preview")
            c["pub_send"] = gr.Button(T("pub.send"), variant="primary", elem_id="pub-send")
        c["pub_msg"] = gr.Markdown("", elem_id="pub-msg")
        c["pub_files"] = gr.Markdown("", elem_id="pub-files")
        c["pub_card"] = gr.Markdown("", label=T("pub.card"), show_label=True,
                                    elem_id="pub-card")


def bind_events(ctx: Ctx) -> None:
    c = ctx.c

    def checkpoints(data: dict, request: gr.Request):
        """The picked run's checkpoints, the latest chosen."""
        run = ctx.run(data[c["runs_pick"]], request)
        names = [p.name for p in jobs.checkpoints(run)] if run else []
        return gr.Dropdown(choices=names, value=names[-1] if names else None)

    c["runs_pick"].change(checkpoints, inputs={c["runs_pick"]}, outputs=[c["pub_checkpoint"]],
                          show_progress="hidden", api_visibility="private")

    inputs = {c["runs_pick"], c["pub_repo"], c["pub_private"], c["pub_existing"],
              c["pub_formats"], c["pub_checkpoint"], c["pub_token"], c["pub_destination"]}
    outputs = [c["pub_msg"], c["pub_files"], c["pub_card"]]

    def preview(data: dict, request: gr.Request):
        run = ctx.run(data[c["runs_pick"]], request)
        if run is None:
            return {c["pub_msg"]: bilingual(Msg("runs.choose_first_x")), c["pub_files"]: "",
                    c["pub_card"]: ""}
        try:
            staged = publishing.preview(run, data[c["pub_repo"]], data[c["pub_formats"]],
                                        data[c["pub_checkpoint"]], data[c["pub_token"]],
                                        data[c["pub_destination"]])
        except (publishing.PublishError, ConfigError) as e:
            return {c["pub_msg"]: refusal(e), c["pub_files"]: "", c["pub_card"]: ""}
        return {c["pub_msg"]: bilingual(publishing.summary(staged,
                                                           data[c["pub_destination"]])),
                c["pub_files"]: "\n".join(f"- {bilingual(m)}"
                                          for m in publishing.file_lines(staged)),
                c["pub_card"]: publishing.card_markdown(staged.card)}

    c["pub_preview"].click(preview, inputs=inputs, outputs=outputs,
                           show_progress_on=[c["pub_msg"]], api_visibility="private")

    def send(data: dict, request: gr.Request):
        """Publish in a thread; each step it says reaches the page as it happens."""
        run = ctx.run(data[c["runs_pick"]], request)
        if run is None:
            yield {c["pub_msg"]: bilingual(Msg("runs.choose_first_x"))}
            return
        user = ctx.owner(request)
        said: queue.Queue = queue.Queue()
        outcome: dict = {}

        def work() -> None:
            try:
                outcome["done"] = publishing.publish(
                    run, user, data[c["pub_repo"]], private=data[c["pub_private"]],
                    formats=data[c["pub_formats"]], checkpoint=data[c["pub_checkpoint"]],
                    token=data[c["pub_token"]], existing=data[c["pub_existing"]],
                    destination=data[c["pub_destination"]], say=said.put)
            except (publishing.PublishError, ConfigError) as e:
                outcome["refused"] = e
            except Exception as e:  # noqa: BLE001 - shown in the page, the token hidden
                outcome["failed"] = Msg("runs.error", why=security.redact(str(e)) or
                                        type(e).__name__)
            finally:
                said.put(None)

        threading.Thread(target=work, daemon=True, name="publish").start()
        lines: list[str] = []
        last_sent = False
        while (m := said.get()) is not None:
            sent = isinstance(m, Msg) and m.code == "publish.sent"
            if sent and lines and last_sent:  # the bytes sent: one line that moves
                lines[-1] = bilingual(m)
            else:
                lines.append(bilingual(m))
            last_sent = sent
            yield {c["pub_msg"]: "  \n".join(lines), c["pub_files"]: "", c["pub_card"]: ""}
        if "refused" in outcome:
            lines.append(refusal(outcome["refused"]))
        elif "failed" in outcome:
            lines.append(bilingual(outcome["failed"]))
        yield {c["pub_msg"]: "  \n".join(lines)}

    c["pub_send"].click(send, inputs=inputs, outputs=outputs,
                        show_progress_on=[c["pub_msg"]], api_visibility="private")
