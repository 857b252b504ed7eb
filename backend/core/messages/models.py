"""Messages of the models area (the models folder: the Models tab, the API's
``/list_models``, ``/download_models``, ``/delete_model``, ``/verify_model``,
``backend/models/inventory.py``): each code in English and Chinese (see
backend.core.messages).

The table's words (columns, sources, statuses), refusals (a model id, a link, a folder
outside the models folder, a download running, offline mode), what verify found and how a
download is going. A hub client's own error line stays plain text, quoted in Chinese
(``{why:q}``)."""

EN: dict[str, str] = {
    # ---------------------------------------------------------------- the table
    "models.header": "{h:@models.col}",
    "models.col.model": "model id",
    "models.col.source": "source",
    "models.col.size": "size",
    "models.col.files": "files",
    "models.col.status": "status",
    "models.source_cell": "{s:@models.source}",
    "models.source.huggingface": "Hugging Face",
    "models.source.modelscope": "ModelScope",
    "models.source.local": "local",
    "models.status_cell": "{s:@models.status}",
    "models.status.complete": "complete",
    "models.status.other": "not read by any family",
    "models.missing": "missing: {items:join=; }",
    "models.need": "`{pattern}` ({users})",
    "models.unfinished": "unfinished download: {size}",
    "models.link": "a link to another folder",
    "models.empty": "No models in the models folder yet.",
    "models.folder": "Models folder: `{path}` ({n} models, {size})",
    "models.count": "{n} models, {size}",
    # ---------------------------------------------------------------- delete
    "models.bad_id":
        "model: not a model id (got {got}; allowed owner/name: letters, digits, '.', '_' "
        "and '-')",
    "models.not_found": "model: {id} has no folder in the models folder",
    "models.is_link":
        "model: {id} is a link to another folder; nothing was deleted (remove the link "
        "itself on the server)",
    "models.outside": "model: {id} leads outside the models folder; nothing was deleted",
    "models.busy": "model: {id} is being downloaded; delete it when the download has ended",
    "models.admin_only": "Only an admin may delete models on this server.",
    "models.choose": "Choose a model first.",
    "models.tick_box": "Tick the box to confirm, then press Delete again.",
    "models.deleted": "Deleted {id} ({size} freed).",
    # ---------------------------------------------------------------- verify
    "models.verify_ok": "{id}: all {n} files match the sizes and hashes the hub listed.",
    "models.verify_bad": "{id}: {n} of {total} files differ from what the hub listed:",
    "models.verify_none":
        "{id}: no hub records to check against (its files were made here or copied in); "
        "nothing was checked.",
    "models.verify_missing": "`{file}`: missing",
    "models.verify_size": "`{file}`: {got} bytes on disk, the hub listed {want}",
    "models.verify_hash": "`{file}`: its `{algo}` differs from the hub's",
    # ---------------------------------------------------------------- download
    "models.dl_unknown_target": "target: not a family or preset (got {got})",
    "models.dl_bad_preset": "preset {name}: {why:q}",
    "models.dl_unknown": "download: no such download (got {got})",
    "models.dl_offline":
        "Downloading needs the network, and offline mode is on ({why}): nothing was "
        "downloaded.",
    "models.dl_mirror_admin":
        "hub_endpoint: a download mirror is for admins (got {got}; allowed: empty)",
    "models.dl_running": "A download is running ({target}); start another when it has ended.",
    "models.dl_nothing": "{target}: every file is already in the models folder.",
    "models.dl_listing_failed": "Could not list the files of {id} on {source}: {why:q}",
    "models.dl_failed":
        "The download stopped: {why:q}. Press Download again to resume; finished files are "
        "kept.",
    "models.dl_done": "Downloaded {target}: {size} in {seconds} s.",
    "models.dl_started": "Downloading {target} from {source:@models.source}…",
    "models.dl_line": "{title} from {source:@models.source}: {state:@models.dl_state}",
    "models.dl_state.running": "downloading",
    "models.dl_state.succeeded": "done",
    "models.dl_state.failed": "stopped by an error",
    "models.dl_state.interrupted":
        "interrupted (the server stopped); press Download again to resume",
    "models.dl_progress": "{done} of {total} · {speed}/s",
    "models.dl_listing": "listing the files on the hub…",
    "models.dl_state.stopped": "stopped; press Download to resume",
    "models.dl_stopped":
        "Stopped downloading {target}: finished files and the unfinished one are kept; press "
        "Download to resume.",
    "models.dl_stopping": "Stopping the download of {target} at its next chunk…",
    "models.dl_not_running": "download: {target} is not running ({status:@models.dl_state})",
    "models.dl_stop_not_yours":
        "download: {target} was started by another user; only they or an admin may stop it",
    "models.need_present": "✓ `{spec}`",
    "models.need_missing": "✗ `{spec}`: missing",
    "models.needs_done": "Everything {target} reads is in the models folder.",
    "models.needs_some": "{target}: {n} of {total} sources missing; Download fetches them.",
    # ---------------------------------------------------------------- model sources
    "hub.bad_spec":
        "model source {spec}: neither an existing local path nor model_id:glob (e.g. "
        "org/model:transformer/*.safetensors)",
    "hub.spec_no_glob": "model source {spec}: expected model_id:glob",
    "hub.paths_missing": "model_paths: files not found: {files}",
    "hub.unreadable":
        "permission denied {what:@hub.access} {path}: it exists, but this process (user "
        "{user}) may not read it. Fix its permissions (e.g. chmod a+r on files, a+rx on "
        "folders) or run as a user that may read it.",
    "hub.access.reading": "reading",
    "hub.access.listing": "listing",
    "hub.offline_missing":
        "model files missing and offline is on: {spec} (looked for {where}). Put the files "
        "there, set models_dir / {env}, or turn offline off to download them.",
    "hub.download_failed": "could not download {spec} from {source} into {folder}: {why:q}",
    "hub.nothing_after_download":
        "no files match {spec} after downloading from {source} (looked for {where})",
    "hub.components_missing":
        "model sources give no {missing} (found {found}{odd}). Add it to "
        "model_id_with_origin_paths (e.g. {example}) or model_paths; a component is "
        "recognised by the config.json beside its weights ({known}).",
    "hub.found": "{items}",
    "hub.found_nothing": "nothing",
    "hub.unrecognised": "; folders without a known config.json: {folders}",
}

