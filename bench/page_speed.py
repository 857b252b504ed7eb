"""How fast the page answers: from an action in the browser to a form that takes input.

Starts the app as a user does (``launch.py``, loopback only, a fresh temporary workspace) and
drives it in the system's Chromium (playwright, ``/usr/bin/chromium``; nothing is
downloaded). Each scenario runs ``--reps`` times:

- ``open page``: a new browser window opens the app (the first one after the start is
  reported on its own: the server loads the planner and the estimator then);
- ``preset <name>``: pick the preset on the Model tab, wait for "Loaded preset", open the
  Training tab; the presets one after the other on one page, as a person trying them
  would (the first one replaces the page's initial ``cpu_demo``);
- ``tab Training (first visit)``, ``tab Training → Model``, ``tab Model → Training``;
- ``edit lora_rank + Tab``: type a new LoRA rank on the Training tab and leave the field;
- ``switch model family``: set another model family on the Model tab (wan, z_image,
  flux2_klein by turn), wait for its defaults, open the Training tab.

What is measured, from the action (seconds):

- to "Loaded": the preset message says the preset is loaded (a family switch: the Model
  tab shows the new family's defaults);
- to usable field: the scenario's field (``#field-lora_rank``; ``#preset`` after opening
  the page or going to the Model tab) is on screen, enabled, under no pending overlay and
  hit by a click at its centre, and stays so until the page settles; a preset pick then
  types a value into it and checks that the value stays (``fill_sticks``);
- to estimate: the memory estimate (``#estimate``) shows its final text, not pending;
- settled: the last change of the page before it stayed still for a second with no event
  pending.

The page records these itself (a MutationObserver, checked once per frame), on the same
clock as the server. The server runs with ``ZEROLORA_EVENT_TIMES`` (``webui/timing.py``:
each event handler's time) and ``GRADIO_PROFILING=1`` (gradio's own time per event:
queueing, reading the inputs, writing the outputs). Each time window (action → usable
field, action → settled) is split into server time (a handler running), gradio time
(gradio's own work around the handlers, queue included) and browser time (neither: the
page rendering and running its scripts, and the network).

The JSON holds every sample and, per scenario, median and max; the Markdown next to it
the two tables, also printed.

Run it before and after a change, on the same machine (about 7 minutes on 2 CPU cores at
the default 2 repetitions):
    python -m bench.page_speed --label before      # bench/results/page_speed-before.{json,md}
    python -m bench.page_speed --label after
    python -m bench.page_speed --reps 1 --presets cpu_demo --out /tmp/page_speed.json
    python -m bench.page_speed --keep /tmp/ps      # also the server's log and event times
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from urllib.parse import urlparse

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from bench.results_io import write_result  # noqa: E402
from tests.harness.app import AppServer, launcher_env  # noqa: E402
from tests.harness.browser import CHROMIUM, CHROMIUM_ARGS  # noqa: E402

PRESETS = ("z_image_low_vram", "qwen_image_low_vram", "wan_1_3b_12gb", "cpu_demo")
FAMILIES = ("wan", "z_image", "flux2_klein")  # targets of the family switch, by turn
RANKS = (16, 24, 12)  # lora_rank typed by the edit, by turn
WAIT_S = 180  # a safety limit on every wait, not a measurement
STALL_S = 90  # no event finished for this long: stop waiting for the server
QUIET_MS = 1000  # the page counts as settled after this long unchanged with nothing pending
VIEWPORT = {"width": 1400, "height": 1000}

# The page's own record of what the user sees (installed before the app's scripts run).
# ``arm(cfg)`` starts a scenario: ``cfg.usable`` {key: field selector}, ``cfg.text`` {sel,
# needle}, ``cfg.estimate`` (selector). Each frame in which the page changed, every watched
# value is computed again and each change is logged with its time (Date.now(), ms).
RECORDER = r"""
(() => {
  if (window.__zlBench) return;
  const Z = window.__zlBench = {log: [], state: {}, cfg: null, t0: 0, lastMut: Date.now()};
  const busy = t => !t.classList.contains('hide') || t.textContent.trim() !== '';
  const shown = el => !!el && (el.checkVisibility ? el.checkVisibility() : !!el.offsetParent);
  const hash = s => { let h = 0; for (let i = 0; i < s.length; i++) h = (h * 31 + s.charCodeAt(i)) | 0; return h; };
  function usable(sel) {
    const box = document.querySelector(sel);
    const input = box && box.querySelector('input, textarea');
    if (!input || input.disabled || input.readOnly || !shown(input)) return false;
    const tracker = box.querySelector('[data-testid=status-tracker]');
    if (tracker && busy(tracker)) return false;
    let r = input.getBoundingClientRect();
    if (r.top < 0 || r.bottom > innerHeight) {
      input.scrollIntoView({block: 'center'});
      r = input.getBoundingClientRect();
    }
    const hit = document.elementFromPoint(r.left + r.width / 2, r.top + r.height / 2);
    return !!hit && (hit === input || input.contains(hit) ||
                     (box.contains(hit) && !(tracker && tracker.contains(hit))));
  }
  function estimate(sel) {
    const box = document.querySelector(sel);
    if (!box) return null;
    const md = box.querySelector('[data-testid=markdown]');
    const tracker = box.querySelector('[data-testid=status-tracker]');
    const text = shown(md) ? md.textContent.trim() : '';
    return `${text.length}:${hash(text)}:${tracker && busy(tracker) ? 'pending' : 'idle'}`;
  }
  function check() {
    Z.scheduled = false;
    const c = Z.cfg;
    if (!c) return;
    const now = Date.now(), values = {};
    for (const [k, sel] of Object.entries(c.usable || {})) values['usable:' + k] = usable(sel);
    if (c.text) {
      const el = document.querySelector(c.text.sel);
      values.loaded = !!el && el.textContent.includes(c.text.needle);
    }
    if (c.estimate) values.estimate = estimate(c.estimate);
    for (const [k, v] of Object.entries(values)) {
      if (Z.state[k] !== v) { Z.state[k] = v; Z.log.push({t: now, k, v}); }
    }
  }
  const schedule = () => { if (!Z.scheduled) { Z.scheduled = true; requestAnimationFrame(check); } };
  new MutationObserver(() => { Z.lastMut = Date.now(); schedule(); })
    .observe(document, {subtree: true, childList: true, attributes: true, characterData: true});
  Z.arm = cfg => { Z.cfg = cfg; Z.log = []; Z.state = {}; Z.t0 = Date.now(); check(); };
  Z.settled = quiet => Date.now() - Z.lastMut >= quiet &&
    ![...document.querySelectorAll('[data-testid=status-tracker]')].some(busy);
  Z.arm({usable: {preset: '#preset'}});
})();
"""


# ---------------------------------------------------------------------- the page
class Bench:
    """The app's URL, the browser, and how many events the pages have sent to its queue
    (to know when the server has finished them all)."""

    def __init__(self, browser, url: str, say):
        self.browser, self.url, self.say = browser, url, say
        self.joined = 0
        self.samples: dict[str, list[dict]] = {}

    def add(self, name: str, sample: dict) -> None:
        self.samples.setdefault(name, []).append(sample)
        self.say(f"{name} #{len(self.samples[name])}: " + ", ".join(
            f"{k[:-2]} {sample[k]:.2f}" for k in ("loaded_s", "usable_s", "estimate_s",
                                                    "settled_s") if sample.get(k) is not None)
            + (f" ({sample['error']})" if sample.get("error") else ""))

    def _count(self, request) -> None:
        if request.method == "POST" and urlparse(request.url).path.endswith("/queue/join"):
            self.joined += 1

    def server_idle(self) -> None:
        """Wait until the server has finished every event the pages sent, also those the
        page has stopped waiting for (a newer one replaced it), so that one scenario's work
        does not run into the next one's measurement."""
        done, since = -1, time.monotonic()
        while True:
            count = _get_json(self.url + "/gradio_api/profiling/summary")["count"]
            if count >= self.joined:
                return
            if count != done:
                done, since = count, time.monotonic()
            elif time.monotonic() - since > STALL_S:
                self.say(f"{self.joined - count} event(s) sent but never finished; going on")
                self.joined = count
                return
            time.sleep(0.25)

    def ready(self, page) -> None:
        settle(page)
        self.server_idle()

    def open_page(self):
        """A new browser window on the app, once the server is idle; (context, page,
        sample of ``open page``)."""
        self.server_idle()
        ctx = self.browser.new_context(locale="en-US", viewport=VIEWPORT)
        ctx.on("request", self._count)
        ctx.add_init_script(RECORDER)
        page = ctx.new_page()
        page.set_default_timeout(WAIT_S * 1000)
        t0 = time.time()
        page.goto(self.url)
        done = time.time()
        _wait_state(page, "usable:preset")
        return ctx, page, _finish(page, t0, done, "preset")


