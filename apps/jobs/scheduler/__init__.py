"""The job scheduler: pure Python, shared by the live dispatcher and the trace replayer."""

from apps.jobs.scheduler.core import POLICIES, SchedulerConfig, decay_usage, schedule

__all__ = ["POLICIES", "SchedulerConfig", "decay_usage", "schedule"]
