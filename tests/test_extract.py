"""LoRA extraction from a full fine-tune (backend/models/extract.py), on the tiny Qwen-Image
transformer with every Linear weight and some norms and biases changed, saved in shards."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors import safe_open
from safetensors.torch import load_file, save_file

from backend.core.messages import Msg
from backend.models.export import read_transformer_config, transformer_linear_shapes
from backend.models.extract import ExtractError, diff_path, extract_lora, main
from backend.models.lora import merge_lora_file
from tests.harness.loras import transformer_inputs

ROOT = Path(__file__).resolve().parents[1]
# Parameters besides the Linear weights that the simulated fine-tune changes.
OTHER_CHANGED = ("norm", "img_mod.1.bias", "txt_in.bias")


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    """MKL's threaded SVD spins for a tenth of a second per call when the CPUs are shared;
    on one thread the tiny matrices take a millisecond."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def load(folder: Path):
    from diffusers import QwenImageTransformer2DModel

    return QwenImageTransformer2DModel.from_pretrained(str(folder)).eval()


def forward(model) -> torch.Tensor:
    with torch.no_grad():
        return model(**transformer_inputs())[0]


def read(path: Path) -> tuple[dict[str, torch.Tensor], dict[str, str]]:
    with safe_open(str(path), framework="pt") as f:
        return {k: f.get_tensor(k) for k in f.keys()}, dict(f.metadata() or {})


def weights(folder: Path) -> dict[str, torch.Tensor]:
    out = {}
    for file in sorted(folder.glob("*.safetensors")):
        out.update(load_file(str(file)))
    return out


@pytest.fixture(scope="module")
def pair(tiny_model_dir, tmp_path_factory) -> tuple[Path, Path]:
    """(base, tuned) transformer folders; tuned is saved in several shards."""
    base = Path(tiny_model_dir) / "transformer"
    model = load(base)
    g = torch.Generator().manual_seed(7)
    with torch.no_grad():
        for _, module in model.named_modules():
            if isinstance(module, torch.nn.Linear):
                module.weight.add_(torch.randn(module.weight.shape, generator=g) * 0.05)
        for name, p in model.named_parameters():
            if any(mark in name for mark in OTHER_CHANGED) and not (
                    name.endswith(".weight") and p.ndim == 2):
                p.add_(torch.randn(p.shape, generator=g) * 0.05)
    tuned = tmp_path_factory.mktemp("tuned") / "transformer"
    model.save_pretrained(str(tuned), max_shard_size="100KB")
    assert len(list(tuned.glob("diffusion_pytorch_model-*-of-*.safetensors"))) >= 3
    assert (tuned / "diffusion_pytorch_model.safetensors.index.json").is_file()
    return base, tuned


@pytest.fixture(scope="module")
def deltas(pair) -> dict[str, torch.Tensor]:
    """tuned - base of every changed tensor (float64), from the files."""
    a, b = weights(pair[0]), weights(pair[1])
    return {k: b[k].double() - a[k].double() for k in a if not torch.equal(a[k], b[k])}


@pytest.fixture(scope="module")
def full(pair, tmp_path_factory):
    """The full-rank extraction with --other diff, as a ZeroLoRA LoRA and as ComfyUI's."""
    out = tmp_path_factory.mktemp("full")
    ref = extract_lora(*pair, out / "full.safetensors", rank=10_000, other="diff",
                       log=lambda m: None)
    comfy = extract_lora(*pair, out / "full-comfy.safetensors", rank=10_000, fmt="comfyui",
                         other="diff", log=lambda m: None)
    return ref, comfy


def linear_names(pair) -> dict[str, tuple[int, int]]:
    return transformer_linear_shapes(read_transformer_config(pair[0]), "qwen_image")


# ------------------------------------------------------------------------------------------
def test_full_rank_lora_and_diffs_reproduce_the_tuned_model(pair, full, deltas):
    ref, _ = full
    base, tuned = pair
    linear = linear_names(pair)
    # Every Linear changed and is a module of the LoRA; the rest changed is carried beside.
    assert set(ref.modules) == set(linear)
    others = {k for k in deltas if k[: -len(".weight")] not in linear}
    assert set(ref.other) == others and any(k.endswith(".bias") for k in others)
    assert ref.diff_path == diff_path(ref.path) and ref.diff_path.is_file()
    assert all(m.rank == min(linear[n]) for n, m in ref.modules.items())
    assert ref.kept_share == pytest.approx(1.0, abs=1e-6)
    assert any(m.code == "extract.other_beside" for m in ref.said)

    tensors, meta = read(ref.path)
    assert meta["format"] == "zerolora-lora" and meta["rank"] == meta["alpha"] == str(ref.rank)
    assert meta["model_family"] == "qwen_image" and meta["extract_rule"] == "rank=10000"
    assert meta["extract_base"] == str(base.resolve())
    assert all(k.endswith((".lora_A.default.weight", ".lora_B.default.weight")) for k in tensors)

    model = load(base)
    base_out = forward(model)
    diffs, _ = read(ref.diff_path)
    assert set(diffs) == others
    params = dict(model.named_parameters())
    with torch.no_grad():
        for key, d in diffs.items():
            params[key].add_(d)
    assert merge_lora_file(model, ref.path) == len(linear)  # the project's own merge
    expected = forward(load(tuned))
    assert not torch.allclose(base_out, expected, atol=1e-3)
    torch.testing.assert_close(forward(model), expected, rtol=1e-4, atol=1e-5)


