"""The (hour, team, GPU model) sums behind the month-long dashboards: kept with the hour
rollups (late samples included), and giving the same numbers as a direct computation from the
per-GPU hour rollups on seeded data."""

import random
from collections import defaultdict
from datetime import timedelta

import pytest
from django.utils import timezone

from apps.dashboards import selectors
from apps.dashboards.selectors import UNALLOCATED
from apps.fleet.models import Gpu
from apps.telemetry.choices import IdleKind
from apps.telemetry.idle import idle_hours_rollup
from apps.telemetry.ingest import telemetry_ingest_many
from apps.telemetry.models import (
    GpuHourRollup,
    GpuMinuteRollup,
    IdleInterval,
    TeamModelHourRollup,
)
from apps.telemetry.rollups import rollup_hours, rollup_late, rollup_team_models
from apps.telemetry.selectors import idle_hours_by_step, team_model_totals
from tests.telemetry.conftest import batch, sample

pytestmark = pytest.mark.django_db

SUMMED = ("gpu_hours", "samples", "busy_seconds", "util_sum", "util_n", "sm_active_sum")


def _direct_groups():
    """(bucket, team, model) sums computed here from the per-GPU hour rollups."""
    groups = defaultdict(lambda: defaultdict(float))
    for row in GpuHourRollup.objects.select_related("gpu"):
        cell = groups[(row.bucket, row.team_id, row.gpu.model_id)]
        cell["gpu_hours"] += 1
        cell["samples"] += row.samples
        cell["busy_seconds"] += row.busy_seconds
        cell["util_sum"] += row.util_avg or 0
        cell["util_n"] += row.util_avg is not None
        cell["sm_active_sum"] += row.sm_active_avg or 0
    return {key: dict(values) for key, values in groups.items()}


def _stored_groups():
    groups = {}
    for row in TeamModelHourRollup.objects.all():
        key = (row.bucket, row.team_id, row.gpu_model_id)
        assert key not in groups, f"group {key} stored twice"
        groups[key] = {name: getattr(row, name) or 0 for name in SUMMED}
    return groups


def _assert_same(stored, direct):
    assert set(stored) == set(direct)
    for key, values in direct.items():
        assert stored[key] == pytest.approx(values), key


@pytest.fixture
def now():
    return timezone.now().replace(microsecond=0)


def test_sums_are_written_with_the_hour_rollups_and_follow_re_rollups(fleet, team, other_team):
    rng = random.Random(5)
    gpus = list(Gpu.objects.filter(node__hostname__in=["h100-a", "l40s-a"]).order_by("id")[:10])
    start = timezone.now().replace(minute=0, second=0, microsecond=0) - timedelta(hours=4)
    minutes = []
    for gpu in gpus:
        for m in range(180):
            util = rng.uniform(0, 100)
            minutes.append(
                GpuMinuteRollup(
                    gpu=gpu,
                    bucket=start + timedelta(minutes=m),
                    team=rng.choice([team, other_team, None]) if m % 60 == 0 else None,
                    samples=4,
                    util_avg=util,
                    util_max=int(util),
                    busy_seconds=rng.choice([0.0, 15.0, 60.0]),
                    sm_active_avg=util / 2 if gpu.model.name.startswith("H100") else None,
                )
            )
    GpuMinuteRollup.objects.bulk_create(minutes)
    rollup_hours(start=start, end=start + timedelta(hours=3))
    direct = _direct_groups()
    assert len(direct) >= 3
    _assert_same(_stored_groups(), direct)
    # every GPU of the second hour moves to one team: the other groups of that hour vanish
    second = start + timedelta(hours=1)
    GpuMinuteRollup.objects.filter(
        bucket__gte=second, bucket__lt=second + timedelta(hours=1)
    ).update(team=other_team, busy_seconds=60.0)
    rollup_hours(start=second, end=second + timedelta(minutes=1))
    _assert_same(_stored_groups(), _direct_groups())
    assert {k[1] for k in _stored_groups() if k[0] == second} == {other_team.pk}
    assert rollup_hours(start=start, end=start + timedelta(hours=3)) > 0  # again: same rows
    _assert_same(_stored_groups(), _direct_groups())


def test_late_samples_reach_the_sums(fleet, now):
    gpu = Gpu.objects.filter(node__hostname="h100-a").first()
    uuid = gpu.uuid
    late = (now - timedelta(minutes=40)).replace(second=0)
    telemetry_ingest_many(
        batches=[batch(1, [sample(uuid, late.timestamp() + s, util=90) for s in (0, 15, 30)])]
    )
    rollup_late()
    (row,) = TeamModelHourRollup.objects.all()
    assert (row.bucket, row.gpu_model_id, row.samples) == (
        late.replace(minute=0),
        gpu.model_id,
        3,
    )
    assert row.busy_seconds == 60.0  # one minute, all samples busy
    telemetry_ingest_many(batches=[batch(2, [sample(uuid, late.timestamp() + 45, util=0)])])
    rollup_late()
    (row,) = TeamModelHourRollup.objects.all()  # rewritten, not added to
    assert row.samples == 4 and row.busy_seconds == 45.0
    _assert_same(_stored_groups(), _direct_groups())


