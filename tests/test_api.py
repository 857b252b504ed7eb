"""The scripting API, called the way a script calls it: ``gradio_client`` against
``launch.py`` running as a subprocess, with and without sign-in.

Runs here are cheap: the sample stage alone on the tiny model (64x64, 2 steps), or a stage
that fails at its first download from a local stand-in for the hub.
"""
from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import SimpleNamespace

import pytest
from gradio_client import Client
from gradio_client.exceptions import AppError, AuthenticationError

from tests.harness.browser import USERS
from webui.api import ENDPOINTS

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]  # app server, real runs
TERMINAL = ("succeeded", "failed", "stopped")


def sample_config(tiny: Path, **changes) -> dict:
    cfg = {"stages": ["sample"], "model_id_with_origin_paths": str(tiny), "offline": True,
           "sample_prompts": ["a red circle"], "sample_lora_scales": [0.0],
           "sample_steps": 2, "sample_height": 64, "sample_width": 64,
           "mixed_precision": "no"}
    cfg.update(changes)
    return cfg


def client(server, user: str | None = None) -> Client:
    auth = (user, USERS[user]) if user else None
    return Client(server.url, auth=auth, analytics_enabled=False, verbose=False,
                  download_files=str(server.workspace.parent / f"client-{user}"))


def wait_done(c: Client, run_id: str, limit_s: float = 400) -> dict:
    deadline = time.monotonic() + limit_s  # a safety limit, not a timing assertion
    while time.monotonic() < deadline:
        status = c.predict(run_id=run_id, api_name="/run_status")
        if status["status"] in TERMINAL:
            return status
        time.sleep(0.5)
    raise AssertionError(f"run {run_id} did not finish: {status}")


@pytest.fixture(scope="module")
def signed_in_app(signed_in):
    """The session's signed-in server (conftest ``signed_in``): its models folder holds the
    tiny model, so non-admins may use it; the hub stays reachable (no offline variables)."""
    return signed_in


@pytest.fixture(scope="module")
def open_app(server):
    """The session's app server without sign-in (conftest ``server``)."""
    url, workspace = server
    return SimpleNamespace(url=url.rstrip("/"), workspace=workspace)


def test_the_endpoints_and_their_names(signed_in_app, open_app):
    for server, user in ((signed_in_app, "bob"), (open_app, None)):
        api = client(server, user).view_api(return_format="dict", print_info=False)
        assert sorted(api["named_endpoints"]) == sorted(f"/{n}" for n in ENDPOINTS)
        params = {k: [p["parameter_name"] for p in v["parameters"]]
                  for k, v in api["named_endpoints"].items()}
        assert params["/start_run"] == ["config", "preset", "name", "hub_token", "wandb_key",
                                        "swanlab_key"]
        assert params["/resume_run"] == ["run_id", "hub_token", "wandb_key", "swanlab_key"]
        assert params["/fetch_output"] == ["run_id", "path"]
        assert params["/run_log"] == ["run_id", "stage", "offset"]
        assert api["unnamed_endpoints"] == {}  # the UI's own events are not an API
    # Signed out there is no API at all; a wrong password does not get one either.
    with pytest.raises(AuthenticationError):
        Client(signed_in_app.url, analytics_enabled=False, verbose=False)
    with pytest.raises(Exception, match="(?i)incorrect|credentials|401|login"):
        Client(signed_in_app.url, auth=("bob", "wrong"), analytics_enabled=False,
               verbose=False)


