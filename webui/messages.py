"""Chinese for text the backend computes: validation problems, the memory estimate, status
words and messages, and every schema field's label and help line.

The backend writes English (the CLI, the logs and ``run.yaml`` read it as it is). Every shape
of sentence it can emit has one entry in ``RULES``: an English pattern and its Chinese,
applied as substitutions over the text, so a sentence built from several parts (a verdict, its
stages, its hints) is translated part by part. ``translate`` returns the Chinese, or None
when English words would remain; ``bilingual`` wraps a line as both languages in spans that
the page's language switch shows or hides (``LANG_CSS``), so text computed on the server
follows the language the browser picked without the server knowing it.

``english_left`` is the rule of what counts as untranslated: words of two or more Latin
letters outside code spans and quotes that are not option names, file names, units or
product names (``ALLOWED_WORDS``) nor a field's choices. ``tests/test_i18n.py`` applies it to everything the UI
can show.
"""
from __future__ import annotations

import html
import re
from typing import Callable

from backend.core import rundir
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
    "dataset_num_workers": "数据加载进程数",
    "lora_base_model": "LoRA 加在",
    "lora_target_modules": "目标模块",
    "lora_rank": "LoRA 秩",
    "lora_checkpoint": "从已有 LoRA 开始",
    "preset_lora_path": "预先合并的 LoRA",
    "remove_prefix_in_ckpt": "去掉的键名前缀",
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
    "num_frames": "每段片段帧数",
    "max_timestep_boundary": "时间步上界",
    "min_timestep_boundary": "时间步下界",
    "frame_stride": "抽帧间隔",
    "video_fps": "片段抽帧帧率",
    "sample_num_frames": "样片帧数",
    "sample_fps": "样片帧率",
    "extra_inputs": "额外模型输入",
    "zero_cond_t": "输入图片用时间步 0",
    "sample_images": "样图输入图片",
    "enable_model_cpu_offload": "逐层卸载权重",
    "enable_optimizer_cpu_offload": "优化器状态放内存",
    "quant_options": "量化",
    "fp8_models": "FP8 模型",
    "offload_models": "留在内存中的模型",
    "lora_alpha": "LoRA 缩放系数 alpha",
    "lora_dropout": "LoRA 丢弃率",
    "lora_type": "适配器类型",
    "lokr_factor": "LoKr 分解因子",
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
    "dataset_num_workers": "DataLoader 的工作进程数。",
    "lora_base_model": "加 LoRA 的组件。",
    "lora_target_modules": "逗号分隔的模块名（各系列的默认值与参考训练器一致）。",
    "lora_rank": "LoRA 的秩（alpha = 秩）。",
    "lora_checkpoint": "用这个文件初始化 LoRA。",
    "preset_lora_path": "训练前合并进模型权重的 LoRA（例如蒸馏模型的去蒸馏适配器）；它本身不参与训练，也不会出现在保存的 LoRA 中。",
    "remove_prefix_in_ckpt": "保存时从键名中去掉的前缀。",
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
    "num_frames": "视频系列：每个训练片段的帧数（4k+1：VAE 在第一帧之后每 4 帧一组；1 表示按单帧训练）。图片视作只有一帧的片段。",
    "frame_stride": "视频系列：每隔 N 帧取一帧（1：每帧都取）。",
    "max_timestep_boundary": "视频系列：只在调度器时间步中低于此比例的部分训练，从噪声最大处数起（参考训练器的参数；1：到末尾）。双专家模型每次训练一个专家、各用自己的范围：高噪声专家（transformer）从 0 开始，低噪声专家（transformer_2）到 1 为止。",
    "min_timestep_boundary": "视频系列：只在调度器时间步中从此比例起的部分训练，从噪声最大处数起（参考训练器的参数；0：从头开始）。",
    "video_fps": "视频系列：按片段自身的时间以这个帧率取帧，代替 frame_stride（留空：用 frame_stride）。",
    "sample_num_frames": "视频系列：样片的帧数（4k+1）。",
    "sample_fps": "视频系列：样片每秒的帧数。",
    "extra_inputs": "除图片和提示词之外传给模型的元数据列：编辑模型用 edit_image（每行一个路径或路径列表：输入图片；image 列是目标图片）；图生视频模型用 input_image（每段视频的第一帧作为条件）。留空：文生图。",
    "zero_cond_t": "编辑模型：输入图片的 token 在 Transformer 的调制中使用时间步 0（模型配置里已开启时总会使用；这里强制开启）。",
    "sample_images": "编辑模型和图生视频模型：每条测试提示词的输入图片，每行对应一条提示词，顺序与 sample_prompts 相同；一条提示词的多张图片用 | 分隔。留空：每条提示词依次取数据集一行的输入图片（图生视频的行取其视频的第一帧），第 1 行对应第 1 条提示词，依此类推。",
    "enable_model_cpu_offload": "不用 DeepSpeed 的逐层卸载（单 GPU）：冻结的权重留在锁页内存中，每个模块在运行前才复制到 GPU（与下一个模块的复制重叠），用完即丢弃。不用 DeepSpeed 时显存最省；每一步权重都要经总线传输两次。",
    "enable_optimizer_cpu_offload": "不用 DeepSpeed，把优化器的状态（及其更新计算）放在内存中（单 GPU）。",
    "quant_options": "量化冻结的模型：条目格式为 <model_id>:<glob>:<method>[/<不量化的模块>]，用 ';' 分隔；方法可选 `bitsandbytes_nf4` | `bitsandbytes_fp4` | `bitsandbytes_int8` | `torchao_int8` | `torchao_fp8`（参考训练器的 `torchao_int8_w8a16` 和 `torchao_fp8_w8a16` 即这两种 `torchao` 方法；glob 的文件夹名指明组件：transformer、text_encoder、vae）。LoRA 本身以全精度训练和保存。",
    "fp8_models": "以 FP8 权重保存的模型（<model_id>:<glob> 列表，用 ',' 或 ';' 分隔），等同于 quant_options 中用 `torchao_fp8`。",
    "offload_models": "两次使用之间留在内存中的模型（逗号分隔的 <model_id>:<glob>）：一体训练时，文本编码器和 VAE 只在编码时才移到 GPU。分阶段训练不需要（每个阶段只加载自己用到的模型）。",
    "lora_alpha": "LoRA alpha；更新量按 `alpha / lora_rank` 缩放（留空：`alpha = lora_rank`，缩放为 1，与参考训练器相同）。导出格式能记录 alpha 时写入 alpha，不能时折算进权重。",
    "lora_dropout": "训练时随机丢弃 LoRA 分支输入的比例（lora 和 dora）。",
    "lora_type": "lora：低秩 A·B；dora：每个输出带一个可学习幅值的 LoRA（权重分解）；lokr：克罗内克积（`LyCORIS` 的 `LoKr`；ComfyUI 和 `peft` 能加载，diffusers 的加载器只认 LoRA 的键名）。全部通过 `peft` 实现。",
    "lokr_factor": "`LoKr`：拆分每个维度的克罗内克因子（-1：按该维度尽量均衡地拆分）。",
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


Rule = tuple[re.Pattern, "str | Callable[[re.Match], str]"]
_RULES_SRC: list[tuple[str, str]] = []


def rule(pattern: str, zh: str) -> None:
    _RULES_SRC.append((pattern, zh))


def exact_rules(table: dict[str, str]) -> None:
    """A rule for each whole line of ``table`` (English: Chinese)."""
    for en, zh in table.items():
        rule("^" + re.escape(en) + "$", zh)


# ------------------------------------------------------------------ statuses and small words
STATUS_ZH = {"queued": "排队中", "running": "运行中", "succeeded": "已完成", "failed": "失败",
             "stopped": "已停止", "skipped": "已跳过", "stopping": "正在停止"}
STAGE_ZH = {"data_process": "data_process（缓存）", "train": "train（训练）",
            "sample": "sample（采样）"}
