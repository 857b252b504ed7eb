"""The page's two languages for what the server computes: every schema field's Chinese
label and help line, and how a message (``backend.core.messages.Msg``: a code and its
parameters, rendered from the English and the Chinese table) reaches the page.

``bilingual`` wraps a message as both languages in spans that the page's language switch
shows or hides (``LANG_CSS``), so text computed on the server follows the language the
browser picked without the server knowing it; anything that is not a message (a name, a
path, another program's own words) is shown as it is. ``refusal`` shows a list of problems.

``english_left`` is the rule of what counts as untranslated: words of two or more Latin
letters outside code spans and quotes that are not option names, file names, units or
product names (``ALLOWED_WORDS``) nor a field's choices. ``tests/test_i18n.py`` applies it
to everything the UI can show, and ``tests/test_messages.py`` to every Chinese template.
"""
from __future__ import annotations

import html
import re

from backend.core import rundir
from backend.core import messages
from backend.core.messages import Msg
from backend.config.schema import FIELDS

# Chinese labels and help lines of every schema field.
ZH_LABELS: dict[str, str] = {
    "run_name": "运行名称",
    "task": "任务",
    "output_path": "输出文件夹",
    "resume_from": "从此状态继续",
    "progress_file": "进度文件",
    "read_roots": "可读取的文件夹",
    "write_roots": "可写入的文件夹",
    "enable_tensorboard_log": "记录到 `TensorBoard`",
    "enable_wandb_log": "记录到 `Weights & Biases`",
    "wandb_project": "`W&B` 项目",
    "wandb_entity": "`W&B` 团队或用户",
    "wandb_run_name": "`W&B` 运行名称",
    "wandb_mode": "`W&B` 模式",
    "enable_swanlab_log": "记录到 `SwanLab`",
    "swanlab_project": "`SwanLab` 项目",
    "swanlab_workspace": "`SwanLab` 工作区",
    "swanlab_run_name": "`SwanLab` 实验名称",
    "swanlab_mode": "`SwanLab` 模式",
    "enable_csv_log": "把指标记录到 CSV",
    "model_family": "模型系列",
    "model_id_with_origin_paths": "模型来源",
    "model_paths": "本地权重文件",
    "tokenizer_path": "分词器",
    "download_source": "下载来源",
    "hub_endpoint": "镜像地址",
    "models_dir": "模型文件夹",
    "offline": "离线模式",
    "dataset_base_path": "数据集文件夹",
    "dataset_metadata_path": "元数据文件",
    "data_file_keys": "文件列",
    "trigger_word": "触发词",
    "max_pixels": "单张图片最大像素数",
    "height": "图片高度",
    "width": "图片宽度",
    "dataset_repeat": "数据集重复次数",
    "masked_loss": "遮罩损失",
    "mask_path": "遮罩文件夹",
    "alpha_mask": "用透明通道作遮罩",
    "mask_missing": "没有遮罩的图片",
    "dataset_num_workers": "数据加载进程数",
    "lora_base_model": "LoRA 加在",
    "lora_target_modules": "目标模块",
    "lora_rank": "LoRA 秩",
    "lora_checkpoint": "从已有 LoRA 开始",
    "preset_lora_path": "预先合并的 LoRA",
    "remove_prefix_in_ckpt": "去掉的键名前缀",
    "trainable_models": "全量训练（不用 LoRA）",
    "learning_rate": "学习率",
    "lr_warmup_steps": "预热步数",
    "weight_decay": "权重衰减",
    "num_epochs": "训练轮数",
    "max_train_steps": "训练步数",
    "max_steps": "步数上限",
    "gradient_accumulation_steps": "梯度累积步数",
    "save_steps": "每 N 步保存",
    "keep_last_n_checkpoints": "保留的检查点数",
    "seed": "随机种子",
    "use_gradient_checkpointing": "梯度检查点",
    "use_gradient_checkpointing_offload": "检查点放到 CPU",
    "find_unused_parameters": "查找未使用的参数",
    "initialize_model_on_cpu": "在 CPU 上构建模型",
    "train_distilled": "直接训练蒸馏模型",
    "mixed_precision": "混合精度",
    "num_processes": "进程数（GPU 数）",
    "gpu_ids": "使用的 GPU",
    "num_machines": "机器数",
    "machine_rank": "机器序号",
    "main_process_ip": "主机地址",
    "main_process_port": "主机端口",
    "zero_stage": "ZeRO 阶段",
    "offload_optimizer_device": "优化器卸载",
    "offload_param_device": "参数卸载",
    "offload_nvme_path": "NVMe 文件夹",
    "pin_memory": "锁页内存",
    "zero3_init_flag": "分片构建模型",
    "ds_activation_checkpointing": "DeepSpeed 激活检查点",
    "partition_activations": "激活分片",
    "cpu_checkpointing": "激活检查点放到 CPU",
    "contiguous_memory_optimization": "检查点连续内存",
    "overlap_comm": "通信重叠",
    "contiguous_gradients": "连续梯度",
    "sub_group_size": "子组大小",
    "reduce_bucket_size": "归约桶大小",
    "stage3_prefetch_bucket_size": "预取桶大小",
    "stage3_param_persistence_threshold": "常驻参数阈值",
    "stage3_max_live_parameters": "最大活跃参数数",
    "stage3_max_reuse_distance": "最大复用距离",
    "gradient_clipping": "梯度裁剪",
    "executor": "阶段在哪里运行",
    "slurm_partition": "`SLURM` 分区",
    "slurm_account": "`SLURM` 账户",
    "slurm_qos": "`SLURM` 服务质量（`QoS`）",
    "slurm_time_limit": "`SLURM` 时间上限",
    "slurm_constraint": "`SLURM` 节点特性",
    "slurm_gpus_per_node": "`SLURM` 每节点 GPU 数",
    "slurm_cpus_per_task": "`SLURM` 每节点 CPU 数",
    "slurm_mem_per_task": "`SLURM` 每节点内存",
    "slurm_setup_lines": "`SLURM` 准备命令",
    "slurm_nccl_env": "`SLURM` 的 `NCCL` 变量",
    "split_training": "拆分训练",
    "stages": "运行阶段",
    "data_process_offload": "阶段 1 显存节省",
    "sample_prompts": "样图提示词",
    "sample_negative_prompt": "负向提示词",
    "sample_seed": "样图种子",
    "sample_steps": "采样步数",
    "sample_cfg": "引导强度",
    "sample_height": "样图高度",
    "sample_width": "样图宽度",
    "sample_lora_scales": "LoRA 强度",
    "sample_every_n_steps": "每 N 步出样图",
    "sample_cpu_offload": "采样显存节省",
    "sample_vae_tiling": "VAE 分块解码",
    "sample_use_ema": "采样用 EMA 权重",
    "num_frames": "每段片段帧数",
    "frame_buckets": "帧数分桶",
    "max_timestep_boundary": "时间步上界",
    "min_timestep_boundary": "时间步下界",
    "frame_stride": "抽帧间隔",
    "video_fps": "片段抽帧帧率",
    "frame_extraction": "片段窗口",
    "frame_window_stride": "窗口步长",
    "frame_sample": "均匀窗口数",
    "sample_num_frames": "样片帧数",
    "sample_fps": "样片帧率",
    "extra_inputs": "额外模型输入",
    "audio_missing": "没有声音的视频",
    "zero_cond_t": "输入图片用时间步 0",
    "sample_images": "样图输入图片",
    "sample_videos": "样片参考片段",
    "enable_model_cpu_offload": "逐层卸载权重",
    "enable_optimizer_cpu_offload": "优化器状态放内存",
    "quant_options": "量化",
    "fp8_models": "FP8 模型",
    "offload_models": "留在内存中的模型",
    "lora_alpha": "LoRA 缩放系数 alpha",
    "lora_dropout": "LoRA 丢弃率",
    "lora_type": "适配器类型",
    "lokr_factor": "LoKr 分解因子",
    "loraplus_lr_ratio": "LoRA+ 学习率倍数（B / A）",
    "optimizer": "优化器",
    "customized_optimizer": "优化器类（参考训练器的名称）",
    "adam_beta1": "AdamW 一阶矩系数 beta1",
    "adam_beta2": "AdamW 二阶矩系数 beta2",
    "adam_epsilon": "AdamW 数值稳定项 ε",
    "adafactor_decay_rate": "Adafactor 衰减率",
    "adafactor_clip_threshold": "Adafactor 裁剪阈值",
    "prodigy_d_coef": "Prodigy 步长倍数",
    "prodigy_use_bias_correction": "Prodigy 偏差校正",
    "prodigy_safeguard_warmup": "Prodigy 预热保护",
    "lr_scheduler": "学习率调度",
    "lr_num_cycles": "调度重启次数",
    "lr_power": "调度幂次",
    "batch_size": "批大小",
    "aspect_buckets": "宽高比分桶",
    "bucket_remainder": "不满批的分桶",
    "timestep_sampling": "时间步采样",
    "logit_mean": "对数几率正态分布均值",
    "logit_std": "对数几率正态分布标准差",
    "timestep_shift": "时间步偏移",
    "caption_dropout": "描述丢弃率",
    "validation_samples": "验证样本数",
    "validation_every_n_steps": "每 N 步验证",
    "ema_decay": "EMA 衰减率",
    "ema_update_every": "EMA 每 N 步更新",
    "ema_start_step": "EMA 起始步",
    "ema_device": "EMA 存放位置",
    "prior_preservation": "先验保持（类别数据集）",
    "class_data_path": "类别数据集文件夹",
    "prior_loss_weight": "先验损失权重",
    "class_prompt": "类别提示词（渲染类别图片）",
    "num_class_images": "类别图片数量",
    "diff_output_preservation": "差分输出保持（DOP）",
    "dop_class": "DOP 类别词",
    "dop_weight": "DOP 权重",
    "caption_template": "描述指令",
    "caption_max_length": "描述长度（词元）",
    "caption_overwrite": "替换已有描述",
    "caption_batch_size": "描述批大小",
    "caption_target": "描述写入",
    "captioner_path": "描述模型文件夹",
    "caption_offload": "描述时的显存节省",
}

