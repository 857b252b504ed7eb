"""Hosting safety: ownership, files handed out, uploads unpacked, tokens, and a running app.

The helpers are tested on real files, a real job registry (SQLite + supervisor processes)
and real zip files; the served app is ``launch.py`` started as a subprocess with sign-in,
probed over HTTP (httpx) like an outsider would.
"""
from __future__ import annotations

import copy
import json
import os
import re
import stat
import struct
import sys
import zipfile
from pathlib import Path

import httpx
import pytest

from backend.planning.plan import StagePlan
from backend.jobs.runner import Runner
from tests.harness.browser import USERS
from webui import security
from webui.security import AccessDenied, UnsafeArchiveError, registry_file, safe_extract_zip

pytestmark = pytest.mark.timeout(300)


# ---------------------------------------------------------------------------- uploads
def make_zip(path: Path, entries: list[tuple], compression=zipfile.ZIP_DEFLATED) -> Path:
    """entries: (name, bytes) or (name, bytes, unix_mode) -- mode S_IFLNK makes a link."""
    with zipfile.ZipFile(path, "w", compression) as zf:
        for entry in entries:
            name, data = entry[0], entry[1]
            info = zipfile.ZipInfo(name)
            info.compress_type = compression
            if len(entry) > 2:
                info.external_attr = entry[2] << 16
            zf.writestr(info, data)
    return path


def tree(folder: Path) -> list[str]:
    return sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*"))


@pytest.mark.parametrize("evil", ["../escaped.txt", "a/../../escaped.txt", "/tmp/escaped.txt",
                                  "..\\escaped.txt", "C:/escaped.txt"])
def test_zip_entries_cannot_write_outside_the_target(tmp_path, evil):
    dest = tmp_path / "box" / "dest"
    z = make_zip(tmp_path / "evil.zip", [("ok.txt", b"fine"), (evil, b"pwned")])
    with pytest.raises(UnsafeArchiveError, match="unsafe entry") as e:
        safe_extract_zip(z, dest)
    assert repr(evil) in str(e.value)
    # Nothing at all was written: not the escape, not even the harmless entry before it.
    assert tree(tmp_path / "box") == ["dest"]
    assert not (tmp_path / "escaped.txt").exists() and not Path("/tmp/escaped.txt").exists()


def test_zip_links_are_refused(tmp_path):
    dest = tmp_path / "dest"
    z = make_zip(tmp_path / "link.zip", [("a.png", b"\x89PNG"),
                                         ("passwd.txt", b"/etc/passwd", stat.S_IFLNK | 0o777)])
    with pytest.raises(UnsafeArchiveError, match="link"):
        safe_extract_zip(z, dest)
    assert tree(dest) == []


def test_zip_bomb_is_stopped_on_the_bytes_actually_unpacked(tmp_path):
    dest = tmp_path / "dest"
    # 64 MiB of zeros compress to ~64 KiB; the limit is 1 MiB.
    z = make_zip(tmp_path / "bomb.zip", [("a.txt", b"caption"),
                                         ("zeros.txt", b"\0" * (64 << 20))])
    assert z.stat().st_size < 200_000
    with pytest.raises(UnsafeArchiveError, match="too large"):
        safe_extract_zip(z, dest, max_total_bytes=1 << 20)
    assert tree(dest) == []

    # A zip whose headers claim a tiny size for a large member: the declared sizes pass the
    # check, the decompressed bytes do not get through.
    liar = tmp_path / "liar.zip"
    data = bytearray(make_zip(tmp_path / "honest.zip", [("big.txt", b"x" * (4 << 20))]
                              ).read_bytes())
    for sig, off in ((b"PK\x03\x04", 22), (b"PK\x01\x02", 24)):
        at = data.find(sig)
        struct.pack_into("<I", data, at + off, 100)  # uncompressed size field
    liar.write_bytes(bytes(data))
    assert zipfile.ZipFile(liar).infolist()[0].file_size == 100
    with pytest.raises(UnsafeArchiveError):
        safe_extract_zip(liar, dest, max_total_bytes=1 << 20)
    assert tree(dest) == []
    # The file count is limited too.
    many = make_zip(tmp_path / "many.zip", [(f"{i}.txt", b"c") for i in range(30)])
    with pytest.raises(UnsafeArchiveError, match="too many files"):
        safe_extract_zip(many, dest, max_files=20)
    assert tree(dest) == []


