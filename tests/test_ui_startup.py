"""Building the UI loads nothing heavy: no torch, accelerate, diffusers or DeepSpeed in the UI
process at start-up (they load on first use: previews, exports; renders run elsewhere)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

PROBE = """
import json, sys
from pathlib import Path
from backend.jobs.runner import Runner
from webui.app import create_app, launch_kwargs
ws = Path(sys.argv[1])
demo = create_app(Runner(ws, auto_start=False), ws)
kw = launch_kwargs()
heavy = sorted(m for m in ("torch", "accelerate", "diffusers", "transformers", "deepspeed",
                           "peft") if m in sys.modules)
print(json.dumps({"heavy": heavy, "blocks": len(demo.blocks),
                  "i18n": sorted(kw["i18n"].translations_dict)}))
"""


def test_building_the_app_imports_no_heavy_library(tmp_path):
    env = dict(os.environ, GRADIO_ANALYTICS_ENABLED="False", HF_HUB_OFFLINE="1",
               PYTHONPATH=str(REPO))
    out = subprocess.run([sys.executable, "-c", PROBE, str(tmp_path)], cwd=REPO, env=env,
                         capture_output=True, text=True, check=True).stdout
    result = json.loads(out.strip().splitlines()[-1])
    assert result["heavy"] == []
    assert result["blocks"] > 100
    assert {"en", "zh"} <= set(result["i18n"])


def test_chinese_text_covers_every_english_ui_key():
    from webui.i18n import EN, ZH

    assert sorted(set(EN) - set(ZH)) == []
    assert sorted(set(ZH) - set(EN)) == []
