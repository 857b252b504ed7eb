"""Messages of the page area: each code in English and Chinese (see backend.core.messages)."""

EN: dict[str, str] = {
    # -- Dataset tab: loading, saving, uploads, the check (webui/tabs/dataset.py, webui/datasets.py)
    "dataset.loaded": "{n} image(s); captions from {file}.",
    "dataset.loaded_txt": "{n} image(s); captions from one .txt per image.",
    "dataset.saved": "✓ Saved {n} caption(s) in {file}.",
    "dataset.saved_txt": "✓ Saved {n} caption(s) in the .txt files.",
    "dataset.uploaded": "✓ New dataset folder {folder} with {n} image(s).",
    "dataset.skipped_kind": "{name}: skipped (not an image or caption file)",
    "dataset.skipped_ext": "{name}: skipped (allowed {exts}, .zip)",
    "dataset.no_caption": "{name}: no caption yet (an empty {txt} was created; write one in "
                          "the table)",
    "dataset.check_bad": "✗ {bad} problem(s) in {items} item(s) — fix them before training.",
    "dataset.check_ok": "✓ {n} image(s), all readable and captioned.",
    "dataset.check_ok_warned": "✓ {n} image(s), all readable and captioned. ⚠ {warned} "
                               "warning(s): {warnings:join=  \n}",
    # -- Dataset tab: the bucket plan of the check
    "bucket.head": "**Bucket plan** (`batch_size` {batch_size}, `bucket_remainder` "
                   "{remainder}): {batches} batch(es) per epoch",
    "bucket.col_bucket": "bucket (W×H)",
    "bucket.col_images": "images",
    "bucket.col_batches": "batches",
    "bucket.col_padded": "padded",
    "bucket.col_dropped": "dropped",
    "bucket.dropped": "⚠ {n} image(s) dropped each epoch: a bucket's last batch is not full "
                      "(set `bucket_remainder` to pad to keep them).",
    "bucket.none_full": "⚠ No bucket holds a full batch: lower `batch_size`, or set "
                        "`bucket_remainder` to pad.",
    "bucket.held_out": "{n} image(s) held out for the validation loss (`validation_samples`).",
    # -- Dataset tab: the sample-prompt offer
    "samples.suggest": "The sample prompts (Training tab, Samples) do not mention this "
                       "dataset. Render its own captions instead?",
    "samples.set": "✓ Sample prompts set to {n} of the dataset's captions (Training tab, "
                   "Samples).",
    # -- Dataset tab: writing captions (a caption run)
    "caption.memory": "Captioning model: {params:.2f} B parameters, {weights:.1f} GB in bf16. "
                      "GPU at batch {batch}: about {none:.1f} GB (none), {sequential:.1f} GB "
                      "(sequential, weights in host RAM).",
    "caption.lock": "🔒 Caption run `{run}` is writing this folder's captions: the table is "
                    "read-only until it ends.",
    "caption.queued": "○ Caption run `{run}` queued.",
    "caption.progress": "○ Captioning (run `{run}`, {status:@status})…",
    "caption.progress_count": "○ Captioning (run `{run}`, {status:@status}) {done}/{total} "
                              "images…",
    "caption.finished": "✓ Caption run `{run}` finished: {n} image(s) captioned.",
    "caption.ended": "✗ Caption run `{run}` {status:@status}.",
    "caption.none_to_stop": "No caption run to stop.",
    "caption.stopping": "○ Stopping caption run `{run}`…",
    # -- Results tab: the grid and renders (webui/tabs/results.py, webui/jobs.py)
    "results.no_checkpoint": "This run has no LoRA checkpoint yet.",
    "results.columns": "Columns: **{titles:join=** | **}** — one row per prompt",
    "results.no_samples": "No samples yet.",
    "results.base_model": "base model",
    "results.input_images": "input images",
    "results.input_caption": "input images · {prompt}",
    "results.caption": "{title} · seed {seed} · {prompt}",
    "results.set_run": "samples rendered by the run",
    "results.set_render": "render {job}",
    "results.choose_run": "✗ Choose a run first.",
    "results.not_ended": "✗ Run `{run}` is {status:@status}: render when it has ended.",
    "results.render_queued": "○ Rendering (job `{job}`)… the grid fills in when it ends.",
    "results.rendering": "○ Rendering (job `{job}`, {status:@status})…",
    "results.rendering_count": "○ Rendering (job `{job}`, {status:@status}) ({done}/{total} "
                               "images)…",
    "results.rendered": "✓ Render `{job}` finished.",
    "results.render_ended": "✗ Render `{job}` {status:@status}:",
    "results.render_ended_why": "✗ Render `{job}` {status:@status}: {why:q}",
    # -- Model tab: presets and the diff from the loaded one (webui/tabs/model.py)
    "preset.same": "Same as preset **{name}**.",
    "preset.same_defaults": "Same as preset **defaults**.",
    "preset.changes": "**{n}** change(s) from preset **{name}**:",
    "preset.changes_defaults": "**{n}** change(s) from preset **defaults**:",
    "preset.col_field": "field",
    "preset.col_preset": "preset",
    "preset.col_now": "now",
    "preset.saved": "✓ Saved preset **{name}** ({file}).",
    "preset.loaded": "Loaded preset **{name}**.",
}