def test_zip_keeps_images_and_captions_only_and_never_follows_a_planted_link(tmp_path):
    dest = tmp_path / "dest"
    z = make_zip(tmp_path / "data.zip", [
        ("set/a.png", b"\x89PNG-a"), ("set/a.txt", b"a caption"), ("set/meta.csv", b"x,y"),
        ("set/b.JPG", b"jpg"), ("set/m.jsonl", b"{}"), ("set/run.py", b"import os"),
        ("set/tool.exe", b"MZ"), ("__MACOSX/set/._a.png", b"junk"), ("set/.hidden.txt", b"h"),
        ("set/sub/", b"")])
    out = safe_extract_zip(z, dest)
    assert sorted(p.relative_to(dest).as_posix() for p in out) == [
        "set/a.png", "set/a.txt", "set/b.JPG", "set/m.jsonl", "set/meta.csv"]
    assert (dest / "set/a.txt").read_bytes() == b"a caption"
    assert sorted(out.skipped) == ["__MACOSX/set/._a.png", "set/.hidden.txt", "set/run.py",
                                   "set/tool.exe"]
    assert not (dest / "set/run.py").exists()

    # A link already inside the target folder (a folder pointing elsewhere) is not followed.
    outside = tmp_path / "outside"
    outside.mkdir()
    dest2 = tmp_path / "dest2"
    dest2.mkdir()
    (dest2 / "sub").symlink_to(outside, target_is_directory=True)
    z2 = make_zip(tmp_path / "via_link.zip", [("sub/x.txt", b"through the link")])
    with pytest.raises(UnsafeArchiveError, match="outside"):
        safe_extract_zip(z2, dest2)
    assert list(outside.iterdir()) == []
    # ... nor a file link at an entry's own name.
    (dest2 / "victim.txt").symlink_to(outside / "victim.txt")
    z3 = make_zip(tmp_path / "over_link.zip", [("victim.txt", b"overwrite")])
    with pytest.raises(UnsafeArchiveError):
        safe_extract_zip(z3, dest2)
    assert not (outside / "victim.txt").exists()


def test_a_file_that_is_not_a_zip_is_a_plain_error(tmp_path):
    bad = tmp_path / "bad.zip"
    bad.write_bytes(b"not a zip at all")
    with pytest.raises(UnsafeArchiveError, match="not a readable zip"):
        safe_extract_zip(bad, tmp_path / "dest")


# ---------------------------------------------------------------------------- ownership
WRITE_OUTPUTS = (
    "import os, pathlib, sys\n"
    "out = pathlib.Path(sys.argv[1]) / 'output'\n"
    "out.mkdir(parents=True, exist_ok=True)\n"
    "(out / 'step-1.safetensors').write_bytes(b'lora weights')\n"
    "(out / 'notes.txt').write_text('run notes 7c1f')\n"
    "print('token seen:', 'yes' if os.environ.get('HF_TOKEN') else 'no')\n")


def tiny_run(runner: Runner, workspace: Path, owner: str | None, name: str) -> str:
    run_dir = workspace / "runs" / name
    plan = StagePlan("train", [sys.executable, "-c", WRITE_OUTPUTS, str(run_dir)], {})
    rid = runner.submit_stages([plan], run_dir, "stages: [train]\n", owner=owner, name=name)
    run = runner.wait(rid, timeout=120)
    assert run["status"] == "succeeded", run
    return rid