HISTORY_HEADERS_ZH = {"run id": "运行 ID", "name": "名称", "status": "状态", "stages": "阶段",
                      "created": "创建时间", "time": "用时", "note": "备注", "stage": "阶段",
                      "steps": "步数", "exit code": "退出码", "method": "方法",
                      "host RAM": "内存", "bus per step": "每步总线传输", "fits": "放得下"}

# ------------------------------------------------------------------ run notes and failures
# The history's note column and a run's failure line: a stage's exit status, then its error
# line. An error line no rule knows is another program's own words: quoted, as it is.
def _quoted(text: str) -> str:
    zh = translate(text)
    return zh if zh is not None else '"' + text.replace('"', "'") + '"'


# Each way a stage can end (``backend.jobs.diagnosis.exit_code_text``) and its Chinese.
_EXIT_ZH = [(r"exited with code (\d+) \(a launcher's way of saying: killed by signal (\d+) "
             r"\((\w+)\)\)", r"以退出码 \1 结束（启动器以此表示：被信号 \2（\3）终止）"),
            (r"exited with code (\d+)", r"以退出码 \1 结束"),
            (r"was killed by signal (\d+) \((\w+)\)", r"被信号 \1（\2）终止"),
            (r"exited normally \(code 0\)", "正常结束（退出码 0）"),
            (r"has no exit code \(its process was lost\)", "没有退出码（进程已丢失）")]


def _stage_line_zh(m: re.Match) -> str:
    how = next(re.sub(en, zh, m["how"]) for en, zh in _EXIT_ZH if re.fullmatch(en, m["how"]))
    return f"阶段 '{m['s']}' {how}" + (f"：{_quoted(m['why'].rstrip('.'))}" if m["why"] else "")


rule(r"^[Ss]tage '(?P<s>\w+)' (?P<how>" + "|".join(en for en, _ in _EXIT_ZH) +
     r")(?:: (?P<why>.+?))?\.?$", _stage_line_zh)
rule(r"^stage '(?P<s>\w+)' could not start: (?P<why>.+)$",
     lambda m: f"阶段 '{m['s']}' 无法启动：{_quoted(m['why'])}")
rule(r"^stage '(?P<s>\w+)' did not exit within (?P<g>\S+) s of SIGTERM and was (?P<rest>.+)$",
     lambda m: f"阶段 '{m['s']}' 在 SIGTERM 后 {m['g']} 秒内没有退出，已被强制结束")
rule(r"^stopped on request before it started$", "按请求停止（尚未开始）")
rule(r"^(?P<a>stopped(?: on request)?); (?P<b>.+)$",
     lambda m: f"{translate(m['a'])}；{_quoted(m['b'])}")
rule(r"^stopped on request$", "按请求停止")
rule(r"^Dataset problems:\s*", "数据集问题：")
rule(r"(?P<f>\S+): cannot read image (?P=f): (?P<why>.+)$",
     lambda m: f"{m['f']}：无法读取该图像（{_quoted(m['why'])}）")
rule(r"^Failure: (?P<why>.+)$", lambda m: f"失败原因：{_quoted(m['why'])}")
DIAGNOSIS_ZH = {
    "The GPU ran out of memory (CUDA out of memory)": "GPU 显存不足（CUDA out of memory）",
    "The stage ran out of host memory (RAM)": "该阶段内存（RAM）不足",
    "Killed by signal 9 (SIGKILL) from outside the run": "被运行之外的信号 9（SIGKILL）终止",
    "The disk is full": "磁盘已满",
    "A file passed the largest file size this process may write (ulimit -f)":
        "文件超过了该进程可写入的最大文件大小（ulimit -f）",
    "Model files are missing or unreadable": "模型文件缺失或无法读取",
    "The captioning model's files are missing or unreadable": "打标模型的文件缺失或无法读取",
    "The DeepSpeed configuration was rejected": "DeepSpeed 配置被拒绝",
    "The GPU was not found or the GPU selection is wrong": "找不到 GPU，或所选 GPU 有误",
    "The distributed port is already in use": "分布式通信端口已被占用",
    "A DeepSpeed extension failed to compile": "DeepSpeed 扩展编译失败",
}
exact_rules(DIAGNOSIS_ZH)

# ------------------------------------------------------------------ validation: one field
# "field: <pydantic message>[ at item N] (got X; allowed Y)"
rule(r"input should be greater than or equal to (?P<n>\S+)", r"应大于或等于 \g<n>")
rule(r"input should be less than or equal to (?P<n>\S+)", r"应小于或等于 \g<n>")
rule(r"input should be greater than (?P<n>\S+)", r"应大于 \g<n>")
rule(r"input should be less than (?P<n>\S+)", r"应小于 \g<n>")
rule(r"input should be a multiple of (?P<n>\S+)", r"应为 \g<n> 的倍数")
rule(r"input should be a valid integer, unable to parse string as an integer",
     "应为整数，无法把这段文字解析成整数")
rule(r"input should be a valid integer, got a number with a fractional part",
     "应为整数，不能带小数部分")
rule(r"input should be a valid integer", "应为整数")
rule(r"input should be a valid number, unable to parse string as a number",
     "应为数字，无法把这段文字解析成数字")
rule(r"input should be a valid number", "应为数字")
rule(r"input should be a valid boolean, unable to interpret input",
     "应为布尔值，无法识别这个输入")
rule(r"input should be a valid boolean", "应为布尔值")
rule(r"input should be a valid string", "应为文本")
rule(r"input should be a valid list", "应为列表")
rule(r"input should be (?P<v>'[^']*'(?:, '[^']*')*) or (?P<w>'[^']*')",
     r"应为 \g<v> 或 \g<w> 之一")
rule(r"input should be (?P<v>'[^']*')", r"应为 \g<v>")
rule(r"string should have at most (?P<n>\d+) characters?", r"文字最多 \g<n> 个字符")
rule(r"string should have at least (?P<n>\d+) characters?", r"文字至少 \g<n> 个字符")
rule(r"string should match pattern (?P<p>'[^']*')", r"格式应符合 \g<p>")
rule(r"list should have at least (?P<n>\d+) items? after validation, not (?P<m>\d+)",
     r"列表至少要有 \g<n> 项，当前为 \g<m> 项")
rule(r"value error, not a registered model family", "不是已注册的模型系列")
rule(r"not in the expected form", "格式不对")
rule(r" at item (?P<n>\d+)", r"（第 \g<n> 项）")
rule(r"unknown option \(got (?P<g>.*?); allowed: the fields of the run schema; did you mean "
     r"(?P<s>\S+)\?\)", r"未知选项（当前：\g<g>；允许：运行配置中的字段；是不是想写 \g<s>？）")
rule(r"unknown option \(got (?P<g>.*?); allowed: the fields of the run schema\)",
     r"未知选项（当前：\g<g>；允许：运行配置中的字段）")
rule(r"unknown option \(got (?P<g>.*?); allowed: see --help; did you mean (?P<s>\S+)\?\)",
     r"未知选项（当前：\g<g>；允许：见 --help；是不是想写 \g<s>？）")
rule(r"unknown option \(got (?P<g>.*?); allowed: see --help\)",
     r"未知选项（当前：\g<g>；允许：见 --help）")
rule(r"secrets are never stored in run configs \(got a value; allowed: set HF_TOKEN or "
     r"MODELSCOPE_API_TOKEN in the environment\)",
     "运行配置从不保存密钥（当前：填了一个值；允许：在环境变量中设置 HF_TOKEN 或 "
     "MODELSCOPE_API_TOKEN）")
rule(r"not a number \(got (?P<g>.*?); allowed comma-separated numbers, e\.g\. 0, 0\.5, 1\)",
     r"不是数字（当前：\g<g>；允许：逗号分隔的数字，例如 0, 0.5, 1）")