def arm(page, usable: dict[str, str], text: dict | None = None,
        estimate: str | None = None) -> None:
    page.evaluate("cfg => window.__zlBench.arm(cfg)",
                  {"usable": usable, "text": text, "estimate": estimate})


def _wait_state(page, key: str, value=True) -> None:
    page.wait_for_function("([k, v]) => window.__zlBench.state[k] === v", arg=[key, value],
                           polling=50, timeout=WAIT_S * 1000)


def settle(page) -> bool:
    try:
        page.wait_for_function("q => window.__zlBench.settled(q)", arg=QUIET_MS, polling=200,
                               timeout=WAIT_S * 1000)
        return True
    except Exception:  # noqa: BLE001 - a page that never settles is reported, not fatal
        return False


def _finish(page, t0: float, done: float, field: str) -> dict:
    """Wait for the page to settle; the scenario's times from the page's log (``field``:
    the usable field it waits for)."""
    settled = settle(page)
    z = page.evaluate("() => ({log: window.__zlBench.log, state: window.__zlBench.state,"
                      " lastMut: window.__zlBench.lastMut})")
    log = [(e["t"] / 1000, e["k"], e["v"]) for e in z["log"]]
    out = {"t0": t0, "action_s": done - t0, "loaded_s": None, "usable_s": None,
           "estimate_s": None, "settled_s": None}
    loaded = [t for t, k, v in log if k == "loaded" and v is True]
    if loaded:
        out["loaded_s"] = loaded[0] - t0
    if z["state"].get("usable:" + field) is True:
        # usable from the last time it became so, and not before the action itself was done
        since = [t for t, k, v in log if k == "usable:" + field and v is True][-1]
        out["usable_s"] = max(since, done) - t0
    est = [(t, v) for t, k, v in log if k == "estimate"]
    if est and est[-1][1].endswith(":idle") and not est[-1][1].startswith("0:"):
        out["estimate_s"] = max(est[-1][0], done) - t0
    if settled:
        last = [z["lastMut"] / 1000 - t0, done - t0] + [
            out[k] for k in ("loaded_s", "usable_s", "estimate_s") if out[k] is not None]
        out["settled_s"] = max(last)
    else:
        out["error"] = "the page did not settle"
    out["t_end"] = time.time()
    return out


