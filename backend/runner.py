"""The job runner's old address: the runner lives in ``backend.jobs.runner`` now.

Code written before the move imports ``Runner``, ``RunnerError`` and ``new_run_id`` from here;
new code imports ``backend.jobs.runner``.
"""
from backend.jobs.runner import (  # noqa: F401 - re-exported
    ENV_NAME, RESUME_FLAG, SECRET_KEY, STAGE_NAME, Runner, RunnerError, StagePlan, new_run_id,
    with_resume_from)

__all__ = ["Runner", "RunnerError", "StagePlan", "new_run_id"]
