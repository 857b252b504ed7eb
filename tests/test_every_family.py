"""Checks every registered family and variant gets from the registry, with no test code of its
own (``tests/harness/families.py`` makes the cases); a family's own file keeps only what is
particular to it. A tiny family planted here gets the same checks.

- Sizes: a 100x58 image (or a 16:9 clip of 96x54) that no family's multiple divides trains
  one step at the sizes the family's multiple gives, as the Dataset check says; a fixed
  height or width that is no multiple is refused, naming the multiple.
"""
from __future__ import annotations

import pytest

from backend.config.errors import ConfigError
from backend.config.validation import validate
from backend.core.progress import read_events
from backend.core.rundir import list_checkpoints
from backend.data.dataset import validate_dataset
from backend.data.video import validate_video_dataset
from tests.harness.families import (ODD_CLIP, ODD_IMAGE, adjusted, build_models, cases,
                                    odd_dataset, run_config, run_stage_here, write_run_config)

CASES = cases()
pytestmark = pytest.mark.timeout(600)


def findings(case, cfg):
    """The Dataset check's findings, as the tab shows them."""
    return (validate_video_dataset if case.media == "video" else validate_dataset)(cfg)


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_one_step_from_a_size_no_multiple_divides(case, tmp_path):
    models = build_models(tmp_path / "models", case)
    data = odd_dataset(tmp_path / "data", case)
    out = tmp_path / "out"
    raw = run_config(case, models, data, out, task="sft", num_epochs=1, dataset_repeat=1,
                     lora_rank=2, seed=0, mixed_precision="no", num_frames=5,
                     dataset_num_workers=0, save_steps=1)
    cfg = validate(raw)
    m = case.multiple
    expected = adjusted(ODD_CLIP if case.media == "video" else ODD_IMAGE, m)
    sizes = [tuple(f["size"]) for f in findings(case, cfg) if f.get("file")]
    assert sizes == [expected], (sizes, m)

    code, log = run_stage_here("train", ["--config", write_run_config(tmp_path / "run.yaml",
                                                                      raw)])
    assert code == 0, log[-6000:]
    events, _ = read_events(out / "progress.jsonl")
    assert events[-1]["event"] == "end" and events[-1]["status"] == "succeeded", events[-1]
    assert [e["step"] for e in events if e["event"] == "step"] == [1]
    assert list_checkpoints(out), sorted(p.name for p in out.iterdir())

    # A fixed size that is no multiple is refused, naming the multiple.
    with pytest.raises(ConfigError) as refused:
        validate({**raw, "height": expected[1] + m // 2, "width": expected[0]})
    assert f"multiples of {m}" in str(refused.value) or f"multiple of {m}" in str(refused.value)
