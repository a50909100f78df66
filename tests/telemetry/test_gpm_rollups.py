"""GPM metrics (SM activity, occupancy, tensor activity, DRAM bandwidth) through ingest and the
minute and hour rollups; busy time follows SM activity where a GPU reports it."""

from datetime import timedelta

import pytest
from django.core import mail

from apps.telemetry.activity import signal_of_average
from apps.telemetry.choices import ActivitySignal, IdleKind
from apps.telemetry.idle import idle_bookings_check, idle_intervals_update
from apps.telemetry.ingest import store_samples, telemetry_ingest
from apps.telemetry.models import (
    GpuHourRollup,
    GpuMinuteRollup,
    GpuSample,
    IdleInterval,
    IdleWarning,
)
from apps.telemetry.rollups import rollup_hours, rollup_minutes
from tests.telemetry.conftest import batch, sample
from tests.telemetry.test_rollups_idle import _active_booking

pytestmark = pytest.mark.django_db

GPM = ("sm_active_avg", "sm_occupancy_avg", "tensor_active_avg", "dram_bw_avg")


def _gpm(sm, occupancy=None, tensor=None, dram=None):
    return {
        "sm_active": sm,
        "sm_occupancy": occupancy,
        "tensor_active": tensor,
        "dram_bw_util": dram,
    }


@pytest.fixture
def minute(now):
    return now.replace(second=0) - timedelta(minutes=10)


def _ingest(node_gpus, minute, readings):
    """readings: {uuid: [(util, gpm dict) per 15 s step]} for one minute."""
    samples = [
        sample(uuid, (minute + timedelta(seconds=15 * i)).timestamp(), util=util, **gpm)
        for uuid, steps in readings.items()
        for i, (util, gpm) in enumerate(steps)
    ]
    result = telemetry_ingest(batch=batch(1, samples))
    assert result.stored == len(samples) and not result.rejected


def _rows(model):
    return sorted(model.objects.values_list("gpu_id", "bucket", "busy_seconds", *GPM))


def test_gpm_values_are_stored_and_averaged_over_samples_that_had_them(node_gpus, minute):
    a, b, c = sorted(node_gpus)[:3]
    _ingest(
        node_gpus,
        minute,
        {
            # one tiny kernel at a time: 100 % utilization, almost no SM activity -> not busy
            a: [(100, _gpm(1.0, 2.0, 0.0, 3.0))] * 4,
            # SM activity 40 / 0 / 60 / missing: average 33.3 over three values; busy: two by SM
            # activity, the one without a GPM reading by its utilization (90 %)
            b: [
                (90, _gpm(40.0, 30.0, 20.0, 10.0)),
                (90, _gpm(0.0, 0.0, 0.0, 0.0)),
                (90, _gpm(60.0, 50.0, 40.0, 20.0)),
                (90, _gpm(None)),
            ],
            # no GPM at all (an A100): utilization decides, 3 of 4 samples busy
            c: [(80, _gpm(None)), (80, _gpm(None)), (0, _gpm(None)), (80, _gpm(None))],
        },
    )
    assert GpuSample.objects.filter(sm_active__isnull=False).count() == 7
    rollup_minutes(start=minute, end=minute + timedelta(minutes=1))
    rows = {r.gpu.uuid: r for r in GpuMinuteRollup.objects.select_related("gpu")}
    assert rows[a].busy_seconds == 0 and rows[a].sm_active_avg == pytest.approx(1.0)
    assert rows[a].util_avg == 100
    assert rows[b].busy_seconds == 45.0
    assert rows[b].sm_active_avg == pytest.approx(100 / 3)
    assert rows[b].sm_occupancy_avg == pytest.approx(80 / 3)
    assert rows[b].tensor_active_avg == pytest.approx(20)
    assert rows[b].dram_bw_avg == pytest.approx(10)
    assert rows[c].busy_seconds == 45.0
    assert all(getattr(rows[c], name) is None for name in GPM)
    assert rows[a].activity_signal == ActivitySignal.SM_ACTIVE
    assert rows[c].activity_signal == ActivitySignal.UTIL
    assert signal_of_average(0.0) == ActivitySignal.SM_ACTIVE  # zero activity is still a signal


def test_sm_busy_threshold_is_a_setting(node_gpus, minute, settings):
    uuid = sorted(node_gpus)[0]
    _ingest(node_gpus, minute, {uuid: [(100, _gpm(value)) for value in (3.0, 6.0, 12.0, 25.0)]})
    settings.TELEMETRY_SM_ACTIVE_BUSY_PERCENT = 10
    rollup_minutes(start=minute, end=minute + timedelta(minutes=1))
    assert GpuMinuteRollup.objects.get().busy_seconds == 30.0
    settings.TELEMETRY_SM_ACTIVE_BUSY_PERCENT = 5
    rollup_minutes(start=minute, end=minute + timedelta(minutes=1), portable=True)
    assert GpuMinuteRollup.objects.get().busy_seconds == 45.0


