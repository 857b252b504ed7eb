"""No signed-in user reaches another user's data: each probe of the cross-user review, tried
the way a second signed-in user would, against ``launch.py`` served with sign-in (alice is
an admin; bob and carol are not): ``gradio_client`` for the API, plain HTTP for the pages'
own events (upload, then the event by its index, as the browser does).

Cheap runs only: stage 1 refuses its dataset before any model is loaded, and a test-side
``Runner`` on the same workspace holds the queue with a sleeping run where a test needs a
run to wait.
"""
from __future__ import annotations

import io
import json
import os
import secrets
import sys
import time
import zipfile
from pathlib import Path

import httpx
import pytest
from gradio_client import Client

from backend import readgate
from backend.config import validate
from backend.plan import StagePlan
from backend.runner import Runner
from tests.test_launch import AppServer

pytestmark = pytest.mark.timeout(600)
USERS = {"alice": "alice-pw-1", "bob": "bob-pw-2", "carol": "carol-pw-3"}
TERMINAL = ("succeeded", "failed", "stopped")


def png_bytes(colour=(200, 30, 30), size=16) -> bytes:
    from PIL import Image

    buf = io.BytesIO()
    Image.new("RGB", (size, size), colour).save(buf, format="PNG")
    return buf.getvalue()


# ------------------------------------------------------------------------ the read gate
def test_the_gate_resolves_links_when_it_opens_and_says_not_found_for_both(tmp_path):
    mine, theirs = tmp_path / "mine", tmp_path / "theirs"
    mine.mkdir()
    theirs.mkdir()
    (mine / "a.png").write_bytes(png_bytes())
    (theirs / "secret.png").write_bytes(png_bytes((0, 0, 255)))
    (mine / "link.png").symlink_to(theirs / "secret.png")
    gate = readgate.gate_of([str(mine)])
    assert gate.read_bytes(mine / "a.png") == (mine / "a.png").read_bytes()
    answers = []
    for path in (theirs / "secret.png", mine / "link.png", theirs / "no-such.png",
                 mine / ".." / "theirs" / "secret.png"):
        with pytest.raises(readgate.ReadRefused) as e:
            gate.open(path, "image")
        answers.append(str(e.value).replace(repr(str(path)), "<path>"))
    assert set(answers) == {"image not found (got <path>)"}
    assert not gate.is_file(theirs / "secret.png") and not gate.is_dir(theirs)
    # A file swapped for a link after the check is refused when it is opened.
    swapped = mine / "b.png"
    swapped.write_bytes(png_bytes())
    assert gate.is_file(swapped)
    swapped.unlink()
    swapped.symlink_to(theirs / "secret.png")
    with pytest.raises(readgate.ReadRefused):
        gate.read_bytes(swapped)
    assert readgate.UNRESTRICTED.read_bytes(swapped) == (theirs / "secret.png").read_bytes()


def test_a_dataset_outside_the_read_roots_reads_as_missing(tmp_path):
    from backend.data import DatasetError, check_dataset

    own, other = tmp_path / "own", tmp_path / "other"
    own.mkdir()
    other.mkdir()
    (other / "x.png").write_bytes(png_bytes())
    (own / "a.png").write_bytes(png_bytes())
    (own / "metadata.csv").write_text(f"image,prompt\na.png,mine\n{other / 'x.png'},theirs\n"
                                      f"{other / 'none.png'},nothing\n../other/x.png,up\n")
    cfg = validate({"dataset_base_path": str(own),
                    "dataset_metadata_path": str(own / "metadata.csv"),
                    "read_roots": [str(own)]})
    with pytest.raises(DatasetError) as e:
        check_dataset(cfg)
    assert e.value.problems == [
        f"metadata.csv row 2: image not found (got {str(other / 'x.png')!r})",
        f"metadata.csv row 3: image not found (got {str(other / 'none.png')!r})",
        "metadata.csv row 4: image not found (got '../other/x.png')"]
    # Without read_roots (sign-in off, admins) the same dataset reads the other file.
    open_cfg = cfg.model_copy(update={"read_roots": None})
    with pytest.raises(DatasetError) as e:
        check_dataset(open_cfg)
    assert [p.split(":")[0] for p in e.value.problems] == ["metadata.csv row 3"]
    # The folder itself outside the roots: not found, its files never listed.
    with pytest.raises(DatasetError, match=r"dataset_base_path: folder not found"):
        check_dataset(cfg.model_copy(update={"dataset_base_path": str(other),
                                             "dataset_metadata_path": None}))