# ------------------------------------------------------------------ validation: low VRAM, options, video
rule(r"each entry is <model_id>:<glob>:<method>\[/<modules left unquantized>\] \(got (?P<g>.*?); "
     r"allowed methods (?P<a>[\w |]+)\)",
     r"每个条目的格式为 <model_id>:<glob>:<method>[/<不量化的模块>]（当前：\g<g>；允许的方法：\g<a>）")
rule(r"each entry is <model_id>:<glob> or a model name \(got (?P<g>.*?); allowed e\.g\. "
     r"(?P<e>\S+), or (?P<a>[\w |]+)\)",
     r"每个条目的格式为 <model_id>:<glob> 或模型名称（当前：\g<g>；允许：例如 \g<e>，或 \g<a>）")
rule(r"needs held-out samples \(got (?P<g>\S+) with validation_samples 0; allowed empty, or "
     r"validation_samples ≥ 1\)",
     r"需要留出的验证样本（当前：\g<g>，validation_samples 为 0；允许：留空，或 validation_samples ≥ 1）")
rule(r"names another optimizer than optimizer \(got (?P<g>.*?) with optimizer (?P<o>\S+); allowed "
     r"one of the two, or both naming the same\)",
     r"指定的优化器与 optimizer 不同（当前：\g<g>，optimizer 为 \g<o>；允许：只设其中一个，或两者指同一个优化器）")
rule(r"with optimizer offload only adamw runs \(DeepSpeed's CPU Adam\) \(got (?P<g>\S+) with "
     r"offload_optimizer_device (?P<d>\S+); allowed adamw, or offload_optimizer_device none\)",
     r"开启优化器卸载时只能用 adamw（DeepSpeed 的 CPU Adam）（当前：\g<g>，offload_optimizer_device 为 "
     r"\g<d>；允许：adamw，或 offload_optimizer_device 设为 none）")
rule(r"applies to lora and dora \(got (?P<g>\S+) with lora_type (?P<t>\S+); allowed 0\)",
     r"只对 lora 和 dora 生效（当前：\g<g>，lora_type 为 \g<t>；允许：0）")
rule(r"dora reads each layer's whole base weight, which ZeRO-3 partitions \(got dora with "
     r"zero_stage (?P<z>\S+); allowed lora \| lokr, or zero_stage 0-2\)",
     r"dora 需要读取每层完整的基础权重，而 ZeRO-3 会把它切分（当前：dora，zero_stage 为 \g<z>；"
     r"允许：lora | lokr，或 zero_stage 0-2）")
rule(r"a fixed height and width make one size for every image \(got aspect_buckets true with "
     r"height=(?P<h>\S+), width=(?P<w>\S+); allowed false, or empty height and width\)",
     r"固定的 height 和 width 会让所有图片都是同一尺寸（当前：aspect_buckets 为 true，height=\g<h>，"
     r"width=\g<w>；允许：false，或 height 和 width 留空）")
rule(r"must be 4k\+1 \(got (?P<g>\S+); allowed e\.g\. (?P<a>\S+) or (?P<b>\S+)\)",
     r"必须是 4k+1（当前：\g<g>；允许：例如 \g<a> 或 \g<b>）")
rule(r"a quantized base cannot be partitioned by ZeRO-3 \(got (?P<g>\S+) with zero_stage 3; "
     r"allowed zero_stage 0-2, or enable_model_cpu_offload for the memory ZeRO-3 offload saves\)",
     r"量化后的基础模型不能被 ZeRO-3 切分（当前：\g<g>，zero_stage 为 3；允许：zero_stage 0-2，"
     r"或用 enable_model_cpu_offload 省下 ZeRO-3 卸载所省的显存）")
rule(r"torchao's quantized tensors are not streamed block by block \(got true with a torchao "
     r"method for the transformer from (?P<f>\S+); allowed a bitsandbytes method, or no layer "
     r"offload\)",
     r"`torchao` 量化后的张量不能逐模块流式传输（当前：true，且 \g<f> 给 Transformer 用了 `torchao` "
     r"方法；允许：改用 `bitsandbytes` 方法，或不逐层卸载）")
rule(r"DoRA needs the base weights in full precision for its norms \(got (?P<g>\S+) with DoRA; "
     r"allowed plain LoRA, or no quantization\)",
     r"`DoRA` 计算范数需要全精度的基础权重（当前：\g<g>，并用了 `DoRA`；允许：普通 LoRA，或不量化）")
rule(r"8-bit optimizers run on the GPU only \(got optimizer (?P<o>\S+); allowed optimizer "
     r"adamw, or enable_optimizer_cpu_offload false\)",
     r"8 位优化器只能在 GPU 上运行（当前：optimizer 为 \g<o>；允许：optimizer 为 adamw，"
     r"或把 enable_optimizer_cpu_offload 设为 false）")
rule(r"layer-wise offload runs without DeepSpeed \(got true with zero_stage (?P<z>\S+); allowed "
     r"zero_stage 0, or DeepSpeed's own (?P<o>\w+)\)",
     r"逐层卸载在不用 DeepSpeed 时才能运行（当前：true，zero_stage 为 \g<z>；允许：zero_stage 0，"
     r"或改用 DeepSpeed 自己的 \g<o>）")
rule(r"layer-wise offload runs on one GPU \(got true with num_processes (?P<n>\S+); allowed "
     r"num_processes 1\)",
     r"逐层卸载只能在单个 GPU 上运行（当前：true，num_processes 为 \g<n>；允许：num_processes 1）")
rule(r"enable_optimizer_cpu_offload steps adamw only \(torchao's CPU-offload AdamW\) \(got "
     r"(?P<g>\S+) with enable_optimizer_cpu_offload true; allowed adamw, or "
     r"enable_optimizer_cpu_offload false\)",
     r"开启 enable_optimizer_cpu_offload 时只能用 adamw（`torchao` 的 CPU 卸载 AdamW）（当前：\g<g>，"
     r"enable_optimizer_cpu_offload 为 true；允许：adamw，或把 enable_optimizer_cpu_offload 设为 false）")
rule(r"0 splits no dimension \(got 0; allowed -1 \(as balanced as the dimension allows\) or a "
     r"factor from 1 to 1024\)",
     r"0 无法拆分任何维度（当前：0；允许：-1（按维度尽量均衡地拆分），或 1 到 1024 之间的因子）")
rule(r"-1 \(as balanced as the dimension allows\) or a factor from 1 to 1024",
     r"-1（按维度尽量均衡地拆分），或 1 到 1024 之间的因子")
rule(r"0 splits no dimension \(got 0; allowed (?P<a>.+)\)",
     r"0 无法拆分任何维度（当前：0；允许：\g<a>）")
rule(r"must be below max_timestep_boundary \(got (?P<lo>\S+) with max_timestep_boundary "
     r"(?P<hi>\S+); allowed e\.g\. 0 to 0\.358 for a high-noise expert, 0\.358 to 1 for a "
     r"low-noise one\)",
     r"必须小于 max_timestep_boundary（当前：\g<lo>，max_timestep_boundary 为 \g<hi>；允许：例如"
     r"高噪声专家用 0 到 0.358，低噪声专家用 0.358 到 1）")
rule(r"(?P<m>.+?) needs sides that are multiples of (?P<k>\d+) \(got (?P<g>\S+); allowed e\.g\. "
     r"(?P<a>\S+) or (?P<b>\S+)\)",
     r"\g<m> 的边长必须是 \g<k> 的倍数（当前：\g<g>；允许：例如 \g<a> 或 \g<b>）")
rule(r"(?P<s>the model id before|the folder or files after) the colon is empty \(got (?P<g>.*?); "
     r"allowed a local folder, or model_id:folder/ or model_id:glob, e\.g\. (?P<e>\S+)\)",
     lambda m: f"冒号{'前的 model id' if 'before' in m['s'] else '后的文件夹或文件'}为空（当前："
               f"{m['g']}；允许：本地文件夹，或 model_id:folder/、model_id:glob，例如 {m['e']}）")