def timed_action(action) -> tuple[float, float]:
    t0 = time.time()
    action()
    return t0, time.time()


# ---------------------------------------------------------------------- scenarios
def option_of(choice: str) -> str:
    """The open drop-down's entry for ``choice``."""
    return f"ul[role=listbox] li[aria-label={json.dumps(choice)}]"


def pick_preset(page, name: str) -> dict:
    """Pick ``name`` (the Model tab shown), wait for "Loaded preset", open the Training
    tab."""
    page.click("#preset input")
    option = page.locator(option_of(name))
    option.wait_for(state="visible")
    arm(page, {"lora_rank": "#field-lora_rank"},
        text={"sel": "#preset-msg [data-testid=markdown]", "needle": f"Loaded preset {name}"},
        estimate="#estimate")
    t0, done = timed_action(option.click)
    _wait_state(page, "loaded")
    page.click("#tab-training-button")
    _wait_state(page, "usable:lora_rank")
    sample = _finish(page, t0, done, "lora_rank")
    sample["fill_sticks"] = fill_sticks(page)
    return sample


def fill_sticks(page) -> bool:
    """Type a new LoRA rank, leave the field; does the value stay once the page settled?"""
    box = page.locator("#field-lora_rank input")
    value = str(int(float(box.input_value() or 0)) + 4)
    box.fill(value)
    box.press("Tab")
    settle(page)
    return box.input_value() == value


def switch_tab(page, tab: str, field: str) -> dict:
    """Open the tab; ``field``: the one that must become usable (lora_rank, preset)."""
    arm(page, {field: "#preset" if field == "preset" else f"#field-{field}"},
        estimate="#estimate" if tab == "training" else None)
    t0, done = timed_action(lambda: page.click(f"#tab-{tab}-button"))
    return _finish(page, t0, done, field)


def edit_rank(page, rank: int) -> dict:
    box = page.locator("#field-lora_rank input")
    arm(page, {"lora_rank": "#field-lora_rank"}, estimate="#estimate")
    t0, done = timed_action(lambda: (box.fill(str(rank)), box.press("Tab")))
    return _finish(page, t0, done, "lora_rank")


