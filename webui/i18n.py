"""English and Chinese text of the UI, through gradio's own i18n (``gr.I18n``).

Static text (labels, help lines, buttons, headings) is written as ``T("key")``; the browser
picks the language from its own setting, and the language switch in the header changes it.
Text computed by the backend (validation problems, the memory estimate, status words) goes
through ``webui.messages`` (both languages in the page, one shown). A field's label leads
with words a newcomer reads and keeps the option name (the YAML key and CLI flag) after
them: "LoRA rank · lora_rank" / "LoRA 秩 · lora_rank"; labels and help lines come from the
schema, their Chinese from ``webui.messages``. ``tests/test_i18n.py`` fails on any key
without Chinese.
"""
from __future__ import annotations

import gradio as gr

from backend.config.meta import field_meta
from backend.config.schema import FIELDS
from webui.messages import ZH_HELP, ZH_LABELS

EN: dict[str, str] = {
    "app.title": "ZeroLoRA",
    "app.tagline": "Train a LoRA for a big diffusion transformer on a small GPU — or on this "
                   "CPU with the built-in demo.",
    "app.language": "Language",
    # tabs
    "tab.model": "1 · Model & preset",
    "tab.dataset": "2 · Dataset",
    "tab.training": "3 · Training",
    "tab.run": "4 · Run",
    "tab.results": "5 · Results",
    "tab.runs": "6 · Runs & downloads",
    "tab.models": "7 · Models",
    # models tab
    "models.intro": "The model files on this server: each model's size, where it came from, and "
                    "whether every file a family reads from it is there. Download fetches "
                    "what a family or preset still lacks before you start a run.",
    "models.refresh": "Refresh",
    "models.table": "Models folder",
    "models.pick": "Model",
    "models.verify": "Verify files",
    "models.delete_confirm": "Yes, delete this model's folder and its files",
    "models.delete": "Delete model",
    "models.dl_intro": "### Download ahead of a run",
    "models.target": "Family or preset",
    "models.source": "Download from",
    "models.download": "Download",
    "models.stop": "Stop download",
    # groups
    "group.run": "Run",
    "group.model": "Model",
    "group.data": "Data",
    "group.lora": "LoRA",
    "group.training": "Training",
    "group.distributed": "Distributed & memory (accelerate / DeepSpeed)",
    "group.stages": "Stages",
    "group.samples": "Samples",
    "group.captions": "Write captions",
    "form.advanced": "Advanced",
    "advanced.run": "Run — advanced",
    "advanced.model": "Model — advanced",
    "advanced.data": "Data — advanced",
    "advanced.lora": "LoRA — advanced",
    "advanced.training": "Training — advanced",
    "advanced.distributed": "Distributed & memory — advanced",
    "advanced.stages": "Stages — advanced",
    "advanced.samples": "Samples — advanced",
    "advanced.captions": "Write captions — advanced",
    # model tab
    "model.preset": "Preset",
    "model.preset_info": "A preset fills the whole form; change anything afterwards.",
    "model.load": "Load preset",
    "model.save_name": "Save the form as preset",
    "model.save_name_ph": "my-preset",
    "model.save": "Save preset",
    "model.share": "Share with every user (admins only)",
    "model.diff": "Changes from the loaded preset",
    "model.token": "Hub token (optional)",
    "model.token_info": "For gated or private models. Kept in memory for the runs you start "
                        "now; never written to a file, the history or a log.",
    "model.intro": "Pick a preset first. **cpu_demo** trains on this machine in minutes, "
                   "offline, with a tiny model and a demo dataset.",
    # dataset tab
    "data.intro": "Point to a folder with images and captions (metadata.csv, or image + "
                  "same-named .txt), or upload images / a zip below.",
    "data.upload": "Upload images, .txt captions or a .zip",
    "data.upload_name": "New dataset name",
    "data.upload_btn": "Add to a new dataset folder",
    "data.load": "Load captions",
    "data.captions": "Captions (edit, then save)",
    "data.save": "Save captions",
    "data.validate": "Check dataset",
    "data.report": "Dataset check",
    "data.preview": "Images",
    "data.masks": "Masks over their images (tinted red: weight 0, not trained on)",
    # dataset tab: writing captions
    "caption.intro": "Caption the images of the dataset folder with a vision-language model: "
                     "the model family's own text encoder (no second download), or a "
                     "Qwen2.5-VL / Qwen3-VL folder you name. Images with a caption keep it "
                     "unless you tick Replace; the trigger word goes in front.",
    "caption.start": "Write captions",
    "caption.stop": "Stop captioning",
    "caption.review": "Before → after (edit, then Save captions)",
    "caption.review_before": "before",
    "caption.review_after": "after",
    "data.pairs": "Edit pairs: input image(s) → target, with the instruction (edit it in the "
                  "caption column)",
    # training tab
    "train.generated": "Generated files (update as you type)",
    "train.import": "Import a command",
    "train.wandb_key": "Your W&B key (online logging)",
    "train.swanlab_key": "Your SwanLab key (online logging)",
    "train.tracker_key_info": "The run logs to this key's account. Kept in memory for the run "
                              "you start now (and needed again to resume it); never written "
                              "to a file, the history or a log. Empty: the server's key, for "
                              "admins only.",
    "train.import_ph": "Paste an accelerate launch … command of the reference trainer",
    "train.import_btn": "Import into the form",
    "train.import_files": "Its accelerate / DeepSpeed files (when not on this server)",
    "train.problems": "Problems",
    "train.target_gpu": "Estimate for",
    "train.target_gpu_info": "This machine, or the GPU you will train on.",
    "train.target_bus": "Host→GPU bus",
    "train.target_bus_info": "Offload moves weights over it every step.",
    "train.apply_method": "Apply the suggested method",
    "data.suggest_btn": "Use these as sample prompts",
    "res.set": "Samples shown",
    "res.set_info": "Each render keeps its own images; the newest is shown first.",
    "train.estimate": "Memory estimate",
    "form.unset": "empty = unset",
    # run tab
    "run.start": "Start training",
    "run.stop": "Stop",
    "run.resume": "Resume",
    "run.name": "Run name",
    "run.current": "Current run",
    "run.stages": "Stages",
    "run.progress": "Progress",
    "run.log": "Log",
    "run.log_stage": "Log of stage",
    "run.loss": "Loss",
    "run.train_loss": "training loss",
    "run.val_loss": "validation loss",
    "run.series": "curve",
    "run.plot_step": "step",
    "run.plot_loss": "loss",
    "run.samples": "Samples made during training",
    "run.failure": "What went wrong",
    "run.gpu": "GPU memory",
    "run.message": "Status",
    # results tab
    "res.intro": "Render the trained LoRA beside the base model (scale 0) at the same seed. "
                 "Renders run as a separate job; the grid fills in when it ends.",
    "res.run": "Run",
    "res.refresh": "Refresh",
    "res.prompts": "Prompts (one per line)",
    "res.images": "Input images of each prompt (edit models; one line per prompt, images "
                  "separated by |)",
    "res.videos": "Reference clip of each prompt (IC-LoRA; one line per prompt; empty: the "
                  "dataset's references)",
    "res.seed": "Seed",
    "res.ema": "Weights",
    "res.ema_info": "raw: the checkpoints as trained; ema: their EMA twins; both: a column each (runs trained with ema_decay).",
    "res.steps": "Steps",
    "res.cfg": "Guidance (cfg)",
    "res.height": "Height",
    "res.width": "Width",
    "res.checkpoints": "Checkpoints",
    "res.scales": "LoRA scales (comma-separated; 0 = base model)",
    "res.render": "Render",
    "res.grid": "Prompts × checkpoints × LoRA scales",
    "res.status": "Render status",
    # runs tab
    "runs.history": "Run history",
    "runs.refresh": "Refresh",
    "runs.select": "Run",
    "runs.open": "Show in the Run tab",
    "runs.reuse": "Use these settings",
    "runs.format": "Key format",
    "runs.format_info": "reference: as trained; diffusers: loads with pipe.load_lora_weights; "
                        "comfyui: loads in ComfyUI's LoRA loader. A full fine-tune's "
                        "checkpoint: diffusers is its folder as a zip (from_pretrained); "
                        "comfyui and reference one .safetensors file (ComfyUI's Load "
                        "Diffusion Model; the reference trainer's step-N file).",
    "runs.checkpoint": "Checkpoint",
    "runs.extract_rank": "LoRA rank to extract",
    "runs.extract_rank_info": "From a full fine-tune's checkpoint: the change of each linear layer, kept to this rank (SVD).",
    "runs.extract": "Extract LoRA",
    "runs.dl_lora": "Download checkpoint (LoRA or full)",
    "runs.dl_configs": "Download configs",
    "runs.dl_logs": "Download logs",
    "runs.dl_zip": "Download whole run (.zip)",
    "runs.file": "File",
    "runs.delete_confirm": "Yes, delete this run and its files",
    "runs.delete": "Delete run",
    "runs.disk": "Disk use",
    # runs tab: publish
    "pub.title": "Publish to the Hugging Face Hub or ModelScope",
    "pub.intro": "The picked run's LoRA (or a full fine-tune's checkpoint) with a model card "
                 "(its samples, how to load it, its settings without any path of this "
                 "server). Preview shows the card and the files first; nothing is sent until "
                 "you press Publish.",
    "pub.destination": "Hub",
    "pub.destination_info": "huggingface: the Hugging Face Hub; modelscope: ModelScope (its "
                            "card's metadata and download code follow the hub).",
    "pub.repo": "Repository (owner/name)",
    "pub.private": "Private",
    "pub.existing": "Add to an existing repository",
    "pub.formats": "Formats",
    "pub.formats_info": "diffusers: loads with pipe.load_lora_weights (a full checkpoint: "
                        "its folder); comfyui: ComfyUI's keys; reference: as trained.",
    "pub.token": "Access token of the chosen hub (write permission)",
    "pub.token_info": "Kept in memory for this upload only; never written to a file or a log. "
                      "Empty: the server's own token (HF_TOKEN / MODELSCOPE_API_TOKEN; admins "
                      "only).",
    "pub.preview": "Preview card and files",
    "pub.send": "Publish",
    "pub.card": "Model card",
}