ZH_HELP: dict[str, str] = {
    "run_name": "本次运行在历史记录中的名称（可选）。",
    "task": "sft：每步都编码文本和图片；sft:data_process：阶段 1（缓存）；sft:train：阶段 2（用缓存训练）。由运行计划按阶段设置。",
    "output_path": "检查点写入的位置（阶段 1：缓存文件夹）。由运行计划按阶段设置。",
    "resume_from": "从这个已保存的训练状态文件夹（output/state）继续训练。",
    "progress_file": f"JSONL 格式的进度事件文件（默认：output_path/{rundir.PROGRESS}）。",
    "read_roots": "各阶段可以读取文件的文件夹（运行自己的文件夹除外）；由 Web 服务器为非管理员的登录用户设置，用户不能设置。留空：不限制（backend/core/readgate.py）。",
    "write_roots": "各阶段可以写入文件的文件夹（运行自己的文件夹除外）；由 Web 服务器为非管理员的登录用户设置，用户不能设置。留空：不限制（backend/core/writegate.py）。",
    "enable_tensorboard_log": "把训练指标和样本图记录到 `TensorBoard`（`tensorboard` 包），写在检查点旁边的一个文件夹里。",
    "enable_wandb_log": "把训练指标（损失、留出样本的损失、学习率、每步用时、GPU 显存）和样本图记录到 `Weights & Biases`（`wandb` 包）。它的密钥来自服务器环境变量 WANDB_API_KEY，从不来自文件。",
    "wandb_project": "`W&B`：运行记录到哪个项目。",
    "wandb_entity": "`W&B`：运行属于哪个团队或用户（留空：密钥的默认值）。",
    "wandb_run_name": "`W&B`：运行的名称（留空：用 run_name，再不然用运行文件夹的名称）。",
    "wandb_mode": "`W&B`：online 在训练时发送指标；offline 只把指标写在检查点旁边，之后用 `wandb sync` 上传（不需要网络）。",
    "enable_swanlab_log": "把训练指标和样本图记录到 `SwanLab`（`swanlab` 包）。它的密钥来自服务器环境变量 SWANLAB_API_KEY，从不来自文件。",
    "swanlab_project": "`SwanLab`：运行记录到哪个项目。",
    "swanlab_workspace": "`SwanLab`：运行属于哪个工作区（团队或用户）（留空：密钥自己的）。",
    "swanlab_run_name": "`SwanLab`：实验的名称（留空：用 run_name，再不然用运行文件夹的名称）。",
    "swanlab_mode": "`SwanLab`：online 在训练时发送指标；offline 只把指标写在检查点旁边，之后用 `swanlab sync` 上传（不需要网络）。",
    "enable_csv_log": "把指标写到检查点旁边的一个 CSV 文件：step、loss、val_loss、lr、step_time_s、gpu_memory_gib、gpu_memory_peak_gib（GPU 两列只在 CUDA 上有值），每个优化器步和每次验证各一行。",
    "model_family": "模型系列（即模型架构）。不填时，根据模型来源自动识别（已知的 model id，或其 config.json 中的 _class_name）。",
    "model_id_with_origin_paths": "逗号分隔的 model_id:glob，解析为 {models_dir}/{model_id}/{glob}（在最后一个冒号处拆分）；已存在的本地路径（文件、组件文件夹或整个 pipeline 文件夹）按路径使用。",
    "model_paths": "本地权重文件的 JSON 列表（某一项可以是分片文件的列表）；设置后代替 model_id_with_origin_paths。",
    "tokenizer_path": "分词器文件夹或 model_id:folder/（默认：文本编码器旁边的 tokenizer/ 文件夹，否则用该系列默认的分词器来源）。",
    "download_source": "缺少的模型文件从哪里下载。",
    "hub_endpoint": "下载来源的镜像地址。",
    "models_dir": "存放下载模型的文件夹，结构为 {models_dir}/{model_id}/{glob}（环境变量 ZEROLORA_MODELS_DIR 会替换默认值）。",
    "offline": "从不联网；缺少文件即报错。",
    "dataset_base_path": "数据集文件夹（阶段 2 中为缓存文件夹）。",
    "dataset_metadata_path": "metadata.csv/json/jsonl；留空：使用 dataset_base_path 中的图片 + 同名 .txt 描述（sft:train 时为缓存文件夹）。",
    "data_file_keys": "元数据中按文件读取的列。",
    "trigger_word": "加在每条描述前面的触发词（例如 'zlr style'）。",
    "max_pixels": "动态分辨率下每张图片的面积上限（高度/宽度留空时生效）。",
    "height": "固定高度（与宽度一起设置；留空：动态分辨率）。",
    "width": "固定宽度（与高度一起设置；留空：动态分辨率）。",
    "dataset_repeat": "每个 epoch 中数据集重复的次数。",
    "masked_loss": "按每张图片的遮罩逐个潜空间单元加权损失（灰度即权重：黑 0 … 白 1），由阶段 1 按潜空间分辨率缓存。图片的遮罩取以下第一个：mask_path 中的同名文件、元数据的 `mask` 列、图片自身的透明通道（alpha_mask）。",
    "mask_path": "与图片同名的遮罩文件夹（文件名相同，或主名相同、任意图片后缀）；视频片段的遮罩可以是一张图片（整个片段）或一段视频、一个帧文件夹（逐帧）。留空：使用元数据的 `mask` 列或透明通道。需要开启 masked_loss。",
    "alpha_mask": "用每张图片自身的透明通道作遮罩（同 sd-scripts 的 alpha_mask）；仅限图片。需要开启 masked_loss。",
    "mask_missing": "没有遮罩的图片：weight_one（整张图片都参与训练）或 refuse（在任何阶段之前指出并拒绝）。",
    "dataset_num_workers": "DataLoader 的工作进程数。",
    "lora_base_model": "加 LoRA 的组件。",
    "lora_target_modules": "逗号分隔的模块名（各系列的默认值与参考训练器一致）。",
    "lora_rank": "LoRA 的秩（alpha = 秩）。",
    "lora_checkpoint": "用这个文件初始化 LoRA。",
    "preset_lora_path": "训练前合并进模型权重的 LoRA（例如蒸馏模型的去蒸馏适配器）；它本身不参与训练，也不会出现在保存的 LoRA 中。",
    "remove_prefix_in_ckpt": "保存时从键名中去掉的前缀。",
    "trainable_models": "全量训练这个组件而不是训练 LoRA（参考训练器的参数；`dit`：即 `transformer`）。每个检查点就是整个组件，`diffusers` 格式（分片的 `safetensors` 文件加索引）。留空：训练 LoRA。",
    "learning_rate": "AdamW 学习率。",
    "lr_warmup_steps": "线性预热的步数。",
    "weight_decay": "AdamW 权重衰减。",
    "num_epochs": "训练轮数（epoch）；设置了 max_train_steps 时以它为准。",
    "max_train_steps": "精确训练这么多个优化步，覆盖 num_epochs（epoch 数由它推出：步数 / 每个 epoch 的步数，向上取整）。留空：由 num_epochs 决定。",
    "max_steps": "是上限而不是目标：如果 num_epochs 会跑得更久，到这么多个优化步就停止；它不会增加步数（要指定训练步数请用 max_train_steps）。留空：跑完所有 epoch。",
    "gradient_accumulation_steps": "每个优化步包含的微步数。",
    "save_steps": "每 N 步保存一次，最后再保存一次（留空：每个 epoch 保存）。",
    "keep_last_n_checkpoints": "只保留最近的这么多个按步保存的检查点，删除更早的。",
    "seed": "随机种子。",
    "use_gradient_checkpointing": "按块做梯度检查点（激活重计算），节省显存（使用 DeepSpeed 且开启 ds_activation_checkpointing 时，用 DeepSpeed 自己的检查点）。",
    "use_gradient_checkpointing_offload": "把检查点保存的激活放在 CPU 上（仅限 torch 检查点；使用 DeepSpeed 激活检查点时请用 cpu_checkpointing）。",
    "find_unused_parameters": "DDP：允许存在没有梯度的参数。",
    "initialize_model_on_cpu": "在 CPU 上构建模型（配合 ZeRO-3 使用）。",
    "train_distilled": "我知道这是步数蒸馏模型：仍然直接训练它（它的少步采样能力会逐渐失去）。关闭时：蒸馏模型只能在 preset_lora_path 设了去蒸馏适配器时训练；否则请训练它未蒸馏的模型，再把 LoRA 用在蒸馏模型上。",
    "mixed_precision": "混合精度（no：使用 float32）。",
    "num_processes": "所有机器上的进程（GPU）总数。",
    "gpu_ids": "本次运行使用的 GPU 编号，例如 0,1（或 all）。",
    "num_machines": "机器数量（每台机器上的运行文件夹路径必须相同，例如共享文件系统）。",
    "machine_rank": "本机的序号（0：主机；运行计划会给出其他机器要执行的命令）。",
    "main_process_ip": "主机地址（多于 1 台机器时必填）。",
    "main_process_port": "主机端口（0：自动选空闲端口，仅限单机）。",
    "zero_stage": "训练阶段使用的 DeepSpeed ZeRO 阶段（0：不用 DeepSpeed；阶段 1 缓存始终不用它）。",
    "offload_optimizer_device": "优化器状态放在哪里（ZeRO 1-3；nvme 仅限 ZeRO-3）。",
    "offload_param_device": "模型参数放在哪里（ZeRO-3）。",
    "offload_nvme_path": "卸载到 NVMe 时使用的文件夹。",
    "pin_memory": "为卸载使用锁页内存。",
    "zero3_init_flag": "以分片方式构建模型（ZeRO-3）。",
    "ds_activation_checkpointing": "使用 DeepSpeed 且开启梯度检查点时：写入 activation_checkpointing 配置块（使用 DeepSpeed 的检查点）。",
    "partition_activations": "把检查点保存的激活分片到各进程。",
    "cpu_checkpointing": "把 DeepSpeed 检查点保存的激活放在 CPU 上。",
    "contiguous_memory_optimization": "检查点使用连续的缓冲区。",
    "overlap_comm": "通信与计算重叠。",
    "contiguous_gradients": "梯度使用连续的缓冲区。",
    "sub_group_size": "ZeRO-3 子组大小。",
    "reduce_bucket_size": "梯度归约桶大小。",
    "stage3_prefetch_bucket_size": "ZeRO-3 参数预取桶大小。",
    "stage3_param_persistence_threshold": "ZeRO-3 常驻参数阈值（小于它的参数不分片）。",
    "stage3_max_live_parameters": "ZeRO-3 同时保留在显存中的最大参数数。",
    "stage3_max_reuse_distance": "ZeRO-3 参数复用距离。",
    "gradient_clipping": "梯度范数裁剪（留空：不用 DeepSpeed 时不裁剪；用 DeepSpeed 时为 'auto'，accelerate 会设为 1.0）。",
    "executor": "各阶段在哪里运行：`local`，本服务器自己的队列和 GPU；`slurm`，作为 `SLURM` 集群上的一个 `sbatch` 作业（每个阶段一个 `srun` 步骤；运行文件夹必须在各节点共享的存储上）。",
    "slurm_partition": "`SLURM`：分区（留空：服务器的 `--slurm-partition`，否则为集群的默认分区）。",
    "slurm_account": "`SLURM`：作业计费的账户（留空：你的默认账户）。",
    "slurm_qos": "`SLURM`：服务质量（`QoS`；留空：默认）。",
    "slurm_time_limit": "`SLURM`：作业的时间上限：分钟数、`HH:MM:SS` 或 `D-HH:MM:SS`（留空：分区的默认值）。到达上限时训练会保存状态。",
    "slurm_constraint": "`SLURM`：节点必须具备的特性，例如 `a100&ib`（留空：任意节点）。",
    "slurm_gpus_per_node": "`SLURM`：每个节点的 GPU 数（0：各阶段在 CPU 上运行；请设为每台机器的进程数，即 num_processes / num_machines）。",
    "slurm_cpus_per_task": "`SLURM`：每个节点的 CPU 数（每个节点一个任务；留空：分区的默认值）。",
    "slurm_mem_per_task": "`SLURM`：每个节点的主机内存（每个节点一个任务），例如 `256G`（留空：分区的默认值）。",
    "slurm_setup_lines": "`SLURM`：作业在各阶段之前执行的命令行（加载模块、激活环境），每行一条。",
    "slurm_nccl_env": "`SLURM`：作业的 `NCCL` 变量，每行一个 `NAME=value`（例如 `NCCL_SOCKET_IFNAME=ib0`）。",
    "split_training": "先缓存文本/VAE 的输出（阶段 1），再只训练 Transformer（阶段 2）。",
    "stages": "要运行的阶段，按顺序。",
    "data_process_offload": "阶段 1（data_process）的显存用法。none：文本编码器和 VAE 同时放在 GPU 上；model：一次只放一个——先用文本编码器编码所有提示词，然后把它移回内存，再用 VAE 编码所有图片；sequential：权重留在内存中，一次只把一个模块送到 GPU（显存最省，速度较慢）。各模式得到的缓存完全相同；显存估算会给出所选模型在每种模式下的数值。",
    "sample_prompts": "测试提示词（每行一个）。",
    "sample_negative_prompt": "负向提示词。",
    "sample_seed": "所有样图使用的种子。",
    "sample_steps": "去噪步数。",
    "sample_cfg": "无分类器引导（CFG）强度。",
    "sample_height": "样图高度。",
    "sample_width": "样图宽度。",
    "sample_lora_scales": "LoRA 强度（0 = 基础模型），每个都在 -4 到 4 之间。",
    "sample_every_n_steps": "训练中每 N 步渲染一次样图。",
    "sample_cpu_offload": "采样阶段的显存用法。none：整个 pipeline 放在 GPU 上；model：一次一个组件（diffusers 的模型级 CPU 卸载；Transformer 仍整个上 GPU）；sequential：权重从内存中一次一个模块流式送到 GPU（diffusers 的逐模块 CPU 卸载；慢很多，显存最省，配合 sample_vae_tiling 更省）。显存估算会给出所选模型在每种模式下的数值。旧配置中的 true / false 分别表示 model / none。",
    "sample_vae_tiling": "把样图分成相互重叠的小块解码，VAE 解码器的显存不再随图片尺寸增长。接缝会融合；像素与不分块解码略有差别。",
    "sample_use_ema": "样图用哪份权重（训练中的样图、采样阶段、结果网格）：raw 训练得到的权重；ema 改用每个检查点的 EMA 副本（`step-N-ema`）；both 把 EMA 副本作为单独一列放在每个检查点旁边。ema 和 both 需要 ema_decay。",
    "num_frames": "视频系列：每个训练片段的帧数（k*m+1，m 为该系列 VAE 在第一帧之后每组的帧数，例如 4k+1 或 8k+1；1 表示按单帧训练）。图片视作只有一帧的片段。",
    "frame_buckets": "视频系列：片段训练时可用的帧数，取代 `num_frames`（每个都与 `num_frames` 一样为 k*m+1，例如 17、33、81）：每个片段按 `frame_stride` 或 `video_fps` 取能填满的最大帧数，同一批次只含帧数和尺寸都相同的片段。比最小帧数还短的片段会被拒绝，并指出所在行。留空：使用 `num_frames`。",
    "frame_stride": "视频系列：每隔 N 帧取一帧（1：每帧都取）。",
    "max_timestep_boundary": "视频系列：只在调度器时间步中低于此比例的部分训练，从噪声最大处数起（参考训练器的参数；1：到末尾）。双专家模型每次训练一个专家、各用自己的范围：高噪声专家（transformer）从 0 开始，低噪声专家（transformer_2）到 1 为止。",
    "min_timestep_boundary": "视频系列：只在调度器时间步中从此比例起的部分训练，从噪声最大处数起（参考训练器的参数；0：从头开始）。",
    "video_fps": "视频系列：按片段自身的时间以这个帧率取帧，代替 frame_stride（留空：用 frame_stride）。",
    "frame_extraction": "视频系列：片段中哪些窗口参与训练，每个窗口按片段的训练帧数（`num_frames` 或其帧数分桶）成为一个样本：`head`（只取开头一个）、`chunk`（首尾相接、互不重叠的窗口）、`slide`（每隔 `frame_window_stride` 个源帧开始一个窗口）或 `uniform`（`frame_sample` 个窗口均匀分布在整个片段上）。图片为一个样本。",
    "frame_window_stride": "视频系列：`frame_extraction` 为 `slide` 时，相邻两个窗口起点之间相隔的源帧数。",
    "frame_sample": "视频系列：`frame_extraction` 为 `uniform` 时，每个片段取的窗口数。",
    "sample_num_frames": "视频系列：样片的帧数（与 `num_frames` 一样为 k*m+1）。",
    "sample_fps": "视频系列：样片每秒的帧数。",
    "extra_inputs": "除图片和提示词之外传给模型的元数据列：编辑模型用 edit_image（每行一个路径或路径列表：输入图片；image 列是目标图片）；图生视频模型用 input_image（每段视频的第一帧作为条件）；音视频模型用 input_audio（每段视频的声音与画面一起训练：该行的 input_audio 文件，否则视频自带的音频流）；IC-LoRA 用 in_context_videos（每行的参考视频，其潜变量作为干净的条件词元接在视频之后；in_context_downsample_factor：该行参考视频的缩小倍数；frame_rate：视频帧率，即 video_fps）。多个用逗号分隔（例如 input_image,input_audio）。留空：文生图。",
    "audio_missing": "音视频模型（extra_inputs 为 input_audio）：没有声音的视频（既没有 input_audio 文件，也没有自带音频流）：error（在任何阶段之前指出并拒绝）或 silence（以静音训练）。",
    "zero_cond_t": "编辑模型：输入图片的 token 在 Transformer 的调制中使用时间步 0（模型配置里已开启时总会使用；这里强制开启）。",
    "sample_images": "编辑模型和图生视频模型：每条测试提示词的输入图片，每行对应一条提示词，顺序与 sample_prompts 相同；一条提示词的多张图片用 | 分隔。留空：每条提示词依次取数据集一行的输入图片（图生视频的行取其视频的第一帧），第 1 行对应第 1 条提示词，依此类推。",
    "sample_videos": "IC-LoRA（extra_inputs 为 in_context_videos）：每条测试提示词的参考片段（视频、帧文件夹或图像），每行对应一条提示词，顺序与 sample_prompts 相同；按本次运行的取帧设置（video_fps 或 frame_stride）以样片尺寸读取，视频须够 sample_num_frames 帧（图像是一帧的参考）。留空：每条提示词取描述与它相同的数据集行的参考视频，没有则取第一行的。",
    "enable_model_cpu_offload": "不用 DeepSpeed 的逐层卸载（单 GPU）：冻结的权重留在锁页内存中，每个模块在运行前才复制到 GPU（与下一个模块的复制重叠），用完即丢弃。不用 DeepSpeed 时显存最省；每一步权重都要经总线传输两次。",
    "enable_optimizer_cpu_offload": "不用 DeepSpeed，把优化器的状态（及其更新计算）放在内存中（单 GPU）。",
    "quant_options": "量化冻结的模型：条目格式为 <model_id>:<glob>:<method>[/<不量化的模块>]，用 ';' 分隔；方法可选 `bitsandbytes_nf4` | `bitsandbytes_fp4` | `bitsandbytes_int8` | `torchao_int8` | `torchao_fp8`（参考训练器的 `torchao_int8_w8a16` 和 `torchao_fp8_w8a16` 即这两种 `torchao` 方法；glob 的文件夹名指明组件：transformer、text_encoder、vae）。LoRA 本身以全精度训练和保存。",
    "fp8_models": "以 FP8 权重保存的模型（<model_id>:<glob> 列表，用 ',' 或 ';' 分隔），等同于 quant_options 中用 `torchao_fp8`。",
    "offload_models": "两次使用之间留在内存中的模型（逗号分隔的 <model_id>:<glob>）：一体训练时，文本编码器和 VAE 只在编码时才移到 GPU。分阶段训练不需要（每个阶段只加载自己用到的模型）。",
    "lora_alpha": "LoRA alpha；更新量按 `alpha / lora_rank` 缩放（留空：`alpha = lora_rank`，缩放为 1，与参考训练器相同）。导出格式能记录 alpha 时写入 alpha，不能时折算进权重。",
    "lora_dropout": "训练时随机丢弃 LoRA 分支输入的比例（lora 和 dora）。",
    "lora_type": "lora：低秩 A·B；dora：每个输出带一个可学习幅值的 LoRA（权重分解）；lokr：克罗内克积（`LyCORIS` 的 `LoKr`；ComfyUI 和 `peft` 能加载，diffusers 的加载器只认 LoRA 的键名）。全部通过 `peft` 实现。",
    "lokr_factor": "`LoKr`：拆分每个维度的克罗内克因子（-1：按该维度尽量均衡地拆分）。",
    "loraplus_lr_ratio": "`LoRA+`：`lora_B`（以及 dora 的幅值向量）的学习率是 learning_rate 的这么多倍，`lora_A` 用 learning_rate（留空：关闭；`LoRA+` 论文建议 16，同时把 learning_rate 调低一些）。适用于 adamw（包括卸载时）、adamw8bit 和 adafactor；不适用于 prodigy（它为所有参数只学习一个步长）。只用于 lora 和 dora。",
    "optimizer": "adamw：torch 的 AdamW（开启优化器卸载时用 DeepSpeed 的 CPU Adam）；adamw8bit：`bitsandbytes` 的 8 位 AdamW；adafactor：`transformers` 的 `Adafactor`，使用给定的学习率；prodigy：`prodigyopt` 包（自动学习步长：learning_rate 请设为 1.0）。只有 adamw 能配合优化器卸载。",
    "customized_optimizer": "参考训练器中以点分路径写的优化器类，会映射到 optimizer（只接受这几个名称；不会按路径导入任何东西）。",
    "adam_beta1": "AdamW 的 beta1。",
    "adam_beta2": "AdamW 的 beta2。",
    "adam_epsilon": "AdamW 的数值稳定项 ε（防止除以零）。",
    "adafactor_decay_rate": "`Adafactor`：二阶矩的衰减率（`transformers` 的 `decay_rate`）。",
    "adafactor_clip_threshold": "`Adafactor`：更新量的裁剪阈值。",
    "prodigy_d_coef": "`Prodigy`：学到的步长的倍数（`d_coef`）。",
    "prodigy_use_bias_correction": "`Prodigy`：使用 Adam 的偏差校正。",
    "prodigy_safeguard_warmup": "`Prodigy`：预热期间不让步长估计增大。",
    "lr_scheduler": "在 lr_warmup_steps 的线性预热之后的学习率调度（diffusers 的 `get_scheduler`）：constant 恒定；linear 线性衰减到 0；cosine 余弦衰减到 0；cosine_with_restarts 带重启的余弦（lr_num_cycles）；polynomial 多项式衰减（lr_power）。",
    "lr_num_cycles": "cosine_with_restarts：重启次数。",
    "lr_power": "polynomial：衰减的幂次。",
    "batch_size": "每个 GPU 上每批的图片数（微批）；每一批都取自同一个尺寸分桶。DeepSpeed 的 `train_batch_size` 由此推出：batch_size × gradient_accumulation_steps × 进程数。",
    "aspect_buckets": "把每张图片缩放到一组固定宽高比分桶中最接近的一个（按 max_pixels 的像素预算），而不是按自身尺寸取整到倍数，这样批次能填满。",
    "bucket_remainder": "某个分桶的图片填不满最后一批时：pad 用同一分桶的图片重复补齐；drop 在该轮中丢弃这些图片。",
    "timestep_sampling": "每一步噪声强度的抽取方式：reference（该系列自己的调度，与参考训练器相同）；uniform（在训练用的噪声强度 σ 上均匀抽取）；logit_normal（`SD3` 的方式，参数为 logit_mean / logit_std）；shifted（均匀抽取后按 timestep_shift 向高噪声偏移）。",
    "logit_mean": "logit_normal：均值。",
    "logit_std": "logit_normal：标准差。",
    "timestep_shift": "shifted：`sigma = s·u / (1 + (s - 1)·u)`。",
    "caption_dropout": "某一步用空描述代替图片自身描述来训练的概率（让模型保留无条件预测）。",
    "validation_samples": "把数据集最后 N 个样本留出、不参与训练，在固定的噪声和时间步上记录它们的损失，与训练损失并列显示（0：不留出）。",
    "validation_every_n_steps": "每 N 个优化器步计算一次验证损失（留空：每个检查点时计算），另外在第一步之前和最后一步之后各算一次。",
    "ema_decay": "训练权重（LoRA 的权重，或全量微调的全部权重）的指数移动平均（EMA）：每次更新 ema = 衰减率 × ema + (1 - 衰减率) × 当前权重。每个检查点旁边另存一份 EMA 副本（`step-N-ema`），恢复训练的状态中也保存它。留空：不用 EMA；例如 0.999（越接近 1，记得越久）。",
    "ema_update_every": "EMA：每 N 个优化器步更新一次（需要 ema_decay）。",
    "ema_start_step": "EMA：从第几个优化器步开始，开始时复制当时的权重（0：第一步之前的权重），之后每 ema_update_every 步更新一次（需要 ema_decay）。",
    "ema_device": "EMA：它的 float32 副本放在哪里（每个训练参数 4 字节）：gpu 放在训练设备上；cpu 放在内存中（显存小时使用；每次更新把权重复制过去）。需要 ema_decay。",
    "prior_preservation": "先验保持：一个类别数据集（该类别的正则化图片及其描述，不含触发词），由阶段 1 与训练集一起缓存；每一步再加上 prior_loss_weight × 一个类别样本的损失。",
    "class_data_path": "先验保持：类别数据集文件夹（图片与同名 `.txt` 描述，或其中的 `metadata.csv`）。",
    "prior_loss_weight": "先验保持：类别样本损失的权重（0：只缓存，不参与训练）。",
    "class_prompt": "先验保持：基础模型据此提示词渲染类别图片（不加 `LoRA`，使用采样设置），在阶段 1 之前由单独的阶段渲染到运行文件夹的 `classes/` 中（绝不写入 class_data_path），每张图片以该提示词为描述：渲染 class_data_path 比 num_class_images 少的那些张，没有 class_data_path 时全部渲染。",
    "num_class_images": "先验保持：类别集合至少包含的图片数；class_data_path 中缺少的由 class_prompt 渲染（第 k 张的种子为 sample_seed + k，重新运行时只渲染还没有的图片）。需要 class_prompt。",
    "diff_output_preservation": "差分输出保持（来自 `ai-toolkit`）：每一步把 `LoRA` 对「把 trigger_word 换成 dop_class 的描述」的预测，在相同的加噪潜变量上拉向基础模型（关闭 `LoRA`）的预测，权重为 dop_weight。这些描述由阶段 1 编码；仅用于 `LoRA`。",
    "dop_class": "DOP：替换每条描述中 trigger_word 的类别词（例如 `woman`、`painting`）。",
    "dop_weight": "DOP：保持损失的权重（`LoRA` 预测与基础模型预测之间的均方误差）。",
    "caption_template": "对每张图片向描述模型提出的要求（与图片一起给出的指令）。",
    "caption_max_length": "描述的最大长度，按描述模型的词元计（生成到此为止）。",
    "caption_overwrite": "替换已有的描述（关闭：已有描述的图片保留原描述并跳过）。",
    "caption_batch_size": "一次生成中一起描述的图片数（越多：大显卡上越快，占用显存越多）。",
    "caption_target": "描述写到哪里：txt（每张图片一个同名 .txt）或 metadata（dataset_metadata_path 中的描述列）。",
    "captioner_path": "用来写描述的本地 Qwen2.5-VL 或 Qwen3-VL 模型文件夹（留空：用模型来源中该系列自己的文本编码器及其图像处理器）。",
    "caption_offload": "写描述时的 GPU 显存。none：整个描述模型放在 GPU 上；sequential：权重留在内存中，逐个模块送到 GPU（显存最少，较慢）。描述显存估算给出每种方式的数字。",
}