@pytest.fixture
def registry(tmp_path):
    ws = tmp_path / "ws"
    runner = Runner(ws, stop_grace_s=1)
    ids = {who: tiny_run(runner, ws, who, f"run-{who}") for who in ("bob", "carol")}
    ids["legacy"] = tiny_run(runner, ws, None, "run-legacy")
    security.configure(auth_enabled=True, admins=["alice"])
    yield runner, ws, ids
    security.configure(auth_enabled=False)


def test_owners_see_their_runs_admins_see_all(registry):
    runner, ws, ids = registry
    run = {w: runner.get_run(i) for w, i in ids.items()}
    assert security.can_access("bob", run["bob"]) and not security.can_access("bob", run["carol"])
    assert security.can_access("alice", run["carol"]) and security.can_access("alice",
                                                                              run["legacy"])
    # A run from before sign-in was turned on belongs to nobody: admins only.
    assert not security.can_access("bob", run["legacy"])
    assert security.list_owner("bob") == "bob" and security.list_owner("alice") is None

    class Req:
        username = None
    with pytest.raises(AccessDenied):
        security.user_of(Req())  # sign-in on, but no user: never the all-seeing local user
    Req.username = "bob"
    assert security.user_of(Req()) == "bob"
    security.configure(auth_enabled=False)
    assert security.user_of(None) is None and security.can_access(None, run["carol"])


def test_registry_file_serves_only_the_runs_own_files(registry, tmp_path):
    runner, ws, ids = registry
    bob = ids["bob"]
    run_dir = Path(runner.get_run(bob)["run_dir"])
    good = registry_file(runner, bob, "output/step-1.safetensors", "bob")
    assert good == (run_dir / "output" / "step-1.safetensors").resolve()
    assert good.read_bytes() == b"lora weights"
    assert registry_file(runner, bob, "output/notes.txt", "alice").read_text() == \
        "run notes 7c1f"

    secret = tmp_path / "secret.txt"
    secret.write_text("not yours")
    (run_dir / "output" / "escape.txt").symlink_to(secret)
    (run_dir / "output" / "etc").symlink_to("/etc", target_is_directory=True)
    (run_dir / "output" / "history.txt").symlink_to(ws / "zerolora.sqlite")
    os.link(ws / "zerolora.sqlite", run_dir / "output" / "copy.db")
    (run_dir / "output" / "inside.txt").symlink_to(run_dir / "output" / "notes.txt")
    carol_file = Path(runner.get_run(ids["carol"])["run_dir"]) / "output" / "notes.txt"

    refused = {
        "/etc/passwd": "relative", str(good): "relative", "~/x": "relative",
        "../run-carol/output/notes.txt": r"'\.\.'",
        "output/../../../zerolora.sqlite": r"'\.\.'",
        "output/escape.txt": "outside", "output/etc/passwd": "outside",
        "output/history.txt": "outside", "output/copy.db": "history",
        "output": "not a regular file", "output/missing.bin": "no such file",
        "": "empty", "output/\x00x": "NUL",
    }
    for rel, why in refused.items():
        with pytest.raises(AccessDenied, match=why):
            registry_file(runner, bob, rel, "bob")
    # A link that stays inside the run is fine.
    assert registry_file(runner, bob, "output/inside.txt", "bob").read_text() == \
        "run notes 7c1f"
    # Another user's run and an unknown id get the same answer (no probing for ids).
    for rid in (ids["carol"], "20990101-000000-abcdef"):
        with pytest.raises(AccessDenied, match="no such run of yours"):
            registry_file(runner, rid, "output/notes.txt", "bob")
    assert registry_file(runner, ids["carol"], "output/notes.txt", "alice") == \
        carol_file.resolve()

    # A run whose folder holds the workspace itself serves nothing from it.
    wide = runner.submit_stages([StagePlan("x", [sys.executable, "-c", "pass"], {})], ws, "",
                                owner="bob", name="wide")
    runner.wait(wide, timeout=120)
    (ws / "note.txt").write_text("workspace file")
    with pytest.raises(AccessDenied, match="holds the workspace"):
        registry_file(runner, wide, "note.txt", "bob")
    with pytest.raises(AccessDenied, match="holds the workspace"):
        security.list_files(runner, wide, "bob")

    # A run folder swapped for a link to somewhere else is not trusted.
    moved = tmp_path / "moved"
    run_dir.rename(moved)
    run_dir.symlink_to(moved, target_is_directory=True)
    with pytest.raises(AccessDenied, match="link"):
        registry_file(runner, bob, "output/notes.txt", "bob")


