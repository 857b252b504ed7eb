"""Messages of the slurm area (runs sent to a SLURM cluster, ``backend.jobs.slurm``): each code
in English and Chinese (see backend.core.messages).

Refusals before submission name the field (``slurm.no_partition`` ...), where a job stands
(``slurm.queued`` ...) and what a scheduler's end state means with what to change
(``slurm.timeout`` ...). SLURM's own words (a pending reason, a tool's error line) stay plain
text, quoted in Chinese (``{why:q}``); command, state and field names stand in code spans in
Chinese."""

EN: dict[str, str] = {
    # ---------------------------------------------------------------- refusals
    "slurm.no_sbatch":
        "sbatch is not on the PATH: runs go to SLURM through its client commands (sbatch, "
        "squeue, sacct, scancel, sinfo, scontrol). Install them (Debian: slurm-client) or add "
        "their folder to PATH, or start with --executor local.",
    "slurm.no_tool": "{tool} is not on the PATH (SLURM's client commands are needed)",
    "slurm.tool_failed": "{tool} failed (exit code {exit}): {why:q}",
    "slurm.tool_timeout": "{tool} did not answer within {seconds:g} s (is slurmctld up?)",
    "slurm.no_partition":
        "slurm_partition: no such partition on this cluster (got '{got}'; allowed {known}, as "
        "sinfo lists them)",
    "slurm.no_default_partition":
        "slurm_partition: the cluster has no default partition (got none; allowed {known}, as "
        "sinfo lists them)",
    "slurm.too_many_gpus":
        "slurm_gpus_per_node: more GPUs than a node of partition '{partition}' has (got {got}; "
        "allowed at most {most}; sinfo: {nodes})",
    "slurm.too_many_nodes":
        "num_machines: more nodes than partition '{partition}' has (got {got}; allowed at "
        "most {most}; sinfo: {nodes})",
    "slurm.bad_time_limit":
        "slurm_time_limit: not a SLURM time (got '{got}'; allowed minutes, MM:SS, HH:MM:SS, "
        "D-HH, D-HH:MM or D-HH:MM:SS)",
    "slurm.bad_memory":
        "slurm_mem_per_task: not a SLURM size (got '{got}'; allowed e.g. 64G, 500M)",
    "slurm.bad_count": "{field}: must be {least} or more (got {got})",
    "slurm.bad_env_name":
        "slurm_nccl_env: not an environment variable name (got '{got}'; allowed letters, digits "
        "and _, not starting with a digit)",
    "slurm.bad_setup_line": "slurm_setup_lines: one command a line (got a line with a line break)",
    "slurm.packed_gpus":
        "machines_per_node: several launchers share a node only on CPU (got {n} with "
        "slurm_gpus_per_node {gpus}; allowed 1 when the run uses GPUs: each launcher would "
        "see every GPU of the node)",
    "slurm.submit_refused": "sbatch refused the job: {why:q}",
    "slurm.no_job_id": "sbatch gave no job id: {why:q}",
    "slurm.unknown_job":
        "job {job}: SLURM knows no such job (squeue, sacct and scontrol list none)",
    "slurm.cannot_resume": "job {job} is {status:@status}: only a stopped or failed job resumes",
    "slurm.not_in_step":
        "not inside a SLURM job step: {name} is not set (run it under srun)",
    # ---------------------------------------------------------------- the app's runner
    "slurm.local_runner":
        "executor: this server runs the stages itself (got '{executor}'; allowed local, or "
        "start the server with launch.py --executor slurm)",
    "slurm.no_secret_env":
        "a token typed for one run cannot reach a SLURM job without being written down "
        "(got {keys}); set it in the environment the server starts with, which the job "
        "inherits, or leave the field empty",
    "slurm.setup_admins_only":
        "slurm_setup_lines: shell lines of a SLURM job are an admin's to set (got {n} "
        "line(s); allowed none: the server's --slurm-setup lines apply)",
    "slurm.nccl_only":
        "slurm_nccl_env: only NCCL variables (got '{got}'; allowed names that start with "
        "NCCL_)",
    "slurm.job_lost":
        "SLURM no longer knows job {job} (squeue, sacct and scontrol list none): its end "
        "was not seen; the logs in the run folder say how far it got",
    "slurm.resubmit_failed": "the new SLURM job was refused: {why}",
    # ---------------------------------------------------------------- where a job stands
    "slurm.queued": "waiting in SLURM's queue (job {job}; reason: {reason:q})",
    "slurm.running": "running as SLURM job {job} on {nodes}",
    "slurm.ended": "SLURM job {job} ended: {state}, exit code {exit}",
    "slurm.requeued":
        "requeued by SLURM (restart {n}: preempted, or requeued by an admin), waiting in the "
        "queue (job {job}; reason: {reason:q}); it resumes from its last saved state by itself",
    "slurm.running_requeued":
        "running as SLURM job {job} on {nodes}, restart {n} after a requeue (preemption): "
        "finished stages skipped, training resumed from its last saved state",
    "slurm.ended_requeued":
        "SLURM job {job} ended: {state}, exit code {exit}, after {n} requeue(s) (each "
        "resumed from the last saved state)",
    # ---------------------------------------------------------------- the time limit
    "slurm.time_too_short":
        "slurm_time_limit: shorter than the run needs (got {got}, {limit_s} s; allowed about "
        "{need} or more: {steps} steps x {s_per_step} s a step, as run {run} measured over "
        "{measured} steps with the same family, resolution and DeepSpeed setting, plus "
        "{extra_s} s for stage 1, samples and start-up)",
    "slurm.time_checked":
        "slurm_time_limit {got} covers the estimate (about {need}: {steps} steps x "
        "{s_per_step} s a step as run {run} measured, plus {extra_s} s for the other stages)",
    "slurm.time_unchecked":
        "slurm_time_limit {got} could not be checked: no earlier SLURM run with the same "
        "family, resolution and DeepSpeed setting has measured seconds per step ({steps} "
        "steps planned); this run measures them for the next",
    "slurm.time_unchecked_steps":
        "slurm_time_limit {got} could not be checked: the number of steps is not known "
        "before the dataset can be read here (set max_train_steps to have it checked)",
    # ---------------------------------------------------------------- the storage probe
    "slurm.probe_idle": "shared storage: not checked yet (the first SLURM run checks it)",
    "slurm.probe_pending":
        "shared storage: pending, the probe job {job} waits in SLURM's queue (reason: "
        "{reason:q}); runs are not held back for it",
    "slurm.probe_running": "shared storage: the probe job {job} runs",
    "slurm.probe_ok":
        "shared storage: ok, the file the probe job {job} wrote on node {node} at {written} "
        "is readable here",
    "slurm.probe_missing":
        "Warning: shared storage: the probe job {job} ran on {node} (ended {state}) but its "
        "file {path} is not visible here. The nodes must mount the runs folder {folder} (and "
        "the models folder) at the same path as this server, or runs sent to SLURM cannot "
        "read their config, write logs or checkpoints where the page looks.",
    "slurm.probe_refused": "shared storage: the probe job could not be submitted: {why}",
    # ---------------------------------------------------------------- end states explained
    "slurm.timeout": "The job reached its time limit (TIMEOUT)",
    "slurm.timeout_explained":
        "SLURM ended the job when its time limit ({limit}) ran out: the stage got SIGTERM, "
        "then SIGKILL after the cluster's KillWait. Training saves its state on SIGTERM, so "
        "Resume continues from the last saved state.",
    "slurm.fix_time_limit":
        "Raise slurm_time_limit (now {limit}), within the partition's MaxTime (scontrol show "
        "partition).",
    "slurm.fix_fewer_steps":
        "Or train fewer steps per job (max_train_steps) and Resume for the rest; save more "
        "often (save_steps) so less is lost when time runs out.",
    "slurm.node_fail": "A node of the job failed (NODE_FAIL)",
    "slurm.node_fail_explained":
        "A node stopped answering SLURM's controller while the job ran (hardware, network "
        "or a crashed slurmd) and the stage was killed without warning. No setting of the "
        "run caused it.",
    "slurm.fix_resume_saved":
        "Resume: training continues from its last saved state (save_steps sets how often "
        "one is saved).",
    "slurm.fix_bad_node":
        "If it happens again on the same node, ask the cluster's admins (sinfo -R lists why "
        "nodes are down) or keep to other nodes (slurm_constraint).",
    "slurm.oom": "The job went over its memory limit (OUT_OF_MEMORY)",
    "slurm.oom_explained":
        "SLURM's memory enforcement killed the stage for using more host memory (RAM, not "
        "GPU memory) than the job asked for (slurm_mem_per_task now {mem}).",
    "slurm.fix_more_memory":
        "Ask for more memory (slurm_mem_per_task now {mem}), up to what a node has (sinfo -o "
        "'%N %m').",
    "slurm.fix_less_ram":
        "Keep less in RAM: ZeRO CPU offload keeps parameters and optimizer states in RAM; "
        "offload to NVMe instead (offload_param_device / offload_optimizer_device: nvme) or "
        "use fewer DataLoader workers (dataset_num_workers).",
    "slurm.preempted": "A job of higher priority took the nodes (PREEMPTED)",
    "slurm.preempted_explained":
        "The cluster preempted the job for another one. A requeued job resumes from its "
        "last saved state by itself; this one was not requeued (the partition's PreemptMode "
        "cancels, or requeue is off).",
    "slurm.fix_resume": "Resume the run: it continues from its last saved state.",
    "slurm.fix_no_preempt":
        "Or send it to a partition or QoS that is not preempted (slurm_partition, slurm_qos).",
    "slurm.cancelled": "The job was ended from outside the app ({state})",
    "slurm.cancelled_explained":
        "SLURM job {job} was cancelled, or its stage sent SIGTERM, without a Stop from this "
        "page: scancel by a person or a script, or a cluster admin. Training saves its state "
        "on SIGTERM, so little or nothing is lost.",
    "slurm.fix_stop_from_page":
        "To stop a run, use Stop on the page (scancel --signal=TERM: the stage saves its "
        "state first) rather than scancel or scancel --signal=KILL.",
    "slurm.killed": "SLURM killed the job's stage with SIGKILL (the job ended {state})",
    "slurm.killed_explained":
        "A step of SLURM job {job} got SIGKILL (scancel --signal=KILL on the job's step, "
        "or slurmd enforcing a limit): the stage could not save, so the steps since its "
        "last checkpoint are lost; the job's later stages did not run.",
    "slurm.fix_who_killed":
        "If nobody sent it, ask SLURM why (sacct -j {job}, the node's slurmd log): a step "
        "over its memory is killed too; ask for more (slurm_mem_per_task now {mem}).",
}

