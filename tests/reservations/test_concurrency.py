"""No double booking and no quota overrun under concurrent clients, on both databases."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.reservations.race import book_concurrently, overlapping_holdings, scenario

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_32_concurrent_clients_on_postgresql_never_double_book_or_overrun_quota():
    overlapping, last_unit = scenario(clients=32)
    outcome = book_concurrently(overlapping)
    # 16 GPUs, 4 per booking, windows all overlapping at 10:30-12:00: exactly 4 fit.
    assert outcome == {"booked": 4, "conflict": 28}, outcome
    outcome = book_concurrently(last_unit)
    assert outcome == {"booked": 5, "quota_exceeded": 27}, outcome
    assert overlapping_holdings() == 0


@pytest.mark.slow
def test_concurrent_clients_on_sqlite_never_double_book_or_overrun_quota(tmp_path):
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "portal.settings",
        "DATABASE_URL": f"sqlite:///{tmp_path / 'race.sqlite3'}",
    }
    result = subprocess.run(
        [sys.executable, "-m", "tests.reservations.race", "12"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    outcome = json.loads(result.stdout.strip().splitlines()[-1])
    assert outcome["vendor"] == "sqlite"
    assert outcome["overlapping"] == {"booked": 4, "conflict": 8}
    assert outcome["last_unit"] == {"booked": 5, "quota_exceeded": 7}
    assert outcome["overlaps"] == 0


@pytest.mark.django_db
def test_database_itself_refuses_overlapping_holdings_of_one_gpu(member, quotas, h100, tomorrow_9):
    from datetime import timedelta

    from django.db import IntegrityError, transaction

    from apps.reservations.models import ReservationGpu
    from apps.reservations.services import reservation_create

    first = reservation_create(
        team=quotas[0].team,
        user=member,
        gpu_model=h100,
        count=1,
        start=tomorrow_9,
        end=tomorrow_9 + timedelta(hours=2),
    )
    holding = first.holdings.get()
    with pytest.raises(IntegrityError, match="holding_no_overlap_per_gpu"), transaction.atomic():
        ReservationGpu.objects.create(
            reservation=first,
            gpu=holding.gpu,
            start=tomorrow_9 + timedelta(hours=1),
            end=tomorrow_9 + timedelta(hours=3),
        )
    # back-to-back is fine ([start, end) ranges), and inactive holdings do not count
    ReservationGpu.objects.create(
        reservation=first,
        gpu=holding.gpu,
        start=tomorrow_9 + timedelta(hours=2),
        end=tomorrow_9 + timedelta(hours=3),
    )
    ReservationGpu.objects.create(
        reservation=first,
        gpu=holding.gpu,
        active=False,
        start=tomorrow_9,
        end=tomorrow_9 + timedelta(hours=3),
    )