def test_listing_names_files_not_links(registry):
    runner, ws, ids = registry
    run_dir = Path(runner.get_run(ids["bob"])["run_dir"])
    (run_dir / "output" / "etc").symlink_to("/etc", target_is_directory=True)
    listed = {f["file"]: f["bytes"] for f in security.list_files(runner, ids["bob"], "bob")}
    assert listed["output/step-1.safetensors"] == len(b"lora weights")
    assert "logs/train.log" in listed
    assert not any(p.startswith("output/etc") for p in listed)
    with pytest.raises(AccessDenied):
        security.list_files(runner, ids["carol"], "bob")


# ---------------------------------------------------------------------------- run paths
REPO = Path(__file__).resolve().parents[1]


def run_config(**changes) -> dict:
    """A sample-only run (no dataset needed) with every path option at its default."""
    return {"stages": ["sample"], "offline": True, **changes}


def test_non_admins_point_runs_only_at_their_own_data_models_and_runs(registry, tmp_path):
    runner, ws, ids = registry
    models = tmp_path / "models"
    (models / "Qwen" / "Qwen-Image").mkdir(parents=True)
    (models / "weights.safetensors").write_bytes(b"w")
    own = ws / "datasets" / "bob" / "cats"
    carols = ws / "datasets" / "carol" / "dogs"
    for folder in (own, carols):
        folder.mkdir(parents=True)
        (folder / "a.png").write_bytes(b"png")
        (folder / "a.txt").write_text("a caption")
    (own / "metadata.csv").write_text("image,prompt\na.png,a cat\n")
    bob_run = Path(runner.get_run(ids["bob"])["run_dir"])
    carol_run = Path(runner.get_run(ids["carol"])["run_dir"])
    legacy_run = Path(runner.get_run(ids["legacy"])["run_dir"])

    def check(user="bob", **changes):
        return security.check_run_paths(run_config(**changes), user, ws, models_dir=models,
                                        runner=runner, cwd=tmp_path)

    def refused(field, user="bob", **changes):
        problems = check(user, **changes)
        assert problems and all(p.startswith(f"{field}: ") for p in problems), problems
        assert all("(got " in p and "; allowed " in p for p in problems), problems
        return problems[0]

    # Their own dataset folders, the bundled demo, one of their runs (a stage-1 cache).
    assert check(dataset_base_path=str(own), dataset_metadata_path=str(own / "metadata.csv"),
                 models_dir=str(models), model_id_with_origin_paths=str(models / "Qwen"),
                 model_paths=json.dumps([str(models / "weights.safetensors")]),
                 tokenizer_path="Qwen/Qwen-Image:tokenizer/") == []
    assert check(dataset_base_path=str(REPO / "backend" / "assets" / "demo_dataset")) == []
    assert check(dataset_base_path=str(bob_run / "output"),
                 lora_checkpoint=str(bob_run / "output" / "step-1.safetensors")) == []
    assert check(resume_from=str(bob_run / "output")) == []
    assert check() == []  # defaults (hub model ids, the server's models folder)

    # Anything else on the server is refused, links followed.
    (ws / "datasets" / "bob" / "escape").symlink_to("/etc", target_is_directory=True)
    (ws / "datasets" / "bob" / "to-carol").symlink_to(carols, target_is_directory=True)
    for path in ("/etc", str(REPO), str(carols), str(ws / "datasets"), str(ws),
                 str(ws / "datasets" / "bob" / "escape"),
                 str(ws / "datasets" / "bob" / "to-carol"),
                 str(own / ".." / ".." / "carol" / "dogs"), "../..", str(carol_run)):
        msg = refused("dataset_base_path", dataset_base_path=path)
        assert "outside your dataset folders" in msg and repr(path) in msg
    assert "a link to a place outside" in refused(
        "dataset_base_path", dataset_base_path=str(ws / "datasets" / "bob" / "escape"))
    refused("dataset_metadata_path", dataset_base_path=str(own),
            dataset_metadata_path=str(carols / "a.txt"))
    # ... also from inside their folder: a link in it, or metadata naming other files.
    linked = ws / "datasets" / "bob" / "linked"
    linked.mkdir()
    (linked / "b.png").symlink_to(carols / "a.png")
    assert "'b.png' is a link" in refused("dataset_base_path", dataset_base_path=str(linked))
    (own / "metadata.csv").write_text("image,prompt\na.png,ok\n/etc/hostname,x\n")
    assert "metadata.csv row 2" in refused(
        "dataset_metadata_path", dataset_base_path=str(own),
        dataset_metadata_path=str(own / "metadata.csv"))
    (own / "meta.jsonl").write_text('{"image": "../../carol/dogs/a.png", "prompt": "x"}\n')
    refused("dataset_metadata_path", dataset_base_path=str(own),
            dataset_metadata_path=str(own / "meta.jsonl"))

    # Models: the server's folder (or backend/assets) only; hub ids cannot climb out of it.
    refused("models_dir", models_dir=str(tmp_path))
    refused("models_dir", models_dir="/")
    assert check(models_dir=str(REPO / "backend" / "assets")) == []
    for spec in ("/etc/passwd", str(tmp_path), "Qwen/Qwen-Image:../../../etc/*",
                 "../../x:weights/*.safetensors", "Qwen/Qwen-Image:/etc/*", "/etc:passwd"):
        refused("model_id_with_origin_paths", model_id_with_origin_paths=spec)
    refused("model_paths", model_paths=json.dumps([str(models / "weights.safetensors"),
                                                   ["/etc/passwd"]]))
    refused("tokenizer_path", tokenizer_path="/etc")
    refused("model_paths", model_paths='["/etc/passwd\\u0000.safetensors"]')
    refused("dataset_base_path", dataset_base_path=f"{own}\x00")
    refused("tokenizer_path", tokenizer_path="Qwen/Qwen-Image:../../../../etc/")

    # An extra LoRA merged before training: their uploads or their runs, nothing else.
    (own / "dedistill.safetensors").write_bytes(b"lora")
    assert check(preset_lora_path=str(own / "dedistill.safetensors")) == []
    assert check(preset_lora_path=str(bob_run / "output" / "step-1.safetensors")) == []
    for path in (carols / "a.png", Path("/etc/passwd"), carol_run / "output"):
        refused("preset_lora_path", preset_lora_path=str(path))

    # Checkpoints: only from their own runs (the job registry's), never carol's or legacy.
    for path in (carol_run / "output" / "step-1.safetensors", legacy_run / "output",
                 Path("/etc/passwd"), ws / "zerolora.sqlite"):
        refused("lora_checkpoint", lora_checkpoint=str(path))
        refused("resume_from", resume_from=str(path))
    assert "no run registry" in security.check_run_paths(
        run_config(lora_checkpoint=str(bob_run / "output" / "step-1.safetensors")), "bob", ws,
        models_dir=models)[0]

    # Where a run writes and where it downloads from are not the user's to choose.
    problems = check(output_path=str(tmp_path / "out"), progress_file="/tmp/p.jsonl",
                     offload_nvme_path="/mnt/nvme", hub_endpoint="http://127.0.0.1:9")
    assert [p.split(":", 1)[0] for p in problems] == [
        "output_path", "progress_file", "offload_nvme_path", "hub_endpoint"]

    # Admins, and the one local user with sign-in off, may use any path.
    wild = dict(dataset_base_path="/etc", models_dir="/", hub_endpoint="http://127.0.0.1:9",
                lora_checkpoint=str(carol_run / "output" / "step-1.safetensors"),
                output_path=str(tmp_path / "out"))
    assert len(check(**wild)) == 5
    assert check("alice", **wild) == []
    assert security.check_run_paths(run_config(**wild), None, ws)[0].startswith("user: ")
    security.configure(auth_enabled=False)
    assert security.check_run_paths(run_config(**wild), None, ws) == []


