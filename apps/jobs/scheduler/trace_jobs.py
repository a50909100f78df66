"""The jobs of a trace as the replayer reads them (``TraceJob``) and which of them can ever run
on a fleet (``admissible``). Pure Python, no Django."""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass, replace

from apps.jobs.scheduler.state import GpuInfo, TeamQuota
from apps.teams.quota_rule import QuotaRule


@dataclass(frozen=True, slots=True)
class TraceJob:
    job_id: int
    submit: float  # seconds
    duration: float  # seconds of work
    gpus: int
    team: str
    model: str | None = None  # None: any model
    max_runtime: float | None = None  # the limit its user gave; see replay's docstring
    same_node: bool = True  # ignored for jobs larger than every node (multi-node gangs)
    checkpointable: bool = False
    user: str | None = None  # who submitted it, when the trace says: fair share inside a team


class FleetSizes:
    """Sizes the replay needs to decide whether a job can ever run and on how many nodes."""

    def __init__(self, gpus: list[GpuInfo], quotas: list[TeamQuota], units=None) -> None:
        node_sizes = Counter((g.model, g.node) for g in gpus)
        self.per_model: dict[str, int] = Counter(g.model for g in gpus)
        self.largest: dict[str, int] = defaultdict(int)
        for (model, _), n in node_sizes.items():
            self.largest[model] = max(self.largest[model], n)
        self.quota = QuotaRule(quotas, *((units.rows, units.tree) if units else ()))

    def multi_node(self, job: TraceJob) -> bool:
        """A job no node can hold alone runs across nodes, whatever the trace says."""
        models = [job.model] if job.model else list(self.per_model)
        return not job.same_node or all(job.gpus > self.largest.get(m, 0) for m in models)

    def fits_ever(self, job: TraceJob) -> bool:
        for model, total in self.per_model.items():
            if job.model is not None and job.model != model:
                continue
            if job.gpus <= total and job.gpus <= self.quota.ceiling(job.team, model):
                return True
        return False


def admissible(jobs: list[TraceJob], fleet: FleetSizes) -> tuple[list[TraceJob], int]:
    """The jobs that can ever run, in arrival order, each marked multi-node if no node can
    hold it; and how many were left out. Fit is cached per shape: traces repeat shapes a lot."""
    fit_cache: dict[tuple, bool] = {}
    arrivals: list[TraceJob] = []
    never_fit = 0
    for j in jobs:
        key = (j.gpus, j.team, j.model)
        if key not in fit_cache:
            fit_cache[key] = fleet.fits_ever(j)
        if fit_cache[key]:
            same_node = not fleet.multi_node(j)
            arrivals.append(j if j.same_node == same_node else replace(j, same_node=same_node))
        else:
            never_fit += 1
    arrivals.sort(key=lambda j: (j.submit, j.job_id))
    return arrivals, never_fit
