"""launch.py: safe defaults, refusals before binding, sign-in, share offline, bootstrap.

Every test starts the real launcher as a subprocess (its own temp workspace, a free port)
and looks at what a person sees: the exit status and message, whether the port answers,
the login wall. ``AppServer`` is shared with the security and API tests.
"""
from __future__ import annotations

import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest

import launch
from tests.harness.app import AppServer, free_port, launcher_env, port_answers

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.timeout(300)



def run_refused(tmp_path: Path, *args: str) -> tuple[int, str, bool]:
    """Run launch.py expecting a refusal; returns (exit code, output, port was ever bound)."""
    port = free_port()
    bound = []
    proc = subprocess.Popen(
        [sys.executable, str(ROOT / "launch.py"), "--port", str(port), "--workspace",
         str(tmp_path / "ws"), *args], cwd=str(tmp_path), env=launcher_env(),
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)

    def watch():
        while proc.poll() is None:
            for host in ("127.0.0.1", socket.gethostbyname(socket.gethostname())):
                if port_answers(port, host):
                    bound.append(host)
            time.sleep(0.02)
    t = threading.Thread(target=watch)
    t.start()
    out, _ = proc.communicate(timeout=120)
    t.join()
    return proc.returncode, out, bool(bound) or port_answers(port)


# ------------------------------------------------------------------------- refusals
@pytest.mark.parametrize("args, needle", [
    (["--host", "0.0.0.0"], "--host 0.0.0.0 would let other machines reach the app"),
    (["--host", "::"], "--host :: would let other machines"),
    (["--host", "192.168.1.20"], "--host 192.168.1.20 would let"),
    (["--share"], "--share makes a public link"),
])
def test_exposed_without_sign_in_exits_before_binding(tmp_path, args, needle):
    code, out, bound = run_refused(tmp_path, *args)
    assert code == launch.EXIT_UNSAFE, out
    assert "refusing to start" in out and needle in out
    # It says what to pass.
    assert "--auth USER:PASS" in out and "--auth-file" in out and "--insecure" in out
    assert not bound
    assert not (tmp_path / "ws").exists()  # nothing created either


@pytest.mark.parametrize("args, needle", [
    (["--admin", "alice"], "--admin: needs sign-in"),
    (["--auth", "alice:pw", "--admin", "mallory"], "--admin: not a user"),
    (["--auth", "alice-no-colon-hunter2"], "expected user:password"),
    (["--auth", "alice:"], "empty password"),
    (["--auth-file", "/nonexistent/users.txt"], "--auth-file: cannot read"),
    (["--root-path", "zerolora"], "--root-path: a URL path starting with /"),
])
def test_bad_sign_in_settings_are_refused_without_echoing_passwords(tmp_path, args, needle):
    code, out, bound = run_refused(tmp_path, *args)
    assert code != 0 and needle in out, out
    assert "hunter2" not in out and not bound


def test_loopback_rules():
    assert launch.is_loopback("127.0.0.1") and launch.is_loopback("localhost")
    assert launch.is_loopback("::1") and launch.is_loopback("127.0.0.2")
    for host in ("0.0.0.0", "::", "10.0.0.1", "example.org", ""):
        assert not launch.is_loopback(host)
    assert launch.exposure_problem("0.0.0.0", False, True, False) is None
    assert launch.exposure_problem("0.0.0.0", False, False, True) is None
    assert launch.exposure_problem("127.0.0.1", False, False, False) is None


# ------------------------------------------------------------------------- bootstrap
def test_bootstrap_installs_cpu_torch_first_as_argv_lists(tmp_path):
    py = tmp_path / ".venv" / "bin" / "python"
    cpu = launch.install_commands(py, cpu_only=True)
    assert all(isinstance(c, list) and all(isinstance(a, str) for a in c) for c in cpu)
    assert [c[3:] for c in cpu] == [["install", "--upgrade", "pip"], ["install", "torch==2.13.0"],
                                    ["install", "-r", str(ROOT / "requirements.txt")]]
    assert all(c[:3] == [str(py), "-m", "pip"] for c in cpu)
    gpu = launch.install_commands(py, cpu_only=False)
    assert not any("torch==2.13.0" in c for c in gpu)
    # The pinned CPU build satisfies requirements.txt's torch range (nothing more is pulled).
    req = next(l for l in (ROOT / "requirements.txt").read_text().splitlines()
               if l.startswith("torch"))
    from packaging.specifiers import SpecifierSet
    assert "2.13.0" in SpecifierSet(req[len("torch"):].strip())


