"""Issue 28 (third battery), items 10, 11, 12 and 14: the command importer's launch files,
a file-size limit said as such, no server paths in a non-admin's refusals, and what a
stage would read checked before a run is accepted.

Each test fails on the code the battery found: the importer's traceback, a size limit
left undiagnosed, absolute server paths in refusals, runs queued with inputs stage 1
refuses after the wait.
"""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml

from backend.config.errors import ConfigError
from backend.config.presets import load_preset
from backend.config.schema import RunConfig
from backend.config.validation import validate
from backend.planning.plan import StagePlan
from backend.jobs.runner import Runner
from tests.harness.stages import REPO, read_progress, stage_env, write_accelerate_config

PASSWD = "root:x:0:0:root:/root:/bin/bash\ndaemon:x:1:1:daemon:/usr/sbin:/usr/sbin/nologin\n"


# ------------------------------------------------------------------ item 10: importer
def _files(tmp_path: Path) -> tuple[Path, Path]:
    """A passwd-like text file and a binary file, named as a command would name them."""
    passwd = Path("/etc/passwd")
    if not passwd.is_file():
        passwd = tmp_path / "passwd"
        passwd.write_text(PASSWD)
    binary = tmp_path / "launch.yaml"
    binary.write_bytes(bytes(range(256)) * 4)
    return passwd, binary


def test_a_launch_file_that_is_no_accelerate_config_is_refused_naming_the_flag(tmp_path):
    from backend.planning.importer import import_commands

    passwd, binary = _files(tmp_path)
    for path, got in ((passwd, "YAML text that is a str, not a mapping of settings"),
                      (binary, "a binary file, not YAML text")):
        with pytest.raises(ConfigError) as e:
            import_commands(f"accelerate launch --config_file {path} train.py "
                            f"--task sft:train --lora_rank 8")
        text = str(e.value)
        assert e.value.fields() == ["--config_file"], text
        assert (f"--config_file: not an accelerate config (got {str(path)!r} in command 1: "
                f"{got}; allowed an accelerate config: a YAML mapping") in text, text
        assert "zerolora-import-" not in text and "'str' object" not in text
    # The trainer's own --config (a run config) likewise names its flag, never the copy.
    with pytest.raises(ConfigError) as e:
        import_commands(f"accelerate launch train.py --config {binary} --task sft:train")
    assert e.value.fields() == ["--config"]
    assert "not a run config" in str(e.value) and "zerolora-import-" not in str(e.value)


def test_the_importer_command_line_says_so_without_a_traceback(tmp_path):
    passwd, binary = _files(tmp_path)
    for path in (passwd, binary):
        commands = tmp_path / "cmd.sh"
        commands.write_text(f"accelerate launch --config_file {path} train.py "
                            f"--task sft:train\n")
        proc = subprocess.run([sys.executable, "-m", "backend.planning.importer", str(commands)],
                              cwd=str(REPO), env=stage_env(), capture_output=True, text=True,
                              timeout=300)
        assert proc.returncode == 2, proc.stderr[-3000:]
        assert f"--config_file: not an accelerate config (got {str(path)!r}" in proc.stderr
        assert "Traceback" not in proc.stderr and "ReaderError" not in proc.stderr


# ------------------------------------------------------------------ item 11: ulimit -f
LIMIT = 4096


def _limited() -> None:
    """In the child, before it starts: at most LIMIT bytes per file (``ulimit -f``)."""
    import resource

    resource.setrlimit(resource.RLIMIT_FSIZE, (LIMIT, resource.getrlimit(
        resource.RLIMIT_FSIZE)[1]))


WRITE_A_SAMPLE = """
import sys, torch
from pathlib import Path
from backend.data.cache import save_sample
save_sample(Path(sys.argv[1]), {"latents": torch.zeros(4096)}, {"prompt": "x"})
"""


