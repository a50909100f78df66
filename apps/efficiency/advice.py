"""Right-sizing advice: jobs and bookings that held more than they used, and what it cost.

Findings, each with the request that would have done and the money it would have saved at the
rate cards in force when the GPUs were held (over-quota use at the over-quota price):

- `idle_gpus`: GPUs of the allocation that stayed idle (busy under
  EFFICIENCY_IDLE_GPU_BUSY_PERCENT of their time) held more than EFFICIENCY_IDLE_SHARE_PERCENT
  of its GPU-time. Suggested: the GPUs that did work; saved: the idle GPUs' GPU-hours.
- `memory`: the GPUs did work but never used more than EFFICIENCY_MEMORY_SHARE_PERCENT of their
  memory. Suggested: the smallest MIG profile of the model that holds the peak (MIG-capable
  models), else the cheapest GPU model with enough memory; saved: the price difference over
  the GPU-hours that did work (a MIG slice costs its share of the GPU's compute slices).
- `no_show`: a booking released for idleness whose GPUs never did any work. Suggested: no
  booking; saved: all it held.
- `released_idle`: a booking released for idleness after some work. Suggested: a booking that
  ends when the work did; saved: the GPU-hours it held idle.

An item's saving is its largest finding's (they overlap: they describe the same GPU-hours).
"""

import math
from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal

from django.conf import settings
from django.db.models import Q

from apps.billing.pricing import RateBook
from apps.efficiency.models import AllocationKind
from apps.efficiency.selectors import (
    bookings_efficiency,
    bookings_in_window,
    efficiency_of,
    jobs_efficiency,
    jobs_in_window,
)
from apps.efficiency.usage import Efficiency
from apps.fleet.models import GpuModel
from apps.reservations.choices import ReservationStatus
from apps.teams.choices import TeamRole
from apps.teams.models import Membership
from apps.telemetry.choices import IdleKind
from apps.telemetry.models import IdleInterval
from portal.formatting import format_count

CENT = Decimal("0.01")
MIG_CAPABLE = ("A100", "A30", "H100", "H200", "B200", "GB200")
# MIG profiles by the GPU's memory class (GiB): (compute slices of 7, name, memory GiB).
MIG_PROFILES = {
    40: ((1, "1g.5gb", 5), (2, "2g.10gb", 10), (3, "3g.20gb", 20)),
    80: ((1, "1g.10gb", 10), (2, "2g.20gb", 20), (3, "3g.40gb", 40)),
    141: ((1, "1g.18gb", 18), (2, "2g.35gb", 35), (3, "3g.71gb", 71)),
    180: ((1, "1g.23gb", 23), (2, "2g.45gb", 45), (3, "3g.90gb", 90)),
}


class FindingKind:
    IDLE_GPUS = "idle_gpus"
    MEMORY = "memory"
    NO_SHOW = "no_show"
    RELEASED_IDLE = "released_idle"
    LABELS = {
        IDLE_GPUS: "GPUs held but not used",
        MEMORY: "never needed half the GPU memory",
        NO_SHOW: "no-show booking",
        RELEASED_IDLE: "booking released for idleness",
    }


@dataclass(slots=True)
class Finding:
    kind: str
    detail: str
    suggestion: str
    saving: Decimal | None

    @property
    def label(self) -> str:
        return FindingKind.LABELS[self.kind]


@dataclass(slots=True)
class Item:
    """One job or booking of the window and what the advice found about it."""

    kind: str  # "job" | "booking"
    pk: int
    team_id: int
    team: str
    user_id: int
    user: str
    gpu_model: str
    gpus: int
    start: datetime
    over_quota: bool
    efficiency: Efficiency
    status: str
    findings: list[Finding] = field(default_factory=list)

    @property
    def saving(self) -> Decimal:
        return max((f.saving or Decimal(0) for f in self.findings), default=Decimal(0))


def _money(value: Decimal | None) -> Decimal | None:
    return None if value is None else value.quantize(CENT)


@dataclass(frozen=True, slots=True)
class Scope:
    """What a user may see: everything (platform admins, finance), all items of the teams they
    administer, their own items in the teams where they are a member."""

    user: object
    everything: bool = False
    admin_teams: tuple = ()
    member_teams: tuple = ()

    @classmethod
    def of(cls, user) -> "Scope | None":
        if not user.is_authenticated or not user.is_active:
            return None
        if user.sees_all_teams:
            return cls(user, everything=True)
        roles = dict(Membership.objects.filter(user=user).values_list("team_id", "role"))
        if not roles:
            return None
        return cls(
            user,
            admin_teams=tuple(t for t, r in roles.items() if r == TeamRole.TEAM_ADMIN),
            member_teams=tuple(t for t, r in roles.items() if r != TeamRole.TEAM_ADMIN),
        )

    def q(self, *, owner: str) -> Q:
        if self.everything:
            return Q()
        return Q(team_id__in=self.admin_teams) | Q(
            team_id__in=self.member_teams, **{owner: self.user}
        )


