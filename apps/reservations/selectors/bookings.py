"""Reads of bookings: what a user may see, the bookings on GPUs, what became of a booking's GPUs."""

from dataclasses import dataclass
from datetime import datetime

from django.db import connection
from django.db.models import Q, QuerySet
from django.utils import timezone

from apps.fleet.choices import GpuStatus, PowerState
from apps.fleet.models import Gpu, GpuModel, MaintenanceWindow
from apps.reservations.holdings import bookings_holding
from apps.reservations.models import Reservation, ReservationGpu
from apps.teams.models import MANAGED_UNITS_SQL, Team
from portal import queries
from portal.raw_rows import columns_of, instance_from_row


def reservation_list(*, user) -> QuerySet[Reservation]:
    """Reservations of the user's teams (all teams for finance and platform admins)."""
    return Reservation.objects.for_user(user).select_related("team", "gpu_model", "created_by")


# A booking's team and GPU model, read in one query: the team with whether the caller belongs to
# it and whether it sits below a unit the caller administers (`Team.objects.for_user`'s rule),
# the model with its fleet size (`booking.with_fleet_size`'s count). Two ORM lookups cost a
# round trip more and more CPU to build than the database takes to answer. Parameters: the
# caller's id (twice), the retired status, the team's slug, the model's name.
_BOOKING_REFERENCES_SQL = """
    SELECT {team_columns},
        EXISTS (SELECT 1 FROM teams_membership ms WHERE ms.team_id = t.id AND ms.user_id = %s),
        t.unit_id IN ({managed_units}),
        {model_columns},
        (SELECT COUNT(*) FROM fleet_gpu g
         WHERE g.model_id = m.id AND g.mig_parent_id IS NULL AND g.status <> %s)
    FROM (SELECT 1 AS one) o
    LEFT JOIN teams_team t ON t.slug = %s
    LEFT JOIN fleet_gpumodel m ON m.name = %s
"""


def booking_references(
    *, user, team_slug: str | None, gpu_model_name: str | None
) -> tuple[Team | None, GpuModel | None]:
    """The team of that slug if ``user`` may see it (`Team.objects.for_user`), with
    `caller_is_member`, and the GPU model of that name with `fleet_size`, in one query; None
    for either that is not found (or not asked: None)."""
    team_fields, model_fields = Team._meta.concrete_fields, GpuModel._meta.concrete_fields
    sql = _BOOKING_REFERENCES_SQL.format(
        team_columns=columns_of(Team, "t"),
        managed_units=MANAGED_UNITS_SQL,
        model_columns=columns_of(GpuModel, "m"),
    )
    params = [user.pk, user.pk, str(GpuStatus.RETIRED), team_slug, gpu_model_name]
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        row = cursor.fetchone()
    team = model = None
    team_values, row = row[: len(team_fields)], row[len(team_fields) :]
    is_member, under_managed_unit = row[0], row[1]
    model_values, fleet_size = row[2 : 2 + len(model_fields)], row[-1]
    sees_teams = user.is_authenticated and user.is_active
    if (
        team_values[0] is not None
        and sees_teams
        and (user.sees_all_teams or is_member or under_managed_unit)
    ):
        team = instance_from_row(Team, team_values)
        team.caller_is_member = bool(is_member)
    if model_values[0] is not None:
        model = instance_from_row(GpuModel, model_values)
        model.fleet_size = fleet_size
    return team, model


def open_reservations_on_gpus(*, gpu_ids, now: datetime) -> QuerySet[ReservationGpu]:
    """The booking holdings of the GPUs from ``now`` on (still running or ahead)."""
    return bookings_holding(now, gpu_ids=gpu_ids).select_related(
        "reservation", "reservation__team", "gpu"
    )


def with_figures(reservations) -> list[Reservation]:
    """The bookings, each with `figures`: what higher apps add through the
    `reservations.figures` hook (efficiency, cost so far), {} when nothing answers; one answer
    per subscriber for the whole list."""
    reservations = list(reservations)
    figures = queries.ask_merged("reservations.figures", reservations=reservations)
    for reservation in reservations:
        reservation.figures = figures.get(reservation.pk, {})
    return reservations


@dataclass(frozen=True)
class HoldingChange:
    """What happened to one of a booking's GPUs when it left service: moved to another GPU
    (`moved`), or stranded on it because no other GPU was free."""

    moved: bool
    gpu: Gpu  # where the booking is now (moved) or the GPU that left service (stranded)
    moved_from: Gpu | None
    at: datetime
    reason: str


def holding_changes(*, reservation: Reservation, now: datetime | None = None) -> dict:
    """The booking's GPUs that left service: `moved` (each to its new GPU) and `stranded`
    (left on a GPU out of service, while the holding lasts and the GPU is still out of
    service for it), and whether any GPU is left in
    service for the rest of the booking (`none_left`)."""
    now = now or timezone.now()
    rows = list(
        ReservationGpu.objects.filter(reservation=reservation, active=True)
        .filter(Q(moved_from__isnull=False) | Q(stranded=True, end__gt=now))
        .select_related("gpu__node", "moved_from__node")
        .order_by("changed_at", "gpu__node__hostname", "gpu__index")
    )
    moved = [
        HoldingChange(True, r.gpu, r.moved_from, r.changed_at, r.change_reason)
        for r in rows
        if r.moved_from_id
    ]
    # A stranded holding is news only while its GPU is still out of service for it: back in
    # service (undrained, the maintenance window cancelled), the booking has it again.
    # A powered-down node still serves its bookings (it is woken for them), unless it failed
    # to power on.
    in_service = set(
        Gpu.objects.in_service()
        .exclude(node__power_state=PowerState.RESUME_FAILED)
        .filter(pk__in=[r.gpu_id for r in rows if r.stranded])
        .values_list("pk", flat=True)
    )
    stranded = [
        HoldingChange(False, r.gpu, None, r.changed_at, r.change_reason)
        for r in rows
        if r.stranded
        and (
            r.gpu_id not in in_service
            or MaintenanceWindow.objects.filter(
                node_id=r.gpu.node_id, start__lt=r.end, end__gt=r.start
            ).exists()
        )
    ]
    none_left = bool(stranded) and not (
        bookings_holding(now)
        .filter(reservation=reservation)
        .exclude(gpu_id__in=[c.gpu.pk for c in stranded])
        .exists()
    )
    return {"moved": moved, "stranded": stranded, "none_left": none_left}
