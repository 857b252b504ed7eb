"""Messages of the publish area (a run's LoRA or full checkpoint sent to the Hugging Face
Hub or ModelScope, ``backend/publish``): each code in English and Chinese (see
backend.core.messages).

What is refused before anything is sent (the hub, the repository name, the run, the
checkpoint, the formats, the disk space, a server path left in a file, offline mode, no
token), why an upload failed (each hub's 401, 403, name taken, 404, another status, the
network; ``publish.ms_*`` are ModelScope's), and what the upload is doing. A
library's or the Hub's own error line stays plain text, quoted in Chinese (``{why:q}``)."""

EN: dict[str, str] = {
    # ---------------------------------------------------------------- refused before sending
    "publish.repo_invalid":
        "repo: not a Hugging Face repository name (got {got}; allowed owner/name: letters, "
        "digits, '-', '_' and '.', each part starting and ending with a letter or digit, no "
        "'--' or '..', the name at most 96 characters and not ending in '.git')",
    "publish.not_a_run": "run: {path} is not a finished run folder (it has no {file})",
    "publish.no_checkpoint": "checkpoint: the run has no LoRA checkpoint to publish yet",
    "publish.unknown_checkpoint":
        "checkpoint: not a LoRA checkpoint of this run (got {got}; allowed {allowed})",
    "publish.unknown_destination":
        "destination: not a hub to publish to (got {got}; allowed {allowed})",
    "publish.ms_repo_invalid":
        "repo: not a ModelScope model name (got {got}; allowed owner/name: letters, digits, "
        "'-', '_' and '.', each part starting and ending with a letter or digit, no '--' or "
        "'..', the name at most 96 characters and not ending in '.git')",
    "publish.no_space":
        "nothing was sent: staging the files needs {needed} of free disk space and {free} "
        "is free; free some space or choose fewer formats",
    "publish.no_format": "formats: choose at least one (allowed {allowed})",
    "publish.unknown_format": "formats: unknown (got {got}; allowed {allowed})",
    "publish.export_failed": "formats: the {fmt} file could not be written: {why:q}",
    "publish.path_left":
        "nothing was sent: {file} would carry {what}; leave that file out or tell us how it "
        "got there",
    "publish.what_run_folder": "the run folder's path on this server",
    "publish.what_home": "this server's home folder",
    "publish.what_option": "the server path of the option {name}",
    "publish.what_token": "your access token",
    "publish.offline":
        "Publishing needs the network, and offline mode is on (HF_HUB_OFFLINE=1): nothing "
        "was sent. Unset HF_HUB_OFFLINE to publish.",
    "publish.no_token":
        "token: no Hugging Face access token (type one in the form, or set HF_TOKEN; it "
        "needs the write permission)",
    "publish.own_token":
        "token: type your own Hugging Face access token (with the write permission); the "
        "server's own token publishes for its admins only",
    "publish.checkpoint_outside":
        "nothing was sent: the checkpoint {name} leads outside the run's folder",
    "publish.ms_no_token":
        "token: no ModelScope access token (type one in the form, or set "
        "MODELSCOPE_API_TOKEN; it needs the write permission)",
    "publish.ms_own_token":
        "token: type your own ModelScope access token (with the write permission); the "
        "server's own token publishes for its admins only",
    "publish.ms_missing":
        "Publishing to ModelScope needs its client: install the modelscope package "
        "(pip install modelscope).",
    # ---------------------------------------------------------------- the Hub said no
    "publish.unauthorized":
        "The Hub refused the access token (401): it is wrong or expired. Make a new one with "
        "the write permission at huggingface.co/settings/tokens.",
    "publish.forbidden":
        "The Hub refused to write to {repo} (403): the token lacks the write permission, or "
        "{owner} is not your account or an organization you may write to.",
    "publish.name_taken":
        "{repo} already exists (409). Choose another name, or add to it (the CLI's "
        "--existing, the form's 'add to an existing repository') if it is yours.",
    "publish.not_found":
        "{repo} was not found (404): the name is wrong or the token cannot see it.",
    "publish.http_failed": "The Hub answered {status}: {why:q}",
    "publish.network": "The Hub could not be reached ({endpoint}): {why:q}. Nothing was "
                       "published; try again when the network is back.",
    "publish.card_invalid": "The Hub refused the model card: {why:q}",
    # ---------------------------------------------------------------- ModelScope said no
    "publish.ms_unauthorized":
        "ModelScope refused the access token (401): it is wrong or expired. Make a new one "
        "with the write permission in your ModelScope account's access tokens.",
    "publish.ms_forbidden":
        "ModelScope refused to write to {repo} (403): the token lacks the write permission, "
        "or {owner} is not your account or an organization you may write to.",
    "publish.ms_name_taken":
        "{repo} already exists on ModelScope. Choose another name, or add to it (the CLI's "
        "--existing, the form's 'add to an existing repository') if it is yours.",
    "publish.ms_not_found":
        "{repo} was not found on ModelScope (404): the name is wrong or the token cannot "
        "see it.",
    "publish.ms_http_failed": "ModelScope answered {status}: {why:q}",
    "publish.ms_network":
        "ModelScope could not be reached ({endpoint}): {why:q}. Nothing was published; try "
        "again when the network is back.",
    "publish.ms_upload_failed":
        "The upload to ModelScope failed: {why:q}. Publish again with 'add to an existing "
        "repository' to finish it.",
    # ---------------------------------------------------------------- what it is doing
    "publish.creating": "Creating {repo} ({visibility:@publish.visibility})…",
    "publish.uploading": "Uploading {n} file(s), {size}…",
    "publish.sent": "Sent {done} of {total} ({percent}%)…",
    "publish.published": "✓ Published: {url}",
    "publish.dry_run": "Nothing was sent (--dry-run). The repository would be {url}.",
    "publish.previewed":
        "Nothing was sent. The card and these {n} file(s), {size}, of {checkpoint} would go to "
        "{url}.",
    "publish.file_line": "`{file}` · {size}",
    "publish.visibility.private": "private",
    "publish.visibility.public": "public",
}

