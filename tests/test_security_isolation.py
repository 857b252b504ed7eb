"""No signed-in user reaches another user's data: each probe of the cross-user review, tried
the way a second signed-in user would, against ``launch.py`` served with sign-in (alice is
an admin; bob and carol are not): ``gradio_client`` for the API, plain HTTP for the pages'
own events (upload, then the event by its index, as the browser does).

Cheap runs only: stage 1 refuses its dataset before any model is loaded, and a test-side
``Runner`` on the same workspace holds the queue with a sleeping run where a test needs a
run to wait.
"""
from __future__ import annotations

import contextlib
import io
import json
import os
import secrets
import shutil
import sys
import time
import zipfile
from pathlib import Path

import httpx
import pytest
from gradio_client import Client

from backend.config.validation import validate
from backend.planning.plan import StagePlan
from backend.jobs.runner import Runner
from tests.harness.app import AppServer
from tests.harness.browser import Page, USERS, english

pytestmark = pytest.mark.timeout(600)
TERMINAL = ("succeeded", "failed", "stopped")


def png_bytes(colour=(200, 30, 30), size=16) -> bytes:
    from PIL import Image

    buf = io.BytesIO()
    Image.new("RGB", (size, size), colour).save(buf, format="PNG")
    return buf.getvalue()


# ------------------------------------------------------------------------ the read gate
def test_the_gate_resolves_links_when_it_opens_and_says_not_found_for_both(tmp_path):
    from backend.core import readgate

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
    from backend.data.dataset import DatasetError, check_dataset

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


def test_model_folders_and_lora_files_are_read_through_the_gate(tmp_path):
    """A model folder a library reads itself, a LoRA to start from, a saved state to resume:
    a link planted inside leading out of the read roots refuses the run like a missing file."""
    import shutil

    import torch
    from safetensors.torch import save_file

    from backend.core import readgate
    from backend.models.hub import resolve_component_dirs
    from backend.models.lora import read_lora

    mine, theirs = tmp_path / "mine", tmp_path / "theirs"
    theirs.mkdir()
    assets = Path(__file__).resolve().parents[1] / "backend" / "assets" / "tiny-qwen-image"
    shutil.copytree(assets, mine / "model")
    cfg = validate({"model_family": "qwen_image", "models_dir": str(mine),
                    "model_paths": json.dumps([str(mine / "model" / "transformer")]),
                    "read_roots": [str(mine)]}, "run config", require_inputs=False)
    dirs = resolve_component_dirs(cfg, ["transformer"])
    assert dirs["transformer"] == mine / "model" / "transformer"
    # A weights file swapped for a link to another user's file: refused before loading.
    (theirs / "w.safetensors").write_bytes(b"theirs")
    (mine / "model" / "transformer" / "extra.safetensors").symlink_to(theirs / "w.safetensors")
    with pytest.raises(readgate.ReadRefused, match=r"transformer folder not found"):
        resolve_component_dirs(cfg, ["transformer"])
    assert resolve_component_dirs(cfg.model_copy(update={"read_roots": None}), ["transformer"])

    # A LoRA file is read as the bytes of the file the gate opened.
    save_file({"a.lora_A.weight": torch.ones(2, 3)}, str(mine / "lora.safetensors"),
              metadata={"rank": "2"})
    save_file({"a.lora_A.weight": torch.zeros(2, 3)}, str(theirs / "lora.safetensors"))
    gate = readgate.gate_of([str(mine)])
    tensors, meta = read_lora(mine / "lora.safetensors", gate)
    assert meta == {"rank": "2"} and tensors["a.lora_A.weight"].sum().item() == 6
    (mine / "link.safetensors").symlink_to(theirs / "lora.safetensors")
    for path in (theirs / "lora.safetensors", mine / "link.safetensors"):
        with pytest.raises(readgate.ReadRefused, match="lora_checkpoint not found"):
            read_lora(path, gate, "lora_checkpoint")
    (mine / "junk.safetensors").write_bytes(b"\xff" * 12)
    with pytest.raises(ValueError, match="not a safetensors file"):
        read_lora(mine / "junk.safetensors", gate)
    # Checkpoints to render: outside the roots, not found; inside, as before.
    from backend.config.errors import ConfigError
    from backend.training.samples import resolve_checkpoints
    assert resolve_checkpoints([mine / "lora.safetensors"], gate=gate) == [mine / "lora.safetensors"]
    with pytest.raises(ConfigError, match="checkpoints: not found"):
        resolve_checkpoints([theirs / "lora.safetensors"], gate=gate)
    # A saved state (a folder) with a link out of the roots.
    state = mine / "state"
    state.mkdir()
    (state / "model.safetensors").write_bytes(b"x")
    assert gate.check_tree(state, "resume_from") == state.resolve()
    (state / "optimizer.bin").symlink_to(theirs / "w.safetensors")
    with pytest.raises(readgate.ReadRefused, match="resume_from not found"):
        gate.check_tree(state, "resume_from")


