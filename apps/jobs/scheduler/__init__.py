"""The job scheduler: pure Python, shared by the live dispatcher and the trace replayer."""

from apps.jobs.scheduler.config import POLICIES, SPARE_ORDERS, SchedulerConfig
from apps.jobs.scheduler.core import schedule
from apps.jobs.scheduler.usage import decay_usage

__all__ = ["POLICIES", "SPARE_ORDERS", "SchedulerConfig", "decay_usage", "schedule"]