@pytest.fixture
def month(fleet, team, other_team):
    """10 days of hour rollups of the 20 GPUs, attributed at random; H100s report GPM."""
    rng = random.Random(11)
    end = timezone.now().replace(minute=0, second=0, microsecond=0)
    start = end - timedelta(days=10)
    rows = []
    for gpu in Gpu.objects.select_related("model"):
        gpm = gpu.model.name.startswith("H100")
        for h in range(240):
            util = rng.choice([None, rng.uniform(0, 100)]) if h % 7 == 0 else rng.uniform(0, 100)
            rows.append(
                GpuHourRollup(
                    gpu=gpu,
                    bucket=start + timedelta(hours=h),
                    team=rng.choice([team, other_team, None]),
                    samples=240,
                    util_avg=util,
                    util_max=None if util is None else int(util),
                    mem_used_avg_mib=rng.uniform(0, 80000),
                    mem_used_max_mib=rng.randint(0, 81559),
                    energy_j=rng.uniform(1e5, 2e6),
                    busy_seconds=rng.uniform(0, 3600),
                    sm_active_avg=rng.uniform(0, 100) if gpm else None,
                )
            )
    GpuHourRollup.objects.bulk_create(rows)
    rollup_team_models(start=start, end=end)
    return start, end


def test_team_model_totals_match_the_hour_rollups(month, team, other_team, h100):
    start, end = month
    window = (start + timedelta(hours=5), end - timedelta(hours=7))
    rows = GpuHourRollup.objects.filter(bucket__gte=window[0], bucket__lt=window[1])
    totals = team_model_totals(start=window[0], end=window[1], unallocated=True)
    assert len(totals) == 3 * 2  # vision, nlp, unallocated x H100, L40S
    for total in totals:
        mine = [
            r
            for r in rows.select_related("gpu")
            if r.team_id == total["team_id"] and r.gpu.model_id == total["gpu_model_id"]
        ]
        utils = [r.util_avg for r in mine if r.util_avg is not None]
        sms = [r.sm_active_avg for r in mine if r.sm_active_avg is not None]
        assert total["gpu_hours"] == len(mine)
        assert total["busy_gpu_hours"] == pytest.approx(sum(r.busy_seconds for r in mine) / 3600)
        assert total["util_avg"] == pytest.approx(sum(utils) / len(utils))
        assert total["energy_kwh"] == pytest.approx(sum(r.energy_j for r in mine) / 3.6e6)
        assert total["mem_used_max_mib"] == max(r.mem_used_max_mib for r in mine)
        if total["gpu_model_id"] == h100.pk:
            assert total["signal"] == "sm_active"
            assert (
                total["activity_avg"]
                == total["sm_active_avg"]
                == pytest.approx(sum(sms) / len(sms))
            )
        else:
            assert total["signal"] == "util" and total["sm_active_avg"] is None
            assert total["activity_avg"] == total["util_avg"]
    only = team_model_totals(
        start=window[0], end=window[1], team_ids=[team.pk], gpu_model_id=h100.pk
    )
    assert [(t["team_id"], t["gpu_model_id"]) for t in only] == [(team.pk, h100.pk)]
    assert all(t["team_id"] is not None for t in team_model_totals(start=start, end=end))
    assert team_model_totals(start=start, end=end, team_ids=[]) == []


