"""Publishing from the API (``/publish_run``) and the Runs tab, against ``launch.py`` with
sign-in, as a script and a person use them.

No hub is reachable from the test machines: the local stand-ins of the Hub
(``tests/harness/hub_server.py``) and of ModelScope (``tests/harness/modelscope_server.py``)
run in this process and the app server's environment points at them (``HF_ENDPOINT``,
``MODELSCOPE_ENDPOINT``; the server's own ``HF_TOKEN`` / ``MODELSCOPE_API_TOKEN`` are the
hubs' tokens, for admins). The app server is this module's own (its environment is what is tested); its
workspace holds a finished run of the tiny model (``tests/harness/published.py``) owned by
bob, registered in the run history as a run that ran.
"""
from __future__ import annotations

import sys
from pathlib import Path

import pytest
from gradio_client import Client
from gradio_client.exceptions import AppError

from backend.core.rundir import RunDir
from backend.jobs.runner import Runner
from backend.planning.plan import StagePlan
from tests.harness.app import AppServer, launcher_env
from tests.harness.browser import USERS
from tests.harness.hub_server import HubServer
from tests.harness.modelscope_server import ModelScopeServer
from tests.harness.published import write_finished_run

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]  # an app server of its own

TOKEN = "hf_" + "PublishFromThePage0123456789abcdef"
MS_TOKEN = "ms-" + "PublishFromThePage-0123456789abcdef"
HUB_USER = "alice"
RUN_ID = "20260102-120000-b0b0b0"


@pytest.fixture(scope="module")
def hub():
    with HubServer(TOKEN, HUB_USER) as server:
        yield server


@pytest.fixture(scope="module")
def ms():
    with ModelScopeServer(MS_TOKEN, HUB_USER) as server:
        yield server


@pytest.fixture(scope="module")
def app(tmp_path_factory, hub, ms, tiny_model_dir, models_root, demo_dataset):
    """``launch.py`` with sign-in (alice admin; bob, carol), the Hub at ``HF_ENDPOINT``,
    bob's finished run in its history."""
    tmp = tmp_path_factory.mktemp("publish-app")
    rd = RunDir.new(tmp / "workspace", RUN_ID)
    write_finished_run(rd, tiny_model_dir, models_root, demo_dataset)
    runner = Runner(tmp / "workspace", auto_start=False)
    runner.submit_stages([StagePlan("train", [sys.executable, "-c", "pass"], {})],
                         rd.run_dir, "", owner="bob", name="zlr style", run_id=RUN_ID)
    assert runner.wait(RUN_ID, timeout=120)["status"] == "succeeded"
    auth_file = tmp / "users.txt"
    auth_file.write_text("".join(f"{u}:{p}\n" for u, p in USERS.items() if u != "alice"))
    server = AppServer(tmp, "--auth", f"alice:{USERS['alice']}", "--auth-file",
                       str(auth_file), "--admin", "alice", "--models-dir", str(models_root),
                       env=launcher_env(HF_ENDPOINT=hub.url, HF_TOKEN=TOKEN,
                                        HF_HUB_OFFLINE="", TRANSFORMERS_OFFLINE="",
                                        MODELSCOPE_ENDPOINT=ms.url,
                                        MODELSCOPE_API_TOKEN=MS_TOKEN,
                                        MODELSCOPE_HOME=str(tmp / "modelscope-home"),
                                        MODELSCOPE_CACHE=str(tmp / "modelscope-cache")))
    server.tmp = tmp
    yield server
    server.stop()


def client(server, user: str) -> Client:
    return Client(server.url, auth=(user, USERS[user]), analytics_enabled=False,
                  verbose=False, download_files=str(server.tmp / f"client-{user}"))


def publish(c: Client, repo: str, **kw):
    args = {"run_id": RUN_ID, "repo_id": repo, "private": False, "formats": None,
            "checkpoint": "", "token": "", "dry_run": False, "existing": False}
    return c.predict(**{**args, **kw}, api_name="/publish_run")