ZH: dict[str, str] = {
    "app.title": "ZeroLoRA",
    "app.tagline": "在小显存 GPU 上为大型扩散 Transformer 训练 LoRA —— 或用内置演示在本机 CPU 上训练。",
    "app.language": "语言",
    "tab.model": "1 · 模型与预设",
    "tab.dataset": "2 · 数据集",
    "tab.training": "3 · 训练设置",
    "tab.run": "4 · 运行",
    "tab.results": "5 · 结果",
    "tab.runs": "6 · 运行记录与下载",
    "tab.models": "7 · 模型",
    "models.intro": "本服务器上的模型文件：每个模型的大小、来源，以及模型系列需要读取的文件是否齐全。"
                    "“下载”会在开始运行之前获取模型系列或预设尚缺的文件。",
    "models.refresh": "刷新",
    "models.table": "模型文件夹",
    "models.pick": "模型",
    "models.verify": "校验文件",
    "models.delete_confirm": "确认删除此模型的文件夹及其文件",
    "models.delete": "删除模型",
    "models.dl_intro": "### 在运行前下载",
    "models.target": "模型系列或预设",
    "models.source": "下载来源",
    "models.download": "下载",
    "models.stop": "停止下载",
    "group.run": "运行",
    "group.model": "模型",
    "group.data": "数据",
    "group.lora": "LoRA",
    "group.training": "训练",
    "group.distributed": "分布式与显存（accelerate / DeepSpeed）",
    "group.stages": "阶段",
    "group.samples": "采样",
    "form.advanced": "高级",
    "advanced.run": "运行 — 高级",
    "advanced.model": "模型 — 高级",
    "advanced.data": "数据 — 高级",
    "advanced.lora": "LoRA — 高级",
    "advanced.training": "训练 — 高级",
    "advanced.distributed": "分布式与显存 — 高级",
    "advanced.stages": "阶段 — 高级",
    "advanced.samples": "采样 — 高级",
    "model.preset": "预设",
    "model.preset_info": "预设会填好整个表单；之后可以修改任意项。",
    "model.load": "加载预设",
    "model.save_name": "将表单保存为预设",
    "model.save_name_ph": "我的预设",
    "model.save": "保存预设",
    "model.share": "与所有用户共享（仅管理员）",
    "model.diff": "与已加载预设的差异",
    "model.token": "模型库令牌（可选）",
    "model.token_info": "用于受限或私有模型。仅在内存中保存，供现在启动的运行使用；不会写入文件、历史记录或日志。",
    "model.intro": "先选一个预设。**cpu_demo** 使用小模型和演示数据集，离线在本机几分钟即可训练完成。",
    "data.intro": "指定一个包含图片和描述的文件夹（metadata.csv，或图片 + 同名 .txt），"
                  "或在下方上传图片 / zip 压缩包。",
    "data.upload": "上传图片、.txt 描述或 .zip",
    "data.upload_name": "新数据集名称",
    "data.upload_btn": "放入新的数据集文件夹",
    "data.load": "读取描述",
    "data.captions": "图片描述（编辑后保存）",
    "data.save": "保存描述",
    "data.validate": "检查数据集",
    "data.report": "数据集检查结果",
    "data.preview": "图片",
    "data.masks": "遮罩叠加在图像上（红色：权重为 0，不参与训练）",
    "data.pairs": "编辑样本对：输入图片 → 目标图片，下方为指令（在描述列中编辑）",
    "train.generated": "生成的文件（随输入实时更新）",
    "train.import": "导入命令",
    "train.wandb_key": "你的 `W&B` 密钥（在线记录）",
    "train.swanlab_key": "你的 `SwanLab` 密钥（在线记录）",
    "train.tracker_key_info": "运行会记录到此密钥所属的账户。仅在内存中为现在启动的运行保存（继续运行时需要再次填写）；"
                              "不会写入文件、历史记录或日志。留空：使用服务器的密钥，仅限管理员。",
    "train.import_ph": "粘贴参考训练器的 accelerate launch … 命令",
    "train.import_btn": "导入到表单",
    "train.import_files": "命令用到的 accelerate / DeepSpeed 文件（不在此服务器上时）",
    "train.problems": "问题",
    "train.target_gpu": "估算对象",
    "train.target_gpu_info": "本机，或你将用来训练的 GPU。",
    "train.target_bus": "内存→GPU 总线",
    "train.target_bus_info": "卸载时每一步都要经它传输权重。",
    "train.apply_method": "应用建议的方法",
    "data.suggest_btn": "用这些作为测试提示词",
    "group.captions": "写描述",
    "advanced.captions": "写描述 — 高级",
    "caption.intro": "用视觉语言模型为数据集文件夹中的图片写描述：该模型系列自带的文本编码器（无需再下载），"
                     "或你指定的 Qwen2.5-VL / Qwen3-VL 文件夹。已有描述的图片保留原描述，除非勾选替换；"
                     "触发词放在最前面。",
    "caption.start": "写描述",
    "caption.stop": "停止写描述",
    "caption.review": "之前 → 之后（编辑后点保存描述）",
    "caption.review_before": "之前",
    "caption.review_after": "之后",
    "res.set": "显示的样图",
    "res.set_info": "每次渲染的图片单独保存；最新的排在最前。",
    "train.estimate": "显存估算",
    "form.unset": "留空 = 不设置",
    "run.start": "开始训练",
    "run.stop": "停止",
    "run.resume": "继续训练",
    "run.name": "运行名称",
    "run.current": "当前运行",
    "run.stages": "阶段",
    "run.progress": "进度",
    "run.log": "日志",
    "run.log_stage": "查看阶段日志",
    "run.loss": "损失",
    "run.train_loss": "训练损失",
    "run.val_loss": "验证损失",
    "run.series": "曲线",
    "run.plot_step": "步数",
    "run.plot_loss": "损失",
    "run.samples": "训练中生成的样图",
    "run.failure": "出错原因",
    "run.gpu": "GPU 显存",
    "run.message": "状态",
    "res.intro": "在相同种子下，把训练好的 LoRA 与基础模型（缩放 0）并排渲染。渲染作为单独的任务运行，"
                 "结束后网格会自动填充。",
    "res.run": "运行",
    "res.refresh": "刷新",
    "res.prompts": "提示词（每行一个）",
    "res.images": "每个提示词的输入图像（编辑模型；每行对应一个提示词，多张图像用 | 分隔）",
    "res.videos": "每个提示词的参考片段（IC-LoRA；每行对应一个提示词；留空：用数据集的参考视频）",
    "res.seed": "种子",
    "res.ema": "权重",
    "res.ema_info": "raw：训练得到的检查点；ema：它们的指数滑动平均版本；both：各占一列（仅限设置了 ema_decay 的运行）。",
    "res.steps": "步数",
    "res.cfg": "引导强度（cfg）",
    "res.height": "高度",
    "res.width": "宽度",
    "res.checkpoints": "检查点",
    "res.scales": "LoRA 强度（逗号分隔；0 = 基础模型）",
    "res.render": "渲染",
    "res.grid": "提示词 × 检查点 × LoRA 强度",
    "res.status": "渲染状态",
    "runs.history": "运行记录",
    "runs.refresh": "刷新",
    "runs.select": "运行",
    "runs.open": "在“运行”页查看",
    "runs.reuse": "使用这些设置",
    "runs.format": "键名格式",
    "runs.format_info": "reference：训练原样；diffusers：可用 pipe.load_lora_weights 加载；"
                        "comfyui：可在 ComfyUI 的 LoRA 加载器中使用。全量微调的检查点：diffusers "
                        "为整个文件夹的 zip（from_pretrained 可加载）；comfyui 和 reference 为单个 "
                        ".safetensors 文件（ComfyUI 的 `Load Diffusion Model`；参考训练器的 step-N "
                        "文件）。",
    "runs.checkpoint": "检查点",
    "runs.extract_rank": "提取的 LoRA 秩",
    "runs.extract_rank_info": "从全量微调的检查点中：把每个线性层的变化（奇异值分解）保留到这个秩。",
    "runs.extract": "提取 LoRA",
    "runs.dl_lora": "下载检查点（LoRA 或全量）",
    "runs.dl_configs": "下载配置文件",
    "runs.dl_logs": "下载日志",
    "runs.dl_zip": "下载整个运行（.zip）",
    "runs.file": "文件",
    "runs.delete_confirm": "确认删除此运行及其文件",
    "runs.delete": "删除运行",
    "runs.disk": "磁盘占用",
    "pub.title": "发布到 Hugging Face 或魔搭模型库",
    "pub.intro": "把所选运行的 LoRA（或全量训练的检查点）连同模型卡片（样图、加载方法、去掉了本服务器"
                 "所有路径的设置）发布出去。预览会先给出卡片和文件列表；按下“发布”之前不会发送任何内容。",
    "pub.destination": "模型库",
    "pub.destination_info": "huggingface：Hugging Face 模型库；modelscope：魔搭"
                            "（卡片的元数据和下载代码随所选模型库而定）。",
    "pub.repo": "仓库（owner/name）",
    "pub.private": "私有",
    "pub.existing": "追加到已有仓库",
    "pub.formats": "格式",
    "pub.formats_info": "diffusers：可用 pipe.load_lora_weights 加载（全量检查点：其文件夹）；"
                        "comfyui：ComfyUI 的键名；reference：训练原样。",
    "pub.token": "所选模型库的访问 token（需要写入权限）",
    "pub.token_info": "只在这次上传期间保存在内存中，从不写入文件或日志。留空：使用服务器自己的 "
                      "token（`HF_TOKEN` / `MODELSCOPE_API_TOKEN`；仅限管理员）。",
    "pub.preview": "预览卡片和文件",
    "pub.send": "发布",
    "pub.card": "模型卡片",
}

