"""The models folder (backend/models/inventory.py): complete or missing per family on
pre-filled folders, sizes, delete only inside the folder and never through a link, verify
against the hub's records, and a download from a local stand-in of the Hugging Face Hub
(``tests/harness/hub_server.py``: no hub is reachable from the test machines) whose
progress record moves, survives a new reader, resumes after an interrupted download, and
stops mid-file on request keeping the unfinished file for the next download to continue.

The folders here hold placeholder bytes under the names the families read (the inventory
reads names, sizes and hashes, never weights); the browser test of the Models tab
(tests/test_models_tab.py) lists a real tiny model.
"""
from __future__ import annotations

import hashlib
import json
import os
import time

import pytest

from backend.core.messages import Msg
from backend.models import inventory as inv
from backend.models.inventory import Downloads, InventoryError
from tests.harness.hub_server import HubServer

QWEN = "family:qwen_image:qwen_image"


def fill(root, model_id: str, pattern: str, size: int = 1000) -> dict[str, int]:
    """Files that satisfy one ``glob`` of a model folder: a weight file with the
    ``config.json`` beside it, or a tokenizer / scheduler folder; {relative path: bytes}."""
    folder = root / model_id
    if pattern.endswith("/"):
        name = "scheduler_config.json" if "scheduler" in pattern else "tokenizer_config.json"
        files = {pattern + name: b'{"x": 1}'}
    else:
        files = {pattern.replace("*", "-00001-of-00001"): os.urandom(size),
                 os.path.dirname(pattern) + "/config.json": b'{"_class_name": "X"}'}
    for rel, data in files.items():
        (folder / rel).parent.mkdir(parents=True, exist_ok=True)
        (folder / rel).write_bytes(data)
    return {rel: len(data) for rel, data in files.items()}


def fill_target(root, key: str, size: int = 1000) -> dict[str, dict[str, int]]:
    """Every source of a family target, on disk; {model id: {file: bytes}}."""
    out: dict[str, dict[str, int]] = {}
    for src in inv.config_sources(inv.target_config(key)):
        out.setdefault(src.model_id, {}).update(fill(root, src.model_id, src.pattern, size))
    return out


# ------------------------------------------------------------------------------------------
# complete or missing, per family
# ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("key", [t.key for t in inv.family_targets()])
def test_each_family_target_is_complete_then_names_what_is_missing(tmp_path, key):
    root = tmp_path / "models"
    written = fill_target(root, key)
    cfg = inv.target_config(key)
    assert all(done for _, done in inv.source_states(root, cfg)), key
    title = next(t.title for t in inv.family_targets() if t.key == key)
    entries = {e.model_id: e for e in inv.list_models(root)}
    assert set(entries) == set(written)
    for model_id, files in written.items():
        e = entries[model_id]
        assert e.size == sum(files.values()) and dict(e.files) == files
        # what this target reads from the folder is there (other variants may read more)
        assert not [n for n in e.missing if title in n.users], (key, e.missing)
    # take the trained component's weights away: the target and the table say so
    src = next(s for s in inv.config_sources(cfg) if s.pattern.startswith("transformer"))
    weights = next(f for f in written[src.model_id] if f.startswith(src.pattern.split("/")[0])
                   and f.endswith(".safetensors"))
    (root / src.model_id / weights).unlink()
    states = dict((s.spec, done) for s, done in inv.source_states(root, cfg))
    assert states[src.spec] is False and sum(not d for d in states.values()) == 1
    e = inv.model_entry(root, src.model_id)
    assert e.status == "missing"
    assert any(n.pattern == src.pattern and title in n.users for n in e.missing)


def test_a_folder_no_family_reads_is_listed_as_other_with_its_size(tmp_path):
    root = tmp_path / "models"
    (root / "someone/their-model/sub").mkdir(parents=True)
    (root / "someone/their-model/sub/w.bin").write_bytes(b"x" * 1234)
    (root / "someone/their-model/.cache").mkdir()
    (root / "someone/their-model/.cache/rec").write_bytes(b"y" * 10)
    [e] = inv.list_models(root)
    assert (e.model_id, e.status, e.source) == ("someone/their-model", "other", "local")
    assert e.files == [("sub/w.bin", 1234)] and e.size == 1244
    assert inv.list_models(tmp_path / "nothing-here") == []


def test_the_source_follows_the_hub_clients_records(tmp_path):
    root = tmp_path / "models"
    for mid, marker in (("a/hf", ".cache/huggingface/download/x.metadata"), ("a/ms", ".msc"),
                        ("a/plain", "config.json")):
        (root / mid / marker).parent.mkdir(parents=True, exist_ok=True)
        (root / mid / marker).write_text("x")
    assert {e.model_id: e.source for e in inv.list_models(root)} == {
        "a/hf": "huggingface", "a/ms": "modelscope", "a/plain": "local"}


