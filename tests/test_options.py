"""Training options: LoRA alpha / dropout / DoRA / LoKr with their exports, the optimizers
and schedules, timestep sampling, buckets and batches, the held-out validation loss.

The optimizer x LoRA-variant checks train the tiny Qwen-Image transformer in this process
with the stage's own parts (``backend.training.optimizers``, ``backend.models.lora``, ``backend.training.timesteps``)
on the shared stage-1 cache; one real ``accelerate launch`` of the train stage then runs a
mixed-aspect dataset at batch 4 with buckets, validation loss and caption dropout.
"""
from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch

from tests.harness.stages import read_progress, run_stage

RANK = 4
TARGETS = "to_q,to_k,to_v,to_out.0,img_mlp.net.2"
FAMILY = "qwen_image"


# ------------------------------------------------------------------------------------------
# Helpers
# ------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def samples(stage1_cache):
    from backend.data.cache import load_cached_samples
    return load_cached_samples(stage1_cache)


def config(**over):
    from backend.config.schema import RunConfig
    base = {"model_family": FAMILY, "lora_rank": RANK, "lora_target_modules": TARGETS,
            "learning_rate": 5e-3, "seed": 0}
    return RunConfig.model_validate({**base, **over})


def fresh_transformer(tiny_model_dir):
    from backend.families import get_family
    return get_family("qwen_image").load_transformer(tiny_model_dir / "transformer", torch.float32)


def forward(model, sample):
    """The transformer's prediction for a fixed noisy input (what 'the output' means)."""
    from backend.families.qwen_image import adapter as qi

    g = torch.Generator().manual_seed(7)
    x = torch.randn(sample["latents"].shape, generator=g)
    with torch.no_grad():
        return qi.predict(model, x, torch.tensor(0.6), sample["prompt_emb"],
                          sample["prompt_emb_mask"])


def train_in_process(tmp_path, tiny_model_dir, samples, steps=30, **over):
    """Train like the stage does, save the LoRA file; return (cfg, model, before, after,
    lrs, path)."""
    from backend.models import lora
    from backend.training import optimizers, timesteps
    from backend.families import get_family
    from backend.training.loop import step_generator

    cfg = config(**over)
    family = get_family(FAMILY)
    torch.manual_seed(0)
    model = fresh_transformer(tiny_model_dir)
    lora.add_lora(model, cfg.lora_rank, family.target_modules(cfg.target_modules()),
                  **lora.adapter_options(cfg))
    params = [p for p in model.parameters() if p.requires_grad]
    opt = optimizers.make_optimizer(cfg, params, None)
    sched = optimizers.make_lr_scheduler(cfg, opt, steps)
    schedule = family.training_schedule()
    model.eval()
    before = family.eval_loss(model, samples)
    model.train()
    lrs = []
    for step in range(steps):
        loss = timesteps.training_loss(cfg, family, model, samples[step % len(samples)],
                                       schedule, step_generator(0, 0, step), torch.float32)
        loss.backward()
        opt.step()
        opt.zero_grad()
        lrs.append(opt.param_groups[0]["lr"])
        sched.step()
    model.eval()
    after = family.eval_loss(model, samples)
    path = tmp_path / f"{cfg.optimizer}-{cfg.lora_type}.safetensors"
    lora.save_lora(path, lora.collect_lora_state(model), rank=cfg.lora_rank,
                   target_modules=cfg.target_modules(), model_family=FAMILY,
                   alpha=cfg.lora_alpha)
    return cfg, model, before, after, lrs, path


def peft_merged(model) -> dict[str, torch.Tensor]:
    """{module: merged weight} of every adapted Linear (peft's own merge, on a copy)."""
    import copy

    from peft.tuners.tuners_utils import BaseTunerLayer

    out = {}
    m = copy.deepcopy(model)
    for name, module in m.named_modules():
        if isinstance(module, BaseTunerLayer):
            module.merge()
            out[name] = module.get_base_layer().weight.detach().clone()
    return out