def test_without_the_packages_and_no_bootstrap_it_says_what_to_install(tmp_path):
    # -S: no site-packages, as on a fresh machine.
    proc = subprocess.run([sys.executable, "-S", str(ROOT / "launch.py"), "--no-bootstrap",
                           "--workspace", str(tmp_path / "ws")], env=launcher_env(),
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 1
    assert "missing Python packages" in proc.stderr and "gradio" in proc.stderr
    assert "pip install torch==2.13.0" in proc.stderr and "-r requirements.txt" in proc.stderr


def test_hash_password_prints_a_line_for_the_auth_file(tmp_path):
    proc = subprocess.run([sys.executable, str(ROOT / "launch.py"), "--hash-password", "dana"],
                          input="s3cret pass\n", env=launcher_env(), capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    line = proc.stdout.strip()
    assert line.startswith("dana:pbkdf2_sha256$") and "s3cret" not in line
    creds = launch.security.Credentials()
    creds.add(*launch.security.parse_auth_line(line, "test"))
    assert creds.check("dana", "s3cret pass") and not creds.check("dana", "s3cret")


# ------------------------------------------------------------------------- serving
class Trap:
    """A stand-in proxy that records every outbound connection attempt and refuses it."""

    def __init__(self):
        import socketserver
        trap = self
        self.seen: list[str] = []

        class Handler(socketserver.StreamRequestHandler):
            def handle(self):
                trap.seen.append(self.rfile.readline(4096).decode("latin-1").strip())
                self.wfile.write(b"HTTP/1.1 502 Bad Gateway\r\nContent-Length: 0\r\n\r\n")

        self.server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def env(self) -> dict[str, str]:
        proxies = {k: self.url for k in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy",
                                         "https_proxy", "all_proxy")}
        return launcher_env(**proxies, NO_PROXY="127.0.0.1,localhost", no_proxy="127.0.0.1,"
                            "localhost", HF_HUB_OFFLINE="", TRANSFORMERS_OFFLINE="")

    def close(self):
        self.server.shutdown()
        self.server.server_close()


def listening_addresses(pid: int, port: int) -> set[str]:
    import psutil
    return {c.laddr.ip for c in psutil.Process(pid).net_connections(kind="inet")
            if c.status == psutil.CONN_LISTEN and c.laddr.port == port}


@pytest.mark.slow
def test_default_is_local_offline_and_light(tmp_path):
    trap = Trap()
    app = AppServer(tmp_path, env=trap.env())
    try:
        anon = httpx.Client(base_url=app.url, timeout=30, trust_env=False)
        assert anon.get("/config").status_code == 200  # no sign-in on this machine only
        assert anon.get("/").status_code == 200
        # Bound to loopback only.
        assert listening_addresses(app.proc.pid, app.port) == {"127.0.0.1"}
        # No analytics, no version check, no hub: nothing tried to leave the machine.
        time.sleep(2)
        assert trap.seen == []
        # Nothing heavy at start-up: torch is not loaded into the UI process.
        maps = Path(f"/proc/{app.proc.pid}/maps").read_text()
        assert "libtorch" not in maps and "torch/_C" not in maps
        # gradio's file cache is private to this user, inside the workspace.
        cache = app.workspace / ".gradio"
        assert cache.is_dir() and (cache.stat().st_mode & 0o777) == 0o700
        assert "serving at http://127.0.0.1:" in app.log()
    finally:
        app.stop()
        trap.close()


@pytest.mark.slow
def test_share_without_internet_keeps_serving_locally_with_sign_in(tmp_path):
    trap = Trap()  # stands in for "no internet": every outbound attempt is refused
    line = subprocess.run([sys.executable, str(ROOT / "launch.py"), "--hash-password", "erin"],
                          input="erin's password\n", capture_output=True, text=True,
                          env=launcher_env(), timeout=60).stdout.strip()
    users = tmp_path / "users.txt"
    users.write_text(line + "\n")
    app = AppServer(tmp_path, "--share", "--auth-file", str(users), env=trap.env())
    try:
        log = app.log()
        assert "could not create a public share link" in log
        assert f"keeps serving locally at http://127.0.0.1:{app.port}/" in log
        assert trap.seen, "the share attempt should have tried to reach the internet"
        anon = httpx.Client(base_url=app.url, timeout=30, trust_env=False)
        assert anon.get("/config").status_code == 401
        assert anon.post("/login", data={"username": "erin", "password": "nope"}
                         ).status_code != 200
        erin = app.login("erin", "erin's password")
        assert erin.get("/config").status_code == 200
        assert "erin's password" not in log and line.split(":", 1)[1] not in log
    finally:
        app.stop()
        trap.close()


@pytest.mark.slow  # a process of its own that loads the model libraries
def test_insecure_open_listen_behind_a_proxy_path(tmp_path):
    app = AppServer(tmp_path, "--host", "0.0.0.0", "--insecure", "--root-path", "/zerolora",
                    "--lang", "zh")
    try:
        assert "WARNING: --insecure" in app.log()
        assert listening_addresses(app.proc.pid, app.port) == {"0.0.0.0"}
        config = httpx.get(f"{app.url}/config", timeout=30, trust_env=False).json()
        assert config["root"].endswith("/zerolora")
    finally:
        app.stop()


@pytest.mark.slow  # a process of its own that loads the model libraries
def test_fresh_interpreter_reexecs_inside_the_venv(tmp_path):
    # -S: this interpreter sees no packages; the launcher finds the venv that has them
    # (ZEROLORA_VENV; nothing to install) and restarts itself there.
    venv = Path(sys.prefix)
    assert (venv / "bin" / "python").exists()
    app = AppServer(tmp_path, python=[sys.executable, "-S"],
                    env=launcher_env(ZEROLORA_VENV=str(venv)))
    try:
        log = app.log()
        assert f"starting inside {venv}" in log and "running: " not in log
        assert httpx.get(f"{app.url}/config", timeout=30, trust_env=False).status_code == 200
    finally:
        app.stop()