NOT_RUN_ZH = {
    "NVFP4 weights need a Blackwell GPU's FP4 kernels, which ZeroLoRA does not use":
        "NVFP4 权重需要 `Blackwell` GPU 的 FP4 内核，ZeroLoRA 不使用它们",
    "the comfy-kitchen backend is not part of ZeroLoRA": "comfy-kitchen 后端不在 ZeroLoRA 之中",
}
rule(r"(?P<m>\S+) does not run here: (?P<w>.*?) \(got (?P<g>.*?); allowed (?P<a>[\w |]+)\)",
     lambda m: f"{m['m']} 在这里不能运行：{NOT_RUN_ZH.get(m['w'], m['w'])}（当前：{m['g']}；"
               f"允许：{m['a']}）")
rule(r"a preset name, not a file name \(got (?P<g>.*?); allowed (?P<a>'[^']*'): the \.yaml is "
     r"added\)", r"应为预设名称，而不是文件名（当前：\g<g>；允许：\g<a>，`.yaml` 会自动加上）")
# ------------------------------------------------------------------ validation: rules between fields
rule(r"parameter offload needs ZeRO-3 \(got (?P<g>\S+) with zero_stage (?P<z>\S+); allowed "
     r"none unless zero_stage is 3\)",
     r"参数卸载需要 ZeRO-3（当前：\g<g>，zero_stage 为 \g<z>；允许：zero_stage 为 3 时才可卸载，"
     r"否则为 `none`）")
rule(r"optimizer offload needs DeepSpeed \(got (?P<g>\S+) with zero_stage 0; allowed none "
     r"unless zero_stage is 1-3\)",
     r"优化器卸载需要 DeepSpeed（当前：\g<g>，zero_stage 为 0；允许：zero_stage 为 1-3 时才可卸载，"
     r"否则为 `none`）")
rule(r"nvme offload needs ZeRO-3 \(got 'nvme' with zero_stage (?P<z>\S+); allowed none \| cpu\)",
     r"卸载到 NVMe 需要 ZeRO-3（当前：'nvme'，zero_stage 为 \g<z>；允许：none | cpu）")
rule(r"nvme offload needs a folder \(got None; allowed a writable folder on an NVMe drive\)",
     "卸载到 NVMe 需要一个文件夹（当前：未设置；允许：NVMe 硬盘上可写的文件夹）")
rule(r"applies to DeepSpeed activation checkpointing only \(got true with zero_stage (?P<z>\S+), "
     r"use_gradient_checkpointing (?P<u>\S+), ds_activation_checkpointing (?P<d>\S+); allowed "
     r"false, or zero_stage ≥ 1 with both checkpointing options on\)",
     r"只对 DeepSpeed 激活检查点生效（当前：true，zero_stage 为 \g<z>，use_gradient_checkpointing "
     r"为 \g<u>，ds_activation_checkpointing 为 \g<d>；允许：false，或 zero_stage ≥ 1 且两个检查点选项都打开）")
rule(r"DeepSpeed activation checkpointing replaces torch checkpointing here \(got true with "
     r"zero_stage (?P<z>\S+) and ds_activation_checkpointing true; allowed false -- use "
     r"cpu_checkpointing -- or ds_activation_checkpointing false\)",
     r"这里由 DeepSpeed 激活检查点代替 torch 检查点（当前：true，zero_stage 为 \g<z>，"
     r"ds_activation_checkpointing 为 true；允许：false——改用 cpu_checkpointing——或把 "
     r"ds_activation_checkpointing 设为 false）")
rule(r"(?P<m>\S+) machines need the main machine's address \(got None; allowed a host name or "
     r"IP reachable from every machine\)",
     r"\g<m> 台机器需要主机地址（当前：未设置；允许：每台机器都能访问的主机名或 IP）")
rule(r"(?P<m>\S+) machines need a fixed port \(got 0; allowed 1024-65535\)",
     r"\g<m> 台机器需要固定端口（当前：0；允许：1024-65535）")
rule(r"ports below 1024 are reserved \(got (?P<g>\S+); allowed 0 or 1024-65535\)",
     r"1024 以下的端口是保留端口（当前：\g<g>；允许：0 或 1024-65535）")
rule(r"must be below num_machines \(got (?P<g>\S+); allowed 0\.\.(?P<n>\S+)\)",
     r"必须小于 num_machines（当前：\g<g>；允许：0..\g<n>）")
rule(r"at least one process per machine \(got (?P<g>\S+); allowed ≥ (?P<n>\S+)\)",
     r"每台机器至少一个进程（当前：\g<g>；允许：≥ \g<n>）")
rule(r"must split evenly over (?P<m>\S+) machines \(got (?P<g>\S+); allowed a multiple of "
     r"(?P<n>\S+)\)",
     r"必须能平均分到 \g<m> 台机器上（当前：\g<g>；允许：\g<n> 的倍数）")
rule(r"repeated GPU \(got (?P<g>.+?); allowed distinct ids\)",
     r"GPU 编号重复（当前：\g<g>；允许：互不相同的编号）")
rule(r"fewer GPUs than processes per machine \(got (?P<g>.+?) for (?P<n>\S+) process\(es\); "
     r"allowed all or ≥ (?P<k>\S+) ids\)",
     r"GPU 数少于每台机器的进程数（当前：\g<g>，\g<n> 个进程；允许：all 或至少 \g<k> 个编号）")
rule(r"set height and width together for a fixed size \(got height=(?P<h>\S+), "
     r"width=(?P<w>\S+); allowed both or neither\)",
     r"固定尺寸需要同时设置高度和宽度（当前：height=\g<h>，width=\g<w>；允许：都设置或都不设置）")
rule(r"needs use_gradient_checkpointing \(got true with checkpointing off; allowed false, or "
     r"turn checkpointing on\)",
     "需要打开 use_gradient_checkpointing（当前：true，但梯度检查点没开；允许：false，或打开梯度检查点）")
rule(r"no model source \(got None; allowed model_id:glob list, a local path, or model_paths\)",
     "没有模型来源（当前：未设置；允许：model_id:glob 列表、本地路径或 model_paths）")
rule(r"must be a JSON list of paths \(got (?P<g>.*?); allowed e\.g\. (?P<e>\[.*\])\)",
     r"必须是路径的 JSON 列表（当前：\g<g>；允许：例如 \g<e>）")
rule(r"at least one module name \(got (?P<g>.*?); allowed e\.g\. to_q,to_k,to_v\)",
     r"至少需要一个模块名（当前：\g<g>；允许：例如 to_q,to_k,to_v）")
rule(r"a cap below the step target cuts it short \(got (?P<a>\S+) with max_train_steps "
     r"(?P<b>\S+); allowed empty or ≥ (?P<c>\S+)\)",
     r"上限低于训练步数目标，会提前截断（当前：\g<a>，max_train_steps 为 \g<b>；允许：留空或 ≥ \g<c>）")
rule(r"only step checkpoints are pruned \(got (?P<g>\S+) without save_steps; allowed with "
     r"save_steps\)",
     r"只会清理按步保存的检查点（当前：\g<g>，但没设置 save_steps；允许：与 save_steps 一起使用）")
rule(r"set either resume_from or lora_checkpoint \(got both; allowed one: a saved state "
     r"already holds the LoRA\)",
     "resume_from 和 lora_checkpoint 只能设置一个（当前：两个都设置了；允许：其中一个——保存的训练状态里已经包含 LoRA）")
rule(r"must be in order data_process, train, sample without repeats \(got (?P<g>.*?); allowed "
     r"a subset of (?P<a>.*?) in that order\)",
     r"必须按 data_process、train、sample 的顺序且不重复（当前：\g<g>；允许：\g<a> 中按此顺序的子集）")