def comfy_weight_decompose(dora_scale, weight, lora_diff, alpha):
    """ComfyUI's ``weight_decompose`` (comfy/weight_adapter/base.py) at strength 1,
    float32, restated: an [out, 1] scale divides by the base weight's row norms."""
    weight_calc = weight + lora_diff * alpha
    if dora_scale.shape[0] == weight_calc.shape[0]:
        weight_norm = weight.reshape(weight.shape[0], -1).norm(dim=1, keepdim=True)
    else:
        weight_norm = weight_calc.transpose(0, 1).reshape(weight_calc.shape[1], -1).norm(
            dim=1, keepdim=True).transpose(0, 1)
    weight_norm = weight_norm + torch.finfo(torch.float32).eps
    return weight_calc * (dora_scale / weight_norm)


def comfy_lokr_delta(lk: dict, key: str) -> torch.Tensor:
    """ComfyUI's LoKr patch (comfy/weight_adapter/lokr.py) at strength 1, restated: alpha /
    dim only where a factor is decomposed, else scale 1."""
    def get(part):
        return lk.get(f"{key}.{part}")
    w1, w2, dim = get("lokr_w1"), get("lokr_w2"), None
    if w1 is None:
        dim = get("lokr_w1_b").shape[0]
        w1 = get("lokr_w1_a") @ get("lokr_w1_b")
    if w2 is None:
        dim = get("lokr_w2_b").shape[0]
        w2 = get("lokr_w2_a") @ get("lokr_w2_b")
    alpha = get("alpha")
    scale = float(alpha) / dim if alpha is not None and dim is not None else 1.0
    return scale * torch.kron(w1.float(), w2.float())


def base_weight(tiny_model_dir, module: str) -> torch.Tensor:
    return dict(fresh_transformer(tiny_model_dir).named_modules())[module].weight.detach()


# ------------------------------------------------------------------------------------------
# Optimizer x LoRA variant: loss falls, the file loads back and changes the output
# ------------------------------------------------------------------------------------------
CASES = {
    "adamw-lora-alpha-dropout": dict(optimizer="adamw", lora_alpha=8, lora_dropout=0.1,
                                     lr_scheduler="cosine", lr_warmup_steps=3),
    "adamw8bit-dora": dict(optimizer="adamw8bit", lora_type="dora", lr_scheduler="linear"),
    "adafactor-lokr": dict(optimizer="adafactor", lora_type="lokr", lora_alpha=2,
                           timestep_sampling="logit_normal", learning_rate=1e-2),
    "prodigy-lora": dict(optimizer="prodigy", learning_rate=1.0, timestep_sampling="shifted",
                         lr_scheduler="cosine_with_restarts", lr_num_cycles=2),
}


@pytest.mark.slow
@pytest.mark.parametrize("case", list(CASES))
def test_optimizer_and_lora_variant_train_and_load_back(case, tmp_path, tiny_model_dir,
                                                         samples):
    from safetensors import safe_open

    from backend.models import lora

    over = CASES[case]
    cfg, model, before, after, lrs, path = train_in_process(tmp_path, tiny_model_dir,
                                                            samples, **over)
    assert after < before, f"{case}: held-out loss {before:.4f} -> {after:.4f}"
    # The schedule is the one asked for.
    if cfg.lr_scheduler == "cosine":
        assert lrs[0] < lrs[2] < lrs[3] and lrs[-1] < 0.05 * max(lrs)
    elif cfg.lr_scheduler == "linear":
        assert lrs[0] > lrs[10] > lrs[20] > lrs[-1] > 0
    elif cfg.lr_scheduler == "cosine_with_restarts":
        assert any(b > a for a, b in zip(lrs[1:], lrs[2:]))  # the restart
    with safe_open(str(path), framework="pt") as f:
        meta = f.metadata()
        keys = list(f.keys())
    assert meta["lora_type"] == cfg.lora_type
    assert meta["alpha"] == str(int(cfg.lora_alpha or cfg.lora_rank))
    marks = {"lora": "lora_A", "dora": "lora_magnitude_vector", "lokr": "lokr_w1"}
    assert any(marks[cfg.lora_type] in k for k in keys)
    # Loaded into a fresh model through peft: computes what the trained model computes.
    fresh = fresh_transformer(tiny_model_dir)
    base_out = forward(fresh, samples[0])
    lora.load_lora(fresh, path)
    torch.testing.assert_close(forward(fresh, samples[0]), forward(model, samples[0]),
                               rtol=1e-4, atol=1e-5)
    assert not torch.allclose(forward(fresh, samples[0]), base_out, atol=1e-5)