def test_a_file_size_limit_in_the_cache_writer_is_diagnosed_as_such(tmp_path):
    """A real child under RLIMIT_FSIZE writes a stage-1 sample through the project's cache
    writer: the error names the file and the limit (not a full disk), and the failure
    diagnosis of its log says what to do."""
    from backend.jobs.diagnosis import diagnose, summarize

    target = tmp_path / "cache" / "0123.safetensors"
    target.parent.mkdir()
    proc = subprocess.run([sys.executable, "-c", WRITE_A_SAMPLE, str(target)], cwd=str(REPO),
                          env=stage_env({"PYTHONDONTWRITEBYTECODE": "1"}), capture_output=True,
                          text=True, timeout=300, preexec_fn=_limited)
    log = proc.stderr
    assert proc.returncode != 0 and "File too large" in log, log[-3000:]
    assert (f"file size limit reached writing {target}: this process may write files of at "
            f"most 4.0 KiB (its file-size limit: ulimit -f / RLIMIT_FSIZE)") in log, log[-3000:]
    assert not list(target.parent.iterdir())  # the partial file is gone
    found = diagnose(1, log, stage="data_process")
    assert [d.kind for d in found] == ["file_too_large"], [d.kind for d in found]
    assert f"Writing {target} failed with 'File too large'" in found[0].explanation
    assert "not full" in found[0].explanation
    assert any("ulimit -f unlimited" in fix for fix in found[0].fixes)
    assert summarize("data_process", 1, log)["headline"].endswith(
        "A file passed the largest file size this process may write (ulimit -f).")
    # The library's own words alone (no file named) are recognised too, and an OSError
    # EFBIG; a full disk stays a full disk.
    raw = ("safetensors._safetensors_rust.SafetensorError: Error while serializing: I/O "
           "error: File too large (os error 27)")
    assert [d.kind for d in diagnose(1, raw)] == ["file_too_large"]
    assert [d.kind for d in diagnose(1, "OSError: [Errno 27] File too large")] == \
        ["file_too_large"]
    assert [d.kind for d in diagnose(1, "OSError: [Errno 28] No space left on device")] == \
        ["disk_full"]


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_stage1_under_a_file_size_limit_names_the_cache_file_and_the_limit(
        tmp_path, models_root, demo_dataset):
    """The real stage 1 under ``accelerate launch`` with RLIMIT_FSIZE below one cached
    sample: it ends with the limit named, the file, no traceback; the run's diagnosis
    (summarize, what the UI shows) names the file."""
    from backend.jobs.diagnosis import summarize

    acc = write_accelerate_config(tmp_path, "plain")
    cache, progress = tmp_path / "cache", tmp_path / "progress.jsonl"
    cmd = [sys.executable, "-m", "accelerate.commands.launch", "--config_file", str(acc),
           "-m", "backend.stages.train", "--task", "sft:data_process", "--models_dir",
           str(models_root), "--offline", "--dataset_base_path", str(demo_dataset),
           "--dataset_metadata_path", str(demo_dataset / "metadata.csv"),
           "--output_path", str(cache), "--progress_file", str(progress)]
    proc = subprocess.run(cmd, cwd=str(REPO), env=stage_env({"PYTHONDONTWRITEBYTECODE": "1"}),
                          capture_output=True, text=True, timeout=800, preexec_fn=_limited)
    log = proc.stdout + proc.stderr
    assert proc.returncode != 0, log[-3000:]
    m = re.search(rf"error: file size limit reached writing ({re.escape(str(cache))}/"
                  rf"[0-9a-f]+\.safetensors): this process may write files of at most "
                  rf"4\.0 KiB", log)
    assert m, log[-4000:]
    assert "SafetensorError" not in log  # said, not a traceback of the library's
    end = read_progress(progress)[-1]
    assert end["status"] == "failed" and end["reason"].startswith("file size limit reached")
    shown = summarize("data_process", proc.returncode, log, end_reason=end["reason"])
    assert shown["diagnoses"][0]["kind"] == "file_too_large"
    assert f"Writing {m.group(1)} failed" in shown["diagnoses"][0]["explanation"]
    assert not any(d["kind"] == "disk_full" for d in shown["diagnoses"])


# ------------------------------------------------------------------ item 14: preflight
def _png(path: Path, colour=(200, 30, 30), size=64) -> Path:
    from PIL import Image

    path.parent.mkdir(parents=True, exist_ok=True)
    Image.new("RGB", (size, size), colour).save(path)
    return path


