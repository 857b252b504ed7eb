"""Tracking (``backend/training/tracking.py``): the metrics of a training run go, from one
function, to TensorBoard, a CSV file, Weights & Biases and SwanLab, each written into the
run's output folder; the reference trainer's ``--enable_wandb_log``, ``--enable_swanlab_log``
and ``--enable_csv_log`` (and ``--enable_tensorboard_log``) are accepted on the stage's
command line and by the importer; the trackers' keys come only from the environment and
never reach a file or a log.

There is no network here: W&B and SwanLab run offline (``wandb_mode`` / ``swanlab_mode``
offline), and their files are read back with W&B's own record schema (the ``.wandb`` file
is a LevelDB-style log of ``wandb_internal_pb2.Record``) and SwanLab's own reader.
"""
from __future__ import annotations

import csv
import struct
import subprocess
import time
from pathlib import Path

import pytest

from backend.config.cli import parse_stage_args
from backend.config.errors import ConfigError
from backend.config.validation import validate
from backend.core import rundir
from backend.core.messages import codes
from backend.planning.importer import import_commands
from backend.planning.plan import plan_run
from backend.training import tracking
from backend.training.loop import StageError
from backend.training.tracking import CSV_COLUMNS, Trackers, check_trackers
from tests.harness.stages import read_progress, stage_env

# Fake keys: what must never reach a file or a log.
WANDB_KEY = "zlwandbkey" + "0123456789abcdef0123456789abcdef"  # 42 characters, as W&B's
SWANLAB_KEY = "zlswanlabkey" + "fedcba9876543210"
TRACKING_FLAGS = ("--enable_tensorboard_log --enable_wandb_log --wandb_project zl-test "
                  "--enable_swanlab_log --swanlab_project zl-test --enable_csv_log")


def offline(**more):
    return validate({"enable_wandb_log": True, "wandb_mode": "offline",
                     "enable_swanlab_log": True, "swanlab_mode": "offline",
                     "enable_csv_log": True, **more}, require_inputs=False)


# ------------------------------------------------------------------------- readers
def wandb_records(run_folder: Path) -> list:
    """The records of W&B's offline run file, parsed with W&B's own schema."""
    from wandb.proto import wandb_internal_pb2 as pb

    (path,) = run_folder.glob("wandb/offline-run-*/run-*.wandb")
    data = path.read_bytes()
    assert data[:4] == b":W&B", data[:7]
    block, pos, chunk, records = 32768, 7, b"", []
    while pos + 7 <= len(data):
        if block - pos % block < 7:  # a block's tail too short for a header: padding
            pos += block - pos % block
            continue
        _crc, length, kind = struct.unpack("<IHB", data[pos:pos + 7])
        if kind == 0:
            break
        chunk += data[pos + 7:pos + 7 + length]
        pos += 7 + length
        if kind in (1, 4):  # a full record, or the last piece of one
            record = pb.Record()
            record.ParseFromString(chunk)
            records.append(record)
            chunk = b""
    return records


def wandb_history(run_folder: Path) -> list[dict[str, str]]:
    """W&B's history rows: {key: its JSON text}."""
    return [{item.key or "/".join(item.nested_key): item.value_json
             for item in r.history.item}
            for r in wandb_records(run_folder) if r.WhichOneof("record_type") == "history"]


def swanlab_records(run_folder: Path) -> list:
    """The records of SwanLab's offline run file, read with SwanLab's own reader."""
    from swanlab.proto.swanlab.record.v1.record_pb2 import Record
    from swanlab.sdk.internal.core_python.store import DataStoreReader

    (path,) = run_folder.glob("swanlab/run-*/run-*.swanlab")
    reader = DataStoreReader()
    reader.open(path)
    out = []
    for data in reader:
        record = Record()
        record.ParseFromString(data)
        out.append(record)
    reader.close()
    return out


