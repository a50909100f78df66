"""Demo telemetry for the dashboards: 30 days of hour rollups, the last 25 hours of minute
rollups, idle intervals and a latest sample per GPU, consistent with the bookings already in the
database (a GPU is held by the team whose booking covers the hour). The minute rollups of a
whole hour agree with its hour rollup, so the 24-hour charts (minute rollups) and the longer
ones (hour rollups) show the same busy GPUs for the same hours.

Part of `seed_demo`; does nothing on a database that already has hour rollups.
"""

import random
from bisect import bisect_right
from collections import defaultdict
from datetime import datetime, timedelta

from django.utils import timezone

from apps.dashboards.demo.fleet import HISTORY_DAYS
from apps.fleet.models import Gpu
from apps.reservations.holdings import bookings_holding
from apps.telemetry.choices import IdleKind
from apps.telemetry.idle import idle_hours_rollup
from apps.telemetry.models import GpuHourRollup, GpuMinuteRollup, GpuSample, IdleInterval
from apps.telemetry.rollups import rollup_team_models

# The 24-hour charts read minute rollups: cover all of them, and the hour before.
MINUTE_HOURS = 25
BATCH = 5000


def _holder_lookup(start: datetime):
    """gpu_id -> (sorted starts, [(start, end, team_id)]) of active holdings since `start`."""
    holdings = defaultdict(list)
    for gpu_id, h_start, h_end, team_id in (
        bookings_holding(start)
        .values_list("gpu_id", "start", "end", "reservation__team_id")
        .order_by("gpu_id", "start")
    ):
        holdings[gpu_id].append((h_start, h_end, team_id))
    return {gpu_id: ([h[0] for h in rows], rows) for gpu_id, rows in holdings.items()}


def _holder(lookup, gpu_id: int, at: datetime) -> int | None:
    starts, rows = lookup.get(gpu_id, ([], []))
    i = bisect_right(starts, at) - 1
    if i >= 0 and rows[i][0] <= at < rows[i][1]:
        return rows[i][2]
    return None


GPM_MODELS = ("H100", "H200", "B200")  # models whose history gets GPM metrics (Hopper and newer)


def gpm_averages(gpu, util: float, sm_share: float) -> dict:
    """GPM averages of a demo rollup: SM activity is a share of utilization (a GPU running
    small kernels is "100 % utilized" with its SMs mostly idle); none on older models."""
    if not any(family in gpu.model.name for family in GPM_MODELS):
        return {}
    sm = util * sm_share
    return {
        "sm_active_avg": sm,
        "sm_occupancy_avg": sm * 0.55,
        "tensor_active_avg": sm * 0.7,
        "dram_bw_avg": sm * 0.45,
    }


def _minutes_of_hour(gpu, hour: datetime, team_id, util: float, busy: bool, rng) -> list:
    """Sixty minute rollups whose sums and averages are the hour's."""
    rows = []
    for minute in range(60):
        level = max(0.0, min(100.0, util + rng.uniform(-2, 2)))
        rows.append(
            GpuMinuteRollup(
                gpu=gpu,
                bucket=hour + timedelta(minutes=minute),
                team_id=team_id,
                samples=6,
                util_avg=level,
                util_max=min(100, int(level + 3)),
                power_avg_w=450 * level / 100 + 70,
                energy_j=(450 * level / 100 + 70) * 60,
                busy_seconds=60.0 if busy else 0.0,
                **gpm_averages(gpu, level, 0.8),
            )
        )
    return rows


def seed_dashboard_history(*, now: datetime | None = None, days: int = HISTORY_DAYS) -> int:
    """Write the demo history; returns the number of hour rollups written."""
    if GpuHourRollup.objects.exists():
        return 0
    now = now or timezone.now()
    rng = random.Random(8)
    this_hour = now.replace(minute=0, second=0, microsecond=0)
    first = this_hour - timedelta(days=days)
    gpus = list(Gpu.objects.filter(mig_parent__isnull=True).select_related("model").order_by("id"))
    lookup = _holder_lookup(first)
    hours, minutes, idle = [], [], []
    minute_start = this_hour - timedelta(hours=MINUTE_HOURS)
    for gpu in gpus:
        # Some GPUs are busier than others; held GPUs sit idle now and then (notebooks).
        diligence = rng.uniform(0.55, 0.95)
        sm_share = rng.uniform(0.15, 0.9)  # how much of the "utilized" time the SMs work
        run = None  # the idle stretch being built: [kind, team_id, start]
        t = first
        while t < this_hour:
            team_id = _holder(lookup, gpu.pk, t)
            busy = team_id is not None and rng.random() < diligence
            util = rng.uniform(45, 98) if busy else rng.uniform(0, 2)
            hours.append(
                GpuHourRollup(
                    gpu=gpu,
                    bucket=t,
                    team_id=team_id,
                    samples=360,
                    util_avg=util,
                    util_max=min(100, int(util + rng.uniform(0, 10))),
                    mem_used_avg_mib=gpu.model.memory_mib * (0.7 if busy else 0.02),
                    mem_used_max_mib=int(gpu.model.memory_mib * (0.8 if busy else 0.03)),
                    power_avg_w=450 * util / 100 + 70,
                    energy_j=(450 * util / 100 + 70) * 3600,
                    busy_seconds=3600.0 if busy else 0.0,
                    **gpm_averages(gpu, util, sm_share),
                )
            )
            if t >= minute_start:
                minutes += _minutes_of_hour(gpu, t, team_id, util, busy, rng)
            kind = None if busy else (IdleKind.HELD_IDLE if team_id else IdleKind.UNALLOCATED)
            if run and (run[0], run[1]) != (kind, team_id):
                idle.append(IdleInterval(gpu=gpu, kind=run[0], team_id=run[1], start=run[2], end=t))
                run = None
            if kind and run is None:
                run = [kind, team_id, t]
            t += timedelta(hours=1)
        if run:
            idle.append(
                IdleInterval(gpu=gpu, kind=run[0], team_id=run[1], start=run[2], end=this_hour)
            )
        t = this_hour  # the hour under way: minute rollups only, as the live rollups leave it
        while t < now - timedelta(minutes=1):
            team_id = _holder(lookup, gpu.pk, t)
            busy = team_id is not None and (t.hour + gpu.index) % 5 != 0
            util = rng.uniform(50, 97) if busy else rng.uniform(0, 2)
            minutes.append(
                GpuMinuteRollup(
                    gpu=gpu,
                    bucket=t,
                    team_id=team_id,
                    samples=6,
                    util_avg=util,
                    util_max=min(100, int(util + 3)),
                    power_avg_w=450 * util / 100 + 70,
                    energy_j=(450 * util / 100 + 70) * 60,
                    busy_seconds=60.0 if busy else 0.0,
                    **gpm_averages(gpu, util, sm_share),
                )
            )
            t += timedelta(minutes=1)
    samples = [
        GpuSample(
            gpu=gpu,
            ts=now.replace(microsecond=0) - timedelta(seconds=5),
            util_gpu=0,
            temp_c=rng.randint(34, 71),
            power_w=rng.uniform(70, 520),
        )
        for gpu in gpus
    ]
    GpuHourRollup.objects.bulk_create(hours, batch_size=BATCH)
    rollup_team_models(start=first, end=this_hour)
    GpuMinuteRollup.objects.bulk_create(minutes, batch_size=BATCH)
    IdleInterval.objects.bulk_create(idle, batch_size=BATCH)
    idle_hours_rollup(start=first, end=this_hour)
    GpuSample.objects.bulk_create(samples, batch_size=BATCH, ignore_conflicts=True)
    return len(hours)
