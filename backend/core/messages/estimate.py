"""Messages of the estimate area: each code in English and Chinese (see backend.core.messages).

The memory estimate and its verdicts (``backend.planning.estimator``), the parts of a stage's
estimate (``part.<name>``, shown with ``{x:@part}``), the single-GPU methods side by side
(``method.``), the Training tab's batch line (``batch.``) and the import of a reference
command (``import.``; ``import.launch.<what>`` words the reference's shipped files)."""

EN: dict[str, str] = {
    # -- the estimate's summary (Estimate.summary_lines)
    "estimate.shape": "{height}x{width} ({image_tokens} image + {text_tokens} text tokens), "
                      "LoRA {lora_m:.1f} M parameters, checkpointing {checkpointing}",
    "estimate.shape_full": "{height}x{width} ({image_tokens} image + {text_tokens} text "
                           "tokens), full fine-tune of {trained_m:.0f} M parameters "
                           "({disk:.1f} GB on disk per checkpoint), checkpointing "
                           "{checkpointing}",
    "estimate.published": "({components}: config.json not found locally; sizes of the "
                          "published model)",
    "estimate.stage_gpu": "{stage}: GPU {gpu:.1f} GB{parts}; host RAM {host:.1f} GB",
    "estimate.stage_cpu": "{stage}: CPU run {gpu:.1f} GB{parts}; host RAM {host:.1f} GB",
    "estimate.parts": " ({parts})",
    "estimate.part": "{name:@part} {gb:.2f}",
    # -- the verdicts (estimator.fits)
    "estimate.host": "host RAM about {gb:.1f} GB ({stage})",
    "estimate.host_of": "host RAM about {gb:.1f} GB ({stage}) of {total:g} GB",
    "estimate.cpu_fits": "Fits: CPU run, {host}.",
    "estimate.cpu_no_fit": "Does not fit: CPU run, {host}.",
    "estimate.no_fit_gpu": "Does not fit a {gpu:g} GB GPU: {needs:join=; }.{within}"
                           "{hints:join=} ({host})",
    "estimate.needs": "{stage} needs about {gb:.1f} GB (largest part: {part:@part})",
    "estimate.within": " Within it: {stages}.",
    "estimate.stage_gb": "{stage} {gb:.1f} GB",
    "estimate.hint": " {hint}",
    "estimate.no_fit_host": "Does not fit in host RAM: {host}.",
    "estimate.fits_gpu": "Fits a {gpu:g} GB GPU: the largest stage, {stage}, needs about "
                         "{gb:.1f} GB{tight}; {host}.",
    "estimate.tight": " (tight: under 10% headroom)",
    "estimate.hint_stage1_both": "Stage 1 holds the text encoder and VAE on the GPU: set "
                                 "data_process_offload to model (one at a time) or sequential "
                                 "(module by module).",
    "estimate.hint_stage1_one": "Stage 1 holds a whole encoder on the GPU: set "
                                "data_process_offload to sequential (module by module).",
    "estimate.hint_stage1_streams": "Stage 1 already streams its weights "
                                    "(data_process_offload sequential): lower max_pixels (or "
                                    "height/width).",
    "estimate.hint_preset": "Try preset {preset}.",
    "estimate.hint_sample_weights": "Sampling holds whole components on the GPU: set "
                                    "sample_cpu_offload to sequential (and sample_vae_tiling "
                                    "on), or leave the sample stage out.",
    "estimate.hint_sample_decode": "The VAE decoder's activations are the peak: turn "
                                   "sample_vae_tiling on.",
    "estimate.hint_sample_size": "Lower sample_height/sample_width, or leave the sample stage "
                                 "out.",
    # -- the Training tab: this machine
    "estimate.machine_head": "**Memory estimate** for this machine ({where}):",
    "estimate.machine_gpus": "{n} GPU(s), {gpu:.0f} GB each, {ram:.0f} GB RAM",
    "estimate.machine_cpu": "no GPU (CPU run), {ram:.0f} GB RAM",
    "estimate.unavailable": "**Memory estimate** unavailable: {error}",
    "estimate.recommended": "Recommended preset here: **{preset}**",
    # -- the Training tab: a target GPU, the methods side by side
    "estimate.target_head": "**Memory estimate** for one {gpu:g} GB GPU (these settings):",
    "estimate.under_tenth": "under 0.1 GB",
    "estimate.bus_cell": "{size} (≥ {seconds:.1f} s)",
    "estimate.no_method": "⚠ No single-GPU method fits this card at these settings: lower the "
                          "resolution or the LoRA rank, or pick a larger GPU.",
    "estimate.fastest": "Fastest that fits: **{label}** — {why}.",
    "estimate.form_uses": "The form already uses it.",
    "estimate.changes": "Changes it makes: {changes}",
    "method.plain": "bf16 base on the GPU",
    "method.fp8": "fp8 base (torchao weight-only)",
    "method.int8": "int8 base (torchao weight-only)",
    "method.nf4": "nf4 base (bitsandbytes)",
    "method.layer_offload": "layer offload, bf16 base",
    "method.layer_offload_int8": "layer offload, int8 base (bitsandbytes)",
    "method.layer_offload_nf4": "layer offload, nf4 base (bitsandbytes)",
    "method.zero3_offload": "DeepSpeed ZeRO-3, parameters + optimizer offloaded",
    "method.full_plain": "full fine-tune, no DeepSpeed (weights, grads and AdamW on the GPU)",
    "method.full_zero2_offload": "full fine-tune, DeepSpeed ZeRO-2, optimizer offloaded",
    "method.full_zero3_offload": "full fine-tune, DeepSpeed ZeRO-3, parameters + optimizer "
                                 "offloaded",
    "method.why": "{gpu:.1f} GB on the GPU{of}, {host:.1f} GB host RAM{bus}{quant}",
    "method.of": " of {total:.1f}",
    "method.bus": ", {gb:.1f} GB over the bus per step: at least {seconds:.2f} s at "
                  "{bandwidth:g} GB/s",
    "method.no_bus": ", nothing over the bus",
    "method.quant": "; dequantizing costs compute (about {factor:g}x bf16)",
    # -- the parts of a stage's estimate (StageEstimate.gpu / .host keys)
    "part.base weights": "base weights",
    "part.base weights (offloaded)": "base weights (offloaded)",
    "part.base weights (quantized)": "base weights (quantized)",
    "part.text encoder weights": "text encoder weights",
    "part.vae weights": "vae weights",
    "part.transformer weights": "transformer weights",
    "part.lora weights": "lora weights",
    "part.gathered parameters": "gathered parameters",
    "part.persistent parameters": "persistent parameters",
    "part.lora + adamw": "lora + adamw",
    "part.ddp buckets": "ddp buckets",
    "part.lora grads": "lora grads",
    "part.grads": "grads",
    "part.weights + grads + adamw": "weights + grads + adamw",
    "part.adamw (offloaded)": "adamw (offloaded)",
    "part.adamw": "adamw",
    "part.reduce bucket": "reduce bucket",
    "part.ema": "EMA of the trained weights",
    "part.activations": "activations",
    "part.checkpointed inputs": "checkpointed inputs",
    "part.checkpointed inputs (offloaded)": "checkpointed inputs (offloaded)",
    "part.backward buffers": "backward buffers",
    "part.loading": "loading",
    "part.loading (not reused)": "loading (not reused)",
    "part.text encode": "text encode",
    "part.vae encode": "vae encode",
    "part.denoise": "denoise",
    "part.vae decode": "vae decode",
    "part.vae decode (tiled)": "vae decode (tiled)",
    "part.text encoder: largest module": "text encoder: largest module",
    "part.vae: largest module": "vae: largest module",
    "part.transformer: largest module": "transformer: largest module",
    "part.base weights (pinned, offloaded)": "base weights (pinned, offloaded)",
    "part.base weights (resident)": "base weights (resident)",
    "part.dequantized weight": "dequantized weight",
    "part.lora weights + grads": "lora weights + grads",
    "part.offloaded blocks (running + prefetched)": "offloaded blocks (running + prefetched)",
    # -- the Training tab: batch sizes
    "batch.images_per_step": "Images per optimizer step (DeepSpeed's `train_batch_size`, "
                             "derived): **{total}** = `batch_size` {micro} × "
                             "`gradient_accumulation_steps` {accumulation} × {processes} "
                             "process(es)",
    # -- importing a command: what the Training tab says
    "import.changed": "✓ Imported: {n} field(s) changed; every other field kept its value.",
    "import.unchanged": "✓ Imported: the form already has every setting of the command.",
    "import.not_understood": "**Not understood** (not imported):",
    "import.notes": "**Notes:**",
    # -- importing a command: its notes (backend.planning.importer)
    "import.command": "command {n}",
    "import.labelled": "{label}: {note}",
    "import.mapped_source": "model_id_with_origin_paths: {entry} -> {new}, the same component "
                            "in the diffusers layout",
    "import.mapped_pickle": "model_id_with_origin_paths: {entry} (a pickle: never read) -> "
                            "{new}, the same component in the diffusers layout",
    "import.given_file": "{label}: {name} read from the file given with the command",
    "import.recognised": "{label}: {name} is not on this machine; recognised it as the "
                         "reference's {what:@import.launch} and imported its settings",
    "import.launch.low-VRAM accelerate config (DeepSpeed ZeRO-3, one process)":
        "low-VRAM accelerate config (DeepSpeed ZeRO-3, one process)",
    "import.launch.low-VRAM DeepSpeed config (ZeRO-3, parameters and optimizer offloaded to "
    "CPU)": "low-VRAM DeepSpeed config (ZeRO-3, parameters and optimizer offloaded to CPU)",
    "import.where_under": "under {base}",
    "import.where_server": "on this server",
    "import.config_not_found": "{label}: --config file not found; its values are not imported",
    "import.no_training_command": "no training command found (expected accelerate launch or "
                                  "python with the trainer's flags); the config holds the "
                                  "defaults",
    "import.skipped": "skipped {label} (not a training command): {text}",
    "import.offload_models": "the reference's --offload_models (models a stage loads but does "
                             "not use) is not needed: each stage loads only the components it "
                             "uses (stage 1 the text encoder and VAE, stage 2 the transformer)",
    "import.no_config_file": "{label}: no --config_file (accelerate uses that machine's default "
                             "config); only the flags on the command line are imported",
    "import.accelerate_missing": "{label}: accelerate config {file!r} not found {where} and not "
                                 "one of the reference's files; the form's distributed "
                                 "settings (ZeRO stage, offload, processes, precision) are "
                                 "left as they are. Give the file's contents (upload the file "
                                 "with the command) to import them",
    "import.deepspeed_missing": "{label}: DeepSpeed file {file!r} not found {where} and not one "
                                "of the reference's files; its settings are not imported. Give "
                                "the file's contents (upload the file with the command) to "
                                "import them",
    "import.deepspeed_missing_named": "{label}: DeepSpeed file {file!r} (named in {yaml}) not "
                                      "found {where} or next to the YAML and not one of the "
                                      "reference's files; its settings are not imported. Give "
                                      "the file's contents (upload the file with the command) "
                                      "to import them",
    "import.cpu_flag": "{label}: --cpu: ZeroLoRA picks CPU by itself when no GPU is present",
    "import.debug": "{label}: debug: true in {file} (accelerate's debug checks) is not "
                    "carried over",
    "import.use_cpu": "{label}: use_cpu in {file}: ZeroLoRA picks CPU by itself when no GPU is "
                      "present",
    "import.another_command": "{label}: another command for the same stage; only the first is "
                              "imported",
    "import.sft_with_split": "{label}: a task sft command next to split-training commands is "
                             "not imported",
    "import.reference_cache": "{label}: dataset_base_path {path!r} is the reference's stage-1 "
                              "cache; ZeroLoRA caches into the run folder and reads the data "
                              "set of {first}",
    "import.stages_differ": "{key}: {first} has {value!r}, {second} {other!r}; the training "
                            "stage's value is used",
    "import.stage1_no_deepspeed": "{label}: stage 1 runs without DeepSpeed in ZeroLoRA (it has "
                                  "no optimizer); its DeepSpeed settings are not used",
    "import.tokenizer_root": "tokenizer_path {given!r}: the tokenizer at the repository's root, "
                             "written {root!r} (its files only, not the weights beside them)",
    "import.output_path": "output_path {path!r}: ZeroLoRA writes the cache, checkpoints and "
                          "samples into the run folder",
    "import.activation_no_effect": "{label}: the DeepSpeed activation_checkpointing block has "
                                   "no effect without --use_gradient_checkpointing",
    "import.no_zero_stage": "{label}: DeepSpeed without a readable ZeRO stage; ZeroLoRA's "
                            "zero_stage stays at the default (0) -- set it by hand",
    "import.no_precision": "{label}: no mixed precision given (accelerate would run 'no' and the "
                           "DeepSpeed 'auto' precision off; the reference keeps its weights in "
                           "bf16): mixed_precision is not set by this command (a new run's "
                           "default is bf16) -- set 'no' for float32",
    "import.precision_differs": "{label}: the DeepSpeed file enables {ds} but accelerate runs "
                                "{accelerate}; using {accelerate}",
    # -- importing a command: what it does not understand (ImportResult.not_understood);
    # the command's own text (a flag, a key, a value) is a parameter, in backticks in Chinese
    "import.unknown_env": "{label}: environment {name}={value}",
    "import.unreadable_flags": "{label}: could not read the trainer flags: {flags}",
    "import.unknown_flag": "{label}: {flag}",
    "import.unreadable_launch": "{label}: accelerate launch options not understood: {options}",
    "import.unknown_launch_option": "{label}: accelerate launch --{name} {value}",
    "import.unreadable_accelerate": "{label}: accelerate config {file} not readable: {error}",
    "import.unsupported_distributed": "{label}: distributed_type {dist} in {file} (ZeroLoRA "
                                      "runs plain, multi-GPU or DeepSpeed)",
    "import.unknown_key": "{label}: {key}: {value} in {file}",
    "import.unreadable_deepspeed": "{label}: DeepSpeed file {file} not readable: {error}",
    "import.deepspeed_not_object": "{label}: DeepSpeed file {file} not readable: not a JSON "
                                   "object",
    "import.pin_memory_differs": "{label}: {which}.pin_memory {pin} differs from the other "
                                 "offload's in {file} (ZeroLoRA has one pin_memory)",
    "import.zero_auto": "{label}: zero_optimization.{key}: 'auto' in {file} (kept ZeroLoRA's "
                        "number)",
    "import.no_gather": "{label}: stage3_gather_16bit_weights_on_model_save false in {file} "
                        "(ZeroLoRA always gathers to save the LoRA)",
    "import.left_default": "{problem} -- left at the default",
    # -- importing a command: text or a file it cannot read
    "import.open_quote": "command text: unterminated {quote} quote on line {line} (got "
                         "{rest!r}; allowed every quote closed, as a shell reads it)",
    "import.not_a": "{flag}: not {what} (got {given!r} in {label}: {got}; allowed {allowed})",
    "import.what_run_config": "a run config",
    "import.what_accelerate": "an accelerate config",
    "import.allowed_run_config": "a run config: a YAML mapping of run options (python -m "
                                 "backend.stages.train --help lists them)",
    "import.allowed_accelerate": "an accelerate config: a YAML mapping of its settings, as "
                                 "`accelerate config` writes it (e.g. distributed_type: "
                                 "DEEPSPEED)",
    "import.got_binary": "a binary file, not YAML text",
    "import.got_raw": "{text}",
    "import.got_invalid_yaml": "not valid YAML, {problem}{where}",
    "import.at_line": " at line {line}, column {column}",
    "import.got_not_mapping": "YAML text that is {kind}, not a mapping of settings",
    "import.kind_empty": "empty",
    "import.kind_type": "a {type}",
}