ZH: dict[str, str] = {
    "dataset.loaded": "{n} 张图片；描述来自 {file}。",
    "dataset.loaded_txt": "{n} 张图片；描述来自每张图片的同名 .txt。",
    "dataset.saved": "✓ 已把 {n} 条描述保存到 {file}。",
    "dataset.saved_txt": "✓ 已把 {n} 条描述保存到各图片的 .txt 文件。",
    "dataset.uploaded": "✓ 新数据集文件夹 {folder}，共 {n} 张图片。",
    "dataset.skipped_kind": "{name}：已跳过（不是图片或描述文件）",
    "dataset.skipped_ext": "{name}：已跳过（允许 {exts}，.zip）",
    "dataset.no_caption": "{name}：还没有描述（已创建空的 {txt}；请在表格里填写）",
    "dataset.check_bad": "✗ {items} 项中有 {bad} 个问题——训练前请先修正。",
    "dataset.check_ok": "✓ {n} 张图片，全部可读且都有描述。",
    "dataset.check_ok_warned": "✓ {n} 张图片，全部可读且都有描述。⚠ {warned} 条警告："
                               "{warnings:join=  \n}",
    "bucket.head": "**分桶计划**（`batch_size` {batch_size}，`bucket_remainder` "
                   "{remainder}）：每个 epoch {batches} 个批次",
    "bucket.col_bucket": "分桶（宽×高）",
    "bucket.col_images": "图片",
    "bucket.col_batches": "批次",
    "bucket.col_padded": "补齐",
    "bucket.col_dropped": "丢弃",
    "bucket.dropped": "⚠ 每个 epoch 丢弃 {n} 张图片：某个分桶的最后一个批次不满（把 "
                      "`bucket_remainder` 设为 pad 可保留它们）。",
    "bucket.none_full": "⚠ 没有哪个分桶能凑满一个批次：减小 `batch_size`，或把 "
                        "`bucket_remainder` 设为 pad。",
    "bucket.held_out": "留出 {n} 张图片用于验证损失（`validation_samples`）。",
    "samples.suggest": "测试提示词（训练页，样图）没有提到这个数据集。改用它自己的描述来渲染吗？",
    "samples.set": "✓ 测试提示词已设为数据集的 {n} 条描述（训练页，样图）。",
    "caption.memory": "描述模型：{params:.2f} B 参数，bf16 下 {weights:.1f} GB。批大小 {batch} "
                      "时 GPU 约需 {none:.1f} GB（none），{sequential:.1f} GB（sequential，"
                      "权重留在内存中）。",
    "caption.lock": "🔒 描述任务 `{run}` 正在写这个文件夹的描述：它结束前表格只读。",
    "caption.queued": "○ 描述任务 `{run}` 已排队。",
    "caption.progress": "○ 正在写描述（任务 `{run}`，{status:@status}）……",
    "caption.progress_count": "○ 正在写描述（任务 `{run}`，{status:@status}） {done}/{total} "
                              "张图……",
    "caption.finished": "✓ 描述任务 `{run}` 已完成：写了 {n} 张图的描述。",
    "caption.ended": "✗ 描述任务 `{run}` {status:@status}。",
    "caption.none_to_stop": "没有可停止的描述任务。",
    "caption.stopping": "○ 正在停止描述任务 `{run}`……",
    "results.no_checkpoint": "这个运行还没有 LoRA 检查点。",
    "results.columns": "列：**{titles:join=** | **}** —— 每条提示词一行",
    "results.no_samples": "还没有样图。",
    "results.base_model": "基础模型",
    "results.input_images": "输入图像",
    "results.input_caption": "输入图像 · {prompt}",
    "results.caption": "{title} · 种子 {seed} · {prompt}",
    "results.set_run": "运行期间渲染的样图",
    "results.set_render": "渲染 {job}",
    "results.choose_run": "✗ 请先选择一个运行。",
    "results.not_ended": "✗ 运行 `{run}` {status:@status}：请在它结束后再渲染。",
    "results.render_queued": "○ 正在渲染（任务 `{job}`）……结束后网格会填满。",
    "results.rendering": "○ 正在渲染（任务 `{job}`，{status:@status}）……",
    "results.rendering_count": "○ 正在渲染（任务 `{job}`，{status:@status}）（{done}/{total} "
                               "张图）……",
    "results.rendered": "✓ 渲染 `{job}` 已完成。",
    "results.render_ended": "✗ 渲染 `{job}` {status:@status}：",
    "results.render_ended_why": "✗ 渲染 `{job}` {status:@status}：{why:q}",
    "preset.same": "与预设 **{name}** 相同。",
    "preset.same_defaults": "与默认设置相同。",
    "preset.changes": "与预设 **{name}** 相比有 **{n}** 处改动：",
    "preset.changes_defaults": "与默认设置相比有 **{n}** 处改动：",
    "preset.col_field": "字段",
    "preset.col_preset": "预设",
    "preset.col_now": "现在",
    "preset.saved": "✓ 已保存预设 **{name}**（{file}）。",
    "preset.loaded": "已载入预设 **{name}**。",
}
