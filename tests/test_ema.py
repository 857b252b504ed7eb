"""The EMA of the trained weights (``ema_decay``, ``backend/training/ema.py``).

Fast: the EMA against the formula it documents, its schedule, its state round trip, its
twins' names, samples' choice of twins, the estimate and the refusals. Slow: real train
stages on the tiny Qwen-Image -- the saved twins equal an EMA computed by hand from the
per-step LoRA files (plain, and ZeRO-3 with offload), and a run stopped with SIGTERM and
resumed ends with an uninterrupted run's EMA.
"""
from __future__ import annotations

import contextlib
import json
from pathlib import Path

import pytest

from backend.config.errors import ConfigError
from backend.config.schema import RunConfig
from backend.config.validation import validate
from backend.core import rundir
from backend.training.ema import WeightEMA
from tests.harness.seeds import SEED_ZERO3
from tests.harness.stages import (assert_ok, launch_and_stop, read_progress, run_stage,
                                  train_args, write_accelerate_config)


def by_hand(weights: dict[int, dict], decay: float, every: int, start: int, upto: int
            ) -> dict:
    """The documented EMA after step ``upto``: a copy of the weights at ``start``, then
    ema = d * ema + (1 - d) * w at start + every, start + 2 every, ... (float64)."""
    ema = {k: v.double().clone() for k, v in weights[start].items()}
    for s in range(start + every, upto + 1, every):
        ema = {k: decay * ema[k] + (1 - decay) * weights[s][k].double() for k in ema}
    return ema


def assert_close(a: dict, b: dict, atol: float = 1e-6) -> None:
    import torch

    assert a.keys() == b.keys()
    for k in a:
        torch.testing.assert_close(a[k].double(), b[k].double(), rtol=0, atol=atol, msg=k)


class Live:
    """Tensors that change each step, as the trained weights do."""

    def __init__(self, seed: int = 0):
        import torch

        self.g = torch.Generator().manual_seed(seed)
        self.w = {"a": torch.randn(3, 4, generator=self.g), "b": torch.randn(5, generator=self.g)}
        self.history = {0: self.snapshot()}

    def snapshot(self) -> dict:
        return {k: v.clone() for k, v in self.w.items()}

    def train(self, step: int) -> None:
        import torch

        for v in self.w.values():
            v.add_(torch.randn(v.shape, generator=self.g))
        self.history[step] = self.snapshot()

    @contextlib.contextmanager
    def __call__(self):
        yield self.w


# ---------------------------------------------------------------------- fast
@pytest.mark.parametrize("every,start", [(1, 0), (3, 2), (2, 5)])
def test_ema_follows_the_documented_formula(every, start):
    live = Live()
    ema = WeightEMA(live, decay=0.8, update_every=every, start_step=start)
    assert ema.step(0) == (start == 0)
    for step in range(1, 13):
        live.train(step)
        assert ema.step(step) == (step >= start and (step - start) % every == 0)
    last = max(s for s in range(13) if s >= start and (s - start) % every == 0)
    assert ema.began_at == start and ema.last_step == last
    assert_close(ema.tensors(), by_hand(live.history, 0.8, every, start, 12))


def test_ema_before_its_start_holds_nothing_and_refuses_a_bad_decay():
    live = Live()
    ema = WeightEMA(live, decay=0.5, start_step=4)
    for step in range(4):
        assert not ema.step(step)
    assert ema.shadow is None and ema.tensors() == {}
    for bad in (0, 1, 1.5, -0.1):
        with pytest.raises(ValueError, match="ema_decay"):
            WeightEMA(live, decay=bad)


