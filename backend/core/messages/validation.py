"""Messages of the validation area: each code in English and Chinese (see backend.core.messages).

- ``validation.*``: a run config's problems, one per field (``validation.field_problem``
  wraps each as ``field: problem``): the one-field problems of the schema
  (``backend/config/validation.py``, keyed by pydantic's error type), the rules between
  fields (``backend/config/rules.py``) and the low-VRAM rules (``backend/config/lowvram.py``);
- ``config.*``: files, presets, ``ConfigError``'s head and lines, and the refusals of what a
  signed-in user's run may name (``webui/security/paths.py``, ``quota.py``,
  ``webui/services.py``);
- ``problems.*``: the problems summary of the page (``webui/form.py``).
- ``extract.*``: the LoRA extraction's refusals (each naming its flag) and log
  (``backend/models/extract.py``).
"""

EN: dict[str, str] = {
    # ------------------------------------------------------------ a problem line
    "validation.field_problem": "{field}: {problem}",
    "validation.problems_joined": "{problems:join=; }",
    "validation.metadata_format": "unknown format (got {got}; allowed .csv, .json, .jsonl)",
    # "<pydantic's problem>[ at item N] (got X; allowed Y)"
    "validation.one_field": "{problem}{at} (got {got}; allowed {allowed})",
    "validation.at_item": " at item {n}",
    # ------------------------------------------------------------ pydantic's error types
    "validation.pydantic.greater_than_equal": "input should be greater than or equal to {ge}",
    "validation.pydantic.less_than_equal": "input should be less than or equal to {le}",
    "validation.pydantic.greater_than": "input should be greater than {gt}",
    "validation.pydantic.less_than": "input should be less than {lt}",
    "validation.pydantic.multiple_of": "input should be a multiple of {multiple_of}",
    "validation.pydantic.finite_number": "input should be a finite number",
    "validation.pydantic.int_parsing": "input should be a valid integer, unable to parse string "
                                       "as an integer",
    "validation.pydantic.int_from_float": "input should be a valid integer, got a number with a "
                                          "fractional part",
    "validation.pydantic.int_type": "input should be a valid integer",
    "validation.pydantic.float_parsing": "input should be a valid number, unable to parse "
                                         "string as a number",
    "validation.pydantic.float_type": "input should be a valid number",
    "validation.pydantic.bool_parsing": "input should be a valid boolean, unable to interpret "
                                        "input",
    "validation.pydantic.bool_type": "input should be a valid boolean",
    "validation.pydantic.string_type": "input should be a valid string",
    "validation.pydantic.list_type": "input should be a valid list",
    "validation.pydantic.literal_error": "input should be {choices:join=, } or {last}",
    "validation.pydantic.literal_one": "input should be {expected}",
    "validation.pydantic.string_too_long": "string should have at most {max_length} characters",
    "validation.pydantic.string_too_long_one": "string should have at most {max_length} "
                                               "character",
    "validation.pydantic.string_too_short": "string should have at least {min_length} "
                                            "characters",
    "validation.pydantic.string_too_short_one": "string should have at least {min_length} "
                                                "character",
    "validation.pydantic.too_short": "list should have at least {min_length} items after "
                                     "validation, not {actual_length}",
    "validation.pydantic.too_short_one": "list should have at least {min_length} item after "
                                         "validation, not {actual_length}",
    "validation.pydantic.not_a_family": "value error, not a registered model family",
    "validation.pydantic.value_error": "value error, {error}",
    # a type no template above has: pydantic's own words
    "validation.pydantic.other": "{msg}",
    "validation.not_expected_form": "not in the expected form",
    # ------------------------------------------------------------ the allowed part
    "validation.allowed.list_of": "a list of {choices}",
    "validation.allowed.and": "{lo} and {hi}",
    "validation.allowed.multiple_of": "a multiple of {n}",
    "validation.allowed.gpu_ids": "all or comma-separated GPU numbers like 0,1",
    "validation.allowed.http_url": "an http(s) URL",
    "validation.allowed.at_least_items": "at least {n} item(s)",
    "validation.allowed.non_empty_text": "non-empty text",
    "validation.allowed.at_most_chars": "at most {n} characters",
    "validation.allowed.parts": "{parts:join=, }",
    "validation.allowed.integer": "an integer",
    "validation.allowed.number": "a number",
    "validation.allowed.text": "text",
    "validation.allowed.or_empty": "{allowed} or empty",
    "validation.allowed.lokr_factor": "-1 (as balanced as the dimension allows) or a factor "
                                      "from 1 to 1024",
    # ------------------------------------------------------------ keys and form values
    "validation.unknown_option": "unknown option (got {got}; allowed: the fields of the run "
                                "schema{suggest})",
    "validation.unknown_flag": "unknown option (got {got}; allowed: see --help{suggest})",
    "validation.did_you_mean": "; did you mean {option}?",
    "validation.secret_never_stored": "secrets are never stored in run configs (got a value; "
                                      "allowed: set HF_TOKEN or MODELSCOPE_API_TOKEN in the "
                                      "environment)",
    "validation.not_a_number": "not a number (got {got}; allowed comma-separated numbers, "
                               "e.g. 0, 0.5, 1)",
    # ------------------------------------------------------------ low VRAM (lowvram.py)
    "validation.quant.entry_form": "each entry is <model_id>:<glob>:<method>[/<modules left "
                                   "unquantized>] (got {got}; allowed methods {allowed})",
    "validation.quant.not_run": "{method} does not run here: {why} (got {got}; allowed "
                                "{allowed})",
    "validation.quant.why_nvfp4": "NVFP4 weights need a Blackwell GPU's FP4 kernels, which "
                                  "ZeroLoRA does not use",
    "validation.quant.why_comfy": "the comfy-kitchen backend is not part of ZeroLoRA",
    "validation.quant.unknown_method": "unknown method in {entry} (got {got}; allowed "
                                       "{allowed})",
    "validation.quant.fp8_entry_form": "each entry is <model_id>:<glob> or a model name (got "
                                       "{got}; allowed e.g. org/model:transformer/*.safetensors,"
                                       " or {names})",
    "validation.quant.two_methods": "two methods for the {component} (got {first} and "
                                    "{second}; allowed one per component)",
    "validation.lowvram.zero3_quantized": "a quantized base cannot be partitioned by ZeRO-3 "
                                          "(got {method} with zero_stage 3; allowed zero_stage "
                                          "0-2, or enable_model_cpu_offload for the memory "
                                          "ZeRO-3 offload saves)",
    "validation.lowvram.without_deepspeed": "layer-wise offload runs without DeepSpeed (got "
                                            "true with zero_stage {zs}; allowed zero_stage 0, "
                                            "or DeepSpeed's own {other})",
    "validation.lowvram.one_gpu": "layer-wise offload runs on one GPU (got true with "
                                  "num_processes {n}; allowed num_processes 1)",
    "validation.lowvram.torchao_stream": "torchao's quantized tensors are not streamed block "
                                         "by block (got true with a torchao method for the "
                                         "transformer from {source}; allowed a bitsandbytes "
                                         "method, or no layer offload)",
    "validation.lowvram.dora_quantized": "DoRA needs the base weights in full precision for "
                                         "its norms (got {method} with DoRA; allowed plain "
                                         "LoRA, or no quantization)",
    "validation.lowvram.optimizer_8bit": "8-bit optimizers run on the GPU only (got optimizer "
                                         "{optimizer}; allowed optimizer adamw, or "
                                         "enable_optimizer_cpu_offload false)",
    # ------------------------------------------------------------ rules between fields
    "validation.rule.param_offload_zero3": "parameter offload needs ZeRO-3 (got {got} with "
                                           "zero_stage {zs}; allowed none unless zero_stage "
                                           "is 3)",
    "validation.rule.optimizer_offload_deepspeed": "optimizer offload needs DeepSpeed (got "
                                                   "{got} with zero_stage 0; allowed none "
                                                   "unless zero_stage is 1-3)",
    "validation.rule.nvme_zero3": "nvme offload needs ZeRO-3 (got 'nvme' with zero_stage "
                                  "{zs}; allowed none | cpu)",
    "validation.rule.nvme_folder": "nvme offload needs a folder (got None; allowed a writable "
                                   "folder on an NVMe drive)",
    "validation.rule.ds_checkpointing_only": "applies to DeepSpeed activation checkpointing "
                                             "only (got true with zero_stage {zs}, "
                                             "use_gradient_checkpointing {ugc}, "
                                             "ds_activation_checkpointing {dac}; allowed "
                                             "false, or zero_stage ≥ 1 with both "
                                             "checkpointing options on)",
    "validation.rule.ds_replaces_torch": "DeepSpeed activation checkpointing replaces torch "
                                         "checkpointing here (got true with zero_stage {zs} "
                                         "and ds_activation_checkpointing true; allowed false "
                                         "-- use cpu_checkpointing -- or "
                                         "ds_activation_checkpointing false)",
    "validation.rule.main_ip": "{m} machines need the main machine's address (got None; "
                               "allowed a host name or IP reachable from every machine)",
    "validation.rule.main_port": "{m} machines need a fixed port (got 0; allowed 1024-65535)",
    "validation.rule.port_reserved": "ports below 1024 are reserved (got {got}; allowed 0 or "
                                     "1024-65535)",
    "validation.rule.rank_below": "must be below num_machines (got {got}; allowed 0..{top})",
    "validation.rule.process_per_machine": "at least one process per machine (got {n}; "
                                           "allowed ≥ {m})",
    "validation.rule.split_evenly": "must split evenly over {m} machines (got {n}; allowed a "
                                    "multiple of {m})",
    "validation.rule.gpu_repeated": "repeated GPU (got {got}; allowed distinct ids)",
    "validation.rule.gpu_fewer": "fewer GPUs than processes per machine (got {got} for {n} "
                                 "process(es); allowed all or ≥ {n} ids)",
    "validation.rule.height_width_together": "set height and width together for a fixed size "
                                             "(got height={height}, width={width}; allowed "
                                             "both or neither)",
    "validation.rule.side_multiple": "{model} needs sides that are multiples of {mult} (got "
                                     "{side}; allowed e.g. {lo} or {hi})",
    "validation.rule.colon_empty_before": "the model id before the colon is empty (got {got}; "
                                          "allowed a local folder, or model_id:folder/ or "
                                          "model_id:glob, e.g. {example})",
    "validation.rule.colon_empty_after": "the folder or files after the colon is empty (got "
                                         "{got}; allowed a local folder, or model_id:folder/ "
                                         "or model_id:glob, e.g. {example})",
    "validation.rule.offload_needs_checkpointing": "needs use_gradient_checkpointing (got "
                                                   "true with checkpointing off; allowed "
                                                   "false, or turn checkpointing on)",
    "validation.rule.no_model_source": "no model source (got None; allowed model_id:glob "
                                       "list, a local path, or model_paths)",
    "validation.rule.model_paths_json": "must be a JSON list of paths (got {got}; allowed e.g. "
                                        "[\"a.safetensors\", [\"shard1.safetensors\", "
                                        "\"shard2.safetensors\"]])",
    "validation.rule.target_modules": "at least one module name (got {got}; allowed e.g. "
                                      "to_q,to_k,to_v)",
    "validation.rule.other_family_source": "a {other} model, not {family} (got {got}; "
                                          "allowed {family} sources, e.g. {example}, or "
                                          "model_family for {other})",
    "validation.rule.distilled": "{model} is step-distilled: trained directly, it learns "
                                 "ordinary flow matching and its few-step sampling wears "
                                 "off (got {got}; allowed {base} to train on, e.g. "
                                 "{example}, then its LoRA applied to {model}; or "
                                 "preset_lora_path set to a de-distillation adapter, merged "
                                 "for training only; or train_distilled true to train "
                                 "{model} directly anyway)",
    "validation.rule.max_steps_cap": "a cap below the step target cuts it short (got {got} "
                                     "with max_train_steps {target}; allowed empty or ≥ "
                                     "{target})",
    "validation.rule.prune_needs_save_steps": "only step checkpoints are pruned (got {got} "
                                              "without save_steps; allowed with save_steps)",
    "validation.rule.resume_or_lora": "set either resume_from or lora_checkpoint (got both; "
                                      "allowed one: a saved state already holds the LoRA)",
    "validation.rule.trainable_unknown": "no component of {family} has this name (got {got}; "
                                         "allowed {allowed}; its components: {components})",
    "validation.rule.trainable_frozen": "{got} stays frozen: its outputs are encoded before "
                                        "training (got {got}; allowed {allowed}, the "
                                        "component a full fine-tune trains)",
    "validation.rule.full_with_lora": "a LoRA option beside trainable_models: a full "
                                      "fine-tune attaches no LoRA (got {got}; allowed the "
                                      "default {default}, or empty trainable_models to "
                                      "train a LoRA)",
    "validation.rule.full_frozen_base": "works on a frozen base only, and a full fine-tune "
                                        "trains the base (got {got}; allowed empty with "
                                        "trainable_models: ZeRO offload fits a full "
                                        "fine-tune to a small GPU)",
    "validation.rule.full_quantized": "a {method} base cannot train in full (got the "
                                      "transformer quantized; allowed no quantized "
                                      "transformer with trainable_models)",
    "validation.rule.stage_order": "must be in order data_process, train, sample without "
                                   "repeats (got {got}; allowed a subset of {stages} in that "
                                   "order)",
    "validation.rule.data_process_split": "data_process runs only with split_training (got "
                                          "data_process with split_training false; allowed "
                                          "train, sample)",
    "validation.rule.dataset_required": "a dataset folder is required (got ''; allowed "
                                        "{what})",
    "validation.rule.dataset_cache_folder": "the cache folder written by data_process",
    "validation.rule.dataset_existing_folder": "an existing dataset folder",
    "validation.rule.sample_prompt": "the sample stage needs at least one prompt (got {got}; "
                                     "allowed one or more non-empty prompts)",
    "validation.rule.scales_range": "scales must lie between {lo:g} and {hi:g} (got {got}; "
                                    "allowed e.g. 0, 0.5, 1)",
    "validation.rule.frame_count": "must be {m}k+1 (got {n}; allowed e.g. {lo} or {hi})",
    "validation.rule.frame_bucket_range": "each count must lie between {lo} and {hi} (got "
                                          "{got}; allowed e.g. 17, 33, 81)",
    "validation.rule.frame_bucket_repeated": "each count once (got {got}; allowed distinct "
                                             "counts, e.g. 17, 33, 81)",
    "validation.rule.window_stride_needs_slide": "a window stride without sliding windows "
                                                 "(got {got} with frame_extraction {mode}; "
                                                 "allowed {default}, or frame_extraction "
                                                 "slide)",
    "validation.rule.frame_sample_needs_uniform": "a window count without uniform windows "
                                                  "(got {got} with frame_extraction {mode}; "
                                                  "allowed {default}, or frame_extraction "
                                                  "uniform)",
    "validation.rule.windows_with_input": "windows of a clip cannot be cut from its "
                                          "extra_inputs {inputs} (got {got}; allowed head, or "
                                          "extra_inputs without {inputs})",
    "validation.rule.timestep_order": "must be below max_timestep_boundary (got {lo:g} with "
                                      "max_timestep_boundary {hi:g}; allowed e.g. 0 to 0.358 "
                                      "for a high-noise expert, 0.358 to 1 for a low-noise "
                                      "one)",
    "validation.rule.sample_every_needs_train": "renders during training (got {got} without "
                                                "the train stage; allowed empty)",
    "validation.rule.customized_optimizer": "names another optimizer than optimizer (got "
                                            "{got} = {opt} with optimizer {optimizer}; "
                                            "allowed one of the two, or both naming the same)",
    "validation.rule.offload_adamw_only": "with optimizer offload only adamw runs "
                                          "(DeepSpeed's CPU Adam) (got {opt} with "
                                          "offload_optimizer_device {device}; allowed adamw, "
                                          "or offload_optimizer_device none)",
    "validation.rule.cpu_offload_adamw_only": "enable_optimizer_cpu_offload steps adamw only "
                                              "(torchao's CPU-offload AdamW) (got {opt} with "
                                              "enable_optimizer_cpu_offload true; allowed "
                                              "adamw, or enable_optimizer_cpu_offload false)",
    "validation.rule.lokr_zero": "0 splits no dimension (got 0; allowed {allowed})",
    "validation.rule.dropout_lokr": "applies to lora and dora (got {got} with lora_type lokr; "
                                    "allowed 0)",
    "validation.rule.dora_zero3": "dora reads each layer's whole base weight, which ZeRO-3 "
                                  "partitions (got dora with zero_stage 3; allowed lora | "
                                  "lokr, or zero_stage 0-2)",
    "validation.rule.validation_needs_samples": "needs held-out samples (got {got} with "
                                                "validation_samples 0; allowed empty, or "
                                                "validation_samples ≥ 1)",
    "validation.rule.buckets_fixed_size": "a fixed height and width make one size for every "
                                          "image (got aspect_buckets true with "
                                          "height={height}, width={width}; allowed false, or "
                                          "empty height and width)",
    "validation.rule.mask_needs_masked_loss": "a mask option without the masked loss (got {got} "
                                              "with masked_loss off; allowed {default}, or "
                                              "masked_loss on)",
    "validation.rule.mask_no_source": "no source of masks (got masked_loss on with no mask_path, "
                                      "alpha_mask off and no dataset_metadata_path; allowed a "
                                      "mask folder in mask_path, alpha_mask, or a metadata file "
                                      "with a mask column)",
    "validation.rule.ema_needs_decay": "an EMA option without an EMA (got {got} with ema_decay "
                                       "empty; allowed {default}, or set ema_decay)",
    "validation.rule.ema_start_after_end": "the EMA would never begin (got {got}, after the "
                                           "run's last step {last}; allowed 0 to {last})",
    "validation.rule.prior_needs_switch": "a prior preservation option without prior "
                                          "preservation (got {got} with prior_preservation "
                                          "off; allowed {default}, or prior_preservation on)",
    "validation.rule.class_data_required": "prior preservation needs a class dataset (got "
                                           "neither class_data_path nor class_prompt; "
                                           "allowed a folder of class images with their "
                                           "captions, or a class_prompt the base model "
                                           "renders them from)",
    "validation.rule.class_count_needs_prompt": "a number of class images to render without "
                                                "a class_prompt to render them from (got "
                                                "{got}; allowed {default}, or a class_prompt)",
    "validation.rule.class_data_missing": "class dataset folder not found (got {got}; allowed "
                                          "an existing folder of class images with their "
                                          "captions)",
    "validation.rule.dop_needs_switch": "a DOP option without differential output "
                                        "preservation (got {got} with "
                                        "diff_output_preservation off; allowed {default}, or "
                                        "diff_output_preservation on)",
    "validation.rule.dop_needs_words": "DOP replaces trigger_word by dop_class in each "
                                       "caption, and this one is empty (got empty; allowed "
                                       "a word or phrase)",
    "validation.rule.preservation_split": "prior preservation and DOP read what stage 1 "
                                          "caches (the class samples, the DOP captions) "
                                          "(got split_training false; allowed true)",
    "validation.rule.slurm_needs_executor": "a SLURM option of a run that does not go to SLURM "
                                            "(got {got} with executor local; allowed "
                                            "{default}, or executor slurm)",
    "validation.rule.slurm_time_limit": "not a SLURM time (got {got}; allowed minutes, "
                                        "MM:SS, HH:MM:SS, D-HH, D-HH:MM or D-HH:MM:SS)",
    "validation.rule.slurm_memory": "not a SLURM size (got {got}; allowed a number with K, "
                                    "M, G or T, e.g. 64G)",
    "validation.rule.slurm_env_line": "not a NAME=value line (got {got}; allowed a variable "
                                      "name of letters, digits and _, then = and its value)",
    "validation.rule.slurm_setup_line": "one command a line (got a line with a line break or "
                                        "a NUL character; allowed one line each)",
    "validation.rule.wandb_name": "not a name Weights & Biases accepts (got {got}; allowed "
                                  "1 to 128 characters without / \\ # ? % :)",
    "validation.rule.swanlab_project": "not a project name SwanLab accepts (got {got}; "
                                       "allowed 1 to 100 letters, digits and _ - + .)",
    "validation.rule.swanlab_workspace": "not a workspace name SwanLab accepts (got {got}; "
                                         "allowed 1 to 25 letters, digits, _ and -)",
    "validation.rule.tracker_offline": "{tracker} online needs the network, and this run "
                                       "never touches it (got {field} online with offline "
                                       "true; allowed {field} offline, or offline false)",
    "validation.rule.loraplus_lokr": "LoRA+ sets lora_B's learning rate against lora_A's, "
                                     "and a LoKr has neither (got {got} with lora_type "
                                     "lokr; allowed empty, or lora_type lora | dora)",
    "validation.rule.loraplus_prodigy": "prodigy learns one step size for every parameter "
                                        "group and refuses groups at different learning "
                                        "rates (got {got} with optimizer prodigy; allowed "
                                        "empty, or optimizer adamw | adamw8bit | adafactor)",
    # ------------------------------------------------------------ ConfigError
    "config.invalid": "Invalid run config:",
    "config.invalid_in": "Invalid run config in {source}:",
    "config.sources_and": "{sources:join= and }",
    "config.from_source": "{problem} [from {source}]",
    "config.error": "{head}\n  {lines:join=\n  }",
    "config.source.command_line": "the command line",
    "config.source.preset_base": "the settings the preset is applied to",
    "config.source.run_config": "run config",
    # ------------------------------------------------------------ files (files.py)
    "config.schema_version": "unsupported (got {got}; allowed 1..{top})",
    "config.file_not_found": "file not found (got {got}; allowed an existing YAML file)",
    "config.not_utf8": "not UTF-8 text (byte {byte}; allowed a YAML file)",
    "config.cannot_read": "cannot read ({why}; allowed a readable YAML file)",
    "config.preset_empty": "empty file (got no options; allowed schema_version and the "
                           "options the preset changes)",
    "config.top_level": "top level must be a mapping (got {type})",
    "config.keys_option_names": "keys must be option names (got {got}; allowed the fields of "
                                "the run schema)",
    # ------------------------------------------------------------ presets (presets.py)
    "config.user_not_name": "not a user name (got {got})",
    "config.preset.file_not_found": "file not found (got {got}; allowed an existing preset "
                                    "file or a preset name)",
    "config.preset.name_not_path": "a name, not a path (got {got}; allowed {names})",
    "config.preset.no_such_name": "no preset with this name (got {got}; allowed {names})",
    "config.preset.none_yet": "none yet",
    "config.preset.reserved_to_admins": "reserved to admins in presets (got {got}; allowed "
                                        "the default or a value of a bundled or shared "
                                        "preset)",
    "config.preset.bad_name": "not a preset name (got {got}; allowed letters, digits, _ . - "
                              "up to 80 characters)",
    "config.preset.file_name": "a preset name, not a file name (got {got}; allowed {stem}: "
                               "the .yaml is added)",
    "config.preset.bundled_name": "a bundled preset has this name (got {got}; allowed "
                                  "another name)",
    "config.preset.workspace_needed": "needed to save user presets (got None; allowed a "
                                      "folder)",
    "config.preset.only_admins_share": "only admins share presets (got true; allowed false)",
    # ------------------------------------------------------------ paths a user's run names
    "config.path.got": "got {got}",
    "config.path.got_link": "got {got}, a link to a place outside",
    "config.path.empty": "empty",
    "config.path.own_folder": "a folder under {folder}/",
    "config.path.data_folders": "{own}, the demo dataset (backend/assets/) or a folder of one "
                                "of your runs",
    "config.path.models_folders": "a path inside the server's models folder or "
                                  "backend/assets/",
    "config.path.runs": "a file inside one of your runs (runs/<run id>/ in the workspace)",
    "config.path.no_registry": "nothing (no run registry to check)",
    "config.path.outside_datasets": "outside your dataset folders ({got}; allowed {allowed})",
    "config.path.too_many_files": "too many files to check (got more than {n}; allowed up to "
                                  "{n})",
    "config.path.link_outside": "{rel} is a link to a place outside your dataset folders "
                                "(got a link; allowed files inside {allowed})",
    "config.path.row_outside": "{file} row {row} names a file outside your dataset folders "
                               "({got}; allowed files inside {allowed})",
    "config.path.local_outside_models": "a local path outside the models folders ({got}; "
                                        "allowed {allowed}, or model_id:glob)",
    "config.path.dots_in_model_id": "'..', '~' and absolute paths are not allowed in a "
                                    "model_id (got {got}; allowed model_id:glob inside the "
                                    "models folder)",
    "config.path.dots_in_glob": "'..', '~' and absolute paths are not allowed in a glob "
                                "(got {got}; allowed model_id:glob inside the models folder)",
    "config.path.nul": "not allowed (got a NUL character; allowed a path)",
    "config.path.model_paths_unreadable": "cannot be read as paths (got {why}; allowed a JSON "
                                          "list of files)",
    "config.path.set_by_plan": "set by the run plan, not by users ({got}; allowed {allowed})",
    "config.path.admins_folder": "a server folder for admins only ({got}; allowed {allowed})",
    "config.path.mirror_admins": "a download mirror is for admins only ({got}; allowed empty)",
    "config.path.set_by_server": "set by the server, not by users ({got}; allowed empty)",
    "config.path.not_models_dir": "not the server's models folder ({got}; allowed the "
                                  "server's models folder (the default) or backend/assets/, "
                                  "or a folder inside one)",
    "config.path.model_file_outside": "a file outside the models folders ({got}; allowed "
                                      "{allowed})",
    "config.path.not_in_runs": "not inside one of your runs ({got}; allowed {allowed})",
    "config.path.preset_lora_outside": "not inside your dataset folders or runs ({got}; "
                                       "allowed {allowed})",
    "config.path.sign_in": "sign in first (got no user; allowed a signed-in user)",
    "config.path.run_yaml_not_file": "not a regular file of run {run} (got a link or special "
                                     "file; allowed the file its plan wrote)",
    "config.path.run_yaml_unreadable": "cannot be read ({what}; allowed the file its plan "
                                       "wrote)",
    "config.path.not_valid_yaml": "not valid YAML",
    "config.path.run_yaml_not_mapping": "not a mapping of run options (got {type})",
    "config.path.run_link_outside": "{rel} in run {run} is a link to a place outside its "
                                    "folder (got a link; allowed files inside the run's "
                                    "folder)",
    # ------------------------------------------------------------ quotas (quota.py)
    "config.quota.dataset_count": "you have {count} dataset folders (allowed up to {limit}; "
                                  "delete one first)",
    "config.quota.dataset_bytes": "your dataset folders hold your whole quota (allowed "
                                  "{limit}; delete a dataset first)",
    "config.quota.cache_bytes": "the stage-1 caches of your runs hold {total} (allowed "
                                "{limit}; delete older runs first)",
    # ------------------------------------------------------------ refusals (services.py)
    "config.refused.paths": "{n} path(s) not allowed",
    "config.refused.run_name": "invalid run name",
    "config.refused.stages": "{n} problem(s) its stages would refuse",
    "config.refused.sample_settings": "invalid sample settings",
    "config.refused.caption": "cannot caption this dataset",
    "config.run_name_too_long": "too long (got {n} characters; allowed at most {limit}, as "
                                "run_name)",
    "config.set_by_plan": "set by the run plan (got {got}; allowed leave it out: each run "
                          "writes into its own folder under the workspace's runs/)",
    # ------------------------------------------------------------ problems summary (form.py)
    "problems.none": "✓ No problems.",
    "problems.count": "✗ **{n} problem(s)** — fix them before starting:",
    # bounded YAML/JSON (backend/core/bounded.py)
    "config.parse.too_many_aliases": "{what}: too many YAML aliases (got more than {limit}; "
                                     "allowed up to {limit})",
    "config.parse.too_deep": "{what}: nested too deep (got more than {limit} levels; allowed "
                             "up to {limit} levels)",
    "config.parse.too_many_values": "{what}: too many values once YAML aliases are expanded "
                                    "(got more than {limit}; allowed up to {limit})",
    "config.parse.too_many": "{what}: too many values (got more than {limit}; allowed up to "
                             "{limit})",
    "config.parse.too_large": "{what}: too large (got more than {limit} bytes; allowed up to "
                              "{limit} bytes)",
    "config.parse.self_alias": "{what}: a YAML alias inside the value it names (got a value "
                               "that contains itself; allowed aliases to values defined "
                               "before them)",
    "config.parse.not_yaml": "{what}: not valid YAML ({detail:q})",
    "config.parse.not_json": "{what}: not valid JSON ({detail:q})",
    "config.parse.unreadable_value": "{what}: a value that cannot be read ({detail:q})",
    # the write gate (backend/core/writegate.py)
    "config.read.not_found": "{what} not found (got {got!r})",
    "config.write.refused": "{what}: {why} (got {got!r}; allowed {allowed})",
    "config.write.not_writable": "not writable here",
    "config.write.dotdot": "'..' in the path",
    "config.write.no_folder": "folder not found",
    "config.write.link_on_way": "a link or not a folder on the way",
    "config.write.not_name": "not a file name",
    "config.write.is_link": "is a link; a link is never written through",
    "config.write.not_regular": "not a regular file",
    "config.write.exists": "already exists",
    "config.write.own_folders": "a file inside your own folders",
    "config.write.regular_file": "a regular file",
    # ------------------------------------------------------------ LoRA extraction
    # (backend/models/extract.py): refusals naming the flag, the log and its warnings
    "extract.refused": "LoRA extraction refused:\n  {lines:join=\n  }",
    "extract.job.not_full": "not a full fine-tune's checkpoint of this run (got {got}; "
                            "allowed {allowed})",
    "extract.job.rank_or_energy": "set one of rank and energy (got both or neither)",
    "extract.job.rank": "at least 1 (got {got})",
    "extract.job.energy": "outside (0, 1] (got {got}; allowed a share such as 0.9)",
    "extract.not_folder": "not a folder (got {got}; allowed a transformer folder with "
                          "config.json and safetensors weights)",
    "extract.no_config": "no config.json (got {got}; allowed a transformer folder as "
                         "save_pretrained writes it)",
    "extract.no_weights": "no safetensors weights (got {got}; allowed "
                          "diffusion_pytorch_model.safetensors or its shards with their "
                          "index; pickled weights are not read)",
    "extract.shard_missing": "shards named in the index are missing (got {got})",
    "extract.rank_or_energy": "give exactly one of them (allowed --rank R or --energy F)",
    "extract.rank_low": "must be at least 1 (got {got}; allowed 1 or more)",
    "extract.energy_range": "outside (0, 1] (got {got}; allowed a fraction above 0 and at "
                            "most 1)",
    "extract.choice": "unknown (got {got}; allowed {allowed})",
    "extract.no_cuda": "no CUDA device here (got {got}; allowed cpu)",
    "extract.out_suffix": "not a .safetensors file (got {got})",
    "extract.out_folder": "a folder (got {got}; allowed a file path)",
    "extract.config_differs": "config.json differs from the one of --base (keys {keys}): "
                              "another architecture (allowed a fine-tune of the same model)",
    "extract.keys_differ": "its tensors differ from those of --base (missing {missing}; extra "
                           "{extra}): another architecture",
    "extract.shapes_differ": "tensor shapes differ from those of --base ({tensors:join=; })",
    "extract.nothing_changed": "no tensor differs from those of --base (allowed a fine-tuned "
                               "model)",
    "extract.no_linear_change": "no Linear weight changed ({n} other tensors did; a LoRA "
                                "holds the changes of Linear weights)",
    "extract.family": "model family: {family} ({how})",
    "extract.family_found": "recognised from the config of --base",
    "extract.family_default": "not recognised from the config of --base, so the default; "
                              "--model_family names another",
    "extract.module": "{module}: rank {rank}, {kept} of its change kept",
    "extract.summary": "{n} Linear modules: file rank {rank} (ranks {low}..{high} kept), "
                       "{kept} of their change kept; {others} other tensors changed "
                       "({other_share} of the whole change); {unchanged} tensors unchanged",
    "extract.other_dropped": "warning: {n} changed tensors that are no Linear weight are left "
                             "out (--other drop); they held {share} of the whole change",
    "extract.other_beside": "the {fmt} format cannot carry the {n} changed tensors that are "
                            "no Linear weight ({share} of the whole change): their "
                            "differences are written beside it, {path}",
    "extract.other_unnamed": "warning: {n} changed tensors have no ComfyUI name in this family "
                             "and are left out ({share} of the whole change): {tensors}",
    "extract.written": "written: {path}",
}

