"""Booking admission and creation: the window checked against the policy, the team's quota
and budget, then the GPUs picked and held (services.py re-exports `reservation_create`, and
uses the same admission to extend).

Invariants held here:
- no GPU is held twice at once: on PostgreSQL by an exclusion constraint (a lost race rolls
  the attempt back and is retried with other GPUs), on SQLite by running every booking in one
  BEGIN IMMEDIATE transaction (settings) that re-checks;
- the team's quota rows are locked (SELECT ... FOR UPDATE) before its bookings and running jobs
  are counted (the scheduling cycle takes the same locks), so two racing requests cannot both
  take the last unit;
- every refusal raises before anything is written.

The path is measured in bench/reservations.py and its queries per booking are pinned in
tests/reservations/test_booking_path.py.
"""

import logging
from dataclasses import dataclass
from datetime import datetime

from django.core.exceptions import ValidationError
from django.db import IntegrityError, connection, transaction
from django.db.models import Count, OuterRef, QuerySet, Subquery
from django.db.models.functions import Coalesce
from django.utils import timezone

from apps.fleet.choices import GpuStatus
from apps.fleet.models import Gpu, GpuModel, Node
from apps.reservations import availability, picking, selectors
from apps.reservations.availability import GpuInfo
from apps.reservations.choices import ReservationStatus
from apps.reservations.holdings import held_outside_bookings_for
from apps.reservations.models import Reservation, ReservationGpu
from apps.reservations.policy import BookingPolicy, budget_check
from apps.teams.models import Membership, OrgUnit, Team
from apps.teams.permissions import is_platform_admin
from apps.teams.quota_rule import QuotaRow, UnitQuotaRow, Verdict
from apps.teams.selectors import (
    locked_unit_quota_statement,
    unit_path_label,
    unit_quota_rows_of,
)
from portal import hooks
from portal.exceptions import ConflictError, PolicyRefusal
from portal.formatting import format_count, format_when
from portal.raw_rows import fetch_row_sets

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
    """A team read with `caller_is_member` (the API's team field reads it for the caller, who
    is `user`) needs no query."""
    if is_platform_admin(user):
        return
    member = getattr(team, "caller_is_member", None)
    if member is None:
        member = Membership.objects.filter(user=user, team=team).exists()
    if not member:
        raise ValidationError({"team": "You are not a member of this team."})


def _fleet_gpus(gpu_model) -> QuerySet[Gpu]:
    """The whole GPUs of the model that are not retired: the most a booking can take."""
    return Gpu.objects.filter(model=gpu_model, mig_parent__isnull=True).exclude(
        status=GpuStatus.RETIRED
    )


def with_fleet_size(gpu_models: QuerySet[GpuModel]) -> QuerySet[GpuModel]:
    """GPU models with `fleet_size` (how many GPUs a booking of the model can take at most),
    read with the model so that admission asks no second time."""
    sizes = (
        _fleet_gpus(OuterRef("pk")).order_by().values("model").annotate(n=Count("pk")).values("n")
    )
    return gpu_models.annotate(fleet_size=Coalesce(Subquery(sizes), 0))


# The team's quota rows that govern a booking of a model (its model's and the any-model one),
# as raw SQL: the ORM's query cost more CPU to build than the database takes to lock the rows.
_QUOTA_ROWS = """
    SELECT q.guaranteed, q."limit", m.name FROM teams_quota q
    LEFT JOIN fleet_gpumodel m ON m.id = q.gpu_model_id
    WHERE q.team_id = %s AND (q.gpu_model_id = %s OR q.gpu_model_id IS NULL)
    ORDER BY q.id
"""


def _locked_quotas_statement(team: Team, gpu_model: GpuModel) -> tuple[str, list, tuple]:
    """The read of the quota rows that govern this booking (its model's and the any-model
    one), locked until the transaction ends so racing bookings of the team queue up here
    (SQLite has no row locks: its BEGIN IMMEDIATE serializes writers)."""
    sql = _QUOTA_ROWS
    if connection.features.has_select_for_update_of:
        sql += " FOR UPDATE OF q"
    return sql, [team.pk, gpu_model.pk], ()


def _unit_label(slug: str) -> str:
    return unit_path_label(OrgUnit.objects.get(slug=slug))


@dataclass(frozen=True)
class Admission:
    verdict: Verdict
    held_by_jobs: set[int]  # GPUs of the booking's model that running jobs hold in its window