def test_the_dataset_tab_check_and_where_uploads_go(registry, tmp_path):
    runner, ws, ids = registry
    assert security.user_dataset_root(ws, "bob") == ws / "datasets" / "bob"
    assert security.user_dataset_root(ws, None) == ws / "datasets"
    with pytest.raises(AccessDenied):
        security.user_dataset_root(ws, "../carol")
    own = security.user_dataset_root(ws, "bob") / "cats"
    own.mkdir(parents=True)
    demo = REPO / "backend" / "assets" / "demo_dataset"
    assert security.check_dataset_paths(str(own), None, "bob", ws) == []
    assert security.check_dataset_paths(str(demo), None, "bob", ws) == []
    # Captions are written into their own folders only (never the bundled demo).
    assert security.check_dataset_paths(str(own), None, "bob", ws, write=True) == []
    for path in (str(demo), "/etc", str(ws / "datasets" / "carol")):
        problems = security.check_dataset_paths(path, None, "bob", ws, write=True)
        assert problems and problems[0].startswith("dataset_base_path: "), problems
    assert security.check_dataset_paths("/etc", None, "alice", ws, write=True) == []
    # A user's folder swapped for a link (made by someone with a shell) is no folder of theirs.
    (ws / "datasets" / "carol").symlink_to("/etc", target_is_directory=True)
    assert security.check_dataset_paths("/etc/ssl", None, "carol", ws)