def test_a_cache_manifest_names_only_files_of_its_folder(tmp_path):
    from backend.core import readgate
    from backend.data.cache import CacheError, check_cache

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
                       "--models-dir", str(models_root), "--quota-upload-mb", "1",
                       "--upload-ttl-hours", str(20 / 3600), "--trusted-proxy", "10.9.9.9")
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



def test_a_run_never_reads_another_users_files_planted_after_its_check(served):
    """The leak: bob starts a run on a folder of his, then (while it waits in the queue)
    rewrites its metadata to name carol's images. The stage opens nothing of carol's, and
    says the same for her existing file and for a path that does not exist. (A folder that
    does not exist yet is refused before the run is accepted.)"""
    ws = served.workspace
    carols = ws / "datasets" / "carol" / "private"
    carols.mkdir(parents=True)
    (carols / "face.png").write_bytes(png_bytes((1, 2, 3), 32))
    later = ws / "datasets" / "bob" / "later"
    bob = client(served, "bob")
    config = {"stages": ["data_process"], "offline": True, "dataset_base_path": str(later),
              "dataset_metadata_path": str(later / "metadata.csv")}
    with pytest.raises(Exception, match="dataset_base_path: folder not found"):
        bob.predict(config=config, preset="cpu_demo", name="probe", hub_token="",
                    api_name="/start_run")
    later.mkdir(parents=True)
    (later / "own.png").write_bytes(png_bytes((4, 5, 6), 32))
    (later / "metadata.csv").write_text("image,prompt\nown.png,my own\n")
    hold = hold_the_queue(served)
    try:
        started = bob.predict(config=config, preset="cpu_demo", name="probe", hub_token="",
                              api_name="/start_run")
        assert started["status"] == "queued"
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
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf:
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
    out = bob_page.call("preset", {"preset": "bobs"}, kind="select")
    assert out["field-lora_rank"] == 24, out

    # Model sources, mirrors and server folders: refused in a non-admin's preset at save...
    for field, value in (("model_id_with_origin_paths", "/etc:passwd"),
                         ("hub_endpoint", "http://127.0.0.1:9")):
        out = bob_page.call("preset-save", {"preset-save-name": "sources",
                                            f"field-{field}": value})
        assert english(out["preset-msg"]).startswith(f"✗ {field}: reserved to admins"), out
    assert not (ws / "presets" / "users" / "bob" / "sources.yaml").exists()
    out = bob_page.call("preset-save", {"preset-save-name": "everyone", "preset-shared": True})
    assert "only admins share presets" in out["preset-msg"], out
    # ... and at load (a file changed there by other means).
    bob_page.call("preset-save", {"preset-save-name": "planted"})
    (ws / "presets" / "users" / "bob" / "planted.yaml").write_text(
        "hub_endpoint: http://127.0.0.1:9\nmodels_dir: /\n")
    with pytest.raises(Exception, match="hub_endpoint: reserved to admins"):
        bob.predict(config={}, preset="planted", name="", hub_token="", api_name="/start_run")
    out = bob_page.call("preset", {"preset": "planted"}, kind="select")
    assert "models_dir: reserved to admins" in out["preset-msg"], out
    # An admin shares one by choice; every user then sees it.
    alice_page = Page(served, "alice")
    out = alice_page.call("preset-save", {"preset-save-name": "team", "preset-shared": True,
                                          "field-hub_endpoint": "http://127.0.0.1:9"})
    assert "Saved preset" in out["preset-msg"], out
    assert (ws / "presets" / "team.yaml").is_file()
    assert "team" in carol.predict(api_name="/list_presets")


