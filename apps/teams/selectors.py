from collections import defaultdict
from dataclasses import dataclass
from datetime import datetime
from functools import reduce
from operator import or_

from django.db import connection
from django.db.models import Count, Q, QuerySet
from django.utils import timezone

from apps.audit.selectors import audit_event_list
from apps.fleet.models import Gpu, GpuModel
from apps.teams.choices import GlobalRole, TeamRole
from apps.teams.models import (
    Membership,
    OrgUnit,
    Quota,
    Team,
    UnitMembership,
    UnitQuota,
    User,
    root_unit_pk,
)
from apps.teams.org_tree import OrgTree
from apps.teams.quota_rule import QuotaRow, QuotaRule, UnitQuotaRow
from portal import queries
from portal.exceptions import ApplicationError


def team_list(*, user) -> QuerySet[Team]:
    return (
        Team.objects.for_user(user)
        .annotate(member_count=Count("memberships", distinct=True))
        .order_by("slug")
    )


def team_members(*, team: Team) -> QuerySet[Membership]:
    return team.memberships.select_related("user").order_by("user__username")


def platform_admins() -> QuerySet[User]:
    """Active platform admins (the role or superusers), by username."""
    return User.objects.filter(
        Q(is_superuser=True) | Q(global_role=GlobalRole.PLATFORM_ADMIN), is_active=True
    ).order_by("username")


def user_memberships(*, user) -> QuerySet[Membership]:
    return Membership.objects.filter(user=user).select_related("team")


def quota_table(*, teams=None, now: datetime | None = None) -> list[dict]:
    """Per quota row: guaranteed, limit, what the team holds in the row's scope now (and how
    much of it is borrowed above the guarantee) and at its peak over the next 7 days
    (bookings and running jobs), and what it may still take then (the quota rule: a model's
    row and the team's any-model row both bound it). Holdings come
    from the `quota.usage` query (reservations answers it), so teams needs nothing from the
    layers above it."""
    quotas = list(Quota.objects.select_related("team", "gpu_model"))
    if teams is not None:
        wanted = {team.pk for team in teams}
        quotas = [quota for quota in quotas if quota.team_id in wanted]
    usage: dict[int, dict] = {}
    for answer in queries.ask("quota.usage", quotas=quotas, now=now or timezone.now()):
        usage.update(answer)
    none = {"in_use": 0, "peak_7d": 0}
    rule = QuotaRule(_row(quota) for quota in quotas)
    peak = {
        (row.team, row.model): usage.get(q.pk, none)["peak_7d"] for q in quotas for row in [_row(q)]
    }
    rows = []
    for quota in quotas:
        row = _row(quota)
        used = usage.get(quota.pk, none)
        held_all = peak.get((row.team, None), 0)
        if row.model is None:
            left = row.limit - held_all
        else:
            left = rule.room(row.team, row.model, used["peak_7d"], held_all)
        rows.append(
            {
                "quota": quota,
                "team": quota.team,
                "gpu_model": quota.gpu_model,
                "guaranteed": quota.guaranteed,
                "limit": quota.limit,
                "in_use": used["in_use"],
                "borrowed": row.borrowed(used["in_use"]),
                "peak_7d": used["peak_7d"],
                "left": max(left, 0),
            }
        )
    return rows


def team_quota_rule(*, team: Team) -> QuotaRule:
    """The quota rule over the team's rows and the rows of the units above it (read without
    locks: for pages, suggestions and submit-time checks; admission locks its rows itself)."""
    return QuotaRule(
        (
            _row(quota)
            for quota in Quota.objects.filter(team=team).select_related("team", "gpu_model")
        ),
        *unit_quota_rows(),
    )


def unit_quota_rows(
    *, gpu_model: GpuModel | None = None, lock: bool = False
) -> tuple[list[UnitQuotaRow], OrgTree | None]:
    """The units' quota rows (of ``gpu_model`` and the any-model ones, when given) and the
    tree the quota rule walks (units and teams by slug, as quota rows name them): read once
    per request. ``lock`` takes the rows FOR UPDATE (booking admission: racing bookings of
    teams below one unit queue up here). No unit rows: ``([], None)``, the flat rule, in one
    query."""
    if lock and gpu_model is not None:
        sql, params = locked_unit_quota_statement(gpu_model)
        with connection.cursor() as cursor:
            cursor.execute(sql, params)
            return unit_quota_rows_of(cursor.fetchall())
    rows = UnitQuota.objects.select_related("unit", "gpu_model").order_by("id")
    if gpu_model is not None:
        rows = rows.filter(Q(gpu_model=gpu_model) | Q(gpu_model__isnull=True))
    if lock:
        rows = rows.select_for_update(of=("self",))
    found = [
        UnitQuotaRow(
            row.unit.slug,
            row.gpu_model.name if row.gpu_model else None,
            row.guaranteed,
            row.limit,
        )
        for row in rows
    ]
    if not found:
        return [], None
    return found, quota_org_tree()


