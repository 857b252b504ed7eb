"""Messages of the tracking area (the metrics a training run logs to TensorBoard, a CSV
file, Weights & Biases and SwanLab, ``backend/training/tracking.py``): each code in English
and Chinese (see backend.core.messages).

What refuses a run before it trains (a tracker's package missing, a tracker that does not
start), and the log lines of a run that tracks: where each tracker writes, a tracker that
stops on the way (training goes on). A library's own error line stays plain text, quoted in
Chinese (``{error:q}``). The keys are never part of a message."""

EN: dict[str, str] = {
    "tracking.package_missing":
        "{tracker} logging needs the {package} package, which is not installed (got true; "
        "allowed: pip install {package}, or false)",
    "tracking.start_failed":
        "{option}: {tracker} did not start: {error:q} (its key comes from {key_env} in the "
        "environment; {mode_option} offline needs no key and no network)",
    "tracking.tensorboard_missing":
        "TensorBoard logging off: install the tensorboard package",
    "tracking.logging_to": "metrics logged to {trackers}",
    "tracking.where": "{tracker} in {path}",
    "tracking.offline_sync": "{tracker} wrote its run offline; send it later with: {command}",
    "tracking.stopped":
        "{tracker} logging stopped at step {step}: {error:q} (training goes on; the other "
        "trackers keep logging)",
    "tracking.close_failed": "{tracker} did not finish cleanly: {error:q}",
    "tracking.keys_refused": "{n} tracker key(s) missing",
    "tracking.own_key":
        "{tracker} logs online to the account of its key, and the server's key is not for "
        "your runs (got empty; allowed: your own {tracker} key in this field, kept in memory "
        "for this run only, or {mode_option} offline)",
    "tracking.key_again":
        "{tracker} logs online and a key is kept only while its run is under way: give your "
        "{tracker} key again to resume (got empty; allowed: your key, or {mode_option} "
        "offline)",
}

ZH: dict[str, str] = {
    "tracking.package_missing":
        "`{tracker}` 记录需要 `{package}` 包，但它没有安装（当前：true；允许：`pip install "
        "{package}`，或 false）",
    "tracking.start_failed":
        "{option}：`{tracker}` 没有启动：{error:q}（它的密钥来自环境变量 {key_env}；"
        "{mode_option} 设为 `offline` 时不需要密钥，也不需要网络）",
    "tracking.tensorboard_missing": "`TensorBoard` 记录已关闭：请安装 `tensorboard` 包",
    "tracking.logging_to": "指标记录到 {trackers}",
    "tracking.where": "`{tracker}`（{path}）",
    "tracking.offline_sync": "`{tracker}` 以离线方式写下了这次运行；之后可用下面的命令上传：{command}",
    "tracking.stopped":
        "`{tracker}` 记录在第 {step} 步停止：{error:q}（训练继续；其他记录方式照常记录）",
    "tracking.close_failed": "`{tracker}` 没有正常结束：{error:q}",
    "tracking.keys_refused": "缺少 {n} 个记录服务的密钥",
    "tracking.own_key":
        "`{tracker}` 在线记录到其密钥所属的账户，而服务器的密钥不用于你的运行（当前：空；允许："
        "在此处填写你自己的 `{tracker}` 密钥，仅在内存中为这次运行保存，或把 {mode_option} 设为 "
        "`offline`）",
    "tracking.key_again":
        "`{tracker}` 在线记录，而密钥只在运行进行期间保存：继续运行前请再次填写你的 `{tracker}` "
        "密钥（当前：空；允许：你的密钥，或把 {mode_option} 设为 `offline`）",
}