# ------------------------------------------------------------------------------------------
# Exports of alpha, DoRA and LoKr
# ------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def trained(tmp_path_factory, tiny_model_dir, samples):
    """One short-trained file per variant (alpha 8 != rank 4 on the LoRA)."""
    out = {}
    for kind, over in {"lora": dict(lora_alpha=8), "dora": dict(lora_type="dora", lora_alpha=8),
                       "lokr": dict(lora_type="lokr", lora_alpha=2)}.items():
        out[kind] = train_in_process(tmp_path_factory.mktemp(kind), tiny_model_dir, samples,
                                     steps=6, **over)
    return out


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["lora", "dora"])
def test_diffusers_export_loads_with_diffusers_and_matches_peft(kind, trained, tiny_model_dir,
                                                                samples):
    from safetensors import safe_open

    from backend.models.export import export_lora

    _, model, _, _, _, path = trained[kind]
    out = export_lora(path, "diffusers", transformer_config=tiny_model_dir)
    with safe_open(str(out), framework="pt") as f:
        keys = list(f.keys())
    assert all(k.startswith("transformer.") and ".default" not in k for k in keys)
    assert any("lora_magnitude_vector" in k for k in keys) == (kind == "dora")
    fresh = fresh_transformer(tiny_model_dir)
    base_out = forward(fresh, samples[0])
    # diffusers' own loader (alpha 8 / rank 4 folded into lora_B, DoRA's use_dora from the key)
    fresh.load_lora_adapter(str(out), prefix="transformer", adapter_name="x")
    got = forward(fresh, samples[0])
    torch.testing.assert_close(got, forward(model, samples[0]), rtol=1e-4, atol=1e-5)
    assert not torch.allclose(got, base_out, atol=1e-5)


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["lora", "dora", "lokr"])
def test_comfyui_export_merges_to_peft_weights(kind, trained, tiny_model_dir):
    from safetensors.torch import load_file

    from backend.models.export import export_lora

    _, model, _, _, _, path = trained[kind]
    out = export_lora(path, "comfyui", transformer_config=tiny_model_dir)
    sd = load_file(str(out))
    merged = peft_merged(model)
    assert merged
    for module, want in merged.items():
        key = f"diffusion_model.{module}"
        w = base_weight(tiny_model_dir, module)
        if kind == "lokr":
            assert f"{key}.lokr_w1" in sd and f"{key}.lora_up.weight" not in sd
            got = w + comfy_lokr_delta(sd, key)
        else:
            up, down = sd[f"{key}.lora_up.weight"], sd[f"{key}.lora_down.weight"]
            alpha = float(sd[f"{key}.alpha"]) / down.shape[0]
            assert float(sd[f"{key}.alpha"]) == 8.0  # lora_alpha written, not folded
            if kind == "dora":
                assert sd[f"{key}.dora_scale"].shape == (w.shape[0], 1)
                got = comfy_weight_decompose(sd[f"{key}.dora_scale"], w, up @ down, alpha)
            else:
                got = w + alpha * (up @ down)
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5, msg=module)


