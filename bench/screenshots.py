"""The README's screenshots: every tab of the app after a CPU demo run, in English, and the
Training and Results tabs in Chinese.

Starts the app (``python -m webui``) on a free port with a fresh workspace, opens it in the
system's Chromium (playwright, ``/usr/bin/chromium``; nothing is downloaded), runs the CPU
demo from the Run tab as a new user would, then writes one 1280-wide PNG per tab into the
output folder (default ``docs/screenshots``), each reduced to a 256-colour palette so it
stays small (about 150 KB at most). The Chinese pictures need a CJK font
(``fonts-wqy-microhei``); without one they are skipped.

Run (the demo takes a few minutes on 2 CPU cores):
    python bench/screenshots.py                     # writes docs/screenshots/*.png
    python bench/screenshots.py --out /tmp/shots    # somewhere else
"""
from __future__ import annotations

import argparse
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--no-first-run"]
WIDTH, HEIGHT = 1280, 900
WAIT_MS = 30 * 60 * 1000  # the demo run on a busy machine
# (tab, file name) in English, then the tabs shown in Chinese.
ENGLISH = [("model", "model"), ("dataset", "dataset"), ("training", "training"),
           ("run", "run"), ("results", "results"), ("runs", "runs")]
CHINESE = [("training", "training-zh"), ("results", "results-zh")]
# Where a picture starts (the page scrolled to put it near the top): what the tab is about.
ANCHOR = {"dataset": "#data-msg", "results": "#res-status"}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_app(workspace: Path) -> tuple[subprocess.Popen, str]:
    port = free_port()
    env = dict(os.environ, GRADIO_ANALYTICS_ENABLED="False", HF_HUB_OFFLINE="1",
               HF_HUB_DISABLE_TELEMETRY="1", OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1",
               GRADIO_TEMP_DIR=str(workspace / ".gradio"))
    env.pop("ZEROLORA_MODELS_DIR", None)
    log = open(workspace / "server.log", "wb")
    proc = subprocess.Popen([sys.executable, "-m", "webui", "--workspace", str(workspace),
                             "--port", str(port)], cwd=ROOT, env=env, stdout=log,
                            stderr=subprocess.STDOUT, start_new_session=True)
    url = f"http://127.0.0.1:{port}/"
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit("the app exited at start:\n" +
                             (workspace / "server.log").read_text(errors="replace"))
        try:
            with urllib.request.urlopen(url, timeout=5) as r:
                if r.status == 200:
                    return proc, url
        except OSError:
            time.sleep(0.5)
    proc.kill()
    raise SystemExit("the app did not serve its page within 5 minutes")


def stop_app(proc: subprocess.Popen) -> None:
    os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)


def small_png(path: Path) -> int:
    """Rewrite ``path`` with a 256-colour palette; returns its size in bytes."""
    from PIL import Image

    with Image.open(path) as im:
        pal = im.convert("RGB").quantize(colors=256, method=Image.Quantize.MEDIANCUT)
    pal.save(path, optimize=True)
    return path.stat().st_size


def has_cjk_font() -> bool:
    if not shutil.which("fc-list"):
        return False
    out = subprocess.run(["fc-list", ":lang=zh"], capture_output=True, text=True).stdout
    return bool(out.strip())


def take(page, tab: str, path: Path) -> None:
    from playwright.sync_api import expect

    page.click(f"#tab-{tab}-button")
    expect(page.locator(f"#tab-{tab}-button")).to_have_attribute("aria-selected", "true")
    if tab == "dataset":
        page.wait_for_function("() => document.querySelectorAll('#thumbs img').length > 0",
                               timeout=WAIT_MS)
    if tab == "results":
        page.wait_for_function("() => document.querySelectorAll('#res-grid img').length > 0"
                               " && [...document.querySelectorAll('#res-grid img')]"
                               ".every(i => i.complete)", timeout=WAIT_MS)
    if tab == "runs":
        expect(page.locator("#runs-table")).to_contain_text("succeeded", timeout=WAIT_MS)
    page.wait_for_timeout(1500)  # let the last updates paint
    anchor = page.locator(ANCHOR[tab]) if tab in ANCHOR else None
    if anchor is not None:
        anchor.evaluate("el => window.scrollTo(0, el.getBoundingClientRect().top + "
                        "window.scrollY - 60)")
    else:
        page.evaluate("window.scrollTo(0, 0)")
    page.wait_for_timeout(500)
    page.screenshot(path=str(path))


def main(argv: list[str] | None = None) -> list[tuple[str, int]]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", default=str(ROOT / "docs" / "screenshots"))
    args = parser.parse_args(argv)
    from playwright.sync_api import expect, sync_playwright

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    workspace = Path(tempfile.mkdtemp(prefix="zerolora-screenshots-"))
    proc, url = start_app(workspace)
    written: list[tuple[str, int]] = []
    try:
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            ctx = browser.new_context(locale="en-US", viewport={"width": WIDTH,
                                                                "height": HEIGHT})
            page = ctx.new_page()
            page.set_default_timeout(120_000)
            page.goto(url)
            expect(page.locator("#preset-diff")).to_contain_text("Same as preset",
                                                                 timeout=WAIT_MS)
            page.click("#tab-run-button")
            page.click("#run-start")
            expect(page.locator("#run-current")).to_contain_text("succeeded", timeout=WAIT_MS)
            expect(page.locator("#run-log textarea")).not_to_have_value("", timeout=WAIT_MS)
            page.wait_for_function("() => document.querySelectorAll('#run-samples img')"
                                   ".length >= 1", timeout=WAIT_MS)
            shots = list(ENGLISH)
            for tab, name in shots:
                take(page, tab, out / f"{name}.png")
                written.append((name, small_png(out / f"{name}.png")))
            if has_cjk_font():
                page.click("#lang-zh")
                expect(page.locator("#tab-training-button")).to_contain_text(
                    "训练设置", timeout=WAIT_MS)
                for tab, name in CHINESE:
                    take(page, tab, out / f"{name}.png")
                    written.append((name, small_png(out / f"{name}.png")))
            else:
                print("no CJK font (fonts-wqy-microhei): the Chinese pictures are skipped")
            browser.close()
    finally:
        stop_app(proc)
        shutil.rmtree(workspace, ignore_errors=True)
    for name, size in written:
        print(f"{out / name}.png  {size / 1024:.0f} KB")
    return written


if __name__ == "__main__":
    main()
