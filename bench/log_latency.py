"""Log latency: a line printed by a running stage -> visible to the app, p50 / p95.

A run is queued with the real runner (``backend.jobs.runner.Runner``, detached supervisor, the
stage's stdout captured into ``logs/<stage>.log``) whose only stage prints
``zl-latency <i> <unix ns>`` every ``--interval`` seconds. Two readers poll it at the same
time, each every ``--poll`` seconds, and note when each line first shows up:

- ``runner``: ``Runner.tail_log(run_id, stage, offset)`` in this process (what the UI's
  log view calls);
- ``ui_api``: the UI server (``python -m webui``, loopback only) through its scripting API,
  ``gradio_client`` calling ``/run_log(run_id, stage, offset)``: HTTP, the queue, the
  ownership check and token redaction included.

Latency = time seen - time printed (same machine clock). The UI's own log view polls on a
timer, so what a person sees adds up to that timer's period on top of these figures.

Run (about a minute):
    python bench/log_latency.py                     # writes bench/results/log_latency.json
    python bench/log_latency.py --no_ui --lines 50 --out /tmp/lat.json
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from bench.results_io import write_result  # noqa: E402

WRITER = ("import sys, time\n"
          "n, dt = int(sys.argv[1]), float(sys.argv[2])\n"
          "time.sleep(1.0)\n"
          "for i in range(n):\n"
          "    print(f'zl-latency {i} {time.time_ns()}', flush=True)\n"
          "    time.sleep(dt)\n")


def percentile(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    k = (len(xs) - 1) * q
    lo, hi = int(k), min(int(k) + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (k - lo)


class Reader:
    """Polls ``fetch(offset) -> (text, offset)`` and records each line's latency."""

    def __init__(self, name: str, fetch, poll: float, expected: int):
        self.name, self.fetch, self.poll, self.expected = name, fetch, poll, expected
        self.latencies: dict[int, float] = {}
        self.errors: list[str] = []
        self._stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        offset, buf = 0, ""
        while not self._stop.is_set() and len(self.latencies) < self.expected:
            try:
                text, offset = self.fetch(offset)
            except Exception as e:  # noqa: BLE001 - a reader error is reported, not fatal
                self.errors.append(f"{type(e).__name__}: {e}")
                time.sleep(self.poll)
                continue
            now = time.time_ns()
            buf += text
            *lines, buf = buf.split("\n")
            for line in lines:
                parts = line.strip().split()
                if len(parts) == 3 and parts[0] == "zl-latency":
                    i, t = int(parts[1]), int(parts[2])
                    self.latencies.setdefault(i, (now - t) / 1e6)
            self._stop.wait(self.poll)

    def stop(self) -> None:
        self._stop.set()
        self.thread.join(timeout=10)

    def summary(self) -> dict:
        xs = list(self.latencies.values())
        out = {"lines_seen": len(xs), "poll_s": self.poll, "errors": self.errors[:3]}
        if xs:
            out.update({"p50_ms": round(percentile(xs, 0.50), 1),
                        "p95_ms": round(percentile(xs, 0.95), 1),
                        "max_ms": round(max(xs), 1), "mean_ms": round(statistics.mean(xs), 1)})
        return out


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_ui(workspace: Path, port: int, timeout: float = 120) -> subprocess.Popen:
    env = dict(os.environ, PYTHONPATH=str(ROOT), GRADIO_ANALYTICS_ENABLED="False",
               HF_HUB_OFFLINE="1", HF_HUB_DISABLE_TELEMETRY="1")
    proc = subprocess.Popen([sys.executable, "-m", "webui", "--workspace", str(workspace),
                             "--port", str(port)], cwd=str(ROOT), env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)
    deadline = time.time() + timeout
    while time.time() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"the UI exited ({proc.returncode})")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return proc
        except OSError:
            time.sleep(0.5)
    proc.terminate()
    raise RuntimeError("the UI did not start listening in time")


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--lines", type=int, default=100)
    parser.add_argument("--interval", type=float, default=0.1, help="seconds between lines")
    parser.add_argument("--poll", type=float, default=0.05, help="readers' poll period (s)")
    parser.add_argument("--no_ui", action="store_true", help="only the runner reader")
    parser.add_argument("--out", default=str(ROOT / "bench/results/log_latency.json"))
    args = parser.parse_args(argv)

    from backend.planning.plan import StagePlan
    from backend.jobs.runner import Runner

    result: dict = {"date": time.strftime("%Y-%m-%d"),
                    "machine": f"{platform.machine()}, {os.cpu_count()} CPU cores (shared)",
                    "lines": args.lines, "interval_s": args.interval, "readers": {}}
    ui = None
    with tempfile.TemporaryDirectory() as tmp:
        workspace = Path(tmp) / "ws"
        workspace.mkdir()
        try:
            client = None
            if not args.no_ui:
                port = free_port()
                ui = start_ui(workspace, port)
                from gradio_client import Client
                client = Client(f"http://127.0.0.1:{port}", analytics_enabled=False,
                                verbose=False)
            runner = Runner(workspace)
            run_dir = workspace / "runs" / "latency"
            run_dir.mkdir(parents=True)
            stage = StagePlan("train", [sys.executable, "-c", WRITER, str(args.lines),
                                        str(args.interval)], {"PYTHONUNBUFFERED": "1"})
            run_id = runner.submit_stages([stage], run_dir, "run_name: latency\n",
                                          name="latency")
            readers = [Reader("runner", lambda off: runner.tail_log(run_id, "train", off),
                              args.poll, args.lines)]
            if client is not None:
                def via_api(off: int):
                    r = client.predict(run_id=run_id, stage="train", offset=off,
                                       api_name="/run_log")
                    return r["text"], int(r["offset"])
                readers.append(Reader("ui_api", via_api, args.poll, args.lines))
            for r in readers:
                r.thread.start()
            run = runner.wait(run_id, timeout=args.lines * args.interval + 120)
            time.sleep(max(0.5, 4 * args.poll))
            for r in readers:
                r.stop()
            result["run_status"] = run["status"]
            for r in readers:
                result["readers"][r.name] = r.summary()
                s = result["readers"][r.name]
                print(f"{r.name:8s} {s['lines_seen']}/{args.lines} lines, p50 "
                      f"{s.get('p50_ms')} ms, p95 {s.get('p95_ms')} ms (poll {args.poll} s)")
        finally:
            if ui is not None:
                import signal
                try:
                    os.killpg(ui.pid, signal.SIGTERM)
                    ui.wait(timeout=20)
                except (ProcessLookupError, subprocess.TimeoutExpired):
                    os.killpg(ui.pid, signal.SIGKILL)
    return write_result(args.out, result)


if __name__ == "__main__":
    main()