def swanlab_scalars(run_folder: Path) -> dict[str, dict[int, float]]:
    out: dict[str, dict[int, float]] = {}
    for r in swanlab_records(run_folder):
        if r.WhichOneof("record_type") == "scalar":
            out.setdefault(r.scalar.key, {})[r.scalar.step] = r.scalar.value.number
    return out


def read_csv(path: Path) -> list[dict[str, str]]:
    with open(path, newline="", encoding="utf-8") as f:
        return list(csv.DictReader(f))


# ------------------------------------------------------------------------- options
def test_the_reference_flags_parse_on_the_stage_command_line(tmp_path):
    cfg, _ = parse_stage_args(["--task", "sft:train", "--dataset_base_path", str(tmp_path),
                               *TRACKING_FLAGS.split(), "--wandb_mode", "offline",
                               "--swanlab_workspace", "team_a"])
    assert (cfg.enable_tensorboard_log, cfg.enable_wandb_log, cfg.enable_swanlab_log,
            cfg.enable_csv_log) == (True, True, True, True)
    assert (cfg.wandb_project, cfg.swanlab_project, cfg.swanlab_workspace) == (
        "zl-test", "zl-test", "team_a")
    defaults = validate({}, require_inputs=False)
    assert defaults.enable_tensorboard_log and not (
        defaults.enable_wandb_log or defaults.enable_swanlab_log or defaults.enable_csv_log)


def test_tracker_names_are_checked_while_the_tracker_is_on():
    with pytest.raises(ConfigError) as e:
        validate({"enable_wandb_log": True, "wandb_project": "team/project",
                  "wandb_entity": "a:b", "enable_swanlab_log": True,
                  "swanlab_project": "my project", "swanlab_workspace": "a b",
                  "offline": True}, require_inputs=False)
    assert e.value.fields() == ["wandb_project", "wandb_entity", "swanlab_project",
                                "swanlab_workspace", "wandb_mode", "swanlab_mode"]
    assert {"validation.rule.wandb_name", "validation.rule.swanlab_project",
            "validation.rule.swanlab_workspace", "validation.rule.tracker_offline"} <= codes(
        e.value.problems)
    assert "'team/project'" in str(e.value) and "不是 `SwanLab` 接受的项目名" in \
        e.value.message.text("zh")
    # Off, a tracker's options are hidden and not checked; offline mode needs no network.
    validate({"wandb_project": "team/project", "swanlab_project": "my project"},
             require_inputs=False)
    offline(offline=True)


def test_the_importer_maps_the_reference_tracking_flags():
    result = import_commands(
        "accelerate launch examples/qwen_image/model_training/train.py --task sft:train "
        "--dataset_base_path ./models/train/cache --lora_rank 8 " + TRACKING_FLAGS)
    assert {k: result.given[k] for k in ("enable_tensorboard_log", "enable_wandb_log",
                                         "wandb_project", "enable_swanlab_log",
                                         "swanlab_project", "enable_csv_log")} == {
        "enable_tensorboard_log": True, "enable_wandb_log": True, "wandb_project": "zl-test",
        "enable_swanlab_log": True, "swanlab_project": "zl-test", "enable_csv_log": True}
    assert not any("log" in line for line in result.not_understood), result.not_understood


def test_a_tracker_without_its_package_is_refused_naming_it(monkeypatch):
    real = tracking.importlib.util.find_spec
    monkeypatch.setattr(tracking.importlib.util, "find_spec",
                        lambda name, *a: None if name == "swanlab" else real(name, *a))
    with pytest.raises(ConfigError) as e:
        check_trackers(offline())
    assert e.value.fields() == ["enable_swanlab_log"]
    assert "pip install swanlab" in str(e.value)
    assert "tracking.package_missing" in codes(e.value.problems)
    check_trackers(offline(enable_swanlab_log=False))


