"""One busy rule (apps.telemetry.activity): its SQL, ORM and Python forms give the same answers,
and the idle page, held-idle intervals and idle reclaim agree about the same GPU."""

import os
import subprocess
import sys
from datetime import timedelta

import pytest
from django.db import connection

from apps.dashboards.selectors.filters import Filters
from apps.dashboards.selectors.idle import gpu_states_now
from apps.telemetry.activity import (
    busy_sample_q,
    busy_sample_sql,
    idle_threshold_text,
    sample_is_busy,
)
from apps.telemetry.choices import ActivitySignal, IdleKind
from apps.telemetry.idle import idle_bookings_check, idle_intervals_update
from apps.telemetry.ingest import store_samples
from apps.telemetry.models import GpuMinuteRollup, GpuSample, IdleInterval, IdleWarning
from apps.telemetry.rollups import rollup_minutes
from tests.telemetry.test_rollups_idle import _active_booking

pytestmark = pytest.mark.django_db

# (util %, SM activity %) around both thresholds (5 and 5.0 by default); None: not read.
GRID = [(util, sm) for util in (None, 0, 4, 5, 6, 100) for sm in (None, 0.0, 4.9, 5.0, 5.1, 100.0)]


def _store(gpu, start, values):
    """One sample every 15 s with (util, sm) from `values`, in order."""
    store_samples(
        [
            (gpu.id, start + timedelta(seconds=15 * i), util, 5, 1000, 300.0, 50, 1, sm, 1.0, 0, 2)
            for i, (util, sm) in enumerate(values)
        ]
    )


def test_sql_orm_and_python_forms_of_the_busy_rule_agree(fleet, now, settings):
    gpu = fleet[0].gpus.order_by("index").first()
    start = now.replace(second=0) - timedelta(hours=1)
    _store(gpu, start, GRID)
    for util_threshold, sm_threshold in [(5, 5.0), (50, 2.5)]:
        settings.TELEMETRY_BUSY_UTIL_PERCENT = util_threshold
        settings.TELEMETRY_SM_ACTIVE_BUSY_PERCENT = sm_threshold
        python = {
            ts
            for ts, util, sm in GpuSample.objects.values_list("ts", "util_gpu", "sm_active")
            if sample_is_busy(util, sm)
        }
        orm = set(GpuSample.objects.filter(busy_sample_q()).values_list("ts", flat=True))
        condition, params = busy_sample_sql()
        with connection.cursor() as cursor:
            cursor.execute(
                # the condition is the module's own constant text, values go in params
                f"SELECT ts FROM telemetry_gpusample WHERE gpu_id = %(gpu)s AND {condition}",  # noqa: S608
                {"gpu": gpu.id, **params},
            )
            sql = {row[0] for row in cursor}
        assert python == orm == sql
        assert 0 < len(python) < len(GRID)  # the grid straddles the thresholds


def test_sm_threshold_ignores_utilization_and_util_threshold_applies_without_sm(settings):
    assert sample_is_busy(100, 4.9) is False  # tiny kernels: full utilization, idle SMs
    assert sample_is_busy(0, 5.0) is True
    assert sample_is_busy(5, None) is True and sample_is_busy(4, None) is False
    assert sample_is_busy(None, None) is False  # nothing read is never busy
    settings.TELEMETRY_SM_ACTIVE_BUSY_PERCENT = 2.5
    assert idle_threshold_text({ActivitySignal.SM_ACTIVE}) == "SM activity below 2.5%"


def _idle_page_states(team, now):
    filters = Filters(
        start=now - timedelta(days=1),
        end=now,
        range="24h",
        teams=(team,),
        team_slug="",
        gpu_model=None,
        sees_all=False,
    )
    return {s["gpu_id"]: (s["state"], s["signal"]) for s in gpu_states_now(filters, now=now)}


