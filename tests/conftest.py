"""The suite's fixtures; the helpers behind them are in ``tests/harness/``.

- ``models_root``: a models folder holding the tiny pipeline as ``Qwen/Qwen-Image/...`` so
  the default ``model_id:glob`` sources resolve offline (``--models_dir models_root``).
- ``tiny_model_dir``: that pipeline folder (hub layout).
- ``demo_dataset``: 4 images 64x64 (coloured shapes) with ``.txt`` captions and a
  ``metadata.csv``.
- ``stage1_cache``: the dataset encoded once by the real stage 1 under ``accelerate launch``.
- ``plain_accelerate_config``: an accelerate YAML without DeepSpeed.
- ``base_loss``: the tiny Qwen-Image transformer's held-out loss on that cache.
- ``server``, ``browser``, ``page``: ``python -m webui`` on a free port (url, workspace), the
  system Chromium, a fresh page of the app.
- ``signed_in``: the API tests' ``launch.py`` with sign-in (``tests.harness.browser.USERS``;
  alice by ``--auth`` and admin, bob and carol from an ``--auth-file``), ``models_root`` as
  its models folder; one per session, each module's runs stopped when it ends.
"""
from __future__ import annotations

from pathlib import Path

import pytest

from tests.harness.stages import (eval_lora_loss, make_dataset, run_stage,
                                  write_accelerate_config)

# Fixtures that start an app server, a browser or DeepSpeed stages: a test that uses one is in
# the slow tier whether or not it says so (the fast tier starts none of them).
SLOW_FIXTURES = {"server", "browser", "served", "signed_in_app", "open_app", "app",
                 "family_runs", "signed_in_server", "signed_in"}


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    for item in items:
        if SLOW_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.slow)


# Modules whose parametrized tests are a work unit per parameter on the test workers instead of
# one for the whole module: their shared fixtures are per parameter (``family_runs`` builds
# each family's model, cache and LoRA on first use), so a family's tests stay together and the
# families spread over the workers, instead of one worker running every family after the other.
SPLIT_BY_PARAMETER = ("tests/test_every_family.py",)


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    """``--dist loadfile`` (tests/run.sh), with ``SPLIT_BY_PARAMETER``'s modules split."""
    if config.getvalue("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling

    class LoadFileSplitScheduling(LoadFileScheduling):
        def _split_scope(self, nodeid: str) -> str:
            module = nodeid.split("::", 1)[0]
            if module in SPLIT_BY_PARAMETER and nodeid.endswith("]") and "[" in nodeid:
                return f"{module}[{nodeid.split('[', 1)[1]}"
            return super()._split_scope(nodeid)

    return LoadFileSplitScheduling(config, log)


@pytest.fixture(scope="session")
def models_root(tmp_path_factory) -> Path:
    from backend.families.qwen_image.tiny import build_tiny_qwen_image

    root = tmp_path_factory.mktemp("models")
    build_tiny_qwen_image(root / "Qwen" / "Qwen-Image", seed=0)
    return root


@pytest.fixture(scope="session")
def tiny_model_dir(models_root) -> Path:
    return models_root / "Qwen" / "Qwen-Image"


@pytest.fixture(scope="session")
def tiny_dir(tiny_model_dir) -> Path:
    """The shared tiny Qwen-Image pipeline, by its short name."""
    return Path(tiny_model_dir)


@pytest.fixture(scope="session")
def demo_dataset(tmp_path_factory) -> Path:
    return make_dataset(tmp_path_factory.mktemp("dataset") / "images")


@pytest.fixture(scope="session")
def launch_stage():
    return run_stage


@pytest.fixture(scope="session")
def plain_accelerate_config(tmp_path_factory) -> Path:
    return write_accelerate_config(tmp_path_factory.mktemp("accel"), "plain")


@pytest.fixture(scope="session")
def stage1_cache(tmp_path_factory, models_root, demo_dataset, plain_accelerate_config) -> Path:
    """The demo dataset cached by stage 1 (text encoder + VAE of the tiny model)."""
    out = tmp_path_factory.mktemp("cache") / "cache"
    proc = run_stage(["--task", "sft:data_process", "--models_dir", models_root,
                      "--offline", "--dataset_base_path", demo_dataset,
                      "--dataset_metadata_path", demo_dataset / "metadata.csv",
                      "--output_path", out], config_file=plain_accelerate_config)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]
    return out


@pytest.fixture(scope="session")
def base_loss(tiny_model_dir, stage1_cache) -> float:
    return eval_lora_loss(tiny_model_dir / "transformer", stage1_cache)


# ------------------------------------------------------------------------- the browser tests
@pytest.fixture(scope="session")
def ui_session_server(tmp_path_factory):
    """One ``python -m webui`` for every browser test of the session (url, workspace)."""
    from tests.harness.app import ui_server

    with ui_server(tmp_path_factory.mktemp("ui-workspace")) as served:
        yield served


@pytest.fixture(scope="module")
def server(ui_session_server):
    """(url, workspace) of the session's app server, started as a user would start it; the
    runs a test module leaves running or queued are stopped when it ends."""
    yield ui_session_server
    from tests.harness.app import stop_runs

    stop_runs(ui_session_server[1])


@pytest.fixture(scope="session")
def signed_in_server(tmp_path_factory, models_root):
    from tests.harness.app import AppServer, launcher_env
    from tests.harness.browser import USERS

    tmp = tmp_path_factory.mktemp("signed-in")
    auth_file = tmp / "users.txt"
    auth_file.write_text("".join(f"{u}:{p}\n" for u, p in USERS.items() if u != "alice"))
    server = AppServer(tmp, "--auth", f"alice:{USERS['alice']}", "--auth-file", str(auth_file),
                       "--admin", "alice", "--models-dir", str(models_root),
                       env=launcher_env(HF_HUB_OFFLINE="", TRANSFORMERS_OFFLINE=""))
    server.cwd = tmp
    yield server
    server.stop()


@pytest.fixture(scope="module")
def signed_in(signed_in_server):
    """The session's signed-in app server (``AppServer``); the runs a module leaves running
    or queued are stopped when it ends."""
    yield signed_in_server
    from tests.harness.app import stop_runs

    stop_runs(signed_in_server.workspace)


@pytest.fixture(scope="session")
def browser():
    """The system Chromium, one for the session; each test opens its own page (context)."""
    pytest.importorskip("playwright.sync_api")
    from playwright.sync_api import sync_playwright

    from tests.harness.browser import CHROMIUM, CHROMIUM_ARGS

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield b
        b.close()


# ------------------------------------------------------------------------------ clips
@pytest.fixture(scope="module")
def wan_data(tmp_path_factory) -> Path:
    """Three clips (webm, mp4, a folder of frames) and a still image, with captions."""
    from tests.harness.clips import make_video_dataset

    return make_video_dataset(tmp_path_factory.mktemp("wan_data") / "clips")


# ---------------------------------------------------------------------------- every family
@pytest.fixture(scope="session")
def family_runs(tmp_path_factory):
    """Per family: the tiny model, a dataset, a stage-1 cache and a trained LoRA, each built
    on first use and shared read-only (tests/harness/families.py)."""
    from tests.harness.families import FamilyRuns

    return FamilyRuns(tmp_path_factory.mktemp("families"))
