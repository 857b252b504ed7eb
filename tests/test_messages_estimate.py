"""The estimate area by key: the memory estimate's lines and verdicts, the target-GPU advice,
the batch line and the import of a reference command are messages (``Msg``) with their
Chinese from the tables in ``backend/core/messages/estimate.py`` -- no English read back."""
from __future__ import annotations

import json

import pytest

from backend.config.errors import ConfigError
from backend.config.presets import load_preset
from backend.core.messages import Msg
from backend.planning import estimator as E
from backend.planning.importer import CommandError, import_commands
from webui.messages import english_left

GB = E.GB
LAUNCH = "accelerate launch {launch} examples/qwen_image/model_training/train.py {flags}"


def chinese(m) -> str:
    """``m``'s Chinese, checked: a message with no English word left."""
    assert isinstance(m, Msg), repr(m)
    zh = m.text("zh")
    assert english_left(zh) == [], (m.code, zh)
    return zh


def stage(name: str, gpu: dict[str, float], host: float = 1.0) -> E.StageEstimate:
    return E.StageEstimate(name, {k: v * GB for k, v in gpu.items()}, {"loading": host * GB})


def estimate(*stages: E.StageEstimate, device: str = "cuda", sources=None) -> E.Estimate:
    return E.Estimate(stages={s.stage: s for s in stages}, device=device, height=512, width=768,
                      image_tokens=1536, text_tokens=256, checkpointing="torch",
                      params={"lora": 12_345_678}, planned=[s.stage for s in stages],
                      sources=sources or {})


# ---------------------------------------------------------------------- the summary
def test_the_summary_lines_are_messages_with_every_part_named_in_chinese():
    est = estimate(stage("data_process", {"text encoder weights": 16.5, "vae weights": 0.25,
                                          "text encode": 0.5}),
                   stage("train", {"base weights (quantized)": 11.0,
                                   "transformer: largest module": 0.3, "lora + adamw": 0.2}),
                   sources={"transformer": "published", "vae": "local"})
    lines = est.summary_lines()
    assert est.summary() == "\n".join(lines)  # the CLI's text is the messages' English
    assert [m.code for m in lines] == ["estimate.shape", "estimate.published",
                                       "estimate.stage_gpu", "estimate.stage_gpu"]
    for m in lines:
        chinese(m)
    assert lines[0] == ("512x768 (1536 image + 256 text tokens), LoRA 12.3 M parameters, "
                        "checkpointing torch")
    assert lines[0].text("zh") == ("512x768（1536 个图像 token + 256 个文本 token），LoRA 参数 "
                                   "12.3 M，检查点方式 `torch`")
    assert lines[1] == ("(transformer: config.json not found locally; sizes of the published "
                        "model)")
    assert lines[3] == ("train: GPU 11.5 GB (base weights (quantized) 11.00, transformer: "
                        "largest module 0.30, lora + adamw 0.20); host RAM 1.0 GB")
    assert lines[3].text("zh") == ("`train`：GPU 11.5 GB（基础模型权重（已量化） 11.00，"
                                   "Transformer：最大模块 0.30，LoRA + AdamW 0.20）；内存 1.0 GB")
    cpu = estimate(stage("train", {}), device="cpu").summary_lines()
    assert cpu[-1] == "train: CPU run 0.0 GB; host RAM 1.0 GB"
    assert chinese(cpu[-1]) == "`train`：CPU 运行 0.0 GB；内存 1.0 GB"


def test_every_part_the_estimator_names_has_chinese():
    import ast
    from pathlib import Path

    from backend.core.messages import EN

    src = ast.parse(Path(E.__file__).read_text())
    named = {n.slice.value for n in ast.walk(src) if isinstance(n, ast.Subscript) and
             isinstance(n.value, ast.Attribute) and n.value.attr in ("gpu", "host") and
             isinstance(n.slice, ast.Constant)}
    named.add("base weights (quantized)")  # "base weights" + " (quantized)"
    for part in sorted(named):
        assert f"part.{part}" in EN, part
        chinese(Msg("estimate.part", name=part, gb=1.0))


def test_a_real_estimate_reads_in_chinese():
    est = E.estimate_memory(load_preset("qwen_image_low_vram"), device="cuda")
    for m in est.summary_lines():
        chinese(m)
    for gpu_gb in (None, 4, 24, 1000):
        for host_gb in (None, 1, 4096):
            chinese(E.fits(est, gpu_gb, host_gb)[1])