# ------------------------------------------------------------------------------------------
# delete
# ------------------------------------------------------------------------------------------
def test_delete_removes_the_folder_and_refuses_anything_else(tmp_path):
    root = tmp_path / "models"
    files = fill(root, "org/keep", "transformer/diffusion_pytorch_model*.safetensors")
    fill(root, "org/gone", "vae/diffusion_pytorch_model.safetensors", size=5000)
    outside = tmp_path / "outside"
    (outside / "victim").mkdir(parents=True)
    (outside / "victim" / "precious.bin").write_bytes(b"p")
    (root / "org" / "linked").symlink_to(outside / "victim")
    (root / "linkorg").symlink_to(outside)
    refused = {"../outside/victim": "models.bad_id", "/etc": "models.bad_id",
               "org/..": "models.bad_id", "org/linked": "models.is_link",
               "linkorg/victim": "models.is_link", "org/none": "models.not_found",
               "": "models.bad_id", "org/keep/transformer": "models.bad_id"}
    for model_id, code in refused.items():
        with pytest.raises(InventoryError) as e:
            inv.delete_model(root, model_id)
        assert e.value.message.code == code, model_id
    assert (outside / "victim" / "precious.bin").read_bytes() == b"p"
    with pytest.raises(InventoryError) as e:
        inv.delete_model(root, "org/gone", busy={"org/gone"})
    assert e.value.message.code == "models.busy"
    assert inv.delete_model(root, "org/gone") == 5000 + len(b'{"_class_name": "X"}')
    assert not (root / "org/gone").exists() and (root / "org/keep").is_dir()
    assert dict(inv.model_entry(root, "org/keep").files) == files
    # a link inside a model folder is removed as a link: what it points at stays
    (root / "org/keep/peek").symlink_to(outside)
    inv.delete_model(root, "org/keep")
    assert (outside / "victim" / "precious.bin").exists() and not (root / "org/keep").exists()
    # the owner folder went with its last model; the link to outside was never followed
    assert (root / "org").exists()  # still holds the link "linked"


# ------------------------------------------------------------------------------------------
# verify
# ------------------------------------------------------------------------------------------
def _hf_records(folder, files: dict[str, bytes], commit: str = "c" * 40) -> None:
    """What huggingface_hub writes beside a local_dir download (metadata and tree)."""
    tree = {}
    for rel, data in files.items():
        blob = hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()
        lfs = rel.endswith(".safetensors")
        etag = hashlib.sha256(data).hexdigest() if lfs else blob
        meta = folder / ".cache/huggingface/download" / (rel + ".metadata")
        meta.parent.mkdir(parents=True, exist_ok=True)
        meta.write_text(f"{commit}\n{etag}\n{time.time()}\n")
        tree[rel] = {"size": len(data), "blob_id": blob,
                     **({"lfs_sha256": etag, "lfs_size": len(data)} if lfs else {})}
    path = folder / ".cache/huggingface/trees" / f"{commit}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"format_version": 1, "files": tree}))


def test_verify_catches_a_changed_a_truncated_and_a_missing_file(tmp_path):
    root = tmp_path / "models"
    fill(root, "org/m", "transformer/diffusion_pytorch_model*.safetensors")
    fill(root, "org/m", "tokenizer/")
    folder = root / "org/m"
    files = {p.relative_to(folder).as_posix(): p.read_bytes()
             for p in folder.rglob("*") if p.is_file()}
    assert inv.verify_model(root, "org/m").summary().code == "models.verify_none"
    _hf_records(folder, files)
    ok = inv.verify_model(root, "org/m")
    assert ok.ok and ok.checked == 3 and ok.summary().code == "models.verify_ok"
    weights = "transformer/diffusion_pytorch_model-00001-of-00001.safetensors"
    data = bytearray((folder / weights).read_bytes())
    data[10] ^= 0xFF  # same size, one byte changed
    (folder / weights).write_bytes(bytes(data))
    (folder / "tokenizer/tokenizer_config.json").write_bytes(b"{")
    (folder / "transformer/config.json").unlink()
    bad = inv.verify_model(root, "org/m")
    codes = {p.params["file"]: p.code for p in bad.problems}
    assert codes == {weights: "models.verify_hash", "tokenizer/tokenizer_config.json":
                     "models.verify_size", "transformer/config.json": "models.verify_missing"}
    assert bad.summary().code == "models.verify_bad" and not bad.ok
    assert all(isinstance(p, Msg) and p.text("zh") != str(p) for p in bad.problems)


