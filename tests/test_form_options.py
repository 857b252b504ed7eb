"""The training options' form and tab views, without a server: ``show_if`` fields (every
condition names a field the form has, and the form hides and shows by it), the Dataset
check's bucket plan, the Training tab's derived DeepSpeed batch size, and the Run tab's
loss plot with its validation series. The browser sees them in tests/test_ui_options.py."""
from __future__ import annotations

import os


os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")


def test_every_show_if_names_a_controlling_field_the_form_has():
    from backend.config.meta import base_type, field_meta
    from backend.config.schema import FIELDS
    from webui.form import show_if, show_if_controllers, visible_fields

    conditional = {n: show_if(n) for n in FIELDS if show_if(n)}
    assert {"adafactor_decay_rate", "prodigy_d_coef", "adam_beta1", "lokr_factor",
            "lr_power", "logit_std", "timestep_shift"} <= set(conditional)
    problems = []
    for name, cond in conditional.items():
        if name not in visible_fields():
            problems.append(f"{name}: has show_if but the form does not show it")
        for ctl, values in cond.items():
            if ctl not in FIELDS:
                problems.append(f"{name}: show_if names {ctl!r}, not a schema field")
            elif ctl not in visible_fields():
                problems.append(f"{name}: show_if names {ctl!r}, which the form does not show")
            elif not set(values) <= set(field_meta(ctl).get("choices") or
                                        ([True, False] if base_type(ctl) is bool else [])):
                problems.append(f"{name}: show_if values {values} are not all choices of {ctl} "
                                f"({field_meta(ctl).get('choices')})")
    assert problems == []
    assert set(show_if_controllers()) == {"optimizer", "lora_type", "lr_scheduler",
                                          "timestep_sampling", "prior_preservation",
                                          "diff_output_preservation", "executor",
                                          "enable_wandb_log", "enable_swanlab_log"}


def test_form_hides_and_shows_by_show_if_and_keeps_hidden_values():
    import gradio as gr

    from webui.form import Form

    with gr.Blocks() as demo:
        form = Form(defaults={"optimizer": "adafactor", "adafactor_decay_rate": -0.5})
        form.render_snapshot()
        form.render_rest()
        form.bind_show_if()
    comps = form.components
    # At first the preset's choice decides.
    assert comps["adafactor_decay_rate"].visible and comps["adafactor_clip_threshold"].visible
    assert not comps["adam_beta1"].visible and not comps["prodigy_d_coef"].visible
    assert comps["optimizer"].visible and comps["learning_rate"].visible
    # Changing optimizer updates every field it controls, and only those.
    deps = [d for d in demo.fns.values()
            if [b._id for b in d.inputs] == [comps["optimizer"]._id]]
    assert len(deps) == 1
    dep = deps[0]
    outputs = [b.elem_id[len("field-"):] for b in dep.outputs]
    assert set(outputs) == {"adam_beta1", "adam_beta2", "adam_epsilon", "adafactor_decay_rate",
                            "adafactor_clip_threshold", "prodigy_d_coef",
                            "prodigy_use_bias_correction", "prodigy_safeguard_warmup"}
    seen = dict(zip(outputs, (u["visible"] for u in dep.fn("prodigy"))))
    assert seen["prodigy_d_coef"] and seen["prodigy_safeguard_warmup"]
    assert not seen["adam_beta1"] and not seen["adafactor_decay_rate"]
    seen = dict(zip(outputs, (u["visible"] for u in dep.fn("adamw8bit"))))
    assert seen["adam_beta1"] and not seen["prodigy_d_coef"]
    # A hidden field is still part of the config (a preset round-trips).
    cfg, problems = form.to_config(form.event_inputs(
        {name: comp.value for name, comp in comps.items()}))
    assert problems == [] and cfg["adafactor_decay_rate"] == -0.5 and "adam_beta1" in cfg


def _mixed_dataset(folder):
    from PIL import Image

    folder.mkdir()
    rows = ["image,prompt"]
    sizes = [(64, 64)] * 5 + [(128, 64)] * 3 + [(64, 128)] * 2
    for i, (w, h) in enumerate(sizes):
        Image.new("RGB", (w, h), (40 * i % 255, 80, 120)).save(folder / f"{i:02d}.png")
        rows.append(f"{i:02d}.png,image {i}")
    (folder / "metadata.csv").write_text("\n".join(rows) + "\n", encoding="utf-8")
    return folder


