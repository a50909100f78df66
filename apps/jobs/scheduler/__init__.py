"""The job scheduler: pure Python, shared by the live dispatcher and the trace replayer."""

from apps.jobs.scheduler.core import POLICIES, SPARE_ORDERS, SchedulerConfig, schedule
from apps.jobs.scheduler.usage import decay_usage

__all__ = ["POLICIES", "SPARE_ORDERS", "SchedulerConfig", "decay_usage", "schedule"]
