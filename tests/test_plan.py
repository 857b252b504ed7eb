"""Run planning: accelerate YAMLs, DeepSpeed JSONs, run.yaml, exact argv, commands.sh."""
from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from backend.config.files import load_config
from backend.config.presets import load_preset
from backend.config.schema import RunConfig
from backend.config.validation import validate
from backend.planning.plan import StagePlan, deepspeed_config, other_node_commands, plan_run
from tests.harness.seeds import comparable, load_accelerate, write_seed_files

REPO = Path(__file__).resolve().parent.parent
PY = sys.executable


def cfg_of(**kw) -> RunConfig:
    return validate({"dataset_base_path": "data/set", **kw})


def low_vram(tmp_path) -> RunConfig:
    base = load_preset("qwen_image_low_vram")
    return validate({**base.to_dict(), "dataset_base_path": str(tmp_path / "data")})


# ------------------------------------------------------------------------------ the seed
def test_low_vram_recipe_reproduces_the_seed_files(tmp_path):
    seed_yaml, seed_json = write_seed_files(tmp_path / "ref")
    run = tmp_path / "run"
    plans = plan_run(low_vram(tmp_path), run, cuda=True)
    assert [p.name for p in plans] == ["data_process", "train", "sample"]
    train = load_accelerate(run / "accelerate_train.yaml")
    assert comparable(train) == comparable(load_accelerate(seed_yaml))
    assert train["deepspeed_config"]["deepspeed_config_file"] == str(
        run / "deepspeed_train.json")
    assert json.loads((run / "deepspeed_train.json").read_text()) == json.loads(
        seed_json.read_text())
    # Stage 1 is plain even though the run uses ZeRO-3.
    stage1 = load_accelerate(run / "accelerate_data_process.yaml")
    assert stage1["distributed_type"] == "NO" and "deepspeed_config" not in stage1
    assert not (run / "deepspeed_data_process.json").exists()


def test_stage_argv_are_exact(tmp_path):
    run = (tmp_path / "run").resolve()
    plans = plan_run(low_vram(tmp_path), run, cuda=True)
    launch = [PY, "-m", "accelerate.commands.launch", "--config_file"]
    common = ["-m", "backend.stages.train", "--config", f"{run}/run.yaml"]
    assert plans[0].argv == launch + [f"{run}/accelerate_data_process.yaml", *common,
                                      "--task", "sft:data_process", "--output_path",
                                      f"{run}/cache", "--progress_file",
                                      f"{run}/progress.jsonl"]
    # accelerate refuses mixed_precision in a YAML that names a DeepSpeed file: flag it.
    assert plans[1].argv == launch + [f"{run}/accelerate_train.yaml", "--mixed_precision",
                                      "bf16", *common, "--task", "sft:train",
                                      "--dataset_base_path", f"{run}/cache",
                                      "--dataset_metadata_path", "none", "--output_path",
                                      f"{run}/output", "--progress_file",
                                      f"{run}/progress.jsonl"]
    assert plans[2].argv == [PY, "-m", "backend.stages.sample", "--config", f"{run}/run.yaml",
                             "--output_dir", f"{run}/samples", "--checkpoints",
                             f"{run}/output"]
    for p in plans:
        assert isinstance(p, StagePlan) and all(isinstance(a, str) for a in p.argv)
        assert not [k for k in p.env if any(s in k.upper() for s in ("TOKEN", "SECRET",
                                                                     "PASSWORD", "KEY"))]


def test_without_split_training_train_runs_task_sft_on_the_dataset(tmp_path):
    run = (tmp_path / "run").resolve()
    plans = plan_run(cfg_of(split_training=False, stages=["train"]), run, cuda=True)
    assert [p.name for p in plans] == ["train"]
    argv = plans[0].argv
    assert argv[argv.index("--task") + 1] == "sft"
    assert "--dataset_base_path" not in argv and "--dataset_metadata_path" not in argv
    assert argv[argv.index("--output_path") + 1] == f"{run}/output"
    assert not (run / "accelerate_data_process.yaml").exists()