def _price(book: RateBook, item: Item, hours: float, model: str | None = None):
    return book.cost(
        model or item.gpu_model,
        hours=hours,
        over_hours=hours if item.over_quota else 0,
        at=item.start,
    )


def _idle_gpus_finding(item: Item, book: RateBook) -> Finding | None:
    eff = item.efficiency
    if not eff.idle_gpus or eff.idle_share * 100 <= settings.EFFICIENCY_IDLE_SHARE_PERCENT:
        return None
    # Time-weighted, so a job that moved between attempts counts each GPU for its share.
    suggested = max(0, math.ceil(item.gpus * (1 - eff.idle_share) - 1e-9))
    if suggested:
        suggestion = f"request {format_count(suggested, 'GPU')} instead of {item.gpus}"
    elif item.kind == "booking":
        suggestion = "no booking: its GPUs did no work (cancel bookings you will not use)"
    else:
        suggestion = "no GPU: the job did no GPU work (check it uses the GPU, or run it on CPUs)"
    return Finding(
        kind=FindingKind.IDLE_GPUS,
        detail=f"{eff.idle_gpus} of {eff.gpus} GPUs stayed idle "
        f"({eff.idle_share:.0%} of the GPU-hours held)",
        suggestion=suggestion,
        saving=_money(_price(book, item, eff.idle_gpu_hours)),
    )


def _mig_profile(model_name: str, memory_mib: int, peak_mib: int):
    if not any(tag in model_name.upper() for tag in MIG_CAPABLE):
        return None
    memory_class = min(MIG_PROFILES, key=lambda gib: abs(gib * 1024 - memory_mib))
    for slices, name, gib in MIG_PROFILES[memory_class]:
        if peak_mib <= gib * 1024:
            return slices, name
    return None


def _smaller_model(item: Item, book: RateBook, models: dict[str, int], peak: int, hours: float):
    """The cheapest priced model with enough memory that costs less than the one used."""
    own = _price(book, item, hours)
    best = None
    for name, memory in models.items():
        if name == item.gpu_model or memory < peak:
            continue
        cost = _price(book, item, hours, model=name)
        if cost is not None and own is not None and cost < own and (best is None or cost < best[1]):
            best = (name, cost)
    return (best[0], own - best[1]) if best else None


def _memory_finding(item: Item, book: RateBook, models: dict[str, int]) -> Finding | None:
    eff = item.efficiency
    share = settings.EFFICIENCY_MEMORY_SHARE_PERCENT
    if eff.memory_peak_percent is None or eff.memory_peak_percent > share:
        return None
    working_hours = eff.gpu_hours - eff.idle_gpu_hours
    if eff.busy_gpu_hours <= 0 or working_hours <= 0:
        return None  # nothing ran: the idle findings say it
    detail = (
        f"peak memory {eff.memory_peak_mib:,} MiB of {eff.memory_total_mib:,} MiB "
        f"({eff.memory_peak_percent:.0f} %)"
    )
    mig = _mig_profile(item.gpu_model, eff.memory_total_mib, eff.memory_peak_mib)
    if mig is not None:
        slices, profile = mig
        full = _price(book, item, working_hours)
        saving = None if full is None else full * (1 - Decimal(slices) / Decimal(7))
        suggestion = f"a MIG {profile} slice of {item.gpu_model} per GPU"
    elif smaller := _smaller_model(item, book, models, eff.memory_peak_mib, working_hours):
        suggestion, saving = f"{smaller[0]} GPUs instead of {item.gpu_model}", smaller[1]
    else:
        suggestion, saving = "a GPU model with less memory", None
    return Finding(FindingKind.MEMORY, detail, suggestion, _money(saving))


def _release_finding(item: Item, book: RateBook, idle_hours: dict[int, float]) -> Finding | None:
    if item.kind != "booking" or item.status != ReservationStatus.RELEASED:
        return None
    eff = item.efficiency
    if eff.busy_gpu_hours <= 0 and eff.covered:
        return Finding(
            FindingKind.NO_SHOW,
            f"{eff.gpu_hours:,.1f} GPU-hours held, no work on its GPUs",
            "no booking (cancel bookings you will not use)",
            _money(_price(book, item, eff.gpu_hours)),
        )
    idle = min(idle_hours.get(item.pk, 0.0), eff.gpu_hours)
    per_gpu = (eff.gpu_hours - idle) / max(item.gpus, 1)
    return Finding(
        FindingKind.RELEASED_IDLE,
        f"released after {idle:,.1f} idle GPU-hours",
        f"book {format_count(item.gpus, 'GPU')} for {per_gpu:,.1f} h, "
        "or cancel when the work is done",
        _money(_price(book, item, idle)),
    )


def _booking_idle_hours(booking_ids, *, start: datetime, end: datetime) -> dict[int, float]:
    """Held-idle GPU-hours of each booking inside the window (telemetry's idle intervals)."""
    hours: dict[int, float] = {}
    rows = IdleInterval.objects.filter(
        kind=IdleKind.HELD_IDLE, reservation_id__in=booking_ids, start__lt=end, end__gt=start
    ).values_list("reservation_id", "start", "end")
    for pk, lo, hi in rows:
        seconds = (min(hi, end) - max(lo, start)).total_seconds()
        hours[pk] = hours.get(pk, 0.0) + seconds / 3600
    return hours