ZH: dict[str, str] = {
    "publish.repo_invalid":
        "`repo`：不是合法的 Hugging Face 仓库名（当前为 {got}；应为 `owner/name`：字母、数字、"
        "`-`、`_` 和 `.`，每段以字母或数字开头和结尾，不能有 `--` 或 `..`，名称最多 96 个字符，"
        "且不能以 `.git` 结尾）",
    "publish.not_a_run": "运行：{path} 不是已完成的运行文件夹（其中没有 {file}）",
    "publish.no_checkpoint": "检查点：这次运行还没有可发布的 LoRA 检查点",
    "publish.unknown_checkpoint": "检查点：不是这次运行的 LoRA 检查点（当前为 {got}；可选 {allowed}）",
    "publish.unknown_destination": "`destination`：不是可发布的模型仓库平台（当前为 {got}；可选 {allowed}）",
    "publish.ms_repo_invalid":
        "`repo`：不是合法的魔搭模型名（当前为 {got}；应为 `owner/name`：字母、数字、"
        "`-`、`_` 和 `.`，每段以字母或数字开头和结尾，不能有 `--` 或 `..`，名称最多 96 个字符，"
        "且不能以 `.git` 结尾）",
    "publish.no_space": "未发送任何内容：准备待发送的文件需要 {needed} 可用磁盘空间，当前只有 {free}；"
                        "请清理空间或少选几种格式",
    "publish.no_format": "格式：至少选择一种（可选 {allowed}）",
    "publish.unknown_format": "格式：未知（当前为 {got}；可选 {allowed}）",
    "publish.export_failed": "格式：无法写出 {fmt} 格式的文件：{why:q}",
    "publish.path_left": "未发送任何内容：{file} 会带上{what}；请不要发布该文件，或告诉我们它是怎么进去的",
    "publish.what_run_folder": "本服务器上运行文件夹的路径",
    "publish.what_home": "本服务器的用户主目录",
    "publish.what_option": "选项 {name} 在本服务器上的路径",
    "publish.what_token": "你的访问 token",
    "publish.offline": "发布需要联网，而离线模式已开启（`HF_HUB_OFFLINE=1`）：未发送任何内容。"
                       "取消 `HF_HUB_OFFLINE` 后再发布。",
    "publish.no_token": "token：没有 Hugging Face 访问 token（在表单中填写，或设置 HF_TOKEN；"
                        "需要写入权限）",
    "publish.own_token": "token：请填写你自己的 Hugging Face 访问 token（需要写入权限）；"
                         "服务器自己的 token 只供管理员发布",
    "publish.checkpoint_outside": "未发送任何内容：检查点 {name} 指向运行文件夹之外",
    "publish.ms_no_token": "token：没有魔搭访问 token（在表单中填写，或设置 `MODELSCOPE_API_TOKEN`；"
                           "需要写入权限）",
    "publish.ms_own_token": "token：请填写你自己的魔搭访问 token（需要写入权限）；"
                            "服务器自己的 token 只供管理员发布",
    "publish.ms_missing": "发布到魔搭需要它的客户端：请安装 `modelscope` 包（`pip install modelscope`）。",
    "publish.unauthorized": "Hugging Face 拒绝了访问 token（401）：它有误或已过期。请在 "
                            "`huggingface.co/settings/tokens` 新建一个有写入权限的 token。",
    "publish.forbidden": "Hugging Face 拒绝写入 {repo}（403）：token 没有写入权限，或 {owner} "
                         "不是你的账号或你可写入的组织。",
    "publish.name_taken": "{repo} 已存在（409）。请换一个名称；如果它是你的，也可以追加到其中"
                          "（命令行的 `--existing`，表单的“追加到已有仓库”）。",
    "publish.not_found": "找不到 {repo}（404）：名称有误，或该 token 看不到它。",
    "publish.http_failed": "Hugging Face 返回 {status}：{why:q}",
    "publish.network": "无法连接 Hugging Face（{endpoint}）：{why:q}。未发布任何内容；网络恢复后"
                       "请重试。",
    "publish.card_invalid": "Hugging Face 拒绝了模型卡片：{why:q}",
    "publish.ms_unauthorized": "魔搭拒绝了访问 token（401）：它有误或已过期。请在魔搭账号的访问令牌页"
                               "新建一个有写入权限的 token。",
    "publish.ms_forbidden": "魔搭拒绝写入 {repo}（403）：token 没有写入权限，或 {owner} "
                            "不是你的账号或你可写入的组织。",
    "publish.ms_name_taken": "{repo} 在魔搭上已存在。请换一个名称；如果它是你的，也可以追加到其中"
                             "（命令行的 `--existing`，表单的“追加到已有仓库”）。",
    "publish.ms_not_found": "在魔搭上找不到 {repo}（404）：名称有误，或该 token 看不到它。",
    "publish.ms_http_failed": "魔搭返回 {status}：{why:q}",
    "publish.ms_network": "无法连接魔搭（{endpoint}）：{why:q}。未发布任何内容；网络恢复后请重试。",
    "publish.ms_upload_failed": "上传到魔搭失败：{why:q}。请勾选“追加到已有仓库”再发布一次以完成上传。",
    "publish.creating": "正在创建 {repo}（{visibility:@publish.visibility}）…",
    "publish.uploading": "正在上传 {n} 个文件，共 {size}…",
    "publish.sent": "已发送 {done}，共 {total}（{percent}%）…",
    "publish.published": "✓ 已发布：{url}",
    "publish.dry_run": "未发送任何内容（`--dry-run`）。仓库将是 {url}。",
    "publish.previewed": "未发送任何内容。模型卡片和以下 {n} 个文件（共 {size}，来自 {checkpoint}）"
                         "将发送到 {url}。",
    "publish.file_line": "`{file}` · {size}",
    "publish.visibility.private": "私有",
    "publish.visibility.public": "公开",
}