def test_state_round_trip_continues_as_if_never_saved(tmp_path):
    live = Live(1)
    a = WeightEMA(live, decay=0.9, update_every=2, start_step=1)
    for step in range(1, 6):
        live.train(step)
        a.step(step)
    a.save_state(tmp_path, rank=0)
    assert (tmp_path / rundir.EMA_STATE).is_file()
    b = WeightEMA(live, decay=0.9, update_every=2, start_step=1)
    assert b.load_state(tmp_path, rank=0)
    assert (b.began_at, b.last_step) == (a.began_at, a.last_step) == (1, 5)
    for step in range(6, 10):
        live.train(step)
        a.step(step)
        b.step(step)
    assert_close(a.tensors(), b.tensors(), atol=0)
    # Another rank of an unsharded EMA writes nothing; a state without an EMA loads none.
    WeightEMA(live, decay=0.9).save_state(tmp_path / "other", rank=1)
    assert not (tmp_path / "other").exists()
    assert not WeightEMA(live, decay=0.9).load_state(tmp_path / "other", rank=0)


def test_a_saved_ema_of_other_tensors_is_refused(tmp_path):
    import torch

    live = Live()
    a = WeightEMA(live, decay=0.9)
    a.step(0)
    a.save_state(tmp_path, rank=0)
    live.w["b"] = torch.zeros(7)
    with pytest.raises(ValueError, match="resume_from"):
        WeightEMA(live, decay=0.9).load_state(tmp_path, rank=0)


def test_twins_are_named_beside_their_checkpoints_and_are_no_checkpoints(tmp_path):
    from backend.training.loop import prune_checkpoints

    assert rundir.ema_twin(Path("o/step-3.safetensors")) == Path("o/step-3-ema.safetensors")
    assert rundir.ema_twin(Path("o/epoch-0")) == Path("o/epoch-0-ema")
    assert rundir.ema_twin(Path("o/step-3-ema.safetensors")) == Path("o/step-3-ema.safetensors")
    for n in (1, 2, 3):
        (tmp_path / f"step-{n}.safetensors").write_bytes(b"x")
        (tmp_path / f"step-{n}-ema.safetensors").write_bytes(b"x")
    assert [p.name for p in rundir.list_checkpoints(tmp_path)] == [
        "step-1.safetensors", "step-2.safetensors", "step-3.safetensors"]
    prune_checkpoints(tmp_path, keep=2)
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "step-2-ema.safetensors", "step-2.safetensors", "step-3-ema.safetensors",
        "step-3.safetensors"]


def test_samples_take_the_twins_sample_use_ema_names(tmp_path):
    from backend.training.samples import with_ema

    a, b = tmp_path / "step-1.safetensors", tmp_path / "step-2.safetensors"
    for p in (a, b, rundir.ema_twin(b)):
        p.write_bytes(b"x")
    assert with_ema([a, b], "raw") == [a, b]
    assert with_ema([a, b], "both") == [a, b, rundir.ema_twin(b)]
    assert with_ema([b], "ema") == [rundir.ema_twin(b)]
    with pytest.raises(ConfigError, match="sample_use_ema: no EMA twin of .*step-1"):
        with_ema([a, b], "ema")


def problems(data: dict) -> list[str]:
    with pytest.raises(ConfigError) as e:
        validate(data, require_inputs=False)
    return [str(p) for p in e.value.problems]


def test_bad_ema_options_are_refused_before_any_stage_naming_the_field():
    for bad in (0, 1, 1.0, 2.5, -0.3):
        found = problems({"ema_decay": bad})
        assert len(found) == 1 and found[0].startswith("ema_decay: "), found
        assert "< 1" in found[0]
    found = problems({"ema_update_every": 4, "ema_device": "cpu", "sample_use_ema": "ema"})
    assert [p.split(":")[0] for p in found] == ["ema_update_every", "ema_device",
                                               "sample_use_ema"]
    assert all("ema_decay empty" in p for p in found)
    found = problems({"ema_decay": 0.99, "max_train_steps": 10, "ema_start_step": 11})
    assert found == ["ema_start_step: the EMA would never begin (got 11, after the run's last "
                     "step 10; allowed 0 to 10)"]
    cfg = validate({"ema_decay": 0.99, "ema_update_every": 4, "ema_start_step": 10,
                    "ema_device": "cpu", "max_train_steps": 10, "sample_use_ema": "both"},
                   require_inputs=False)
    assert cfg.ema_decay == 0.99 and cfg.ema_device == "cpu"


