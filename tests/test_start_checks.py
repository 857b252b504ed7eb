"""What start_run refuses for the API and the Run tab alike (webui.services; issue 21)."""
from __future__ import annotations

from types import SimpleNamespace

import pytest

from backend.config.meta import field_meta
from backend.config.schema import RunConfig
from webui import services


class NoRunner:
    """Fails the test if anything is queued."""

    def submit(self, *a, **k):
        raise AssertionError("queued a run that should have been refused")

    def list_runs(self, *a, **k):
        return []


def where(tmp_path):
    return SimpleNamespace(runner=NoRunner(), workspace=tmp_path, models_dir=None)


def test_output_path_is_refused_naming_the_field_not_ignored(tmp_path):
    cfg = RunConfig(stages=["sample"], output_path=str(tmp_path / "elsewhere"))
    with pytest.raises(services.Refused) as e:
        services.start_run(where(tmp_path), cfg, None)
    assert e.value.problems[0].startswith("output_path: set by the run plan (got ")


def test_the_name_has_run_names_limit(tmp_path):
    limit = field_meta("run_name")["max_length"]
    with pytest.raises(services.Refused) as e:
        services.start_run(where(tmp_path), RunConfig(stages=["sample"]), None,
                           name="n" * (limit + 1))
    assert e.value.problems == [f"name: too long (got {limit + 1} characters; allowed at "
                                f"most {limit}, as run_name)"]
