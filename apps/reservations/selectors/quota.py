"""Reads of what a team holds and may still book under its quota."""

from datetime import datetime, timedelta

from django.db import connection
from django.utils import timezone

from apps.fleet.models import Gpu, GpuModel
from apps.reservations import availability
from apps.reservations.availability import Interval
from apps.reservations.holdings import (
    COUNTED_HOLDINGS_SQL,
    TEAM_HOLDINGS_EXCLUDING_SQL,
    TEAM_HOLDINGS_SQL,
    bookings_holding,
    held_outside_bookings,
)
from apps.teams.models import Quota, Team
from apps.teams.quota_rule import Holdings, QuotaRule, Verdict
from apps.teams.selectors import team_quota_rule
from portal import queries
from portal.raw_rows import fetch_rows


def team_quota_models(*, team: Team) -> list[GpuModel]:
    """GPU models the team may book (a quota with a limit above 0), largest limit first; every
    model when the team has an any-model quota."""
    quotas = list(
        Quota.objects.filter(team=team, limit__gt=0)
        .select_related("gpu_model")
        .order_by("-limit", "gpu_model__name")
    )
    if any(quota.gpu_model_id is None for quota in quotas):
        return list(GpuModel.objects.order_by("name"))
    return [quota.gpu_model for quota in quotas]


def team_quota_blocked(
    *, team: Team, gpu_model: GpuModel, count: int, start: datetime, end: datetime
) -> list[Interval]:
    """Epoch intervals within [start, end) that a new booking of `count` GPUs by `team` may not
    overlap, because the team would then hold more than a limit of its quota: the quota rule
    over its bookings and running jobs, as `services.check_quota` applies it, read without
    locks. No quota at all blocks everything."""
    rule = team_quota_rule(team=team)
    holdings = rule_holdings(rule, team=team, model=gpu_model.name, start=start, end=end)
    return [
        (availability.to_epoch(s), availability.to_epoch_ceil(e))
        for s, e in rule.full_windows(team.slug, gpu_model.name, count, start, end, holdings)
    ]


def team_holdings(
    *,
    team: Team,
    start: datetime,
    end: datetime,
    exclude_reservation_id: int | None = None,
    jobs: list[tuple[str, int, int]] | None = None,
    bookings: list[tuple] | None = None,
) -> Holdings:
    """What the team holds over [start, end), of every model, as the quota rule counts it: its
    bookings' GPUs and its running jobs' GPUs outside bookings (until their maximum runtime).
    ``jobs``: those running jobs' (gpu_model_name, start_s, end_s), when already read;
    ``bookings``: the rows of `team_bookings_statement` (counted or not), when already read."""
    holdings = Holdings()
    if bookings is None:
        sql, params, datetime_columns = team_bookings_statement(
            team=team, start=start, end=end, exclude_reservation_id=exclude_reservation_id
        )
        bookings = fetch_rows(sql, params, datetime_columns=datetime_columns)
    for row in bookings:
        # (start, end, model), or with how many equal rows it stands for (``counted``).
        s, e, model = row[:3]
        holdings.add(team.slug, model, s, e, row[3] if len(row) > 3 else 1)
    if jobs is not None:
        for model, s, e in jobs:
            holdings.add(team.slug, model, availability.from_epoch(s), availability.from_epoch(e))
        return holdings
    jobs = held_outside_bookings(start=start, end=end, team=team)
    models = dict(
        Gpu.objects.filter(pk__in={gpu_id for gpu_id, _, _ in jobs}).values_list(
            "pk", "model__name"
        )
    )
    for gpu_id, s, e in jobs:
        holdings.add(
            team.slug, models[gpu_id], availability.from_epoch(s), availability.from_epoch(e)
        )
    return holdings


def team_bookings_statement(
    *,
    team: Team,
    start: datetime,
    end: datetime,
    exclude_reservation_id: int | None = None,
    counted: bool = False,
) -> tuple[str, list, tuple[int, ...]]:
    """The SQL, parameters and datetime columns (`portal.raw_rows`) of the read of (start, end,
    GPU model name) of the active holdings of the team's bookings over [start, end), one
    booking left out if given: `holdings.TEAM_HOLDINGS_SQL`, the rule of `bookings_holding`.
    ``counted``: equal rows once, with how many they are (`holdings.COUNTED_HOLDINGS_SQL`), as
    booking admission reads them, with its locks in one round trip."""
    ops = connection.ops
    params = [team.pk, ops.adapt_datetimefield_value(end), ops.adapt_datetimefield_value(start)]
    sql = TEAM_HOLDINGS_SQL
    if exclude_reservation_id is not None:
        sql, params = TEAM_HOLDINGS_EXCLUDING_SQL, [*params, exclude_reservation_id]
    if counted:
        sql = COUNTED_HOLDINGS_SQL.format(holdings=sql)
    return sql, params, (0, 1)