ZH: dict[str, str] = {
    "models.header": "{h:@models.col}",
    "models.col.model": "模型 ID",
    "models.col.source": "来源",
    "models.col.size": "大小",
    "models.col.files": "文件",
    "models.col.status": "状态",
    "models.source_cell": "{s:@models.source}",
    "models.source.huggingface": "Hugging Face 平台",
    "models.source.modelscope": "ModelScope 平台",
    "models.source.local": "本地",
    "models.status_cell": "{s:@models.status}",
    "models.status.complete": "完整",
    "models.status.other": "没有模型系列读取它",
    "models.missing": "缺少：{items:join=；}",
    "models.need": "`{pattern}`（`{users}`）",
    "models.unfinished": "未完成的下载：{size}",
    "models.link": "指向其他文件夹的链接",
    "models.empty": "模型文件夹里还没有模型。",
    "models.folder": "模型文件夹：`{path}`（{n} 个模型，{size}）",
    "models.count": "{n} 个模型，{size}",
    "models.bad_id":
        "`model`：不是模型 ID（当前：{got}；允许：`owner/name`，由字母、数字、`.`、`_` 和 `-` "
        "组成）",
    "models.not_found": "`model`：模型文件夹里没有 `{id}` 的文件夹",
    "models.is_link": "`model`：`{id}` 是指向其他文件夹的链接；没有删除任何内容（请在服务器上删除该链接本身）",
    "models.outside": "`model`：`{id}` 指向模型文件夹之外；没有删除任何内容",
    "models.busy": "`model`：`{id}` 正在下载；请在下载结束后再删除",
    "models.admin_only": "在此服务器上只有管理员可以删除模型。",
    "models.choose": "请先选择一个模型。",
    "models.tick_box": "请勾选确认框，然后再次点击“删除”。",
    "models.deleted": "已删除 `{id}`（释放 {size}）。",
    "models.verify_ok": "`{id}`：全部 {n} 个文件的大小和哈希与模型平台列出的一致。",
    "models.verify_bad": "`{id}`：{total} 个文件中有 {n} 个与模型平台列出的不同：",
    "models.verify_none": "`{id}`：没有可供核对的模型平台记录（文件是在这里生成或复制进来的）；未做任何检查。",
    "models.verify_missing": "`{file}`：缺失",
    "models.verify_size": "`{file}`：磁盘上为 {got} 字节，模型平台列出的是 {want}",
    "models.verify_hash": "`{file}`：其 `{algo}` 与模型平台的不同",
    "models.dl_unknown_target": "`target`：不是模型系列或预设（当前：{got}）",
    "models.dl_bad_preset": "预设 `{name}`：{why:q}",
    "models.dl_unknown": "`download`：没有这个下载（当前：{got}）",
    "models.dl_offline": "下载需要网络，但离线模式已开启（{why}）：没有下载任何内容。",
    "models.dl_mirror_admin": "`hub_endpoint`：下载镜像仅供管理员使用（当前：{got}；允许：留空）",
    "models.dl_running": "已有下载在进行（`{target}`）；请在它结束后再开始新的下载。",
    "models.dl_nothing": "`{target}`：所有文件都已在模型文件夹中。",
    "models.dl_listing_failed": "无法在 {source} 上列出 `{id}` 的文件：{why:q}",
    "models.dl_failed": "下载中断：{why:q}。再次点击“下载”即可继续；已完成的文件会保留。",
    "models.dl_done": "已下载 `{target}`：{size}，用时 {seconds} 秒。",
    "models.dl_started": "正在从 {source:@models.source} 下载 `{target}`…",
    "models.dl_line": "`{title}`，来自 {source:@models.source}：{state:@models.dl_state}",
    "models.dl_state.running": "下载中",
    "models.dl_state.succeeded": "已完成",
    "models.dl_state.failed": "因错误停止",
    "models.dl_state.interrupted": "已中断（服务器停止了）；再次点击“下载”即可继续",
    "models.dl_progress": "{done} / {total} · {speed}/秒",
    "models.dl_listing": "正在模型平台上列出文件…",
    "models.dl_state.stopped": "已停止；点击“下载”即可继续",
    "models.dl_stopped": "已停止下载 `{target}`：已完成的文件和未完成的文件都会保留；点击“下载”即可继续。",
    "models.dl_stopping": "正在停止 `{target}` 的下载（在下一个数据块处停止）…",
    "models.dl_not_running": "`download`：`{target}` 没有在下载（{status:@models.dl_state}）",
    "models.dl_stop_not_yours": "`download`：`{target}` 是另一位用户开始的下载；只有该用户或管理员可以停止它",
    "models.need_present": "✓ `{spec}`",
    "models.need_missing": "✗ `{spec}`：缺失",
    "models.needs_done": "`{target}` 读取的所有文件都已在模型文件夹中。",
    "models.needs_some": "`{target}`：{total} 个来源中缺少 {n} 个；点击“下载”即可获取。",
    "hub.bad_spec":
        "模型来源 `{spec}`：既不是已存在的本地路径，也不是 `model_id:glob` 形式（例如 "
        "`org/model:transformer/*.safetensors`）",
    "hub.spec_no_glob": "模型来源 `{spec}`：应为 `model_id:glob` 形式",
    "hub.paths_missing": "`model_paths`：找不到这些文件：{files}",
    "hub.unreadable":
        "{what:@hub.access} `{path}` 时权限不足：它存在，但本进程（用户 `{user}`）无权读取。"
        "请修改其权限（例如文件 `chmod a+r`，文件夹 `chmod a+rx`），或以有读取权限的用户运行。",
    "hub.access.reading": "读取",
    "hub.access.listing": "列出",
    "hub.offline_missing":
        "模型文件缺失且已开启离线模式：`{spec}`（查找位置 `{where}`）。请把文件放到那里，"
        "设置 `models_dir` / `{env}`，或关闭离线模式以下载它们。",
    "hub.download_failed": "无法从 {source} 下载 `{spec}` 到 `{folder}`：{why:q}",
    "hub.nothing_after_download":
        "从 {source} 下载后仍没有与 `{spec}` 匹配的文件（查找位置 `{where}`）",
    "hub.components_missing":
        "模型来源中没有 {missing}（找到：{found}{odd}）。请把它加入 "
        "`model_id_with_origin_paths`（例如 `{example}`）或 `model_paths`；组件由其权重旁的 "
        "`config.json` 识别（{known}）。",
    "hub.found": "{items}",
    "hub.found_nothing": "无",
    "hub.unrecognised": "；没有可识别 `config.json` 的文件夹：{folders}",
}