# ---------------------------------------------------------------------- the verdicts
def test_the_verdicts_and_hints_of_fits(monkeypatch):
    monkeypatch.setattr(E, "recommend_preset", lambda gpu_gb, *a, **k: "qwen_image_low_vram")
    small = estimate(stage("train", {"activations": 3.2}, host=2.0))
    ok, m = E.fits(small, 4)
    assert ok and m.code == "estimate.fits_gpu"
    assert m == "Fits a 4 GB GPU: the largest stage, train, needs about 3.7 GB (tight: under " \
                "10% headroom); host RAM about 2.0 GB (train)."
    assert chinese(m) == ("放得进 4 GB 的 GPU：最大的阶段 `train` 约需 3.7 GB（偏紧：余量不到 "
                          "10%）；内存约 2.0 GB（`train`）。")
    ok, m = E.fits(small, 80, 1)
    assert not ok and m == "Does not fit in host RAM: host RAM about 2.0 GB (train) of 1 GB."
    assert chinese(m) == "内存不够：内存约 2.0 GB（`train`），共 1 GB。"
    cpu = estimate(stage("train", {}, host=2.0), device="cpu")
    ok, m = E.fits(cpu, None, 64)
    assert ok and m == "Fits: CPU run, host RAM about 2.0 GB (train) of 64 GB."
    assert chinese(m) == "放得下：CPU 运行，内存约 2.0 GB（`train`），共 64 GB。"
    ok, m = E.fits(cpu, None, 1)
    assert not ok and chinese(m) == "放不下：CPU 运行，内存约 2.0 GB（`train`），共 1 GB。"

    # Every stage too large, each with its hint; one that fits named as within.
    big = estimate(stage("data_process", {"text encoder weights": 16.0, "vae weights": 0.3}),
                   stage("train", {"activations": 30.0}),
                   stage("sample", {"transformer weights": 40.0}),
                   stage("caption", {"activations": 1.0}))
    ok, m = E.fits(big, 12)
    assert not ok and m.code == "estimate.no_fit_gpu"
    assert m == ("Does not fit a 12 GB GPU: data_process needs about 16.8 GB (largest part: text "
                 "encoder weights); train needs about 30.5 GB (largest part: activations); "
                 "sample needs about 40.5 GB (largest part: transformer weights). Within it: "
                 "caption 1.5 GB. Stage 1 holds the text encoder and VAE on the GPU: set "
                 "data_process_offload to model (one at a time) or sequential (module by "
                 "module). Try preset qwen_image_low_vram. Sampling holds whole components on "
                 "the GPU: set sample_cpu_offload to sequential (and sample_vae_tiling on), or "
                 "leave the sample stage out. (host RAM about 1.0 GB (data_process))")
    assert chinese(m) == (
        "放不进 12 GB 的 GPU：`data_process` 约需 16.8 GB（最大的部分：文本编码器权重）；`train` "
        "约需 30.5 GB（最大的部分：激活）；`sample` 约需 40.5 GB（最大的部分：Transformer 权重）。"
        "放得下的：`caption` 1.5 GB。阶段 1 把文本编码器和 VAE 同时放在 GPU 上：把 "
        "data_process_offload 设为 `model`（一次一个）或 `sequential`（逐模块）。试试预设 "
        "qwen_image_low_vram。采样时整个组件都放在 GPU 上：把 sample_cpu_offload 设为 "
        "`sequential`（并打开 sample_vae_tiling），或者不运行采样阶段。（内存约 1.0 GB"
        "（`data_process`））")
    # The other hints of stage 1 and of sampling.
    hints = {}
    for dp, sample in (({"vae weights": 20.0}, {"vae decode": 20.0}),
                       ({"vae encode": 20.0}, {"denoise": 20.0})):
        ok, m = E.fits(estimate(stage("data_process", dp), stage("sample", sample)), 12)
        assert not ok and m.params["within"] == ""
        chinese(m)
        hints.update({h.params["hint"].code: h.params["hint"] for h in m.params["hints"]})
    assert set(hints) == {"estimate.hint_stage1_one", "estimate.hint_stage1_streams",
                          "estimate.hint_sample_decode", "estimate.hint_sample_size"}
    assert hints["estimate.hint_sample_decode"] == \
        "The VAE decoder's activations are the peak: turn sample_vae_tiling on."
    assert hints["estimate.hint_sample_decode"].text("zh") == \
        "峰值来自 VAE 解码器的激活：打开 sample_vae_tiling。"


