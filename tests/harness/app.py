"""The app as a user starts it: ``launch.py`` (``AppServer``) or ``python -m webui``
(``ui_server``), each in a subprocess on a free port with its own workspace."""
from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def port_answers(port: int, host: str = "127.0.0.1") -> bool:
    try:
        with socket.create_connection((host, port), timeout=0.2):
            return True
    except OSError:
        return False


def launcher_env(**extra: str) -> dict[str, str]:
    env = dict(os.environ)
    for k in ("ZEROLORA_WORKSPACE", "ZEROLORA_MODELS_DIR", "ZEROLORA_PORT", "GRADIO_TEMP_DIR",
              "ZEROLORA_BOOTSTRAPPED", "ZEROLORA_VENV"):
        env.pop(k, None)
    env.update({"OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false",
                "PYTHONUNBUFFERED": "1"})
    env.update(extra)
    return env


class AppServer:
    """``launch.py`` in a subprocess; ``url``, ``workspace``, ``log()``; ``stop()`` ends it."""

    def __init__(self, tmp: Path, *args: str, env: dict | None = None,
                 python: list[str] | None = None, wait: bool = True, port: int | None = None):
        self.port = port or free_port()
        self.workspace = tmp / "workspace"
        self.log_path = tmp / f"launch-{self.port}.log"
        self.url = f"http://127.0.0.1:{self.port}"
        argv = [*(python or [sys.executable]), str(ROOT / "launch.py"), "--port",
                str(self.port), "--workspace", str(self.workspace), *args]
        with open(self.log_path, "wb") as log:
            self.proc = subprocess.Popen(argv, cwd=str(tmp), env=env or launcher_env(),
                                         stdout=log, stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL, start_new_session=True)
        if wait:
            self.wait_serving()

    def log(self) -> str:
        return self.log_path.read_text(encoding="utf-8", errors="replace")

    def wait_serving(self, limit_s: float = 180.0) -> None:
        deadline = time.monotonic() + limit_s  # a safety limit, not a timing assertion
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError(f"launch.py exited ({self.proc.returncode}):\n"
                                     f"{self.log()[-4000:]}")
            if "serving at" in self.log():
                return
            time.sleep(0.2)
        raise AssertionError(f"launch.py did not start serving:\n{self.log()[-4000:]}")

    def login(self, user: str, password: str) -> httpx.Client:
        client = httpx.Client(base_url=self.url, timeout=30, trust_env=False)
        r = client.post("/login", data={"username": user, "password": password})
        assert r.status_code == 200, r.text
        return client

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(10)


# Waits, not asserts on time: generous so a busy 2-core machine still gets there.
START_S = 180


def _env(ws: Path) -> dict[str, str]:
    env = dict(os.environ)
    env.update({
        "PYTHONPATH": str(ROOT) + os.pathsep + env.get("PYTHONPATH", ""),
        "GRADIO_ANALYTICS_ENABLED": "False", "HF_HUB_OFFLINE": "1",
        "HF_HUB_DISABLE_TELEMETRY": "1", "TOKENIZERS_PARALLELISM": "false",
        "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1",
        "GRADIO_TEMP_DIR": str(ws / ".gradio"),
    })
    env.pop("ZEROLORA_MODELS_DIR", None)
    return env


SERVER_MEMORY_CAP = 10 * 2**30  # address space; the app normally stays under 1 GB resident


def _cap_memory() -> None:
    """A runaway allocation in the app then raises MemoryError (traceback in server.log)
    instead of the whole machine running out of memory."""
    import resource
    resource.setrlimit(resource.RLIMIT_AS, (SERVER_MEMORY_CAP, SERVER_MEMORY_CAP))


@contextlib.contextmanager
def ui_server(ws: Path):
    """(url, workspace) of ``python -m webui`` started as a user would start it, serving the
    workspace ``ws``; on exit its runs are stopped and the server ends."""
    port = free_port()
    log = open(ws / "server.log", "wb")
    proc = subprocess.Popen([sys.executable, "-X", "faulthandler", "-m", "webui",
                             "--workspace", str(ws), "--port", str(port)], cwd=ROOT,
                            env=_env(ws), stdout=log, stderr=subprocess.STDOUT,
                            start_new_session=True, preexec_fn=_cap_memory)
    url = f"http://127.0.0.1:{port}/"
    deadline = time.monotonic() + START_S
    while True:
        if proc.poll() is not None:
            raise AssertionError("the app exited at start:\n" + (ws / "server.log").read_text())
        try:
            with urllib.request.urlopen(url, timeout=5) as r:
                if r.status == 200:
                    break
        except OSError:
            pass
        if time.monotonic() > deadline:
            proc.kill()
            raise AssertionError("the app did not serve its page:\n" +
                                 (ws / "server.log").read_text())
        time.sleep(0.5)
    try:
        yield url, ws
    finally:
        log.flush()
        text = (ws / "server.log").read_text(errors="replace")
        if proc.poll() is not None or "MemoryError" in text:
            print(f"--- the app server (exit {proc.poll()}) logged:\n{text[-20000:]}")
        stop_runs(ws)
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
        log.close()


def stop_runs(ws: Path) -> None:
    """Stop every run of the workspace ``ws`` that is running or queued, and wait for it."""
    from backend.jobs.runner import Runner

    runner = Runner(ws, auto_start=False)
    for run in runner.list_runs():
        if run["status"] in ("running", "queued"):
            runner.stop(run["id"], wait=True)
