"""The entry point supervisors of runs queued before ``backend/jobs`` existed were started
with (``python -m backend.supervisor <workspace> <run_id>``): it runs today's supervisor.
Nothing imports names from here; code imports ``backend.jobs.*``."""
import sys

from backend.jobs.supervisor import main

if __name__ == "__main__":
    sys.exit(main())
