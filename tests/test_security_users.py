"""Several signed-in users on one server: where uploads go, which dataset folders the caption
editor reads and writes, runs checked again before they resume, and sign-in attempts
limited per user name and address.

Plain functions are called with a user name and a tmp workspace; the Dataset and Run tabs'
own callbacks are called with a ``gr.Request`` naming the user, on an app built over a real
job registry (SQLite + supervisor processes). No training runs: a run's one stage is a
Python one-liner that fails at once.
"""
from __future__ import annotations

import sys
import zipfile
from pathlib import Path

import gradio as gr
import pytest

from backend.config.validation import validate
from backend.planning.plan import StagePlan, resolved_config
from backend.jobs.runner import Runner
from webui import datasets, security
from webui.datasets import DatasetFolderError
from webui.form import to_widget_value
from tests.harness.browser import english
from webui.security import Credentials, LoginLimiter


pytestmark = pytest.mark.timeout(300)


@pytest.fixture
def signed_in():
    security.configure(auth_enabled=True, admins=["alice"])
    yield
    security.configure(auth_enabled=False)


def png(path: Path, colour=(200, 30, 30)) -> Path:
    from PIL import Image

    path.parent.mkdir(parents=True, exist_ok=True)
    Image.new("RGB", (16, 16), colour).save(path)
    return path


def dataset(folder: Path, caption: str, name: str = "a") -> Path:
    png(folder / f"{name}.png")
    (folder / f"{name}.txt").write_text(caption, encoding="utf-8")
    return folder


# ---------------------------------------------------------------------------- uploads
def uploads(tmp_path: Path) -> list[str]:
    src = tmp_path / "upload-src"
    z = src / "more.zip"
    src.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(z, "w") as zf:
        zf.write(png(src / "zipped.png"), "shapes/zipped.png")
        zf.writestr("shapes/zipped.txt", "a zipped square")
    (src / "cat.txt").write_text("a cat")
    return [str(png(src / "cat.png")), str(src / "cat.txt"), str(z)]


def test_uploads_go_to_the_users_own_folder_where_their_runs_may_read(signed_in, tmp_path):
    ws = tmp_path / "ws"
    folder, meta, _ = datasets.add_uploads(ws, "cats", uploads(tmp_path), user="bob")
    assert folder == ws / "datasets" / "bob" / "cats" and meta is None
    assert sorted(p.name for p in folder.iterdir()) == ["cat.png", "cat.txt", "zipped.png",
                                                        "zipped.txt"]
    assert not (ws / "datasets" / "cats").exists()
    # Bob may start a run on it; carol may not.
    run = {"stages": ["sample"], "offline": True, "dataset_base_path": str(folder)}
    assert security.check_run_paths(run, "bob", ws) == []
    assert security.check_run_paths(run, "carol", ws)[0].startswith("dataset_base_path: ")
    # The same name for another user is another folder (admins have theirs too).
    assert datasets.add_uploads(ws, "cats", uploads(tmp_path), user="carol")[0] == \
        ws / "datasets" / "carol" / "cats"
    assert datasets.add_uploads(ws, "bob", uploads(tmp_path), user="alice")[0] == \
        ws / "datasets" / "alice" / "bob"
    assert sorted(p.name for p in (ws / "datasets" / "bob").iterdir()) == ["cats"]

    # No user with sign-in on, or a user folder swapped for a link: nothing is written.
    with pytest.raises(DatasetFolderError, match="sign in first"):
        datasets.add_uploads(ws, "dogs", uploads(tmp_path), user=None)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (ws / "datasets" / "dave").symlink_to(elsewhere, target_is_directory=True)
    with pytest.raises(DatasetFolderError, match="link"):
        datasets.add_uploads(ws, "dogs", uploads(tmp_path), user="dave")
    assert list(elsewhere.iterdir()) == []


def test_without_sign_in_uploads_go_where_they_always_went(tmp_path):
    ws = tmp_path / "ws"
    folder, _, _ = datasets.add_uploads(ws, "cats", uploads(tmp_path))
    assert folder == ws / "datasets" / "cats"
    assert datasets.read_captions(str(folder), None, user=None, workspace=ws) == [
        ["cat.png", "a cat"], ["zipped.png", "a zipped square"]]


