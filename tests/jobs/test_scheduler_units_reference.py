"""The engine with unit rows and bookings ahead decides as the quota rule asked afresh for
every question: its cached holdings, swept peaks and answers (kept per team and per unit,
updated as jobs start and dropped as they end) never change a decision."""

from __future__ import annotations

import random

import pytest

from apps.jobs.scheduler import core
from apps.jobs.scheduler.core import engine_from_state
from apps.jobs.scheduler.quotas import QuotaBook
from apps.jobs.scheduler.state import (
    Booking,
    ClusterState,
    GpuInfo,
    PriorityClass,
    QueuedJob,
    RunningJob,
    TeamQuota,
)
from apps.teams.org_tree import OrgTree
from apps.teams.quota_rule import Holdings, UnitQuotaRow, job_held_until

NOW = 1_000_000.0
MODELS = ("H100", "L40S")
TEAMS = [f"team{k}" for k in range(8)]
# org > lab > {team0, team1, team2}; org > ops > {team3, team4}, ops > edge > {team5};
# org > {team6, team7}
TREE = OrgTree(
    {"org": None, "lab": "org", "ops": "org", "edge": "ops"},
    {
        "team0": "lab",
        "team1": "lab",
        "team2": "lab",
        "team3": "ops",
        "team4": "ops",
        "team5": "edge",
        "team6": "org",
        "team7": "org",
    },
)
QUOTAS = [TeamQuota(t, m, 4, 24) for t in TEAMS for m in MODELS] + [TeamQuota("team2", None, 6, 30)]
# Below the sums of their teams' limits, so they bind.
UNIT_QUOTAS = [
    UnitQuotaRow("lab", "H100", 12, 22),
    UnitQuotaRow("lab", None, 24, 32),
    UnitQuotaRow("ops", "L40S", 12, 26),
    UnitQuotaRow("edge", None, 4, 10),
]


class FreshQuotaBook(QuotaBook):
    """Answers ``room`` and ``fits_window`` from what teams hold, nothing kept between
    questions: the quota rule itself over every booking and running job."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.running: dict[int, RunningJob] = {}
        self.answers: list[bool] = []

    def start(self, run: RunningJob) -> None:
        self.running[run.job_id] = run
        super().start(run)

    def stop(self, run: RunningJob) -> None:
        del self.running[run.job_id]
        super().stop(run)

    def room(self, team, model, *, guarantee):
        return self.rule.room(
            team,
            model,
            self.used[(team, model)],
            self.used[(team, None)],
            guarantee=guarantee,
            unit_held=self.unit_used,
        )

    def fits_window(self, team, model, count, start, end, grace, *, guarantee):
        holdings = Holdings()
        for who, spans in self.booked.items():
            for s, e, m, n in spans.values():
                holdings.add(who, m, s, e, n)
        for run in self.running.values():
            ends = job_held_until(run.started_at + run.max_runtime, start, grace)
            holdings.add(run.team, run.model, run.started_at, ends, len(run.gpu_ids))
        verdict = self.rule.admit(team, model, count, start, end, holdings)
        answer = verdict.admitted and not (guarantee and verdict.over_guarantee)
        self.answers.append(answer)
        return answer


def cluster(seed: int) -> ClusterState:
    rng = random.Random(seed)
    gpus = [
        GpuInfo(n * 8 + i, f"node-{n:02d}", MODELS[n % 2], f"nvl-{n // 2}")
        for n in range(24)
        for i in range(8)
    ]
    running = []
    for j in range(24):  # about half the GPUs busy, a third of them borrowed
        ids = tuple(g.gpu_id for g in gpus[j * 4 : j * 4 + 4])
        running.append(
            RunningJob(
                j,
                rng.choice(TEAMS),
                gpus[j * 4].model,
                ids,
                NOW - rng.uniform(0, 3600),
                rng.choice([1800.0, 7200.0]),
                PriorityClass.OVER_QUOTA,
                over_quota=j % 3 == 0,
            )
        )
    # Bookings ahead for a team of lab, of edge and of none, and one active for a team of ops.
    bookings = [Booking(1, "team1", gpus[-1 - i].gpu_id, NOW + 1800, NOW + 7200) for i in range(8)]
    bookings += [Booking(2, "team5", gpus[-9 - i].gpu_id, NOW + 900, NOW + 5400) for i in range(6)]
    bookings += [Booking(3, "team7", gpus[-17 - i].gpu_id, NOW + 600, NOW + 3000) for i in range(4)]
    bookings += [Booking(4, "team3", gpus[120 + i].gpu_id, NOW - 600, NOW + 2400) for i in range(4)]
    queued = [
        QueuedJob(
            1000 + j,
            rng.choice(TEAMS),
            rng.choice([*MODELS, None]),
            rng.choice([1, 1, 2, 4, 8]),
            rng.choice([600.0, 3600.0, 14400.0]),
            NOW - rng.uniform(0, 86400),
            priority_class=rng.choice([PriorityClass.OVER_QUOTA] * 4 + [PriorityClass.GUARANTEED]),
        )
        for j in range(400)
    ]
    return ClusterState(
        NOW,
        gpus,
        queued,
        running,
        bookings,
        QUOTAS,
        {t: rng.uniform(0, 1e6) for t in TEAMS},
        unit_quotas=UNIT_QUOTAS,
        org_tree=TREE,
    )


def three_cycles(state: ClusterState, policy: str) -> tuple[list, object]:
    """The decisions of three cycles of one engine: jobs end and new ones queue between."""
    engine = engine_from_state(state, policy)
    decisions = [engine.cycle(NOW, state.usage)]
    rng = random.Random(1)
    for k, now in enumerate((NOW + 300, NOW + 1200)):
        for job_id in sorted(rng.sample(sorted(engine.running), 6)):
            engine.remove_running(job_id)
        engine.enqueue_many(
            [
                QueuedJob(5000 + 100 * k + j, TEAMS[j % 8], MODELS[j % 2], 1 + j % 4, 3600.0, now)
                for j in range(20)
            ]
        )
        decisions.append(engine.cycle(now, state.usage))
    return decisions, engine.quotas


@pytest.mark.parametrize("policy", ["fairshare", "fifo"])
@pytest.mark.parametrize("seed", [2, 4, 6])
def test_unit_rows_and_bookings_ahead_decide_as_the_rule_asked_afresh(monkeypatch, policy, seed):
    state = cluster(seed)
    kept, _ = three_cycles(state, policy)
    monkeypatch.setattr(core, "QuotaBook", FreshQuotaBook)
    fresh, book = three_cycles(state, policy)
    assert kept == fresh
    # The cycles asked about windows beside bookings ahead, and the rule refused some.
    assert True in book.answers and False in book.answers
    assert sum(len(d.placements) for d in kept) > 20