def test_hour_rollup_weights_gpm_by_samples_and_sql_matches_portable(node_gpus, now):
    hour = now.replace(minute=0, second=0) - timedelta(hours=2)
    a, b = sorted(node_gpus)[:2]
    for m in range(6):
        start = hour + timedelta(minutes=m)
        # GPU a reports GPM only in odd minutes; GPU b never
        gpm = _gpm(10.0 * m, 5.0 * m, float(m), 2.0 * m) if m % 2 else _gpm(None)
        samples = [
            sample(a, (start + timedelta(seconds=15 * i)).timestamp(), util=50, **gpm)
            for i in range(4 if m != 5 else 2)
        ] + [sample(b, (start + timedelta(seconds=15 * i)).timestamp(), util=3) for i in range(4)]
        telemetry_ingest(batch=batch(10 + m, samples))
    end = hour + timedelta(minutes=6)
    rollup_minutes(start=hour, end=end)
    rollup_hours(start=hour, end=end)
    sql_minutes, sql_hours = _rows(GpuMinuteRollup), _rows(GpuHourRollup)
    by_uuid = {r.gpu.uuid: r for r in GpuHourRollup.objects.select_related("gpu")}
    # minutes 1 and 3 (4 samples each) and 5 (2 samples): (10*4 + 30*4 + 50*2) / 10
    assert by_uuid[a].sm_active_avg == pytest.approx(26.0)
    assert by_uuid[a].tensor_active_avg == pytest.approx(2.6)
    # busy: minutes with GPM count SM activity >= 5 (all of 1, 3, 5); minutes without, util 50
    assert by_uuid[a].busy_seconds == pytest.approx(6 * 60)
    assert by_uuid[b].busy_seconds == 0 and by_uuid[b].sm_active_avg is None
    GpuMinuteRollup.objects.all().delete()
    GpuHourRollup.objects.all().delete()
    rollup_minutes(start=hour, end=end, portable=True)
    rollup_hours(start=hour, end=end, portable=True)
    for got, want in [(_rows(GpuMinuteRollup), sql_minutes), (_rows(GpuHourRollup), sql_hours)]:
        assert len(got) == len(want)
        for g, w in zip(got, want, strict=True):
            assert g[:2] == w[:2]
            assert [x is None for x in g[2:]] == [x is None for x in w[2:]]
            assert [x for x in g[2:] if x is not None] == pytest.approx(
                [x for x in w[2:] if x is not None]
            )


def _feed_gpm(gpus, start, minutes, *, util, sm):
    """Samples every 15 s; sm(gpu) None: a GPU without GPM."""
    rows = [
        (
            gpu.id,
            start + timedelta(seconds=15 * i),
            util,
            5,
            1000,
            300.0,
            50,
            1,
            sm(gpu),
            1.0,
            0.0,
            2.0,
        )
        for gpu in gpus
        for i in range(minutes * 4)
    ]
    store_samples(rows)
    rollup_minutes(start=start, end=start + timedelta(minutes=minutes))


def test_tiny_kernels_at_full_utilization_are_idle_by_sm_activity(
    fleet, member, quotas, h100, now, django_capture_on_commit_callbacks
):
    reservation = _active_booking(member, quotas, h100, now)
    gpus = [h.gpu for h in reservation.holdings.all()]
    minute = now.replace(second=0, microsecond=0)
    _feed_gpm(gpus, minute - timedelta(minutes=40), 40, util=100, sm=lambda gpu: 1.0)
    with django_capture_on_commit_callbacks(execute=True):
        assert idle_bookings_check(now=now)["warned"] == 1
    warning = IdleWarning.objects.get(reservation=reservation)
    assert warning.reason.startswith("SM activity below 5%")
    assert "SM activity below 5%" in mail.outbox[0].body
    idle_intervals_update(now=minute)
    held = IdleInterval.objects.filter(kind=IdleKind.HELD_IDLE)
    assert {i.gpu_id for i in held} == {g.id for g in gpus}


def test_busy_sms_keep_a_booking_and_gpus_without_gpm_use_utilization(
    fleet, member, quotas, h100, now, settings
):
    reservation = _active_booking(member, quotas, h100, now)
    first, second = [h.gpu for h in reservation.holdings.order_by("gpu_id")]
    minute = now.replace(second=0, microsecond=0)
    start = minute - timedelta(minutes=40)
    # first: real work on the SMs; second: no GPM, utilization 100 %
    _feed_gpm([first], start, 40, util=100, sm=lambda gpu: 40.0)
    _feed_gpm([second], start, 40, util=100, sm=lambda gpu: None)
    assert idle_bookings_check(now=now)["warned"] == 0
    idle_intervals_update(now=minute)
    assert not IdleInterval.objects.filter(kind=IdleKind.HELD_IDLE).exists()
    # both below their own thresholds: idle, and the reason names both signals
    GpuSample.objects.all().delete()
    _feed_gpm([first], start, 40, util=100, sm=lambda gpu: 3.0)
    _feed_gpm([second], start, 40, util=2, sm=lambda gpu: None)
    assert idle_bookings_check(now=now)["warned"] == 1
    assert IdleWarning.objects.get().reason.startswith(
        "SM activity below 5% / utilization below 5%"
    )
    settings.TELEMETRY_SM_ACTIVE_BUSY_PERCENT = 2.5  # SM activity 3 % is now use
    rollup_minutes(start=start, end=minute)
    assert idle_bookings_check(now=now)["cleared"] == 1