# ------------------------------------------------------------------------- the trackers
def test_every_tracker_gets_the_same_metrics_offline(tmp_path, monkeypatch):
    """``Trackers.log`` is the one place metrics go: TensorBoard, the CSV, W&B and SwanLab
    (offline, in the output folder) all hold the same values; a tracker that fails is
    dropped while the others go on."""
    from PIL import Image

    out = tmp_path / "run" / "output"
    out.mkdir(parents=True)
    trackers = Trackers.start(offline(run_name="demo"), out)
    assert [s.title for s in trackers.sinks] == ["TensorBoard", "CSV", "Weights & Biases",
                                                "SwanLab"]
    for step, loss in ((1, 0.5), (2, 0.25)):
        trackers.log({"train/loss": loss, "train/lr": 1e-3, "train/step_time_s": 0.125}, step)
    trackers.log({"validation/loss": 0.375}, 2)
    image = tmp_path / "p00.png"
    Image.new("RGB", (16, 16), (200, 30, 30)).save(image)
    trackers.log_samples([(image, {"prompt": "a red circle", "prompt_index": 0, "scale": 1.0,
                                   "checkpoint_name": "step-2"})], 2)

    class Broken:
        title, path = "Broken", out

        def log(self, metrics, step):
            raise OSError("gone")

        def close(self):
            pass

    trackers.sinks.append(Broken())
    trackers.log({"train/loss": 0.125, "train/lr": 1e-3, "train/step_time_s": 0.125}, 3)
    assert "Broken" not in [s.title for s in trackers.sinks]
    trackers.close()

    assert [(r["step"], r["loss"], r["val_loss"], r["lr"]) for r in
            read_csv(out / rundir.METRICS_CSV)] == [
        ("1", "0.5", "", "0.001"), ("2", "0.25", "", "0.001"), ("2", "", "0.375", ""),
        ("3", "0.125", "", "0.001")]
    history = wandb_history(out)
    assert [float(h["train/loss"]) for h in history if "train/loss" in h] == [0.5, 0.25, 0.125]
    assert any(h.get("validation/loss") == "0.375" and "sample/prompt_0/_type" in h
               for h in history)
    scalars = swanlab_scalars(out)
    assert scalars["train/loss"] == {1: 0.5, 2: 0.25, 3: 0.125}
    assert scalars["validation/loss"] == {2: 0.375}
    assert any(r.WhichOneof("record_type") == "media" for r in swanlab_records(out))
    assert list((out / rundir.TENSORBOARD).glob("events.out.tfevents.*"))


def test_a_resumed_run_continues_its_tracker_runs(tmp_path):
    """Resume (or a requeued job) starts the trackers again in the same output folder: W&B
    and SwanLab reopen the run ids kept in ``tracker_runs.json`` (offline: a second folder
    with the same id, which ``sync`` sends to the one run); another run gets other ids."""
    import json

    def train(out, steps):
        trackers = Trackers.start(offline(), out)
        for step in steps:
            trackers.log({"train/loss": 1.0 / step, "train/lr": 1e-3}, step)
        trackers.close()

    def ids(out):
        wandb_ids = {p.name.rsplit("-", 1)[1] for p in out.glob("wandb/offline-run-*")}
        swanlab_ids = {p.name.rsplit("-", 1)[1] for p in out.glob("swanlab/run-*")}
        return wandb_ids, swanlab_ids

    out = tmp_path / "run" / "output"
    out.mkdir(parents=True)
    train(out, (1, 2))
    kept = json.loads((out / rundir.TRACKER_RUNS).read_text())
    assert ids(out) == ({kept["wandb"]}, {kept["swanlab"]})
    time.sleep(1.1)  # W&B names an offline run's folder by the second it starts
    train(out, (3, 4))  # the resumed part
    assert len(list(out.glob("wandb/offline-run-*"))) == 2
    assert len(list(out.glob("swanlab/run-*"))) == 2
    assert ids(out) == ({kept["wandb"]}, {kept["swanlab"]})
    assert json.loads((out / rundir.TRACKER_RUNS).read_text()) == kept

    other = tmp_path / "other" / "output"
    other.mkdir(parents=True)
    train(other, (1,))
    assert ids(other)[0].isdisjoint(ids(out)[0]) and ids(other)[1].isdisjoint(ids(out)[1])