def test_only_the_configured_stages_are_planned(tmp_path):
    run = tmp_path / "run"
    plans = plan_run(cfg_of(stages=["data_process"]), run, cuda=True)
    assert [p.name for p in plans] == ["data_process"]
    assert sorted(p.name for p in run.iterdir()) == [
        "accelerate_data_process.yaml", "commands.sh", "run.yaml"]
    plans = plan_run(cfg_of(stages=["train", "sample"]), run, cuda=True)
    assert [p.name for p in plans] == ["train", "sample"]
    # Stage 2 alone reads the cache the user names.
    assert plans[0].argv[plans[0].argv.index("--task") + 1] == "sft:train"
    assert "--dataset_base_path" not in plans[0].argv
    assert not (run / "accelerate_data_process.yaml").exists()
    plans = plan_run(cfg_of(stages=["sample"], lora_checkpoint="lora.safetensors"), run,
                     cuda=True)
    assert plans[0].argv[-2:] == ["--checkpoints", str(Path("lora.safetensors").resolve())]


def test_run_yaml_is_resolved_and_loads(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    run = tmp_path / "run"
    cfg = cfg_of(dataset_metadata_path="data/set/metadata.csv", lora_rank=4)
    plan_run(cfg, run, cuda=False)
    again = load_config(run / "run.yaml")
    assert again.dataset_base_path == str(tmp_path / "data" / "set")
    assert again.dataset_metadata_path == str(tmp_path / "data" / "set" / "metadata.csv")
    assert again.output_path == str(run / "output")
    assert again.progress_file == str(run / "progress.jsonl")
    assert again.lora_rank == 4 and os.path.isabs(again.models_dir)


def test_invalid_configs_are_refused_before_writing(tmp_path):
    bad = RunConfig().model_copy(update={"offload_param_device": "cpu"})
    with pytest.raises(ValueError) as info:
        plan_run(bad, tmp_path / "run", cuda=True)
    assert "offload_param_device" in str(info.value)
    assert not (tmp_path / "run" / "run.yaml").exists()


# ------------------------------------------------------------------------------ CPU / GPU
@pytest.mark.parametrize("cuda,processes,zero,dist,use_cpu,env_cpu", [
    (False, 1, 0, "NO", True, False),
    (False, 2, 0, "MULTI_GPU", True, True),     # torchrun starts them; gloo via the env
    (True, 1, 0, "NO", False, False),
    (True, 2, 0, "MULTI_GPU", False, False),
    (False, 1, 3, "DEEPSPEED", False, False),  # DeepSpeed picks its CPU accelerator
    (False, 2, 2, "DEEPSPEED", False, False),
    (True, 2, 3, "DEEPSPEED", False, False),
])
def test_accelerate_files_per_device(tmp_path, cuda, processes, zero, dist, use_cpu, env_cpu):
    extra = {"offload_param_device": "cpu", "offload_optimizer_device": "cpu"} if zero == 3 \
        else {}
    run = tmp_path / "run"
    cfg = cfg_of(num_processes=processes, zero_stage=zero, mixed_precision="no",
                 gpu_ids="all" if processes == 1 else "0,1", **extra)
    plans = {p.name: p for p in plan_run(cfg, run, cuda=cuda)}
    train = load_accelerate(run / "accelerate_train.yaml")
    assert train["distributed_type"] == dist
    assert train["num_processes"] == processes and train["use_cpu"] is use_cpu
    assert (plans["train"].env.get("ACCELERATE_USE_CPU") == "true") is env_cpu
    assert train.get("gpu_ids") == (cfg.gpu_ids if cuda else None)
    if dist == "DEEPSPEED":
        assert "mixed_precision" not in train
        assert plans["train"].argv[5:7] == ["--mixed_precision", "no"]
        assert train["deepspeed_config"]["zero3_init_flag"] is (zero == 3)
    else:
        assert train["mixed_precision"] == "no"
    stage1 = load_accelerate(run / "accelerate_data_process.yaml")
    assert stage1["distributed_type"] in ("NO", "MULTI_GPU")
    assert stage1["num_processes"] == processes


def test_several_machines(tmp_path):
    run = (tmp_path / "run").resolve()
    cfg = cfg_of(num_machines=3, num_processes=6, main_process_ip="10.1.2.3",
                 main_process_port=29501, zero_stage=3, offload_param_device="cpu",
                 offload_optimizer_device="cpu")
    plans = plan_run(cfg, run, cuda=True)
    train = load_accelerate(run / "accelerate_train.yaml")
    assert (train["num_machines"], train["num_processes"], train["machine_rank"]) == (3, 6, 0)
    assert train["main_process_ip"] == "10.1.2.3" and train["main_process_port"] == 29501
    assert train["deepspeed_config"]["deepspeed_multinode_launcher"] == "standard"
    stage1 = load_accelerate(run / "accelerate_data_process.yaml")
    assert (stage1["num_machines"], stage1["num_processes"]) == (1, 2)
    others = other_node_commands(cfg, run, cuda=True)
    assert [o.name for o in others] == ["train_machine_1", "train_machine_2"]
    for k, other in enumerate(others, 1):
        i = other.argv.index("--machine_rank")
        assert other.argv[i + 1] == str(k)
        rest = other.argv[:i] + other.argv[i + 2:]
        assert rest == plans[1].argv
    text = (run / "commands.sh").read_text()
    assert "# machine_rank 2" in text and "--machine_rank 2" in text
    assert other_node_commands(cfg_of(), run, cuda=True) == []


def test_commands_sh_holds_the_exact_commands(tmp_path):
    run = tmp_path / "run dir"  # a space, to exercise quoting
    plans = plan_run(low_vram(tmp_path).model_copy(update={"offline": True}), run, cuda=True)
    text = (run / "commands.sh").read_text()
    assert text.startswith("#!/usr/bin/env bash\n")
    commands = [shlex.split(block.replace("\\\n", " "), comments=True)
                for block in text.split("\n\n") if block.startswith("# --- stage")]
    assert len(commands) == len(plans)
    for cmd, plan in zip(commands, plans):
        env = [f"{k}={v}" for k, v in plan.env.items()]
        assert cmd == ["env", *env, *plan.argv]
    assert plans[0].env["HF_HUB_OFFLINE"] == "1"
    online = plan_run(low_vram(tmp_path), tmp_path / "online", cuda=True)
    assert {p.env["HF_HUB_OFFLINE"] for p in online} == {"0"}


# ------------------------------------------------------------------------------ DeepSpeed
VARIANTS = {
    "zero1": {"zero_stage": 1},
    "zero2": {"zero_stage": 2},
    "zero2_offload": {"zero_stage": 2, "offload_optimizer_device": "cpu"},
    "zero3": {"zero_stage": 3},
    "zero3_offload": {"zero_stage": 3, "offload_optimizer_device": "cpu",
                      "offload_param_device": "cpu"},
    "zero3_nvme": {"zero_stage": 3, "offload_optimizer_device": "nvme",
                   "offload_param_device": "nvme", "offload_nvme_path": "/local_nvme"},
}

# Fills "auto" exactly as accelerate does (DeepSpeedPlugin + Accelerator._prepare_deepspeed)
# and hands the result to DeepSpeed's own config class with the given data-parallel size.
DS_CHECK = r"""
import copy, json, socket, sys
import deepspeed
from accelerate.utils import DeepSpeedPlugin
from deepspeed.runtime.config import DeepSpeedConfig

s = socket.socket(); s.bind(("127.0.0.1", 0)); port = s.getsockname()[1]; s.close()
deepspeed.init_distributed(dist_backend="gloo", auto_mpi_discovery=False,
                           init_method=f"tcp://127.0.0.1:{port}", rank=0, world_size=1)

def device(block):
    d = getattr(block, "device", None) if block is not None else None
    return "none" if d is None else str(getattr(d, "value", d))

class DataParallel:  # DeepSpeed asks the model-parallel unit for the data-parallel size
    def __init__(self, n): self.n = n
    def get_data_parallel_world_size(self): return self.n

out = []
for case in json.load(sys.stdin):
    ds, world, gas, mp = case["ds"], case["world"], case["gas"], case["mp"]
    plugin = DeepSpeedPlugin(hf_ds_config=copy.deepcopy(ds), zero3_init_flag=case["zero3"])
    plugin.set_mixed_precision(mp)
    plugin.fill_match("gradient_accumulation_steps", must_match=False,
                      gradient_accumulation_steps=gas)
    micro = 1 if plugin.is_auto("train_micro_batch_size_per_gpu") else plugin.get_value(
        "train_micro_batch_size_per_gpu")
    plugin.deepspeed_config_process(must_match=False, **{
        "gradient_clipping": 1.0,
        "zero_optimization.stage3_gather_16bit_weights_on_model_save": False,
        "train_micro_batch_size_per_gpu": micro,
        "train_batch_size": micro * plugin.get_value("gradient_accumulation_steps") * world})
    final = plugin.deepspeed_config
    assert "auto" not in json.dumps(final), final
    c = DeepSpeedConfig(copy.deepcopy(final), mpu=DataParallel(world))
    z = c.zero_config
    out.append({"name": case["name"], "world": c.world_size, "stage": c.zero_optimization_stage,
                "train_batch_size": c.train_batch_size,
                "micro": c.train_micro_batch_size_per_gpu,
                "gas": c.gradient_accumulation_steps, "bf16": c.bfloat16_config.enabled,
                "fp16": c.float16_config.enabled,
                "offload_optimizer": device(z.offload_optimizer),
                "offload_param": device(z.offload_param),
                "pin": (z.offload_param or z.offload_optimizer).pin_memory
                if (z.offload_param or z.offload_optimizer) else None,
                "gather16": z.gather_16bit_weights_on_model_save,
                "activation_checkpointing": "activation_checkpointing" in final,
                "clipping": c.gradient_clipping})
print("RESULT " + json.dumps(out))
"""


def run_ds_check(cases: list[dict]) -> dict[str, dict]:
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    proc = subprocess.run([PY, "-c", DS_CHECK], input=json.dumps(cases), capture_output=True,
                          text=True, env=env, cwd=str(REPO), timeout=900)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]
    line = [x for x in proc.stdout.splitlines() if x.startswith("RESULT ")][-1]
    return {r["name"]: r for r in json.loads(line[len("RESULT "):])}