@pytest.mark.slow
def test_lokr_refuses_the_diffusers_export_and_round_trips_as_reference(trained, tmp_path,
                                                                         tiny_model_dir,
                                                                         samples):
    from backend.models import lora
    from backend.models.export import LoraFormatError, export_lora

    _, model, _, _, _, path = trained["lokr"]
    with pytest.raises(LoraFormatError, match="diffusers' LoRA loaders read LoRA"):
        export_lora(path, "diffusers", out_dir=tmp_path, transformer_config=tiny_model_dir)
    assert not list(tmp_path.glob("*.safetensors"))
    ref = export_lora(path, "reference", out_dir=tmp_path, transformer_config=tiny_model_dir)
    fresh = fresh_transformer(tiny_model_dir)
    lora.load_lora(fresh, ref)
    torch.testing.assert_close(forward(fresh, samples[0]), forward(model, samples[0]),
                               rtol=1e-4, atol=1e-5)


# ------------------------------------------------------------------------------------------
# Schema rules, buckets, the DeepSpeed batch sizes
# ------------------------------------------------------------------------------------------
def test_option_rules_name_the_field():
    from backend.config.errors import ConfigError
    from backend.config.validation import validate

    ok = {"dataset_base_path": "x"}
    cases = [
        ({"optimizer": "prodigy", "zero_stage": 2, "offload_optimizer_device": "cpu"},
         "optimizer: with optimizer offload only adamw runs"),
        ({"customized_optimizer": "os.system"}, "customized_optimizer: input should be"),
        ({"customized_optimizer": "prodigyopt.Prodigy", "optimizer": "adafactor"},
         "customized_optimizer: names another optimizer"),
        ({"lora_type": "lokr", "lora_dropout": 0.1}, "lora_dropout: applies to lora and dora"),
        ({"lora_type": "dora", "zero_stage": 3}, "lora_type: dora reads each layer"),
        ({"validation_every_n_steps": 5}, "validation_every_n_steps: needs held-out"),
        ({"aspect_buckets": True, "height": 64, "width": 64}, "aspect_buckets: a fixed"),
        ({"batch_size": 0}, "batch_size: input should be greater than or equal to 1"),
    ]
    for values, message in cases:
        with pytest.raises(ConfigError) as e:
            validate({**ok, **values})
        assert message in str(e.value), (values, str(e.value))
    # The reference's dotted path maps onto the list (and is never imported).
    from backend.training.optimizers import optimizer_name
    assert optimizer_name(validate({**ok, "customized_optimizer":
                                    "bitsandbytes.optim.AdamW8bit"})) == "adamw8bit"
    for opt in ("adamw8bit", "adafactor", "prodigy"):  # no offload: all allowed
        assert validate({**ok, "optimizer": opt, "zero_stage": 2}).optimizer == opt
    # A reference command's --customized_optimizer imports onto the list, or is reported.
    from backend.planning.importer import import_commands
    cmd = ("accelerate launch examples/qwen_image/model_training/train.py --task sft:train "
           "--dataset_base_path data/x --customized_optimizer ")
    assert optimizer_name(import_commands(cmd + "prodigyopt.Prodigy").config) == "prodigy"
    bad = import_commands(cmd + "evil.module.Optimizer")
    assert bad.config.customized_optimizer is None
    assert any(n.startswith("customized_optimizer: input should be") and
               "evil.module.Optimizer" in n for n in bad.not_understood)