def check_quota(
    *,
    team: Team,
    gpu_model: GpuModel,
    count: int,
    start: datetime,
    end: datetime,
    exclude_reservation_id: int | None = None,
) -> Admission:
    """Refuse (403 quota_exceeded) if the team would hold more than a limit at any instant of
    [start, end), counting its bookings and its running jobs (the quota rule,
    `apps.teams.quota_rule`); a team without a quota for the model may book none of it.
    Returns the rule's verdict (`over_gpus` of the `count` GPUs are above the guarantee) and
    the model's GPUs running jobs hold then, read with the team's jobs after the locks."""
    # One round trip on PostgreSQL: the team's rows locked, then the units' rows, then the
    # team's bookings over the window (after both locks: each statement reads what was
    # committed when it starts).
    quota_rows, unit_rows, bookings = fetch_row_sets(
        [
            _locked_quotas_statement(team, gpu_model),
            (*locked_unit_quota_statement(gpu_model), ()),
            selectors.team_bookings_statement(
                team=team,
                start=start,
                end=end,
                exclude_reservation_id=exclude_reservation_id,
                counted=True,
            ),
        ]
    )
    quotas = [
        QuotaRow(team.slug, model, guaranteed, limit) for guaranteed, limit, model in quota_rows
    ]
    unit_quotas = unit_quota_rows_of(unit_rows)
    jobs = held_outside_bookings_for(start=start, end=end, team=team, gpu_model=gpu_model)
    verdict = selectors.quota_verdict(
        team=team,
        gpu_model=gpu_model,
        count=count,
        start=start,
        end=end,
        quotas=quotas,
        unit_quotas=unit_quotas,
        exclude_reservation_id=exclude_reservation_id,
        team_jobs=[(model, s, e) for _, team_id, model, s, e in jobs if team_id == team.pk],
        team_bookings=bookings,
    )
    if not verdict.rows:
        raise PolicyRefusal(
            f"Team {team.slug} has no quota for {gpu_model.name}. Ask a platform admin for one.",
            code="quota_exceeded",
            detail={"gpu_model": gpu_model.name, "limit": 0, "requested": count},
        )
    row = verdict.refused_by
    if isinstance(row, UnitQuotaRow):
        raise PolicyRefusal(
            f"Quota exceeded: the teams of unit {_unit_label(row.unit)} may hold "
            f"{format_count(row.limit, 'GPU')} of {row.scope} together beyond their "
            f"guarantees; {verdict.held} are already held in this window (bookings and running "
            f"jobs) and you asked for {count}.",
            code="quota_exceeded",
            detail={
                "unit": _unit_label(row.unit),
                "gpu_model": row.scope,
                "limit": row.limit,
                "booked": verdict.held,
                "requested": count,
                "available": max(row.limit - verdict.held, 0),
            },
        )
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
    return Admission(
        verdict=verdict,
        held_by_jobs={gpu_id for gpu_id, _, model, _, _ in jobs if model == gpu_model.name},
    )


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


def _picking_lock(gpu_model: GpuModel) -> tuple[int, int] | None:
    """Bookings of one GPU model pick their GPUs one at a time (until commit). Without this,
    racing bookings all choose the same best GPUs and all but one lose on the exclusion
    constraint, retrying in a storm. SQLite needs nothing: BEGIN IMMEDIATE serializes writes."""
    if connection.vendor == "postgresql":
        return (GPU_PICK_LOCK, gpu_model.pk)
    return None


def is_overlap_violation(error: IntegrityError) -> bool:
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
    fleet_size = getattr(gpu_model, "fleet_size", None)
    if fleet_size is None:
        fleet_size = _fleet_gpus(gpu_model).count()
    if count > fleet_size:
        fleet = format_count(fleet_size, f"{gpu_model.name} GPU")
        raise ValidationError({"count": f"The fleet has only {fleet}."})

    free = 0
    for _attempt in range(BOOKING_ATTEMPTS):
        try:
            return _book(
                team=team,
                user=user,
                gpu_model=gpu_model,
                count=count,
                start=start,
                end=end,
                purpose=purpose,
                same_node=same_node,
                now=now,
            )
        except _TooFewFree as refusal:
            # Answered once the locks are given back: the next free slot is a search.
            free = refusal.free
            break
        except IntegrityError as error:
            # Rare: bookings of a model pick one at a time (`_picking_lock`); only
            # a writer outside that lock (an extension, a relocation) can take the GPUs.
            if not is_overlap_violation(error):
                raise
            logger.info("booking raced another for the same GPUs; retrying")
    raise _conflict(
        gpu_model=gpu_model,
        count=count,
        start=start,
        end=end,
        same_node=same_node,
        free=free,
    )