def test_estimate_counts_the_ema_on_the_gpu_or_the_host():
    from backend.planning.estimator import estimate_memory

    cfg = RunConfig(lora_rank=8)
    base = estimate_memory(cfg).stages["train"]
    trained = estimate_memory(cfg).params["lora"]
    gpu = estimate_memory(cfg.model_copy(update={"ema_decay": 0.99})).stages["train"]
    host = estimate_memory(cfg.model_copy(update={"ema_decay": 0.99, "ema_device": "cpu"})
                           ).stages["train"]
    assert gpu.gpu["ema"] == 4 * trained and "ema" not in gpu.host
    assert gpu.gpu_bytes == pytest.approx(base.gpu_bytes + 4 * trained)
    assert host.host["ema"] == 4 * trained and "ema" not in host.gpu
    assert host.gpu_bytes == pytest.approx(base.gpu_bytes)


def test_full_fine_tune_twin_writes_the_ema_of_every_parameter(tmp_path, tiny_model_dir):
    import torch
    from safetensors.torch import load_file

    from backend.families import get_family
    from backend.models import full
    from backend.training.ema import make_ema

    model = get_family("qwen_image").load_transformer(tiny_model_dir / "transformer",
                                                      torch.float32, "cpu")
    model.requires_grad_(True)
    cfg = RunConfig(trainable_models="dit", ema_decay=0.5)
    ema = make_ema(cfg, model, "cpu", zero_stage=0)
    ema.step(0)
    start = {n: p.detach().clone() for n, p in model.named_parameters()}
    with torch.no_grad():
        for p in model.parameters():
            p.add_(1.0)
    ema.step(1)
    folder = full.save_component(model, tmp_path / "step-1-ema", dtype=torch.float32,
                                 values=ema.whole)
    saved = load_file(str(folder / f"{full.WEIGHTS_NAME}.safetensors"))
    for n, w in start.items():
        torch.testing.assert_close(saved[n], w + 0.5, msg=n)
    raw = full.save_component(model, tmp_path / "step-1", dtype=torch.float32)
    saved = load_file(str(raw / f"{full.WEIGHTS_NAME}.safetensors"))
    torch.testing.assert_close(saved[n], start[n] + 1.0)


# ---------------------------------------------------------------------- slow: real stages
EMA_ARGS = ("--num_epochs", "1000", "--max_steps", "8", "--save_steps", "1",
            "--ema_decay", "0.9", "--ema_update_every", "2", "--ema_start_step", "1")


def step_files(out: Path, total: int, twins: bool = False) -> dict[int, dict]:
    from backend.models.lora import read_lora

    return {s: read_lora(out / f"step-{s}{'-ema' if twins else ''}.safetensors")[0]
            for s in range(1, total + 1)}


def check_twins_by_hand(out: Path, total: int, decay: float, every: int, start: int) -> None:
    """Each step's twin equals the EMA by hand of the per-step LoRA files up to it."""
    raw = step_files(out, total)
    twins = step_files(out, total, twins=True)
    for s in range(start, total + 1):
        assert_close(twins[s], by_hand(raw, decay, every, start, s))
    assert not rundir.ema_twin(out / "step-0.safetensors").exists()


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory, models_root, stage1_cache):
    out = tmp_path_factory.mktemp("ema") / "full"
    assert_ok(run_stage(train_args(models_root, stage1_cache, out, *EMA_ARGS)))
    return out


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_saved_ema_equals_the_ema_by_hand_of_the_per_step_loras(uninterrupted, tmp_path):
    from backend.models.lora import read_lora
    from backend.training.samples import plan_samples, with_ema

    check_twins_by_hand(uninterrupted, 8, 0.9, 2, 1)
    _, meta = read_lora(uninterrupted / "step-8-ema.safetensors")
    assert meta["ema_of"] == "step-8.safetensors" and meta["ema_decay"] == "0.9"
    state = uninterrupted / rundir.STATE / rundir.EMA_STATE
    assert_close(read_lora(state)[0], read_lora(uninterrupted / "step-8-ema.safetensors")[0],
                 atol=0)
    assert len(rundir.list_checkpoints(uninterrupted)) == 8  # twins are no checkpoints
    # Samples: the twin as a column of its own.
    cfg = RunConfig(sample_use_ema="both", sample_lora_scales=[1.0])
    names = {j.checkpoint_name for j in plan_samples(
        cfg, with_ema([uninterrupted / "step-8.safetensors"], "both"))}
    assert names == {"step-8", "step-8-ema"}