def _image_dataset(folder: Path, n: int = 3) -> Path:
    rows = ["image,prompt"]
    for i in range(n):
        _png(folder / f"i{i}.png", (40 * i, 90, 200))
        (folder / f"i{i}.txt").write_text(f"picture {i}, zlr style")
        rows.append(f"i{i}.png,picture {i} zlr style")
    (folder / "metadata.csv").write_text("\n".join(rows) + "\n")
    return folder


def _frames(n: int, size: int = 32):
    import numpy as np

    return [np.full((size, size, 3), (30 * i) % 255, np.uint8) for i in range(n)]


def _video_cfg(folder: Path, name: str, write) -> RunConfig:
    """A Wan stage-1 run on a dataset of one good clip and ``name`` (made by ``write``)."""
    from backend.core.media import write_video

    folder.mkdir(parents=True)
    write_video(_frames(9), folder / "ok.webm", fps=8)
    write(folder / name)
    (folder / "metadata.csv").write_text(f"video,prompt\nok.webm,a clip\n{name},the other\n")
    return validate({"model_family": "wan", "stages": ["data_process"], "offline": True,
                     "model_id_with_origin_paths": "Wan-AI/Wan2.1-T2V-1.3B-Diffusers",
                     "dataset_base_path": str(folder),
                     "dataset_metadata_path": str(folder / "metadata.csv"),
                     "num_frames": 9, "height": 32, "width": 32})


EDIT_SOURCES = ("Qwen/Qwen-Image-Edit-2509:transformer/diffusion_pytorch_model*.safetensors,"
                "Qwen/Qwen-Image-Edit-2509:text_encoder/model*.safetensors,"
                "Qwen/Qwen-Image-Edit-2509:vae/diffusion_pytorch_model.safetensors")


def _edit_cfg(folder: Path, row: dict, models: Path) -> RunConfig:
    """A Qwen-Image-Edit-2509 stage-1 run on one good row and ``row``."""
    import json

    for name in ("t0.png", "t1.png", "a.png", "b.png"):
        _png(folder / name)
    (folder / "zero.png").write_bytes(b"")
    rows = [{"image": "t0.png", "edit_image": "a.png", "prompt": "make it blue"},
            {"image": "t1.png", "prompt": "make it red", **row}]
    (folder / "metadata.json").write_text(json.dumps(rows))
    return validate({"stages": ["data_process"], "offline": True, "models_dir": str(models),
                     "model_id_with_origin_paths": EDIT_SOURCES,
                     "dataset_base_path": str(folder),
                     "dataset_metadata_path": str(folder / "metadata.json"),
                     "extra_inputs": "edit_image", "data_file_keys": "image,edit_image",
                     "max_pixels": 4096})


def _stage_records(cfg: RunConfig):
    """The records stage 1 (or one-shot training) checks ``cfg``'s dataset into, by the
    checks it runs before any model (clips; else images, then an edit model's inputs),
    decoding in full as the stage does."""
    from backend.data.dataset import check_dataset, check_input_images
    from backend.families import get_family
    from backend.data.video import check_video_dataset

    family = get_family(cfg.model_family).for_config(cfg)
    if family.media == "video":
        return check_video_dataset(cfg)
    return check_input_images(cfg, check_dataset(cfg), family.input_images, family.title)


def _stage1_words(cfg: RunConfig) -> list[str]:
    """What stage 1 itself says of ``cfg``'s dataset."""
    from backend.data.dataset import DatasetError

    with pytest.raises(DatasetError) as e:
        _stage_records(cfg)
    return e.value.problems


def _train_words(cfg: RunConfig, what: str) -> list[str]:
    """What the train stage says of ``validation_samples`` (its own hold_out)."""
    from backend.data.batches import DataOptionError, hold_out

    records = _stage_records(cfg)
    with pytest.raises(DataOptionError) as e:
        hold_out(records, cfg.validation_samples, what)
    return [str(e.value)]