def test_a_tracker_that_does_not_start_refuses_the_run(tmp_path, monkeypatch):
    """Online without a key: the library's reason, the option, the key's variable and the
    offline way out, and no key read from anywhere but the environment."""
    monkeypatch.setenv("HOME", str(tmp_path))  # no ~/.netrc login here
    for name in ("WANDB_API_KEY", "WANDB_MODE", "SWANLAB_API_KEY", "SWANLAB_MODE"):
        monkeypatch.delenv(name, raising=False)
    cfg = validate({"enable_tensorboard_log": False, "enable_wandb_log": True},
                   require_inputs=False)
    with pytest.raises(StageError) as e:
        Trackers.start(cfg, tmp_path / "out")
    message = e.value.args[0]
    assert message.code == "tracking.start_failed"
    assert "enable_wandb_log" in message and "WANDB_API_KEY" in message
    assert "wandb_mode" in message.text("zh")


# ------------------------------------------------------------------------- a run
@pytest.mark.slow
@pytest.mark.timeout(600)
def test_a_reference_command_with_tracking_flags_runs_offline_and_keeps_keys_out(
        tmp_path, models_root, stage1_cache):
    """The reference's stage-2 command with the tracking flags, imported, planned and run as
    the runner runs it (its accelerate file, its environment plus the trackers' keys, the
    output to ``logs/train.log``): W&B's and SwanLab's offline runs, the CSV and
    TensorBoard's events are in the run's output folder with the step losses of
    ``progress.jsonl``, the held-out loss and the samples; no key is in any file the run
    wrote (run.yaml, the accelerate and DeepSpeed files, commands.sh, the logs, the
    trackers' own files) nor in the home folder the stage ran with."""
    result = import_commands(
        "accelerate launch examples/qwen_image/model_training/train.py --task sft:train "
        f"--dataset_base_path {stage1_cache} --lora_rank 4 --learning_rate 5e-3 "
        f"--output_path ./models/train/lora {TRACKING_FLAGS}")
    data = result.config.to_dict()
    del data["model_id_with_origin_paths"]  # the family's sources: samples need them all
    data.update(models_dir=str(models_root), offline=True, mixed_precision="no",
                stages=["train"], max_train_steps=4, save_steps=2, seed=0,
                validation_samples=1, wandb_mode="offline", swanlab_mode="offline",
                sample_every_n_steps=4, sample_prompts=["a red circle"], sample_steps=2,
                sample_height=64, sample_width=64, sample_lora_scales=[1.0],
                run_name="tracked")
    cfg = validate(data)
    run = tmp_path / "runs" / "tracked"
    (plan,) = plan_run(cfg, run, cuda=False)
    zero = plan_run(validate({**data, "zero_stage": 2}), tmp_path / "runs" / "zero2",
                    cuda=False)
    assert zero and (tmp_path / "runs" / "zero2" / "deepspeed_train.json").is_file()
    home = tmp_path / "home"
    home.mkdir()
    env = stage_env({**plan.env, "HOME": str(home), "WANDB_API_KEY": WANDB_KEY,
                     "SWANLAB_API_KEY": SWANLAB_KEY})
    (run / "logs").mkdir()
    with open(run / "logs" / "train.log", "w", encoding="utf-8") as logf:
        proc = subprocess.run(plan.argv, env=env, stdout=logf, stderr=subprocess.STDOUT,
                              timeout=500, cwd=str(run))
    logged = (run / "logs" / "train.log").read_text(encoding="utf-8")
    assert proc.returncode == 0, logged[-6000:]

    out = run / "output"
    events = read_progress(run / "progress.jsonl")
    steps = [e for e in events if e["event"] == "step"]
    vals = [e for e in events if e["event"] == "validation"]
    assert [e["step"] for e in steps] == [1, 2, 3, 4] and vals
    rows = read_csv(out / rundir.METRICS_CSV)
    assert set(rows[0]) == {"step", *CSV_COLUMNS.values()}
    train_rows = [r for r in rows if r["loss"]]
    assert [int(r["step"]) for r in train_rows] == [1, 2, 3, 4]
    assert [round(float(r["loss"]), 6) for r in train_rows] == [e["loss"] for e in steps]
    assert [float(r["lr"]) for r in train_rows] == [e["lr"] for e in steps]
    assert all(float(r["step_time_s"]) > 0 for r in train_rows)
    assert [(int(r["step"]), round(float(r["val_loss"]), 6)) for r in rows if r["val_loss"]] \
        == [(e["step"], e["val_loss"]) for e in vals]

    history = wandb_history(out)
    assert [round(float(h["train/loss"]), 6) for h in history if "train/loss" in h] == \
        [e["loss"] for e in steps]
    assert any("validation/loss" in h for h in history)
    assert any("sample/prompt_0/_type" in h for h in history)
    run_record = next(r.run for r in wandb_records(out) if r.WhichOneof("record_type") == "run")
    assert (run_record.project, run_record.display_name) == ("zl-test", "tracked")
    scalars = swanlab_scalars(out)
    assert {s: round(v, 6) for s, v in scalars["train/loss"].items()} == {
        e["step"]: e["loss"] for e in steps}
    assert set(scalars["validation/loss"]) == {e["step"] for e in vals}
    assert {"train/lr", "train/step_time_s"} <= set(scalars)
    assert list((out / rundir.TENSORBOARD).glob("events.out.tfevents.*"))
    assert "wandb sync" in logged and "swanlab sync" in logged
    assert not [p for p in run.rglob("*") if p.is_symlink()]  # a run folder can move

    written = [p for p in (tmp_path / "runs").rglob("*") if p.is_file()]
    written += [p for p in home.rglob("*") if p.is_file()]
    assert {run / "run.yaml", run / "accelerate_train.yaml", run / "commands.sh",
            run / "logs" / "train.log"} <= set(written)
    for key in (WANDB_KEY, SWANLAB_KEY):
        leaked = [str(p) for p in written if key.encode() in p.read_bytes()]
        assert leaked == [], f"a tracker key was written to {leaked}"