def switch_family(page, family: str) -> dict:
    """On the Model tab: set the family (a drop-down or a text box), wait for its defaults
    (the family field out from under its pending overlay), open the Training tab."""
    box = page.locator("#field-model_family input, #field-model_family textarea").first
    arm(page, {"model_family": "#field-model_family", "lora_rank": "#field-lora_rank"},
        estimate="#estimate")
    if box.get_attribute("role") in ("combobox", "listbox"):
        box.click()
        t0, done = timed_action(page.locator(option_of(family)).click)
    else:
        t0, done = timed_action(lambda: (box.fill(family), box.press("Tab")))
    page.wait_for_function(
        "() => { const Z = window.__zlBench, k = 'usable:model_family';"
        " const fell = Z.log.some(e => e.k === k && e.v === false);"
        " return Z.state[k] === true && (fell || Date.now() - Z.t0 > 5000); }",
        polling=50, timeout=WAIT_S * 1000)
    applied = [e["t"] / 1000 for e in page.evaluate("() => window.__zlBench.log")
               if e["k"] == "usable:model_family" and e["v"] is True][-1]
    page.click("#tab-training-button")
    _wait_state(page, "usable:lora_rank")
    sample = _finish(page, t0, done, "lora_rank")
    sample.update(loaded_s=max(applied, done) - t0, family=family)
    return sample


# ---------------------------------------------------------------------- server time
def server_record(url: str, times_path: Path) -> tuple[list[dict], list[dict]]:
    """(handler calls from ``ZEROLORA_EVENT_TIMES``, gradio's per-event traces), each
    {"fn", "start", "end"} (Unix seconds); a trace's start includes its queue wait."""
    calls = []
    for line in times_path.read_text(encoding="utf-8").splitlines():
        r = json.loads(line)
        calls.append({"fn": r["fn"], "id": r["id"], "start": r["start"],
                      "end": r["start"] + r["s"]})
    name_of_id = {c["id"]: c["fn"] for c in calls}
    config = _get_json(url + "/config")
    name_of_api = {d.get("api_name"): name_of_id.get(d["id"], d.get("api_name"))
                   for d in config.get("dependencies", [])}
    events = []
    for t in _get_json(url + "/gradio_api/profiling/traces"):
        if not t.get("n_iterations"):
            continue
        start = t["timestamp"] - t["queue_wait_ms"] / 1000
        events.append({"fn": name_of_api.get(t["fn_name"], t["fn_name"]), "start": start,
                       "end": t["timestamp"] + t["total_ms"] / 1000})
    return calls, events


def _get_json(url: str):
    with urllib.request.urlopen(url, timeout=60) as r:
        return json.loads(r.read())


def _clip(spans, t0: float, t1: float) -> list[tuple[float, float]]:
    return [(max(a, t0), min(b, t1)) for a, b in spans if min(b, t1) > max(a, t0)]


def _union(spans) -> float:
    total, end = 0.0, float("-inf")
    for a, b in sorted(spans):
        if b > end:
            total += b - max(a, end)
            end = b
    return total


def breakdown(t0: float, seconds: float | None, calls: list[dict],
              events: list[dict]) -> dict | None:
    """Where the window [t0, t0 + seconds] went: server (handlers), gradio, browser."""
    if seconds is None:
        return None
    t1 = t0 + seconds
    handler_spans = _clip([(c["start"], c["end"]) for c in calls], t0, t1)
    event_spans = _clip([(e["start"], e["end"]) for e in events], t0, t1)
    server = _union(handler_spans)
    busy = _union(handler_spans + event_spans)
    handlers: dict[str, list] = {}
    for c in calls:
        for a, b in _clip([(c["start"], c["end"])], t0, t1):
            h = handlers.setdefault(c["fn"], [0.0, 0])
            h[0] += b - a
            h[1] += 1
    return {"total_s": r3(seconds), "server_s": r3(server), "gradio_s": r3(busy - server),
            "browser_s": r3(seconds - busy),
            "handlers": {k: {"s": r3(s), "calls": n} for k, (s, n) in
                         sorted(handlers.items(), key=lambda kv: -kv[1][0])}}


def r3(x: float | None) -> float | None:
    return None if x is None else round(x, 3)


# ---------------------------------------------------------------------- summary
def stats(xs: list) -> dict | None:
    xs = [x for x in xs if x is not None]
    return {"median": r3(statistics.median(xs)), "max": r3(max(xs)), "n": len(xs)} if xs \
        else None