ZH: dict[str, str] = {
    "estimate.shape": "{height}x{width}（{image_tokens} 个图像 token + {text_tokens} 个文本 "
                      "token），LoRA 参数 {lora_m:.1f} M，检查点方式 `{checkpointing}`",
    "estimate.shape_full": "{height}x{width}（{image_tokens} 个图像 token + {text_tokens} 个"
                           "文本 token），全量微调 {trained_m:.0f} M 参数（每个检查点占磁盘 "
                           "{disk:.1f} GB），检查点方式 `{checkpointing}`",
    "estimate.published": "（{components}：本地没有 config.json；按官方发布模型的尺寸估算）",
    "estimate.stage_gpu": "`{stage}`：GPU {gpu:.1f} GB{parts}；内存 {host:.1f} GB",
    "estimate.stage_cpu": "`{stage}`：CPU 运行 {gpu:.1f} GB{parts}；内存 {host:.1f} GB",
    "estimate.parts": "（{parts}）",
    "estimate.part": "{name:@part} {gb:.2f}",
    "estimate.host": "内存约 {gb:.1f} GB（`{stage}`）",
    "estimate.host_of": "内存约 {gb:.1f} GB（`{stage}`），共 {total:g} GB",
    "estimate.cpu_fits": "放得下：CPU 运行，{host}。",
    "estimate.cpu_no_fit": "放不下：CPU 运行，{host}。",
    "estimate.no_fit_gpu": "放不进 {gpu:g} GB 的 GPU：{needs:join=；}。{within}{hints:join=}"
                           "（{host}）",
    "estimate.needs": "`{stage}` 约需 {gb:.1f} GB（最大的部分：{part:@part}）",
    "estimate.within": "放得下的：{stages}。",
    "estimate.stage_gb": "`{stage}` {gb:.1f} GB",
    "estimate.hint": "{hint}",
    "estimate.no_fit_host": "内存不够：{host}。",
    "estimate.fits_gpu": "放得进 {gpu:g} GB 的 GPU：最大的阶段 `{stage}` 约需 {gb:.1f} GB"
                         "{tight}；{host}。",
    "estimate.tight": "（偏紧：余量不到 10%）",
    "estimate.hint_stage1_both": "阶段 1 把文本编码器和 VAE 同时放在 GPU 上：把 "
                                 "data_process_offload 设为 `model`（一次一个）或 `sequential`"
                                 "（逐模块）。",
    "estimate.hint_stage1_one": "阶段 1 把整个编码器放在 GPU 上：把 data_process_offload 设为 "
                                "`sequential`（逐模块）。",
    "estimate.hint_stage1_streams": "阶段 1 已经在逐模块传输权重（data_process_offload 为 "
                                    "`sequential`）：请调低 max_pixels（或 height/width）。",
    "estimate.hint_preset": "试试预设 {preset}。",
    "estimate.hint_sample_weights": "采样时整个组件都放在 GPU 上：把 sample_cpu_offload 设为 "
                                    "`sequential`（并打开 sample_vae_tiling），或者不运行采样"
                                    "阶段。",
    "estimate.hint_sample_decode": "峰值来自 VAE 解码器的激活：打开 sample_vae_tiling。",
    "estimate.hint_sample_size": "调低 sample_height/sample_width，或者不运行采样阶段。",
    "estimate.machine_head": "**显存估算**（本机：{where}）：",
    "estimate.machine_gpus": "{n} 块 GPU，每块 {gpu:.0f} GB，内存 {ram:.0f} GB",
    "estimate.machine_cpu": "没有 GPU，在 CPU 上运行，内存 {ram:.0f} GB",
    "estimate.unavailable": "**显存估算**暂不可用：{error:q}",
    "estimate.recommended": "本机推荐的预设：**{preset}**",
    "estimate.target_head": "**显存估算**：单块 {gpu:g} GB 的 GPU（当前设置）：",
    "estimate.under_tenth": "不到 0.1 GB",
    "estimate.bus_cell": "{size}（≥ {seconds:.1f} 秒）",
    "estimate.no_method": "⚠ 按当前设置，没有哪种单 GPU 方法放得下这块卡：请降低分辨率或 LoRA "
                          "秩，或选更大的 GPU。",
    "estimate.fastest": "放得下的最快方法：**{label}** —— {why}。",
    "estimate.form_uses": "表单已经在用这个方法。",
    "estimate.changes": "会做的修改：{changes}",
    "method.plain": "bf16 基础模型放在 GPU 上",
    "method.fp8": "fp8 基础模型（`torchao` 仅量化权重）",
    "method.int8": "int8 基础模型（`torchao` 仅量化权重）",
    "method.nf4": "nf4 基础模型（`bitsandbytes`）",
    "method.layer_offload": "逐层卸载，bf16 基础模型",
    "method.layer_offload_int8": "逐层卸载，int8 基础模型（`bitsandbytes`）",
    "method.layer_offload_nf4": "逐层卸载，nf4 基础模型（`bitsandbytes`）",
    "method.zero3_offload": "DeepSpeed ZeRO-3，参数和优化器都卸载",
    "method.full_plain": "全量微调，不用 DeepSpeed（权重、梯度和 AdamW 都在 GPU 上）",
    "method.full_zero2_offload": "全量微调，DeepSpeed ZeRO-2，优化器卸载",
    "method.full_zero3_offload": "全量微调，DeepSpeed ZeRO-3，参数和优化器都卸载",
    "method.why": "GPU 上 {gpu:.1f} GB{of}，内存 {host:.1f} GB{bus}{quant}",
    "method.of": "（共 {total:.1f} GB）",
    "method.bus": "，每步经总线传输 {gb:.1f} GB：按 {bandwidth:g} GB/s 至少 {seconds:.2f} 秒",
    "method.no_bus": "，无需经总线传输",
    "method.quant": "；反量化要耗费计算（约为 bf16 的 {factor:g} 倍）",
    "part.base weights": "基础模型权重",
    "part.base weights (offloaded)": "基础模型权重（已卸载）",
    "part.base weights (quantized)": "基础模型权重（已量化）",
    "part.text encoder weights": "文本编码器权重",
    "part.vae weights": "VAE 权重",
    "part.transformer weights": "Transformer 权重",
    "part.lora weights": "LoRA 权重",
    "part.gathered parameters": "聚合的参数",
    "part.persistent parameters": "常驻参数",
    "part.lora + adamw": "LoRA + AdamW",
    "part.ddp buckets": "DDP 缓冲桶",
    "part.lora grads": "LoRA 梯度",
    "part.grads": "梯度",
    "part.weights + grads + adamw": "权重 + 梯度 + AdamW",
    "part.adamw (offloaded)": "AdamW（已卸载）",
    "part.adamw": "AdamW",
    "part.reduce bucket": "归约桶",
    "part.ema": "训练权重的 EMA",
    "part.activations": "激活",
    "part.checkpointed inputs": "检查点输入",
    "part.checkpointed inputs (offloaded)": "检查点输入（已卸载）",
    "part.backward buffers": "反向缓冲区",
    "part.loading": "加载",
    "part.loading (not reused)": "加载（不复用）",
    "part.text encode": "文本编码",
    "part.vae encode": "VAE 编码",
    "part.denoise": "去噪",
    "part.vae decode": "VAE 解码",
    "part.vae decode (tiled)": "VAE 分块解码",
    "part.text encoder: largest module": "文本编码器：最大模块",
    "part.vae: largest module": "VAE：最大模块",
    "part.transformer: largest module": "Transformer：最大模块",
    "part.base weights (pinned, offloaded)": "基础模型权重（锁页内存，已卸载）",
    "part.base weights (resident)": "基础模型权重（常驻显存）",
    "part.dequantized weight": "反量化的权重",
    "part.lora weights + grads": "LoRA 权重 + 梯度",
    "part.offloaded blocks (running + prefetched)": "卸载的模块（运行中 + 预取）",
    "batch.images_per_step": "每个优化步的图片数（DeepSpeed 的 `train_batch_size`，自动推出）："
                             "**{total}** = `batch_size` {micro} × `gradient_accumulation_steps` "
                             "{accumulation} × {processes} 个进程",
    "import.changed": "✓ 已导入：改动了 {n} 个字段，其余字段保持原值。",
    "import.unchanged": "✓ 已导入：表单已包含该命令的全部设置。",
    "import.not_understood": "**无法识别**（未导入）：",
    "import.notes": "**说明：**",
    "import.command": "命令 {n}",
    "import.labelled": "{label}：{note}",
    "import.mapped_source": "model_id_with_origin_paths：{entry} -> {new}，即 diffusers 布局中的"
                            "同一组件",
    "import.mapped_pickle": "model_id_with_origin_paths：{entry}（序列化的权重文件：从不读取）-> "
                            "{new}，即 diffusers 布局中的同一组件",
    "import.given_file": "{label}：{name} 取自随命令提供的文件",
    "import.recognised": "{label}：本机没有 {name}；已识别为参考训练器的"
                         "{what:@import.launch}，并导入了其中的设置",
    "import.launch.low-VRAM accelerate config (DeepSpeed ZeRO-3, one process)":
        "低显存 accelerate 配置（DeepSpeed ZeRO-3，单进程）",
    "import.launch.low-VRAM DeepSpeed config (ZeRO-3, parameters and optimizer offloaded to "
    "CPU)": "低显存 DeepSpeed 配置（ZeRO-3，参数和优化器卸载到 CPU）",
    "import.where_under": "在 {base} 下",
    "import.where_server": "在本服务器上",
    "import.config_not_found": "{label}：找不到 --config 文件；其中的值未导入",
    "import.no_training_command": "没有找到训练命令（应为 `accelerate launch`，或带训练器参数的 "
                                  "`python` 命令）；配置保持默认值",
    "import.skipped": "跳过了{label}（不是训练命令）：{text:q}",
    "import.offload_models": "不需要参考训练器的 --offload_models（卸载阶段加载但不用的模型）："
                             "每个阶段只加载它用到的组件（阶段 1 加载文本编码器和 VAE，阶段 2 "
                             "加载 Transformer）",
    "import.no_config_file": "{label}：没有 --config_file（accelerate 会用那台机器的默认配置）；"
                             "只导入命令行上的参数",
    "import.accelerate_missing": "{label}：{where}找不到 accelerate 配置 {file!r}，它也不是参考"
                                 "训练器自带的文件；表单的分布式设置（ZeRO 阶段、卸载、进程数、"
                                 "精度）保持不变。请提供该文件的内容（随命令上传该文件）以导入"
                                 "这些设置",
    "import.deepspeed_missing": "{label}：{where}找不到 DeepSpeed 文件 {file!r}，它也不是参考"
                                "训练器自带的文件；其中的设置未导入。请提供该文件的内容（随命令"
                                "上传该文件）以导入这些设置",
    "import.deepspeed_missing_named": "{label}：{where}和 YAML 旁边都找不到 DeepSpeed 文件 "
                                      "{file!r}（{yaml} 中指定的），它也不是参考训练器自带的"
                                      "文件；其中的设置未导入。请提供该文件的内容（随命令上传"
                                      "该文件）以导入这些设置",
    "import.cpu_flag": "{label}：--cpu：没有 GPU 时 ZeroLoRA 会自动使用 CPU",
    "import.debug": "{label}：{file} 中的 `debug: true`（accelerate 的调试检查）不沿用",
    "import.use_cpu": "{label}：{file} 中的 use_cpu：没有 GPU 时 ZeroLoRA 会自动使用 CPU",
    "import.another_command": "{label}：同一阶段的另一条命令；只导入第一条",
    "import.sft_with_split": "{label}：与分阶段训练命令并存的 task sft 命令不导入",
    "import.reference_cache": "{label}：dataset_base_path {path!r} 是参考训练器的阶段 1 缓存；"
                              "ZeroLoRA 把缓存写进运行文件夹，并读取{first} 的数据集",
    "import.stages_differ": "{key}：{first} 为 {value!r}，{second} 为 {other!r}；采用训练阶段"
                            "的值",
    "import.stage1_no_deepspeed": "{label}：ZeroLoRA 的阶段 1 不用 DeepSpeed（它没有优化器）；"
                                  "其 DeepSpeed 设置不使用",
    "import.tokenizer_root": "`tokenizer_path` {given!r}：仓库根目录下的分词器，写作 {root!r}"
                             "（只取其文件，不取旁边的权重）",
    "import.output_path": "output_path {path!r}：ZeroLoRA 把缓存、检查点和样图写进运行文件夹",
    "import.activation_no_effect": "{label}：没有 --use_gradient_checkpointing 时，DeepSpeed 的 "
                                   "activation_checkpointing 块不起作用",
    "import.no_zero_stage": "{label}：DeepSpeed 配置里读不到 ZeRO 阶段；ZeroLoRA 的 zero_stage "
                            "保持默认值（0）——请手动设置",
    "import.no_precision": "{label}：没有指定混合精度（accelerate 会按 'no' 运行，DeepSpeed 的 "
                           "'auto' 精度也会关闭；参考训练器把权重保持为 bf16）：这条命令不设置 "
                           "mixed_precision（新运行的默认值是 bf16）——要用 float32 请设为 'no'",
    "import.precision_differs": "{label}：DeepSpeed 文件启用了 {ds}，但 accelerate 运行的是 "
                                "{accelerate}；采用 {accelerate}",
    "import.unknown_env": "{label}：环境变量 `{name}={value}`",
    "import.unreadable_flags": "{label}：无法读取训练器的参数：`{flags}`",
    "import.unknown_flag": "{label}：`{flag}`",
    "import.unreadable_launch": "{label}：无法识别的 accelerate launch 选项：`{options}`",
    "import.unknown_launch_option": "{label}：`accelerate launch --{name} {value}`",
    "import.unreadable_accelerate": "{label}：无法读取 accelerate 配置 `{file}`：{error:q}",
    "import.unsupported_distributed": "{label}：`{file}` 中的 `distributed_type` 为 `{dist}`"
                                      "（ZeroLoRA 只支持普通运行、多 GPU 或 DeepSpeed）",
    "import.unknown_key": "{label}：`{file}` 中的 `{key}: {value}`",
    "import.unreadable_deepspeed": "{label}：无法读取 DeepSpeed 文件 `{file}`：{error:q}",
    "import.deepspeed_not_object": "{label}：无法读取 DeepSpeed 文件 `{file}`：不是 JSON 对象",
    "import.pin_memory_differs": "{label}：`{file}` 中的 `{which}.pin_memory` 为 `{pin}`，与另一"
                                 "个卸载的设置不同（ZeroLoRA 只有一个 pin_memory）",
    "import.zero_auto": "{label}：`{file}` 中的 `zero_optimization.{key}: 'auto'`（保留 "
                        "ZeroLoRA 自己的数值）",
    "import.no_gather": "{label}：`{file}` 中的 `stage3_gather_16bit_weights_on_model_save` 为 "
                        "`false`（ZeroLoRA 保存 LoRA 时总是聚合权重）",
    "import.left_default": "{problem:q}——保持默认值",
    "import.open_quote": "命令文本：第 {line} 行的 `{quote}` 引号没有闭合（读到 {rest!r}；应为"
                         "每个引号都闭合，与 `shell` 读取时一样）",
    "import.not_a": "{flag}：不是{what}（读到{label} 中的 {given!r}：{got}；应为{allowed}）",
    "import.what_run_config": "运行配置",
    "import.what_accelerate": " accelerate 配置",
    "import.allowed_run_config": "运行配置：运行选项的 YAML 映射（`python -m "
                                 "backend.stages.train --help` 会列出它们）",
    "import.allowed_accelerate": " accelerate 配置：其设置的 YAML 映射，与 `accelerate config` "
                                 "写出的一样（例如 `distributed_type: DEEPSPEED`）",
    "import.got_binary": "二进制文件，不是 YAML 文本",
    "import.got_raw": "{text:q}",
    "import.got_invalid_yaml": "不是有效的 YAML，{problem:q}{where}",
    "import.at_line": "（第 {line} 行，第 {column} 列）",
    "import.got_not_mapping": "YAML 文本为{kind}，不是设置的映射",
    "import.kind_empty": "空",
    "import.kind_type": " `{type}` 类型",
}
