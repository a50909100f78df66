"""Booking rules: book, cancel, extend, release (booking.py admits and creates bookings;
relocation.py moves bookings off GPUs that leave service; lifecycle.py starts, ends and
reminds them by the clock).

Invariants held here:
- no GPU is held twice at once: on PostgreSQL by an exclusion constraint, on SQLite by running
  every write in one BEGIN IMMEDIATE transaction (settings) that re-checks;
- the team's quota rows are locked (SELECT ... FOR UPDATE) before its bookings and running jobs
  are counted (the scheduling cycle takes the same locks), so two racing requests cannot both
  take the last unit;
- every refusal raises before anything is written.
"""

from collections.abc import Callable
from datetime import datetime, timedelta
from decimal import Decimal

from django.core.exceptions import ValidationError
from django.db import IntegrityError, transaction
from django.utils import timezone

from apps.audit.services import audit_record
from apps.reservations import availability, selectors
from apps.reservations.booking import check_quota, is_overlap_violation, validate_window
from apps.reservations.booking import reservation_create as reservation_create
from apps.reservations.choices import OPEN_STATUSES, ReservationStatus
from apps.reservations.holdings import bookings_holding
from apps.reservations.models import Reservation
from apps.reservations.policy import BookingPolicy, budget_check
from apps.teams.choices import TeamRole
from apps.teams.models import Membership, User
from apps.teams.permissions import is_platform_admin
from apps.teams.services import mail_in_their_zones
from portal import hooks
from portal.exceptions import ConflictError, PolicyRefusal
from portal.formatting import format_when


def _require_manager(user, reservation: Reservation, verb: str) -> None:
    """The booker, the team's admins and platform admins may change a booking."""
    if is_platform_admin(user) or reservation.created_by_id == user.pk:
        return
    if Membership.objects.filter(
        user=user, team_id=reservation.team_id, role=TeamRole.TEAM_ADMIN
    ).exists():
        return
    raise PolicyRefusal(
        f"Only the person who booked it, a team admin or a platform admin may {verb} it.",
        code="not_owner",
    )


def _lock(reservation: Reservation) -> Reservation:
    return (
        Reservation.objects.select_for_update()
        .select_related("team", "gpu_model")
        .get(pk=reservation.pk)
    )


def end_holdings_at(reservation: Reservation, moment: datetime) -> None:
    """Give back everything after `moment`: future holdings go, running ones are cut short."""
    holdings = bookings_holding(moment).filter(reservation=reservation)
    holdings.filter(start__gte=moment).update(active=False)
    holdings.filter(start__lt=moment).update(end=moment)


def _require_open(reservation: Reservation, verb: str) -> None:
    if reservation.status not in OPEN_STATUSES:
        raise ConflictError(
            f"Reservation #{reservation.pk} is {reservation.status}; it cannot be {verb}.",
            code="invalid_state",
            detail={"status": reservation.status},
        )


def notify_team(reservation: Reservation, subject: str, body: str | Callable[[], str]) -> None:
    """Email the booker and the team's admins once the transaction commits (through the outbox:
    a mail server that is down delays the notice, never loses it). Each reads it in their own
    time zone: a `body` callable is written once per zone (apps.teams.services)."""
    admins = User.objects.filter(
        memberships__team_id=reservation.team_id, memberships__role=TeamRole.TEAM_ADMIN
    )
    mail_in_their_zones(users={reservation.created_by, *admins}, subject=subject, body=body)


@transaction.atomic
def reservation_cancel(*, reservation: Reservation, actor, reason: str = "") -> Reservation:
    """Cancel before or during the window; the rest of the window is freed at once.

    A platform admin cancelling someone else's booking is a forced cancel: it needs a reason,
    is audited, and the team is told why."""
    reservation = _lock(reservation)
    _require_manager(actor, reservation, "cancel")
    _require_open(reservation, "cancelled")
    forced = (
        is_platform_admin(actor)
        and not Membership.objects.filter(user=actor, team_id=reservation.team_id).exists()
    )
    if forced and not reason.strip():
        raise ValidationError({"reason": "Say why you cancel another team's booking."})
    now = timezone.now()
    before = {"status": reservation.status}
    end_holdings_at(reservation, max(now, reservation.start))
    reservation.status = ReservationStatus.CANCELLED
    reservation.ended_at = now
    reservation.end_reason = reason
    reservation.save(update_fields=["status", "ended_at", "end_reason"])
    hooks.emit("reservation.ended", reservation=reservation)
    if forced:
        audit_record(
            actor=actor,
            action="reservation.force_cancel",
            target=reservation,
            before=before,
            after={"status": reservation.status},
            reason=reason,
        )
        notify_team(
            reservation,
            f"Your GPU reservation #{reservation.pk} was cancelled by a platform admin",
            lambda: f"{reservation} was cancelled by {actor.get_username()}.\n\nReason: {reason}\n",
        )
    return reservation