# ---------------------------------------------------------------------- target GPU
def test_the_methods_side_by_side_are_messages():
    rows, _ = E.compare_methods(load_preset("qwen_image_low_vram"), 24 * GB, 25e9)
    labels = {r.name: r.label for r in rows}
    assert labels["layer_offload_nf4"] == "layer offload, nf4 base (bitsandbytes)"
    assert labels["layer_offload_nf4"].text("zh") == "逐层卸载，nf4 基础模型（`bitsandbytes`）"
    for r in rows:
        chinese(r.label)
        chinese(r.why)
        assert json.loads(json.dumps(r.to_dict()))["why"] == str(r.why)
    why = next(r.why for r in rows if r.name == "layer_offload_nf4")
    assert "GB over the bus per step: at least" in why and "dequantizing" in why
    assert "每步经总线传输" in why.text("zh") and "反量化要耗费计算" in why.text("zh")
    plain = next(r.why for r in rows if r.name == "plain")
    assert plain.endswith(", nothing over the bus") and plain.text("zh").endswith("，无需经总线传输")
    assert "（共 24.0 GB）" in plain.text("zh")


def test_the_target_gpu_panel_shows_each_line_in_both_languages():
    from webui.tabs.training import gb_text, target_markdown

    cfg = load_preset("qwen_image_low_vram")
    text, changes = target_markdown(cfg, 24, 25)
    assert changes
    assert '<span class="zl-zh">**显存估算**：单块 24 GB 的 GPU（当前设置）：</span>' in text
    assert "放得下的最快方法：**逐层卸载，nf4 基础模型（`bitsandbytes`）** —— GPU 上" in text
    assert '<span class="zl-zh">会做的修改：`zero_stage` → `0`，' in text
    assert "每步总线传输" in text and "放得下" in text  # the table's headers
    done, again = target_markdown(cfg.model_copy(update=changes), 24, 25)
    assert again == {} and '<span class="zl-zh">表单已经在用这个方法。</span>' in done
    none, nothing = target_markdown(cfg, 1, 25)
    assert nothing == {} and "⚠ 按当前设置，没有哪种单 GPU 方法放得下这块卡" in none
    for line in (text + "\n" + done + "\n" + none).splitlines():
        if english_left(line):
            assert 'class="zl-zh"' in line, line
    under = gb_text(0.02e9)
    assert under == "under 0.1 GB" and chinese(under) == "不到 0.1 GB"
    cell = Msg("estimate.bus_cell", size=under, seconds=1.234)
    assert cell == "under 0.1 GB (≥ 1.2 s)" and chinese(cell) == "不到 0.1 GB（≥ 1.2 秒）"


def test_this_machines_estimate_in_both_languages(monkeypatch):
    from webui.tabs import training

    cfg = load_preset("qwen_image_low_vram")
    monkeypatch.setattr(training, "_machine", [(24.0, 64.0, 2)])
    monkeypatch.setitem(training._recommended, 24.0, "qwen_image_low_vram")
    md = training.estimate_markdown(cfg)
    assert '<span class="zl-en">**Memory estimate** for this machine (2 GPU(s), 24 GB each, ' \
           '64 GB RAM):</span>' in md
    assert '<span class="zl-zh">**显存估算**（本机：2 块 GPU，每块 24 GB，内存 64 GB）：</span>' in md
    assert '<span class="zl-zh">本机推荐的预设：**qwen_image_low_vram**</span>' in md
    for line in md.splitlines():
        if english_left(line):
            assert 'class="zl-zh"' in line, line
    cpu = Msg("estimate.machine_cpu", ram=15.6)
    assert cpu == "no GPU (CPU run), 16 GB RAM" and chinese(cpu) == "没有 GPU，在 CPU 上运行，内存 16 GB"

    def boom(*a, **k):
        raise RuntimeError("no config.json")

    monkeypatch.setattr(E, "estimate_memory", boom)
    md = training.estimate_markdown(cfg)
    assert "**Memory estimate** unavailable: RuntimeError: no config.json" in md
    assert '**显存估算**暂不可用："RuntimeError: no config.json"' in md