# Booking admission's read of the units' rows of a model, as raw SQL: the ORM's query cost
# more CPU to build than the database takes to lock the rows (most fleets have none).
_UNIT_QUOTA_ROWS = """
    SELECT u.slug, m.name, q.guaranteed, q."limit" FROM teams_unitquota q
    JOIN teams_orgunit u ON u.id = q.unit_id
    LEFT JOIN fleet_gpumodel m ON m.id = q.gpu_model_id
    WHERE q.gpu_model_id = %s OR q.gpu_model_id IS NULL
    ORDER BY q.id
"""


def locked_unit_quota_statement(gpu_model: GpuModel) -> tuple[str, list]:
    """The SQL and parameters that read and lock the units' rows of `gpu_model` and the
    any-model ones FOR UPDATE (SQLite has no row locks: its BEGIN IMMEDIATE serializes
    writers), for `unit_quota_rows_of`; a caller may send it with other statements in one
    round trip (booking admission)."""
    sql = _UNIT_QUOTA_ROWS
    if connection.features.has_select_for_update_of:
        sql += " FOR UPDATE OF q"
    return sql, [gpu_model.pk]


def unit_quota_rows_of(rows) -> tuple[list[UnitQuotaRow], OrgTree | None]:
    """`unit_quota_rows`' answer from the rows of `locked_unit_quota_statement`."""
    found = [UnitQuotaRow(*row) for row in rows]
    if not found:
        return [], None
    return found, quota_org_tree()


def quota_org_tree() -> OrgTree:
    """The organisation tree as the quota rule and the scheduler name it: units and teams by
    slug, with the units' names (what the scheduler's messages show)."""
    units = list(OrgUnit.objects.values_list("slug", "parent__slug", "name"))
    return OrgTree(
        {slug: parent for slug, parent, _ in units},
        dict(Team.objects.values_list("slug", "unit__slug")),
        {slug: name for slug, _, name in units},
    )


def _row(quota: Quota) -> QuotaRow:
    model = quota.gpu_model.name if quota.gpu_model else None
    return QuotaRow(quota.team.slug, model, quota.guaranteed, quota.limit)


def guarantee_pressure() -> list[dict]:
    """Per GPU model: sum of guarantees vs healthy capacity (a warning when over-committed)."""
    result = []
    for model in GpuModel.objects.order_by("name"):
        guaranteed = sum(Quota.objects.filter(gpu_model=model).values_list("guaranteed", flat=True))
        capacity = Gpu.objects.in_service().filter(model=model, mig_parent__isnull=True).count()
        result.append(
            {
                "gpu_model": model,
                "guaranteed": guaranteed,
                "capacity": capacity,
                "overcommitted": guaranteed > capacity,
            }
        )
    return result


def unit_envelopes(*, units) -> list[dict]:
    """Per quota row of ``units`` (ordered by unit path, then model; any-model rows last): the
    unit's guarantee and limit, and how much of its guarantee the teams and child units
    directly below it are guaranteed (the envelope rule caps that at the guarantee). What a
    unit admin's quota page shows instead of the fleet's sums."""
    units = {unit.pk: unit for unit in units}
    if not units:
        return []
    tree = org_tree()
    names = dict(OrgUnit.objects.values_list("pk", "name"))
    below = _guaranteed_directly_below(units)
    rows = []
    for row in UnitQuota.objects.filter(unit__in=units).select_related("gpu_model"):
        used = below.get((row.unit_id, row.gpu_model_id), 0)
        rows.append(
            {
                "unit": units[row.unit_id],
                "path": " / ".join(names[pk] for pk in tree.path(row.unit_id)),
                "gpu_model": row.gpu_model,
                "guaranteed": row.guaranteed,
                "limit": row.limit,
                "guaranteed_below": used,
                "overcommitted": used > row.guaranteed,
            }
        )
    rows.sort(key=lambda r: (r["path"], r["gpu_model"] is None, str(r["gpu_model"] or "")))
    return rows