@pytest.mark.slow  # DeepSpeed's own config class, in a subprocess per world size
def test_deepspeed_json_passes_deepspeeds_config_class_for_every_variant():
    cases, expected = [], {}
    for name, extra in VARIANTS.items():
        for world in (1, 2):
            for mp in ("bf16", "no"):
                cfg = cfg_of(**extra, num_processes=world, mixed_precision=mp,
                             use_gradient_checkpointing=True, gradient_accumulation_steps=2,
                             pin_memory=name != "zero3_offload")
                ds = deepspeed_config(cfg)
                if world > 1:
                    assert "train_batch_size" not in ds
                    assert ds["train_micro_batch_size_per_gpu"] == 1
                key = f"{name}-{world}-{mp}"
                cases.append({"name": key, "ds": ds, "world": world, "gas": 2, "mp": mp,
                              "zero3": cfg.zero_stage == 3})
                expected[key] = (cfg, world, mp)
    results = run_ds_check(cases)
    assert set(results) == set(expected)
    for key, (cfg, world, mp) in expected.items():
        r = results[key]
        assert r["world"] == world and r["stage"] == cfg.zero_stage, r
        assert (r["micro"], r["gas"], r["train_batch_size"]) == (1, 2, 2 * world), r
        assert r["bf16"] is (mp == "bf16") and r["fp16"] is False, r
        assert r["offload_optimizer"] == cfg.offload_optimizer_device, r
        assert r["offload_param"] == cfg.offload_param_device, r
        if r["pin"] is not None:
            assert r["pin"] is cfg.pin_memory, r
        assert r["gather16"] is (cfg.zero_stage == 3), r
        assert r["activation_checkpointing"] is True and r["clipping"] == 1.0, r


