"""A booking racing a scheduling cycle for a team's last GPU under its limit: the cycle locks
the quota rows as bookings do, so the booking waits for the cycle, then counts the job it
placed and is refused (PostgreSQL, real concurrent connections)."""

import threading
import time

import pytest
from django.db import connection, connections

from apps.jobs import dispatch
from apps.jobs.models import JobAllocation
from apps.reservations.models import ReservationGpu
from apps.teams.models import Quota
from portal.exceptions import PolicyRefusal
from tests.jobs.test_quota_holdings import _book, _submit


def _blocked_on_a_lock(pid: int) -> bool:
    with connection.cursor() as cursor:
        cursor.execute("SELECT wait_event_type FROM pg_stat_activity WHERE pid = %s", [pid])
        row = cursor.fetchone()
    return bool(row) and row[0] == "Lock"


@pytest.mark.django_db(transaction=True)
def test_a_booking_racing_the_cycle_for_the_last_gpu_waits_and_is_refused(
    member, team, h100, sent, monkeypatch
):
    Quota.objects.create(team=team, gpu_model=h100, guaranteed=4, limit=8)
    _book(member, team, h100, 4)
    three = _submit(member, team, h100, 3)
    assert dispatch.schedule_cycle().placed == [three.pk]
    last = _submit(member, team, h100, 1)
    outcome: dict = {}

    def book_the_last_gpu() -> None:
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_backend_pid()")
            outcome["pid"] = cursor.fetchone()[0]
        try:
            _book(member, team, h100, 1)
            outcome["booked"] = True
        except PolicyRefusal as refusal:
            outcome["refused"] = refusal.code
        finally:
            connections.close_all()

    real = dispatch.run_scheduler
    racer = threading.Thread(target=book_the_last_gpu)

    def decide_while_a_booking_races(state):
        decision = real(state)
        racer.start()
        # The booking asks for the team's quota rows, which this cycle holds until it commits.
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            pid = outcome.get("pid")
            if pid is not None and _blocked_on_a_lock(pid) or "booked" in outcome:
                break
            time.sleep(0.05)
        return decision

    monkeypatch.setattr(dispatch, "run_scheduler", decide_while_a_booking_races)
    assert dispatch.schedule_cycle().placed == [last.pk]
    racer.join(timeout=60)
    assert outcome.get("refused") == "quota_exceeded", outcome
    held = ReservationGpu.objects.filter(reservation__team=team, active=True).count()
    running = JobAllocation.objects.filter(job__team=team, end__isnull=True).count()
    assert held + running == 8