# ------------------------------------------------------------------------ writes
def alices_files(ws: Path) -> Path:
    """Alice's dataset with a caption and a metadata file: what bob's links point at."""
    al = ws / "datasets" / "alice" / "al"
    if not al.exists():
        al.mkdir(parents=True)
        (al / "al0.png").write_bytes(png_bytes((7, 7, 7)))
        (al / "al0.txt").write_text("alice's caption\n")
        (al / "metadata.csv").write_text("image,prompt\nal0.png,alice's prompt\n")
    return al


def files_of(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir()) if p.is_file()}


FLIP = """
import os, sys
link, target, spin = sys.argv[1], sys.argv[2], int(sys.argv[3])
while True:
    for present in (True, False):
        try:
            os.unlink(link)
        except OSError:
            pass
        try:
            if present:
                os.symlink(target, link)
        except OSError:
            pass
        for _ in range(spin):
            pass
"""


@contextlib.contextmanager
def flipping(path: Path, target: Path, spin: int = 100):
    """Another process flips ``path`` between absent (a file there removed) and a link to
    ``target`` as fast as it can, until the block ends (the race a user with a shell
    runs: ``while true; do rm -f x; ln -s theirs x; rm -f x; done``)."""
    import subprocess

    proc = subprocess.Popen([sys.executable, "-c", FLIP, str(path), str(target), str(spin)])
    try:
        yield proc
    finally:
        proc.kill()
        proc.wait()
        if path.is_symlink():
            path.unlink()


def test_a_caption_job_never_writes_through_a_link_planted_after_submission(served,
                                                                            tiny_model_dir):
    """Bob captions two folders of his (.txt and metadata targets); while the jobs wait in
    the queue he plants the names the writers once used for their temp files as links to
    alice's caption and metadata. Both jobs succeed writing bob's captions; alice's files
    are unchanged."""
    ws = served.workspace
    al = alices_files(ws)
    before = files_of(al)
    bob = client(served, "bob")
    txt, meta = ws / "datasets" / "bob" / "cap-txt", ws / "datasets" / "bob" / "cap-meta"
    for folder in (txt, meta):
        folder.mkdir(parents=True)
        (folder / "c0.png").write_bytes(png_bytes((3, 4, 5), 32))
    (meta / "metadata.csv").write_text("image,prompt\nc0.png,old prompt\n")
    config = {"model_id_with_origin_paths": str(tiny_model_dir), "offline": True,
              "caption_max_length": 4, "caption_batch_size": 1}
    hold = hold_the_queue(served)
    try:
        jobs = [bob.predict(config={**config, "dataset_base_path": str(txt)}, preset="",
                            hub_token="", api_name="/start_caption"),
                bob.predict(config={**config, "dataset_base_path": str(meta),
                                    "dataset_metadata_path": str(meta / "metadata.csv"),
                                    "caption_target": "metadata", "caption_overwrite": True},
                            preset="", hub_token="", api_name="/start_caption")]
        assert [j["status"] for j in jobs] == ["queued", "queued"]
        (txt / ".c0.txt.tmp").symlink_to(al / "al0.txt")
        (meta / ".metadata.csv.tmp").symlink_to(al / "metadata.csv")
        (meta / "metadata.csv.tmp").symlink_to(al / "metadata.csv")
    finally:
        served.runner.stop(hold, wait=True)
    for job in jobs:
        assert wait_done(bob, job["run_id"])["status"] == "succeeded", job
    assert files_of(al) == before
    assert (txt / "c0.txt").is_file() and not (txt / "c0.txt").is_symlink()
    assert "old prompt" not in (meta / "metadata.csv").read_text()
    run_yaml = (ws / "runs" / jobs[0]["run_id"] / "run.yaml").read_text()
    assert "write_roots:" in run_yaml and str(ws / "datasets" / "bob") in run_yaml