def test_dataset_check_shows_the_bucket_plan(tmp_path):
    from backend.config.validation import validate
    from backend.data.dataset import validate_dataset
    from webui.tabs.dataset import bucket_plan_section

    folder = _mixed_dataset(tmp_path / "mixed")
    data = {"dataset_base_path": str(folder), "dataset_metadata_path": str(folder / "metadata.csv"),
            "max_pixels": 64 * 64}
    form = {**data, "batch_size": 2, "aspect_buckets": True, "bucket_remainder": "drop",
            "validation_samples": 1}
    # The form had problems elsewhere: the check's config holds the data fields only, and
    # the plan takes the batch fields (and the buckets' sizes) from the form.
    data_only = validate(data, require_inputs=False)
    text = bucket_plan_section(data_only, form, validate_dataset(data_only))
    assert "batch_size` 2" in text and "bucket_remainder` drop" in text
    table = [line for line in text.splitlines() if line.startswith("| ") and "×" in line
             and "span" not in line]
    # 9 trained images (the last held out): 5 square, 3 wide, 1 tall at the 64² budget.
    assert sorted(table) == sorted(["| 64×64 | 5 | 2 | 0 | 1 |", "| 64×32 | 3 | 1 | 0 | 1 |",
                                    "| 32×64 | 1 | 0 | 0 | 1 |"]), text
    assert "3 image(s) dropped each epoch" in text and "3 batch(es) per epoch" in text
    assert "1 image(s) held out" in text
    assert "分桶计划" in text and "丢弃" in text  # both languages
    # Padded instead of dropped; no plan at batch 1 without buckets; none while the batch
    # fields have problems.
    cfg = validate({**form, "bucket_remainder": "pad", "validation_samples": 0},
                   require_inputs=False)
    text = bucket_plan_section(cfg, cfg.to_dict(), validate_dataset(cfg))
    assert "| 32×64 | 2 | 1 | 0 | 0 |" in text and "| 64×32 | 3 | 2 | 1 | 0 |" in text
    assert "dropped each epoch" not in text
    assert bucket_plan_section(data_only, data, validate_dataset(data_only)) == ""
    assert bucket_plan_section(data_only, {**form, "batch_size": 0},
                               validate_dataset(data_only)) == ""


def test_training_tab_shows_the_deepspeed_batch_size_the_plan_derives():
    from backend.config.validation import validate
    from backend.planning.plan import deepspeed_config, ds_batch_sizes
    from webui.tabs.training import batch_markdown

    cfg = validate({"batch_size": 2, "gradient_accumulation_steps": 3, "num_processes": 2,
                    "zero_stage": 2}, require_inputs=False)
    text = batch_markdown(cfg)
    assert ds_batch_sizes(cfg)["train_batch_size"] == 12
    assert "**12** = `batch_size` 2 × `gradient_accumulation_steps` 3 × 2 process(es)" in text
    assert "每个优化步的图片数" in text and "2 个进程" in text
    # The generated DeepSpeed file carries the same micro-batch, never a train_batch_size
    # of its own that could disagree.
    ds = deepspeed_config(cfg)
    assert ds["train_micro_batch_size_per_gpu"] == 2 and "train_batch_size" not in ds
    assert batch_markdown(None) == ""


def test_loss_plot_has_a_validation_series_in_the_page_language():
    from webui.tabs.run import loss_frame, loss_plot, progress_html

    frame = loss_frame([[1, 0.5], [2, 0.4]], [[0, 0.9], [2, 0.7]], "en")
    assert list(frame.columns) == ["step", "loss", "series"]
    assert str(frame["step"].dtype) == "float64" and str(frame["loss"].dtype) == "float64"
    assert frame.groupby("series")["loss"].apply(list).to_dict() == {
        "training loss": [0.5, 0.4], "validation loss": [0.9, 0.7]}
    assert set(loss_frame([[1, 0.5]], [[0, 0.9]], "zh")["series"]) == {"训练损失", "验证损失"}
    assert len(loss_frame([])) == 0 and str(loss_frame([])["step"].dtype) == "float64"
    # The legend is sent with the points (gradio keeps the first value's legend otherwise).
    update = loss_plot([[1, 0.5]], [[0, 0.9]], "zh")
    assert update.colors_in_legend == ["训练损失", "验证损失"] and update.color_title == "曲线"
    assert loss_plot([[1, 0.5]], [], "en").colors_in_legend == ["training loss"]
    html = progress_html({"status": "running", "loss": 0.4, "val_losses": [[0, 0.9], [2, 0.7]]})
    assert "validation loss <b>0.7000</b> at step 2" in html and "验证损失 <b>0.7000</b>" in html
    assert "validation" not in progress_html({"status": "running", "loss": 0.4})
