"""Messages of the fullexport area (a full checkpoint written as one file another tool loads,
``backend.models.full_export``): each code in English and Chinese (see
backend.core.messages).

Refusals name the flag and what was given (``fullexport.no_names`` ...); the log line
``fullexport.written`` says what was written. Format, family and tensor names stand in code
spans in Chinese."""

EN: dict[str, str] = {
    "fullexport.refused": "full checkpoint export refused:\n  {lines:join=\n  }",
    "fullexport.not_folder":
        "checkpoint: not a full checkpoint folder (got {got}; allowed a folder with "
        "config.json and its safetensors weights, e.g. output/step-100)",
    "fullexport.no_weights":
        "checkpoint: no safetensors weights in the folder (got {got})",
    "fullexport.shard_missing": "checkpoint: shard files listed in the index are missing ({got})",
    "fullexport.bad_header": "checkpoint: {file} is not a readable safetensors file ({why:q})",
    "fullexport.format": "--format: unknown format (got {got}; allowed {allowed})",
    "fullexport.family":
        "--family: unknown or not found (got {got}; allowed {allowed}; the checkpoint's "
        "zerolora_checkpoint.json names its family, else give --family)",
    "fullexport.out_suffix": "--out: the file must end in .safetensors (got {got})",
    "fullexport.out_is_source": "--out: the export would overwrite the checkpoint (got {got})",
    "fullexport.no_names":
        "--format: the {family} family has no {fmt} names for a full checkpoint (allowed "
        "{allowed})",
    "fullexport.unnamed":
        "--format: {n} tensor(s) of the checkpoint have no {fmt} name in the {family} "
        "family, so the file would miss them: {tensors}",
    "fullexport.bad_map":
        "--format: the {family} family's {fmt} names take rows {got} of {key} (allowed "
        "each of its {rows} rows exactly once)",
    "fullexport.no_space":
        "--out: not enough free space for the export ({free} free on {folder}; needed "
        "{needed})",
    "fullexport.written": "wrote {path}: {n} tensors ({size}) in {fmt} names",
}

ZH: dict[str, str] = {
    "fullexport.refused": "完整检查点导出被拒绝：\n  {lines:join=\n  }",
    "fullexport.not_folder":
        "检查点：不是完整检查点文件夹（当前：{got}；允许：含 `config.json` 与其 "
        "`safetensors` 权重的文件夹，例如 `output/step-100`）",
    "fullexport.no_weights": "检查点：文件夹中没有 `safetensors` 权重（当前：{got}）",
    "fullexport.shard_missing": "检查点：索引列出的分片文件缺失（{got}）",
    "fullexport.bad_header": "检查点：{file} 不是可读取的 `safetensors` 文件（{why:q}）",
    "fullexport.format": "`--format`：未知格式（当前：{got}；允许：{allowed}）",
    "fullexport.family":
        "`--family`：未知或未找到（当前：{got}；允许：{allowed}；检查点的 "
        "`zerolora_checkpoint.json` 会写明模型系列，否则请给出 `--family`）",
    "fullexport.out_suffix": "`--out`：文件名必须以 `.safetensors` 结尾（当前：{got}）",
    "fullexport.out_is_source": "`--out`：导出会覆盖检查点本身（当前：{got}）",
    "fullexport.no_names":
        "`--format`：模型系列 `{family}` 没有完整检查点的 `{fmt}` 命名（允许：{allowed}）",
    "fullexport.unnamed":
        "`--format`：检查点中有 {n} 个张量在模型系列 `{family}` 中没有 `{fmt}` 名称，"
        "导出的文件会缺少它们：{tensors}",
    "fullexport.bad_map":
        "`--format`：模型系列 `{family}` 的 `{fmt}` 命名取用了 {key} 的行 {got}（允许：其 "
        "{rows} 行各恰好一次）",
    "fullexport.no_space":
        "`--out`：可用空间不足以写出导出文件（{folder} 上可用 {free}；需要 {needed}）",
    "fullexport.written": "已写出 {path}：{n} 个张量（{size}），使用 `{fmt}` 命名",
}