# ---------------------------------------------------------------------------- captions
def test_the_caption_editor_reads_and_writes_only_where_the_user_may(signed_in, tmp_path):
    ws = tmp_path / "ws"
    own = dataset(ws / "datasets" / "bob" / "cats", "a cat")
    carols = dataset(ws / "datasets" / "carol" / "dogs", "carol's private caption")
    outside = dataset(tmp_path / "server-folder", "a caption on the server")
    bob = {"user": "bob", "workspace": ws}

    assert datasets.read_captions(str(own), None, **bob) == [["a.png", "a cat"]]
    assert datasets.save_captions(str(own), None, [["a.png", "a tabby cat"]], **bob) == 1
    assert (own / "a.txt").read_text() == "a tabby cat\n"
    assert [p for p, _ in datasets.image_paths(str(own), [["a.png", ""]], **bob)] == [
        str((own / "a.png").resolve())]

    for folder in (carols, outside, ws / "datasets", Path("/etc")):
        with pytest.raises(DatasetFolderError) as e:
            datasets.read_captions(str(folder), None, **bob)
        assert str(e.value).startswith("dataset_base_path: outside your dataset folders")
        assert "private caption" not in str(e.value)
        with pytest.raises(DatasetFolderError, match="outside your dataset folders"):
            datasets.image_paths(str(folder), [["a.png", ""]], **bob)
    for folder in (carols, outside):
        with pytest.raises(DatasetFolderError, match="outside your dataset folders"):
            datasets.save_captions(str(folder), None, [["a.png", "overwritten"]], **bob)
        assert (folder / "a.txt").read_text() != "overwritten\n"
    # A metadata file of carol's, named from bob's folder, is neither read nor written.
    (carols / "metadata.csv").write_text("image,prompt\na.png,carol's private caption\n")
    with pytest.raises(DatasetFolderError, match="dataset_metadata_path: "):
        datasets.read_captions(str(own), str(carols / "metadata.csv"), **bob)
    with pytest.raises(DatasetFolderError, match="dataset_metadata_path: "):
        datasets.save_captions(str(own), str(carols / "metadata.csv"), [["a.png", "x"]], **bob)
    assert "private" in (carols / "metadata.csv").read_text()
    # ... nor through a link planted in bob's own folder.
    png(own / "b.png")
    (own / "b.txt").symlink_to(carols / "a.txt")
    with pytest.raises(DatasetFolderError, match="'b.txt' is a link"):
        datasets.read_captions(str(own), None, **bob)
    with pytest.raises(DatasetFolderError, match="'b.txt' is a link"):
        datasets.save_captions(str(own), None, [["b.png", "written through the link"]], **bob)
    assert (carols / "a.txt").read_text() == "carol's private caption"

    # Admins, and the one local user with sign-in off, may edit any folder.
    assert datasets.read_captions(str(carols), None, user="alice", workspace=ws) == [
        ["a.png", "carol's private caption"]]
    security.configure(auth_enabled=False)
    assert datasets.save_captions(str(outside), None, [["a.png", "edited"]], user=None,
                                  workspace=ws) == 1
    assert (outside / "a.txt").read_text() == "edited\n"


# ---------------------------------------------------------------------------- the tabs
def callback(demo, name: str):
    """The tab's own event handler ``name`` (as gradio calls it)."""
    found = [f.fn for f in demo.fns.values() if getattr(f.fn, "__name__", "") == name]
    assert found, name
    return found[0]


def failing_run(runner: Runner, ws: Path, owner: str, cfg: dict, name: str) -> str:
    """A run whose run.yaml is the plan's (resolved paths, run-folder outputs) and whose one
    stage fails at once, so it may be resumed."""
    run_dir = ws / "runs" / name
    run_dir.mkdir(parents=True)
    resolved_config(validate(cfg, require_inputs=False), run_dir).save(run_dir / "run.yaml")
    (run_dir / "output" / "state").mkdir(parents=True)
    plan = StagePlan("sample", [sys.executable, "-c", "raise SystemExit(3)"], {})
    rid = runner.submit_stages([plan], run_dir, (run_dir / "run.yaml").read_text(),
                               owner=owner, name=name)
    assert runner.wait(rid, timeout=120)["status"] == "failed"
    return rid