def summarize(name: str, samples: list[dict]) -> dict:
    row = {"scenario": name, "reps": len(samples)}
    for key in ("loaded_s", "usable_s", "estimate_s", "settled_s", "server_busy_s",
                "action_s"):
        row[key] = stats([s.get(key) for s in samples])
    for window in ("usable", "settled"):
        parts = [s["windows"][window] for s in samples if s["windows"].get(window)]
        row[window] = {k: stats([p[k] for p in parts])
                       for k in ("server_s", "gradio_s", "browser_s")}
        names = {n for p in parts for n in p["handlers"]}
        top = sorted(((n, statistics.median([p["handlers"].get(n, {"s": 0})["s"]
                                             for p in parts])) for n in names),
                     key=lambda x: -x[1])
        row[window]["top_handlers"] = [[n, r3(s)] for n, s in top[:3] if s > 0]
    sticks = [s["fill_sticks"] for s in samples if "fill_sticks" in s]
    if sticks:
        row["fill_sticks"] = f"{sum(sticks)}/{len(sticks)}"
    errors = [s["error"] for s in samples if s.get("error")]
    if errors:
        row["errors"] = errors
    return row


def cell(st: dict | None) -> str:
    if not st:
        return "–"
    return f"{st['median']:.2f}" if st["n"] == 1 else f"{st['median']:.2f} / {st['max']:.2f}"


def top_cell(top: list) -> str:
    return ", ".join(f"{n} {s:.2f}" for n, s in top) or "–"


def markdown(result: dict) -> str:
    head = (f"# Page speed{' (' + result['label'] + ')' if result['label'] else ''}\n\n"
            f"{result['date']}, {result['machine']}, Chromium {result['chromium']}, gradio "
            f"{result['gradio']}; {result['reps']} repetition(s): median / max, seconds from "
            f"the action. The app served {result['server_start_s']:.1f} s after its start.\n")
    def table(title: str, window: str, first: list[tuple[str, str]], last: list[tuple[str, str]]
              ) -> list[str]:
        """One table: the scenario, ``first`` columns (title, row key), the window's server,
        gradio and browser time and top handlers, then ``last`` columns."""
        names = ([t for t, _ in first] + ["server time (s)", "gradio (s)", "browser (s)",
                                          "top 3 handlers by server time (s)"] +
                 [t for t, _ in last])
        out = [f"## {title}\n", "| scenario | " + " | ".join(names) + " |",
               "|---" * (len(names) + 1) + "|"]
        for row in result["scenarios"]:
            w = row[window]
            cells = ([cell(row[k]) for _, k in first] +
                     [cell(w["server_s"]), cell(w["gradio_s"]), cell(w["browser_s"]),
                      top_cell(w["top_handlers"])] + [cell(row[k]) for _, k in last])
            out.append(f"| {row['scenario']} | " + " | ".join(cells) + " |")
        return out

    lines = [head] + table("Action → usable field", "usable",
                           [('to "Loaded" (s)', "loaded_s"), ("to usable field (s)", "usable_s"),
                            ("to estimate (s)", "estimate_s")], [])
    lines += [""] + table("Action → page settled", "settled", [("settled (s)", "settled_s")],
                          [("server busy until (s)", "server_busy_s")])
    lines += ["", "- to \"Loaded\": the preset message says so (a family switch: the Model tab "
              "shows the new family's defaults).",
              "- usable field: `#field-lora_rank` (after opening the page or going to the Model "
              "tab: `#preset`) on screen, enabled, under no pending overlay, and staying so.",
              "- to estimate: `#estimate` shows its final text, nothing pending.",
              "- settled: the last change before the page stayed still for "
              f"{QUIET_MS / 1000:g} s with no event pending.",
              "- server time: an event handler running (`webui/timing.py`); gradio: gradio's "
              "own work around the handlers (queue, inputs, outputs; `GRADIO_PROFILING`); "
              "browser: the rest (the page rendering and running its scripts, the network). "
              "Handlers: median per repetition of their time in the window (calls running "
              "side by side add up).",
              "- server busy until: the end of the last handler call the scenario started, "
              "also calls the page no longer waits for (a newer one replaced them).", ""]
    fills = [f"{r['scenario']} {r['fill_sticks']}" for r in result["scenarios"]
             if "fill_sticks" in r]
    if fills:
        lines.append("A value typed into the usable field stayed: " + ", ".join(fills) + ".\n")
    return "\n".join(lines)