def _sample_words(cfg: RunConfig) -> list[str]:
    """What the sample stage says of a sample-only run (its own plan, before any model)."""
    from backend.training.samples import plan_samples

    with pytest.raises(ConfigError) as e:
        plan_samples(cfg, [])
    return e.value.problems


def _demo(**changes) -> RunConfig:
    return load_preset("cpu_demo").model_copy(update=changes)


def _case(name: str, tmp: Path, models: Path) -> tuple[RunConfig, list[str]]:
    """(a run config with one of the battery's inputs, the words of the stage refusing it)."""
    from backend.core.media import write_video

    data = tmp / "data"
    if name == "corrupt video":
        cfg = _video_cfg(data, "broken.mp4",
                         lambda p: p.write_bytes(b"not a video at all" * 20))
    elif name == "empty video":
        cfg = _video_cfg(data, "empty.webm", lambda p: p.write_bytes(b""))
    elif name == "too-short clip":
        cfg = _video_cfg(data, "short.webm",
                         lambda p: write_video(_frames(5), p, fps=8))
    elif name == "too-short frames folder":
        def frames_folder(p: Path) -> None:
            from PIL import Image
            p.mkdir()
            for i, f in enumerate(_frames(4)):
                Image.fromarray(f).save(p / f"{i:03d}.png")
        cfg = _video_cfg(data, "frames", frames_folder)
    elif name == "edit row without input image":
        cfg = _edit_cfg(data, {}, models)
    elif name == "edit row with too many input images":
        cfg = _edit_cfg(data, {"edit_image": ["a.png", "b.png", "a.png", "b.png"]}, models)
    elif name == "edit row with a zero-byte input image":
        cfg = _edit_cfg(data, {"edit_image": "zero.png"}, models)
    elif name == "zero-byte image":
        _image_dataset(data)
        (data / "i1.png").write_bytes(b"")
        cfg = _demo(dataset_base_path=str(data),
                    dataset_metadata_path=str(data / "metadata.csv"))
    elif name == "zero-byte image, .txt captions":
        _image_dataset(data)
        (data / "i2.png").write_bytes(b"")
        cfg = _demo(dataset_base_path=str(data), dataset_metadata_path=None)
    elif name == ".txt as the metadata file":
        _image_dataset(data)
        cfg = _demo(dataset_base_path=str(data), dataset_metadata_path=str(data / "i0.txt"))
    elif name in ("validation_samples = dataset size", "validation_samples > dataset size"):
        _image_dataset(data)
        n = 3 if "=" in name else 7
        cfg = _demo(dataset_base_path=str(data),
                    dataset_metadata_path=str(data / "metadata.csv"), validation_samples=n)
        return cfg, _train_words(cfg, "sample")
    elif name == "validation_samples = dataset size, one-shot":
        _image_dataset(data)
        cfg = _demo(dataset_base_path=str(data), split_training=False,
                    stages=["train", "sample"],
                    dataset_metadata_path=str(data / "metadata.csv"), validation_samples=3)
        return cfg, _train_words(cfg, "image")
    elif name == "sample stage without a checkpoint":
        cfg = _demo(stages=["sample"])
        return cfg, _sample_words(cfg)
    else:  # pragma: no cover
        raise AssertionError(name)
    return cfg, _stage1_words(cfg)


CASES = ["corrupt video", "empty video", "too-short clip", "too-short frames folder",
         "edit row without input image", "edit row with too many input images",
         "edit row with a zero-byte input image", "zero-byte image",
         "zero-byte image, .txt captions", ".txt as the metadata file",
         "validation_samples = dataset size", "validation_samples > dataset size",
         "validation_samples = dataset size, one-shot", "sample stage without a checkpoint"]


def _same(text: str) -> str:
    """A message without the file descriptor numbers a library puts in it."""
    return re.sub(r"(input: '|name=)\d+", r"\g<1>N", text)


