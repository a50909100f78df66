"""What the engine's placement passes share: which jobs a pass considers (and which quota bounds
them), and a job chosen to be placed next."""

from __future__ import annotations

from dataclasses import dataclass

from apps.jobs.scheduler.state import QueuedJob

# Which jobs a placement pass considers and which quota bounds them.
GUARANTEE = "guarantee"  # fairshare phase 2: within the team's guarantee
SPARE = "spare"  # fairshare phase 3: within the limit
BASELINE = "baseline"  # fifo / sjf: within the limit, every class


@dataclass(slots=True)
class Candidate:
    key: tuple
    job: QueuedJob
    model: str
    picks: list[int] | None  # found already (booked GPUs in play), else found when placed