def test_comfyui_export_names_modules_and_applies_as_comfyui_does(pair, full, deltas):
    _, comfy = full
    base, tuned = pair
    tensors, meta = read(comfy.path)
    assert meta["zerolora_format"] == "comfyui" and comfy.diff_path is None
    linear = linear_names(pair)
    state = dict(load(base).state_dict())
    model = load(base)
    params = dict(model.named_parameters())
    ups = {}
    for key, value in tensors.items():
        assert key.startswith("diffusion_model."), key
        name = key[len("diffusion_model."):]
        for suffix in (".lora_up.weight", ".lora_down.weight", ".alpha"):
            if name.endswith(suffix):
                assert name[: -len(suffix)] in linear, key  # a Linear of the model
                ups.setdefault(name[: -len(suffix)], {})[suffix] = value
                break
        else:
            # ComfyUI's generic key map: diffusion_model.<x> is the weight <x>.weight (or a
            # parameter named <x>); <x>.diff_b patches <x>.bias.
            if name.endswith(".diff_b"):
                target = name[: -len(".diff_b")] + ".bias"
            else:
                assert name.endswith(".diff"), key
                x = name[: -len(".diff")]
                target = x + ".weight" if x + ".weight" in state else x
            assert target in state, key
            assert target in deltas and target[: -len(".weight")] not in linear
            with torch.no_grad():
                params[target].add_(value)
    assert {t for t in comfy.carried} == set(comfy.other)
    # ComfyUI's LoRA math: W += up @ down * alpha / rank.
    with torch.no_grad():
        for module, part in ups.items():
            down, up = part[".lora_down.weight"], part[".lora_up.weight"]
            scale = part[".alpha"].item() / down.shape[0]
            params[module + ".weight"].add_(up @ down * scale)
    torch.testing.assert_close(forward(model), forward(load(tuned)), rtol=1e-4, atol=1e-5)


def test_low_rank_keeps_the_energy_of_its_singular_values(pair, deltas, tmp_path):
    rank = 3
    res = extract_lora(*pair, tmp_path / "r3.safetensors", rank=rank, other="drop",
                       log=lambda m: None)
    tensors, meta = read(res.path)
    assert res.rank == rank and meta["rank"] == str(rank)
    kept_all = total_all = 0.0
    for module, report in res.modules.items():
        d = deltas[module + ".weight"]
        s2 = torch.linalg.svdvals(d).pow(2)
        total = float(d.pow(2).sum())
        expected = float(s2[:rank].sum()) / total
        assert report.rank == rank
        assert report.share == pytest.approx(expected, rel=1e-5), module
        a = tensors[f"{module}.lora_A.default.weight"].double()
        b = tensors[f"{module}.lora_B.default.weight"].double()
        error = float((d - b @ a).pow(2).sum())
        assert error == pytest.approx((1 - report.share) * total, rel=1e-4, abs=1e-9 * total)
        kept_all += expected * total
        total_all += total
    assert res.kept_share == pytest.approx(kept_all / total_all, rel=1e-5)
    assert 0.05 < res.kept_share < 0.95  # a real truncation
    said = {m.params["module"]: m for m in res.said if m.code == "extract.module"}
    assert said.keys() == res.modules.keys()
    m = said["transformer_blocks.0.attn.to_q"]
    assert m.params["rank"] == rank
    assert m.params["kept"] == f"{100 * res.modules['transformer_blocks.0.attn.to_q'].share:.2f}%"
    assert any(m.code == "extract.summary" for m in res.said)


def test_energy_picks_per_module_the_fewest_ranks_that_keep_it(pair, deltas, tmp_path):
    res = extract_lora(*pair, tmp_path / "e.safetensors", energy=0.9, log=lambda m: None)
    ranks = set()
    for module, report in res.modules.items():
        d = deltas[module + ".weight"]
        share = (torch.linalg.svdvals(d).pow(2).cumsum(0) / d.pow(2).sum()).tolist()
        assert report.share >= 0.9
        assert share[report.rank - 1] >= 0.9 - 1e-9
        assert report.rank == 1 or share[report.rank - 2] < 0.9  # the fewest
        ranks.add(report.rank)
    assert len(ranks) > 1
    # One rank in the file: the largest; smaller ones padded with zeros, changing nothing.
    tensors, meta = read(res.path)
    assert res.rank == max(ranks) and meta["rank"] == str(res.rank)
    assert meta["extract_energy"] == "0.9" and float(meta["extract_energy_kept"]) >= 0.9
    module, report = min(res.modules.items(), key=lambda kv: kv[1].rank)
    a = tensors[f"{module}.lora_A.default.weight"]
    b = tensors[f"{module}.lora_B.default.weight"]
    assert a.shape[0] == b.shape[1] == res.rank
    assert not a[report.rank:].any() and not b[:, report.rank:].any()
    assert a[: report.rank].abs().sum(dim=1).min() > 0