def teams_holdings(*, teams, start: datetime, end: datetime) -> dict[int, Holdings]:
    """Per team id: what each of ``teams`` holds over [start, end), as `team_holdings` counts
    it, in two queries whatever the number of teams: one for their bookings' GPUs, one for
    their running jobs' GPUs outside bookings (the `teams.busy_intervals` query)."""
    slugs = {team.pk: team.slug for team in teams}
    holdings = {pk: Holdings() for pk in slugs}
    if not slugs:
        return holdings
    rows = bookings_holding(start, end).filter(reservation__team__in=list(slugs))
    for team_id, s, e, model in rows.values_list(
        "reservation__team_id", "start", "end", "reservation__gpu_model__name"
    ):
        holdings[team_id].add(slugs[team_id], model, s, e)
    for answer in queries.ask("teams.busy_intervals", start=start, end=end, teams=list(slugs)):
        for team_id, model, s, e in answer:
            holdings[team_id].add(
                slugs[team_id], model, availability.from_epoch(s), availability.from_epoch(e)
            )
    return holdings


def quota_verdict(
    *,
    team: Team,
    gpu_model: GpuModel,
    count: int,
    start: datetime,
    end: datetime,
    quotas=None,
    unit_quotas=None,
    exclude_reservation_id: int | None = None,
    team_jobs: list[tuple[str, int, int]] | None = None,
    team_bookings: list[tuple] | None = None,
) -> Verdict:
    """The quota rule's answer for ``count`` more GPUs of ``gpu_model`` over [start, end) on top
    of what the team holds then: admitted or not, and how many are above its guarantee.
    ``quotas`` (the team's ``QuotaRow``s), ``unit_quotas`` (rows and tree,
    ``teams.selectors.unit_quota_rows``): the rows to apply (booking admission passes them
    locked); default: read. ``team_jobs``, ``team_bookings``: the team's running jobs and
    bookings as `team_holdings` takes them (``jobs``, ``bookings``), when already read."""
    if quotas is None:
        rule = team_quota_rule(team=team)
    else:
        rule = QuotaRule(quotas, *(unit_quotas or ([], None)))
    holdings = rule_holdings(
        rule,
        team=team,
        model=gpu_model.name,
        start=start,
        end=end,
        exclude_reservation_id=exclude_reservation_id,
        team_jobs=team_jobs,
        team_bookings=team_bookings,
    )
    return rule.admit(team.slug, gpu_model.name, count, start, end, holdings)


def rule_holdings(
    rule: QuotaRule,
    *,
    team: Team,
    model: str | None,
    start: datetime,
    end: datetime,
    exclude_reservation_id: int | None = None,
    team_jobs: list[tuple[str, int, int]] | None = None,
    team_bookings: list[tuple] | None = None,
) -> Holdings:
    """What the quota rule counts for ``team``'s GPUs of ``model`` over [start, end): the
    team's holdings, and those of every team below a unit whose row applies (their limits
    cap the teams together). ``team_jobs``, ``team_bookings``: as `team_holdings` takes
    ``jobs`` and ``bookings``."""
    holdings = team_holdings(
        team=team,
        start=start,
        end=end,
        exclude_reservation_id=exclude_reservation_id,
        jobs=team_jobs,
        bookings=team_bookings,
    )
    unit_rows = rule.unit_rows_for(team.slug, model)
    if not unit_rows:
        return holdings
    slugs = set().union(*(rule.teams_under(r.unit) for r in unit_rows)) - {team.slug}
    for other in Team.objects.filter(slug__in=slugs).order_by("slug"):
        theirs = team_holdings(
            team=other, start=start, end=end, exclude_reservation_id=exclude_reservation_id
        )
        for key, spans in theirs.intervals.items():
            holdings.intervals[key].extend(spans)
    return holdings


def quota_usage(*, quotas, now: datetime | None = None) -> dict[int, dict]:
    """Per quota (by id): what its team holds in the row's scope (bookings and running jobs,
    as the quota rule counts them) now, and at its peak over the next 7 days. Answers the
    `quota.usage` hook of teams' quota tables: every team's holdings in one read
    (`teams_holdings`), so a page of many teams costs no more queries than one of a few."""
    now = now or timezone.now()
    week = now + timedelta(days=7)
    quotas = list(quotas)
    teams = {quota.team.pk: quota.team for quota in quotas}
    holdings = teams_holdings(teams=teams.values(), start=now, end=week)
    usage = {}
    for quota in quotas:
        slug, held = quota.team.slug, holdings[quota.team.pk]
        model = quota.gpu_model.name if quota.gpu_model else None
        usage[quota.pk] = {
            "in_use": held.peak(slug, model, now, now + timedelta(seconds=1)),
            "peak_7d": held.peak(slug, model, now, week),
        }
    return usage