@dataclass(frozen=True, slots=True)
class Filters:
    start: datetime
    end: datetime
    team: str | None = None
    user: str | None = None
    kind: str | None = None  # "job" | "booking"
    finding: str | None = None


def _job_items(scope: Scope, filters: Filters) -> list[Item]:
    jobs = jobs_in_window(start=filters.start, end=filters.end).filter(
        scope.q(owner="submitted_by")
    )
    if filters.team:
        jobs = jobs.filter(team__slug=filters.team)
    if filters.user:
        jobs = jobs.filter(submitted_by__username=filters.user)
    jobs = list(
        jobs.select_related("team", "submitted_by", "gpu_model").prefetch_related("allocations")
    )
    efficiency = efficiency_of(
        AllocationKind.JOB, jobs, start=filters.start, end=filters.end, live=jobs_efficiency
    )
    items = []
    for job in jobs:
        eff = efficiency.get(job.pk)
        allocations = list(job.allocations.all())
        if eff is None or not allocations:
            continue
        model = job.gpu_model.name if job.gpu_model_id else eff.gpu_model or ""
        items.append(
            Item(
                kind="job",
                pk=job.pk,
                team_id=job.team_id,
                team=job.team.slug,
                user_id=job.submitted_by_id,
                user=job.submitted_by.username,
                gpu_model=model,
                gpus=job.gpu_count,
                start=max(min(a.start for a in allocations), filters.start),
                over_quota=any(a.over_quota for a in allocations),
                efficiency=eff,
                status=job.status,
            )
        )
    return items


def _booking_items(scope: Scope, filters: Filters) -> list[Item]:
    bookings = bookings_in_window(start=filters.start, end=filters.end).filter(
        scope.q(owner="created_by")
    )
    if filters.team:
        bookings = bookings.filter(team__slug=filters.team)
    if filters.user:
        bookings = bookings.filter(created_by__username=filters.user)
    bookings = list(bookings.select_related("team", "created_by", "gpu_model"))
    efficiency = efficiency_of(
        AllocationKind.BOOKING,
        bookings,
        start=filters.start,
        end=filters.end,
        live=bookings_efficiency,
    )
    return [
        Item(
            kind="booking",
            pk=b.pk,
            team_id=b.team_id,
            team=b.team.slug,
            user_id=b.created_by_id,
            user=b.created_by.username,
            gpu_model=b.gpu_model.name,
            gpus=b.count,
            start=max(b.start, filters.start),
            over_quota=b.over_quota,
            efficiency=efficiency[b.pk],
            status=b.status,
        )
        for b in bookings
        if b.pk in efficiency
    ]


def right_sizing(*, user, filters: Filters) -> list[Item]:
    """The jobs and bookings of the window the user may see (user None: all, for the digest)
    that have findings, largest saving first (see the module docstring)."""
    scope = Scope(None, everything=True) if user is None else Scope.of(user)
    if scope is None:
        return []
    items: list[Item] = []
    if filters.kind in (None, "job"):
        items += _job_items(scope, filters)
    if filters.kind in (None, "booking"):
        items += _booking_items(scope, filters)
    book = RateBook(start=filters.start, end=filters.end)
    models = dict(GpuModel.objects.values_list("name", "memory_mib"))
    released = [
        i.pk for i in items if i.kind == "booking" and i.status == ReservationStatus.RELEASED
    ]
    idle_hours = _booking_idle_hours(released, start=filters.start, end=filters.end)
    flagged = []
    for item in items:
        released = _release_finding(item, book, idle_hours)
        # A released booking's idle GPUs are what its release finding already prices.
        findings = [released] if released else [_idle_gpus_finding(item, book)]
        findings.append(_memory_finding(item, book, models))
        item.findings = [f for f in findings if f is not None]
        if filters.finding:
            item.findings = [f for f in item.findings if f.kind == filters.finding]
        if item.findings:
            flagged.append(item)
    flagged.sort(key=lambda i: (-i.saving, i.kind, i.pk))
    return flagged


def totals(items: list[Item], *, by: str) -> list[dict]:
    """Per team (`by="team"`) or per user (`by="user"`): items flagged, GPU-hours held, busy
    and idle, and the saving; largest saving first."""
    rows: dict[str, dict] = {}
    for item in items:
        key = item.team if by == "team" else f"{item.user}"
        row = rows.setdefault(
            key,
            {
                by: key,
                "team": item.team,
                "items": 0,
                "gpu_hours": 0.0,
                "busy_gpu_hours": 0.0,
                "idle_gpu_hours": 0.0,
                "saving": Decimal(0),
            },
        )
        row["items"] += 1
        row["gpu_hours"] += item.efficiency.gpu_hours
        row["busy_gpu_hours"] += item.efficiency.busy_gpu_hours
        row["idle_gpu_hours"] += item.efficiency.idle_gpu_hours
        row["saving"] += item.saving
    return sorted(rows.values(), key=lambda r: (-r["saving"], r[by]))