def test_a_run_from_start_to_its_files_and_only_for_its_owner(signed_in_app, tiny_model_dir):
    bob, carol, alice = (client(signed_in_app, u) for u in ("bob", "carol", "alice"))
    assert "cpu_demo" in bob.predict(api_name="/list_presets")
    bobs_before = [r["run_id"] for r in bob.predict(api_name="/list_runs")]
    started = bob.predict(config=sample_config(tiny_model_dir), preset="", name="first",
                          hub_token="", api_name="/start_run")
    rid = started["run_id"]
    assert started["owner"] == "bob" and started["name"] == "first"
    assert started["status"] in ("queued", "running", "succeeded")

    status = wait_done(bob, rid)
    assert status["status"] == "succeeded", status
    assert status["stages"] == [{"name": "sample", "status": "succeeded", "exit_code": 0}]

    progress = bob.predict(run_id=rid, api_name="/run_progress")
    assert progress["stage"] == "sample" and progress["stages"]["sample"]["status"] == \
        "succeeded"
    images = [s["file"] for s in progress["samples"] if s["file"].endswith(".png")]
    assert images == ["samples/base/p00-seed0.png"]

    outputs = {o["file"]: o["bytes"] for o in bob.predict(run_id=rid, api_name="/list_outputs")}
    assert {"run.yaml", "samples/index.json", "samples/base/p00-seed0.png",
            "logs/sample.log"} <= set(outputs)
    run_dir = signed_in_app.workspace / "runs" / rid
    got = Path(bob.predict(run_id=rid, path="samples/base/p00-seed0.png",
                           api_name="/fetch_output"))
    assert got.read_bytes() == (run_dir / "samples/base/p00-seed0.png").read_bytes()
    assert got.read_bytes()[:4] == b"\x89PNG" and outputs[
        "samples/base/p00-seed0.png"] == got.stat().st_size
    index = json.loads(Path(bob.predict(run_id=rid, path="samples/index.json",
                                        api_name="/fetch_output")).read_text())
    assert index["images"][0]["prompt"] == "a red circle"

    log = bob.predict(run_id=rid, stage="sample", offset=0, api_name="/run_log")
    assert "[sample] wrote" in log["text"] and log["offset"] == outputs["logs/sample.log"]
    assert bob.predict(run_id=rid, stage="sample", offset=log["offset"],
                       api_name="/run_log")["text"] == ""

    # his runs, newest first (the session's server may hold his earlier ones)
    assert [r["run_id"] for r in bob.predict(api_name="/list_runs")] == [rid] + bobs_before
    assert rid not in [r["run_id"] for r in carol.predict(api_name="/list_runs")]
    assert rid in [r["run_id"] for r in alice.predict(api_name="/list_runs")]  # admin

    # Carol gets nothing of bob's run, and the same answer as for a run that does not exist.
    for name, kwargs in [("/run_status", {}), ("/run_progress", {}), ("/list_outputs", {}),
                         ("/stop_run", {}), ("/resume_run", {"hub_token": ""}),
                         ("/run_log", {"stage": "sample", "offset": 0}),
                         ("/fetch_output", {"path": "samples/index.json"})]:
        for run_id in (rid, "20990101-000000-abcdef"):
            with pytest.raises(AppError, match="no such run of yours"):
                carol.predict(run_id=run_id, api_name=name, **kwargs)
    admin_copy = Path(alice.predict(run_id=rid, path="samples/index.json",
                                    api_name="/fetch_output"))
    assert json.loads(admin_copy.read_text()) == index

    # Paths outside the run are refused, whoever asks.
    (run_dir / "samples" / "db.png").symlink_to(signed_in_app.workspace / "zerolora.sqlite")
    for path, why in [("../../zerolora.sqlite", "'..'"), ("/etc/passwd", "relative"),
                      ("samples/db.png", "outside"), ("samples", "not a regular file")]:
        for c in (bob, alice):
            with pytest.raises(AppError, match=why):
                c.predict(run_id=rid, path=path, api_name="/fetch_output")


def test_configs_are_checked_before_anything_starts(signed_in_app):
    bob = client(signed_in_app, "bob")
    before = bob.predict(api_name="/list_runs")
    with pytest.raises(AppError) as e:
        bob.predict(config="lora_rank: 0\nlearning_rat: 0.1\nstages: [sample]\n", preset="",
                    name="", hub_token="", api_name="/start_run")
    # Every problem at once, each naming its field.
    assert "lora_rank:" in str(e.value) and "learning_rat: unknown option" in str(e.value)
    assert "did you mean learning_rate" in str(e.value)
    with pytest.raises(AppError, match="preset: no preset with this name"):
        bob.predict(config="", preset="../../etc/some.yaml", name="", hub_token="",
                    api_name="/start_run")
    with pytest.raises(AppError, match="top level must be a mapping"):
        bob.predict(config="- a\n- b\n", preset="cpu_demo", name="", hub_token="",
                    api_name="/start_run")
    with pytest.raises(AppError, match="hf_token: secrets are never stored"):
        bob.predict(config={"hf_token": "hf_x", "stages": ["sample"]}, preset="", name="",
                    hub_token="", api_name="/start_run")
    assert bob.predict(api_name="/list_runs") == before


def start(c: Client, **changes):
    return c.predict(config=sample_config(changes.pop("tiny"), **changes), preset="", name="",
                     hub_token="", api_name="/start_run")


def stop_at_once(c: Client, run_id: str) -> None:
    c.predict(run_id=run_id, api_name="/stop_run")
    assert wait_done(c, run_id)["status"] in TERMINAL


