"""Moved to ``backend.jobs.diagnosis``; this name stays for code written before the move."""
import sys

from backend.jobs import diagnosis

sys.modules[__name__] = diagnosis