def test_utilization_series_matches_a_direct_computation(month, platform_admin):
    start, end = month
    filters = selectors.parse_filters({"range": "7d"}, platform_admin, now=end)
    result = selectors.utilization_series(filters)
    step = result["step"]
    slugs = {t.pk: t.slug for t in filters.teams}
    busy = defaultdict(lambda: defaultdict(float))
    util = defaultdict(list)
    for row in GpuHourRollup.objects.filter(
        bucket__gte=filters.start, bucket__lt=filters.end
    ).select_related("gpu__model"):
        name = slugs[row.team_id] if row.team_id else UNALLOCATED
        t = result["times"][0] + step * ((row.bucket - result["times"][0]) // step)
        busy[name][t] += row.busy_seconds / 3600 / (step / timedelta(hours=1))
        if row.team_id and row.util_avg is not None:
            util[(name, row.gpu.model.name)].append(row.util_avg)
    assert set(result["busy"]) == set(busy)
    for name, series in result["busy"].items():
        expected = [round(busy[name].get(t, 0.0), 3) for t in result["times"]]
        assert series == pytest.approx(expected, abs=0.002)
    assert {(r["team_slug"], r["model_name"]): r["util"] for r in result["by_team_model"]} == (
        pytest.approx({key: sum(v) / len(v) for key, v in util.items()})
    )
    sm = {(r["team_slug"], r["model_name"]): r["sm_active"] for r in result["by_team_model"]}
    assert {key for key, value in sm.items() if value is not None} == {
        (name, "H100-SXM-80GB") for name in ("nlp", "vision")
    }
    for (name, model), value in sm.items():
        if value is not None:
            rows = GpuHourRollup.objects.filter(
                bucket__gte=filters.start, bucket__lt=filters.end, team__slug=name,
                gpu__model__name=model,
            )  # fmt: skip
            values = [r.sm_active_avg for r in rows]
            assert value == pytest.approx(sum(values) / len(values))


def test_idle_hours_are_summed_in_sql_as_by_hand(fleet, team, other_team, h100):
    gpus = list(Gpu.objects.filter(node__hostname="h100-a").order_by("index"))
    l40s = Gpu.objects.filter(node__hostname="l40s-a").first()
    day = timezone.now().replace(hour=0, minute=0, second=0, microsecond=0) - timedelta(days=5)
    IdleInterval.objects.bulk_create(
        [
            # 22:00 day 0 -> 04:00 day 1: 2 h in day 0, 4 h in day 1
            IdleInterval(gpu=gpus[0], kind=IdleKind.HELD_IDLE, team=team,
                         start=day + timedelta(hours=22), end=day + timedelta(hours=28)),
            # starts before the window (day 0 06:00): only the part inside counts
            IdleInterval(gpu=gpus[1], kind=IdleKind.HELD_IDLE, team=other_team,
                         start=day - timedelta(hours=3), end=day + timedelta(hours=9)),
            IdleInterval(gpu=l40s, kind=IdleKind.UNALLOCATED,
                         start=day + timedelta(days=1, hours=1),
                         end=day + timedelta(days=1, hours=2, minutes=30)),
            # outside the window
            IdleInterval(gpu=gpus[2], kind=IdleKind.HELD_IDLE, team=team,
                         start=day - timedelta(days=2), end=day - timedelta(days=1)),
        ]
    )  # fmt: skip
    idle_hours_rollup(start=day - timedelta(days=2), end=day + timedelta(days=3))
    start, end = day + timedelta(hours=6), day + timedelta(days=3)
    times = [day + timedelta(days=d) for d in range(3)]
    args = {"start": start, "end": end, "times": times, "step": timedelta(days=1)}
    by_hand = {
        (day, IdleKind.HELD_IDLE, team.pk, h100.pk): 2.0,
        (day + timedelta(days=1), IdleKind.HELD_IDLE, team.pk, h100.pk): 4.0,
        (day, IdleKind.HELD_IDLE, other_team.pk, h100.pk): 3.0,
        (day + timedelta(days=1), IdleKind.UNALLOCATED, None, l40s.model_id): 1.5,
    }
    for portable in (False, True):
        rows = idle_hours_by_step(
            **args, team_ids=[team.pk, other_team.pk], unallocated=True, portable=portable
        )
        assert {tuple(r[:4]): r[4] for r in rows} == pytest.approx(by_hand)
        rows = idle_hours_by_step(
            **args, team_ids=[team.pk], gpu_model_id=h100.pk, portable=portable
        )
        assert {tuple(r[:4]): r[4] for r in rows} == pytest.approx(
            {k: v for k, v in by_hand.items() if k[2] == team.pk}
        )
        assert idle_hours_by_step(**args, team_ids=[], portable=portable) == []


def test_idle_sql_matches_the_portable_path_on_random_intervals(fleet, team, other_team):
    rng = random.Random(2)
    base = timezone.now().replace(minute=0, second=0, microsecond=0) - timedelta(days=8)
    intervals = []
    for gpu in Gpu.objects.all():
        t = base + timedelta(minutes=rng.randint(0, 600))
        while t < base + timedelta(days=8):
            length = timedelta(minutes=rng.randint(1, 2000))
            kind = rng.choice(list(IdleKind))
            owner = None if kind == IdleKind.UNALLOCATED else rng.choice([team, other_team])
            intervals.append(IdleInterval(gpu=gpu, kind=kind, team=owner, start=t, end=t + length))
            t += length + timedelta(minutes=rng.randint(1, 900))
    IdleInterval.objects.bulk_create(intervals)
    idle_hours_rollup(start=base, end=base + timedelta(days=10))
    start, end = base + timedelta(days=1, minutes=17), base + timedelta(days=7, hours=3)
    step = timedelta(hours=7)
    times = [start - timedelta(minutes=17) + step * i for i in range(21)]
    args = {"start": start, "end": end, "times": times, "step": step}
    args |= {"team_ids": [team.pk, other_team.pk], "unallocated": True}
    sql = idle_hours_by_step(**args, portable=False)
    portable = idle_hours_by_step(**args, portable=True)
    assert len(sql) > 50
    assert {tuple(r[:4]): r[4] for r in sql} == pytest.approx(
        {tuple(r[:4]): r[4] for r in portable}
    )