# ---------------------------------------------------------------------------- secrets
def test_redact_hides_tokens_but_keeps_the_log_readable():
    token = "hf_" + "Ab1" * 10
    security.remember_secret("ms-secret-1234")
    text = (f"HF_TOKEN={token} TOKENIZERS_PARALLELISM=false\n"
            f"Authorization: Bearer abc.def\nMODELSCOPE_API_TOKEN=ms-secret-1234 step 3/10\n"
            f"url ?token=q1w2e3&rev=main the word ms-secret-1234 alone {token}")
    out = security.redact(text)
    for secret in (token, "abc.def", "ms-secret-1234", "q1w2e3"):
        assert secret not in out
    assert "TOKENIZERS_PARALLELISM=false" in out and "step 3/10" in out and "&rev=main" in out
    security.forget_secret("ms-secret-1234")


def test_passwords_are_kept_as_salted_hashes(tmp_path):
    creds = security.Credentials()
    creds.add("alice", "correct horse")
    creds.add("bob", security.hash_password("battery staple", iterations=1000))
    assert creds.check("alice", "correct horse") and creds.check("bob", "battery staple")
    assert not creds.check("alice", "battery staple") and not creds.check("eve", "x")
    assert "correct horse" not in repr(creds) + str(creds.hashes)
    a1, a2 = security.hash_password("same"), security.hash_password("same")
    assert a1 != a2  # salted
    f = tmp_path / "users.txt"
    f.write_text("# users\nalice:pw one\n\nbob:" + security.hash_password("two", 1000) + "\n")
    assert [u for u, _ in security.load_auth_file(f)] == ["alice", "bob"]
    f.write_text("alice-without-colon-secretpw\n")
    with pytest.raises(ValueError, match="line 1") as e:
        security.load_auth_file(f)
    assert "secretpw" not in str(e.value)