def test_deepspeed_json_follows_the_config():
    cfg = cfg_of(zero_stage=3, offload_optimizer_device="nvme", offload_param_device="cpu",
                 offload_nvme_path="/nvme", pin_memory=False, gradient_clipping=0.5,
                 reduce_bucket_size=2e8, overlap_comm=True, use_gradient_checkpointing=True,
                 partition_activations=True, cpu_checkpointing=True)
    ds = deepspeed_config(cfg)
    z = ds["zero_optimization"]
    assert z["offload_optimizer"] == {"device": "nvme", "pin_memory": False,
                                      "nvme_path": "/nvme"}
    assert z["offload_param"] == {"device": "cpu", "pin_memory": False}
    assert z["reduce_bucket_size"] == 200_000_000 and z["overlap_comm"] is True
    assert ds["gradient_clipping"] == 0.5
    assert ds["activation_checkpointing"] == {"partition_activations": True,
                                              "cpu_checkpointing": True,
                                              "contiguous_memory_optimization": False}
    # No block without gradient checkpointing or with DeepSpeed checkpointing off.
    assert "activation_checkpointing" not in deepspeed_config(cfg_of(zero_stage=2))
    assert "activation_checkpointing" not in deepspeed_config(cfg_of(
        zero_stage=2, use_gradient_checkpointing=True, ds_activation_checkpointing=False))
    z2 = deepspeed_config(cfg_of(zero_stage=2, offload_optimizer_device="cpu"))
    assert not [k for k in z2["zero_optimization"] if k.startswith("stage3") or
                k in ("offload_param", "sub_group_size")]