def test_buckets_and_batch_sampler():
    from backend.data.buckets import BucketBatchSampler, bucket_plan, bucket_size, bucket_sizes

    sizes = bucket_sizes(64 * 64)
    assert all(w * h <= 64 * 64 and w % 16 == 0 and h % 16 == 0 for w, h in sizes)
    assert (64, 64) in sizes
    assert bucket_size(200, 100, 64 * 64) == (64, 32)   # 2:1 within the budget
    assert bucket_size(100, 210, 64 * 64) == (32, 64)
    # 6 square, 5 wide, 1 tall image at batch 4.
    items = [(64, 64)] * 6 + [(96, 48)] * 5 + [(48, 96)]
    plan = {tuple(r["size"]): r for r in bucket_plan(items, 4, "pad")}
    assert plan[(64, 64)] == {"size": [64, 64], "images": 6, "batches": 2, "padded": 2,
                              "dropped": 0}
    assert plan[(48, 96)]["padded"] == 3
    drop = {tuple(r["size"]): r for r in bucket_plan(items, 4, "drop")}
    assert drop[(96, 48)]["dropped"] == 1 and drop[(48, 96)]["batches"] == 0
    s = BucketBatchSampler(items, 4, seed=3)
    s.use_epoch(0)
    e0 = list(s)
    assert len(e0) == len(s) == 5
    assert all(len(b) == 4 and len({items[i] for i in b}) == 1 for b in e0)
    assert sorted({i for b in e0 for i in b}) == list(range(12))  # every image each epoch
    s.use_epoch(1)
    assert list(s) != e0
    s.use_epoch(0)
    assert list(s) == e0  # resumable: the order depends on (seed, epoch) only
    # Two processes the loader does not shard: disjoint halves of the same batches.
    r0, r1 = (list(BucketBatchSampler(items, 4, 3, rank=r, world=2)) for r in (0, 1))
    assert len(r0) == len(r1) == 3 and r0 + r1 != []
    with pytest.raises(ValueError, match="batch_size: no bucket holds a full batch"):
        BucketBatchSampler([(64, 64)] * 3, 4, 0, "drop")


def test_deepspeed_batch_sizes_are_derived(tmp_path):
    from backend.planning.plan import deepspeed_config, ds_batch_sizes

    cfg = config(batch_size=4, gradient_accumulation_steps=2, zero_stage=2, num_processes=2,
                 optimizer="adafactor")
    ds = deepspeed_config(cfg)
    assert ds["train_micro_batch_size_per_gpu"] == 4 and "train_batch_size" not in ds
    assert ds["zero_allow_untested_optimizer"] is True
    assert ds_batch_sizes(cfg)["train_batch_size"] == 4 * 2 * 2
    one = deepspeed_config(config(batch_size=4, zero_stage=2))
    assert one["train_micro_batch_size_per_gpu"] == 4 and "zero_allow_untested_optimizer" \
        not in one
    from deepspeed.runtime.config import DeepSpeedConfig
    single = config(batch_size=4, gradient_accumulation_steps=2, zero_stage=2,
                    optimizer="prodigy")
    ds = deepspeed_config(single)
    # What accelerate fills in for "auto", from the derived sizes; DeepSpeed's own check.
    ds.update(train_batch_size=ds_batch_sizes(single)["train_batch_size"],
              gradient_accumulation_steps=2, gradient_clipping=1.0,
              bf16={"enabled": False}, fp16={"enabled": False})
    parsed = DeepSpeedConfig(ds)
    assert parsed.train_batch_size == 8 and parsed.zero_allow_untested_optimizer