# ---------------------------------------------------------------------- main
def run(reps: int, presets: list[str], say, keep: Path | None = None) -> tuple[dict, dict]:
    from playwright.sync_api import sync_playwright

    with tempfile.TemporaryDirectory(prefix="zerolora-page-speed-") as tmp:
        times_path = Path(tmp) / "event_times.jsonl"
        times_path.touch()
        env = launcher_env(ZEROLORA_EVENT_TIMES=str(times_path), GRADIO_PROFILING="1",
                           HF_HUB_OFFLINE="1", GRADIO_ANALYTICS_ENABLED="False")
        start = time.time()
        server = AppServer(Path(tmp), "--no-bootstrap", env=env)
        info = {"server_start_s": r3(time.time() - start)}
        say(f"the app serves at {server.url} after {info['server_start_s']:.1f} s")
        calls, events = [], []
        try:
            with sync_playwright() as p:
                browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
                info["chromium"] = browser.version
                bench = Bench(browser, server.url, say)
                ctx, page, first = bench.open_page()
                bench.add("open page (first after start)", first)
                ctx.close()
                for rep in range(reps):
                    ctx, page, opened = bench.open_page()
                    bench.add("open page", opened)
                    for name in presets:
                        page.click("#tab-model-button")
                        bench.ready(page)
                        bench.add(f"preset {name}", pick_preset(page, name))
                    ctx.close()
                    ctx, page, opened = bench.open_page()
                    bench.add("open page", opened)
                    bench.ready(page)
                    bench.add("tab Training (first visit)",
                              switch_tab(page, "training", "lora_rank"))
                    bench.ready(page)
                    bench.add("tab Training → Model", switch_tab(page, "model", "preset"))
                    bench.ready(page)
                    bench.add("tab Model → Training", switch_tab(page, "training", "lora_rank"))
                    bench.ready(page)
                    bench.add("edit lora_rank + Tab", edit_rank(page, RANKS[rep % len(RANKS)]))
                    page.click("#tab-model-button")
                    bench.ready(page)
                    bench.add("switch model family",
                              switch_family(page, FAMILIES[rep % len(FAMILIES)]))
                    ctx.close()
                bench.server_idle()
                browser.close()
            calls, events = server_record(server.url, times_path)
        except Exception:
            print(server.log()[-4000:], file=sys.stderr)
            raise
        finally:
            server.stop()
            if keep is not None:
                keep.mkdir(parents=True, exist_ok=True)
                shutil.copy(server.log_path, keep / "server.log")
                shutil.copy(times_path, keep / times_path.name)
                if events:
                    (keep / "gradio_traces.json").write_text(json.dumps(events, indent=1))
    for group in bench.samples.values():
        for s in group:
            s["windows"] = {w: breakdown(s["t0"], s.get(f"{w}_s"), calls, events)
                            for w in ("usable", "settled")}
            ends = [c["end"] for c in calls if s["t0"] <= c["start"] <= s["t_end"]]
            s["server_busy_s"] = max(ends) - s["t0"] if ends else None
    return bench.samples, info


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--reps", type=int, default=2, help="repetitions of each scenario")
    parser.add_argument("--presets", nargs="+", default=list(PRESETS))
    parser.add_argument("--label", default="",
                        help="e.g. before / after: written as page_speed-<label>.json and .md")
    parser.add_argument("--out", default=str(ROOT / "bench" / "results" / "page_speed.json"))
    parser.add_argument("--keep", default=None,
                        help="copy the server's log and its event times into this folder")
    args = parser.parse_args(argv)
    out = Path(args.out)
    if args.label:
        out = out.with_name(f"{out.stem}-{args.label}{out.suffix or '.json'}")

    import gradio

    began = time.time()
    samples, info = run(args.reps, args.presets,
                        lambda m: print(f"[page_speed {time.time() - began:5.0f}s] {m}",
                                        flush=True), Path(args.keep) if args.keep else None)
    result = {"date": time.strftime("%Y-%m-%d"), "label": args.label,
              "machine": f"{platform.machine()}, {os.cpu_count()} CPU cores (shared)",
              "gradio": gradio.__version__, "reps": args.reps, **info,
              "wall_s": r3(time.time() - began),
              "scenarios": [summarize(name, group) for name, group in samples.items()],
              "samples": {name: [{k: (r3(v) if isinstance(v, float) else v)
                                  for k, v in s.items()} for s in group]
                          for name, group in samples.items()}}
    text = markdown(result)
    print("\n" + text)
    write_result(out, result)
    out.with_suffix(".md").write_text(text, encoding="utf-8")
    print(f"wrote {out.with_suffix('.md')}", flush=True)
    return result


if __name__ == "__main__":
    main()