class _TooFewFree(Exception):
    def __init__(self, free: int):
        super().__init__(free)
        self.free = free


@transaction.atomic
def _book(*, team, user, gpu_model, count, start, end, purpose, same_node, now) -> Reservation:
    """One attempt at the booking, in one transaction: admission under the team's quota
    locks, then the GPUs picked and held under the model's picking lock. A lost race on the
    exclusion constraint rolls all of it back (IntegrityError) for the caller to try again:
    no savepoint around the inserts, which would cost two round trips under the lock."""
    admission = check_quota(team=team, gpu_model=gpu_model, count=count, start=start, end=end)
    over_gpus = admission.verdict.over_gpus
    budget_check(
        team=team,
        gpu_model=gpu_model,
        count=count,
        start=start,
        end=end,
        over_quota_gpus=over_gpus,
    )
    # Everything but the pick and its holdings happens before the model's picking lock, so
    # that bookings of the model wait for one another over two round trips (the lock with the
    # pick, then the holdings) and the commit. Jobs start under the quota locks, not this one;
    # the model's running jobs were read with the team's, under those locks.
    free = picking.FreeGpus.of(
        gpu_model=gpu_model, start=start, end=end, held_elsewhere=admission.held_by_jobs
    )
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
        status=ReservationStatus.ACTIVE if start <= now else ReservationStatus.SCHEDULED,
    )
    # The GPUs above the guarantee are the last picked: they are charged at the over-quota
    # multiplier, the others at list price.
    held = []
    if connection.vendor == "postgresql":
        held = free.hold_on_best_fitting_node(
            count,
            reservation_id=reservation.pk,
            start=start,
            end=end,
            guaranteed=count - over_gpus,
            after_lock=_picking_lock(gpu_model),
        )
    if held:
        picked = [gpu for _, gpu in held]
        holdings = [
            ReservationGpu(
                id=holding_id,
                reservation=reservation,
                gpu_id=gpu.id,
                start=start,
                end=end,
                over_quota=index >= count - over_gpus,
            )
            for index, (holding_id, gpu) in enumerate(held)
        ]
    else:
        picked = _pick(
            free,
            gpu_model=gpu_model,
            count=count,
            same_node=same_node,
            no_node_fits=connection.vendor == "postgresql",
        )
        holdings = ReservationGpu.objects.bulk_create(
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
    _keep_picked_gpus(reservation, holdings, picked, gpu_model)
    return reservation


def _keep_picked_gpus(reservation, holdings, picked: list[GpuInfo], gpu_model) -> None:
    """`reservation.picked_holdings`: the holdings just written, each with its GPU's identity
    (uuid, index, node's hostname) as the pick read it, so that the API's reply reads nothing
    back. Only those fields are set on these GPUs; the booking's own relations are untouched."""
    for holding, gpu in zip(holdings, picked, strict=True):
        holding.gpu = Gpu(
            id=gpu.id,
            index=gpu.index,
            uuid=gpu.uuid,
            nvlink_domain=gpu.nvlink_domain,
            model=gpu_model,
            node=Node(hostname=gpu.node),
        )
    reservation.picked_holdings = holdings


def _pick(
    free: picking.FreeGpus, *, gpu_model, count, same_node, no_node_fits: bool = False
) -> list[GpuInfo]:
    """The GPUs to book, read in the same round trip as the picking lock when one node can
    take the whole booking; raises _TooFewFree with how many are free when they are too few.
    `no_node_fits`: the lock is held and no node has `count` free GPUs (PostgreSQL has tried
    `hold_on_best_fitting_node`)."""
    if no_node_fits:
        candidates = []
    else:
        candidates = free.on_best_fitting_node(count, after_lock=_picking_lock(gpu_model))
    if len(candidates) < count and not same_node:
        candidates = free.all()
    picked = availability.pick_gpus(candidates, count, same_node=same_node)
    if picked is not None:
        return picked
    if same_node:
        candidates = free.all()
    raise _TooFewFree(len(candidates))