# ------------------------------------------------------------------------------------------
# The real train stage: mixed aspect ratios at batch 4, validation loss, caption dropout
# ------------------------------------------------------------------------------------------
def mixed_dataset(folder: Path) -> Path:
    """12 images: 6 square, 4 wide (2:1), 2 tall (1:2), captions by colour."""
    from PIL import Image, ImageDraw

    folder.mkdir(parents=True, exist_ok=True)
    rows = ["image,prompt"]
    colours = [(220, 30, 30), (30, 200, 60), (30, 60, 220), (230, 210, 40)]
    shapes = [(64, 64)] * 6 + [(128, 64)] * 4 + [(64, 128)] * 2
    for i, (w, h) in enumerate(shapes):
        c = colours[i % 4]
        im = Image.new("RGB", (w, h), (255, 255, 255))
        ImageDraw.Draw(im).ellipse((w // 4, h // 4, 3 * w // 4, 3 * h // 4), fill=c)
        im.save(folder / f"{i:02d}.png")
        rows.append(f"{i:02d}.png,zlr style: a {['red', 'green', 'blue', 'yellow'][i % 4]} "
                    f"disc {w}x{h}")
    (folder / "metadata.csv").write_text("\n".join(rows) + "\n", encoding="utf-8")
    return folder


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_train_stage_batches_buckets_validation(tmp_path, models_root,
                                                 plain_accelerate_config):
    """Stage 1 plain; stage 2 under ZeRO-2 with the DeepSpeed JSON the run plan writes
    (micro-batch 4, the 8-bit AdamW as a client optimizer)."""
    from backend.planning.plan import deepspeed_config
    from tests.harness.stages import write_accelerate_config

    zero2 = write_accelerate_config(tmp_path / "accel", "zero2", ds_config=deepspeed_config(
        config(zero_stage=2, batch_size=4, optimizer="adamw8bit"), num_processes=1))
    data = mixed_dataset(tmp_path / "data")
    cache = tmp_path / "cache"
    common = ["--models_dir", models_root, "--offline", "--max_pixels", str(64 * 64),
              "--aspect_buckets", "--caption_dropout", "0.2", "--seed", "0"]
    proc = run_stage(["--task", "sft:data_process", "--dataset_base_path", data,
                      "--dataset_metadata_path", data / "metadata.csv", "--output_path", cache,
                      *common], config_file=plain_accelerate_config)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    import json
    manifest = json.loads((cache / "manifest.json").read_text())
    sizes = sorted({(e["width"], e["height"]) for e in manifest["samples"]})
    assert sizes == [(32, 64), (64, 32), (64, 64)]  # three buckets at the 64x64 budget
    assert (cache / "empty_prompt.safetensors").is_file()

    out = tmp_path / "out"
    proc = run_stage(["--task", "sft:train", "--dataset_base_path", cache, "--output_path", out,
                      "--model_id_with_origin_paths",
                      "Qwen/Qwen-Image:transformer/diffusion_pytorch_model*.safetensors",
                      "--lora_rank", str(RANK), "--lora_target_modules", TARGETS,
                      "--learning_rate", "5e-3", "--batch_size", "4", "--num_epochs", "6",
                      "--validation_samples", "2", "--lr_scheduler", "cosine",
                      "--optimizer", "adamw8bit", "--zero_stage", "2", *common],
                     config_file=zero2)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]
    log = proc.stdout + proc.stderr
    # 10 training samples (2 held out: the last two of the manifest) in 3 buckets.
    assert "batches of 4 from one size bucket each" in log
    assert "ZeRO-2" in log and "AdamW8bit" in log
    events = read_progress(out / "progress.jsonl")
    start = next(e for e in events if e["event"] == "start")
    assert start["batch_size"] == 4
    steps = [e for e in events if e["event"] == "step"]
    assert len(steps) == start["total"] == 6 * start["steps_per_epoch"]
    vals = [e for e in events if e["event"] == "validation"]
    assert vals[0]["step"] == 0 and vals[-1]["step"] == steps[-1]["step"]
    assert {"step", "val_loss", "samples"} <= set(vals[0]) and vals[0]["samples"] == 2
    assert len(vals) >= 3
    assert vals[-1]["val_loss"] < vals[0]["val_loss"], [v["val_loss"] for v in vals]
    assert all(math.isfinite(e["loss"]) for e in steps)
    # The run's LoRA loads back and changes the output.
    from backend.models import lora
    from backend.data.cache import load_cached_samples
    final = sorted(out.glob("epoch-*.safetensors"))[-1]
    sample = load_cached_samples(cache)[0]
    fresh = fresh_transformer(models_root / "Qwen" / "Qwen-Image")
    base = forward(fresh, sample)
    lora.load_lora(fresh, final)
    assert not torch.allclose(forward(fresh, sample), base, atol=1e-5)


def test_dataset_bucket_plan_and_validation_progress(tmp_path):
    from backend.data.dataset import dataset_bucket_plan
    from backend.jobs.watch import ProgressState

    data = mixed_dataset(tmp_path / "data")
    cfg = config(dataset_base_path=str(data), dataset_metadata_path=str(data / "metadata.csv"),
                 aspect_buckets=True, max_pixels=64 * 64, batch_size=4, validation_samples=2)
    plan = dataset_bucket_plan(cfg)
    rows = {tuple(r["size"]): r for r in plan["rows"]}
    assert plan["held_out"] == 2
    assert rows[(64, 64)] == {"size": [64, 64], "images": 6, "batches": 2, "padded": 2,
                              "dropped": 0}
    assert rows[(64, 32)]["images"] == 4 and rows[(64, 32)]["batches"] == 1
    assert (32, 64) not in rows  # both tall images are the held-out ones
    assert "4 batch(es) per epoch" not in plan["text"] and "3 batch(es) per epoch" in plan["text"]
    # The validation events become a second curve beside the training loss.
    state = ProgressState((0, 0))
    for ev in ({"stage": "train", "event": "start", "total": 4},
               {"stage": "train", "event": "validation", "step": 0, "val_loss": 1.5},
               {"stage": "train", "event": "step", "step": 1, "loss": 1.4},
               {"stage": "train", "event": "validation", "step": 1, "val_loss": 1.2}):
        state.apply(ev)
    assert state.val_losses["train"] == [[0, 1.5], [1, 1.2]]
    assert state.losses["train"] == [[1, 1.4]]


def test_batch_of_captions_of_different_lengths_equals_its_samples(tiny_model_dir, samples):
    """A batch pads shorter captions (mask False); its loss is the mean of its samples'
    losses at the same noise level, so padding changes nothing. Caption dropout swaps in
    the empty caption's embedding."""
    from backend.data.batches import drop_captions
    from backend.data.buckets import collate
    from backend.families import get_family

    family = get_family(FAMILY)
    model = fresh_transformer(tiny_model_dir)
    schedule = family.training_schedule()
    a = dict(samples[0])
    b = dict(samples[1])
    b["prompt_emb"] = b["prompt_emb"][:, :-3]  # a shorter caption
    b["prompt_emb_mask"] = b["prompt_emb_mask"][:, :-3]
    batch = collate([a, b])
    assert batch["prompt_emb"].shape[:2] == (2, a["prompt_emb"].shape[1])
    assert batch["prompt_emb_mask"][1].sum() == b["prompt_emb_mask"].sum()
    noise = torch.randn(batch["latents"].shape, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        together = family.loss_at(model, batch, schedule, 400, noise, torch.float32)
        alone = [family.loss_at(model, s, schedule, 400, noise[i:i + 1], torch.float32)
                 for i, s in enumerate((a, b))]
    torch.testing.assert_close(together, (alone[0] + alone[1]) / 2, rtol=1e-4, atol=1e-6)
    empty = {"prompt_emb": a["prompt_emb"][:, :2] * 0, "prompt_emb_mask":
             a["prompt_emb_mask"][:, :2]}
    g = torch.Generator().manual_seed(0)
    dropped = drop_captions(batch, empty, 1.0, g)
    assert dropped["prompt_emb"].shape[1] == 2 and float(dropped["prompt_emb"].abs().sum()) == 0
    assert torch.equal(dropped["latents"], batch["latents"])
    assert drop_captions(batch, empty, 0.0, g) is batch


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["dora", "lokr"])
def test_samples_put_dora_and_lokr_on_the_pipeline(kind, trained, tiny_model_dir, samples):
    """The sample stage's way of applying a LoRA file (diffusers for DoRA, peft for LoKr):
    scale 1 computes what training computed, scale 0.5 less, and deleting it restores
    the base model."""
    from diffusers import QwenImagePipeline

    from backend.training.samples import attach_lora

    _, model, _, _, _, path = trained[kind]
    pipe = QwenImagePipeline.from_pretrained(tiny_model_dir, torch_dtype=torch.float32)
    base = forward(pipe.transformer, samples[0])
    attach_lora(pipe, path, "s")
    pipe.set_adapters(["s"], adapter_weights=[1.0])
    full = forward(pipe.transformer, samples[0])
    torch.testing.assert_close(full, forward(model, samples[0]), rtol=1e-4, atol=1e-5)
    pipe.set_adapters(["s"], adapter_weights=[0.5])
    half = forward(pipe.transformer, samples[0])
    assert (half - base).abs().sum() < (full - base).abs().sum()
    pipe.delete_adapters("s")
    torch.testing.assert_close(forward(pipe.transformer, samples[0]), base)
