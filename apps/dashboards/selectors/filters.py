"""Dashboard filters (range, organisation unit, team, GPU model) as the user may apply them,
and the rollup level and step a window reads. Windows up to 24 hours read minute rollups,
longer ones hour rollups; buckets are merged so that no trace has more than `MAX_POINTS`
points."""

from dataclasses import dataclass
from datetime import datetime, timedelta

from django.utils import timezone
from django.utils.dateparse import parse_datetime

from apps.fleet.models import GpuModel
from apps.teams.selectors import BadGrouping, unit_scope
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

    def label(self, team_slug: str) -> str:
        """What a team's figures are shown under: its group's name (group=unit), else its
        slug."""
        if self.group_of is None:
            return team_slug
        return self.group_of.get(team_slug, team_slug)

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
    (slug: the teams anywhere below it), team (slug), group (team, or unit: summed per child
    unit, `teams.selectors.unit_scope`) and gpu_model (name). With `local` (the
    pages' date-time pickers) a start or end without a zone is read in the reader's zone; the
    API demands one. Raises FilterError (bad
    value) or `teams.selectors.TeamNotVisible`."""
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
    gpu_model = None
    if params.get("gpu_model"):
        gpu_model = GpuModel.objects.filter(name=params["gpu_model"]).first()
        if gpu_model is None:
            raise FilterError(f"There is no GPU model named {params['gpu_model']!r}.")
    try:
        scope = unit_scope(
            user=user,
            unit_slug=params.get("unit") or "",
            team_slug=params.get("team") or "",
            group=params.get("group") or "team",
        )
    except BadGrouping as refusal:
        raise FilterError(refusal.message) from None
    return Filters(
        start=start,
        end=end,
        range=range_,
        teams=scope.teams,
        team_slug=params.get("team") or "",
        unit_slug=params.get("unit") or "",
        gpu_model=gpu_model,
        sees_all=bool(user.sees_all_teams),
        group_of=scope.group_of,
    )


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
