"""Messages of the jobs area (runs, their stages and notes): each code in English and Chinese (see backend.core.messages).

How a stage ended (``exit.*``, ``backend.jobs.diagnosis.exit_code_text``), what a failure
means and what to change (``diagnosis.*``), the notes the runner and the supervisor write
to the history and a stage's own ``end`` reasons (``note.*``), the Run tab (``runtab.*``)
and the Runs tab (``runs.*``). A program's or a library's own error line stays plain text,
quoted in Chinese (``{why:q}``); signal and command names stand in code spans in Chinese."""

EN: dict[str, str] = {
    # ---------------------------------------------------------------- how a stage ended
    "exit.lost": "has no exit code (its process was lost)",
    "exit.ok": "exited normally (code 0)",
    "exit.signal": "was killed by signal {num} ({name})",
    "exit.launcher_signal": "exited with code {exit} (a launcher's way of saying: killed by "
                            "signal {num} ({name}))",
    "exit.code": "exited with code {exit}",
    # ---------------------------------------------------------------- failure summary
    "diagnosis.headline": "Stage '{stage}' {how}.",
    "diagnosis.headline_title": "Stage '{stage}' {how}: {title}.",
    "diagnosis.headline_why": "Stage '{stage}' {how}: {why:q}",
    # ---------------------------------------------------------------- diagnoses
    "diagnosis.cuda_oom": "The GPU ran out of memory (CUDA out of memory)",
    "diagnosis.cuda_oom_explained":
        "The stage asked the GPU for more memory than it had free. Settings that keep less "
        "on the GPU let the same run fit.",
    "diagnosis.fix_zero3":
        "Turn on DeepSpeed ZeRO-3 with parameter offload (zero_stage: 3, "
        "offload_param_device: cpu, offload_optimizer_device: cpu; the low-VRAM "
        "preset does this). Only the layers being computed stay on the GPU.",
    "diagnosis.fix_gradient_checkpointing":
        "Turn on gradient checkpointing (use_gradient_checkpointing: true): "
        "activations are recomputed instead of kept.",
    "diagnosis.fix_cpu_checkpointing":
        "Keep checkpointed activations in host RAM (cpu_checkpointing: true, "
        "DeepSpeed's checkpointing under ZeRO-3).",
    "diagnosis.fix_checkpointing_offload":
        "Keep checkpointed activations in host RAM "
        "(use_gradient_checkpointing_offload: true).",
    "diagnosis.verb_train": "Train",
    "diagnosis.verb_encode": "Encode",
    "diagnosis.why_image_tokens": "memory grows with the number of image tokens",
    "diagnosis.why_vae_area": "the VAE's memory grows with the image area",
    "diagnosis.fix_fixed_size":
        "{verb} at a smaller fixed size (height/width now {h}x{w}; try {h2}x{w2}): {why}.",
    "diagnosis.now_try": "now {now}; try {then}",
    "diagnosis.max_pixels_example": "e.g. 524288 instead of 1048576",
    "diagnosis.fix_max_pixels": "Lower max_pixels ({now}): {why}.",
    "diagnosis.fix_lora_rank_now": "Lower lora_rank (now {rank}; try {half}).",
    "diagnosis.fix_lora_rank": "Lower lora_rank (e.g. 16 instead of 32).",
    "diagnosis.fix_full_nvme":
        "A full fine-tune keeps the optimizer's states for every weight: with ZeRO-3, offload "
        "them to NVMe (offload_optimizer_device: nvme, offload_nvme_path) when host RAM is "
        "short too.",
    "diagnosis.fix_full_to_lora":
        "Or train a LoRA instead of the whole component (trainable_models empty): its "
        "weights and optimizer states are a small part of the model's.",
    "diagnosis.fix_other_programs":
        "Make sure no other program holds GPU memory (nvidia-smi lists them).",
    "diagnosis.fix_offload_encoders":
        "Offload the encoders (data_process_offload now {now}; try {then}): 'model' puts the "
        "text encoder and the VAE on the GPU one at a time, 'sequential' streams their "
        "weights from host RAM layer by layer. The cache is the same either way.",
    "diagnosis.fix_offload_pipeline":
        "Offload the pipeline (sample_cpu_offload now {now}; try {then}): 'model' keeps one "
        "component on the GPU at a time, 'sequential' streams weights from host RAM layer "
        "by layer (slow, but a few GB).",
    "diagnosis.fix_vae_tiling":
        "Decode in tiles (sample_vae_tiling: true): the VAE decoder's memory stops growing "
        "with the image size.",
    "diagnosis.fix_smaller_samples":
        "Render smaller samples (sample_height/sample_width now {h}x{w}).",
    "diagnosis.host_oom": "The stage ran out of host memory (RAM)",
    "diagnosis.host_oom_explained":
        "The stage needed more host memory than there was: an allocation failed, or the "
        "kernel's out-of-memory killer ended it (the evidence below; `dmesg` or `journalctl "
        "-k` shows 'Out of memory: Killed process'). Offloading to the CPU trades GPU memory "
        "for RAM.",
    "diagnosis.fix_close_programs": "Close other programs that use a lot of RAM, or add swap "
                                    "space.",
    "diagnosis.fix_fewer_workers":
        "Use fewer DataLoader workers (dataset_num_workers now {now}; try 0).",
    "diagnosis.fix_offload_nvme":
        "ZeRO CPU offload keeps parameters and optimizer states in RAM: offload to an NVMe "
        "folder instead (offload_param_device / offload_optimizer_device: nvme, "
        "offload_nvme_path).",
    "diagnosis.fix_activation_offload_ram":
        "Activation offload also lives in RAM: turn off use_gradient_checkpointing_offload / "
        "cpu_checkpointing if the GPU has room.",
    "diagnosis.fix_pin_memory":
        "Pinned (page-locked) memory cannot be swapped: try pin_memory: false.",
    "diagnosis.fix_max_pixels_ram":
        "Lower max_pixels: smaller images need less RAM for cached activations.",
    "diagnosis.killed": "Killed by signal 9 (SIGKILL) from outside the run",
    "diagnosis.killed_explained":
        "The stage's process was ended with SIGKILL without a stop request, and nothing shows "
        "it ran out of memory (no OOM-killer record, memory below its limit). Something else "
        "ended it: a person (kill -9), a job scheduler or time limit, or a container runtime.",
    "diagnosis.fix_what_stops":
        "Check what else on this machine stops processes (schedulers, time limits, other "
        "users).",
    "diagnosis.fix_resume":
        "Resume the run: training continues from its last saved state (more often with a "
        "smaller save_steps).",
    "diagnosis.disk_full": "The disk is full",
    "diagnosis.disk_full_explained":
        "Writing a file (cache, checkpoint or training state) failed because the disk has no "
        "space left.",
    "diagnosis.fix_free_disk": "Free disk space: delete old runs and their caches in the run "
                               "history.",
    "diagnosis.fix_fewer_checkpoints":
        "Save fewer checkpoints (a larger save_steps, or keep_last_n_checkpoints).",
    "diagnosis.fix_larger_disk": "Put the workspace on a larger disk.",
    "diagnosis.file_too_large":
        "A file passed the largest file size this process may write (ulimit -f)",
    "diagnosis.writing_file": "Writing {file}",
    "diagnosis.writing_a_file": "Writing a file (cache, checkpoint or state)",
    "diagnosis.file_too_large_explained":
        "{what} failed with 'File too large' (EFBIG, os error 27): the operating system "
        "refuses to let a file of the stage's processes grow past their file-size limit "
        "(ulimit -f, RLIMIT_FSIZE), which the app passes on to every run. The disk is not "
        "full; no setting of the run changes this.",
    "diagnosis.fix_ulimit":
        "Raise the file-size limit where the app is started: `ulimit -f unlimited` in its "
        "shell (or LimitFSIZE=infinity in its systemd unit, fsize in "
        "/etc/security/limits.conf), then restart the app and resume or start the run "
        "again.",
    "diagnosis.fix_file_system":
        "If `ulimit -f` already says unlimited, the file system holding the workspace has a "
        "largest file size (FAT32: 4 GiB): put the workspace on another file system.",
    "diagnosis.missing_model": "Model files are missing or unreadable",
    "diagnosis.missing_model_explained":
        "The stage could not find or read the model weights, config or tokenizer it needs.",
    "diagnosis.fix_model_source":
        "Check the model source (model_id_with_origin_paths or model_paths) and "
        "models_dir: the files must exist there.",
    "diagnosis.fix_offline_model":
        "The run is offline (offline: true), so nothing is downloaded: download "
        "the model once with offline off, or copy it into models_dir.",
    "diagnosis.fix_download_model":
        "Download the model (or let the run download it: offline: false, and the "
        "right download_source / hub_endpoint).",
    "diagnosis.fix_incomplete_file":
        "A file that exists but does not load is incomplete: delete it and download it again.",
    "diagnosis.missing_captioner": "The captioning model's files are missing or unreadable",
    "diagnosis.missing_captioner_explained":
        "The caption stage could not find or read the model named in captioner_path.",
    "diagnosis.fix_captioner_path":
        "Check captioner_path ({path}): a local Qwen2.5-VL or Qwen3-VL model "
        "folder, or model_id:folder/ found under models_dir.",
    "diagnosis.fix_offline_captioner":
        "The run is offline (offline: true), so nothing is downloaded: download "
        "the captioning model once with offline off, or copy it into models_dir.",
    "diagnosis.fix_download_captioner":
        "Download the captioning model (or let the run download it: offline: "
        "false, and the right download_source / hub_endpoint).",
    "diagnosis.fix_empty_captioner":
        "Or leave captioner_path empty to caption with the model family's own text "
        "encoder, where it is a vision-language model.",
    "diagnosis.deepspeed_config": "The DeepSpeed configuration was rejected",
    "diagnosis.deepspeed_config_explained":
        "DeepSpeed refused the run's DeepSpeed settings ({file} in the run folder).",
    "diagnosis.fix_preset":
        "Start from a preset (e.g. the ZeRO-3 CPU-offload one) and change one setting at a "
        "time.",
    "diagnosis.fix_offload_stages":
        "Parameter offload needs zero_stage 3; optimizer offload needs zero_stage 1-3.",
    "diagnosis.fix_batch_size":
        "With several processes the batch size must equal micro batch x "
        "gradient_accumulation_steps x num_processes: check num_processes against the GPUs "
        "in gpu_ids.",
    "diagnosis.fix_stage1_plain":
        "Stage 1 (data_process) has no optimizer and must run without DeepSpeed.",
    "diagnosis.no_gpu": "The GPU was not found or the GPU selection is wrong",
    "diagnosis.no_gpu_explained":
        "The stage expected a GPU that it could not use: no driver, a GPU id that does not "
        "exist, or more processes than selected GPUs.",
    "diagnosis.fix_gpu_ids": "Check gpu_ids against the GPUs on this machine (nvidia-smi).",
    "diagnosis.fix_num_processes": "num_processes must not exceed the number of selected GPUs.",
    "diagnosis.port_in_use": "The distributed port is already in use",
    "diagnosis.port_in_use_explained":
        "Another run (or a stale process) uses the port the processes talk over.",
    "diagnosis.fix_port": "Pick another main_process_port, or wait for the other run to end.",
    "diagnosis.op_build": "A DeepSpeed extension failed to compile",
    "diagnosis.op_build_explained":
        "DeepSpeed compiles some of its operations on first use; the compiler or CUDA "
        "toolkit it needs is missing or does not match.",
    "diagnosis.fix_compiler":
        "Install a C++ compiler (and ninja); for GPU ops, a CUDA toolkit matching torch.",
    "diagnosis.fix_turn_off_op":
        "Or turn off the feature that needs the op (e.g. offload_optimizer_device: none).",
    # ---------------------------------------------------------------- dataset problems
    "diagnosis.dataset_problems": "Dataset problems:\n  {problems:join=\n  }",
    "diagnosis.dataset_problems_line": "Dataset problems: {problems:join= }",
    "diagnosis.dataset_problems_more": "Dataset problems: {problems:join= } … and {more} more",
    "diagnosis.cannot_read_image": "cannot read image {name}: {why:q}",
    "diagnosis.mask_where": "{where}: mask: {problem}",
    "diagnosis.mask_missing": "no mask for {name} (got {got}; allowed a file in mask_path, "
                              "a mask column naming a file, or the alpha channel with "
                              "alpha_mask; mask_missing: {then})",
    "diagnosis.mask_size": "{name} is {mw}x{mh}, its image is {w}x{h} (allowed a mask of "
                           "the image's size)",
    "diagnosis.mask_unreadable": "cannot read mask {name}: {why:q}",
    "diagnosis.mask_no_source": "masked_loss: no source of masks (got no mask_path, "
                                "alpha_mask off and no mask column in dataset_metadata_path "
                                "{meta}; allowed a mask folder in mask_path, alpha_mask, or a "
                                "mask column)",
    "diagnosis.mask_alpha_clips": "alpha_mask: clips have no alpha channel (got alpha_mask on "
                                  "for a video family; allowed mask_path or a mask column)",
    "diagnosis.mask_count": "{without} of {n} item(s) without a mask ({then}).",
    # ---------------------------------------------------------------- notes in the history
    "note.stage_exit": "stage '{stage}' {how}",
    "note.stage_exit_why": "stage '{stage}' {how}: {why:q}",
    "note.stage_status": "stage '{stage}' {status:@status}",
    "note.run_failed": "the run failed",
    "note.stopped_on_request": "stopped on request",
    "note.before_start": "{reason:q} before it started",
    "note.joined": "{first:q}; {second:q}",
    "note.supervisor_signal": "the run's supervisor received {signal}",
    "note.supervisor_failed": "the run's supervisor failed: {error:q}",
    "note.supervisor_not_started": "could not start the run's supervisor: {error:q}",
    "note.could_not_start": "stage '{stage}' could not start: {error:q}",
    "note.sigterm_killed": "stage '{stage}' did not exit within {grace:g} s of SIGTERM and was "
                           "killed (SIGKILL); its last save may be incomplete",
    "note.disk_refusal": "not enough free disk: {free} free on the disk holding {path}, need at "
                         "least {need} (the runner's min_free_disk_bytes); delete old runs or "
                         "caches, or free space",
    "note.secrets_lost": "the secrets given for this run ({keys}) were lost before it started "
                         "(its waiting supervisor process, pid {pid}, is gone; the machine "
                         "restarted?); submit it again",
    "note.supervisor": "the run's supervisor process (pid {pid})",
    "note.supervisor_gone": "{sup} is gone (the machine restarted or the process was killed)",
    "note.secrets_gone": "{sup} is gone, and the secrets given for this run ({keys}) went with "
                         "it; stage '{stage}' needs them: resume the run and give them again",
    "note.adopted": "{sup} is gone; the stage goes on and the server watches it (adopted): its "
                    "outcome will be read from its progress file",
    "note.said_succeeded": "{sup} is gone and the exit status with it; the stage's progress "
                           "file says it succeeded",
    "note.server_stopped": "{sup} is gone, so the server stopped the stage",
    "note.server_stopped_killed": "{sup} is gone, so the server stopped the stage; it did not "
                                  "exit within {grace:g} s of SIGTERM and was killed (SIGKILL); "
                                  "its last save may be incomplete",
    "note.left_stopped": "; the processes it left behind were stopped",
    "note.stage_said": "stage '{stage}' {said:@status}: {why:q} ({sup} is gone, so its exit code "
                       "is unknown; see {log}){after}",
    "note.no_reason": "no reason given",
    "note.no_end_event": "stage '{stage}' ended without an end event in its progress file (it "
                         "crashed or was killed; {sup} was gone, so its exit code is unknown); "
                         "see {log}{after}",
    "note.gone_while_running": "{sup} is gone (the machine restarted or the process was killed) "
                               "while stage '{stage}' was running; see {log}{after}",
    # ---------------------------------------------------------------- the runner's refusals
    "note.no_such_run": "run_id: no such run (got {run_id})",
    "note.cannot_resume": "run {run_id} is {status:@status}: only a stopped or failed run can "
                          "be resumed",
    "note.nothing_to_resume": "run {run_id}: every stage succeeded; nothing to resume",
    "note.no_saved_state": "run {run_id}: no saved training state in {state} (the run ended "
                           "before its first save); start a new run instead",
    "note.delete_running": "run {run_id} is running: stop it before deleting it",
    # ---------------------------------------------------------------- a stage's own end reasons
    "note.stopped_signal": "stopped by signal {signal}",
    "note.stopped_cached": "stopped by signal {signal}; {n} samples cached",
    "note.stopped_at_step": "stopped by signal {signal} at step {step}; resume with "
                            "--resume_from {path}",
    "note.data_process_deepspeed":
        "task sft:data_process runs without DeepSpeed (it trains nothing, and ZeRO "
        "wrapping breaks it). Launch it plainly: accelerate launch -m "
        "backend.stages.train --task sft:data_process ... (no DeepSpeed --config_file).",
    "note.lora_checkpoint_missing": "lora_checkpoint: file not found (got {got})",
    "note.class_data_problem": "class_data_path: {problem}",
    "note.class_cache_missing": "prior_preservation: no class cache in {folder} (got "
                                "prior_preservation on; allowed a cache written by --task "
                                "sft:data_process with prior_preservation on, or "
                                "prior_preservation off)",
    "note.dop_cache_missing": "diff_output_preservation: {n} cached sample(s) have no DOP "
                              "caption in {folder}, e.g. {first} (got "
                              "diff_output_preservation on; allowed a cache written by --task "
                              "sft:data_process with the same trigger_word and dop_class)",
    "note.dop_needs_lora": "diff_output_preservation: the base model's prediction is the LoRA "
                           "switched off, and this run trains no LoRA (allowed "
                           "diff_output_preservation off, or a LoRA run)",
    "note.preservation_one_shot": "prior_preservation, diff_output_preservation: they read "
                                  "what stage 1 caches (got task sft; allowed sft:data_process "
                                  "then sft:train)",
    "note.class_prompt_family": "class_prompt: {model} does not render a still image from a "
                                "prompt alone (a video or edit model), so it cannot render "
                                "class images (allowed class_prompt empty, with a class dataset "
                                "in class_data_path)",
    "note.class_images_dir_missing": "class_prompt: {n} class image(s) are rendered by the "
                                     "class_images stage before stage 1, and no folder of them "
                                     "was given (got no {flag}; allowed {flag} DIR after "
                                     "python -m backend.stages.class_images --config RUN_YAML "
                                     "--output_dir DIR)",
    "note.class_images_missing": "class_prompt: {n} of the {total} class images to render are "
                                 "not in {folder}, e.g. {first} (allowed the folder the "
                                 "class_images stage rendered into: python -m "
                                 "backend.stages.class_images --config RUN_YAML --output_dir "
                                 "{folder})",
    "note.class_images_output_dir": "output_dir: required (got none; allowed the folder for "
                                    "the class images, the run folder's classes/)",
    "note.class_images_stopped": "stopped by signal {signal}; {n} class images rendered",
    "note.caption_text_encoder_incomplete":
        "{folder}: the text encoder lacks {missing} (a Qwen3VLModel saved without its LM "
        "head, which it does not tie to its embeddings), so it cannot write captions; set "
        "captioner_path to a Qwen3-VL model folder",
    "note.launch_precision_refused":
        "mixed_precision: {error:q} (got {got} from {where}; allowed what the launch's "
        "DeepSpeed config enables, or \"auto\" there)",
    "note.launch_problem": "{name}: this launch runs {got} (got {want} from {where}; allowed "
                           "{got} under this launch, else relaunch: {how})",
    "note.launch_how_no_deepspeed": "launch without DeepSpeed: an accelerate config without "
                                    "distributed_type DEEPSPEED, and no --use_deepspeed",
    "note.launch_how_precision": "the DeepSpeed config of this launch fixes the precision: set "
                                 "its fp16/bf16 \"enabled\" to \"auto\", or launch with "
                                 "{flag} {want}",
    "note.launch_how_zero": "accelerate launched without DeepSpeed: launch with --config_file <a "
                            "DEEPSPEED accelerate config whose DeepSpeed JSON has "
                            "zero_optimization.stage {want}>, or with accelerate launch "
                            "--use_deepspeed --zero_stage {want}{offload}",
    "note.launch_how_decides": "the launch decides it: change it in the launch's DeepSpeed "
                               "config, or launch with accelerate launch --use_deepspeed "
                               "{flag} {want}",
    # ---------------------------------------------------------------- the Run tab
    "runtab.status": "{status:@status}",
    "runtab.no_run_yet": "No run yet: press **Start training**.",
    "runtab.your_runs": "**Your runs on the server:**",
    "runtab.start_adds": "*Start training* now adds another run to the queue: it begins when "
                         "these have ended.",
    "runtab.stage": "stage <b>{stage}</b>",
    "runtab.step": "step <b>{step}</b> / {total} ({pct:.0f} %)",
    "runtab.epoch": "epoch {epoch}",
    "runtab.loss": "loss <b>{loss:.4f}</b>",
    "runtab.val_loss": "validation loss <b>{loss:.4f}</b> at step {step}",
    "runtab.eta": "ETA <b>{eta}</b>",
    "runtab.speed": "{speed:.2f} samples/s",
    "runtab.quiet": "no output for {time}",
    "runtab.head": "{icon} Run `{id}`{name} — **{status:@status}**{extras:join=}",
    "runtab.attempt": " · attempt {n}",
    "runtab.extra_note": " · {note:q}",
    "runtab.stopping": " · stopping (saving state)…",
    "runtab.resumable": " · can be resumed",
    "runtab.exit": "Exit: {how}.",
    "runtab.diagnosis_title": "**{title}**",
    "runtab.what_to_change": "What to change:",
    "runtab.settings": "Settings: {names}",
    "runtab.reason": "Reason: {why:q}",
    "runtab.error_line": "Error: `{line}`",
    "runtab.last_lines": "Last log lines:",
    "runtab.full_log": "Full log: `{path}`",
    "runtab.not_in_history": "Run `{id}` is not in the history (deleted?).",
    "runtab.gpu_memory": "**GPU memory**  \n{lines}",
    "runtab.gpu_line": "GPU {idx} ({name}): {used:.1f} / {total:.1f} GiB, {util} % busy",
    "runtab.gpu_lines": "{lines:join=\n}",
    "runtab.not_started_problems": "✗ Not started: {n} problem(s) in the form. Each is shown "
                                   "next to its field (tabs Model, Dataset, Training).",
    "runtab.not_started": "✗ Not started: {why:q}.",
    "runtab.started": "Started run `{id}`.",
    "runtab.queued": "Queued run `{id}`: it starts when {n} run(s) ahead of it have ended. This "
                     "tab keeps showing `{ahead}`, which is {status:@status}.",
    "runtab.no_run_to_stop": "No run to stop.",
    "runtab.nothing_to_stop": "Run `{id}` is {status:@status}; nothing to stop.",
    "runtab.refused": "✗ {why:q}",
    "runtab.stopping_run": "Stopping run `{id}`… the train stage saves its state first, so it "
                           "can be resumed.",
    "runtab.no_run_to_resume": "No run to resume.",
    "runtab.not_resumed": "✗ Not resumed: {why:q}.",
    "runtab.resumed": "Resumed run `{id}` from its saved state.",
    # ---------------------------------------------------------------- the Runs tab
    "runs.header": "{h:@header}",
    "runs.render_name": "render {name}",
    "runs.summary": "Run `{id}` — **{status:@status}** · folder `{folder}` · disk {disk}",
    "runs.checkpoints": "Checkpoints: {names}",
    "runs.no_checkpoints": "Checkpoints: none yet",
    "runs.no_checkpoint_yet": "checkpoint: run {id} has no checkpoint yet",
    "runs.not_a_checkpoint": "checkpoint: not a checkpoint of run {id} (got {got!r}; allowed "
                             "{allowed})",
    "runs.failure": "Failure: {why:q}",
    "runs.choose_first": "Choose a run first.",
    "runs.choose_first_x": "✗ Choose a run first.",
    "runs.tick_box": "Tick the box to confirm the deletion first.",
    "runs.no_longer_valid": "✗ This run's settings no longer validate:",
    "runs.form_holds": "✓ The form now holds the settings of run `{id}`: change what you like "
                       "and press **Start training** (Run tab) for a new run.",
    "runs.download_ready": "✓ `{file}` ({size}) — use the download link above.",
    "runs.extract_queued": "✓ Extraction run `{id}` queued: the LoRA goes beside this run's "
                           "exports (its progress under Run).",
    "runs.deleted": "Deleted run `{id}` and its files.",
    "runs.showing": "Showing run `{id}`.",
    "runs.error": "✗ {why:q}",
    "runs.pick_label": "{name} · {id} · {status:@status}",
    "runs.unnamed": "run",
}