# ------------------------------------------------------------------------------ launching
PROBE = r"""
import json, torch
import torch.distributed as dist
from accelerate import Accelerator
acc = Accelerator()
model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Linear(16, 1))
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
data = torch.utils.data.DataLoader([torch.randn(8) for _ in range(4)], batch_size=1)
model, opt, data = acc.prepare(model, opt, data)
before = [p.detach().clone() for p in model.parameters()]
for x in data:
    with acc.accumulate(model):
        acc.backward(model(x.to(acc.device)).pow(2).mean())
        opt.step(); opt.zero_grad()
    break
info = {"world": dist.get_world_size() if dist.is_initialized() else 1,
        "rank": dist.get_rank() if dist.is_initialized() else 0,
        "type": acc.distributed_type.value, "mixed_precision": acc.mixed_precision}
if acc.state.deepspeed_plugin is not None:
    info.update(train_batch_size=model.train_batch_size(),
                micro=model.train_micro_batch_size_per_gpu(),
                stage=model.zero_optimization_stage())
# One file per rank: ranks share stdout, so their lines can interleave.
with open(f"probe_rank{info['rank']}.json", "w") as f:
    json.dump(info, f)
acc.wait_for_everyone()
acc.end_training()  # tears the process group down, as the train stage does
"""


def launch_probe(tmp_path: Path, plan: StagePlan) -> list[dict]:
    """Run the plan's launch (its accelerate options and env) on a probe script."""
    script = tmp_path / "probe.py"
    script.write_text(PROBE)
    argv = plan.argv[:plan.argv.index("-m", 3)] + [str(script)]
    env = {**os.environ, **plan.env, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO)}
    proc = subprocess.run(argv, capture_output=True, text=True, env=env, cwd=str(tmp_path),
                          timeout=900)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]
    return sorted((json.loads(f.read_text()) for f in tmp_path.glob("probe_rank*.json")),
                  key=lambda r: r["rank"])


@pytest.mark.slow
def test_plain_two_process_cpu_launch_runs_two_ranks(tmp_path):
    cfg = cfg_of(num_processes=2, mixed_precision="no", stages=["train"])
    (plan,) = plan_run(cfg, tmp_path / "run", cuda=False)
    ranks = launch_probe(tmp_path, plan)
    assert [(r["rank"], r["world"], r["type"]) for r in ranks] == [
        (0, 2, "MULTI_CPU"), (1, 2, "MULTI_CPU")]