rule(r"data_process runs only with split_training \(got data_process with split_training "
     r"false; allowed train, sample\)",
     "data_process 只在 split_training 打开时运行（当前：有 data_process，但 split_training 为 false；"
     "允许：train、sample）")
rule(r"a dataset folder is required \(got ''; allowed the cache folder written by data_process\)",
     "需要数据集文件夹（当前：''；允许：data_process 写出的缓存文件夹）")
rule(r"a dataset folder is required \(got ''; allowed an existing dataset folder\)",
     "需要数据集文件夹（当前：''；允许：一个已存在的数据集文件夹）")
rule(r"the sample stage needs at least one prompt \(got (?P<g>.*?); allowed one or more "
     r"non-empty prompts\)",
     r"采样阶段至少需要一个提示词（当前：\g<g>；允许：一个或多个非空提示词）")
rule(r"scales must lie between (?P<lo>\S+) and (?P<hi>\S+) \(got (?P<g>.*?); allowed e\.g\. "
     r"0, 0\.5, 1\)",
     r"强度必须在 \g<lo> 到 \g<hi> 之间（当前：\g<g>；允许：例如 0, 0.5, 1）")
rule(r"renders during training \(got (?P<g>\S+) without the train stage; allowed empty\)",
     r"在训练过程中渲染（当前：\g<g>，但没有 train 阶段；允许：留空）")
# the allowed part of a one-field problem (backend.config.validation._allowed)
rule(r"all or comma-separated GPU numbers like 0,1", "all，或逗号分隔的 GPU 编号，如 0,1")
rule(r"an http\(s\) URL", "http(s) 网址")
rule(r"at least (?P<n>\d+) item\(s\)", r"至少 \g<n> 项")
rule(r"at most (?P<n>\d+) characters", r"最多 \g<n> 个字符")
rule(r"non-empty text", "非空文字")
rule(r"a multiple of (?P<n>\d+)", r"\g<n> 的倍数")
rule(r"a list of (?P<v>[^;)]+?)(?= or empty|\)|;|$)", r"由 \g<v> 组成的列表")
rule(r"(?P<a>[≥>] \S+) and (?P<b>≤ \S+)", r"\g<a> 且 \g<b>")
rule(r"\ban integer\b", "整数")
rule(r"\ba number\b", "数字")
rule(r"(?<=allowed )text\b", "文字")
rule(r" or empty\)", "，或留空)")

# the generic tail of a one-field problem, after its parts above
rule(r"\s*\(got (?P<g>.*); allowed (?P<a>[^;]*)\)$", r"（当前：\g<g>；允许：\g<a>）")
rule(r"，或留空\)", "，或留空）")

# ------------------------------------------------------------------ problems summary
rule(r"^✓ No problems\.$", "✓ 没有问题。")
rule(r"^✗ \*\*(?P<n>\d+) problem\(s\)\*\* — fix them before starting:$",
     r"✗ **\g<n> 个问题**——改好后才能开始：")
rule(r"^Invalid run config(?P<w> in \S+)?:$", r"运行配置有误\g<w>：")
rule(r"(?<=运行配置有误) in (?P<w>\S+)", r"（\g<w>）")

# ------------------------------------------------------------------ memory estimate
rule(r"^\*\*Memory estimate\*\* for this machine \((?P<w>.*)\):$", r"**显存估算**（本机：\g<w>）：")
rule(r"^\*\*Memory estimate\*\* unavailable: (?P<e>.*)$", r"**显存估算**暂不可用：\g<e>")
rule(r"(?P<n>\d+) GPU\(s\), (?P<g>\S+) GB each", r"\g<n> 块 GPU，每块 \g<g> GB")
rule(r"no GPU \(CPU run\)", "没有 GPU，在 CPU 上运行")
rule(r", (?P<g>\S+) GB RAM(?=[)）])", r"，内存 \g<g> GB")
rule(r"^Recommended preset here: \*\*(?P<p>\S+)\*\*$", r"本机推荐的预设：**\g<p>**")
rule(r"^(?P<h>\d+)x(?P<w>\d+) \((?P<i>\d+) image \+ (?P<t>\d+) text tokens\), LoRA "
     r"(?P<l>\S+) M parameters, checkpointing (?P<c>\S+)$",
     r"\g<h>x\g<w>（\g<i> 个图像 token + \g<t> 个文本 token），LoRA 参数 \g<l> M，检查点方式 `\g<c>`")
rule(r"^\((?P<c>.*): config\.json not found locally; sizes of the published model\)$",
     r"（\g<c>：本地没有 config.json；按官方发布模型的尺寸估算）")
rule(r"^(?P<s>\w+): (?P<w>GPU|CPU run) (?P<g>\S+) GB(?P<p> \(.*\))?; host RAM (?P<r>\S+) GB$",
     lambda m: f"`{m['s']}`：{'GPU' if m['w'] == 'GPU' else 'CPU 运行'} {m['g']} GB"
               f"{_parts_zh(m['p'] or '')}；内存 {m['r']} GB")
rule(r"Does not fit a (?P<g>\S+) GB GPU: ", r"放不进 \g<g> GB 的 GPU：")
rule(r"Does not fit in host RAM: ", "内存不够：")
rule(r"Does not fit: CPU run, ", "放不下：CPU 运行，")
rule(r"Fits: CPU run, ", "放得下：CPU 运行，")
rule(r"Fits a (?P<g>\S+) GB GPU: the largest stage, (?P<s>\w+), needs about (?P<n>\S+) GB",
     r"放得进 \g<g> GB 的 GPU：最大的阶段 `\g<s>` 约需 \g<n> GB")
rule(r" \(tight: under 10% headroom\)", "（偏紧：余量不到 10%）")
rule(r"(?P<s>\w+) needs about (?P<n>\S+) GB \(largest part: (?P<p>[^)]+)\)",
     lambda m: f"`{m['s']}` 约需 {m['n']} GB（最大的部分：{PARTS_ZH.get(m['p'], m['p'])}）")
rule(r" Within it: (?P<l>.*?)\.(?= |$)", lambda m: " 放得下的：" + re.sub(
    r"(\w+) (\S+ GB)", r"`\1` \2", m["l"]).replace(", ", "，") + "。")
rule(r"host RAM about (?P<n>\S+) GB \((?P<s>\w+)\)(?: of (?P<t>\S+) GB)?",
     lambda m: f"内存约 {m['n']} GB（`{m['s']}`）" + (f"，共 {m['t']} GB" if m['t'] else ""))
rule(r"Stage 1 holds the text encoder and VAE on the GPU: set data_process_offload to model "
     r"\(one at a time\) or sequential \(module by module\)\.",
     "阶段 1 把文本编码器和 VAE 同时放在 GPU 上：把 data_process_offload 设为 `model`"
     "（一次一个）或 `sequential`（逐模块）。")
rule(r"Stage 1 holds a whole encoder on the GPU: set data_process_offload to sequential "
     r"\(module by module\)\.",
     "阶段 1 把整个编码器放在 GPU 上：把 data_process_offload 设为 `sequential`（逐模块）。")
rule(r"Stage 1 already streams its weights \(data_process_offload sequential\): lower "
     r"max_pixels \(or height/width\)\.",
     "阶段 1 已经在逐模块传输权重（data_process_offload 为 `sequential`）：请调低 max_pixels"
     "（或 height/width）。")
rule(r"Try preset (?P<p>\S+)\.", r"试试预设 \g<p>。")
rule(r"Sampling holds whole components on the GPU: set sample_cpu_offload to sequential \(and "
     r"sample_vae_tiling on\), or leave the sample stage out\.",
     "采样时整个组件都放在 GPU 上：把 sample_cpu_offload 设为 `sequential`（并打开 "
     "sample_vae_tiling），或者不运行采样阶段。")
rule(r"The VAE decoder's activations are the peak: turn sample_vae_tiling on\.",
     "峰值来自 VAE 解码器的激活：打开 sample_vae_tiling。")
