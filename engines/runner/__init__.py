"""One runner per model: its admission queue, its loader and its model thread, composed."""

from engines.job import Job
from engines.runner.runner import DEFAULT_RETRY_AFTER_S, Runner

__all__ = ["DEFAULT_RETRY_AFTER_S", "Job", "Runner"]
