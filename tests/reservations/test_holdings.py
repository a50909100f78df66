"""Who holds GPU g over [s, e), bookings' half: one rule (`apps.reservations.holdings`).

The copies it replaced disagreed on the edges and on the booking's status; these tests pin
what was decided: half-open spans, a row that ends when a span starts does not hold in it,
and the holding rows alone decide (a cancelled booking held its GPU until the cancel).
"""

from datetime import UTC, datetime, timedelta

import pytest
from django.db import connection
from django.utils import timezone

from apps.reservations.choices import ReservationStatus
from apps.reservations.holdings import (
    GPU_BOOKED_SQL,
    HOLDING_TEAM_AT_SQL,
    bookings_holding,
    bookings_holding_at,
    holds_at,
)
from apps.reservations.models import ReservationGpu
from apps.reservations.services import reservation_cancel
from tests.factories import make_booking

pytestmark = pytest.mark.django_db

NINE = datetime(2026, 11, 2, 9, tzinfo=UTC)
ELEVEN = NINE + timedelta(hours=2)


@pytest.fixture
def booked(fleet, h100, team, member):
    """One GPU booked over [09:00, 11:00), one other GPU with a deactivated holding there."""
    gpus = list(h100.gpus.order_by("id")[:2])
    reservation = make_booking(team, member, gpus, NINE, ELEVEN)
    ReservationGpu.objects.filter(gpu=gpus[1]).update(active=False)
    return reservation, gpus


@pytest.mark.parametrize(
    ("start", "end", "held"),
    [
        (NINE - timedelta(hours=1), NINE, False),  # ends exactly when the holding starts
        (ELEVEN, ELEVEN + timedelta(hours=1), False),  # starts exactly when it ends
        (NINE - timedelta(hours=1), NINE + timedelta(seconds=1), True),
        (ELEVEN - timedelta(seconds=1), ELEVEN + timedelta(hours=1), True),
        (NINE + timedelta(minutes=30), NINE + timedelta(minutes=40), True),  # inside
        (NINE - timedelta(days=1), ELEVEN + timedelta(days=1), True),  # around
        (ELEVEN, None, False),  # from its end on
        (ELEVEN - timedelta(minutes=1), None, True),
    ],
)
def test_bookings_holding_is_half_open_overlap(booked, start, end, held):
    reservation, gpus = booked
    rows = bookings_holding(start, end)
    assert list(rows.values_list("gpu_id", flat=True)) == ([gpus[0].pk] if held else [])
    # the deactivated holding of the second GPU never holds, whatever the span
    assert not bookings_holding(start, end, gpu_ids=[gpus[1].pk]).exists()
    if end is not None:  # the booking path's raw SQL says the same
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT " + GPU_BOOKED_SQL.format(gpu_id="%s", start="%s", end="%s"),
                [gpus[0].pk, end, start],
            )
            assert bool(cursor.fetchone()[0]) is held


@pytest.mark.parametrize(
    ("moment", "held"),
    [
        (NINE - timedelta(microseconds=1), False),
        (NINE, True),  # a holding holds at its start
        (ELEVEN - timedelta(microseconds=1), True),
        (ELEVEN, False),  # and no longer at its end
    ],
)
def test_holding_at_an_instant_agrees_in_orm_python_and_sql(booked, moment, held):
    reservation, gpus = booked
    assert bookings_holding_at(moment).exists() is held
    assert holds_at(NINE, ELEVEN, moment) is held
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT " + HOLDING_TEAM_AT_SQL.format(gpu_id="%s", moment="%s"),
            [gpus[0].pk, moment, moment],
        )
        team_id = cursor.fetchone()[0]
    assert team_id == (reservation.team_id if held else None)


def test_running_end_of_none_holds_from_its_start_on():
    assert holds_at(NINE, None, NINE + timedelta(days=400))
    assert not holds_at(NINE, None, NINE - timedelta(seconds=1))


def test_status_is_not_part_of_the_rule_a_cancelled_booking_held_until_the_cancel(
    fleet, h100, team, member
):
    now = timezone.now()
    gpu = h100.gpus.order_by("id").first()
    reservation = make_booking(
        team, member, [gpu], now - timedelta(hours=1), now + timedelta(hours=1)
    )
    reservation_cancel(reservation=reservation, actor=member)
    reservation.refresh_from_db()
    assert reservation.status == ReservationStatus.CANCELLED
    # the hour it ran is held (metering charges it, the occupancy chart shows it) ...
    assert bookings_holding(now - timedelta(minutes=30), now - timedelta(minutes=20)).exists()
    # ... and nothing after the cancel is
    assert not bookings_holding(timezone.now()).exists()


def test_a_completed_bookings_past_holding_still_held_its_gpu(booked):
    reservation, gpus = booked
    reservation.status = ReservationStatus.COMPLETED
    reservation.save(update_fields=["status"])
    assert list(bookings_holding_at(NINE).values_list("gpu_id", flat=True)) == [gpus[0].pk]


def test_a_teams_holdings_are_read_with_equal_rows_counted_once(team, member, fleet, h100):
    """The quota count reads a booking's GPUs (and bookings of one window) as one row with
    their number; the peak is what one row per GPU gives."""
    from apps.fleet.models import Gpu, GpuModel
    from apps.reservations.selectors import team_bookings_statement, team_holdings
    from portal.raw_rows import fetch_rows

    gpus = list(Gpu.objects.filter(model=h100).order_by("node__hostname", "index"))
    ten = NINE + timedelta(hours=1)
    make_booking(team, member, gpus[:4], NINE, ELEVEN)
    make_booking(team, member, gpus[4:5], NINE, ten)
    make_booking(team, member, gpus[5:6], NINE, ten)
    make_booking(team, member, gpus[6:7], ten, ELEVEN)
    l40s = list(Gpu.objects.filter(model=GpuModel.objects.get(name="L40S-48GB"))[:2])
    make_booking(team, member, l40s, NINE, ELEVEN)
    sql, params, datetime_columns = team_bookings_statement(
        team=team, start=NINE, end=ELEVEN, counted=True
    )
    rows = fetch_rows(sql, params, datetime_columns=datetime_columns)
    assert sorted(rows, key=str) == sorted(
        [
            (NINE, ELEVEN, h100.name, 4),
            (NINE, ten, h100.name, 2),
            (ten, ELEVEN, h100.name, 1),
            (NINE, ELEVEN, "L40S-48GB", 2),
        ],
        key=str,
    )
    counted = team_holdings(team=team, start=NINE, end=ELEVEN, jobs=[], bookings=rows)
    one_row_each = team_holdings(team=team, start=NINE, end=ELEVEN, jobs=[])
    for held in (counted, one_row_each):
        assert held.peak(team.slug, h100.name, NINE, ELEVEN) == 6
        assert held.peak(team.slug, h100.name, ten, ELEVEN) == 5
        assert held.peak(team.slug, None, NINE, ELEVEN) == 8