# Names that are not words to translate: products, libraries, units, formats, option values
# a user types as they are.
ALLOWED_WORDS = frozenset("""
ZeroLoRA LoRA ZeRO DeepSpeed DDP AdamW Adam accelerate launch diffusers ComfyUI Gradio gradio
GPU GPUs CPU RAM VAE NVMe nvme GB MB KB TB GiB MiB CUDA cuda JSON YAML CSV URL IP
HF_TOKEN ModelScope modelscope huggingface Hugging Face Transformer transformer JSONL
bf16 fp16 fp32 float32 torch cfg sft dit none cpu true false all no auto
reference comfyui zip id ids ID API KiB TiB TSV png txt csv json jsonl yaml glob alpha CFG http https
token tokens vae epoch pipeline DataLoader Web
LoKr Adafactor Prodigy
EMA DOP
""".split())
# Option values that read as English words: allowed only where they stand as values (in
# code spans, quotes, after "=" or between "|").


def _strip_allowed(text: str) -> str:
    text = re.sub(r"`[^`]*`", " ", text)
    text = re.sub(r"'[^'\n]*'|\"[^\"\n]*\"", " ", text)
    text = re.sub(r"<[^>]+>", " ", text)
    text = re.sub(r"\S*[\d_./:\\{}\[\]@=-]\S*", " ", text)  # names, paths, numbers, ids
    return text