# ---------------------------------------------------------------------- batch sizes
def test_the_batch_line_is_a_message():
    from backend.config.validation import validate
    from webui.tabs.training import batch_markdown

    cfg = validate({"batch_size": 2, "gradient_accumulation_steps": 3, "num_processes": 2,
                    "zero_stage": 2}, require_inputs=False)
    md = batch_markdown(cfg)
    m = Msg("batch.images_per_step", total=12, micro=2, accumulation=3, processes=2)
    assert f'<span class="zl-en">{m}</span><span class="zl-zh">{chinese(m)}</span>' == md
    assert m.text("zh") == ("每个优化步的图片数（DeepSpeed 的 `train_batch_size`，自动推出）："
                            "**12** = `batch_size` 2 × `gradient_accumulation_steps` 3 × 2 个进程")


# ---------------------------------------------------------------------- importing a command
def _notes(text: str, **kw) -> dict[str, Msg]:
    result = import_commands(text, **kw)
    out = {}
    for n in result.notes:
        chinese(n)
        out.setdefault(n.code, n)
    return out


def test_every_import_note_is_a_message_with_chinese(tmp_path):
    from tests.harness.seeds import SEED_COMMANDS

    seen: dict[str, Msg] = {}
    seen |= _notes(SEED_COMMANDS, base_dir=tmp_path / "elsewhere")
    yaml_text = ("distributed_type: DEEPSPEED\ndebug: true\nuse_cpu: true\ndeepspeed_config:\n"
                 "  deepspeed_config_file: nope.json\n")
    seen |= _notes(LAUNCH.format(launch="--config_file my.yaml", flags="--task sft:train"),
                   files={"my.yaml": yaml_text})
    seen |= _notes(LAUNCH.format(launch="--config_file my_zero3.yaml", flags="--task sft"),
                   base_dir=tmp_path)
    seen |= _notes(LAUNCH.format(launch="--cpu --deepspeed_config_file nope.json",
                                 flags="--task sft"))
    seen |= _notes("python train.py --config missing.yaml --task sft\necho hi")
    seen |= _notes("echo hi")
    seen |= _notes("\n".join([
        LAUNCH.format(launch="--use_deepspeed", flags="--task sft:data_process "
                      "--offload_models --lora_rank 8 --dataset_base_path d1"),
        LAUNCH.format(launch="", flags="--task sft:train --lora_rank 16 --dataset_base_path "
                      "cache --output_path out"),
        LAUNCH.format(launch="", flags="--task sft:train"),
        LAUNCH.format(launch="", flags="--task sft")]))
    ds = {"bf16": {"enabled": True}, "zero_optimization": {"stage": 2},
          "activation_checkpointing": {}}
    seen |= _notes(LAUNCH.format(launch="--mixed_precision fp16 --deepspeed_config_file ds.json",
                                 flags="--task sft"), files={"ds.json": json.dumps(ds)})
    seen |= _notes(LAUNCH.format(launch="--deepspeed_config_file ds.json", flags="--task sft"),
                   files={"ds.json": json.dumps({"train_batch_size": "auto"})})
    assert set(seen) == {
        "import.recognised", "import.debug", "import.reference_cache", "import.no_precision",
        "import.output_path", "import.given_file", "import.use_cpu",
        "import.deepspeed_missing_named", "import.no_zero_stage", "import.accelerate_missing",
        "import.cpu_flag", "import.deepspeed_missing", "import.no_config_file",
        "import.config_not_found", "import.skipped", "import.no_training_command",
        "import.labelled", "import.another_command", "import.sft_with_split",
        "import.stages_differ", "import.stage1_no_deepspeed", "import.activation_no_effect",
        "import.precision_differs"}
    assert seen["import.recognised"].text("zh").startswith("命令 2：本机没有 ")
    assert "已识别为参考训练器的低显存" in seen["import.recognised"].text("zh")
    missing = seen["import.accelerate_missing"]
    assert missing == (f"command 1: accelerate config 'my_zero3.yaml' not found under "
                       f"{tmp_path} and not one of the reference's files; the form's distributed "
                       f"settings (ZeRO stage, offload, processes, precision) are left as they "
                       f"are. Give the file's contents (upload the file with the command) to "
                       f"import them")
    assert missing.text("zh").startswith(f"命令 1：在 {tmp_path} 下找不到 accelerate 配置 "
                                         f"'my_zero3.yaml'，它也不是参考训练器自带的文件；")
    assert seen["import.stages_differ"] == \
        "lora_rank: command 1 has '8', command 2 '16'; the training stage's value is used"
    assert seen["import.stages_differ"].text("zh") == \
        "lora_rank：命令 1 为 '8'，命令 2 为 '16'；采用训练阶段的值"
    assert seen["import.skipped"].text("zh") == '跳过了命令 1（不是训练命令）："echo hi"'
    assert seen["import.deepspeed_missing"].params["where"] == "on this server"