def test_a_gpu_whose_sms_work_a_quarter_of_each_minute_is_busy_for_page_and_reclaim(
    fleet, member, quotas, h100, now
):
    """Average SM activity 3 % (under 5 %) but one sample in four at 12 %. Reclaim and
    held-idle once judged the average (idle), the idle page the samples (busy): now all
    three read the one rule, and a GPU that did measurable work is never reclaimed."""
    reservation = _active_booking(member, quotas, h100, now)
    gpus = [h.gpu for h in reservation.holdings.all()]
    minute = now.replace(second=0, microsecond=0)
    start = minute - timedelta(minutes=40)
    for gpu in gpus:
        _store(gpu, start, [(100, 12.0 if i % 4 == 3 else 0.0) for i in range(40 * 4)])
    rollup_minutes(start=start, end=minute)
    assert {(r.sm_active_avg, r.busy_seconds) for r in GpuMinuteRollup.objects.all()} == {
        (3.0, 15.0)
    }
    assert idle_bookings_check(now=now)["warned"] == 0
    idle_intervals_update(now=minute)
    assert not IdleInterval.objects.filter(kind=IdleKind.HELD_IDLE).exists()
    states = _idle_page_states(quotas[0].team, now)
    assert {states[g.pk] for g in gpus} == {("busy", ActivitySignal.SM_ACTIVE)}


def test_a_gpu_with_gpm_on_some_minutes_only_is_judged_the_same_by_page_and_reclaim(
    fleet, member, quotas, h100, now
):
    """GPM read in every other minute (a flaky driver): each sample is judged on its own
    signal, and the idle page's label and reclaim's reason both name SM activity."""
    reservation = _active_booking(member, quotas, h100, now)
    gpus = [h.gpu for h in reservation.holdings.all()]
    minute = now.replace(second=0, microsecond=0)
    start = minute - timedelta(minutes=40)
    for gpu in gpus:
        _store(gpu, start, [(2, 1.0 if (i // 4) % 2 else None) for i in range(40 * 4)])
    rollup_minutes(start=start, end=minute)
    assert idle_bookings_check(now=now)["warned"] == 1
    assert IdleWarning.objects.get().reason.startswith("SM activity below 5%")
    idle_intervals_update(now=minute)
    assert IdleInterval.objects.filter(kind=IdleKind.HELD_IDLE).count() == len(gpus)
    states = _idle_page_states(quotas[0].team, now)
    assert {states[g.pk] for g in gpus} == {("held_idle", ActivitySignal.SM_ACTIVE)}
    # the non-GPM minutes get busy by utilization: busy for reclaim and the page alike
    GpuSample.objects.all().delete()
    for gpu in gpus:
        _store(gpu, start, [(60, 1.0 if (i // 4) % 2 else None) for i in range(40 * 4)])
    rollup_minutes(start=start, end=minute)
    assert idle_bookings_check(now=now)["cleared"] == 1
    states = _idle_page_states(quotas[0].team, now)
    assert {states[g.pk][0] for g in gpus} == {"busy"}


@pytest.mark.parametrize(
    "env, expected",
    [
        ({"IDLE_UTIL_PERCENT": "7", "IDLE_SM_ACTIVE_PERCENT": "2.5"}, "7 2.5"),
        (
            {
                "IDLE_UTIL_PERCENT": "7",
                "TELEMETRY_BUSY_UTIL_PERCENT": "9",
                "TELEMETRY_SM_ACTIVE_BUSY_PERCENT": "3",
            },
            "9 3.0",
        ),
    ],
)
def test_deprecated_idle_thresholds_are_read_only_where_the_busy_ones_are_unset(env, expected):
    names = (
        "IDLE_UTIL_PERCENT",
        "IDLE_SM_ACTIVE_PERCENT",
        "TELEMETRY_BUSY_UTIL_PERCENT",
        "TELEMETRY_SM_ACTIVE_BUSY_PERCENT",
    )
    clean = {k: v for k, v in os.environ.items() if k not in names}
    out = subprocess.run(
        [
            sys.executable,
            "-c",
            "from portal import settings as s;"
            "print(s.TELEMETRY_BUSY_UTIL_PERCENT, s.TELEMETRY_SM_ACTIVE_BUSY_PERCENT)",
        ],
        env={**clean, "DJANGO_DEBUG": "1", **env},
        capture_output=True,
        text=True,
        check=True,
    )
    assert out.stdout.strip() == expected