@transaction.atomic
def reservation_extend(*, reservation: Reservation, actor, new_end: datetime) -> Reservation:
    """Move the end later, keeping the same GPUs; refused (409) if any of them is taken."""
    reservation = _lock(reservation)
    _require_manager(actor, reservation, "extend")
    _require_open(reservation, "extended")
    policy = BookingPolicy.from_settings()
    if new_end <= reservation.end:
        raise ValidationError({"end": "The new end must be after the current end."})
    validate_window(
        start=reservation.start,
        end=new_end,
        count=reservation.count,
        policy=policy,
        now=min(timezone.now(), reservation.start),
    )
    check_quota(
        team=reservation.team,
        gpu_model=reservation.gpu_model,
        count=reservation.count,
        start=reservation.end,
        end=new_end,
        exclude_reservation_id=reservation.pk,
    )
    # The extension keeps the booking's GPUs, each at the price it was booked at.
    budget_check(
        team=reservation.team,
        gpu_model=reservation.gpu_model,
        count=reservation.count,
        start=reservation.end,
        end=new_end,
        over_quota_gpus=reservation.holdings.filter(
            active=True, end=reservation.end, over_quota=True
        ).count(),
    )
    gpu_ids = list(reservation.holdings.filter(active=True).values_list("gpu_id", flat=True))
    taken = selectors.busy_intervals(
        gpu_ids=gpu_ids,
        start=reservation.end,
        end=new_end,
        exclude_reservation_id=reservation.pk,
    )
    if taken:
        first = availability.from_epoch(min(s for spans in taken.values() for s, _ in spans))
        raise ConflictError(
            f"Cannot extend: {len(taken)} of its GPUs are booked from {format_when(first)}.",
            detail={"taken_from": first.isoformat(), "gpus_taken": len(taken)},
        )
    try:
        with transaction.atomic():
            reservation.holdings.filter(active=True, end=reservation.end).update(end=new_end)
    except IntegrityError as error:
        if not is_overlap_violation(error):
            raise
        raise ConflictError("Cannot extend: its GPUs were just booked by someone else.") from error
    reservation.end = new_end
    reservation.reminder_sent_at = None
    reservation.save(update_fields=["end", "reminder_sent_at"])
    hooks.emit("reservation.extended", reservation=reservation)
    return reservation


@transaction.atomic
def reservation_release(*, reservation: Reservation, reason: str, actor=None) -> Reservation:
    """End an active booking early because its GPUs sit idle (called by idle detection) and
    record the GPU-hours given back."""
    reservation = _lock(reservation)
    if reservation.status != ReservationStatus.ACTIVE:
        raise ConflictError(
            f"Reservation #{reservation.pk} is {reservation.status}; "
            "only active ones can be released.",
            code="invalid_state",
        )
    now = timezone.now()
    remaining = max(reservation.end - now, timedelta(0))
    end_holdings_at(reservation, now)
    reservation.status = ReservationStatus.RELEASED
    reservation.ended_at = now
    reservation.end_reason = reason
    reservation.released_gpu_hours = (
        Decimal(reservation.count) * Decimal(remaining.total_seconds()) / Decimal(3600)
    ).quantize(Decimal("0.0001"))
    reservation.save(update_fields=["status", "ended_at", "end_reason", "released_gpu_hours"])
    hooks.emit("reservation.ended", reservation=reservation)
    audit_record(
        actor=actor,
        action="reservation.release",
        target=reservation,
        before={"status": ReservationStatus.ACTIVE},
        after={
            "status": reservation.status,
            "released_gpu_hours": str(reservation.released_gpu_hours),
        },
        reason=reason,
    )
    notify_team(
        reservation,
        f"Your GPU reservation #{reservation.pk} was released",
        lambda: f"{reservation} was released early: {reason}\n",
    )
    return reservation