@pytest.mark.parametrize("text, files, zh", [
    (LAUNCH.format(launch="--config_file b.yaml", flags=""), {"b.yaml": "\x00abc"},
     "二进制文件，不是 YAML 文本"),
    (LAUNCH.format(launch="--config_file b.yaml", flags=""), {"b.yaml": "a: [1"},
     "不是有效的 YAML，\"expected ',' or ']', but got '<stream end>'\"（第 1 行，第 6 列）"),
    (LAUNCH.format(launch="--config_file b.yaml", flags=""), {"b.yaml": "- a\n- b\n"},
     "YAML 文本为 `list` 类型，不是设置的映射"),
    (LAUNCH.format(launch="--config_file b.yaml", flags=""), {"b.yaml": ""},
     "YAML 文本为空，不是设置的映射"),
    ("python train.py --config c.yaml", {"c.yaml": "\x00"}, "二进制文件，不是 YAML 文本"),
])
def test_a_file_that_is_no_config_is_a_message(text, files, zh):
    from webui.tabs.training import import_error_markdown

    with pytest.raises(ConfigError) as e:
        import_commands(text, files=files)
    (problem,) = e.value.problems
    assert problem.code == "import.not_a" and str(problem) in str(e.value)
    assert zh in chinese(problem)
    assert f'<span class="zl-zh">{problem.text("zh")}</span>' in import_error_markdown(e.value)


def test_a_run_config_the_parser_refuses_quotes_its_words(monkeypatch, tmp_path):
    from backend.planning import importer

    def refuse(path):
        raise ValueError("mapping values are not allowed here")

    monkeypatch.setattr(importer, "read_yaml", refuse)
    with pytest.raises(ConfigError) as e:
        import_commands("python train.py --config c.yaml", files={"c.yaml": "a: b: c"})
    (problem,) = e.value.problems
    assert problem == ("--config: not a run config (got 'c.yaml' in command 1: mapping values "
                       "are not allowed here; allowed a run config: a YAML mapping of run "
                       "options (python -m backend.stages.train --help lists them))")
    assert chinese(problem) == (
        "--config：不是运行配置（读到命令 1 中的 'c.yaml'：\"mapping values are not allowed "
        "here\"；应为运行配置：运行选项的 YAML 映射（`python -m backend.stages.train --help` "
        "会列出它们））")


def test_an_open_quote_is_a_message():
    from webui.tabs.training import import_error_markdown

    with pytest.raises(CommandError) as e:
        import_commands("accelerate launch x.py --a 'b")
    m = e.value.args[0]
    assert str(e.value) == ("command text: unterminated ' quote on line 1 (got \"'b\"; allowed "
                            "every quote closed, as a shell reads it)")
    assert chinese(m) == ("命令文本：第 1 行的 `'` 引号没有闭合（读到 \"'b\"；应为每个引号都闭合，"
                          "与 `shell` 读取时一样）")
    md = import_error_markdown(e.value)
    assert md.startswith("✗ ") and f'<span class="zl-zh">{m.text("zh")}</span>' in md


def test_the_import_result_on_the_training_tab(tmp_path):
    from webui.tabs.training import import_notes_markdown

    result = import_commands(LAUNCH.format(launch="--cpu", flags="--task sft --lora_rank 8 "
                                           "--no_such_flag 1"))
    md = import_notes_markdown(result, {"lora_rank": 32}, {"lora_rank": 8})
    for m in (Msg("import.changed", n=1), Msg("import.not_understood"), Msg("import.notes")):
        assert f'<span class="zl-en">{m}</span><span class="zl-zh">{chinese(m)}</span>' in md
    assert "✓ 已导入：改动了 1 个字段，其余字段保持原值。" in md
    assert "- `lora_rank`: `32` → `8`" in md and "--no_such_flag" in md
    assert '<span class="zl-zh">命令 1：--cpu：没有 GPU 时 ZeroLoRA 会自动使用 CPU</span>' in md
    same = import_notes_markdown(result, {}, {})
    assert chinese(Msg("import.unchanged")) in same