# ------------------------------------------------------------------------- keys of one run
ONLINE_BOTH = {"enable_wandb_log": True, "wandb_mode": "online", "enable_swanlab_log": True,
               "swanlab_mode": "online", "stages": ["train"]}
# A stage that says whether each key it was handed is the one typed (by its digest: the
# argv is kept in the job database, a key never is).
KEY_PROBE = (
    "import hashlib, os\n"
    "for name, digest in (('WANDB_API_KEY', {w!r}), ('SWANLAB_API_KEY', {s!r})):\n"
    "    got = hashlib.sha256(os.environ.get(name, '').encode()).hexdigest()\n"
    "    print(name, 'given' if got == digest else 'absent', flush=True)\n")


@pytest.fixture
def hosted(monkeypatch):
    """Sign-in on, alice the admin; the server's own keys and tracker modes unset."""
    from webui import security

    for name in ("WANDB_API_KEY", "SWANLAB_API_KEY", "WANDB_MODE", "SWANLAB_MODE"):
        monkeypatch.delenv(name, raising=False)
    security.configure(auth_enabled=True, admins=["alice"])
    yield
    security.configure(auth_enabled=False)


def test_a_users_tracker_keys_reach_their_runs_stages_and_no_file_or_log(tmp_path, hosted):
    """Keys typed for a run reach its stage's environment (the one the run's supervisor
    builds) and appear in no file of the workspace: run.yaml, the accelerate file,
    commands.sh, the job database, the supervisor's and the stage's logs."""
    import hashlib
    import sys

    from backend.jobs.runner import Runner, StagePlan
    from webui import services

    ws = tmp_path / "ws"
    cfg = validate({**ONLINE_BOTH, "dataset_base_path": str(ws / "cache")},
                   require_inputs=False)
    env, problems = services.tracker_env(cfg, "bob", {"wandb_key": f" {WANDB_KEY} ",
                                                      "swanlab_key": SWANLAB_KEY})
    assert problems == [] and env == {"WANDB_API_KEY": WANDB_KEY,
                                      "SWANLAB_API_KEY": SWANLAB_KEY}
    run = ws / "runs" / "keyed"
    (plan,) = plan_run(cfg, run, cuda=False)
    probe = KEY_PROBE.format(w=hashlib.sha256(WANDB_KEY.encode()).hexdigest(),
                             s=hashlib.sha256(SWANLAB_KEY.encode()).hexdigest())
    runner = Runner(ws)
    rid = runner.submit_stages([StagePlan("train", [sys.executable, "-c", probe], plan.env)],
                               run, (run / "run.yaml").read_text(encoding="utf-8"),
                               owner="bob", secret_env=env)
    assert runner.wait(rid, timeout=120)["status"] == "succeeded"
    logged = runner.tail_log(rid, "train", 0)[0]
    assert "WANDB_API_KEY given" in logged and "SWANLAB_API_KEY given" in logged, logged
    assert runner.get_run(rid)["secret_keys"] == ["SWANLAB_API_KEY", "WANDB_API_KEY"]

    written = [p for p in ws.rglob("*") if p.is_file()]
    assert {run / "run.yaml", run / "accelerate_train.yaml", run / "commands.sh",
            run / "logs" / "train.log", ws / "zerolora.sqlite"} <= set(written), written
    for key in (WANDB_KEY, SWANLAB_KEY):
        leaked = [str(p) for p in written if key.encode() in p.read_bytes()]
        assert leaked == [], f"a tracker key was written to {leaked}"