rule(r"Lower sample_height/sample_width, or leave the sample stage out\.",
     "调低 sample_height/sample_width，或者不运行采样阶段。")
rule(r"(?<=[）\u4e00-\u9fffB])\.(?= |$)", "。")
rule(r"(?<=）); ", "；")
rule(r"。 ", "。")
rule(r"。?\s*\(内存(?P<r>.*)\)$", r"。（内存\g<r>）")

# the parts of a stage's estimate (backend.planning.estimator: StageEstimate.gpu / .host keys)
PARTS_ZH = {
    "base weights": "基础模型权重", "base weights (offloaded)": "基础模型权重（已卸载）",
    "text encoder weights": "文本编码器权重", "vae weights": "VAE 权重",
    "transformer weights": "Transformer 权重", "lora weights": "LoRA 权重",
    "gathered parameters": "聚合的参数", "persistent parameters": "常驻参数",
    "lora + adamw": "LoRA + AdamW", "ddp buckets": "DDP 缓冲桶", "lora grads": "LoRA 梯度",
    "adamw (offloaded)": "AdamW（已卸载）", "adamw": "AdamW", "reduce bucket": "归约桶",
    "activations": "激活", "checkpointed inputs": "检查点输入",
    "checkpointed inputs (offloaded)": "检查点输入（已卸载）", "backward buffers": "反向缓冲区",
    "loading": "加载", "loading (not reused)": "加载（不复用）", "text encode": "文本编码",
    "vae encode": "VAE 编码", "denoise": "去噪", "vae decode": "VAE 解码",
    "vae decode (tiled)": "VAE 分块解码",
    "text encoder: largest module": "文本编码器：最大模块", "vae: largest module": "VAE：最大模块",
    "base weights (pinned, offloaded)": "基础模型权重（锁页内存，已卸载）",
    "base weights (resident)": "基础模型权重（常驻显存）", "dequantized weight": "反量化的权重",
    "lora weights + grads": "LoRA 权重 + 梯度",
    "offloaded blocks (running + prefetched)": "卸载的模块（运行中 + 预取）",
}


def _parts_zh(text: str) -> str:
    inner = text.strip()[1:-1] if text.strip() else ""
    if not inner:
        return ""
    parts = []
    for item in inner.split(", "):
        name, _, size = item.rpartition(" ")
        parts.append(f"{PARTS_ZH.get(name, name)} {size}")
    return "（" + "，".join(parts) + "）"


# ------------------------------------------------------------------ runs & downloads
rule(r"^Run (?P<id>`[^`]+`) — \*\*(?P<st>\w+)\*\* · folder (?P<f>`[^`]*`) · disk (?P<d>.+)$",
     lambda m: f"运行 {m['id']} — **{STATUS_ZH.get(m['st'], m['st'])}** · 文件夹 {m['f']} · "
               f"磁盘 {m['d']}")
rule(r"^Checkpoints: none yet$", "检查点：还没有")
rule(r"^Checkpoints: ", "检查点：")
rule(r"^Failure: (?P<why>.+)$", lambda m: f"失败原因：{_quoted(m['why'])}")
rule(r"^(?P<x>✗ )?Choose a run first\.$", r"\g<x>请先选择一个运行。")
rule(r"^Tick the box to confirm the deletion first\.$", "请先勾选确认框，再删除。")
rule(r"^✗ This run's settings no longer validate:$", "✗ 这个运行的设置已无法通过校验：")
rule(r"^✓ The form now holds the settings of run (?P<id>`[^`]+`): change what you like and "
     r"press \*\*Start training\*\* \(Run tab\) for a new run\.$",
     r"✓ 表单里现在是运行 \g<id> 的设置：按需修改后，点 **开始训练**（运行页）即可开始新的运行。")
rule(r"^✓ (?P<f>`[^`]+`) \((?P<s>[^)]+)\) — use the download link above\.$",
     r"✓ \g<f>（\g<s>）—— 请用上方的下载链接。")
rule(r"^Deleted run (?P<id>`[^`]+`) and its files\.$", r"已删除运行 \g<id> 及其文件。")
rule(r"^Showing run (?P<id>`[^`]+`)\.$", r"正在显示运行 \g<id>。")

rule(r"^Same as preset \*\*(?P<p>[^*]+)\*\*\.$", lambda m: f"与预设 **{m['p']}** 相同。"
     if m["p"] != "defaults" else "与默认设置相同。")
rule(r"^\*\*(?P<n>\d+)\*\* change\(s\) from preset \*\*(?P<p>[^*]+)\*\*:$",
     lambda m: f"与{'预设 **' + m['p'] + '** ' if m['p'] != 'defaults' else '默认设置'}相比有 "
               f"**{m['n']}** 处改动：")
rule(r"^field$", "字段")
rule(r"^preset$", "预设")
rule(r"^now$", "现在")
rule(r"^\*empty\*$", "*空*")
rule(r"^(?P<n>\d+) image\(s\); captions from one \.txt per image\.$",
     r"\g<n> 张图片；描述来自每张图片的同名 .txt。")
rule(r"^(?P<n>\d+) image\(s\); captions from (?P<w>\S+)\.$", r"\g<n> 张图片；描述来自 \g<w>。")
rule(r"^No run yet: press \*\*Start training\*\*\.$", "还没有运行：点 **开始训练**。")

# ------------------------------------------------------------------ compiled
# ------------------------------------------------------------------ run tab: progress, queue, messages
rule(r"^stage <b>(?P<s>[^<]*)</b>$", lambda m: f"阶段 <b>{STAGE_ZH.get(m['s'], m['s'])}</b>")
rule(r"^step <b>(?P<a>\d+)</b> / (?P<b>\d+) \((?P<p>\d+) %\)$", r"步 <b>\g<a></b> / \g<b>（\g<p> %）")
rule(r"^epoch (?P<e>\S+)$", r"轮次 \g<e>")
rule(r"^loss <b>(?P<l>[^<]+)</b>$", r"损失 <b>\g<l></b>")
rule(r"^ETA <b>(?P<t>[^<]+)</b>$", r"预计剩余 <b>\g<t></b>")
rule(r"^(?P<n>\S+) samples/s$", r"\g<n> 样本/秒")
rule(r"^no output for (?P<t>.+)$", r"已有 \g<t> 没有输出")
rule(r"^validation loss <b>(?P<l>[^<]+)</b> at step (?P<s>\d+)$",
     r"验证损失 <b>\g<l></b>（第 \g<s> 步）")
rule(r"^\*\*Your runs on the server:\*\*$", "**你在服务器上的运行：**")
rule(r"^\*Start training\* now adds another run to the queue: it begins when these have ended\.$",
     "现在点 *开始训练* 会再排队一个运行：它在上面这些运行结束后开始。")
rule(r"^Run (?P<id>`[^`]+`) is not in the history \(deleted\?\)\.$",
     r"运行 \g<id> 不在历史记录中（已删除？）。")
rule(r"^✗ Not started: (?P<n>\d+) problem\(s\) in the form\. Each is shown next to its field "
     r"\(tabs Model, Dataset, Training\)\.$",
     r"✗ 未开始：表单中有 \g<n> 个问题，每个都显示在对应字段旁边（模型、数据集、训练页）。")
rule(r"^Started run (?P<id>`[^`]+`)\.$", r"已开始运行 \g<id>。")
rule(r"^Queued run (?P<id>`[^`]+`): it starts when (?P<n>\d+) run\(s\) ahead of it have ended\. "
     r"This tab keeps showing (?P<a>`[^`]+`), which is (?P<st>\w+)\.$",
     lambda m: f"运行 {m['id']} 已排队：前面的 {m['n']} 个运行结束后开始。本页继续显示 {m['a']}，"
               f"它当前{STATUS_ZH.get(m['st'], m['st'])}。")
