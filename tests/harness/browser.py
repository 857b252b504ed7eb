"""The system's Chromium (/usr/bin/chromium; nothing is downloaded) through playwright, the
page's elements by id, and the page's own events over plain HTTP (``Page``)."""
from __future__ import annotations

import json
import re
import secrets
import time

from playwright.sync_api import expect

from tests.harness.app import AppServer

# Every check without its own timeout waits up to this long (playwright's own default is
# 5 s): the page follows the server by polling, and a loaded machine polls late.
expect.set_options(timeout=30_000)


CHROMIUM = "/usr/bin/chromium"


CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--no-first-run"]


RUN_ID = re.compile(r"\d{8}-\d{6}-[0-9a-f]{6}")


STEP_S = 120


def new_page(browser, url: str, locale: str = "en-US"):
    ctx = browser.new_context(locale=locale, viewport={"width": 1400, "height": 1000},
                              accept_downloads=True)
    page = ctx.new_page()
    page.set_default_timeout(60_000)
    page.goto(url)
    expect(page.locator("#tab-model-button")).to_be_visible(timeout=120_000)
    return page


def md(page, elem_id: str):
    """The rendered text of a gr.Markdown (not its status overlay)."""
    return page.locator(f"#{elem_id} [data-testid=markdown]")


def code_text(page, elem_id: str, contains: str, timeout_s: float = STEP_S) -> str:
    """The whole text of a gr.Code as its Download button hands it over (the editor itself
    draws only the lines in view), once it holds ``contains``."""
    deadline = time.monotonic() + timeout_s  # a bound on the wait, not a timing
    text = ""
    while time.monotonic() < deadline:
        text = page.evaluate(
            """async (id) => {
                const a = document.querySelector(`#${id} a[href^="blob:"]`);
                return a ? await (await fetch(a.href)).text() : "";
            }""", elem_id)
        if contains in text:
            return text
        page.wait_for_timeout(250)
    raise AssertionError(f"#{elem_id} never held {contains!r}; it held:\n{text}")


def tab(page, name: str) -> None:
    page.click(f"#tab-{name}-button")
    expect(page.locator(f"#tab-{name}-button")).to_have_attribute("aria-selected", "true")


def pick(page, elem_id: str, label: str) -> None:
    page.click(f"#{elem_id} input")
    page.click(f"ul[role=listbox] li:has-text('{label}')")


def field(page, name: str):
    """The input of a schema field's component."""
    return page.locator(f"#field-{name} input, #field-{name} textarea").first


# The signed-in servers' users: alice is the admin; dave is locked out by the sign-in limit
# test (his name only).
USERS = {"alice": "alice-pw-1", "bob": "bob-pw-2", "carol": "carol-pw-3", "dave": "dave-pw-4"}


def english(text: str) -> str:
    """The English of a message the page shows in both languages (one shown at a time)."""
    text = re.sub(r'<span class="zl-zh">.*?</span>', "", str(text))
    return re.sub(r'</?span[^>]*>', "", text)


class Page:
    """The page's own events over plain HTTP, as the browser sends them."""

    def __init__(self, server: AppServer, user: str):
        self.http = server.login(user, USERS[user])
        self.config = self.http.get("/config").json()
        self.session = secrets.token_hex(8)

    def component(self, elem_id: str) -> int:
        return next(c["id"] for c in self.config["components"]
                    if c.get("props", {}).get("elem_id") == elem_id)

    def event(self, elem_id: str, kind: str = "click") -> dict:
        cid = self.component(elem_id)
        return next(d for d in self.config["dependencies"] if [cid, kind] in d["targets"])

    def upload(self, name: str, data: bytes) -> dict:
        r = self.http.post("/gradio_api/upload", files=[("files", (name, data))])
        assert r.status_code == 200, r.text
        path = r.json()[0]
        return {"path": path, "orig_name": name, "meta": {"_type": "gradio.FileData"}}

    def call(self, elem_id: str, values: dict[str, object], kind: str = "click",
             session: str | None = None) -> dict:
        """Run the event; ``values`` by input elem_id. Returns the outputs by elem_id.

        A form field's value (``field-<name>``) goes into the form's snapshot
        (``form-values``), as the page's own edit does."""
        dep = self.event(elem_id, kind)
        by_id = {c["id"]: c for c in self.config["components"]}
        values = dict(values)
        fields = {k[len("field-"):]: v for k, v in values.items() if k.startswith("field-")}
        snapshot = next((c for c in by_id.values()
                         if c.get("props", {}).get("elem_id") == "form-values"), None)
        if fields and snapshot is not None and "form-values" not in values:
            values["form-values"] = json.dumps(
                {**json.loads(snapshot["props"]["value"] or "{}"), **fields})
        data = [values.get(by_id[i].get("props", {}).get("elem_id"),
                           by_id[i].get("props", {}).get("value")) for i in dep["inputs"]]
        session = session or self.session
        r = self.http.post("/gradio_api/queue/join", json={
            "data": data, "fn_index": dep["id"], "session_hash": session,
            "event_data": None, "trigger_id": self.component(elem_id)})
        assert r.status_code == 200, r.text
        msg = self.wait(session)
        outputs = msg["output"].get("data") or []
        return {by_id[i].get("props", {}).get("elem_id") or i: v
                for i, v in zip(dep["outputs"], outputs)} | {"_msg": msg}

    def wait(self, session: str) -> dict:
        with self.http.stream("GET", f"/gradio_api/queue/data?session_hash={session}",
                              timeout=120) as s:
            for line in s.iter_lines():
                if line.startswith("data:"):
                    msg = json.loads(line[5:])
                    if msg.get("msg") == "process_completed":
                        return msg
        raise AssertionError("the event never completed")