@pytest.fixture
def held(tmp_path):
    """start_run's ``where`` on a real runner whose queue is held by a sleeping run (so a
    run accepted by mistake waits instead of starting stages); sign-in off."""
    from webui import security

    before = security.policy()
    security.configure(False)
    ws = tmp_path / "ws"
    runner = Runner(ws, stop_grace_s=1)
    hold_dir = ws / "runs" / "hold"
    runner.submit_stages([StagePlan("hold", [sys.executable, "-c",
                                             "import time; time.sleep(300)"], {})],
                         hold_dir, "", name="hold")
    try:
        yield SimpleNamespace(runner=runner, workspace=ws, models_dir=None)
    finally:
        for run in runner.list_runs():
            if run["status"] in ("queued", "running"):
                runner.stop(run["id"], wait=True)
        security.configure(before.auth_enabled, before.admins)


@pytest.mark.timeout(600)
@pytest.mark.parametrize("name", CASES)
def test_what_a_stage_would_refuse_is_refused_before_the_run_is_queued(name, held, tmp_path):
    """Each input of the battery that stage 1, the train stage or the sample stage refuses
    after the queue: refused by start_run (the API's and the Run tab's path) with the
    stage's own words, and nothing is queued."""
    from webui import services

    (tmp_path / "models").mkdir()
    cfg, words = _case(name, tmp_path, tmp_path / "models")
    assert words, name
    before = [r["id"] for r in held.runner.list_runs()]
    with pytest.raises(services.Refused) as e:
        services.start_run(held, cfg, None)
    assert [r["id"] for r in held.runner.list_runs()] == before, "a run was queued"
    assert [_same(p) for p in e.value.problems] == [_same(w) for w in words], \
        (e.value.headline, e.value.problems)


@pytest.mark.timeout(600)
def test_a_render_whose_prompts_miss_their_input_images_is_refused_before_the_queue(
        held, tmp_path):
    """The Results tab's render of an edit run: prompts without input images (and no
    dataset rows to take them from) are refused as the sample stage words it, not after
    the job waited in the queue."""
    from backend.training.samples import checked_sample_inputs
    from webui import jobs, services

    cache = tmp_path / "cache"
    cache.mkdir()
    cfg = validate({"stages": ["train"], "offline": True, "models_dir": str(tmp_path),
                    "model_id_with_origin_paths": EDIT_SOURCES,
                    "dataset_base_path": str(cache)})
    run_dir = held.workspace / "runs" / "edit-run"
    rid = held.runner.submit_stages([StagePlan("train", [sys.executable, "-c", "pass"], {})],
                                    run_dir, yaml.safe_dump(cfg.model_dump(mode="json")),
                                    name="edit run")
    (run_dir / "output").mkdir(parents=True, exist_ok=True)
    (run_dir / "output" / "step-1.safetensors").write_bytes(b"\0" * 16)
    run = held.runner.get_run(rid)
    settings = {"sample_prompts": ["make it blue"], "sample_images": []}
    base = {**jobs.run_config(run), **settings, "stages": ["sample"]}
    with pytest.raises(ConfigError) as stage:
        checked_sample_inputs(validate(base))
    before = [r["id"] for r in held.runner.list_runs()]
    with pytest.raises(services.Refused) as e:
        services.render(held, run, settings, ["step-1.safetensors"], None)
    assert [r["id"] for r in held.runner.list_runs()] == before, "a job was queued"
    assert e.value.problems == stage.value.problems
    assert e.value.problems[0].startswith("sample_images: the model renders from input")


def test_preflight_reads_through_the_runs_read_gate(tmp_path):
    """A non-admin's run carries its read roots by the time it is checked: a row naming a
    file outside them reads as missing (as in the stage), never as what it is (an empty
    file there: "cannot identify image file")."""
    from backend.planning import preflight

    own, other = tmp_path / "own", tmp_path / "other"
    _image_dataset(own, 2)
    (other / "secret.png").parent.mkdir(parents=True)
    (other / "secret.png").write_bytes(b"")
    (own / "metadata.csv").write_text(f"image,prompt\ni0.png,mine\n{other / 'secret.png'},x\n")
    cfg = _demo(dataset_base_path=str(own), dataset_metadata_path=str(own / "metadata.csv"),
                read_roots=[str(own), str(REPO / "backend" / "assets")])
    assert preflight.dataset_problems(cfg) == [
        f"metadata.csv row 2: image not found (got {str(other / 'secret.png')!r})"]
    unrestricted = cfg.model_copy(update={"read_roots": None})
    assert "cannot identify image file" in preflight.dataset_problems(unrestricted)[0]