rule(r"^No run to stop\.$", "没有可停止的运行。")
rule(r"^No run to resume\.$", "没有可继续的运行。")
rule(r"^Run (?P<id>`[^`]+`) is (?P<st>\w+); nothing to stop\.$",
     lambda m: f"运行 {m['id']} {STATUS_ZH.get(m['st'], m['st'])}，无需停止。")
rule(r"^Stopping run (?P<id>`[^`]+`)… the train stage saves its state first, so it can be "
     r"resumed\.$", r"正在停止运行 \g<id>……train 阶段会先保存状态，之后可以继续。")
rule(r"^Resumed run (?P<id>`[^`]+`) from its saved state\.$", r"已从保存的状态继续运行 \g<id>。")
# ------------------------------------------------------------------ training tab: batch sizes
rule(r"^Images per optimizer step \(DeepSpeed's `train_batch_size`, derived\): \*\*(?P<t>\d+)\*\* "
     r"= `batch_size` (?P<b>\d+) × `gradient_accumulation_steps` (?P<g>\d+) × (?P<n>\d+) "
     r"process\(es\)$",
     r"每个优化步的图片数（DeepSpeed 的 `train_batch_size`，自动推出）：**\g<t>** = `batch_size` "
     r"\g<b> × `gradient_accumulation_steps` \g<g> × \g<n> 个进程")
# ------------------------------------------------------------------ dataset tab: bucket plan
rule(r"^\*\*Bucket plan\*\* \(`batch_size` (?P<b>\d+), `bucket_remainder` (?P<r>\w+)\): "
     r"(?P<n>\d+) batch\(es\) per epoch$",
     r"**分桶计划**（`batch_size` \g<b>，`bucket_remainder` \g<r>）：每个 epoch \g<n> 个批次")
rule(r"^(?P<n>\d+) image\(s\) held out for the validation loss \(`validation_samples`\)\.$",
     r"留出 \g<n> 张图片用于验证损失（`validation_samples`）。")
rule(r"^bucket \(W×H\)$", "分桶（宽×高）")
rule(r"^images$", "图片")
rule(r"^batches$", "批次")
rule(r"^padded$", "补齐")
rule(r"^dropped$", "丢弃")
rule(r"^⚠ (?P<n>\d+) image\(s\) dropped each epoch: a bucket's last batch is not full "
     r"\(set `bucket_remainder` to pad to keep them\)\.$",
     r"⚠ 每个 epoch 丢弃 \g<n> 张图片：某个分桶的最后一个批次不满（把 `bucket_remainder` 设为 pad 可保留它们）。")
rule(r"^⚠ No bucket holds a full batch: lower `batch_size`, or set `bucket_remainder` to pad\.$",
     r"⚠ 没有哪个分桶能凑满一个批次：减小 `batch_size`，或把 `bucket_remainder` 设为 pad。")
# ------------------------------------------------------------------ training tab: target GPU
METHODS_ZH = {
    "bf16 base on the GPU": "bf16 基础模型放在 GPU 上",
    "fp8 base (torchao weight-only)": "fp8 基础模型（`torchao` 仅量化权重）",
    "int8 base (torchao weight-only)": "int8 基础模型（`torchao` 仅量化权重）",
    "nf4 base (bitsandbytes)": "nf4 基础模型（`bitsandbytes`）",
    "layer offload, bf16 base": "逐层卸载，bf16 基础模型",
    "layer offload, int8 base (bitsandbytes)": "逐层卸载，int8 基础模型（`bitsandbytes`）",
    "layer offload, nf4 base (bitsandbytes)": "逐层卸载，nf4 基础模型（`bitsandbytes`）",
    "DeepSpeed ZeRO-3, parameters + optimizer offloaded": "DeepSpeed ZeRO-3，参数和优化器都卸载",
}
exact_rules(METHODS_ZH)


def _why_zh(why: str) -> str:
    m = re.match(r"^(?P<g>[\d.]+) GB on the GPU(?: of (?P<of>[\d.]+))?, (?P<h>[\d.]+) GB host RAM"
                 r"(?:, (?P<b>[\d.]+) GB over the bus per step: at least (?P<t>[\d.]+) s at "
                 r"(?P<bw>[\d.]+) GB/s|, nothing over the bus)"
                 r"(?:; dequantizing costs compute \(about (?P<f>[\d.]+)x bf16\))?$", why)
    if not m:
        return why
    out = f"GPU 上 {m['g']} GB" + (f"（共 {m['of']} GB）" if m["of"] else "") + \
        f"，内存 {m['h']} GB"
    out += (f"，每步经总线传输 {m['b']} GB：按 {m['bw']} GB/s 至少 {m['t']} 秒" if m["b"]
            else "，无需经总线传输")
    if m["f"]:
        out += f"；反量化要耗费计算（约为 bf16 的 {m['f']} 倍）"
    return out


rule(r"^\*\*Memory estimate\*\* for one (?P<g>\S+) GB GPU \(these settings\):$",
     r"**显存估算**：单块 \g<g> GB 的 GPU（当前设置）：")
rule(r"^Fastest that fits: \*\*(?P<l>[^*]+)\*\* — (?P<w>.+)\.$",
     lambda m: f"放得下的最快方法：**{METHODS_ZH.get(m['l'], m['l'])}** —— {_why_zh(m['w'])}。")
rule(r"^The form already uses it\.$", "表单已经在用这个方法。")
rule(r"^Changes it makes: ", "会做的修改：")
rule(r"^⚠ No single-GPU method fits this card at these settings: lower the resolution or the "
     r"LoRA rank, or pick a larger GPU\.$",
     "⚠ 按当前设置，没有哪种单 GPU 方法放得下这块卡：请降低分辨率或 LoRA 秩，或选更大的 GPU。")
rule(r"^under 0\.1 GB", "不到 0.1 GB")
rule(r"^none$", "无")
# ------------------------------------------------------------------ dataset tab: sample prompts
rule(r"^The sample prompts \(Training tab, Samples\) do not mention this dataset\. Render its "
     r"own captions instead\?$",
     "测试提示词（训练页，样图）没有提到这个数据集。改用它自己的描述来渲染吗？")
rule(r"^✓ Sample prompts set to (?P<n>\d+) of the dataset's captions \(Training tab, "
     r"Samples\)\.$", r"✓ 测试提示词已设为数据集的 \g<n> 条描述（训练页，样图）。")
# ------------------------------------------------------------------ results tab: renders
rule(r"^This run has no LoRA checkpoint yet\.$", "这个运行还没有 LoRA 检查点。")
rule(r"^Columns:$", "列：")
rule(r"^— one row per prompt$", "—— 每条提示词一行")
rule(r"^No samples yet\.$", "还没有样图。")
rule(r"^base model$", "基础模型")
rule(r"^samples rendered by the run$", "运行期间渲染的样图")
RENDER_ZH = "渲染"  # the word before a render job's name ("render <run>")
rule(r"^render (?P<n>.+)$", RENDER_ZH + r" \g<n>")
rule(r"^seed$", "种子")
rule(r"^input images$", "输入图像")
rule(r"^✗ Run (?P<id>`[^`]+`) is (?P<st>\w+): render when it has ended\.$",
     lambda m: f"✗ 运行 {m['id']} {STATUS_ZH.get(m['st'], m['st'])}：请在它结束后再渲染。")
rule(r"^○ Rendering \(job (?P<id>`[^`]+`)\)… the grid fills in when it ends\.$",
     r"○ 正在渲染（任务 \g<id>）……结束后网格会填满。")
rule(r"^○ Rendering \(job (?P<id>`[^`]+`), (?P<st>\w+)\)(?: \((?P<a>\d+)/(?P<b>\d+) images\))?…$",
     lambda m: f"○ 正在渲染（任务 {m['id']}，{STATUS_ZH.get(m['st'], m['st'])}）"
               + (f"（{m['a']}/{m['b']} 张图）" if m["a"] else "") + "……")