def test_a_cache_manifest_names_only_files_of_its_folder(tmp_path):
    from backend.cache import CacheError, check_cache

    cache, other = tmp_path / "cache", tmp_path / "other"
    cache.mkdir()
    other.mkdir()
    (other / "k.safetensors").write_bytes(b"x")
    (cache / "manifest.json").write_text(json.dumps(
        {"format": 1, "samples": [{"file": str(other / "k.safetensors")}]}))
    with pytest.raises(CacheError, match="not a file of the cache folder"):
        check_cache(cache)
    (cache / "manifest.json").unlink()
    (cache / "k.safetensors").symlink_to(other / "k.safetensors")
    gate = readgate.gate_of([str(cache)])
    with pytest.raises(CacheError, match="missing: k.safetensors"):
        check_cache(cache, gate)
    with pytest.raises(CacheError, match="cache folder not found"):
        check_cache(other, gate)


# ------------------------------------------------------------------------ served app
@pytest.fixture(scope="module")
def served(tmp_path_factory, models_root):
    tmp = tmp_path_factory.mktemp("isolation")
    auth_file = tmp / "users.txt"
    auth_file.write_text("".join(f"{u}:{p}\n" for u, p in USERS.items()))
    server = AppServer(tmp, "--auth-file", str(auth_file), "--admin", "alice",
                       "--models-dir", str(models_root))
    server.runner = Runner(server.workspace, stop_grace_s=1)
    yield server
    server.stop()


def client(server: AppServer, user: str) -> Client:
    return Client(server.url, auth=(user, USERS[user]), analytics_enabled=False,
                  verbose=False, download_files=str(server.workspace.parent / f"dl-{user}"))


def wait_done(c: Client, run_id: str, limit_s: float = 400) -> dict:
    deadline = time.monotonic() + limit_s  # a safety limit, not a timing assertion
    while time.monotonic() < deadline:
        status = c.predict(run_id=run_id, api_name="/run_status")
        if status["status"] in TERMINAL:
            return status
        time.sleep(0.5)
    raise AssertionError(f"run {run_id} did not finish: {status}")


def hold_the_queue(server: AppServer) -> str:
    """A run of alice's that sleeps, so runs started now wait in the queue."""
    run_dir = server.workspace / "runs" / f"hold-{secrets.token_hex(4)}"
    plan = StagePlan("hold", [sys.executable, "-c", "import time; time.sleep(300)"], {})
    rid = server.runner.submit_stages([plan], run_dir, "", owner="alice", name="hold")
    deadline = time.monotonic() + 60
    while server.runner.get_run(rid)["status"] != "running" and time.monotonic() < deadline:
        time.sleep(0.2)
    return rid


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
        """Run the event; ``values`` by input elem_id. Returns the outputs by elem_id."""
        dep = self.event(elem_id, kind)
        by_id = {c["id"]: c for c in self.config["components"]}
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


def test_a_run_never_reads_another_users_files_planted_after_its_check(served):
    """The leak: bob starts a run on a folder of his that does not exist yet, then fills
    it with a metadata file naming carol's images. The stage opens nothing of carol's, and
    says the same for her existing file and for a path that does not exist."""
    ws = served.workspace
    carols = ws / "datasets" / "carol" / "private"
    carols.mkdir(parents=True)
    (carols / "face.png").write_bytes(png_bytes((1, 2, 3), 32))
    later = ws / "datasets" / "bob" / "later"
    bob = client(served, "bob")
    hold = hold_the_queue(served)
    try:
        started = bob.predict(config={
            "stages": ["data_process"], "offline": True, "dataset_base_path": str(later),
            "dataset_metadata_path": str(later / "metadata.csv")}, preset="cpu_demo",
            name="probe", hub_token="", api_name="/start_run")
        assert started["status"] == "queued"
        later.mkdir(parents=True)
        (later / "metadata.csv").write_text(
            f"image,prompt\n{carols / 'face.png'},a face\n{carols / 'none.png'},nothing\n")
        (later / "mine.png").symlink_to(carols / "face.png")
        with open(later / "metadata.csv", "a") as f:
            f.write("mine.png,a link\n")
    finally:
        served.runner.stop(hold, wait=True)
    status = wait_done(bob, started["run_id"])
    assert status["status"] == "failed", status
    log = bob.predict(run_id=started["run_id"], stage="data_process", offset=0,
                      api_name="/run_log")["text"]
    assert f"metadata.csv row 1: image not found (got {str(carols / 'face.png')!r})" in log
    assert f"metadata.csv row 2: image not found (got {str(carols / 'none.png')!r})" in log
    assert "metadata.csv row 3: image not found (got 'mine.png')" in log
    assert "cannot identify" not in log and "cannot read image" not in log
    cache = ws / "runs" / started["run_id"] / "cache"
    assert not list(cache.glob("*.safetensors")) if cache.exists() else True
    # The run carries its policy; bob may not set one himself.
    run_yaml = (ws / "runs" / started["run_id"] / "run.yaml").read_text()
    assert "read_roots:" in run_yaml and str(ws / "datasets" / "bob") in run_yaml
    assert str(carols) not in run_yaml.split("read_roots:")[1].split("\n\n")[0]
    with pytest.raises(Exception, match="read_roots: set by the server"):
        bob.predict(config={"stages": ["data_process"], "read_roots": ["/"],
                            "dataset_base_path": str(later)}, preset="cpu_demo", name="",
                    hub_token="", api_name="/start_run")