def test_signed_in_users_point_runs_only_at_their_own_server_paths(signed_in_app,
                                                                   tiny_model_dir):
    ws = signed_in_app.workspace
    bob, alice = client(signed_in_app, "bob"), client(signed_in_app, "alice")
    own = ws / "datasets" / "bob" / "cats"
    carols = ws / "datasets" / "carol" / "dogs"
    for folder in (own, carols):
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "a.txt").write_text("a caption")
    planted = ws / "datasets" / "bob" / "planted"
    if not planted.is_symlink():
        planted.symlink_to("/etc", target_is_directory=True)
    runs_before = sorted(p.name for p in (ws / "runs").glob("*"))
    listed_before = bob.predict(api_name="/list_runs")

    repo = Path(__file__).resolve().parents[1]
    for path in ("/etc", str(repo), str(carols), str(planted)):
        with pytest.raises(AppError) as e:
            start(bob, tiny=tiny_model_dir, dataset_base_path=path)
        assert f"dataset_base_path: outside your dataset folders (got {path!r}" in str(e.value)
    # Every problem at once, each naming its field.
    with pytest.raises(AppError) as e:
        start(bob, tiny=tiny_model_dir, models_dir="/", hub_endpoint="http://127.0.0.1:9",
              lora_checkpoint="/etc/passwd", output_path="/tmp/elsewhere",
              model_id_with_origin_paths="/etc")
    for field in ("models_dir", "hub_endpoint", "lora_checkpoint", "output_path",
                  "model_id_with_origin_paths"):
        assert f"\n  {field}: " in str(e.value), (field, str(e.value))
    # Nothing was created for the refused starts.
    assert sorted(p.name for p in (ws / "runs").glob("*")) == runs_before
    assert bob.predict(api_name="/list_runs") == listed_before

    # Their own folder is fine; an admin may use any path.
    mine = start(bob, tiny=tiny_model_dir, dataset_base_path=str(own))
    assert mine["owner"] == "bob"
    stop_at_once(bob, mine["run_id"])
    admins = start(alice, tiny=tiny_model_dir, dataset_base_path=str(carols),
                   models_dir=str(ws))
    assert admins["owner"] == "alice"
    stop_at_once(alice, admins["run_id"])


def test_a_user_gives_their_own_tracker_key_through_the_api(signed_in_app, tiny_model_dir):
    """A non-admin's run that logs to Weights & Biases online is refused without their key,
    naming ``wandb_key``; with it the run starts, holding the key for its stages only."""
    from PIL import Image

    from backend.jobs.runner import Runner

    ws = signed_in_app.workspace
    bob = client(signed_in_app, "bob")
    own = ws / "datasets" / "bob" / "tracked"
    own.mkdir(parents=True, exist_ok=True)
    Image.new("RGB", (64, 64), (200, 30, 30)).save(own / "a.png")
    (own / "a.txt").write_text("a red square", encoding="utf-8")
    tracked = dict(tiny=tiny_model_dir, dataset_base_path=str(own),
                   stages=["data_process", "train"], enable_wandb_log=True,
                   wandb_mode="online", offline=False, height=64, width=64)
    with pytest.raises(AppError) as e:
        start(bob, **dict(tracked))
    assert "\n  wandb_key: " in str(e.value), str(e.value)
    key = "wandb-key-of-bob-0123456789"
    run = bob.predict(config=sample_config(**dict(tracked)), preset="", name="", hub_token="",
                      wandb_key=key, swanlab_key="", api_name="/start_run")
    stop_at_once(bob, run["run_id"])
    record = Runner(ws).get_run(run["run_id"])
    assert record["secret_keys"] == ["WANDB_API_KEY"]
    leaked = [p for p in Path(record["run_dir"]).rglob("*")
              if p.is_file() and key.encode() in p.read_bytes()]
    assert leaked == []


class FakeHub(BaseHTTPRequestHandler):
    """A stand-in for a model hub that records who asked and refuses everyone."""
    seen: list[tuple[str, str]] = []

    def do_GET(self):  # noqa: N802
        FakeHub.seen.append((self.path, self.headers.get("Authorization", "")))
        body = json.dumps({"error": "Invalid credentials in Authorization header"}).encode()
        self.send_response(401)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_HEAD = do_GET

    def log_message(self, *args):
        pass


def test_a_typed_hub_token_reaches_the_download_and_no_file(signed_in_app, tmp_path,
                                                            tiny_model_dir):
    token = "hf_ZeroLoRAtypedTokenNeverWritten1234"
    hub = ThreadingHTTPServer(("127.0.0.1", 0), FakeHub)
    threading.Thread(target=hub.serve_forever, daemon=True).start()
    try:
        # A download mirror (hub_endpoint) is for admins: alice.
        alice = client(signed_in_app, "alice")
        cfg = sample_config(tiny_model_dir, offline=False, download_source="huggingface",
                            hub_endpoint=f"http://127.0.0.1:{hub.server_port}",
                            models_dir=str(tmp_path / "models"),
                            model_id_with_origin_paths="zerolora-test/private-model:"
                            "transformer/*.safetensors")
        rid = alice.predict(config=cfg, preset="", name="with token", hub_token=token,
                            api_name="/start_run")["run_id"]
        status = wait_done(alice, rid)
        log = alice.predict(run_id=rid, stage="sample", offset=0, api_name="/run_log")["text"]
    finally:
        hub.shutdown()
    # The stage used the token for its download (and the stand-in hub refused it).
    assert status["status"] == "failed", status
    assert [p for p, auth in FakeHub.seen if auth == f"Bearer {token}"
            and p.startswith("/api/models/zerolora-test/private-model")], FakeHub.seen
    assert "could not download" in log and token not in log
    # ... and it is in no file: not the history, run.yaml, commands.sh, logs, caches.
    files = [f for f in signed_in_app.workspace.rglob("*") if f.is_file()]
    assert any(f.name == "zerolora.sqlite" for f in files) and any(
        f.name == "commands.sh" for f in files)
    for f in files:
        assert token.encode() not in f.read_bytes(), f
    assert token not in signed_in_app.log()