def test_bob_previews_then_publishes_his_run(app, hub):
    bob = client(app, "bob")
    shown = publish(bob, f"{HUB_USER}/api-lora", formats=["diffusers"], dry_run=True)
    assert shown["sent"] is False and shown["url"] == f"{hub.url}/{HUB_USER}/api-lora"
    assert shown["checkpoint"] == "step-2.safetensors"
    assert "base_model_relation: adapter" in shown["card"]
    files = [f["file"] for f in shown["files"]]
    assert "pytorch_lora_weights.safetensors" in files and "README.md" in files
    assert not any(f.endswith("_comfyui.safetensors") for f in files)
    assert hub.requests == []  # a preview sends nothing

    done = publish(bob, f"{HUB_USER}/api-lora", private=True, formats=["diffusers"],
                   checkpoint="step-1", token=TOKEN)
    assert done["sent"] is True and done["url"] == f"{hub.url}/{HUB_USER}/api-lora"
    repo = hub.repos[f"{HUB_USER}/api-lora"]
    assert sorted(repo) == sorted(f["file"] for f in done["files"]) == sorted(files)
    assert hub.private[f"{HUB_USER}/api-lora"] is True
    assert repo["README.md"].startswith(b"---\n") and b"`step-1.safetensors`" in \
        repo["README.md"]

    # the name is taken now: said as the Hub said it; adding to it works
    with pytest.raises(AppError, match="already exists"):
        publish(bob, f"{HUB_USER}/api-lora", formats=["reference"], token=TOKEN)
    again = publish(bob, f"{HUB_USER}/api-lora", formats=["reference"], token=TOKEN,
                    existing=True)
    assert "api-lora.safetensors" in [f["file"] for f in again["files"]]
    # a namespace the token may not write to: the Hub's 403, the token not in the message
    with pytest.raises(AppError, match="403") as e:
        publish(bob, "bob/api-lora", token=TOKEN)
    assert TOKEN not in str(e.value)


def test_only_the_owner_or_an_admin_publishes_and_only_admins_use_the_server_token(app,
                                                                                   hub):
    carol = client(app, "carol")
    for dry in (True, False):
        with pytest.raises(AppError, match="no such run of yours"):
            publish(carol, f"{HUB_USER}/carols", token=TOKEN, dry_run=dry)
    assert f"{HUB_USER}/carols" not in hub.repos
    # bob, his own run, no token typed: the server's token is not his
    with pytest.raises(AppError, match="your own Hugging Face access token"):
        publish(client(app, "bob"), f"{HUB_USER}/no-token")
    assert f"{HUB_USER}/no-token" not in hub.repos
    # alice, an admin: anyone's run, with the server's own token (its HF_TOKEN)
    done = publish(client(app, "alice"), f"{HUB_USER}/by-admin", formats=["comfyui"])
    assert "by-admin_comfyui.safetensors" in hub.repos[f"{HUB_USER}/by-admin"]
    assert done["url"].endswith("/by-admin")
    # a name the Hub does not allow: refused before anything is sent
    n = len(hub.requests)
    with pytest.raises(AppError, match="not a Hugging Face repository name"):
        publish(client(app, "alice"), "no-owner")
    assert len(hub.requests) == n


def test_the_runs_tab_previews_the_card_and_publishes(app, hub, browser):
    from playwright.sync_api import expect

    from tests.harness.browser import md, tab

    ctx = browser.new_context(locale="en-US", viewport={"width": 1400, "height": 1000})
    r = ctx.request.post(f"{app.url}/login", form={"username": "bob",
                                                   "password": USERS["bob"]})
    assert r.ok, r.text()
    page = ctx.new_page()
    page.set_default_timeout(60_000)
    page.goto(app.url)
    expect(page.locator("#tab-model-button")).to_be_visible(timeout=120_000)
    tab(page, "runs")
    expect(page.locator("#runs-pick input")).to_have_value(f"zlr style · {RUN_ID} · succeeded")
    page.click("#publish-acc .label-wrap")
    page.locator("#pub-repo input, #pub-repo textarea").first.fill(f"{HUB_USER}/ui-lora")
    page.locator("#pub-token input").fill(TOKEN)
    expect(page.locator("#pub-checkpoint input")).to_have_value("step-2.safetensors")
    page.click("#pub-preview")
    expect(md(page, "pub-card")).to_contain_text("base_model_relation: adapter")
    expect(md(page, "pub-files")).to_contain_text("pytorch_lora_weights.safetensors")
    expect(md(page, "pub-msg")).to_contain_text("Nothing was sent")
    assert f"{HUB_USER}/ui-lora" not in hub.repos
    page.click("#pub-send")
    expect(md(page, "pub-msg")).to_contain_text(f"Published: {hub.url}/{HUB_USER}/ui-lora")
    assert "README.md" in hub.repos[f"{HUB_USER}/ui-lora"]
    assert hub.private[f"{HUB_USER}/ui-lora"] is True  # the box starts ticked
    # a refusal in the page's words: the name is taken now
    page.click("#pub-send")
    expect(md(page, "pub-msg")).to_contain_text("already exists (409)")
    # and in Chinese, which the page shows when switched to it
    expect(page.locator("#pub-msg .zl-zh").last).to_contain_text("已存在（409）")
    ctx.close()