def field_label(name: str, lang: str = "en") -> str:
    """The form's label of a field: words first, then the option name."""
    words = ZH_LABELS.get(name) if lang == "zh" else field_meta(name)["label"]
    return f"{words} · {name}" if words else name


def bounds_text(name: str) -> str:
    """A number field's bounds in symbols (≥ 1, ≤ 1024, × 16)."""
    meta = field_meta(name)
    parts = [f"{sym} {meta[k]}" for k, sym in (("ge", "≥"), ("gt", ">"), ("le", "≤"),
                                               ("multiple_of", "×")) if k in meta]
    return ", ".join(parts)


def _field_keys() -> tuple[dict[str, str], dict[str, str]]:
    en, zh = {}, {}
    for name in FIELDS:
        en[f"help.{name}"] = field_meta(name)["help"]
        en[f"label.{name}"] = field_label(name)
        bounds = bounds_text(name)
        en[f"unset.{name}"] = EN["form.unset"] + (f"; {bounds}" if bounds else "")
        zh[f"unset.{name}"] = ZH["form.unset"] + (f"；{bounds}" if bounds else "")
        if name in ZH_HELP:
            zh[f"help.{name}"] = ZH_HELP[name]
        if name in ZH_LABELS:
            zh[f"label.{name}"] = field_label(name, "zh")
    return en, zh