def test_the_bundled_demo_and_other_users_folders_are_read_only_to_non_admins(served):
    """A non-admin's caption job may read the demo dataset but not write it: refused before
    anything is queued, naming the field; the demo's files are unchanged."""
    from backend.config.paths import REPO_ROOT

    ws = served.workspace
    demo = REPO_ROOT / "backend" / "assets" / "demo_dataset"
    before = files_of(demo)
    bob = client(served, "bob")
    runs_before = len(bob.predict(api_name="/list_runs"))
    for base, meta in ((demo, demo / "metadata.csv"), (alices_files(ws), None)):
        config = {"dataset_base_path": str(base), "caption_overwrite": True, "offline": True}
        if meta:
            config.update(dataset_metadata_path=str(meta), caption_target="metadata")
        with pytest.raises(Exception, match="dataset_base_path: outside your dataset folders"):
            bob.predict(config=config, preset="", hub_token="", api_name="/start_caption")
    with pytest.raises(Exception, match="write_roots: set by the server"):
        bob.predict(config={"dataset_base_path": str(ws / "datasets" / "bob"),
                            "write_roots": ["/"]}, preset="", hub_token="",
                    api_name="/start_caption")
    assert len(bob.predict(api_name="/list_runs")) == runs_before
    assert files_of(demo) == before


def test_save_captions_never_writes_through_a_link_flipped_in_a_loop(served):
    """The Dataset tab's Save captions on bob's folder while a loop flips his caption's
    name between absent and a link to alice's caption: alice's file never changes."""
    ws = served.workspace
    al = alices_files(ws)
    before = files_of(al)
    mine = ws / "datasets" / "bob" / "race"
    mine.mkdir(parents=True)
    (mine / "al0.png").write_bytes(png_bytes((1, 1, 1), 32))
    page = Page(served, "bob")
    table = {"headers": ["image", "caption"], "data": [["al0.png", "bob's words"]],
             "metadata": None}
    values = {"field-dataset_base_path": str(mine), "field-dataset_metadata_path": "",
              "captions": table}
    saved = 0
    with flipping(mine / "al0.txt", al / "al0.txt"):
        for _ in range(40):
            out = page.call("captions-save", values)
            saved += "Saved 1 caption" in out["data-msg"]
            assert "Saved" in out["data-msg"] or "link" in out["data-msg"], out
    assert files_of(al) == before
    assert saved > 0


def test_uploads_and_presets_never_write_through_a_swapped_folder(served):
    """An upload into a dataset folder name flipped between absent and a link to alice's
    folder, and a preset saved while bob's preset folder is a link to carol's: nothing of
    alice's or carol's changes."""
    ws = served.workspace
    al = alices_files(ws)
    before = files_of(al)
    page = Page(served, "bob")
    good = zip_bytes({"al0.png": png_bytes(), "al0.txt": b"bob's zip caption\n"})
    name = ws / "datasets" / "bob" / "swap"
    with flipping(name, al):
        for _ in range(10):
            page.call("upload-btn", {"upload-files": [page.upload("s.zip", good)],
                                     "upload-name": "swap"})
            if name.is_dir() and not name.is_symlink():
                shutil.rmtree(name, ignore_errors=True)
    assert files_of(al) == before
    # Bob's preset folder replaced by a link to carol's: the save is refused.
    carols = ws / "presets" / "users" / "carol"
    carols.mkdir(parents=True, exist_ok=True)
    (carols / "hers.yaml").write_text("lora_rank: 8\n")
    carols_before = files_of(carols)
    bobs = ws / "presets" / "users" / "bob"
    if bobs.exists():
        shutil.rmtree(bobs)
    bobs.symlink_to(carols)
    try:
        out = page.call("preset-save", {"preset-save-name": "hers", "field-lora_rank": 64})
        assert out["preset-msg"].startswith("✗"), out
    finally:
        bobs.unlink()
    assert files_of(carols) == carols_before