ZH: dict[str, str] = {
    # ------------------------------------------------------------ a problem line
    "validation.field_problem": "`{field}`：{problem}",
    "validation.problems_joined": "{problems:join=；}",
    "validation.metadata_format": "未知格式（当前：{got}；允许：.csv、.json、.jsonl）",
    "validation.one_field": "{problem}{at}（当前：`{got}`；允许：{allowed}）",
    "validation.at_item": "（第 {n} 项）",
    # ------------------------------------------------------------ pydantic's error types
    "validation.pydantic.greater_than_equal": "应大于或等于 {ge}",
    "validation.pydantic.less_than_equal": "应小于或等于 {le}",
    "validation.pydantic.greater_than": "应大于 {gt}",
    "validation.pydantic.less_than": "应小于 {lt}",
    "validation.pydantic.multiple_of": "应为 {multiple_of} 的倍数",
    "validation.pydantic.finite_number": "应为有限的数字",
    "validation.pydantic.int_parsing": "应为整数，无法把这段文字解析成整数",
    "validation.pydantic.int_from_float": "应为整数，不能带小数部分",
    "validation.pydantic.int_type": "应为整数",
    "validation.pydantic.float_parsing": "应为数字，无法把这段文字解析成数字",
    "validation.pydantic.float_type": "应为数字",
    "validation.pydantic.bool_parsing": "应为布尔值，无法识别这个输入",
    "validation.pydantic.bool_type": "应为布尔值",
    "validation.pydantic.string_type": "应为文本",
    "validation.pydantic.list_type": "应为列表",
    "validation.pydantic.literal_error": "应为 {choices:join=, } 或 {last} 之一",
    "validation.pydantic.literal_one": "应为 {expected}",
    "validation.pydantic.string_too_long": "文字最多 {max_length} 个字符",
    "validation.pydantic.string_too_long_one": "文字最多 {max_length} 个字符",
    "validation.pydantic.string_too_short": "文字至少 {min_length} 个字符",
    "validation.pydantic.string_too_short_one": "文字至少 {min_length} 个字符",
    "validation.pydantic.too_short": "列表至少要有 {min_length} 项，当前为 {actual_length} 项",
    "validation.pydantic.too_short_one": "列表至少要有 {min_length} 项，当前为 {actual_length} 项",
    "validation.pydantic.not_a_family": "不是已注册的模型系列",
    "validation.pydantic.value_error": "取值有误：{error:q}",
    "validation.pydantic.other": "{msg:q}",
    "validation.not_expected_form": "格式不对",
    # ------------------------------------------------------------ the allowed part
    "validation.allowed.list_of": "由 {choices} 组成的列表",
    "validation.allowed.and": "{lo} 且 {hi}",
    "validation.allowed.multiple_of": "{n} 的倍数",
    "validation.allowed.gpu_ids": "all，或逗号分隔的 GPU 编号，如 0,1",
    "validation.allowed.http_url": "http(s) 网址",
    "validation.allowed.at_least_items": "至少 {n} 项",
    "validation.allowed.non_empty_text": "非空文字",
    "validation.allowed.at_most_chars": "最多 {n} 个字符",
    "validation.allowed.parts": "{parts}",
    "validation.allowed.integer": "整数",
    "validation.allowed.number": "数字",
    "validation.allowed.text": "文字",
    "validation.allowed.or_empty": "{allowed}，或留空",
    "validation.allowed.lokr_factor": "-1（按维度尽量均衡地拆分），或 1 到 1024 之间的因子",
    # ------------------------------------------------------------ keys and form values
    "validation.unknown_option": "未知选项（当前：`{got}`；允许：运行配置中的字段{suggest}）",
    "validation.unknown_flag": "未知选项（当前：`{got}`；允许：见 --help{suggest}）",
    "validation.did_you_mean": "；是不是想写 {option}？",
    "validation.secret_never_stored": "运行配置从不保存密钥（当前：填了一个值；允许：在环境变量中"
                                      "设置 HF_TOKEN 或 MODELSCOPE_API_TOKEN）",
    "validation.not_a_number": "不是数字（当前：{got}；允许：逗号分隔的数字，例如 0, 0.5, 1）",
    # ------------------------------------------------------------ low VRAM (lowvram.py)
    "validation.quant.entry_form": "每个条目的格式为 <model_id>:<glob>:<method>[/<不量化的模块>]"
                                   "（当前：{got}；允许的方法：{allowed}）",
    "validation.quant.not_run": "{method} 在这里不能运行：{why}（当前：{got}；允许：{allowed}）",
    "validation.quant.why_nvfp4": "NVFP4 权重需要 `Blackwell` GPU 的 FP4 内核，ZeroLoRA 不使用它们",
    "validation.quant.why_comfy": "comfy-kitchen 后端不在 ZeroLoRA 之中",
    "validation.quant.unknown_method": "未知的量化方法：{entry}（当前：{got}；允许：{allowed}）",
    "validation.quant.fp8_entry_form": "每个条目的格式为 <model_id>:<glob> 或模型名称（当前："
                                       "{got}；允许：例如 org/model:transformer/*.safetensors，"
                                       "或 {names}）",
    "validation.quant.two_methods": "{component} 用了两种量化方法（当前：{first} 和 {second}；"
                                    "允许：每个组件一种）",
    "validation.lowvram.zero3_quantized": "量化后的基础模型不能被 ZeRO-3 切分（当前：{method}，"
                                          "zero_stage 为 3；允许：zero_stage 0-2，或用 "
                                          "enable_model_cpu_offload 省下 ZeRO-3 卸载所省的显存）",
    "validation.lowvram.without_deepspeed": "逐层卸载在不用 DeepSpeed 时才能运行（当前：true，"
                                            "zero_stage 为 {zs}；允许：zero_stage 0，或改用 "
                                            "DeepSpeed 自己的 {other}）",
    "validation.lowvram.one_gpu": "逐层卸载只能在单个 GPU 上运行（当前：true，num_processes 为 "
                                  "{n}；允许：num_processes 1）",
    "validation.lowvram.torchao_stream": "`torchao` 量化后的张量不能逐模块流式传输（当前：true，"
                                         "且 {source} 给 Transformer 用了 `torchao` 方法；允许："
                                         "改用 `bitsandbytes` 方法，或不逐层卸载）",
    "validation.lowvram.dora_quantized": "`DoRA` 计算范数需要全精度的基础权重（当前：{method}，"
                                         "并用了 `DoRA`；允许：普通 LoRA，或不量化）",
    "validation.lowvram.optimizer_8bit": "8 位优化器只能在 GPU 上运行（当前：optimizer 为 "
                                         "{optimizer}；允许：optimizer 为 adamw，或把 "
                                         "enable_optimizer_cpu_offload 设为 false）",
    # ------------------------------------------------------------ rules between fields
    "validation.rule.param_offload_zero3": "参数卸载需要 ZeRO-3（当前：{got}，zero_stage 为 "
                                           "{zs}；允许：zero_stage 为 3 时才可卸载，否则为 "
                                           "`none`）",
    "validation.rule.optimizer_offload_deepspeed": "优化器卸载需要 DeepSpeed（当前：{got}，"
                                                   "zero_stage 为 0；允许：zero_stage 为 1-3 "
                                                   "时才可卸载，否则为 `none`）",
    "validation.rule.nvme_zero3": "卸载到 NVMe 需要 ZeRO-3（当前：'nvme'，zero_stage 为 {zs}；"
                                  "允许：none | cpu）",
    "validation.rule.nvme_folder": "卸载到 NVMe 需要一个文件夹（当前：未设置；允许：NVMe 硬盘上"
                                   "可写的文件夹）",
    "validation.rule.ds_checkpointing_only": "只对 DeepSpeed 激活检查点生效（当前：true，"
                                             "zero_stage 为 {zs}，use_gradient_checkpointing "
                                             "为 {ugc}，ds_activation_checkpointing 为 {dac}；"
                                             "允许：false，或 zero_stage ≥ 1 且两个检查点选项"
                                             "都打开）",
    "validation.rule.ds_replaces_torch": "这里由 DeepSpeed 激活检查点代替 torch 检查点（当前："
                                         "true，zero_stage 为 {zs}，"
                                         "ds_activation_checkpointing 为 true；允许：false——"
                                         "改用 cpu_checkpointing——或把 "
                                         "ds_activation_checkpointing 设为 false）",
    "validation.rule.main_ip": "{m} 台机器需要主机地址（当前：未设置；允许：每台机器都能访问的"
                               "主机名或 IP）",
    "validation.rule.main_port": "{m} 台机器需要固定端口（当前：0；允许：1024-65535）",
    "validation.rule.port_reserved": "1024 以下的端口是保留端口（当前：{got}；允许：0 或 "
                                     "1024-65535）",
    "validation.rule.rank_below": "必须小于 num_machines（当前：{got}；允许：0..{top}）",
    "validation.rule.process_per_machine": "每台机器至少一个进程（当前：{n}；允许：≥ {m}）",
    "validation.rule.split_evenly": "必须能平均分到 {m} 台机器上（当前：{n}；允许：{m} 的倍数）",
    "validation.rule.gpu_repeated": "GPU 编号重复（当前：{got}；允许：互不相同的编号）",
    "validation.rule.gpu_fewer": "GPU 数少于每台机器的进程数（当前：{got}，{n} 个进程；允许："
                                 "all 或至少 {n} 个编号）",
    "validation.rule.height_width_together": "固定尺寸需要同时设置高度和宽度（当前："
                                             "height={height}，width={width}；允许：都设置或"
                                             "都不设置）",
    "validation.rule.side_multiple": "`{model}` 的边长必须是 {mult} 的倍数（当前：{side}；"
                                     "允许：例如 {lo} 或 {hi}）",
    "validation.rule.colon_empty_before": "冒号前的模型 ID 为空（当前：{got}；允许：本地文件夹，"
                                          "或 model_id:folder/、model_id:glob，例如 "
                                          "{example}）",
    "validation.rule.colon_empty_after": "冒号后的文件夹或文件为空（当前：{got}；允许：本地"
                                         "文件夹，或 model_id:folder/、model_id:glob，例如 "
                                         "{example}）",
    "validation.rule.offload_needs_checkpointing": "需要打开 use_gradient_checkpointing（当前："
                                                   "true，但梯度检查点没开；允许：false，或打开"
                                                   "梯度检查点）",
    "validation.rule.no_model_source": "没有模型来源（当前：未设置；允许：model_id:glob 列表、"
                                       "本地路径或 model_paths）",
    "validation.rule.model_paths_json": "必须是路径的 JSON 列表（当前：{got}；允许：例如 "
                                        "[\"a.safetensors\", [\"shard1.safetensors\", "
                                        "\"shard2.safetensors\"]]）",
    "validation.rule.target_modules": "至少需要一个模块名（当前：{got}；允许：例如 "
                                      "to_q,to_k,to_v）",
    "validation.rule.other_family_source": "这是 {other} 的模型，不属于 {family}（当前：{got}；"
                                          "允许：{family} 的模型来源，例如 {example}，或把 "
                                          "model_family 设为 {other}）",
    "validation.rule.distilled": "{model:q} 是步数蒸馏模型：直接训练会让它学回普通的流匹配，"
                                 "少步采样的能力随之消失（当前：{got}；允许：改用 {base:q} "
                                 "训练，例如 {example}，再把训练出的 LoRA 用在 {model:q} 上；"
                                 "或把 preset_lora_path 设为去蒸馏适配器，只在训练时合并；"
                                 "或把 train_distilled 设为 true，明确要直接训练 {model:q}）",
    "validation.rule.max_steps_cap": "上限低于训练步数目标，会提前截断（当前：{got}，"
                                     "max_train_steps 为 {target}；允许：留空或 ≥ {target}）",
    "validation.rule.prune_needs_save_steps": "只会清理按步保存的检查点（当前：{got}，但没设置 "
                                              "save_steps；允许：与 save_steps 一起使用）",
    "validation.rule.resume_or_lora": "resume_from 和 lora_checkpoint 只能设置一个（当前：两个都"
                                      "设置了；允许：其中一个——保存的训练状态里已经包含 LoRA）",
    "validation.rule.trainable_unknown": "{family} 没有这个组件（当前：{got}；允许：{allowed}；"
                                         "它的组件：{components}）",
    "validation.rule.trainable_frozen": "{got} 保持冻结：它的输出在训练前就编码好了（当前："
                                        "{got}；允许：{allowed}，即全量微调训练的组件）",
    "validation.rule.full_with_lora": "与 trainable_models 同时设置了 LoRA 选项：全量微调不挂 "
                                      "LoRA（当前：`{got}`；允许：默认值 `{default}`，或清空 "
                                      "trainable_models 以训练 LoRA）",
    "validation.rule.full_frozen_base": "只适用于冻结的基础模型，而全量微调会训练基础模型（当前："
                                        "`{got}`；允许：与 trainable_models 一起时留空——ZeRO "
                                        "卸载能让全量微调放进小显卡）",
    "validation.rule.full_quantized": "{method} 量化的基础模型不能全量训练（当前：transformer "
                                      "已量化；允许：使用 trainable_models 时不量化 "
                                      "transformer）",
    "validation.rule.stage_order": "必须按 data_process、train、sample 的顺序且不重复（当前："
                                   "{got}；允许：{stages} 中按此顺序的子集）",
    "validation.rule.data_process_split": "data_process 只在 split_training 打开时运行（当前："
                                          "有 data_process，但 split_training 为 false；允许："
                                          "train、sample）",
    "validation.rule.dataset_required": "需要数据集文件夹（当前：''；允许：{what}）",
    "validation.rule.dataset_cache_folder": "data_process 写出的缓存文件夹",
    "validation.rule.dataset_existing_folder": "一个已存在的数据集文件夹",
    "validation.rule.sample_prompt": "采样阶段至少需要一个提示词（当前：{got}；允许：一个或多个"
                                     "非空提示词）",
    "validation.rule.scales_range": "强度必须在 {lo:g} 到 {hi:g} 之间（当前：{got}；允许：例如 "
                                    "0, 0.5, 1）",
    "validation.rule.frame_count": "必须是 {m}k+1（当前：{n}；允许：例如 {lo} 或 {hi}）",
    "validation.rule.frame_bucket_range": "每个帧数都必须在 {lo} 到 {hi} 之间（当前：{got}；"
                                          "允许：例如 17、33、81）",
    "validation.rule.frame_bucket_repeated": "每个帧数只能出现一次（当前：{got}；允许：互不相同的"
                                             "帧数，例如 17、33、81）",
    "validation.rule.window_stride_needs_slide": "设置了窗口步长，但没有使用滑动窗口（当前："
                                                 "{got}，frame_extraction 为 `{mode}`；允许："
                                                 "{default}，或 frame_extraction 设为 "
                                                 "`slide`）",
    "validation.rule.frame_sample_needs_uniform": "设置了窗口数，但没有使用均匀窗口（当前："
                                                  "{got}，frame_extraction 为 `{mode}`；允许："
                                                  "{default}，或 frame_extraction 设为 "
                                                  "`uniform`）",
    "validation.rule.windows_with_input": "无法从片段的 extra_inputs {inputs} 中截取窗口"
                                          "（当前：`{got}`；允许：`head`，或 extra_inputs "
                                          "不含 {inputs}）",
    "validation.rule.timestep_order": "必须小于 max_timestep_boundary（当前：{lo:g}，"
                                      "max_timestep_boundary 为 {hi:g}；允许：例如高噪声专家用 "
                                      "0 到 0.358，低噪声专家用 0.358 到 1）",
    "validation.rule.sample_every_needs_train": "在训练过程中渲染（当前：{got}，但没有 train "
                                                "阶段；允许：留空）",
    "validation.rule.customized_optimizer": "指定的优化器与 optimizer 不同（当前：{got} = "
                                            "{opt}，optimizer 为 {optimizer}；允许：只设其中"
                                            "一个，或两者指同一个优化器）",
    "validation.rule.offload_adamw_only": "开启优化器卸载时只能用 adamw（DeepSpeed 的 CPU "
                                          "Adam）（当前：{opt}，offload_optimizer_device 为 "
                                          "{device}；允许：adamw，或 offload_optimizer_device "
                                          "设为 none）",
    "validation.rule.cpu_offload_adamw_only": "开启 enable_optimizer_cpu_offload 时只能用 adamw"
                                              "（`torchao` 的 CPU 卸载 AdamW）（当前：{opt}，"
                                              "enable_optimizer_cpu_offload 为 true；允许："
                                              "adamw，或把 enable_optimizer_cpu_offload 设为 "
                                              "false）",
    "validation.rule.lokr_zero": "0 无法拆分任何维度（当前：0；允许：{allowed}）",
    "validation.rule.dropout_lokr": "只对 lora 和 dora 生效（当前：{got}，lora_type 为 lokr；"
                                    "允许：0）",
    "validation.rule.dora_zero3": "dora 需要读取每层完整的基础权重，而 ZeRO-3 会把它切分（当前："
                                  "dora，zero_stage 为 3；允许：lora | lokr，或 zero_stage "
                                  "0-2）",
    "validation.rule.validation_needs_samples": "需要留出的验证样本（当前：{got}，"
                                                "validation_samples 为 0；允许：留空，或 "
                                                "validation_samples ≥ 1）",
    "validation.rule.buckets_fixed_size": "固定的 height 和 width 会让所有图片都是同一尺寸（当前："
                                          "aspect_buckets 为 true，height={height}，"
                                          "width={width}；允许：false，或 height 和 width "
                                          "留空）",
    "validation.rule.mask_needs_masked_loss": "这是遮罩损失的选项，但没有开启 masked_loss"
                                              "（当前：`{got}`；可用：`{default}`，或开启 "
                                              "masked_loss）",
    "validation.rule.mask_no_source": "没有遮罩来源（当前：开启了 masked_loss，但未设 mask_path，"
                                      "alpha_mask 关闭，也没有 dataset_metadata_path；可用："
                                      "mask_path 中的遮罩文件夹、alpha_mask，或带 `mask` 列的"
                                      "元数据文件）",
    "validation.rule.ema_needs_decay": "这是 EMA 的选项，但没有启用 EMA（当前：{got}，ema_decay "
                                       "为空；允许：{default}，或设置 ema_decay）",
    "validation.rule.ema_start_after_end": "EMA 永远不会开始（当前：{got}，晚于本次运行的最后一步 "
                                           "{last}；允许：0 到 {last}）",
    "validation.rule.prior_needs_switch": "这是先验保持的选项，但没有开启先验保持（当前：{got}，"
                                          "prior_preservation 关闭；允许：`{default}`，或开启 "
                                          "prior_preservation）",
    "validation.rule.class_data_required": "先验保持需要一个类别数据集（当前：class_data_path 和 "
                                           "class_prompt 都未设置；允许：一个包含类别图片及其"
                                           "描述的文件夹，或一个供基础模型渲染类别图片的 "
                                           "class_prompt）",
    "validation.rule.class_count_needs_prompt": "这是要渲染的类别图片数量，但没有可供渲染的 "
                                                "class_prompt（当前：{got}；允许：`{default}`，"
                                                "或设置 class_prompt）",
    "validation.rule.class_data_missing": "找不到类别数据集文件夹（当前：{got}；允许：一个已存在的、"
                                          "包含类别图片及其描述的文件夹）",
    "validation.rule.dop_needs_switch": "这是 DOP 的选项，但没有开启差分输出保持（当前：{got}，"
                                        "diff_output_preservation 关闭；允许：`{default}`，或开启 "
                                        "diff_output_preservation）",
    "validation.rule.dop_needs_words": "DOP 会把每条描述中的 trigger_word 换成 dop_class，而"
                                       "此项为空（当前：空；允许：一个词或短语）",
    "validation.rule.preservation_split": "先验保持和 DOP 读取阶段 1 缓存的内容（类别样本、DOP "
                                          "描述）（当前：split_training 为 false；允许：true）",
    "validation.rule.slurm_needs_executor": "这是 `SLURM` 的选项，但本次运行不交给 `SLURM`（当前："
                                            "{got}，executor 为 `local`；允许：`{default}`，"
                                            "或 executor 设为 `slurm`）",
    "validation.rule.slurm_time_limit": "不是 `SLURM` 的时间格式（当前：{got}；允许：分钟数、"
                                        "`MM:SS`、`HH:MM:SS`、`D-HH`、`D-HH:MM` 或 "
                                        "`D-HH:MM:SS`）",
    "validation.rule.slurm_memory": "不是 `SLURM` 的容量格式（当前：{got}；允许：数字加 `K`、`M`、"
                                    "`G` 或 `T`，例如 `64G`）",
    "validation.rule.slurm_env_line": "不是 `NAME=value` 格式的行（当前：{got}；允许：由字母、数字和 "
                                      "`_` 组成的变量名，接着是 `=` 和它的值）",
    "validation.rule.slurm_setup_line": "每行一条命令（当前：有一行含有换行符或 `NUL` 字符；允许："
                                        "每条一行）",
    "validation.rule.wandb_name": "不是 `Weights & Biases` 接受的名称（当前：{got}；允许：1 到 128 "
                                  "个字符，不含 `/ \\ # ? % :`）",
    "validation.rule.swanlab_project": "不是 `SwanLab` 接受的项目名（当前：{got}；允许：1 到 100 "
                                       "个字母、数字和 `_ - + .`）",
    "validation.rule.swanlab_workspace": "不是 `SwanLab` 接受的工作区名（当前：{got}；允许：1 到 25 "
                                         "个字母、数字、`_` 和 `-`）",
    "validation.rule.tracker_offline": "`{tracker}` 在线模式需要网络，而本次运行从不联网（当前："
                                       "{field} 为 `online`，offline 为 true；允许：{field} 设为 "
                                       "`offline`，或 offline 设为 false）",
    "validation.rule.loraplus_lokr": "`LoRA+` 按 `lora_A` 的学习率设定 `lora_B` 的学习率，而 "
                                     "`LoKr` 两者都没有（当前：{got}，lora_type 为 lokr；允许："
                                     "留空，或 lora_type 设为 lora | dora）",
    "validation.rule.loraplus_prodigy": "prodigy 为所有参数组学习同一个步长，不接受学习率不同的"
                                        "参数组（当前：{got}，optimizer 为 prodigy；允许：留空，"
                                        "或 optimizer 设为 adamw | adamw8bit | adafactor）",
    # ------------------------------------------------------------ ConfigError
    "config.invalid": "运行配置有误：",
    "config.invalid_in": "运行配置有误（{source}）：",
    "config.sources_and": "{sources:join= 和 }",
    "config.from_source": "{problem}（来自 {source}）",
    "config.error": "{head}\n  {lines:join=\n  }",
    "config.source.command_line": "命令行",
    "config.source.preset_base": "预设所叠加的设置",
    "config.source.run_config": "运行配置",
    # ------------------------------------------------------------ files (files.py)
    "config.schema_version": "不支持的版本（当前：{got}；允许：1..{top}）",
    "config.file_not_found": "找不到文件（当前：{got}；允许：一个已存在的 YAML 文件）",
    "config.not_utf8": "不是 UTF-8 文本（第 {byte} 字节；允许：YAML 文件）",
    "config.cannot_read": "无法读取（{why:q}；允许：可读取的 YAML 文件）",
    "config.preset_empty": "文件为空（当前：没有选项；允许：schema_version 以及该预设改动的选项）",
    "config.top_level": "最外层必须是映射（当前：`{type}`）",
    "config.keys_option_names": "键必须是选项名（当前：{got}；允许：运行配置中的字段）",
    # ------------------------------------------------------------ presets (presets.py)
    "config.user_not_name": "不是有效的用户名（当前：{got}）",
    "config.preset.file_not_found": "找不到文件（当前：{got}；允许：一个已存在的预设文件或预设"
                                    "名称）",
    "config.preset.name_not_path": "应为预设名称，而不是路径（当前：{got}；允许：{names}）",
    "config.preset.no_such_name": "没有这个名称的预设（当前：{got}；允许：{names}）",
    "config.preset.none_yet": "还没有",
    "config.preset.reserved_to_admins": "在预设中只有管理员可以设置（当前：{got}；允许：默认值，"
                                        "或某个内置或共享预设中的值）",
    "config.preset.bad_name": "不是有效的预设名称（当前：{got}；允许：字母、数字、_ . -，最多 "
                              "80 个字符）",
    "config.preset.file_name": "应为预设名称，而不是文件名（当前：{got}；允许：{stem}，`.yaml` "
                               "会自动加上）",
    "config.preset.bundled_name": "已有同名的内置预设（当前：{got}；允许：换一个名称）",
    "config.preset.workspace_needed": "保存用户预设需要工作区（当前：未设置；允许：一个文件夹）",
    "config.preset.only_admins_share": "只有管理员可以共享预设（当前：true；允许：false）",
    # ------------------------------------------------------------ paths a user's run names
    "config.path.got": "当前：{got}",
    "config.path.got_link": "当前：{got}，是指向外部位置的链接",
    "config.path.empty": "留空",
    "config.path.own_folder": "{folder}/ 下的文件夹",
    "config.path.data_folders": "{own}、演示数据集（backend/assets/），或你某个运行的文件夹",
    "config.path.models_folders": "服务器模型文件夹或 backend/assets/ 内的路径",
    "config.path.runs": "你某个运行中的文件（工作区中的 runs/<run id>/）",
    "config.path.no_registry": "无（没有可查询的运行记录）",
    "config.path.outside_datasets": "不在你的数据集文件夹中（{got}；允许：{allowed}）",
    "config.path.too_many_files": "文件太多，无法检查（当前：超过 {n} 个；允许：最多 {n} 个）",
    "config.path.link_outside": "{rel} 是指向你的数据集文件夹之外的链接（当前：一个链接；允许："
                                "{allowed} 内的文件）",
    "config.path.row_outside": "{file} 第 {row} 行指向你的数据集文件夹之外的文件（{got}；允许："
                               "{allowed} 内的文件）",
    "config.path.local_outside_models": "本地路径不在模型文件夹中（{got}；允许：{allowed}，或 "
                                        "model_id:glob）",
    "config.path.dots_in_model_id": "model_id 中不允许 '..'、'~' 和绝对路径（当前：{got}；"
                                    "允许：模型文件夹内的 model_id:glob）",
    "config.path.dots_in_glob": "glob 中不允许 '..'、'~' 和绝对路径（当前：{got}；允许：模型"
                                "文件夹内的 model_id:glob）",
    "config.path.nul": "不允许（当前：含有空字符；允许：一个路径）",
    "config.path.model_paths_unreadable": "无法作为路径读取（当前：{why:q}；允许：文件的 JSON "
                                          "列表）",
    "config.path.set_by_plan": "由运行计划设置，用户不能设置（{got}；允许：{allowed}）",
    "config.path.admins_folder": "服务器文件夹，只有管理员可以设置（{got}；允许：{allowed}）",
    "config.path.mirror_admins": "下载镜像只有管理员可以设置（{got}；允许：留空）",
    "config.path.set_by_server": "由服务器设置，用户不能设置（{got}；允许：留空）",
    "config.path.not_models_dir": "不是服务器的模型文件夹（{got}；允许：服务器的模型文件夹"
                                  "（默认值）或 backend/assets/，或其中的某个文件夹）",
    "config.path.model_file_outside": "文件不在模型文件夹中（{got}；允许：{allowed}）",
    "config.path.not_in_runs": "不在你的任何一个运行中（{got}；允许：{allowed}）",
    "config.path.preset_lora_outside": "不在你的数据集文件夹或运行中（{got}；允许：{allowed}）",
    "config.path.sign_in": "请先登录（当前：没有用户；允许：已登录的用户）",
    "config.path.run_yaml_not_file": "不是运行 {run} 的普通文件（当前：链接或特殊文件；允许："
                                     "其运行计划写出的文件）",
    "config.path.run_yaml_unreadable": "无法读取（{what:q}；允许：其运行计划写出的文件）",
    "config.path.not_valid_yaml": "不是有效的 YAML",
    "config.path.run_yaml_not_mapping": "不是运行选项的映射（当前：`{type}`）",
    "config.path.run_link_outside": "运行 {run} 中的 {rel} 是指向其文件夹之外的链接（当前：一个"
                                    "链接；允许：该运行文件夹内的文件）",
    # ------------------------------------------------------------ quotas (quota.py)
    "config.quota.dataset_count": "你已有 {count} 个数据集文件夹（允许：最多 {limit} 个；请先删除"
                                  "一个）",
    "config.quota.dataset_bytes": "你的数据集文件夹已用满全部配额（允许：{limit}；请先删除一个"
                                  "数据集）",
    "config.quota.cache_bytes": "你的运行的 stage-1 缓存共占 {total}（允许：{limit}；请先删除"
                                "较早的运行）",
    # ------------------------------------------------------------ refusals (services.py)
    "config.refused.paths": "{n} 个路径不允许",
    "config.refused.run_name": "运行名称无效",
    "config.refused.stages": "{n} 个问题会被其阶段拒绝",
    "config.refused.sample_settings": "采样设置无效",
    "config.refused.caption": "无法为这个数据集写描述",
    "config.run_name_too_long": "太长（当前：{n} 个字符；允许：最多 {limit} 个，与 run_name "
                                "相同）",
    "config.set_by_plan": "由运行计划设置（当前：{got}；允许：不要设置——每个运行都写入工作区 "
                          "runs/ 下自己的文件夹）",
    # ------------------------------------------------------------ problems summary (form.py)
    "problems.none": "✓ 没有问题。",
    "problems.count": "✗ **{n} 个问题**——改好后才能开始：",
    "config.parse.too_many_aliases": "{what}：YAML 别名太多（当前：超过 {limit}；允许：最多 {limit}）",
    "config.parse.too_deep": "{what}：嵌套太深（当前：超过 {limit} 层；允许：最多 {limit} 层）",
    "config.parse.too_many_values": "{what}：展开 YAML 别名后的值太多（当前：超过 {limit}；"
                                    "允许：最多 {limit}）",
    "config.parse.too_many": "{what}：值太多（当前：超过 {limit}；允许：最多 {limit}）",
    "config.parse.too_large": "{what}：太大（当前：超过 {limit} 字节；允许：最多 {limit} 字节）",
    "config.parse.self_alias": "{what}：YAML 别名出现在它所指的值内部（当前：一个包含自身的值；"
                               "允许：指向之前已定义的值的别名）",
    "config.parse.not_yaml": "{what}：不是有效的 YAML（{detail:q}）",
    "config.parse.not_json": "{what}：不是有效的 JSON（{detail:q}）",
    "config.parse.unreadable_value": "{what}：有无法读取的值（{detail:q}）",
    "config.read.not_found": "找不到 {what}（当前：{got!r}）",
    "config.write.refused": "{what}：{why}（当前：{got!r}；允许：{allowed}）",
    "config.write.not_writable": "此处不可写",
    "config.write.dotdot": "路径中含有 '..'",
    "config.write.no_folder": "文件夹不存在",
    "config.write.link_on_way": "路径上有链接或非文件夹",
    "config.write.not_name": "不是文件名",
    "config.write.is_link": "是链接；从不通过链接写入",
    "config.write.not_regular": "不是普通文件",
    "config.write.exists": "已存在",
    "config.write.own_folders": "你自己文件夹里的文件",
    "config.write.regular_file": "普通文件",
    "extract.refused": "LoRA 提取被拒绝：\n  {lines:join=\n  }",
    "extract.not_folder": "不是文件夹（当前：{got}；允许：含 config.json 和 `safetensors` "
                          "权重的 transformer 文件夹）",
    "extract.no_config": "没有 config.json（当前：{got}；允许：`save_pretrained` 写出的 "
                         "transformer 文件夹）",
    "extract.no_weights": "没有 `safetensors` 权重（当前：{got}；允许："
                          "diffusion_pytorch_model.safetensors 或带索引的分片；不读取 "
                          "`pickle` 权重）",
    "extract.shard_missing": "索引中列出的分片缺失（当前：{got}）",
    "extract.rank_or_energy": "两者须且只须给一个（允许：--rank R 或 --energy F）",
    "extract.rank_low": "至少为 1（当前：{got}；允许：1 或更大）",
    "extract.energy_range": "不在 (0, 1] 内（当前：{got}；允许：大于 0 且不超过 1 的比例）",
    "extract.choice": "未知（当前：{got}；允许：{allowed}）",
    "extract.no_cuda": "此处没有 CUDA 设备（当前：{got}；允许：cpu）",
    "extract.out_suffix": "不是 .safetensors 文件（当前：{got}）",
    "extract.out_folder": "是文件夹（当前：{got}；允许：文件路径）",
    "extract.config_differs": "config.json 与 --base 的不同（键：{keys}）：架构不同（允许："
                              "同一模型的微调）",
    "extract.keys_differ": "张量与 --base 的不同（缺少：{missing}；多出：{extra}）：架构不同",
    "extract.shapes_differ": "张量形状与 --base 的不同（{tensors:join=; }）",
    "extract.nothing_changed": "没有张量与 --base 的不同（允许：微调过的模型）",
    "extract.no_linear_change": "没有 `Linear` 权重改变（另有 {n} 个张量改变；LoRA 只承载 "
                                "`Linear` 权重的改变）",
    "extract.family": "模型系列：{family}（{how}）",
    "extract.family_found": "从 --base 的配置识别",
    "extract.family_default": "无法从 --base 的配置识别，使用默认系列；可用 --model_family "
                              "指定",
    "extract.module": "{module}：秩 {rank}，保留其改变的 {kept}",
    "extract.summary": "{n} 个 `Linear` 模块：文件秩 {rank}（各模块保留的秩 {low}..{high}），"
                       "保留其改变的 {kept}；另有 {others} 个张量改变（占全部改变的 "
                       "{other_share}）；{unchanged} 个张量未变",
    "extract.other_dropped": "警告：{n} 个改变了的非 `Linear` 权重张量被舍去（--other "
                             "drop）；它们占全部改变的 {share}",
    "extract.other_beside": "{fmt} 格式无法承载 {n} 个改变了的非 `Linear` 权重张量（占全部"
                            "改变的 {share}）：它们的差值另写在旁边，{path}",
    "extract.other_unnamed": "警告：{n} 个改变了的张量在此系列中没有 ComfyUI 名称，已舍去（占"
                             "全部改变的 {share}）：{tensors}",
    "extract.written": "已写出：{path}",
    "extract.job.not_full": "不是这次运行的全量微调检查点（当前：{got}；允许：{allowed}）",
    "extract.job.rank_or_energy": "秩和能量占比只能设置一个（当前：都设置了或都没设置）",
    "extract.job.rank": "至少为 1（当前：{got}）",
    "extract.job.energy": "超出 (0, 1]（当前：{got}；允许：一个比例，例如 0.9）",
}