def zip_bytes(entries: dict[str, bytes]) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        for name, data in entries.items():
            zf.writestr(name, data)
    return buf.getvalue()


def test_a_refused_upload_leaves_nothing_behind(served):
    ws = served.workspace
    carols = ws / "datasets" / "carol" / "secret"
    carols.mkdir(parents=True, exist_ok=True)
    (carols / "c.png").write_bytes(png_bytes((9, 9, 9)))
    page = Page(served, "bob")
    evil = zip_bytes({"a.png": png_bytes(), "metadata.csv":
                      f"image,prompt\na.png,mine\n{carols / 'c.png'},hers\n".encode()})
    out = page.call("upload-btn", {"upload-files": [page.upload("evil.zip", evil)],
                                   "upload-name": "evil"})
    assert "names a file outside this upload" in out["data-msg"], out
    assert not (ws / "datasets" / "bob" / "evil").exists()
    # The same upload without the foreign row is a dataset.
    good = zip_bytes({"a.png": png_bytes(), "metadata.csv": b"image,prompt\na.png,mine\n"})
    out = page.call("upload-btn", {"upload-files": [page.upload("good.zip", good)],
                                   "upload-name": "good"})
    assert (ws / "datasets" / "bob" / "good" / "a.png").is_file(), out


# ------------------------------------------------------------------------ presets
def test_presets_belong_to_their_user_and_admin_fields_stay_with_admins(served):
    ws = served.workspace
    bob_page, carol_page = Page(served, "bob"), Page(served, "carol")
    bob, carol = client(served, "bob"), client(served, "carol")
    out = bob_page.call("preset-save", {"preset-save-name": "bobs", "field-lora_rank": 24})
    assert "Saved preset" in out["preset-msg"], out
    assert "bobs" in bob.predict(api_name="/list_presets")
    # Carol neither lists, loads nor overwrites it.
    assert "bobs" not in carol.predict(api_name="/list_presets")
    with pytest.raises(Exception, match="no preset with this name"):
        carol.predict(config={}, preset="bobs", name="", hub_token="", api_name="/start_run")
    out = carol_page.call("preset-save", {"preset-save-name": "bobs", "field-lora_rank": 8})
    assert "Saved preset" in out["preset-msg"], out
    assert "lora_rank: 24" in (ws / "presets" / "users" / "bob" / "bobs.yaml").read_text()
    out = bob_page.call("preset", {"preset": "bobs"}, kind="input")
    assert out["field-lora_rank"] == 24, out

    # Model sources, mirrors and server folders: refused in a non-admin's preset at save...
    for field, value in (("model_id_with_origin_paths", "/etc:passwd"),
                         ("hub_endpoint", "http://127.0.0.1:9")):
        out = bob_page.call("preset-save", {"preset-save-name": "sources",
                                            f"field-{field}": value})
        assert out["preset-msg"].startswith(f"✗ {field}: reserved to admins"), out
    assert not (ws / "presets" / "users" / "bob" / "sources.yaml").exists()
    out = bob_page.call("preset-save", {"preset-save-name": "everyone", "preset-shared": True})
    assert "only admins share presets" in out["preset-msg"], out
    # ... and at load (a file changed there by other means).
    bob_page.call("preset-save", {"preset-save-name": "planted"})
    (ws / "presets" / "users" / "bob" / "planted.yaml").write_text(
        "hub_endpoint: http://127.0.0.1:9\nmodels_dir: /\n")
    with pytest.raises(Exception, match="hub_endpoint: reserved to admins"):
        bob.predict(config={}, preset="planted", name="", hub_token="", api_name="/start_run")
    out = bob_page.call("preset", {"preset": "planted"}, kind="input")
    assert "models_dir: reserved to admins" in out["preset-msg"], out
    # An admin shares one by choice; every user then sees it.
    alice_page = Page(served, "alice")
    out = alice_page.call("preset-save", {"preset-save-name": "team", "preset-shared": True,
                                          "field-hub_endpoint": "http://127.0.0.1:9"})
    assert "Saved preset" in out["preset-msg"], out
    assert (ws / "presets" / "team.yaml").is_file()
    assert "team" in carol.predict(api_name="/list_presets")