rule(r"^✓ Render (?P<id>`[^`]+`) finished\.$", r"✓ 渲染 \g<id> 已完成。")
rule(r"^✗ Render (?P<id>`[^`]+`) (?P<st>\w+):$",
     lambda m: f"✗ 渲染 {m['id']} {STATUS_ZH.get(m['st'], m['st'])}：")
# ------------------------------------------------------------------ dataset tab: captions
rule(r"^Captioning model: (?P<p>[\d.]+) B parameters, (?P<w>[\d.]+) GB in bf16\. GPU at batch "
     r"(?P<b>\d+): about (?P<n>[\d.]+) GB \(none\), (?P<s>[\d.]+) GB \(sequential, weights in "
     r"host RAM\)\.$",
     r"描述模型：\g<p> B 参数，bf16 下 \g<w> GB。批大小 \g<b> 时 GPU 约需 \g<n> GB（none），"
     r"\g<s> GB（sequential，权重留在内存中）。")
rule(r"^🔒 Caption run (?P<id>`[^`]+`) is writing this folder's captions: the table is "
     r"read-only until it ends\.$",
     r"🔒 描述任务 \g<id> 正在写这个文件夹的描述：它结束前表格只读。")
rule(r"^○ Caption run (?P<id>`[^`]+`) queued\.$", r"○ 描述任务 \g<id> 已排队。")
rule(r"^○ Captioning \(run (?P<id>`[^`]+`), (?P<st>\w+)\)(?: (?P<a>\d+)/(?P<b>\d+) images)?…$",
     lambda m: f"○ 正在写描述（任务 {m['id']}，{STATUS_ZH.get(m['st'], m['st'])}）"
               + (f" {m['a']}/{m['b']} 张图" if m["a"] else "") + "……")
rule(r"^✓ Caption run (?P<id>`[^`]+`) finished: (?P<n>\d+) image\(s\) captioned\.$",
     r"✓ 描述任务 \g<id> 已完成：写了 \g<n> 张图的描述。")
rule(r"^✗ Caption run (?P<id>`[^`]+`) (?P<st>\w+)\.$",
     lambda m: f"✗ 描述任务 {m['id']} {STATUS_ZH.get(m['st'], m['st'])}。")
rule(r"^No caption run to stop\.$", "没有可停止的描述任务。")
rule(r"^○ Stopping caption run (?P<id>`[^`]+`)…$", r"○ 正在停止描述任务 \g<id>……")
# ------------------------------------------------------------------ importing a command
rule(r"^✓ Imported: (?P<n>\d+) field\(s\) changed; every other field kept its value\.$",
     r"✓ 已导入：改动了 \g<n> 个字段，其余字段保持原值。")
rule(r"^✓ Imported: the form already has every setting of the command\.$",
     "✓ 已导入：表单已包含该命令的全部设置。")
rule(r"^\*\*Not understood\*\* \(not imported\):$", "**无法识别**（未导入）：")
rule(r"^\*\*Notes:\*\*$", "**说明：**")
rule(r"^command (?P<i>\d+): (?P<f>\S+) is not on this machine; recognised it as the "
     r"reference's low-VRAM accelerate config \(DeepSpeed ZeRO-3, one process\) and imported "
     r"its settings$",
     r"命令 \g<i>：本机没有 \g<f>；已识别为参考训练器的低显存 accelerate 配置"
     r"（DeepSpeed ZeRO-3，单进程），并导入了其中的设置")
rule(r"^command (?P<i>\d+): (?P<f>\S+) is not on this machine; recognised it as the "
     r"reference's low-VRAM DeepSpeed config \(ZeRO-3, parameters and optimizer offloaded to "
     r"CPU\) and imported its settings$",
     r"命令 \g<i>：本机没有 \g<f>；已识别为参考训练器的低显存 DeepSpeed 配置"
     r"（ZeRO-3，参数和优化器卸载到 CPU），并导入了其中的设置")
rule(r"^command (?P<i>\d+): (?P<f>\S+) read from the file given with the command$",
     r"命令 \g<i>：\g<f> 取自随命令提供的文件")
rule(r"^command (?P<i>\d+): accelerate config (?P<f>'[^']*') not found under (?P<b>\S+) and "
     r"not one of the reference's files; the form's distributed settings \(ZeRO stage, "
     r"offload, processes, precision\) are left as they are\. Give the file's contents "
     r"\(upload the file with the command\) to import them$",
     r"命令 \g<i>：在 \g<b> 下找不到 accelerate 配置 \g<f>，它也不是参考训练器自带的文件；"
     r"表单的分布式设置（ZeRO 阶段、卸载、进程数、精度）保持不变。请提供该文件的内容"
     r"（随命令上传该文件）以导入这些设置")
rule(r"^command (?P<i>\d+): DeepSpeed file (?P<f>'[^']*')(?: \(named in (?P<y>\S+)\))? not "
     r"found under (?P<b>\S+)(?: or next to the YAML)? and not one of the reference's files; "
     r"its settings are not imported\. Give the file's contents \(upload the file with the "
     r"command\) to import them$",
     r"命令 \g<i>：找不到 DeepSpeed 文件 \g<f>（在 \g<b> 下），它也不是参考训练器自带的文件；"
     r"其中的设置未导入。请提供该文件的内容（随命令上传该文件）以导入这些设置")
rule(r"^command (?P<i>\d+): debug: true in (?P<f>\S+) \(accelerate's debug checks\) is not "
     r"carried over$", r"命令 \g<i>：\g<f> 中的 `debug: true`（accelerate 的调试检查）不沿用")
RULES: list[Rule] = [(re.compile(p), zh) for p, zh in _RULES_SRC]


def _apply(text: str) -> str:
    for pattern, zh in RULES:
        text = pattern.sub(zh, text)
    return text


def translate(text: str) -> str | None:
    """The Chinese of one line the backend wrote, or None when part of it stays English.

    A problem line ``field: problem`` keeps its field name (the CLI's word) in front."""
    if isinstance(text, Msg):
        return text.text("zh")
    text = str(text)
    if not text.strip():
        return text
    word = STATUS_ZH.get(text.strip()) or HISTORY_HEADERS_ZH.get(text.strip())
    if word:
        return word
    out = _apply(text)
    head, sep, rest = text.partition(": ")
    if sep and re.fullmatch(r"[\w'\"]+", head):
        out = f"{head}：{_apply(rest)}" if english_left(out) else \
            out.replace(f"{head}: ", f"{head}：", 1)
    return None if english_left(out) else out


def bilingual(text: str) -> str:
    """One line of Markdown as both languages (the page shows one); as-is without Chinese."""
    zh = translate(text)
    text = str(text)
    if zh is None or zh == text:
        return text
    return f'<span class="zl-en">{text}</span><span class="zl-zh">{zh}</span>'


def bilingual_md(markdown: str) -> str:
    """Every line of a Markdown text through ``bilingual`` (list markers stay outside)."""
    out = []
    for line in str(markdown).split("\n"):
        m = re.match(r"^(\s*(?:[-*] |\d+\. |⚠ |#+ )?)(.*)$", line)
        lead, body = m.group(1), m.group(2)
        out.append(lead + bilingual(body) if body.strip() else line)
    return "\n".join(out)


def bilingual_plain(text: str) -> str:
    """Plain text (a table cell) as HTML with both languages."""
    zh = translate(text)
    en = html.escape(str(text))
    if zh is None or zh == text:
        return en
    return f'<span class="zl-en">{en}</span><span class="zl-zh">{html.escape(zh)}</span>'


# The page shows one language: the language switch sets data-zl-lang on <html>.
LANG_CSS = """
html:not([data-zl-lang="zh"]) .zl-zh {display: none !important;}
html[data-zl-lang="zh"] .zl-en {display: none !important;}
"""
