"""LoRA+ (``loraplus_lr_ratio``): lora_B's parameter group at ratio x lora_A's learning rate,
in the optimizer every choice builds (``backend.training.optimizers``), offloaded ones
included, through a warm-up schedule; the refusals; and the train stage under ZeRO-2 with
the optimizer offloaded to DeepSpeed's CPU Adam, where lora_B moves by the ratio more.
"""
from __future__ import annotations

import re

import pytest
import torch

from backend.config.errors import ConfigError
from backend.config.schema import RunConfig
from backend.config.validation import validate
from backend.training import optimizers

RANK = 4
TARGETS = "to_q,to_k,to_v,to_out.0,img_mlp.net.2"
LR, RATIO = 1e-3, 16.0


def config(**over) -> RunConfig:
    base = {"model_family": "qwen_image", "lora_rank": RANK, "lora_target_modules": TARGETS,
            "learning_rate": LR, "loraplus_lr_ratio": RATIO}
    return RunConfig.model_validate({**base, **over})


def tiny_lora_model(tiny_model_dir, cfg: RunConfig):
    from backend.families import get_family
    from backend.models import lora

    family = get_family("qwen_image")
    model = family.load_transformer(tiny_model_dir / "transformer", torch.float32)
    lora.add_lora(model, cfg.lora_rank, family.target_modules(cfg.target_modules()),
                  **lora.adapter_options(cfg))
    return model


def lr_by_name(model, optimizer) -> dict[str, float]:
    """Each trainable tensor's learning rate in ``optimizer``'s parameter groups."""
    lr_of = {id(p): g["lr"] for g in optimizer.param_groups for p in g["params"]}
    return {n: lr_of[id(p)] for n, p in model.named_parameters() if p.requires_grad}


def assert_b_at_ratio(lrs: dict[str, float], lr: float = LR) -> None:
    a = {n: v for n, v in lrs.items() if ".lora_A." in n}
    b = {n: v for n, v in lrs.items() if ".lora_B." in n}
    assert a and b and len(a) == len(b)
    assert list(a.values()) == [pytest.approx(lr)] * len(a)
    assert list(b.values()) == [pytest.approx(lr * RATIO)] * len(b)


@pytest.fixture(scope="module")
def lora_model(tiny_model_dir):
    return tiny_lora_model(tiny_model_dir, config())


# ------------------------------------------------------------------------------------------
# The parameter groups in each optimizer
# ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["adamw", "adamw8bit", "adafactor"])
def test_lora_b_group_at_ratio_times_lora_a(name, lora_model):
    pytest.importorskip(optimizers.PACKAGES.get(name, "torch"))
    cfg = config(optimizer=name)
    opt = optimizers.make_optimizer(cfg, optimizers.param_groups(cfg, lora_model))
    assert [g["lr"] for g in opt.param_groups] == [pytest.approx(LR),
                                                   pytest.approx(LR * RATIO)]
    assert_b_at_ratio(lr_by_name(lora_model, opt))
    assert f"LoRA+ ratio 16 ({type(opt).__name__} parameter groups: lr 0.001 x " in \
        optimizers.describe(cfg, opt)


def test_without_the_ratio_one_group_at_the_learning_rate(lora_model):
    cfg = config(loraplus_lr_ratio=None)
    params = optimizers.param_groups(cfg, lora_model)
    assert all(isinstance(p, torch.nn.Parameter) for p in params)
    opt = optimizers.make_optimizer(cfg, params)
    assert [g["lr"] for g in opt.param_groups] == [LR]
    assert "LoRA+" not in optimizers.describe(cfg, opt)


def test_dora_magnitude_goes_with_lora_b_as_in_peft(tiny_model_dir):
    """peft's create_loraplus_optimizer puts lora_B and every 1-D tensor in the B group."""
    cfg = config(lora_type="dora")
    model = tiny_lora_model(tiny_model_dir, cfg)
    lrs = lr_by_name(model, optimizers.make_optimizer(cfg, optimizers.param_groups(cfg, model)))
    magnitude = {n: v for n, v in lrs.items() if "lora_magnitude_vector" in n}
    assert magnitude
    assert list(magnitude.values()) == [pytest.approx(LR * RATIO)] * len(magnitude)
    assert_b_at_ratio(lrs)