_en_help, _zh_help = _field_keys()
# gradio replaces its "en" and "zh-CN" dictionaries with its own after ours are added, and a
# switched-to language finds our text only under an exact region tag: register both.
_EN_ALL = {**EN, **_en_help}
# gradio's own words on our page (footer, table drop zone, loading), which it keeps under
# its zh-CN locale only.
GRADIO_ZH = {"common.settings": "设置", "common.loading": "加载中",
             "common.built_with_gradio": "使用 Gradio 构建", "errors.use_via_api": "通过 API 使用",
             "dataframe.drop_to_upload": "将 CSV 或 TSV 文件拖放到此处以将数据导入数据框",
             # the drop zone of every file upload (a dataset, an import's launch files)
             "upload_text.drop_file": "拖放文件到此处", "upload_text.click_to_upload": "点击上传",
             "upload_text.drop_image": "拖放图片到此处", "upload_text.drop_video": "拖放视频到此处",
             "common.or": "或", "common.clear": "清除", "common.remove": "移除",
             "common.download": "下载"}
_ZH_ALL = {**ZH, **_zh_help, **GRADIO_ZH}
I18N = gr.I18n(en=_EN_ALL, zh=_ZH_ALL)


def T(key: str):
    """Translated static text for a component argument (label, info, value of a heading)."""
    if key not in EN and key not in _en_help:
        raise KeyError(f"no English text for UI key {key!r}")
    return I18N(key)