def quota_history(*, teams=None) -> QuerySet:
    """The audit events of team quotas, newest first: of ``teams`` only when given (their
    rows as they are and those since deleted, named by the team's slug)."""
    events = audit_event_list(object_type="teams.quota")
    if teams is None:
        return events
    slugs = [team.slug for team in teams]
    if not slugs:
        return events.none()
    return events.filter(reduce(or_, (Q(object_repr__startswith=f"{slug}/") for slug in slugs)))


def member_figures(*, team: Team, viewer) -> dict[int, dict]:
    """Per user id: what higher apps report about the member's use of GPUs (the
    `teams.member_figures` query: efficiency over the last weeks). Team admins, finance and
    platform admins see every member's; a member sees their own."""
    figures = queries.ask_merged("teams.member_figures", team=team)
    if (
        viewer.sees_all_teams
        or Membership.objects.filter(team=team, user=viewer, role=TeamRole.TEAM_ADMIN).exists()
    ):
        return figures
    return {viewer.pk: figures[viewer.pk]} if viewer.pk in figures else {}


def member_costs(*, team: Team, viewer, month_text: str | None = None) -> dict | None:
    """The team's cost by member this month, from whoever answers the `teams.member_costs`
    query (billing), or None when nothing does. Team admins, finance and platform admins see
    every member, the team's adjustments and its total; a member sees their own row. The
    month is YYYY-MM text the answering app reads (default: this month)."""
    answers = queries.ask("teams.member_costs", team=team, month_text=month_text)
    answers = [answer for answer in answers if answer]
    if not answers:
        return None
    table = answers[0]
    if (
        viewer.sees_all_teams
        or Membership.objects.filter(team=team, user=viewer, role=TeamRole.TEAM_ADMIN).exists()
    ):
        return {**table, "sees_all": True}
    own = [row for row in table["rows"] if row["user_id"] == viewer.pk]
    return {**table, "rows": own, "sees_all": False}


def org_tree() -> OrgTree:
    """The organisation tree by unit and team ids (a few hundred rows at most)."""
    return OrgTree(
        dict(OrgUnit.objects.values_list("pk", "parent_id")),
        dict(Team.objects.values_list("pk", "unit_id")),
    )


def unit_path(unit: OrgUnit, *, tree: OrgTree | None = None) -> list[OrgUnit]:
    """The units from the root down to `unit`."""
    ids = (tree or org_tree()).path(unit.pk)
    units = OrgUnit.objects.in_bulk(ids)
    return [units[pk] for pk in ids]


def unit_path_label(unit: OrgUnit, *, tree: OrgTree | None = None) -> str:
    """How pages, statements and exports name a unit: its path, "Organisation / Research"."""
    return " / ".join(u.name for u in unit_path(unit, tree=tree))


def unit_overview(*, user) -> list[dict]:
    """The units the user may see, in tree order (parents first, children by name), each with
    its depth, path label, admins, the visible teams directly in it, its quotas beside what
    is guaranteed directly below it per GPU model, and what the user may do there."""
    units = {unit.pk: unit for unit in OrgUnit.objects.for_user(user)}
    if not units:
        return []
    every = dict(OrgUnit.objects.values_list("pk", "parent_id"))
    names = dict(OrgUnit.objects.values_list("pk", "name"))
    tree = OrgTree(every, {})
    managed = set(OrgUnit.objects.managed_by(user).values_list("pk", flat=True))
    admins: dict[int, list[str]] = defaultdict(list)
    for unit_id, username in UnitMembership.objects.filter(unit__in=units).values_list(
        "unit_id", "user__username"
    ):
        admins[unit_id].append(username)
    teams: dict[int, list[Team]] = defaultdict(list)
    for team in Team.objects.for_user(user).filter(unit__in=units).order_by("slug"):
        teams[team.unit_id].append(team)
    quotas: dict[int, list[UnitQuota]] = defaultdict(list)
    for row in UnitQuota.objects.filter(unit__in=units).select_related("gpu_model"):
        quotas[row.unit_id].append(row)
    below = _guaranteed_directly_below(units)
    rows: list[dict] = []

    def visit(pk: int, depth: int) -> None:
        unit = units[pk]
        rows.append(
            {
                "unit": unit,
                "depth": depth,
                "path": " / ".join(names[p] for p in tree.path(pk)),
                "admins": admins[pk],
                "teams": teams[pk],
                "quotas": [
                    {"row": row, "below": below.get((pk, row.gpu_model_id), 0)}
                    for row in quotas[pk]
                ],
                "can_manage": pk in managed,
                "can_set_quota": user.is_platform_admin or unit.parent_id in managed,
            }
        )
        for child in sorted(tree.children(pk) & units.keys(), key=lambda c: names[c]):
            visit(child, depth + 1)

    tops = [pk for pk, unit in units.items() if unit.parent_id not in units]
    for top in sorted(tops, key=lambda pk: names[pk]):
        visit(top, 0)
    return rows