def _choice_words() -> frozenset[str]:
    """Every field's choices (the values a user picks as they are, e.g. sequential)."""
    from backend.config.meta import field_meta
    return frozenset(str(c) for n in FIELDS for c in field_meta(n).get("choices", ()))


_CHOICES: list[frozenset[str]] = []


def english_left(text: str) -> list[str]:
    """Words of ``text`` that read as untranslated English (see the module docstring)."""
    if not _CHOICES:
        _CHOICES.append(_choice_words())
    words = re.findall(r"[A-Za-z][A-Za-z']+", _strip_allowed(str(text)))
    return [w for w in words if w not in ALLOWED_WORDS and w not in FIELDS
            and w not in _CHOICES[0]]


def bilingual(text) -> str:
    """One line of Markdown as both languages (the page shows one): a message rendered from
    each table; anything else (a name, a path, another program's words) as it is."""
    if not isinstance(text, Msg):
        return str(text)
    en, zh = text.text("en"), text.text("zh")
    if zh == en:
        return en
    return f'<span class="zl-en">{en}</span><span class="zl-zh">{zh}</span>'


def said(error: BaseException) -> list:
    """What an error says, as messages where it has them: its problems, else its headline
    or message, else its text."""
    for attr in ("problems", "headline", "message"):
        found = getattr(error, attr, None)
        if found:
            return list(found) if isinstance(found, (list, tuple)) else [found]
    return [messages.said(error)]


def refusal(what) -> str:
    """A refusal on the page: "✗ " and each problem in both languages, one per line
    (``what``: a list of problems, one problem, or the error that carries them)."""
    items = said(what) if isinstance(what, BaseException) else \
        list(what) if isinstance(what, (list, tuple)) else [what]
    return "✗ " + "  \n".join(bilingual(p) for p in items)


def bilingual_plain(text) -> str:
    """Plain text (a table cell) as HTML with both languages (a message), or escaped as it
    is."""
    if not isinstance(text, Msg):
        return html.escape(str(text))
    en, zh = html.escape(text.text("en")), html.escape(text.text("zh"))
    if zh == en:
        return en
    return f'<span class="zl-en">{en}</span><span class="zl-zh">{zh}</span>'


# The page shows one language: the language switch sets data-zl-lang on <html>.
LANG_CSS = """
html:not([data-zl-lang="zh"]) .zl-zh {display: none !important;}
html[data-zl-lang="zh"] .zl-en {display: none !important;}
"""