def test_drop_warns_with_the_share_of_the_change_left_out(pair, deltas, tmp_path):
    seen = []
    res = extract_lora(*pair, tmp_path / "d.safetensors", rank=2, other="drop", log=seen.append)
    assert not diff_path(res.path).exists() and res.carried == []
    linear = linear_names(pair)
    other = sum(float(d.pow(2).sum()) for k, d in deltas.items()
                if k[: -len(".weight")] not in linear)
    whole = sum(float(d.pow(2).sum()) for d in deltas.values())
    warning = next(m for m in seen if isinstance(m, Msg) and m.code == "extract.other_dropped")
    assert warning.params["share"] == f"{100 * other / whole:.2f}%"
    assert warning.params["n"] == len(res.other) > 0
    assert warning.startswith("warning:") and warning.text("zh").startswith("警告")


def test_bad_inputs_are_refused_before_any_work_naming_the_flag(pair, tmp_path):
    base, tuned = pair
    out = tmp_path / "x.safetensors"

    def refused(**kw) -> str:
        args = {"base": base, "tuned": tuned, "out": out, "rank": 4, **kw}
        with pytest.raises(ExtractError) as e:
            extract_lora(args.pop("base"), args.pop("tuned"), args.pop("out"), **args)
        assert all(isinstance(p, Msg) for p in e.value.problems)
        assert not out.exists()
        return str(e.value)

    assert "--rank: must be at least 1 (got 0" in refused(rank=0)
    assert "--energy: outside (0, 1] (got 1.5" in refused(rank=None, energy=1.5)
    assert "--energy: outside (0, 1] (got 0.0" in refused(rank=None, energy=0.0)
    assert "--rank/--energy: give exactly one" in refused(rank=4, energy=0.5)
    assert "--rank/--energy: give exactly one" in refused(rank=None)
    assert f"--base: not a folder (got {tmp_path / 'nope'}" in refused(base=tmp_path / "nope")
    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / "config.json").write_text("{}")
    assert "--tuned: no safetensors weights" in refused(tuned=empty)
    assert "--out: not a .safetensors file" in refused(out=tmp_path / "x.pt")
    two = refused(rank=-1, base=tmp_path / "nope")  # every problem at once
    assert "--rank:" in two and "--base:" in two

    other = tmp_path / "other-arch"
    shutil.copytree(tuned, other)
    config = json.loads((other / "config.json").read_text())
    config["num_layers"] = 3
    (other / "config.json").write_text(json.dumps(config))
    assert "--tuned: config.json differs from the one of --base (keys num_layers)" in \
        refused(tuned=other)

    reshaped = tmp_path / "reshaped"
    reshaped.mkdir()
    shutil.copy(base / "config.json", reshaped / "config.json")
    sd = weights(base)
    sd["img_in.weight"] = sd["img_in.weight"].T.contiguous()
    save_file(sd, str(reshaped / "diffusion_pytorch_model.safetensors"))
    assert "--tuned: tensor shapes differ from those of --base (img_in.weight (32, 64) / " \
           "(64, 32))" in refused(tuned=reshaped)

    with pytest.raises(ExtractError, match="--tuned: no tensor differs"):
        extract_lora(base, base, out, rank=2, log=lambda m: None)


def test_cli_refuses_in_the_same_words(pair, tmp_path, capsys):
    base, tuned = pair
    out = tmp_path / "lora.safetensors"
    assert main(["--base", str(base), "--tuned", str(tuned), "--out", str(out),
                 "--energy", "2"]) == 2  # refused (exits.REFUSED)
    assert "--energy: outside (0, 1] (got 2.0" in capsys.readouterr().err
    assert main(["--base", str(base), "--tuned", str(tuned), "--out", str(out),
                 "--rank", "2", "--format", "comfyui"]) == 0
    assert f"written: {out}" in capsys.readouterr().out
    assert all(k.startswith("diffusion_model.") for k in read(out)[0])


@pytest.mark.slow  # a process of its own that loads the model libraries
def test_cli_writes_the_file(pair, tmp_path):
    base, tuned = pair
    out = tmp_path / "cli" / "lora.safetensors"
    res = subprocess.run([sys.executable, "-m", "backend.models.extract", "--base", str(base),
                          "--tuned", str(tuned), "--out", str(out), "--rank", "2",
                          "--format", "diffusers", "--other", "diff"],
                         cwd=ROOT, capture_output=True, text=True, timeout=300,
                         env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert res.returncode == 0, res.stderr[-3000:]
    assert f"written: {out}" in res.stdout
    assert "transformer_blocks.0.attn.to_q: rank 2, " in res.stdout
    assert "the diffusers format cannot carry the" in res.stdout
    tensors, meta = read(out)
    assert tensors and all(k.startswith("transformer.") for k in tensors)
    assert meta["zerolora_format"] == "diffusers" and meta["extract_rule"] == "rank=2"
    assert diff_path(out).is_file()