def test_the_grouping_is_peft_s(lora_model):
    """The same split as peft's own ``create_loraplus_optimizer`` on the same model."""
    from peft.optimizers import create_loraplus_optimizer

    cfg = config()
    ours = optimizers.make_optimizer(cfg, optimizers.param_groups(cfg, lora_model))
    peft_opt = create_loraplus_optimizer(lora_model, torch.optim.AdamW, lr=LR,
                                         loraplus_lr_ratio=RATIO)
    assert lr_by_name(lora_model, ours) == lr_by_name(lora_model, peft_opt)


def test_tensors_partitioned_by_zero3_are_grouped_by_their_full_shape(tiny_model_dir):
    """ZeRO-3 leaves each partitioned tensor empty (1-D) and keeps its shape in
    ``ds_shape``; lora_A must not join the 1-D tensors' group."""
    cfg = config()
    model = tiny_lora_model(tiny_model_dir, cfg)
    for p in model.parameters():
        if p.requires_grad:
            p.ds_shape, p.data = p.shape, torch.empty(0)
    assert_b_at_ratio(lr_by_name(model, optimizers.make_optimizer(
        cfg, optimizers.param_groups(cfg, model))))


def test_optimizer_cpu_offload_takes_the_groups(lora_model):
    """``enable_optimizer_cpu_offload`` (backend.models.layer_offload; plain AdamW on a
    CPU-only machine, torchao's CPU-offload AdamW on a GPU, both over the same groups)."""
    cfg = config(enable_optimizer_cpu_offload=True)
    opt = optimizers.make_optimizer(cfg, optimizers.param_groups(cfg, lora_model))
    assert_b_at_ratio(lr_by_name(lora_model, opt))


def test_deepspeed_cpu_adam_keeps_the_groups(lora_model):
    """With the optimizer offloaded accelerate builds DeepSpeed's CPU Adam from the AdamW's
    ``param_groups`` (``map_pytorch_optim_to_deepspeed``, what ``prepare`` calls)."""
    from accelerate.utils.deepspeed import map_pytorch_optim_to_deepspeed

    ds = {"zero_optimization": {"stage": 2, "offload_optimizer": {"device": "cpu"}}}
    cfg = config()
    opt = optimizers.make_optimizer(cfg, optimizers.param_groups(cfg, lora_model), ds)
    assert type(opt) is torch.optim.AdamW
    cpu_adam = map_pytorch_optim_to_deepspeed(opt)
    assert type(cpu_adam).__name__ == "DeepSpeedCPUAdam"
    assert_b_at_ratio(lr_by_name(lora_model, cpu_adam))


@pytest.mark.parametrize("schedule", ["constant", "cosine"])
def test_the_ratio_holds_through_the_schedule(schedule, lora_model):
    cfg = config(lr_scheduler=schedule, lr_warmup_steps=4)
    opt = optimizers.make_optimizer(cfg, optimizers.param_groups(cfg, lora_model))
    sched = optimizers.make_lr_scheduler(cfg, opt, total_steps=20)
    first = [g["lr"] for g in opt.param_groups]
    for _ in range(2):
        opt.step()
        sched.step()
    a, b = [g["lr"] for g in opt.param_groups]
    assert first[0] < a < LR  # in the warm-up
    assert b == pytest.approx(a * RATIO) and first[1] == pytest.approx(first[0] * RATIO)