def _guaranteed_directly_below(units) -> dict[tuple[int, int | None], int]:
    """Per (unit id, GPU model id or None): the guarantees of its teams and child units."""
    totals: dict[tuple[int, int | None], int] = defaultdict(int)
    for unit_id, model_id, guaranteed in Quota.objects.filter(team__unit__in=units).values_list(
        "team__unit_id", "gpu_model_id", "guaranteed"
    ):
        totals[(unit_id, model_id)] += guaranteed
    for unit_id, model_id, guaranteed in UnitQuota.objects.filter(
        unit__parent__in=units
    ).values_list("unit__parent_id", "gpu_model_id", "guaranteed"):
        totals[(unit_id, model_id)] += guaranteed
    return totals


GROUPINGS = ("team", "unit")


class TeamNotVisible(LookupError):
    """The team or organisation unit asked for does not exist for this user (a 404: whether
    it exists elsewhere is not told)."""


class BadGrouping(ApplicationError):
    """A grouping other than `GROUPINGS` was asked for (400)."""

    code = "bad_filter"


@dataclass(frozen=True)
class UnitScope:
    """The teams a page or report covers under a unit (and team) filter, and for "group by
    unit" the unit each team's figures are summed under."""

    unit: OrgUnit | None  # the unit asked for; None: no unit filter
    teams: tuple  # the Team objects in scope, by slug; only teams the user may see
    # group=unit: team slug -> the child unit of the chosen unit (the root without one) the
    # team sits below, or the chosen unit itself for a team directly in it; None: by team.
    group_units: dict | None = None

    @property
    def group_of(self) -> dict[str, str] | None:
        """Team slug -> the name of its group (what grouped figures are labelled with)."""
        if self.group_units is None:
            return None
        return {slug: unit.name for slug, unit in self.group_units.items()}


def unit_scope(*, user, unit_slug: str = "", team_slug: str = "", group: str = "team") -> UnitScope:
    """Which teams a unit (and team) filter leaves in view for the user, and with
    ``group="unit"`` which unit each is summed under: the child units of the chosen unit (of
    the root when none is chosen), a team directly in the chosen unit under that unit. Only
    teams the user may see (`Team.objects.for_user`) are ever in scope, whatever the unit:
    a unit admin's or member's groups sum their visible teams only. An unknown unit or team,
    or one the user cannot see, raises TeamNotVisible; a grouping other than team or unit,
    BadGrouping. Every dashboard (utilization, idle, occupancy, cost) scopes through here."""
    if group not in GROUPINGS:
        raise BadGrouping("group must be team or unit.")
    visible = Team.objects.for_user(user).order_by("slug")
    unit = None
    tree = None
    if unit_slug:
        unit = OrgUnit.objects.for_user(user).filter(slug=unit_slug).first()
        if unit is None:
            raise TeamNotVisible(unit_slug)
        tree = org_tree()
        visible = visible.filter(unit_id__in=tree.subtree(unit.pk))
    if team_slug:
        teams = tuple(visible.filter(slug=team_slug))
        if not teams:
            raise TeamNotVisible(team_slug)
    else:
        teams = tuple(visible)
    group_units = None
    if group == "unit":
        top = unit or OrgUnit.objects.get(pk=root_unit_pk())
        group_units = _group_units(top, teams, tree or org_tree())
    return UnitScope(unit=unit, teams=teams, group_units=group_units)


def _group_units(top: OrgUnit, teams, tree: OrgTree) -> dict[str, OrgUnit]:
    """Team slug -> the child unit of `top` the team sits below (`top` itself for a team
    directly in it)."""
    below = {}
    for team in teams:
        path = tree.path(team.unit_id)
        rest = path[path.index(top.pk) + 1 :] if top.pk in path else []
        below[team.slug] = rest[0] if rest else top.pk
    units = OrgUnit.objects.in_bulk(set(below.values()) - {top.pk})
    units[top.pk] = top
    return {slug: units[pk] for slug, pk in below.items()}