def test_a_hosted_user_without_their_own_key_is_refused_naming_the_field(tmp_path, hosted):
    """An online tracker logs to the account of the key: a signed-in user who is not an
    admin gives their own (the refusal names ``wandb_key`` / ``swanlab_key``, and says a
    resumed run needs it again); an admin, the one local user and offline trackers use the
    server's environment; a run that does not train tracks nothing."""
    from types import SimpleNamespace

    from backend.core.messages import Msg
    from backend.jobs.runner import Runner
    from webui import security, services

    cfg = validate(dict(ONLINE_BOTH), require_inputs=False)
    ws = tmp_path / "ws"
    where = SimpleNamespace(runner=Runner(ws), workspace=ws, models_dir=None)
    with pytest.raises(services.Refused) as e:
        services.start_run(where, cfg, "bob", tracker_keys={"swanlab_key": ""})
    named = {p.params["field"]: p.params["problem"].code for p in e.value.problems
             if isinstance(p, Msg) and p.code == "validation.field_problem"}
    assert {k: v for k, v in named.items() if k.endswith("_key")} == {
        "wandb_key": "tracking.own_key", "swanlab_key": "tracking.own_key"}, e.value
    assert "wandb_key: Weights & Biases logs online" in str(e.value)
    assert where.runner.list_runs() == []
    # one key given: only the other is asked for
    env, problems = services.tracker_env(cfg, "bob", {"wandb_key": WANDB_KEY})
    assert env == {"WANDB_API_KEY": WANDB_KEY}
    assert [p.params["field"] for p in problems] == ["swanlab_key"]
    # resuming a saved run: the key again
    saved = cfg.to_dict()
    _, problems = services.tracker_env(saved, "bob", {}, resume=True)
    assert [p.params["problem"].code for p in problems] == ["tracking.key_again"] * 2
    # offline needs no key; admins and the local user fall back to the server's environment
    offline_cfg = validate({**ONLINE_BOTH, "wandb_mode": "offline", "swanlab_mode": "offline"},
                           require_inputs=False)
    assert services.tracker_env(offline_cfg, "bob", {}) == ({}, [])
    assert services.tracker_env({**saved, "stages": ["sample"]}, "bob", {}) == ({}, [])
    assert services.tracker_env(cfg, "alice", {}) == ({}, [])
    security.configure(auth_enabled=False)
    assert services.tracker_env(cfg, None, {}) == ({}, [])