@pytest.mark.slow
@pytest.mark.timeout(400)
def test_resumed_run_ends_with_the_uninterrupted_runs_ema(uninterrupted, tmp_path,
                                                         models_root, stage1_cache):
    part = tmp_path / "part"
    args = train_args(models_root, stage1_cache, part, *EMA_ARGS)
    assert launch_and_stop(args, None, part / "progress.jsonl", at_step=3) == 143
    stopped = read_progress(part / "progress.jsonl")[-1]["step"]
    assert 3 <= stopped < 8
    assert (part / rundir.STATE / rundir.EMA_STATE).is_file()
    assert_ok(run_stage([*args, "--resume_from", part / rundir.STATE]))
    ended = step_files(part, 8, twins=True)[8]
    assert_close(ended, step_files(uninterrupted, 8, twins=True)[8], atol=1e-5)
    state = json.loads((part / rundir.STATE / "trainer_state.json").read_text())
    assert state["global_step"] == 8


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_zero3_offload_ema_equals_the_ema_by_hand(tmp_path, models_root, stage1_cache):
    """ZeRO-3 with parameters and optimizer offloaded (the seed's config): the LoRA is
    gathered for each update; the EMA kept in host RAM (ema_device cpu)."""
    acc = write_accelerate_config(tmp_path, "z3", ds_config=SEED_ZERO3, zero3_init_flag=True)
    out = tmp_path / "out"
    proc = run_stage(train_args(models_root, stage1_cache, out, "--num_epochs", "1000",
                                "--max_steps", "4", "--save_steps", "1", "--ema_decay", "0.9",
                                "--ema_device", "cpu", "--initialize_model_on_cpu"),
                     config_file=acc)
    assert_ok(proc)
    assert "transformer built partitioned" in proc.stdout
    assert "EMA of the trained weights: decay 0.9" in proc.stdout
    # ema_start_step 0: the EMA began with the weights before the first step, which no
    # file holds; step 1's twin gives them back: (twin1 - (1 - d) w1) / d.
    raw = step_files(out, 4)
    twins = step_files(out, 4, twins=True)
    raw[0] = {k: (twins[1][k].double() - 0.1 * raw[1][k].double()) / 0.9 for k in raw[1]}
    for k, v in raw[0].items():  # peft starts every lora_B at zero
        if "lora_B" in k:
            assert v.abs().max() < 1e-6, k
    for s in range(2, 5):
        assert_close(twins[s], by_hand(raw, 0.9, 1, 0, s))


def test_the_results_tab_asks_for_ema_renders_only_of_a_run_that_kept_one(tmp_path):
    """The Results tab's Weights choice is the render's ``sample_use_ema``: asked of a run
    trained without ``ema_decay`` it is refused before a job is queued, naming the field."""
    from backend.config.errors import ConfigError
    from backend.jobs.runner import Runner
    from webui import jobs
    from webui.tabs.results import SETTINGS

    assert SETTINGS["res_ema"] == "sample_use_ema"
    run_dir = tmp_path / "runs" / "r1"
    (run_dir / "output").mkdir(parents=True)
    (run_dir / "output" / "step-2.safetensors").write_bytes(b"")
    run = {"id": "r1", "run_dir": str(run_dir), "config_yaml": "model_family: qwen_image\n"}
    runner = Runner(tmp_path / "ws", auto_start=False)
    with pytest.raises(ConfigError) as e:
        jobs.submit_render(runner, run, {"sample_use_ema": "ema",
                                         "sample_prompts": ["a red circle"]},
                           ["step-2.safetensors"], owner=None)
    assert any(str(p).startswith("sample_use_ema: an EMA option without an EMA")
               for p in e.value.problems), e.value.problems
    assert runner.list_runs() == []