# ------------------------------------------------------------------------------------------
# download from the local hub
# ------------------------------------------------------------------------------------------
@pytest.fixture()
def online(monkeypatch):
    """huggingface_hub online (the suite may run with HF_HUB_OFFLINE=1), reading bodies in
    4 KiB chunks (10 MiB on real models): a file of 40 KB cut mid-way has chunks on disk."""
    import huggingface_hub.constants as constants

    for name in ("HF_HUB_OFFLINE", "ZEROLORA_OFFLINE", "HF_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(constants, "DOWNLOAD_CHUNK_SIZE", 4096)


def _watch(downloads: Downloads, download_id: str, until) -> list[dict]:
    """Every distinct record a polling page would see until ``until()`` (max 60 s)."""
    seen: list[dict] = []
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        rec = Downloads(downloads.dir).record(download_id)  # a new reader each time
        if rec and (not seen or rec != seen[-1]):
            seen.append(rec)
        if rec and rec["status"] != "running" and until():
            break
        time.sleep(0.1)
    return seen


def test_download_moves_its_progress_then_resumes_after_an_interruption(tmp_path, online):
    """A download from the local Hub: the progress record moves (bytes done grow to the
    total the Hub lists); the first attempt is interrupted by a refused file, the second
    resumes: finished files are not fetched again, a connection cut mid-file continues with
    a range request; verify then agrees with the Hub, and catches a changed byte."""
    published = tmp_path / "published"
    fill_target(published, QWEN, size=40_000)
    with HubServer("hf_token_unused", "alice") as hub:
        hub.add_model("Qwen/Qwen-Image", published / "Qwen/Qwen-Image")
        hub.rate = 40_000  # bytes/s: a few seconds in all, so the record is seen moving
        te = "text_encoder/model-00001-of-00001.safetensors"
        vae = "vae/diffusion_pytorch_model.safetensors"
        hub.fail_files[te] = 500
        hub.cut[vae] = 20_000  # after a few chunks the client has written
        root = tmp_path / "models"
        cfg = inv.target_config(QWEN).model_copy(update={
            "download_source": "huggingface", "hub_endpoint": hub.url})
        downloads = Downloads(tmp_path / "ws" / "model_downloads")

        first = downloads.start(cfg, root, QWEN, "Qwen-Image")
        seen = _watch(downloads, first["id"], lambda: True)
        end = seen[-1]
        assert end["status"] == "failed", end
        assert Msg.from_json(end["message"]).code == "models.dl_failed"
        done = [r["bytes_done"] for r in seen]
        assert done == sorted(done) and len(set(done)) >= 3, done
        assert 0 < end["bytes_done"] < end["bytes_total"]
        # every file the family reads from the repository (here: all of them)
        assert end["bytes_total"] == sum(len(d) for d in hub.models["Qwen/Qwen-Image"].values())
        fetched_first = {p for p, _ in hub.downloads}
        assert inv.model_entry(root, "Qwen/Qwen-Image").status == "missing"

        del hub.fail_files[te]
        n_first = len(hub.downloads)
        second = downloads.start(cfg, root, QWEN, "Qwen-Image", wait=True)
        rec = Downloads(downloads.dir).latest()
        assert rec["id"] == second["id"] and rec["status"] == "succeeded", rec
        assert rec["bytes_done"] == rec["bytes_total"] > 0
        again = [p for p, _ in hub.downloads[n_first:]]
        assert not set(again) & (fetched_first - {te}), again  # finished files stay
        # the cut file resumed from the bytes it had, with a range request (once)
        starts = [int(r[len("bytes="):-1]) for p, r in hub.downloads if p == vae and r]
        assert len(starts) == 1 and 0 < starts[0] <= 20_000, hub.downloads
    for rel, data in hub.models["Qwen/Qwen-Image"].items():
        assert (root / "Qwen/Qwen-Image" / rel).read_bytes() == data, rel
    e = inv.model_entry(root, "Qwen/Qwen-Image")
    assert e.source == "huggingface" and e.partial == 0
    assert not [n for n in e.missing if "Qwen-Image" in n.users]
    ok = inv.verify_model(root, "Qwen/Qwen-Image")
    assert ok.ok and ok.checked >= 4, ok.problems
    p = root / "Qwen/Qwen-Image" / vae
    p.write_bytes(p.read_bytes()[:-1] + b"\0")
    assert [m.code for m in inv.verify_model(root, "Qwen/Qwen-Image").problems] == [
        "models.verify_hash"]
    # nothing left to fetch: done at once, nothing sent
    assert downloads.start(cfg, root, QWEN, "Qwen-Image")["status"] == "succeeded"


def test_stop_keeps_the_partial_file_and_download_resumes_it(tmp_path, online):
    """Stop lands mid-file (the local Hub sends slowly): the record says stopped, finished
    files and the unfinished one stay (its bytes are the file's first bytes), only the
    starter or an admin may stop; Download again continues that file with a range request
    from the bytes it had and ends with the Hub's bytes."""
    published = tmp_path / "published"
    fill_target(published, QWEN, size=30_000)
    with HubServer("hf_token_unused", "alice") as hub:
        files = hub.add_model("Qwen/Qwen-Image", published / "Qwen/Qwen-Image")
        hub.rate = 60_000  # bytes/s: each weight file takes half a second
        root = tmp_path / "models"
        folder = root / "Qwen/Qwen-Image"
        cfg = inv.target_config(QWEN).model_copy(update={
            "download_source": "huggingface", "hub_endpoint": hub.url})
        downloads = Downloads(tmp_path / "ws" / "model_downloads")
        first = downloads.start(cfg, root, QWEN, "Qwen-Image", owner="bob")

        def partial() -> list:
            return [p for p in folder.rglob(f"*{inv.PARTIAL_SUFFIX}") if p.stat().st_size]

        deadline = time.monotonic() + 30
        while not partial() and time.monotonic() < deadline:
            time.sleep(0.02)
        assert partial(), "no file was half-way"
        with pytest.raises(InventoryError) as e:
            downloads.stop(first["id"], user="carol", admin=False)
        assert e.value.message.code == "models.dl_stop_not_yours"
        downloads.stop("", user="bob", admin=False)  # empty id: the latest
        end = _watch(downloads, first["id"], lambda: True)[-1]
        assert end["status"] == "stopped", end
        assert Msg.from_json(end["message"]).code == "models.dl_stopped"
        [kept] = partial()
        # {file}.{etag}.incomplete beside huggingface_hub's records of the folder
        rel = kept.relative_to(folder / ".cache/huggingface/download").as_posix().rsplit(".", 2)[0]
        have = kept.read_bytes()
        assert 0 < len(have) < len(files[rel]) and files[rel].startswith(have), rel
        assert not (folder / rel).exists()
        finished = {r for r in files if (folder / r).is_file()}
        assert all((folder / r).read_bytes() == files[r] for r in finished)
        with pytest.raises(InventoryError) as e:  # nothing runs now
            downloads.stop(first["id"], user="bob", admin=False)
        assert e.value.message.code == "models.dl_not_running"

        hub.rate = 0
        n_first = len(hub.downloads)
        second = downloads.start(cfg, root, QWEN, "Qwen-Image", owner="bob", wait=True)
        assert Downloads(downloads.dir).record(second["id"])["status"] == "succeeded"
        again = hub.downloads[n_first:]
        assert (rel, f"bytes={len(have)}-") in again, again  # continued from its bytes
        assert not {p for p, _ in again} & finished, again  # finished files stay
    assert not partial()
    for r, data in files.items():
        assert (folder / r).read_bytes() == data, r
    assert inv.verify_model(root, "Qwen/Qwen-Image").ok


def test_a_record_left_running_by_a_stopped_server_reads_as_interrupted(tmp_path):
    downloads = Downloads(tmp_path / "model_downloads")
    downloads.dir.mkdir()
    rec = {"id": "20260101-120000-abcdef", "status": "running", "title": "Qwen-Image",
           "updated_at": time.time() - 3600, "bytes_done": 5, "bytes_total": 10}
    (downloads.dir / f"{rec['id']}.json").write_text(json.dumps(rec))
    assert downloads.latest()["status"] == "interrupted"
    with pytest.raises(InventoryError):
        downloads.record("../../etc/passwd")


def test_offline_and_unknown_targets_are_refused(tmp_path, monkeypatch):
    cfg = inv.target_config(QWEN).model_copy(update={"download_source": "huggingface"})
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(InventoryError) as e:
        Downloads(tmp_path).start(cfg, tmp_path / "models", QWEN, "Qwen-Image")
    assert e.value.message.code == "models.dl_offline" and "HF_HUB_OFFLINE" in str(e.value)
    with pytest.raises(InventoryError) as e:
        inv.target_config("family:nonsense")
    assert e.value.message.code == "models.dl_unknown_target"
    assert not (tmp_path / "models").exists()