# ---------------------------------------------------------------------------- served app
@pytest.fixture(scope="module")
def app(signed_in, models_root):
    """The session's signed-in server (conftest ``signed_in``; alice is admin, the tiny model
    in its models folder) with runs of bob and carol."""
    app = copy.copy(signed_in)
    app.runner = runner = Runner(app.workspace, stop_grace_s=1)
    app.model_file = next((models_root / "Qwen" / "Qwen-Image" / "transformer").glob(
        "*.safetensors"))
    app.ids = {who: tiny_run(runner, app.workspace, who, f"run-{who}")
               for who in ("bob", "carol")}
    # An export the UI made for carol (its downloads folder is not served by path).
    export = app.workspace / "downloads" / app.ids["carol"]
    export.mkdir(parents=True)
    (export / f"{app.ids['carol']}.zip").write_bytes(b"carol's export")
    return app


def file_url(path) -> str:
    return f"/gradio_api/file={path}"


@pytest.mark.slow
def test_without_signing_in_there_is_nothing_but_the_login_page(app):
    anon = httpx.Client(base_url=app.url, timeout=30, trust_env=False)
    served = security.stage_download(
        registry_file(app.runner, app.ids["bob"], "output/notes.txt", "bob"), app.workspace,
        "bob")
    secrets_of_the_app = [*app.ids.values(), "list_runs", "start_run", "fetch_output",
                          str(app.workspace), "lora weights", "run notes 7c1f"]

    for method, route in [("GET", "/config"), ("GET", "/gradio_api/info"),
                          ("GET", "/gradio_api/openapi.json"),
                          ("GET", file_url(served)), ("GET", file_url("/etc/passwd")),
                          ("GET", f"/gradio_api/file/{served}"),
                          ("GET", "/gradio_api/queue/status"), ("POST", "/gradio_api/queue/join"),
                          ("POST", "/gradio_api/call/list_runs"),
                          ("POST", "/gradio_api/run/list_runs"),
                          ("POST", "/gradio_api/api/list_runs"),
                          ("POST", "/gradio_api/upload"), ("GET", "/gradio_api/upload_progress"),
                          ("POST", "/gradio_api/component_server"),
                          ("GET", "/gradio_api/proxy=http://127.0.0.1/"),
                          ("GET", "/monitoring")]:
        r = anon.request(method, route, json={"data": [], "fn_index": 0, "session_hash": "x"})
        assert r.status_code == 401, (route, r.status_code, r.text[:200])
        assert not any(s in r.text for s in secrets_of_the_app), route

    # Every GET route gradio has answers signed-out visitors with static assets, the login
    # page or a refusal -- never the app's data, not even the names of its API endpoints.
    assert anon.get("/openapi.json").status_code == 404  # no route list either
    for route in gradio_get_routes():
        url = re.sub(r"\{path_or_url(:path)?\}", str(served), route)
        url = re.sub(r"\{[^}]+\}", "x", url)
        try:
            r = anon.get(url, timeout=5)
        except httpx.ReadTimeout:
            continue  # a stream (heartbeat) that stays open: it carries no data
        leaked = [s for s in secrets_of_the_app if s in r.text]
        assert not leaked, (route, r.status_code, leaked)
        if r.status_code == 200:
            assert route in PUBLIC_ROUTES, (route, r.text[:200])
    page = anon.get("/")
    assert page.status_code == 200 and '"auth_required":true' in page.text
    assert "window.gradio_api_info = {};" in page.text
    # Signed in, the same page describes the API (what the login wall removed).
    bob = app.login("bob", USERS["bob"])
    assert "fetch_output" in bob.get("/").text


def gradio_get_routes() -> list[str]:
    """Every GET route of a gradio app (this gradio version's own list)."""
    import gradio as gr
    from gradio.routes import App

    with gr.Blocks() as blocks:
        gr.Markdown("x")
    app = App.create_app(blocks)
    out = []
    for r in app.routes:
        inner = getattr(getattr(r, "original_router", None), "routes", None)
        for x in (inner if inner is not None else [r]):
            if "GET" in (getattr(x, "methods", None) or ()):
                out.append(x.path)
    assert "/config" in out and "/gradio_api/file={path_or_url:path}" in out
    return sorted(set(out))