# ------------------------------------------------------------------------------------------
# Refusals
# ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("over, text", [
    ({"lora_type": "lokr"}, "loraplus_lr_ratio: LoRA+ sets lora_B's learning rate"),
    ({"optimizer": "prodigy"}, "loraplus_lr_ratio: prodigy learns one step size"),
    ({"customized_optimizer": "prodigyopt.Prodigy"},
     "loraplus_lr_ratio: prodigy learns one step size"),
    ({"trainable_models": "dit"}, "loraplus_lr_ratio: a LoRA option beside trainable_models"),
    ({"loraplus_lr_ratio": 0}, "loraplus_lr_ratio: "),
    ({"loraplus_lr_ratio": 5000}, "loraplus_lr_ratio: "),
])
def test_refusals_name_the_field(over, text):
    with pytest.raises(ConfigError) as e:
        validate({"loraplus_lr_ratio": RATIO, **over}, require_inputs=False)
    assert text in str(e.value)


def test_accepted_with_lora_dora_and_the_other_optimizers():
    for over in ({}, {"lora_type": "dora"}, {"optimizer": "adafactor"},
                 {"optimizer": "adamw8bit"},
                 {"zero_stage": 2, "offload_optimizer_device": "cpu"}):
        validate({"loraplus_lr_ratio": RATIO, **over}, require_inputs=False)


def test_the_stage_refuses_what_the_schema_cannot_see(lora_model):
    """A hand-written DeepSpeed config with its own optimizer (and schedule), and prodigy
    reaching the stage some other way: refused by field name, never trained without LoRA+."""
    cfg = config()
    groups = optimizers.param_groups(cfg, lora_model)
    with pytest.raises(optimizers.OptimizerError, match="^loraplus_lr_ratio: the DeepSpeed"):
        optimizers.make_optimizer(cfg, groups, {"optimizer": {"type": "AdamW"}})
    prodigy = config().model_copy(update={"optimizer": "prodigy"})
    with pytest.raises(optimizers.OptimizerError, match="^loraplus_lr_ratio: prodigy"):
        optimizers.make_optimizer(prodigy, groups)


# ------------------------------------------------------------------------------------------
# The train stage: ZeRO-2 with the optimizer offloaded to DeepSpeed's CPU Adam
# ------------------------------------------------------------------------------------------
@pytest.mark.slow
@pytest.mark.timeout(900)
def test_train_zero2_offload_moves_lora_b_by_the_ratio(tmp_path, models_root, stage1_cache):
    """Two steps each, with and without ``--loraplus_lr_ratio 16``: the CPU Adam that steps
    has lora_B's group at 16x, and lora_B (zero at the start) moves ~16x as far (Adam's
    first steps move each weight by about the learning rate)."""
    from backend.models.lora import read_lora
    from tests.harness.seeds import ZERO2
    from tests.harness.stages import assert_ok, check_progress, run_stage, train_args, \
        write_accelerate_config

    ds = {**ZERO2, "zero_optimization": {**ZERO2["zero_optimization"],
                                         "offload_optimizer": {"device": "cpu"}}}
    acc = write_accelerate_config(tmp_path, "z2off", ds_config=ds)
    extra = ("--num_epochs", "100", "--max_steps", "2", "--save_steps", "2")
    norms, logs = {}, {}
    for name, ratio in (("plain", ()), ("loraplus", ("--loraplus_lr_ratio", "16"))):
        out = tmp_path / name
        proc = run_stage(train_args(models_root, stage1_cache, out, *extra, *ratio),
                         config_file=acc)
        assert_ok(proc)
        check_progress(out, total=2)
        tensors, _ = read_lora(out / "step-2.safetensors")
        norms[name] = {kind: sum(v.float().norm().item() ** 2 for k, v in tensors.items()
                                 if f".lora_{kind}." in k) ** 0.5 for kind in "AB"}
        logs[name] = proc.stdout
    stepping = re.search(r"LoRA\+ stepping: (\w+) parameter groups: lr ([\d.e-]+) x \d+ "
                         r"tensors, lr ([\d.e-]+) x", logs["loraplus"])
    assert stepping, logs["loraplus"][-3000:]
    assert stepping[1] == "DeepSpeedCPUAdam"
    assert float(stepping[3]) == pytest.approx(16 * float(stepping[2]))
    assert float(stepping[2]) == pytest.approx(5e-3)
    assert "LoRA+" not in logs["plain"]
    assert norms["loraplus"]["B"] > 8 * norms["plain"]["B"] > 0, norms
