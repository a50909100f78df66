"""Booking rules: book, cancel, extend, release (relocation.py moves bookings off GPUs that
leave service; lifecycle.py starts, ends and reminds them by the clock).

Invariants held here:
- no GPU is held twice at once: on PostgreSQL by an exclusion constraint (a lost race is
  retried with other GPUs), on SQLite by running every booking in one BEGIN IMMEDIATE
  transaction (settings) that re-checks;
- the team's quota rows are locked (SELECT ... FOR UPDATE) before its bookings and running jobs
  are counted (the scheduling cycle takes the same locks), so two racing requests cannot both
  take the last unit;
- every refusal raises before anything is written.
"""

import logging
from collections.abc import Callable
from datetime import datetime, timedelta
from decimal import Decimal

from django.core.exceptions import ValidationError
from django.db import IntegrityError, connection, transaction
from django.db.models import Q
from django.utils import timezone

from apps.audit.services import audit_record
from apps.fleet.choices import GpuStatus
from apps.fleet.models import Gpu, GpuModel
from apps.reservations import availability, selectors
from apps.reservations.choices import OPEN_STATUSES, ReservationStatus
from apps.reservations.models import Reservation, ReservationGpu
from apps.reservations.policy import BookingPolicy, budget_check
from apps.teams.choices import TeamRole
from apps.teams.models import Membership, Quota, Team, User
from apps.teams.permissions import is_platform_admin
from apps.teams.quota_rule import Verdict
from apps.teams.services import mail_in_their_zones
from portal import hooks
from portal.exceptions import ConflictError, PolicyRefusal
from portal.formatting import format_count, format_when

logger = logging.getLogger(__name__)

BOOKING_ATTEMPTS = 4
EXCLUSION_CONSTRAINT = "holding_no_overlap_per_gpu"
GPU_PICK_LOCK = 0x47505550  # advisory-lock namespace: "GPUP"