# What gradio serves without sign-in: the page shell (whose script shows the login form),
# static assets, and data-free status answers.
PUBLIC_ROUTES = {
    "/", "/favicon.ico", "/theme.css", "/gradio_api/theme.css", "/robots.txt",
    "/manifest.json", "/pwa_icon", "/pwa_icon/{size}", "/static/{path:path}",
    "/assets/{path:path}", "/svelte/{path:path}", "/gradio_api/user", "/gradio_api/user/",
    "/gradio_api/token", "/gradio_api/token/", "/gradio_api/app_id", "/gradio_api/app_id/",
    "/gradio_api/startup-events", "/gradio_api/heartbeat/{session_hash}", "/logout",
}


@pytest.mark.slow
def test_signed_in_users_get_no_file_outside_the_served_copies(app):
    bob = app.login("bob", USERS["bob"])
    ws = app.workspace
    bob_dir = Path(app.runner.get_run(app.ids["bob"])["run_dir"])
    carol_dir = Path(app.runner.get_run(app.ids["carol"])["run_dir"])
    forbidden = [
        "/etc/passwd", ws / "zerolora.sqlite", ws / ".ui_browser_key",
        bob_dir / "output" / "notes.txt",            # even one's own run: only served copies
        carol_dir / "output" / "step-1.safetensors",
        ws / "downloads" / app.ids["carol"] / f"{app.ids['carol']}.zip",
        app.model_file,
        Path(__file__).resolve().parents[1] / "launch.py",
        f"{security.served_dir(ws)}/../../zerolora.sqlite",
        "../../../../../../etc/passwd", "zerolora.sqlite",
    ]
    for path in forbidden:
        r = bob.get(file_url(path))
        assert r.status_code in (403, 404), (path, r.status_code)
        assert b"lora weights" not in r.content and b"SQLite" not in r.content

    # What a registry check handed out is served, to signed-in users.
    served = security.stage_download(
        registry_file(app.runner, app.ids["bob"], "output/step-1.safetensors", "bob"), ws,
        "bob")
    r = bob.get(file_url(served))
    assert r.status_code == 200 and r.content == b"lora weights"
    # A link planted among the served copies does not turn into a way out.
    planted = security.served_dir(ws) / "bob" / "planted"
    planted.mkdir()
    (planted / "db").symlink_to(ws / "zerolora.sqlite")
    assert bob.get(file_url(planted / "db")).status_code == 403


@pytest.mark.slow
def test_repeated_failed_sign_ins_are_refused_with_the_time_to_wait(app):
    anon = httpx.Client(base_url=app.url, timeout=30, trust_env=False)
    assert "after 5 failed attempts a user name is paused for 5 minutes" in anon.get("/").text
    for _ in range(5):
        r = anon.post("/login", data={"username": "dave", "password": "not-daves"})
        assert r.status_code == 400, r.text
    # Now even the right password is refused (the browser's form posts multipart).
    for send in ({"data": {"username": "dave", "password": USERS["dave"]}},
                 {"files": {"username": (None, "dave"), "password": (None, USERS["dave"])}}):
        r = anon.post("/login", **send)
        assert r.status_code == 429, r.text
        assert r.json()["detail"].startswith(
            "sign-in: too many failed attempts for user name 'dave' (5 within 5 minutes); "
            "wait ")
        assert 0 < int(r.headers["retry-after"]) <= 300
        assert "access-token" not in str(r.cookies)
    assert USERS["dave"] not in app.log() and "not-daves" not in app.log()
    # Other users from the same address still sign in.
    assert "fetch_output" in app.login("bob", USERS["bob"]).get("/").text
