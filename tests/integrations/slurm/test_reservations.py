"""Portal bookings mirrored as Slurm advance reservations, against a real slurmctld."""

from datetime import timedelta

import pytest
from django.utils import timezone

from apps.integrations.slurm import services
from apps.integrations.slurm.models import SlurmReservation
from apps.jobs.choices import JobStatus
from apps.jobs.services import job_submit
from apps.reservations.models import Reservation, ReservationGpu
from apps.reservations.services import (
    reservation_cancel,
    reservation_create,
    reservation_extend,
    reservation_release,
)
from tests.conftest import client_for
from tests.integrations.slurm.conftest import slurm_out, wait_for

pytestmark = [pytest.mark.slurm, pytest.mark.django_db]


def slurm_reservation(cluster, name: str) -> dict[str, str]:
    out = slurm_out(cluster, "scontrol", "-o", "show", "reservation", name)
    return dict(part.split("=", 1) for part in out.split() if "=" in part)


def tomorrow_at(hour: int):
    now = timezone.now()
    return (now + timedelta(days=1)).replace(hour=hour, minute=0, second=0, microsecond=0)


def book(slurm, *, start, hours=2, count=2):
    return reservation_create(
        team=slurm.team,
        user=slurm.member,
        gpu_model=slurm.model,
        count=count,
        start=start,
        end=start + timedelta(hours=hours),
    )


def test_booking_becomes_a_slurm_reservation_updated_on_extend_and_deleted_on_cancel(slurm):
    start = tomorrow_at(9)
    reservation = book(slurm, start=start)
    name = f"portal-{reservation.pk}"
    assert SlurmReservation.objects.get(reservation=reservation).name == name

    shown = slurm_reservation(slurm.cluster, name)
    assert shown["Accounts"] == "vision"
    assert shown["Nodes"] == slurm.cluster.hostname
    assert shown["StartTime"] == start.strftime("%Y-%m-%dT%H:%M:%S")
    assert shown["EndTime"] == (start + timedelta(hours=2)).strftime("%Y-%m-%dT%H:%M:%S")

    reservation_extend(
        reservation=reservation, actor=slurm.member, new_end=start + timedelta(hours=5)
    )
    shown = slurm_reservation(slurm.cluster, name)
    assert shown["EndTime"] == (start + timedelta(hours=5)).strftime("%Y-%m-%dT%H:%M:%S")

    reservation_cancel(reservation=reservation, actor=slurm.member)
    assert "not found" in slurm_out(slurm.cluster, "scontrol", "show", "reservation", name)
    assert SlurmReservation.objects.get(reservation=reservation).deleted_at is not None


def test_booking_that_slurm_refuses_is_rolled_back_with_409_slurm_refused(slurm):
    start = tomorrow_at(9)
    # The cluster's admins reserved the node for maintenance in Slurm itself.
    out = slurm_out(
        slurm.cluster,
        "scontrol",
        "create",
        "reservation",
        "ReservationName=maintenance",
        f"StartTime={start.strftime('%Y-%m-%dT%H:%M:%S')}",
        "Duration=240",
        f"Nodes={slurm.cluster.hostname}",
        "Users=root",
    )
    assert "created" in out.lower()
    response = client_for(slurm.member).post(
        "/api/v1/reservations/",
        {
            "team": "vision",
            "gpu_model": slurm.model.name,
            "count": 2,
            "start": start.isoformat(),
            "duration": "02:00:00",
        },
        format="json",
    )
    assert response.status_code == 409, response.content
    body = response.json()
    assert body["code"] == "slurm_refused"
    assert body["message"].startswith("Slurm refused the booking:")
    assert body["message"] == (
        "Slurm refused the booking: "
        "Error creating the reservation: Requested reservation overlaps with another reservation"
    )
    assert not Reservation.objects.exists()
    assert not ReservationGpu.objects.exists()
    assert not SlurmReservation.objects.exists()


def test_extension_that_slurm_refuses_keeps_the_old_end(slurm):
    start = tomorrow_at(9)
    reservation = book(slurm, start=start)
    slurm_out(
        slurm.cluster,
        "scontrol",
        "create",
        "reservation",
        "ReservationName=later-maintenance",
        f"StartTime={(start + timedelta(hours=3)).strftime('%Y-%m-%dT%H:%M:%S')}",
        "Duration=60",
        f"Nodes={slurm.cluster.hostname}",
        "Users=root",
    )
    with pytest.raises(services.SlurmRefused):
        reservation_extend(
            reservation=reservation, actor=slurm.member, new_end=start + timedelta(hours=5)
        )
    reservation.refresh_from_db()
    assert reservation.end == start + timedelta(hours=2)
    shown = slurm_reservation(slurm.cluster, f"portal-{reservation.pk}")
    assert shown["EndTime"] == (start + timedelta(hours=2)).strftime("%Y-%m-%dT%H:%M:%S")


def test_job_in_a_booking_runs_inside_its_slurm_reservation(slurm):
    now = timezone.now()
    start = now.replace(minute=now.minute - now.minute % 15, second=0, microsecond=0)
    reservation = book(slurm, start=start, hours=1)
    name = f"portal-{reservation.pk}"
    assert slurm_reservation(slurm.cluster, name)["State"] == "ACTIVE"
    job = job_submit(
        actor=slurm.member,
        team=slurm.team,
        argv=["/bin/true"],
        gpu_count=2,
        max_runtime_seconds=60,
        reservation=reservation,
    )
    shown = slurm_out(slurm.cluster, "scontrol", "-o", "show", "job", str(job.slurm.slurm_job_id))
    assert f"Reservation={name}" in shown

    def succeeded():
        services.jobs_poll()
        job.refresh_from_db()
        return job.status == JobStatus.SUCCEEDED

    wait_for(succeeded, what="the job in the booking to succeed")


def test_idle_release_deletes_the_slurm_reservation(slurm):
    now = timezone.now()
    start = now.replace(minute=now.minute - now.minute % 15, second=0, microsecond=0)
    reservation = book(slurm, start=start, hours=1)
    reservation_release(reservation=reservation, reason="idle for 30 minutes")
    assert "not found" in slurm_out(
        slurm.cluster, "scontrol", "show", "reservation", f"portal-{reservation.pk}"
    )


def test_reconcile_removes_slurm_reservations_without_a_live_booking(slurm):
    kept = book(slurm, start=tomorrow_at(9))
    # Left behind in Slurm (e.g. the portal's transaction failed after Slurm said yes).
    slurm_out(
        slurm.cluster,
        "scontrol",
        "create",
        "reservation",
        "ReservationName=portal-999999",
        "StartTime=now+3600",
        "Duration=60",
        f"Nodes={slurm.cluster.hostname}",
        "Accounts=vision",
        "Flags=OVERLAP",
    )
    result = services.reservations_reconcile()
    assert result["removed"] == ["portal-999999"]
    assert slurm_reservation(slurm.cluster, f"portal-{kept.pk}")["Accounts"] == "vision"
    assert services.reservations_reconcile()["removed"] == []
