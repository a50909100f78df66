"""The idle dashboard's GPU states, judged in one SQL query, are those the per-GPU Python loop
judged: every state, holder, signal and power label, for a user who sees every team and for one
who sees only some."""

from datetime import timedelta

import pytest
from django.db.models import Count
from django.utils import timezone

from apps.dashboards.selectors import UNALLOCATED, Filters
from apps.dashboards.selectors.idle import POWERED_DOWN, gpu_state_counts, gpu_states_now
from apps.fleet.choices import GpuHealth, GpuStatus, NodeStatus, PowerState
from apps.fleet.models import Gpu, Node
from apps.fleet.transitions import POWERED_DOWN_STATES
from apps.jobs.choices import JobStatus
from apps.jobs.holdings import allocations_holding_at
from apps.jobs.models import JobAllocation
from apps.reservations.holdings import bookings_holding_at
from apps.teams.models import Team
from apps.telemetry.activity import busy_minute_q, window_signal
from apps.telemetry.models import GpuMinuteRollup
from tests.dashboards.conftest import book, rollup
from tests.factories import JobFactory, TeamFactory, make_node_with_gpus

pytestmark = pytest.mark.django_db


def per_gpu_loop(filters: Filters, now) -> list[dict]:
    """The states as the dashboard judged them before, GPU by GPU in Python."""
    gpus = Gpu.objects.filter(mig_parent__isnull=True).select_related("node", "model")
    if filters.gpu_model:
        gpus = gpus.filter(model=filters.gpu_model)
    gpus = list(gpus.exclude(status=GpuStatus.RETIRED).exclude(node__status=NodeStatus.RETIRED))
    holders = dict(bookings_holding_at(now).values_list("gpu_id", "reservation__team_id"))
    for gpu_id, team_id in allocations_holding_at(now).values_list("gpu_id", "job__team_id"):
        holders.setdefault(gpu_id, team_id)
    activity = {
        row["gpu_id"]: row
        for row in GpuMinuteRollup.objects.filter(bucket__gte=now - timedelta(minutes=5))
        .values("gpu_id")
        .annotate(busy=Count("id", filter=busy_minute_q()), gpm_minutes=Count("sm_active_avg"))
    }
    visible = set(filters.team_ids)
    slugs = dict(Team.objects.filter(pk__in=visible).values_list("pk", "slug"))
    result = []
    for gpu in gpus:
        team_id = holders.get(gpu.pk)
        if (
            gpu.health != GpuHealth.HEALTHY
            or gpu.status != GpuStatus.ACTIVE
            or gpu.node.status != NodeStatus.UP
        ):
            state = "unhealthy"
        elif gpu.node.power_state in POWERED_DOWN_STATES:
            state = POWERED_DOWN
        elif team_id is not None and team_id not in visible:
            state = "held_other"
        elif team_id is None:
            state = UNALLOCATED
        elif (activity.get(gpu.pk) or {}).get("busy"):
            state = "busy"
        else:
            state = "held_idle"
        recent = activity.get(gpu.pk)
        result.append(
            {
                "gpu_id": gpu.pk,
                "node": gpu.node.hostname,
                "index": gpu.index,
                "model": gpu.model.name,
                "state": state,
                "team": slugs.get(team_id, ""),
                "signal": "" if recent is None else window_signal(recent["gpm_minutes"]),
                "power": gpu.node.get_power_state_display().lower()
                if state == POWERED_DOWN
                else "",
            }
        )
    return result


@pytest.fixture
def fleet_now(fleet, team, other_team, member, outsider):
    """Three teams' GPUs busy, idle and held by jobs, besides unheld, unhealthy, drained and
    powered-down ones, some reporting SM activity (GPM)."""
    now = timezone.now().replace(second=0, microsecond=0)
    third = TeamFactory(slug="audio", name="Audio")
    make_node_with_gpus("h100-c", 8)
    make_node_with_gpus("h100-d", 4)
    h100a = list(Gpu.objects.filter(node__hostname="h100-a").order_by("index"))
    h100b = list(Gpu.objects.filter(node__hostname="h100-b").order_by("index"))
    h100c = list(Gpu.objects.filter(node__hostname="h100-c").order_by("index"))
    held = now - timedelta(hours=1), now + timedelta(hours=1)
    book(team, member, h100a[:4], *held)
    book(other_team, outsider, h100a[4:8], *held)
    book(third, member, h100b[:3], *held)
    book(team, member, h100c[:2], now - timedelta(hours=3), now - timedelta(hours=2))  # ended
    for gpu, owner in ((h100b[3], other_team), (h100b[4], third), (h100c[2], team)):
        job = JobFactory(team=owner, status=JobStatus.RUNNING, gpu_count=1)
        JobAllocation.objects.create(job=job, gpu=gpu, start=now - timedelta(minutes=30))
    minutes = []
    for i, gpu in enumerate([*h100a, *h100b[:5], h100c[0], h100c[2]]):
        for m in range(1, 8):  # the last 5 minutes count; the two before do not
            busy = 0 if i % 3 == 0 else (60 if m % (i % 4 + 1) == 0 else 0)
            minute = rollup(GpuMinuteRollup, gpu, now - timedelta(minutes=m), None, 40, busy)
            minute.sm_active_avg = 30.0 if i % 2 and m % 2 else None
            minutes.append(minute)
    GpuMinuteRollup.objects.bulk_create(minutes)
    Gpu.objects.filter(pk=h100a[1].pk).update(health=GpuHealth.DEGRADED)
    Gpu.objects.filter(pk=h100b[0].pk).update(status=GpuStatus.DRAINED)
    Gpu.objects.filter(pk=h100c[7].pk).update(status=GpuStatus.RETIRED)
    Node.objects.filter(hostname="h100-d").update(power_state=PowerState.OFF)
    Node.objects.filter(hostname="l40s-a").update(status=NodeStatus.UNREACHABLE)
    return now, [team, other_team, third]


def filters_for(teams, *, gpu_model=None, sees_all=False):
    now = timezone.now()
    return Filters(
        start=now - timedelta(days=1),
        end=now,
        range="24h",
        teams=tuple(teams),
        team_slug="",
        gpu_model=gpu_model,
        sees_all=sees_all,
    )


@pytest.mark.parametrize("seen", ["all", "one", "two", "none"])
def test_states_in_sql_equal_the_per_gpu_loop(fleet_now, seen, h100):
    now, teams = fleet_now
    visible = {"all": teams, "one": teams[:1], "two": teams[1:], "none": []}[seen]
    filters = filters_for(visible, sees_all=seen == "all")
    expected = per_gpu_loop(filters, now)
    assert gpu_states_now(filters, now=now) == expected
    states = {s["state"] for s in expected}
    if seen == "all":  # the fixture reaches every state
        assert states == {"busy", "held_idle", UNALLOCATED, "unhealthy", POWERED_DOWN}
        assert {s["signal"] for s in expected} == {"", "util", "sm_active"}
        assert {s["team"] for s in expected} == {"", "vision", "nlp", "audio"}
    else:
        assert "held_other" in states
    counts = {state: sum(1 for s in expected if s["state"] == state) for state in states}
    assert gpu_state_counts(filters, now=now) == counts
    h100_only = filters_for(visible, gpu_model=h100, sees_all=seen == "all")
    assert gpu_states_now(h100_only, now=now) == per_gpu_loop(h100_only, now)