def test_preflight_reads_headers_not_every_frame(tmp_path, monkeypatch):
    """Cheap: a clip of many frames is checked from its packets and its first frame (the
    stage decodes the frames it trains on); an image from its header."""
    import av
    from PIL import Image

    from backend.planning import preflight
    from backend.core.media import write_video

    folder = tmp_path / "clips"
    folder.mkdir()
    write_video(_frames(33), folder / "long.webm", fps=8)
    (folder / "metadata.csv").write_text("video,prompt\nlong.webm,a long clip\n")
    cfg = validate({"model_family": "wan", "stages": ["data_process"], "offline": True,
                    "model_id_with_origin_paths": "Wan-AI/Wan2.1-T2V-1.3B-Diffusers",
                    "dataset_base_path": str(folder),
                    "dataset_metadata_path": str(folder / "metadata.csv"),
                    "num_frames": 33, "height": 32, "width": 32})
    decoded, loaded = [], []
    to_image = av.VideoFrame.to_image
    monkeypatch.setattr(av.VideoFrame, "to_image",
                        lambda self, *a, **k: decoded.append(1) or to_image(self, *a, **k))
    load = Image.Image.load
    monkeypatch.setattr(Image.Image, "load", lambda self: loaded.append(1) or load(self))
    assert preflight.dataset_problems(cfg) == []
    assert len(decoded) == 1, len(decoded)
    assert preflight.dataset_problems(
        cfg.model_copy(update={"num_frames": 37})) == [
        "metadata.csv row 1: too short: 33 frames at 8 fps, 37 needed for num_frames 37 "
        "(frame_stride 1)"]
    images = _image_dataset(tmp_path / "images", 3)
    loaded.clear()
    assert preflight.dataset_problems(_demo(dataset_base_path=str(images),
                                            dataset_metadata_path=None)) == []
    assert not loaded  # headers only: no image was decoded


# ------------------------------------------------------------------ item 12: paths
def test_server_paths_are_written_relative_for_a_non_admin(tmp_path):
    """The surface guard: the checkout, the workspace outside the user's own folders and
    the models folder appear relative; the user's own folders and values they typed stay;
    admins and sign-in off see the text as it is."""
    from webui import security
    from webui.security.paths import REPO_ROOT

    ws, models = tmp_path / "ws", tmp_path / "models"
    (ws / "datasets" / "bob").mkdir(parents=True)
    models.mkdir()
    text = (f"a: {REPO_ROOT}/backend/assets/tiny-qwen-image/transformer/config.json; "
            f"b: {ws}/datasets/carol/x.png; c: {ws}/datasets/bob/mine/y.png; "
            f"d: {models}/Qwen/Qwen-Image/transformer/config.json. e: '/etc' f: {REPO_ROOT}.")
    before = security.policy()
    try:
        security.configure(True, ["alice"])
        shown = security.hide_server_paths(text, "bob", ws, models_dir=str(models))
        assert shown == ("a: backend/assets/tiny-qwen-image/transformer/config.json; "
                         "b: <workspace>/datasets/carol/x.png; "
                         f"c: {ws}/datasets/bob/mine/y.png; "
                         "d: <models folder>/Qwen/Qwen-Image/transformer/config.json. "
                         "e: '/etc' f: ..")
        assert security.hide_server_paths(text, "alice", ws, models_dir=str(models)) == text
        security.configure(False)
        assert security.hide_server_paths(text, None, ws, models_dir=str(models)) == text
    finally:
        security.configure(before.auth_enabled, before.admins)


def test_a_target_module_refusal_names_the_model_file_by_its_place_in_the_models_folder():
    from backend.models.lora import target_module_problems
    from backend.config.paths import REPO_ROOT

    problems = target_module_problems(_demo(lora_target_modules="to_q,nope"))
    assert len(problems) == 1 and problems[0].startswith(
        "lora_target_modules: nope match no Linear layer of the transformer")
    assert problems[0].endswith("module list from tiny-qwen-image/transformer/config.json "
                                "in models_dir)")
    assert str(REPO_ROOT) not in problems[0]