# ------------------------------------------------------------------------ partial exposures
def tiny_run(server: AppServer, owner: str) -> str:
    run_dir = server.workspace / "runs" / f"{owner}-{secrets.token_hex(4)}"
    code = ("import pathlib, sys; out = pathlib.Path(sys.argv[1]) / 'output'; "
            "out.mkdir(parents=True, exist_ok=True); "
            "(out / 'notes.txt').write_text('notes of ' + sys.argv[2])")
    rid = server.runner.submit_stages(
        [StagePlan("train", [sys.executable, "-c", code, str(run_dir), owner], {})], run_dir,
        "stages: [train]\n", owner=owner, name=owner)
    assert server.runner.wait(rid, timeout=120)["status"] == "succeeded"
    return rid


def test_logs_and_progress_are_read_through_the_registry_check(served):
    bob = client(served, "bob")
    carol_rid = tiny_run(served, "carol")
    carol_dir = Path(served.runner.get_run(carol_rid)["run_dir"])
    carol_log = carol_dir / "logs" / "train.log"
    rid = tiny_run(served, "bob")
    run_dir = Path(served.runner.get_run(rid)["run_dir"])
    assert bob.predict(run_id=rid, stage="train", offset=0, api_name="/run_log")["offset"] >= 0
    # A log that is a link out of the run folder is not read, nor is the run shown.
    (run_dir / "logs" / "peek.log").symlink_to(carol_log)
    for api, args in (("/run_log", {"stage": "peek", "offset": 0}), ("/run_progress", {}),
                      ("/run_status", {})):
        with pytest.raises(Exception, match="link out of its folder"):
            bob.predict(run_id=rid, api_name=api, **args)
    (run_dir / "logs" / "peek.log").unlink()
    (run_dir / "progress.jsonl").unlink(missing_ok=True)
    (run_dir / "progress.jsonl").symlink_to(carol_dir / "progress.jsonl")
    with pytest.raises(Exception, match="link out of its folder"):
        bob.predict(run_id=rid, api_name="/run_progress")
    (run_dir / "progress.jsonl").unlink()
    with pytest.raises(Exception, match="not a stage name"):
        bob.predict(run_id=rid, stage="../../../zerolora", offset=0, api_name="/run_log")
    # A run folder that is itself a link.
    moved = served.workspace.parent / f"moved-{rid}"
    run_dir.rename(moved)
    run_dir.symlink_to(carol_dir, target_is_directory=True)
    with pytest.raises(Exception, match="link"):
        bob.predict(run_id=rid, stage="train", offset=0, api_name="/run_log")


def test_downloads_and_uploads_belong_to_whoever_got_them_and_expire(served):
    rid = tiny_run(served, "bob")
    bob = Client(served.url, auth=("bob", USERS["bob"]), analytics_enabled=False,
                 verbose=False, download_files=False)
    got = bob.predict(run_id=rid, path="output/notes.txt", api_name="/fetch_output")
    url = got["url"]
    assert "/served/bob/" in url
    bob_http, carol_http = served.login("bob", USERS["bob"]), served.login("carol",
                                                                            USERS["carol"])
    assert bob_http.get(url).text == "notes of bob"
    assert carol_http.get(url).status_code == 404
    # On time: an hour after it was handed out the link is dead, swept or not.
    folder = Path(got["path"]).parent
    old = time.time() - 3601
    os.utime(folder, (old, old))
    assert bob_http.get(url).status_code == 404
    # A raw upload is its uploader's, and leaves the server after the upload time (20 s).
    r = bob_http.post("/gradio_api/upload", files=[("files", ("mine.txt", b"bob's upload"))])
    path = r.json()[0]
    assert bob_http.get(f"/gradio_api/file={path}").text == "bob's upload"
    assert carol_http.get(f"/gradio_api/file={path}").status_code == 404
    deadline = time.monotonic() + 90  # a safety limit, not a timing assertion
    while Path(path).exists() and time.monotonic() < deadline:
        time.sleep(1)
    assert not Path(path).exists() and not folder.exists()
    # An upload larger than the quota (1 MiB here) is refused, and leaves nothing.
    r = bob_http.post("/gradio_api/upload", files=[("files", ("big.txt", b"x" * (2 << 20)))])
    assert r.status_code in (400, 413), r.status_code
    page = Page(served, "bob")
    bomb = zip_bytes({"a.png": png_bytes(), "b.png": b"\0" * (3 << 20)})
    assert len(bomb) < (1 << 20)
    out = page.call("upload-btn", {"upload-files": [page.upload("bomb.zip", bomb)],
                                   "upload-name": "bomb"})
    assert "too large unpacked" in out["data-msg"], out
    assert not (served.workspace / "datasets" / "bob" / "bomb").exists()


