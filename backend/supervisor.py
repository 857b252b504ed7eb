"""The run supervisor's old address: ``python -m backend.supervisor <workspace> <run_id>``.

The supervisor lives in ``backend.jobs.supervisor`` now (the history in ``backend.jobs.history``,
processes in ``backend.jobs.processes``, the queue in ``backend.jobs.queue``). This module keeps
the entry point that supervisors of runs queued before the move were started with, and the
names code written before the move imports from here.
"""
import sys

from backend.jobs.history import (  # noqa: F401 - re-exported
    ADDED_COLUMNS, DB_NAME, SCHEMA, SCHEMA_VERSION, TERMINAL, connect, db_path, get_setting,
    init_db, set_setting, transaction)
from backend.jobs.processes import (  # noqa: F401
    REPO_ROOT, RUN_MARKER, SECRET_PREFIX, ProcessTree, become_subreaper, child_env, group_alive,
    marked_pids, process_alive, process_start_time, runner_env, spawn_supervisor)
from backend.jobs.queue import (  # noqa: F401
    DEFAULT_MIN_FREE_DISK, LAUNCH_PENDING_S, disk_refusal, free_disk_bytes, gpu_sets_overlap,
    human_bytes, normalize_gpu_ids, ready_runs, start_ready)
from backend.jobs.supervisor import (  # noqa: F401
    DEFAULT_STOP_GRACE_S, LEFTOVER_GRACE_S, Supervisor, main)
from backend.jobs.watch import LOG_PREFIX, STAGE_HEADER, last_end_event, read_tail  # noqa: F401

if __name__ == "__main__":
    sys.exit(main())