ZH: dict[str, str] = {
    # ---------------------------------------------------------------- how a stage ended
    "exit.lost": "没有退出码（进程已丢失）",
    "exit.ok": "正常结束（退出码 0）",
    "exit.signal": "被信号 {num}（{name}）终止",
    "exit.launcher_signal": "以退出码 {exit} 结束（启动器以此表示：被信号 {num}（{name}）终止）",
    "exit.code": "以退出码 {exit} 结束",
    # ---------------------------------------------------------------- failure summary
    "diagnosis.headline": "阶段 '{stage}' {how}。",
    "diagnosis.headline_title": "阶段 '{stage}' {how}：{title}。",
    "diagnosis.headline_why": "阶段 '{stage}' {how}：{why:q}",
    # ---------------------------------------------------------------- diagnoses
    "diagnosis.cuda_oom": "GPU 显存不足（`CUDA out of memory`）",
    "diagnosis.cuda_oom_explained":
        "该阶段向 GPU 申请的显存超过了剩余的显存。让 GPU 上少放一些东西的设置能让同样的运行放得下。",
    "diagnosis.fix_zero3":
        "打开带参数卸载的 DeepSpeed ZeRO-3（zero_stage: 3，offload_param_device: cpu，"
        "offload_optimizer_device: cpu；低显存预设就是这样设的）。只有正在计算的层留在 GPU 上。",
    "diagnosis.fix_gradient_checkpointing":
        "打开梯度检查点（use_gradient_checkpointing: true）：激活值重新计算，而不是一直保留。",
    "diagnosis.fix_cpu_checkpointing":
        "把检查点保存的激活值放在内存中（cpu_checkpointing: true，ZeRO-3 下 DeepSpeed 的检查点）。",
    "diagnosis.fix_checkpointing_offload":
        "把检查点保存的激活值放在内存中（use_gradient_checkpointing_offload: true）。",
    "diagnosis.verb_train": "训练",
    "diagnosis.verb_encode": "编码",
    "diagnosis.why_image_tokens": "显存随图像词元数增长",
    "diagnosis.why_vae_area": "VAE 的显存随图像面积增长",
    "diagnosis.fix_fixed_size":
        "以更小的固定尺寸{verb}（height/width 现为 {h}x{w}；试试 {h2}x{w2}）：{why}。",
    "diagnosis.now_try": "现为 {now}；试试 {then}",
    "diagnosis.max_pixels_example": "例如用 524288 代替 1048576",
    "diagnosis.fix_max_pixels": "调低 max_pixels（{now}）：{why}。",
    "diagnosis.fix_lora_rank_now": "调低 lora_rank（现为 {rank}；试试 {half}）。",
    "diagnosis.fix_lora_rank": "调低 lora_rank（例如用 16 代替 32）。",
    "diagnosis.fix_full_nvme":
        "完整微调要为每个权重保存优化器状态：在 ZeRO-3 下，内存也不够时把它们卸载到 NVMe"
        "（offload_optimizer_device: nvme，offload_nvme_path）。",
    "diagnosis.fix_full_to_lora":
        "或者改为训练 LoRA，而不是整个组件（trainable_models 留空）：它的权重和优化器状态只占"
        "模型的一小部分。",
    "diagnosis.fix_other_programs": "确认没有别的程序占用 GPU 显存（nvidia-smi 会列出它们）。",
    "diagnosis.fix_offload_encoders":
        "卸载编码器（data_process_offload 现为 {now}；试试 {then}）：'model' 让文本编码器和 VAE "
        "轮流上 GPU，'sequential' 把它们的权重从内存逐层送到 GPU。两种方式得到的缓存相同。",
    "diagnosis.fix_offload_pipeline":
        "卸载管线（sample_cpu_offload 现为 {now}；试试 {then}）：'model' 一次只把一个组件放在 "
        "GPU 上，'sequential' 把权重从内存逐层送到 GPU（慢，但只需几 GB）。",
    "diagnosis.fix_vae_tiling":
        "分块解码（sample_vae_tiling: true）：VAE 解码器的显存不再随图像尺寸增长。",
    "diagnosis.fix_smaller_samples": "渲染更小的样图（sample_height/sample_width 现为 {h}x{w}）。",
    "diagnosis.host_oom": "该阶段内存（RAM）不足",
    "diagnosis.host_oom_explained":
        "该阶段需要的内存超过了现有的内存：一次内存分配失败，或内核的内存不足终结者（`OOM killer`）"
        "结束了它（证据见下；`dmesg` 或 `journalctl -k` 会显示 'Out of memory: Killed "
        "process'）。卸载到 CPU 是用内存换 GPU 显存。",
    "diagnosis.fix_close_programs": "关闭其他占用大量内存的程序，或增加交换空间。",
    "diagnosis.fix_fewer_workers":
        "减少 DataLoader 的工作进程（dataset_num_workers 现为 {now}；试试 0）。",
    "diagnosis.fix_offload_nvme":
        "ZeRO 的 CPU 卸载把参数和优化器状态放在内存中：改为卸载到 NVMe 文件夹"
        "（offload_param_device / offload_optimizer_device: nvme，offload_nvme_path）。",
    "diagnosis.fix_activation_offload_ram":
        "激活值卸载同样占用内存：如果 GPU 还有余量，关掉 use_gradient_checkpointing_offload / "
        "cpu_checkpointing。",
    "diagnosis.fix_pin_memory": "锁页内存不能换出：试试 pin_memory: false。",
    "diagnosis.fix_max_pixels_ram": "调低 max_pixels：图片越小，缓存激活值所需的内存越少。",
    "diagnosis.killed": "被运行之外的信号 9（SIGKILL）终止",
    "diagnosis.killed_explained":
        "该阶段的进程在没有停止请求的情况下被 `SIGKILL` 结束，也没有迹象表明它内存不足（没有 `OOM killer` 的记录，内存也没到上限）。是别的东西结束了它：某个人（`kill -9`）、作业调度器"
        "或时间限制，或者容器运行时。",
    "diagnosis.fix_what_stops": "检查这台机器上还有什么会停止进程（调度器、时间限制、其他用户）。",
    "diagnosis.fix_resume": "继续这个运行：训练从上次保存的状态接着进行（save_steps 越小，保存越频繁）。",
    "diagnosis.disk_full": "磁盘已满",
    "diagnosis.disk_full_explained": "写入文件（缓存、检查点或训练状态）失败：磁盘没有剩余空间了。",
    "diagnosis.fix_free_disk": "腾出磁盘空间：在运行历史中删除旧的运行及其缓存。",
    "diagnosis.fix_fewer_checkpoints": "少存一些检查点（加大 save_steps，或设置 keep_last_n_checkpoints）。",
    "diagnosis.fix_larger_disk": "把工作区放到更大的磁盘上。",
    "diagnosis.file_too_large": "文件超过了该进程可写入的最大文件大小（`ulimit -f`）",
    "diagnosis.writing_file": "写入 {file}",
    "diagnosis.writing_a_file": "写入文件（缓存、检查点或状态）",
    "diagnosis.file_too_large_explained":
        "{what}失败，错误为“文件过大”（`EFBIG`，错误号 27）：操作系统不允许该阶段进程的文件超过它们的"
        "文件大小上限（`ulimit -f`，`RLIMIT_FSIZE`），应用会把这个上限传给每个运行。磁盘并没有满；"
        "运行的任何设置都改变不了这一点。",
    "diagnosis.fix_ulimit":
        "在启动应用的地方提高文件大小上限：在它的命令行中执行 `ulimit -f unlimited`（或在它的 "
        "`systemd` 单元中设 `LimitFSIZE=infinity`，在 `/etc/security/limits.conf` 中设 `fsize`），"
        "然后重启应用，再继续或重新开始运行。",
    "diagnosis.fix_file_system":
        "如果 `ulimit -f` 已经是 `unlimited`，那就是工作区所在的文件系统有最大文件大小"
        "（FAT32：4 GiB）：把工作区放到别的文件系统上。",
    "diagnosis.missing_model": "模型文件缺失或无法读取",
    "diagnosis.missing_model_explained": "该阶段找不到或读不了它需要的模型权重、配置或分词器。",
    "diagnosis.fix_model_source":
        "检查模型来源（model_id_with_origin_paths 或 model_paths）和 models_dir：文件必须在那里。",
    "diagnosis.fix_offline_model":
        "这个运行是离线的（offline: true），所以不会下载任何东西：关闭离线下载一次模型，"
        "或把它复制到 models_dir 中。",
    "diagnosis.fix_download_model":
        "下载模型（或让运行去下载：offline: false，并设好 download_source / hub_endpoint）。",
    "diagnosis.fix_incomplete_file": "存在但加载不了的文件是不完整的：删除它后重新下载。",
    "diagnosis.missing_captioner": "打标模型的文件缺失或无法读取",
    "diagnosis.missing_captioner_explained": "写描述阶段找不到或读不了 captioner_path 指定的模型。",
    "diagnosis.fix_captioner_path":
        "检查 captioner_path（{path}）：应为本地的 Qwen2.5-VL 或 Qwen3-VL 模型文件夹，"
        "或能在 models_dir 下找到的 model_id:folder/。",
    "diagnosis.fix_offline_captioner":
        "这个运行是离线的（offline: true），所以不会下载任何东西：关闭离线下载一次打标模型，"
        "或把它复制到 models_dir 中。",
    "diagnosis.fix_download_captioner":
        "下载打标模型（或让运行去下载：offline: false，并设好 download_source / hub_endpoint）。",
    "diagnosis.fix_empty_captioner":
        "或者把 captioner_path 留空，用模型系列自己的文本编码器写描述（如果它是视觉语言模型）。",
    "diagnosis.deepspeed_config": "DeepSpeed 配置被拒绝",
    "diagnosis.deepspeed_config_explained":
        "DeepSpeed 拒绝了这个运行的 DeepSpeed 设置（运行文件夹中的 {file}）。",
    "diagnosis.fix_preset": "从一个预设开始（例如 ZeRO-3 CPU 卸载预设），每次只改一项设置。",
    "diagnosis.fix_offload_stages": "参数卸载需要 zero_stage 3；优化器卸载需要 zero_stage 1-3。",
    "diagnosis.fix_batch_size":
        "多进程时，批大小必须等于 微批 × gradient_accumulation_steps × num_processes："
        "对照 gpu_ids 中的 GPU 检查 num_processes。",
    "diagnosis.fix_stage1_plain": "阶段 1（data_process）没有优化器，必须不用 DeepSpeed 运行。",
    "diagnosis.no_gpu": "找不到 GPU，或所选 GPU 有误",
    "diagnosis.no_gpu_explained":
        "该阶段需要一块它用不了的 GPU：没有驱动、GPU 编号不存在，或进程数多于所选的 GPU。",
    "diagnosis.fix_gpu_ids": "对照这台机器上的 GPU 检查 gpu_ids（nvidia-smi）。",
    "diagnosis.fix_num_processes": "num_processes 不能超过所选 GPU 的数量。",
    "diagnosis.port_in_use": "分布式通信端口已被占用",
    "diagnosis.port_in_use_explained": "另一个运行（或残留的进程）占用了进程间通信所用的端口。",
    "diagnosis.fix_port": "换一个 main_process_port，或等另一个运行结束。",
    "diagnosis.op_build": "DeepSpeed 扩展编译失败",
    "diagnosis.op_build_explained":
        "DeepSpeed 在第一次使用时编译它的一些算子；所需的编译器或 CUDA 工具包缺失或版本不匹配。",
    "diagnosis.fix_compiler":
        "安装 C++ 编译器（以及 `ninja`）；GPU 算子还需要与 torch 匹配的 CUDA 工具包。",
    "diagnosis.fix_turn_off_op": "或者关掉需要该算子的功能（例如 offload_optimizer_device: none）。",
    # ---------------------------------------------------------------- dataset problems
    "diagnosis.dataset_problems": "数据集问题：\n  {problems:join=\n  }",
    "diagnosis.dataset_problems_line": "数据集问题：{problems:join=；}",
    "diagnosis.dataset_problems_more": "数据集问题：{problems:join=；} …… 另有 {more} 个",
    "diagnosis.cannot_read_image": "无法读取图像 {name}（{why:q}）",
    "diagnosis.mask_where": "{where}：遮罩 `mask`：{problem}",
    "diagnosis.mask_missing": "{name} 没有遮罩（当前：{got}；可用：mask_path 中的文件、"
                              "指向文件的 `mask` 列，或开启 alpha_mask 时的透明通道；"
                              "mask_missing：{then}）",
    "diagnosis.mask_size": "{name} 为 {mw}x{mh}，其图片为 {w}x{h}（可用：与图片同样大小的遮罩）",
    "diagnosis.mask_unreadable": "无法读取遮罩 {name}（{why:q}）",
    "diagnosis.mask_no_source": "masked_loss：没有遮罩来源（当前：未设 mask_path，alpha_mask "
                                "关闭，dataset_metadata_path {meta} 中也没有 `mask` 列；可用："
                                "mask_path 中的遮罩文件夹、alpha_mask，或 `mask` 列）",
    "diagnosis.mask_alpha_clips": "alpha_mask：视频片段没有透明通道（当前：视频模型开启了 "
                                  "alpha_mask；可用：mask_path 或 `mask` 列）",
    "diagnosis.mask_count": "{n} 项中有 {without} 项没有遮罩（{then}）。",
    # ---------------------------------------------------------------- notes in the history
    "note.stage_exit": "阶段 '{stage}' {how}",
    "note.stage_exit_why": "阶段 '{stage}' {how}：{why:q}",
    "note.stage_status": "阶段 '{stage}' {status:@status}",
    "note.run_failed": "运行失败",
    "note.stopped_on_request": "按请求停止",
    "note.before_start": "{reason:q}（尚未开始）",
    "note.joined": "{first:q}；{second:q}",
    "note.supervisor_signal": "运行的监督进程收到了信号 `{signal}`",
    "note.supervisor_failed": "运行的监督进程出错：{error:q}",
    "note.supervisor_not_started": "无法启动运行的监督进程：{error:q}",
    "note.could_not_start": "阶段 '{stage}' 无法启动：{error:q}",
    "note.sigterm_killed": "阶段 '{stage}' 在 `SIGTERM` 后 {grace:g} 秒内没有退出，已被强制结束"
                           "（`SIGKILL`）；最后一次保存可能不完整",
    "note.disk_refusal": "磁盘空间不足：{path} 所在的磁盘只剩 {free}，至少需要 {need}"
                         "（运行器的 min_free_disk_bytes）；请删除旧的运行或缓存，或腾出空间",
    "note.secrets_lost": "为这个运行提供的密钥（{keys}）在它开始前丢失了（等待它的监督进程，"
                         "进程号 {pid}，已不在；机器重启过？）；请重新提交",
    "note.supervisor": "运行的监督进程（进程号 {pid}）",
    "note.supervisor_gone": "{sup}已不在（机器重启过，或进程被终止）",
    "note.secrets_gone": "{sup}已不在，为这个运行提供的密钥（{keys}）也随之丢失；阶段 '{stage}' "
                         "需要它们：请继续这个运行并重新提供",
    "note.adopted": "{sup}已不在；该阶段继续运行，由服务器照看（已接管）：它的结果将从进度文件中读取",
    "note.said_succeeded": "{sup}已不在，退出状态也随之丢失；该阶段的进度文件表明它已完成",
    "note.server_stopped": "{sup}已不在，因此由服务器停止了该阶段",
    "note.server_stopped_killed": "{sup}已不在，因此由服务器停止了该阶段；它在 `SIGTERM` 后 "
                                  "{grace:g} 秒内没有退出，已被强制结束（`SIGKILL`）；"
                                  "最后一次保存可能不完整",
    "note.left_stopped": "；它遗留的进程已被停止",
    "note.stage_said": "阶段 '{stage}' {said:@status}：{why:q}（{sup}已不在，所以退出码未知；"
                       "见 {log}）{after}",
    "note.no_reason": "没有给出原因",
    "note.no_end_event": "阶段 '{stage}' 结束了，但进度文件中没有结束事件（它崩溃了或被终止；"
                         "{sup}当时已不在，所以退出码未知）；见 {log}{after}",
    "note.gone_while_running": "阶段 '{stage}' 运行时{sup}已不在（机器重启过，或进程被终止）；"
                               "见 {log}{after}",
    # ---------------------------------------------------------------- the runner's refusals
    "note.no_such_run": "run_id：没有这个运行（收到 {run_id}）",
    "note.cannot_resume": "运行 {run_id} {status:@status}：只有已停止或失败的运行可以继续",
    "note.nothing_to_resume": "运行 {run_id}：每个阶段都已完成，没有可继续的",
    "note.no_saved_state": "运行 {run_id}：{state} 中没有保存的训练状态（运行在第一次保存之前就"
                           "结束了）；请改为开始一个新的运行",
    "note.delete_running": "运行 {run_id} 正在运行：请先停止它再删除",
    # ---------------------------------------------------------------- a stage's own end reasons
    "note.stopped_signal": "被信号 `{signal}` 停止",
    "note.stopped_cached": "被信号 `{signal}` 停止；已缓存 {n} 个样本",
    "note.stopped_at_step": "在第 {step} 步被信号 `{signal}` 停止；可用 --resume_from {path} 继续",
    "note.data_process_deepspeed":
        "任务 sft:data_process 不使用 DeepSpeed 运行（它不训练任何东西，ZeRO 包装会弄坏它）。"
        "请直接启动：`accelerate launch -m backend.stages.train --task sft:data_process ...`"
        "（不带 DeepSpeed 的 --config_file）。",
    "note.lora_checkpoint_missing": "lora_checkpoint：找不到文件（收到 {got}）",
    "note.class_data_problem": "class_data_path：{problem}",
    "note.class_cache_missing": "prior_preservation：{folder} 中没有类别缓存（当前：开启了 "
                                "prior_preservation；允许：先用开启 prior_preservation 的 "
                                "`--task sft:data_process` 写缓存，或关闭 prior_preservation）",
    "note.dop_cache_missing": "diff_output_preservation：{n} 个缓存样本在 {folder} 中没有 DOP "
                              "描述，例如 {first}（当前：开启了 diff_output_preservation；允许："
                              "用相同的 trigger_word 和 dop_class 运行 "
                              "`--task sft:data_process` 写出的缓存）",
    "note.dop_needs_lora": "diff_output_preservation：基础模型的预测就是关闭 LoRA 后的预测，而本次"
                           "运行不训练 LoRA（允许：关闭 diff_output_preservation，或训练 LoRA）",
    "note.preservation_one_shot": "prior_preservation、diff_output_preservation：它们读取阶段 1 "
                                  "的缓存（当前：task 为 sft；允许：先 sft:data_process 再 "
                                  "sft:train）",
    "note.class_prompt_family": "class_prompt：{model} 不能只凭提示词渲染单张图片（视频模型或编辑"
                                "模型），所以无法渲染类别图片（允许：class_prompt 留空，并在 "
                                "class_data_path 中提供类别数据集）",
    "note.class_images_dir_missing": "class_prompt：有 {n} 张类别图片由阶段 1 之前的 "
                                     "class_images 阶段渲染，但没有给出它们所在的文件夹（当前："
                                     "没有 {flag}；允许：先运行 `python -m "
                                     "backend.stages.class_images --config RUN_YAML "
                                     "--output_dir DIR`，再加上 `{flag} DIR`）",
    "note.class_images_missing": "class_prompt：要渲染的 {total} 张类别图片中有 {n} 张不在 "
                                 "{folder} 中，例如 {first}（允许：class_images 阶段渲染到的"
                                 "文件夹：`python -m backend.stages.class_images --config "
                                 "RUN_YAML --output_dir` {folder}）",
    "note.class_images_output_dir": "output_dir：必须设置（当前：未设置；允许：存放类别图片的"
                                    "文件夹，即运行文件夹中的 `classes/`）",
    "note.class_images_stopped": "被信号 `{signal}` 停止；已渲染 {n} 张类别图片",
    "note.caption_text_encoder_incomplete":
        "{folder}：文本编码器缺少 {missing}（保存为 Qwen3VLModel 时没有带语言模型输出层，"
        "且该层不与词嵌入共享权重），所以不能写描述；请把 captioner_path 设为一个 Qwen3-VL "
        "模型文件夹",
    "note.launch_precision_refused":
        "mixed_precision：{error:q}（收到 {got}，来自 {where:q}；允许：这次启动的 DeepSpeed "
        "配置启用的精度，或在那里设为 \"auto\"）",
    "note.launch_problem": "{name}：这次启动运行的是 {got}（收到 {want}，来自 {where:q}；允许：这次"
                           "启动下为 {got}，否则请重新启动：{how}）",
    "note.launch_how_no_deepspeed": "不用 DeepSpeed 启动：accelerate 配置的 distributed_type 不为 "
                                    "`DEEPSPEED`，也不加 --use_deepspeed",
    "note.launch_how_precision": "这次启动的 DeepSpeed 配置固定了精度：把其中 fp16/bf16 的 "
                                 "\"enabled\" 设为 \"auto\"，或用 `{flag} {want}` 启动",
    "note.launch_how_zero": "accelerate 启动时没有用 DeepSpeed：用 `--config_file <一个 DEEPSPEED "
                            "accelerate 配置，其 DeepSpeed JSON 中 zero_optimization.stage 为 "
                            "{want}>` 启动，或用 `accelerate launch --use_deepspeed --zero_stage "
                            "{want}{offload}` 启动",
    "note.launch_how_decides": "由启动决定：在启动的 DeepSpeed 配置中修改它，或用 `accelerate "
                               "launch --use_deepspeed {flag} {want}` 启动",
    # ---------------------------------------------------------------- the Run tab
    "runtab.status": "{status:@status}",
    "runtab.no_run_yet": "还没有运行：点 **开始训练**。",
    "runtab.your_runs": "**你在服务器上的运行：**",
    "runtab.start_adds": "现在点 *开始训练* 会再排队一个运行：它在上面这些运行结束后开始。",
    "runtab.stage": "阶段 <b>{stage:@stage}</b>",
    "runtab.step": "步 <b>{step}</b> / {total}（{pct:.0f} %）",
    "runtab.epoch": "轮次 {epoch}",
    "runtab.loss": "损失 <b>{loss:.4f}</b>",
    "runtab.val_loss": "验证损失 <b>{loss:.4f}</b>（第 {step} 步）",
    "runtab.eta": "预计剩余 <b>{eta}</b>",
    "runtab.speed": "{speed:.2f} 样本/秒",
    "runtab.quiet": "已有 {time} 没有输出",
    "runtab.head": "{icon} 运行 `{id}`{name} — **{status:@status}**{extras:join=}",
    "runtab.attempt": " · 第 {n} 次尝试",
    "runtab.extra_note": " · {note:q}",
    "runtab.stopping": " · 正在停止（保存状态中）…",
    "runtab.resumable": " · 可以继续",
    "runtab.exit": "退出状态：{how}。",
    "runtab.diagnosis_title": "**{title}**",
    "runtab.what_to_change": "要改什么：",
    "runtab.settings": "设置：{names}",
    "runtab.reason": "原因：{why:q}",
    "runtab.error_line": "错误：`{line}`",
    "runtab.last_lines": "日志的最后几行：",
    "runtab.full_log": "完整日志：`{path}`",
    "runtab.not_in_history": "运行 `{id}` 不在历史记录中（已删除？）。",
    "runtab.gpu_memory": "**GPU 显存**  \n{lines}",
    "runtab.gpu_line": "GPU {idx}（{name}）：{used:.1f} / {total:.1f} GiB，占用率 {util} %",
    "runtab.gpu_lines": "{lines:join=\n}",
    "runtab.not_started_problems": "✗ 未开始：表单中有 {n} 个问题，每个都显示在对应字段旁边"
                                   "（模型、数据集、训练页）。",
    "runtab.not_started": "✗ 未开始：{why:q}。",
    "runtab.started": "已开始运行 `{id}`。",
    "runtab.queued": "运行 `{id}` 已排队：前面的 {n} 个运行结束后开始。本页继续显示 `{ahead}`，"
                     "它当前{status:@status}。",
    "runtab.no_run_to_stop": "没有可停止的运行。",
    "runtab.nothing_to_stop": "运行 `{id}` {status:@status}，无需停止。",
    "runtab.refused": "✗ {why:q}",
    "runtab.stopping_run": "正在停止运行 `{id}`……train 阶段会先保存状态，之后可以继续。",
    "runtab.no_run_to_resume": "没有可继续的运行。",
    "runtab.not_resumed": "✗ 未继续：{why:q}。",
    "runtab.resumed": "已从保存的状态继续运行 `{id}`。",
    # ---------------------------------------------------------------- the Runs tab
    "runs.header": "{h:@header}",
    "runs.render_name": "渲染 {name}",
    "runs.summary": "运行 `{id}` — **{status:@status}** · 文件夹 `{folder}` · 磁盘 {disk}",
    "runs.checkpoints": "检查点：{names}",
    "runs.no_checkpoints": "检查点：还没有",
    "runs.no_checkpoint_yet": "`checkpoint`：运行 {id} 还没有检查点",
    "runs.not_a_checkpoint": "`checkpoint`：不是运行 {id} 的检查点（当前：{got!r}；可用："
                             "{allowed}）",
    "runs.failure": "失败原因：{why:q}",
    "runs.choose_first": "请先选择一个运行。",
    "runs.choose_first_x": "✗ 请先选择一个运行。",
    "runs.tick_box": "请先勾选确认框，再删除。",
    "runs.no_longer_valid": "✗ 这个运行的设置已无法通过校验：",
    "runs.form_holds": "✓ 表单里现在是运行 `{id}` 的设置：按需修改后，点 **开始训练**（运行页）即可"
                       "开始新的运行。",
    "runs.download_ready": "✓ `{file}`（{size}）—— 请用上方的下载链接。",
    "runs.extract_queued": "✓ 提取任务 `{id}` 已排队：LoRA 会写在这次运行的导出文件旁"
                           "（进度见“运行”页）。",
    "runs.deleted": "已删除运行 `{id}` 及其文件。",
    "runs.showing": "正在显示运行 `{id}`。",
    "runs.error": "✗ {why:q}",
    "runs.pick_label": "{name} · {id} · {status:@status}",
    "runs.unnamed": "运行",
}