def validate_window(
    *, start: datetime, end: datetime, count: int, policy: BookingPolicy, now: datetime
) -> None:
    """Policy checks on a requested window; raises ValidationError with per-field messages."""
    errors: dict[str, str] = {}
    slot_minutes = int(policy.slot.total_seconds() // 60)
    if start.tzinfo is None or end.tzinfo is None:
        errors["start"] = "Give times with a time zone (e.g. 2026-12-03T09:00:00Z)."
    else:
        if start < availability.from_epoch(
            availability.floor_to_grid(
                availability.to_epoch(now), availability.seconds(policy.slot)
            )
        ):
            errors["start"] = "The start is in the past."
        elif start > now + policy.max_advance:
            errors["start"] = f"Book at most {policy.max_advance.days} days ahead."
        elif not availability.is_on_grid(start, policy.slot):
            errors["start"] = f"The start must be on the {slot_minutes}-minute grid."
        if end <= start:
            errors["end"] = "The end must be after the start."
        elif end - start > policy.max_duration:
            hours = int(policy.max_duration.total_seconds() // 3600)
            errors["end"] = f"A booking lasts at most {hours} hours."
        elif (end - start) % policy.slot:
            # The duration's own error: an off-grid start already has its message, and a
            # 2-hour booking from 10:07 is not the wrong length.
            errors["end"] = f"The duration must be a multiple of {slot_minutes} minutes."
    if count < 1:
        errors["count"] = "Book at least one GPU."
    elif count > policy.max_gpus:
        errors["count"] = f"Book at most {policy.max_gpus} GPUs at once."
    if errors:
        raise ValidationError(errors)


def _require_member(user, team: Team) -> None:
    if is_platform_admin(user):
        return
    if not Membership.objects.filter(user=user, team=team).exists():
        raise ValidationError({"team": "You are not a member of this team."})


def _locked_quotas(team: Team, gpu_model: GpuModel) -> list[Quota]:
    """The quota rows that govern this booking (its model's and the any-model one), locked
    until the transaction ends so racing bookings of the team queue up here."""
    return list(
        Quota.objects.select_for_update(of=("self",))
        .select_related("gpu_model")
        .filter(Q(gpu_model=gpu_model) | Q(gpu_model__isnull=True), team=team)
        .order_by("id")
    )


def check_quota(
    *,
    team: Team,
    gpu_model: GpuModel,
    count: int,
    start: datetime,
    end: datetime,
    exclude_reservation_id: int | None = None,
) -> Verdict:
    """Refuse (403 quota_exceeded) if the team would hold more than a limit at any instant of
    [start, end), counting its bookings and its running jobs (the quota rule,
    `apps.teams.quota_rule`); a team without a quota for the model may book none of it.
    Returns the rule's verdict: `over_gpus` of the `count` GPUs are above the guarantee."""
    verdict = selectors.quota_verdict(
        team=team,
        gpu_model=gpu_model,
        count=count,
        start=start,
        end=end,
        quotas=_locked_quotas(team, gpu_model),
        exclude_reservation_id=exclude_reservation_id,
    )
    if not verdict.rows:
        raise PolicyRefusal(
            f"Team {team.slug} has no quota for {gpu_model.name}. Ask a platform admin for one.",
            code="quota_exceeded",
            detail={"gpu_model": gpu_model.name, "limit": 0, "requested": count},
        )
    row = verdict.refused_by
    if row is not None:
        held = verdict.held
        raise PolicyRefusal(
            f"Quota exceeded: team {team.slug} may hold {format_count(row.limit, 'GPU')} "
            f"of {row.scope}; "
            f"{held} are already held in this window (bookings and running jobs) and you "
            f"asked for {count}.",
            code="quota_exceeded",
            detail={
                "gpu_model": row.scope,
                "limit": row.limit,
                "guaranteed": row.guaranteed,
                "booked": held,
                "requested": count,
                "available": max(row.limit - held, 0),
            },
        )
    return verdict


def _next_slot_detail(*, gpu_model, count, duration, after, same_node) -> dict | None:
    slots = selectors.slots_from_now(
        gpu_model=gpu_model,
        count=count,
        duration=duration,
        after=after,
        same_node=same_node,
        limit=1,
    )
    if not slots:
        return None
    return {
        "start": slots[0].start.isoformat(),
        "end": (slots[0].start + duration).isoformat(),
        "latest_start": slots[0].latest_start.isoformat(),
    }


def _conflict(*, gpu_model, count, start, end, same_node, free: int) -> ConflictError:
    next_slot = _next_slot_detail(
        gpu_model=gpu_model,
        count=count,
        duration=end - start,
        after=start,
        same_node=same_node,
    )
    where = " on one node" if same_node else ""
    message = (
        f"Only {format_count(free, gpu_model.name + ' GPU')} {'is' if free == 1 else 'are'} "
        f"free{where} from {format_when(start)} to "
        f"{format_when(end)}; you asked for {count}."
    )
    if next_slot:
        message += (
            f" Next free slot starts {format_when(datetime.fromisoformat(next_slot['start']))}."
        )
    return ConflictError(
        message,
        detail={
            "requested": {"start": start.isoformat(), "end": end.isoformat(), "count": count},
            "free_gpus": free,
            "next_free_slot": next_slot,
        },
    )


def _serialize_gpu_picking(gpu_model: GpuModel) -> None:
    """Bookings of one GPU model pick their GPUs one at a time (until commit). Without this,
    racing bookings all choose the same best GPUs and all but one lose on the exclusion
    constraint, retrying in a storm. SQLite needs nothing: BEGIN IMMEDIATE serializes writes."""
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_xact_lock(%s, %s)", [GPU_PICK_LOCK, gpu_model.pk])


def _is_overlap_violation(error: IntegrityError) -> bool:
    return EXCLUSION_CONSTRAINT in str(error)


def reservation_create(
    *,
    team: Team,
    user,
    gpu_model: GpuModel,
    count: int,
    start: datetime,
    end: datetime,
    purpose: str = "",
    same_node: bool = False,
) -> Reservation:
    """Book `count` GPUs of `gpu_model` for [start, end), picking GPUs on one node first, then
    one NVLink domain. 400 on bad input, 403 quota_exceeded / budget_exhausted, 409 conflict."""
    policy = BookingPolicy.from_settings()
    now = timezone.now()
    _require_member(user, team)
    validate_window(start=start, end=end, count=count, policy=policy, now=now)
    if not team.is_active:
        raise ValidationError({"team": f"Team {team.slug} is inactive."})
    existing = Gpu.objects.filter(model=gpu_model, mig_parent__isnull=True).exclude(
        status=GpuStatus.RETIRED
    )
    if count > existing.count():
        fleet = format_count(existing.count(), f"{gpu_model.name} GPU")
        raise ValidationError({"count": f"The fleet has only {fleet}."})

    with transaction.atomic():
        verdict = check_quota(team=team, gpu_model=gpu_model, count=count, start=start, end=end)
        over_gpus = verdict.over_gpus
        budget_check(
            team=team,
            gpu_model=gpu_model,
            count=count,
            start=start,
            end=end,
            over_quota_gpus=over_gpus,
        )
        _serialize_gpu_picking(gpu_model)
        for _attempt in range(BOOKING_ATTEMPTS):
            free = selectors.schedulable_gpus(gpu_model=gpu_model, free_from=start, free_until=end)
            picked = availability.pick_gpus(free, count, same_node=same_node)
            if picked is None:
                raise _conflict(
                    gpu_model=gpu_model,
                    count=count,
                    start=start,
                    end=end,
                    same_node=same_node,
                    free=len(free),
                )
            try:
                with transaction.atomic():
                    reservation = Reservation.objects.create(
                        team=team,
                        created_by=user,
                        gpu_model=gpu_model,
                        count=count,
                        start=start,
                        end=end,
                        purpose=purpose,
                        same_node=same_node,
                        over_quota=over_gpus > 0,
                        status=ReservationStatus.ACTIVE
                        if start <= now
                        else ReservationStatus.SCHEDULED,
                    )
                    # The GPUs above the guarantee are the last picked: they are charged at
                    # the over-quota multiplier, the others at list price.
                    ReservationGpu.objects.bulk_create(
                        ReservationGpu(
                            reservation=reservation,
                            gpu_id=g.id,
                            start=start,
                            end=end,
                            over_quota=index >= count - over_gpus,
                        )
                        for index, g in enumerate(picked)
                    )
                # Integrations (Slurm) mirror the booking; a refusal rolls it back.
                hooks.emit("reservation.created", reservation=reservation)
                return reservation
            except IntegrityError as error:
                if not _is_overlap_violation(error):
                    raise
                logger.info("booking raced another for the same GPUs; retrying")
        raise _conflict(
            gpu_model=gpu_model,
            count=count,
            start=start,
            end=end,
            same_node=same_node,
            free=0,
        )


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
    holdings = reservation.holdings.filter(active=True, end__gt=moment)
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
        if not _is_overlap_violation(error):
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
