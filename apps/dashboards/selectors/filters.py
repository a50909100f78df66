"""Dashboard filters (range, organisation unit, team, GPU model) as the user may apply them,
and the rollup level and step a window reads. Windows up to 24 hours read minute rollups,
longer ones hour rollups; buckets are merged so that no trace has more than `MAX_POINTS`
points."""

from dataclasses import dataclass
from datetime import datetime, timedelta

from django.utils import timezone
from django.utils.dateparse import parse_datetime

from apps.fleet.models import GpuModel
from apps.teams.models import OrgUnit, Team, root_unit_pk
from apps.teams.selectors import org_tree
from apps.telemetry.models import GpuHourRollup, GpuMinuteRollup
from portal.exceptions import ApplicationError
from portal.timezones import parse_local

MAX_POINTS = 500
MAX_SPAN = timedelta(days=400)
RANGES = {"24h": timedelta(hours=24), "7d": timedelta(days=7), "30d": timedelta(days=30)}
UNALLOCATED = "unallocated"


class FilterError(ApplicationError):
    """A dashboard filter the user gave cannot be used (400); the message says why."""

    code = "bad_filter"


class TeamNotVisible(LookupError):
    """The team or organisation unit asked for does not exist for this user."""


@dataclass(frozen=True)
class Filters:
    start: datetime
    end: datetime
    range: str
    teams: tuple  # Team objects the user may see and asked for
    team_slug: str
    gpu_model: GpuModel | None
    sees_all: bool
    unit_slug: str = ""
    # group=unit: team slug -> the name of the child unit of the chosen one it sits below
    group_of: dict | None = None

    @property
    def narrowed(self) -> bool:
        """Whether a team or unit narrows the view (then the fleet's unallocated pool, which
        belongs to no team, is left out)."""
        return bool(self.team_slug or self.unit_slug)

    @property
    def team_ids(self) -> list[int]:
        return [t.pk for t in self.teams]

    @property
    def fine(self) -> bool:
        """True when the window is read from minute rollups."""
        return self.end - self.start <= timedelta(hours=24)

    def as_dict(self) -> dict:
        return {
            "range": self.range,
            "start": self.start.isoformat(),
            "end": self.end.isoformat(),
            "unit": self.unit_slug or None,
            "group": "unit" if self.group_of is not None else "team",
            "team": self.team_slug or None,
            "gpu_model": self.gpu_model.name if self.gpu_model else None,
        }


def _aware(value: str, name: str, *, local: bool) -> datetime:
    parsed = parse_datetime(value)
    if parsed is None:
        example = "2026-01-31T09:00" if local else "2026-01-31T09:00Z"
        raise FilterError(f"{name} is not a date and time (e.g. {example}).")
    if timezone.is_naive(parsed):
        if not local:
            raise FilterError(f"{name} needs a time zone (e.g. 2026-01-31T09:00Z).")
        try:
            return parse_local(value)
        except ValueError as invalid:
            raise FilterError(str(invalid)) from None
    return parsed


def parse_filters(params, user, *, now: datetime | None = None, local: bool = False) -> Filters:
    """Filters from query parameters: range (24h, 7d, 30d or custom with start and end), unit
    (slug: the teams anywhere below it), team (slug) and gpu_model (name). With `local` (the
    pages' date-time pickers) a start or end without a zone is read in the reader's zone; the
    API demands one. Raises FilterError (bad
    value) or TeamNotVisible."""
    now = now or timezone.now()
    range_ = params.get("range") or ("custom" if params.get("start") else "24h")
    if range_ in RANGES:
        end = now
        start = end - RANGES[range_]
    elif range_ == "custom":
        if not params.get("start"):
            raise FilterError("A custom range needs a start.")
        start = _aware(params["start"], "start", local=local)
        end = _aware(params["end"], "end", local=local) if params.get("end") else now
        if end <= start:
            raise FilterError("The end must be after the start.")
        if end - start > MAX_SPAN:
            raise FilterError("Ask for at most 400 days at once.")
    else:
        raise FilterError("range must be one of 24h, 7d, 30d or custom.")
    visible = Team.objects.for_user(user).order_by("slug")
    unit_slug = params.get("unit") or ""
    unit = None
    if unit_slug:
        unit = OrgUnit.objects.for_user(user).filter(slug=unit_slug).first()
        if unit is None:
            raise TeamNotVisible(unit_slug)
        visible = visible.filter(unit_id__in=org_tree().subtree(unit.pk))
    group = params.get("group") or "team"
    if group not in ("team", "unit"):
        raise FilterError("group must be team or unit.")
    team_slug = params.get("team") or ""
    if team_slug:
        teams = tuple(visible.filter(slug=team_slug))
        if not teams:
            raise TeamNotVisible(team_slug)
    else:
        teams = tuple(visible)
    gpu_model = None
    if params.get("gpu_model"):
        gpu_model = GpuModel.objects.filter(name=params["gpu_model"]).first()
        if gpu_model is None:
            raise FilterError(f"There is no GPU model named {params['gpu_model']!r}.")
    group_of = None
    if group == "unit":
        group_of = _child_unit_names(unit or OrgUnit.objects.get(pk=root_unit_pk()), teams)
    return Filters(
        start=start,
        end=end,
        range=range_,
        teams=teams,
        team_slug=team_slug,
        unit_slug=unit_slug,
        gpu_model=gpu_model,
        sees_all=bool(user.sees_all_teams),
        group_of=group_of,
    )


def _child_unit_names(unit: OrgUnit, teams) -> dict[str, str]:
    """Team slug -> the name of the child unit of `unit` the team sits below (the unit's own
    name for a team directly in it): what "group by unit" sums over."""
    tree = org_tree()
    names = dict(OrgUnit.objects.values_list("pk", "name"))
    groups = {}
    for team in teams:
        path = tree.path(team.unit_id)
        below = path[path.index(unit.pk) + 1 :] if unit.pk in path else []
        groups[team.slug] = names[below[0]] if below else unit.name
    return groups


def step_for(filters: Filters) -> timedelta:
    """Bucket size of the series: the rollup's own, or larger to keep to MAX_POINTS points."""
    base = timedelta(minutes=1) if filters.fine else timedelta(hours=1)
    span = filters.end - filters.start
    multiple = max(1, -(-int(span / base) // MAX_POINTS))
    return base * multiple


def floor_to_step(ts: datetime, origin: datetime, step: timedelta) -> datetime:
    return origin + step * ((ts - origin) // step)


def rollup_rows(filters: Filters):
    model = GpuMinuteRollup if filters.fine else GpuHourRollup
    rows = model.objects.filter(bucket__gte=filters.start, bucket__lt=filters.end)
    if filters.gpu_model:
        rows = rows.filter(gpu__model=filters.gpu_model)
    return model, rows