@pytest.mark.slow
def test_zero3_cpu_offload_two_process_launch_has_consistent_batch_sizes(tmp_path):
    cfg = cfg_of(num_processes=2, mixed_precision="no", stages=["train"], zero_stage=3,
                 offload_optimizer_device="cpu", offload_param_device="cpu",
                 use_gradient_checkpointing=True, initialize_model_on_cpu=True)
    (plan,) = plan_run(cfg, tmp_path / "run", cuda=False)
    ranks = launch_probe(tmp_path, plan)
    assert [r["world"] for r in ranks] == [2, 2]
    for r in ranks:
        assert r["type"] == "DEEPSPEED" and r["stage"] == 3 and r["mixed_precision"] == "no"
        assert (r["micro"], r["train_batch_size"]) == (1, 2)


@pytest.mark.slow
def test_planned_zero3_run_trains_with_the_real_stages(tmp_path, models_root, demo_dataset):
    """plan_run's files and argv drive the real stage 1 (plain) and stage 2 (ZeRO-3 offload)."""
    from backend.core.progress import read_events

    cfg = validate({
        "models_dir": str(models_root), "offline": True,
        "dataset_base_path": str(demo_dataset),
        "dataset_metadata_path": str(demo_dataset / "metadata.csv"), "height": 64,
        "width": 64, "lora_rank": 4, "learning_rate": 1e-3, "max_steps": 2,
        "mixed_precision": "no", "use_gradient_checkpointing": True,
        "zero_stage": 3, "offload_optimizer_device": "cpu", "offload_param_device": "cpu",
        "initialize_model_on_cpu": True, "stages": ["data_process", "train"]})
    run = tmp_path / "run"
    plans = plan_run(cfg, run, cuda=False)
    for plan in plans:
        env = {**os.environ, **plan.env, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
        env.pop("ZEROLORA_MODELS_DIR", None)
        proc = subprocess.run(plan.argv, env=env, cwd=str(REPO), capture_output=True,
                              text=True, timeout=900)
        assert proc.returncode == 0, plan.name + proc.stdout[-2000:] + proc.stderr[-4000:]
    assert list((run / "cache").rglob("*.safetensors"))
    assert (run / "output" / "epoch-0.safetensors").is_file() or list(
        (run / "output").glob("step-*.safetensors"))
    events, _ = read_events(run / "progress.jsonl")
    ends = [(e["stage"], e["status"]) for e in events if e["event"] == "end"]
    assert ends == [("data_process", "succeeded"), ("train", "succeeded")]


def test_a_render_job_is_planned_like_a_run(tmp_path):
    """A render of another run's checkpoints: its own run.yaml (sample stage only, its own
    progress file), the exact command in commands.sh, samples into the other run's folder."""
    from backend.config.files import load_config
    from backend.planning.plan import plan_render

    ckpts = [tmp_path / "other" / "output" / n for n in ("step-2.safetensors",
                                                         "step-4.safetensors")]
    cfg = cfg_of(stages=["data_process", "train", "sample"], sample_steps=3)
    plan, resolved = plan_render(cfg, tmp_path / "job", tmp_path / "other" / "samples", ckpts)
    assert plan.name == "sample" and resolved.stages == ["sample"]
    assert plan.argv[1:3] == ["-m", "backend.stages.sample"]
    i = plan.argv.index("--checkpoints")
    assert plan.argv[i + 1:] == [str(p) for p in ckpts]
    assert plan.argv[plan.argv.index("--output_dir") + 1] == str(tmp_path / "other" / "samples")
    saved = load_config(tmp_path / "job" / "run.yaml")
    assert saved.stages == ["sample"] and saved.sample_steps == 3
    assert saved.progress_file == str((tmp_path / "job" / "progress.jsonl").resolve())
    commands = (tmp_path / "job" / "commands.sh").read_text()
    assert "backend.stages.sample" in commands and "step-4.safetensors" in commands