def test_bob_publishes_to_modelscope_and_the_page_offers_it(app, ms, browser):
    """The API's ``destination``: ModelScope's card in the preview, the files at the local
    ModelScope, its own refusals; the page's hub choice."""
    from playwright.sync_api import expect

    from tests.harness.browser import md, tab

    bob = client(app, "bob")
    shown = publish(bob, f"{HUB_USER}/ms-lora", formats=["diffusers"], dry_run=True,
                    destination="modelscope")
    assert shown["url"] == f"{ms.url}/models/{HUB_USER}/ms-lora"
    assert "tasks:\n- text-to-image-synthesis" in shown["card"]
    assert ms.requests == []
    with pytest.raises(AppError, match="your own ModelScope access token"):
        publish(bob, f"{HUB_USER}/ms-lora", destination="modelscope")
    done = publish(bob, f"{HUB_USER}/ms-lora", formats=["diffusers"], token=MS_TOKEN,
                   destination="modelscope")
    assert done["url"] == f"{ms.url}/models/{HUB_USER}/ms-lora"
    assert sorted(ms.repos[f"{HUB_USER}/ms-lora"]) == sorted(f["file"] for f in done["files"])
    with pytest.raises(AppError, match="already exists on ModelScope"):
        publish(bob, f"{HUB_USER}/ms-lora", token=MS_TOKEN, destination="modelscope")
    # the page: pick ModelScope, publish, the bytes sent and the address
    ctx = browser.new_context(locale="en-US", viewport={"width": 1400, "height": 1000})
    r = ctx.request.post(f"{app.url}/login", form={"username": "bob",
                                                   "password": USERS["bob"]})
    assert r.ok, r.text()
    page = ctx.new_page()
    page.set_default_timeout(60_000)
    page.goto(app.url)
    expect(page.locator("#tab-model-button")).to_be_visible(timeout=120_000)
    tab(page, "runs")
    page.click("#publish-acc .label-wrap")
    page.locator("#pub-destination label", has_text="modelscope").click()
    page.locator("#pub-repo input, #pub-repo textarea").first.fill(f"{HUB_USER}/ms-page")
    page.locator("#pub-token input").fill(MS_TOKEN)
    page.click("#pub-send")
    expect(md(page, "pub-msg")).to_contain_text(f"Published: {ms.url}/models/{HUB_USER}/ms-page")
    expect(md(page, "pub-msg")).to_contain_text("(100%)")
    assert "README.md" in ms.repos[f"{HUB_USER}/ms-page"]
    ctx.close()


def test_the_token_is_in_no_file_and_no_log(app, hub, ms):
    """After the tests above (typed in the API and the page, the server's own, refusals):
    the tokens are in no byte of the workspace, the server's log or anything else the app
    wrote, and in no request body that reached a hub (only in its Authorization header)."""
    assert hub.repos and ms.repos, "nothing was published before this test"
    for token, server in ((TOKEN, hub), (MS_TOKEN, ms)):
        secret = token.encode()
        found = [str(p) for p in Path(app.tmp).rglob("*")
                 if p.is_file() and not p.is_symlink() and secret in p.read_bytes()]
        assert found == []
        assert secret not in server.body_bytes()