def test_stop_and_resume(signed_in_app, tiny_model_dir):
    bob = client(signed_in_app, "bob")
    slow = sample_config(tiny_model_dir, sample_steps=200, sample_prompts=["a", "b", "c"])
    first = bob.predict(config=slow, preset="", name="slow", hub_token="",
                        api_name="/start_run")["run_id"]
    queued = bob.predict(config=sample_config(tiny_model_dir), preset="", name="queued",
                         hub_token="", api_name="/start_run")["run_id"]
    stopped = bob.predict(run_id=first, api_name="/stop_run")
    assert stopped["run_id"] == first
    assert wait_done(bob, first)["status"] == "stopped"
    assert wait_done(bob, queued)["status"] == "succeeded"
    resumed = bob.predict(run_id=first, hub_token="", api_name="/resume_run")
    assert resumed["attempt"] == 2 and resumed["status"] in ("queued", "running")
    bob.predict(run_id=first, api_name="/stop_run")
    assert wait_done(bob, first)["status"] == "stopped"


def test_resume_checks_the_runs_paths_again(signed_in_app, tiny_model_dir):
    ws = signed_in_app.workspace
    bob = client(signed_in_app, "bob")
    own = ws / "datasets" / "bob" / "resume-cats"
    own.mkdir(parents=True)
    (own / "a.txt").write_text("a caption")
    slow = sample_config(tiny_model_dir, sample_steps=200, sample_prompts=["a", "b", "c"],
                         dataset_base_path=str(own))
    rid = bob.predict(config=slow, preset="", name="relinked", hub_token="",
                      api_name="/start_run")["run_id"]
    stop_at_once(bob, rid)
    # Since it started, a link to someone else's file appeared in bob's dataset folder.
    carols = ws / "datasets" / "carol" / "secret.txt"
    carols.parent.mkdir(parents=True, exist_ok=True)
    carols.write_text("carol's")
    (own / "b.txt").symlink_to(carols)
    with pytest.raises(AppError, match="dataset_base_path: 'b.txt' is a link"):
        bob.predict(run_id=rid, hub_token="", api_name="/resume_run")
    status = bob.predict(run_id=rid, api_name="/run_status")
    assert status["status"] == "stopped" and status["attempt"] == 1
    (own / "b.txt").unlink()
    assert bob.predict(run_id=rid, hub_token="", api_name="/resume_run")["attempt"] == 2
    stop_at_once(bob, rid)


def test_without_sign_in_the_one_local_user_may_use_any_path(open_app, tiny_model_dir):
    c = client(open_app)
    run = start(c, tiny=tiny_model_dir, dataset_base_path="/etc", models_dir="/")
    assert run["owner"] is None
    stop_at_once(c, run["run_id"])


def test_without_sign_in_the_one_local_user_has_every_endpoint(open_app, tiny_model_dir):
    c = client(open_app)
    rid = c.predict(config=json.dumps(sample_config(tiny_model_dir)), preset="", name="",
                    hub_token="", api_name="/start_run")["run_id"]
    assert wait_done(c, rid)["status"] == "succeeded"
    run = [r for r in c.predict(api_name="/list_runs") if r["run_id"] == rid][0]
    assert run["owner"] is None
    assert c.predict(run_id=rid, api_name="/run_progress")["stages"]["sample"]["status"] == \
        "succeeded"
    files = [o["file"] for o in c.predict(run_id=rid, api_name="/list_outputs")]
    assert "samples/index.json" in files
    got = Path(c.predict(run_id=rid, path="run.yaml", api_name="/fetch_output"))
    assert "sample_steps: 2" in got.read_text()
    assert c.predict(run_id=rid, stage="sample", offset=0, api_name="/run_log")["offset"] > 0
    assert c.predict(run_id=rid, api_name="/stop_run")["status"] == "succeeded"  # no-op
    with pytest.raises(AppError, match="only a stopped or failed run can be resumed"):
        c.predict(run_id=rid, hub_token="", api_name="/resume_run")
    with pytest.raises(AppError, match=r"'\.\.'"):
        c.predict(run_id=rid, path="../../zerolora.sqlite", api_name="/fetch_output")