@pytest.fixture
def app(signed_in, tmp_path):
    """The UI over a real registry; bob has a failed run reading his own dataset folder."""
    from webui.app import create_app

    ws, models = tmp_path / "ws", tmp_path / "models"
    models.mkdir()
    runner = Runner(ws, stop_grace_s=1)
    own = dataset(ws / "datasets" / "bob" / "cats", "a cat")
    dataset(ws / "datasets" / "carol" / "dogs", "carol's private caption")
    cfg = {"stages": ["sample"], "offline": True, "dataset_base_path": str(own),
           "models_dir": str(models)}
    rid = failing_run(runner, ws, "bob", cfg, "run-bob")
    carol_rid = failing_run(runner, ws, "carol", {**cfg, "dataset_base_path": ""}, "run-carol")
    demo = create_app(runner, ws, models)
    return demo, runner, ws, models, {"bob": rid, "carol": carol_rid}


def test_the_dataset_tab_acts_for_the_signed_in_user(app, tmp_path):
    demo, runner, ws, _, _ = app
    c, form = demo.zerolora_ctx.c, demo.zerolora_ctx.form
    base, meta = form.components["dataset_base_path"], form.components["dataset_metadata_path"]
    bob = gr.Request(username="bob")
    load, save = callback(demo, "load_captions"), callback(demo, "save_captions")
    upload = callback(demo, "upload")

    out = upload({**form.event_inputs({}), c["upload_files"]: uploads(tmp_path),
                  c["upload_name"]: "new"}, bob)
    assert out[base] == str(ws / "datasets" / "bob" / "new"), out[c["data_msg"]]
    assert len(out[c["captions"]]) == 2

    carols = str(ws / "datasets" / "carol" / "dogs")
    out = load({base: carols, meta: ""}, bob)
    assert english(out[c["data_msg"]]).startswith(
        "✗ dataset_base_path: outside your dataset folders")
    assert out[c["captions"]] == []
    out = save({base: carols, meta: "", c["captions"]: [["a.png", "overwritten"]]}, bob)
    assert english(out[c["data_msg"]]).startswith(
        "✗ dataset_base_path: outside your dataset folders")
    assert (ws / "datasets" / "carol" / "dogs" / "a.txt").read_text() == \
        "carol's private caption"
    # The check (which reads every caption) is refused there too.
    values = {n: to_widget_value(n, form.defaults.get(n)) for n in form.components}
    values.update(dataset_base_path=carols, dataset_metadata_path="")
    out = callback(demo, "check")(form.event_inputs(values), bob)
    assert "dataset_base_path: outside your dataset folders" in out[c["data_msg"]]
    assert "private caption" not in str(out)

    own = str(ws / "datasets" / "bob" / "cats")
    assert load({base: own, meta: ""}, bob)[c["captions"]] == [["a.png", "a cat"]]
    assert load({base: carols, meta: ""}, gr.Request(username="alice"))[c["captions"]] == [
        ["a.png", "carol's private caption"]]


# ---------------------------------------------------------------------------- resume
def test_a_run_is_checked_again_before_it_resumes(app, tmp_path):
    demo, runner, ws, models, ids = app
    run = runner.get_run(ids["bob"])
    run_dir = Path(run["run_dir"])

    def check(user="bob"):
        return security.check_resume_paths(runner, runner.get_run(ids["bob"]), user, ws,
                                           models_dir=models)

    assert check() == []
    # A link planted in the dataset folder since the run started.
    link = ws / "datasets" / "bob" / "cats" / "b.png"
    link.symlink_to(ws / "datasets" / "carol" / "dogs" / "a.png")
    assert check()[0].startswith("dataset_base_path: 'b.png' is a link")
    assert check("alice") == []  # admins are not restricted
    link.unlink()
    # run.yaml (what the stages read) swapped for a link, or rewritten.
    yaml_file = run_dir / "run.yaml"
    original = yaml_file.read_text()
    elsewhere = tmp_path / "run.yaml"
    elsewhere.write_text(original)
    yaml_file.unlink()
    yaml_file.symlink_to(elsewhere)
    assert check()[0].startswith("run.yaml: not a regular file")
    yaml_file.unlink()
    yaml_file.write_text(original.replace(str(ws / "datasets" / "bob" / "cats"),
                                          str(ws / "datasets" / "carol" / "dogs")))
    assert check()[0].startswith("dataset_base_path: outside your dataset folders")
    yaml_file.write_text(original.replace(str(run_dir / "output"), str(tmp_path / "out")))
    assert check()[0].startswith("output_path: set by the run plan")
    yaml_file.write_text(original)
    # The saved state swapped for a link to carol's run.
    state = run_dir / "output" / "state"
    state.rmdir()
    state.symlink_to(Path(runner.get_run(ids["carol"])["run_dir"]) / "output" / "state")
    assert check()[0].startswith("run_dir: 'output/state' in run ")
    state.unlink()
    state.mkdir()
    assert check() == []