ZH: dict[str, str] = {
    # ---------------------------------------------------------------- refusals
    "slurm.no_sbatch":
        "`PATH` 中没有 `sbatch`：运行通过 `SLURM` 的客户端命令（`sbatch`、`squeue`、`sacct`、"
        "`scancel`、`sinfo`、`scontrol`）交给集群。请安装它们（`Debian`：`slurm-client`）或把它们"
        "所在的文件夹加入 `PATH`，或用 `--executor local` 启动。",
    "slurm.no_tool": "`PATH` 中没有 {tool}（需要 `SLURM` 的客户端命令）",
    "slurm.tool_failed": "{tool} 失败（退出码 {exit}）：{why:q}",
    "slurm.tool_timeout": "{tool} 在 {seconds:g} 秒内没有回应（`slurmctld` 在运行吗？）",
    "slurm.no_partition":
        "`slurm_partition`：集群中没有这个分区（得到 '{got}'；可选 {known}，即 `sinfo` 列出的分区）",
    "slurm.no_default_partition":
        "`slurm_partition`：集群没有默认分区（未填写；可选 {known}，即 `sinfo` 列出的分区）",
    "slurm.too_many_gpus":
        "`slurm_gpus_per_node`：超过分区 '{partition}' 中一个节点的 GPU 数（得到 {got}；最多 {most}；"
        "`sinfo`：{nodes}）",
    "slurm.too_many_nodes":
        "`num_machines`：超过分区 '{partition}' 的节点数（得到 {got}；最多 {most}；"
        "`sinfo`：{nodes}）",
    "slurm.bad_time_limit":
        "`slurm_time_limit`：不是 `SLURM` 的时间格式（得到 '{got}'；可用分钟数、`MM:SS`、`HH:MM:SS`、"
        "`D-HH`、`D-HH:MM` 或 `D-HH:MM:SS`）",
    "slurm.bad_memory": "`slurm_mem_per_task`：不是 `SLURM` 的容量格式（得到 '{got}'；例如 `64G`、`500M`）",
    "slurm.bad_count": "{field}：必须不小于 {least}（得到 {got}）",
    "slurm.bad_env_name":
        "`slurm_nccl_env`：不是环境变量名（得到 '{got}'；只能用字母、数字和 `_`，且不能以数字开头）",
    "slurm.bad_setup_line": "`slurm_setup_lines`：每行一条命令（有一行含有换行符）",
    "slurm.packed_gpus":
        "`machines_per_node`：只有在 `CPU` 上多个启动器才能共用一个节点（得到 {n}，"
        "`slurm_gpus_per_node` 为 {gpus}；使用 `GPU` 时只允许 1：每个启动器都会看到节点上的所有 `GPU`）",
    "slurm.submit_refused": "`sbatch` 拒绝了该作业：{why:q}",
    "slurm.no_job_id": "`sbatch` 没有给出作业号：{why:q}",
    "slurm.unknown_job": "作业 {job}：`SLURM` 中没有这个作业（`squeue`、`sacct` 和 `scontrol` 都查不到）",
    "slurm.cannot_resume": "作业 {job} {status:@status}：只有已停止或失败的作业可以恢复",
    "slurm.not_in_step": "不在 `SLURM` 的作业步骤中：没有设置 {name}（请在 `srun` 下运行）",
    # ---------------------------------------------------------------- the app's runner
    "slurm.local_runner":
        "`executor`：本服务器自己运行各阶段（得到 '{executor}'；可选 `local`，或用 "
        "`launch.py --executor slurm` 启动服务器）",
    "slurm.no_secret_env":
        "为单次运行输入的令牌无法在不写入文件的情况下交给 `SLURM` 作业（得到 {keys}）；请把它设在服务器"
        "启动时的环境中（作业会继承），或者留空",
    "slurm.setup_admins_only":
        "`slurm_setup_lines`：`SLURM` 作业的命令行只能由管理员设置（得到 {n} 行；允许：不填，使用服务器的 "
        "`--slurm-setup` 命令行）",
    "slurm.nccl_only":
        "`slurm_nccl_env`：只能设置 `NCCL` 变量（得到 '{got}'；允许：以 `NCCL_` 开头的名称）",
    "slurm.job_lost":
        "`SLURM` 已不再记得作业 {job}（`squeue`、`sacct` 和 `scontrol` 都查不到）：没有看到它的结束；"
        "运行文件夹中的日志说明它进行到了哪里",
    "slurm.resubmit_failed": "新的 `SLURM` 作业被拒绝：{why}",
    # ---------------------------------------------------------------- where a job stands
    "slurm.queued": "在 `SLURM` 队列中等待（作业 {job}；原因：{reason:q}）",
    "slurm.running": "作为 `SLURM` 作业 {job} 在 {nodes} 上运行",
    "slurm.ended": "`SLURM` 作业 {job} 已结束：{state}，退出码 {exit}",
    "slurm.requeued":
        "已被 `SLURM` 重新排队（第 {n} 次重启：被抢占，或由管理员重新排队），在队列中等待（作业 {job}；"
        "原因：{reason:q}）；它会自动从最后保存的状态继续",
    "slurm.running_requeued":
        "作为 `SLURM` 作业 {job} 在 {nodes} 上运行，重新排队（抢占）后的第 {n} 次重启："
        "已完成的阶段被跳过，训练从最后保存的状态继续",
    "slurm.ended_requeued":
        "`SLURM` 作业 {job} 已结束：{state}，退出码 {exit}，其间重新排队 {n} 次（每次都从最后保存的状态继续）",
    # ---------------------------------------------------------------- the time limit
    "slurm.time_too_short":
        "`slurm_time_limit`：短于本次运行所需（得到 {got}，即 {limit_s} 秒；至少约需 {need}：{steps} 步 × "
        "每步 {s_per_step} 秒，这是运行 {run} 在相同模型系列、分辨率和 `DeepSpeed` 设置下用 {measured} 步测得的，"
        "另加 {extra_s} 秒用于第一阶段、样图和启动）",
    "slurm.time_checked":
        "`slurm_time_limit` {got} 足够（估计约需 {need}：{steps} 步 × 每步 {s_per_step} 秒，由运行 {run} 测得，"
        "另加 {extra_s} 秒用于其他阶段）",
    "slurm.time_unchecked":
        "无法检查 `slurm_time_limit` {got}：此前没有相同模型系列、分辨率和 `DeepSpeed` 设置的 `SLURM` 运行"
        "测得每步秒数（计划 {steps} 步）；本次运行会为下一次测出它",
    "slurm.time_unchecked_steps":
        "无法检查 `slurm_time_limit` {got}：在这里读不到数据集，不知道步数（设置 `max_train_steps` 即可检查）",
    # ---------------------------------------------------------------- the storage probe
    "slurm.probe_idle": "共享存储：尚未检查（第一次 `SLURM` 运行时检查）",
    "slurm.probe_pending":
        "共享存储：等待中，探测作业 {job} 在 `SLURM` 队列中等待（原因：{reason:q}）；运行不会因此被耽搁",
    "slurm.probe_running": "共享存储：探测作业 {job} 正在运行",
    "slurm.probe_ok": "共享存储：正常，探测作业 {job} 在节点 {node} 上于 {written} 写下的文件在这里可以读到",
    "slurm.probe_missing":
        "警告：共享存储：探测作业 {job} 在 {node} 上运行过（以 {state} 结束），但它的文件 {path} "
        "在这里看不到。各节点必须以与本服务器相同的路径挂载运行文件夹 {folder}（以及模型文件夹），"
        "否则发往 `SLURM` 的运行无法读取配置，也无法把日志和检查点写到页面读取的位置。",
    "slurm.probe_refused": "共享存储：探测作业无法提交：{why}",
    # ---------------------------------------------------------------- end states explained
    "slurm.timeout": "作业到达了时间上限（`TIMEOUT`）",
    "slurm.timeout_explained":
        "作业的时间上限（{limit}）用完时 `SLURM` 结束了它：该阶段先收到 `SIGTERM`，过了集群的 "
        "`KillWait` 后收到 `SIGKILL`。训练在收到 `SIGTERM` 时保存状态，所以恢复会从最后保存的状态继续。",
    "slurm.fix_time_limit":
        "调大 `slurm_time_limit`（现为 {limit}），不超过分区的 `MaxTime`（`scontrol show partition`）。",
    "slurm.fix_fewer_steps":
        "或者每个作业少训练一些步（`max_train_steps`），余下的用恢复继续；更频繁地保存（`save_steps`），"
        "时间用完时损失更少。",
    "slurm.node_fail": "作业的一个节点出了故障（`NODE_FAIL`）",
    "slurm.node_fail_explained":
        "作业运行时一个节点不再回应 `SLURM` 的控制器（硬件、网络或 `slurmd` 崩溃），该阶段被直接终止。"
        "这不是运行的任何设置造成的。",
    "slurm.fix_resume_saved": "恢复运行：训练从最后保存的状态继续（`save_steps` 决定多久保存一次）。",
    "slurm.fix_bad_node":
        "如果同一个节点再次出现这种情况，请联系集群管理员（`sinfo -R` 列出节点停用的原因），"
        "或者避开这些节点（`slurm_constraint`）。",
    "slurm.oom": "作业超过了内存上限（`OUT_OF_MEMORY`）",
    "slurm.oom_explained":
        "该阶段使用的主机内存（RAM，不是显存）超过了作业申请的量（`slurm_mem_per_task` 现为 {mem}），"
        "被 `SLURM` 的内存限制终止。",
    "slurm.fix_more_memory": "申请更多内存（`slurm_mem_per_task` 现为 {mem}），不超过节点的内存（`sinfo -o '%N %m'`）。",
    "slurm.fix_less_ram":
        "少占用内存：ZeRO 的 CPU 卸载把参数和优化器状态放在内存中；改为卸载到 NVMe（"
        "`offload_param_device` / `offload_optimizer_device`：`nvme`），或减少 DataLoader 的"
        "工作进程（`dataset_num_workers`）。",
    "slurm.preempted": "优先级更高的作业占用了节点（`PREEMPTED`）",
    "slurm.preempted_explained":
        "集群为另一个作业抢占了本作业。重新排队的作业会自动从最后保存的状态继续；本作业没有重新排队"
        "（分区的 `PreemptMode` 是取消，或者关闭了重新排队）。",
    "slurm.fix_resume": "恢复运行：从最后保存的状态继续。",
    "slurm.fix_no_preempt": "或者提交到不会被抢占的分区或 `QoS`（`slurm_partition`、`slurm_qos`）。",
    "slurm.cancelled": "作业在本应用之外被结束（`{state}`）",
    "slurm.cancelled_explained":
        "`SLURM` 作业 {job} 被取消，或者它的阶段收到了 `SIGTERM`，但不是通过本页面的停止按钮："
        "某个人或脚本执行了 `scancel`，或者集群管理员结束了它。训练在收到 `SIGTERM` 时会保存状态，"
        "所以几乎没有损失。",
    "slurm.fix_stop_from_page":
        "要停止运行，请使用页面上的停止按钮（`scancel --signal=TERM`：阶段先保存状态），"
        "不要直接用 `scancel` 或 `scancel --signal=KILL`。",
    "slurm.killed": "`SLURM` 用 `SIGKILL` 终止了作业的阶段（作业以 `{state}` 结束）",
    "slurm.killed_explained":
        "`SLURM` 作业 {job} 的一个步骤收到了 `SIGKILL`（对该作业步骤执行了 `scancel --signal=KILL`，"
        "或者 `slurmd` 在执行某个限制）：阶段来不及保存，自上次检查点以来的步数丢失；作业后面的阶段没有运行。",
    "slurm.fix_who_killed":
        "如果没有人发送它，请查问 `SLURM` 原因（`sacct -j {job}`、节点的 `slurmd` 日志）：超出内存的步骤"
        "也会被终止；可以申请更多内存（`slurm_mem_per_task` 现为 {mem}）。",
}