def test_a_session_is_its_users_and_pages_refuse_framing(served):
    bob, carol = Page(served, "bob"), Page(served, "carol")
    out = bob.call("preset", {"preset": "cpu_demo"}, kind="select")
    assert '<span class="zl-en">Loaded preset **cpu_demo**.</span>' in out["preset-msg"]
    # Carol cannot read or join bob's queue session by its hash.
    r = carol.http.get(f"/gradio_api/queue/data?session_hash={bob.session}")
    assert r.status_code == 403
    dep = carol.event("preset", "select")
    r = carol.http.post("/gradio_api/queue/join", json={
        "data": ["cpu_demo"], "fn_index": dep["id"], "session_hash": bob.session})
    assert r.status_code == 403
    for http in (bob.http, httpx.Client(base_url=served.url, trust_env=False)):
        headers = http.get("/").headers
        assert headers["x-frame-options"] == "DENY"
        assert "frame-ancestors 'none'" in headers["content-security-policy"]


def test_the_login_form_refuses_cross_site_posts(served):
    anon = httpx.Client(base_url=served.url, timeout=30, trust_env=False)
    form = {"username": "bob", "password": USERS["bob"]}
    for headers in ({"Origin": "http://evil.example"}, {"Origin": "null"},
                    {"Sec-Fetch-Site": "cross-site"},
                    {"Referer": "http://evil.example/page"}):
        r = anon.post("/login", data=form, headers=headers)
        assert r.status_code == 403 and "access-token" not in str(r.cookies), headers
    r = anon.post("/login", data=form, headers={"Origin": served.url})
    assert r.status_code == 200


def test_a_non_admin_sees_no_server_paths_in_refusals(served):
    from backend.config.paths import REPO_ROOT

    bob = client(served, "bob")
    with pytest.raises(Exception) as e:
        bob.predict(config={"dataset_base_path": "/etc", "models_dir": "/",
                            "model_id_with_origin_paths": "/etc:passwd"}, preset="",
                    name="", hub_token="", api_name="/start_run")
    text = str(e.value)
    assert "dataset_base_path: outside your dataset folders" in text
    assert str(REPO_ROOT) not in text and str(served.workspace / "runs") not in text


def test_a_malformed_call_prints_no_token_to_the_server_log(served):
    token = "hf_" + "Q" * 30
    http = served.login("bob", USERS["bob"])
    for data in ([{"hub_token": token}, token], ["", "", token], [token],
                 [{"not": "valid"}, 5, None, token, "extra"], {"config": token}):
        http.post("/gradio_api/call/start_run", json={"data": data})
        http.post("/gradio_api/run/start_run", json={"data": data})
    time.sleep(1)
    assert token not in served.log()


def test_forwarded_addresses_count_only_from_the_trusted_proxy(served):
    """Last in this module: it locks the test's own address for five minutes."""
    anon = httpx.Client(base_url=served.url, timeout=30, trust_env=False)
    for i in range(20):
        r = anon.post("/login", data={"username": f"nobody{i}", "password": "x"},
                      headers={"X-Forwarded-For": f"203.0.113.{i}"})
        assert r.status_code == 400, r.text
    r = anon.post("/login", data={"username": "bob", "password": USERS["bob"]},
                  headers={"X-Forwarded-For": "198.51.100.7"})
    assert r.status_code == 429 and "your address" in r.json()["detail"]