def test_the_run_tab_refuses_to_resume_a_run_whose_paths_changed(app):
    demo, runner, ws, _, ids = app
    c = demo.zerolora_ctx.c
    resume = callback(demo, "resume")
    bob = gr.Request(username="bob")
    link = ws / "datasets" / "bob" / "cats" / "b.png"
    link.symlink_to(ws / "datasets" / "carol" / "dogs" / "a.png")
    out = resume({c["run_id"]: ids["bob"], c["hub_token"]: ""}, bob)
    assert english(out[c["run_msg"]]).startswith("✗ Not resumed"), out
    assert "dataset_base_path: 'b.png' is a link" in out[c["run_problems"]]
    assert runner.get_run(ids["bob"])["attempt"] == 1
    assert runner.get_run(ids["bob"])["status"] == "failed"
    # Another user's run is not theirs to resume.
    out = resume({c["run_id"]: ids["carol"], c["hub_token"]: ""}, bob)
    assert english(out[c["run_msg"]]) == "No run to resume."
    link.unlink()
    out = resume({c["run_id"]: ids["bob"], c["hub_token"]: ""}, bob)
    assert english(out[c["run_msg"]]).startswith("Resumed run"), out
    assert runner.wait(ids["bob"], timeout=120)["attempt"] == 2


# ---------------------------------------------------------------------------- sign-in
class Clock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_five_failed_sign_ins_lock_the_name_for_five_minutes():
    clock = Clock()
    creds = Credentials(limiter=LoginLimiter(clock=clock))
    creds.add("bob", "right horse", iterations=1000)
    creds.add("carol", "carol pw", iterations=1000)

    for _ in range(4):
        assert not creds.check("bob", "wrong")
    assert creds.check("bob", "right horse")  # a success clears the earlier failures
    for _ in range(4):
        assert not creds.check("bob", "wrong")
    assert creds.limiter.refusal("bob") is None
    clock.now += 1
    assert not creds.check("bob", "wrong")  # the fifth within 5 minutes
    # Locked: even the right password is refused, and the message says how long to wait.
    assert not creds.check("bob", "right horse")
    assert creds.limiter.refusal("bob") == (
        "sign-in: too many failed attempts for user name 'bob' (5 within 5 minutes); "
        "wait 5 min 0 s and try again")
    clock.now += 299.5
    assert not creds.check("bob", "right horse")
    assert "wait 1 s" in creds.limiter.refusal("bob")
    assert creds.check("carol", "carol pw")  # other names are not affected
    clock.now += 0.5
    assert creds.limiter.refusal("bob") is None and creds.check("bob", "right horse")

    # Failures further apart than the window do not add up.
    for _ in range(4):
        assert not creds.check("bob", "wrong")
    clock.now += 301
    assert not creds.check("bob", "wrong")
    assert creds.check("bob", "right horse")
    # Unknown names are counted the same way (no telling which names exist).
    for _ in range(5):
        assert not creds.check("mallory", "guess")
    assert "user name 'mallory'" in creds.limiter.refusal("mallory")
    # Only names and times are kept: never a password.
    kept = repr(creds.limiter.__dict__) + repr(creds)
    assert "wrong" not in kept and "right horse" not in kept and "guess" not in kept


def test_one_address_trying_many_names_is_refused_too():
    clock = Clock()
    limiter = LoginLimiter(clock=clock)
    for i in range(limiter.max_address_failures):
        assert limiter.refusal(f"name{i}", "10.0.0.7") is None
        limiter.failed(f"name{i}", "10.0.0.7")
    assert "your address" in limiter.refusal("bob", "10.0.0.7")
    assert limiter.refusal("bob", "10.0.0.8") is None
    clock.now += limiter.window_s
    assert limiter.refusal("bob", "10.0.0.7") is None
