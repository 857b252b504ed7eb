"""The estimator's predictions for the real Qwen-Image (published config) with each bundled
GPU preset at 1024x1024, next to the published figures other tools report.

Run (seconds after imports; no weights are read):
    python bench/estimate_qwen_image.py        # writes bench/results/estimator_qwen_image.json
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from bench.results_io import write_result  # noqa: E402

PRESETS = ("qwen_image_single_gpu", "qwen_image_low_vram", "qwen_image_multi_gpu_zero2")
PUBLISHED = {  # peak VRAM of Qwen-Image LoRA at 1024x1024 reported by other tools
    "musubi-tuner bf16 + checkpointing": "42 GB",
    "SimpleTuner (H100) bf16 + checkpointing": "41 GiB (44 GB)",
    "arithmetic: ZeRO-3 parameter offload floor": "about 3.5 GB",
}


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--config", default=str(ROOT / "bench/qwen_image_transformer_config.json"))
    parser.add_argument("--size", type=int, default=1024)
    parser.add_argument("--out", default=str(ROOT / "bench/results/estimator_qwen_image.json"))
    args = parser.parse_args(argv)

    from backend.planning import estimator as E
    from backend.config.presets import load_preset

    config = json.loads(Path(args.config).read_text())
    rows = {}
    for name in PRESETS:
        cfg = load_preset(name).model_copy(update={"height": args.size, "width": args.size})
        est = E.estimate_memory(cfg, config)
        rows[name] = est.to_dict()
        t = est.stages["train"]
        print(f"{name:28s} train GPU {t.gpu_gb:5.1f} GB  host {t.host_gb:5.1f} GB  "
              f"(h2d {est.h2d_bytes_per_step / E.GB:.0f} GB/step)")
    result = {"date": time.strftime("%Y-%m-%d"), "size": args.size,
              "config": "bench/qwen_image_transformer_config.json",
              "published_for_comparison": PUBLISHED, "presets": rows}
    return write_result(args.out, result)


if __name__ == "__main__":
    main()