def test_an_import_note_names_no_server_folder(tmp_path):
    from backend.planning.importer import import_commands

    result = import_commands("accelerate launch --config_file gone.yaml train.py "
                             "--task sft:train --deepspeed_config_file gone.json")
    notes = " ".join(result.notes)
    assert "accelerate config 'gone.yaml' not found on this server" in notes, notes
    assert os.getcwd() not in notes and str(REPO) not in notes
    # With a base folder given (the command line's --base_dir), that folder as given.
    result = import_commands("accelerate launch --config_file gone.yaml train.py "
                             "--task sft:train", base_dir="runs/here")
    assert "not found under runs/here" in " ".join(result.notes)


# ------------------------------------------------------------------ through the server
@pytest.fixture(scope="module")
def served(signed_in):
    """The session's signed-in server (conftest ``signed_in``; alice is the admin)."""
    return signed_in


def _client(server, user: str):
    from gradio_client import Client

    from tests.harness.browser import USERS

    return Client(server.url, auth=(user, USERS[user]), analytics_enabled=False,
                  verbose=False, download_files=False)


def _refusal(c, **config) -> str:
    with pytest.raises(Exception) as e:
        c.predict(config=config, preset="cpu_demo", name="", hub_token="",
                  api_name="/start_run")
    return str(e.value)


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_a_non_admin_sees_no_server_paths_in_refusals_and_import_notes(served):
    from tests.harness.browser import Page

    bob = _client(served, "bob")
    runs_before = bob.predict(api_name="/list_runs")
    # The target-module refusal: the model file by its place in the models folder.
    text = _refusal(bob, lora_target_modules="to_q,nope")
    assert "lora_target_modules: nope match no Linear layer" in text, text
    assert "tiny-qwen-image/transformer/config.json in models_dir" in text, text
    assert str(REPO) not in text and str(served.workspace) not in text, text
    # A path the user typed is echoed as typed (rewriting it would tell which of their
    # guesses is a server folder); nothing else of the server shows.
    png = REPO / "backend" / "assets" / "demo_dataset" / "00_red_circle.png"
    text2 = _refusal(bob, dataset_metadata_path=str(png))
    assert f"{png}: unknown metadata format (allowed .csv, .json, .jsonl)" in text2, text2
    rest = text2.replace(str(png), "")
    assert str(REPO) not in rest and str(served.workspace) not in rest, text2
    # What a stage would read, refused at the API before anything is queued.
    own = served.workspace / "datasets" / "bob" / "broken"
    _image_dataset(own, 2)
    (own / "i1.png").write_bytes(b"")
    text3 = _refusal(bob, dataset_base_path=str(own),
                     dataset_metadata_path=str(own / "metadata.csv"))
    assert "metadata.csv row 2: cannot read image i1.png: cannot identify image file " \
           "'i1.png'" in text3, text3
    assert bob.predict(api_name="/list_runs") == runs_before
    # The import box: a note on a missing launch file names no server folder.
    page = Page(served, "bob")
    out = page.call("import-btn", {"import-text": "accelerate launch --config_file gone.yaml "
                                                  "train.py --task sft:train"})
    notes = str(out["import-notes"])
    assert "accelerate config 'gone.yaml' not found on this server" in notes, notes
    assert str(served.cwd) not in notes and str(REPO) not in notes


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_an_admin_importing_a_file_that_is_no_launch_config_gets_the_reason(served, tmp_path):
    from tests.harness.browser import Page

    passwd, binary = _files(tmp_path)
    page = Page(served, "alice")
    for path in (passwd, binary):
        out = page.call("import-btn", {"import-text": f"accelerate launch --config_file "
                                                      f"{path} train.py --task sft:train"})
        notes = str(out["import-notes"])
        assert f"--config_file: not an accelerate config (got {str(path)!r}" in notes, \
            (notes, out["_msg"])
    log = served.log()
    assert "'str' object has no attribute 'get'" not in log and "ReaderError" not in log
