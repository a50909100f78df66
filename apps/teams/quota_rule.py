"""What a team holds and may hold: the one quota rule of bookings, jobs, the scheduler, the
what-if replays and the quota pages. Pure Python (no Django), so the scheduler and the
replayer run it too.

**Holding.** What a team holds of a GPU model at an instant: the GPUs its bookings hold plus
the GPUs its running jobs hold outside bookings (a job inside a booking runs on the booking's
GPUs, which count once). A running job holds its GPUs until its maximum runtime ends; one that
has outrun it is being stopped and holds them until the kill's grace period ends
(``job_held_until``).

**Rows.** A quota row names a team, a GPU model or none (any model), a guarantee and a limit.
Every row that covers a model applies: the model's own row bounds what the team holds of that
model, the any-model row bounds what it holds of all models together. A team may take
``count`` more GPUs of a model over [start, end) when, for every row that applies, its peak
holding in the row's scope over the window plus ``count`` is at most the row's limit. The GPUs
are *within the guarantee* when the same holds for every row's guarantee, else *over quota*
(preemptible, priced as over quota). An any-model row's guarantee therefore also caps the
guaranteed work of each model.

**No row.** A team with no row covering a model may hold none of it: no limit means a limit of
0 and nothing guaranteed, for bookings and jobs alike. A platform admin gives the team a quota
(the quota and team pages say so); until then its bookings are refused and its jobs wait with
the reason.

**Units.** Teams sit in organisation units (``OrgTree``); a unit row names a unit, a GPU
model or none, a guarantee and a limit. A unit row applies to every team below the unit, in its
scope: its limit caps what *all* the unit's teams hold together (the unit's holding). It caps
borrowing only: GPUs within the team's own guarantee are never refused by a unit's limit (the
envelope rule keeps what is guaranteed below a unit within the unit's guarantee, which is at
most its limit), so a team may take ``count`` GPUs when every team row admits them and either
they are within its guarantee or every applying unit row's limit admits them on top of the
unit's holding. A unit's guarantee gates nothing here; it orders borrowing (the scheduler's
spare pool). Without unit rows or a tree the rule is the flat one above.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Hashable, Iterable, Mapping
from dataclasses import dataclass, field

from apps.teams.org_tree import OrgTree

ANY_MODEL = None


def job_held_until(max_end, now, grace):
    """When a running job gives its GPUs back: at its maximum runtime's end, or, past that,
    once the kill's grace period ends (from ``now``). Any unit: datetimes and timedeltas or
    epoch seconds."""
    return max(max_end, now + grace)


@dataclass(frozen=True, slots=True)
class QuotaRow:
    """One quota row: ``model`` None covers every model of the team."""

    team: str
    model: str | None
    guaranteed: int
    limit: int

    @property
    def scope(self) -> str:
        return self.model if self.model is not None else "all GPU models"

    def borrowed(self, held: int) -> int:
        """Of ``held`` GPUs in the row's scope, those above its guarantee: borrowed from the
        spare pool (over quota, preemptible when another team reclaims its guarantee)."""
        return max(0, held - self.guaranteed)


@dataclass(frozen=True, slots=True)
class UnitQuotaRow:
    """One unit's quota row: ``model`` None covers every model of all the unit's teams."""

    unit: Hashable
    model: str | None
    guaranteed: int
    limit: int

    @property
    def scope(self) -> str:
        return self.model if self.model is not None else "all GPU models"


@dataclass(frozen=True, slots=True)
class Verdict:
    """The rule's answer for ``count`` more GPUs of a model: ``refused_by`` is the first row
    whose limit they would pass (None when admitted); ``held`` what the team holds in that
    row's scope (of the first row when admitted); ``over_guarantee`` whether they pass a
    guarantee; ``over_gpus`` how many of the ``count`` GPUs are above the tightest guarantee
    (what is priced as over quota). ``rows`` are the rows that applied (empty: the team has no
    quota for it)."""

    rows: tuple[QuotaRow, ...]
    refused_by: QuotaRow | UnitQuotaRow | None
    held: int
    over_guarantee: bool
    over_gpus: int = 0

    @property
    def admitted(self) -> bool:
        return bool(self.rows) and self.refused_by is None


@dataclass(frozen=True, slots=True)
class Ceiling:
    """The most GPUs of a model a team may ever hold (``gpus``) and the row that sets it: a
    ``QuotaRow`` of the team (its model row or its any-model row) or a ``UnitQuotaRow`` of a
    unit above it; None when no row covers the model (then ``gpus`` is 0)."""

    gpus: int
    row: QuotaRow | UnitQuotaRow | None


@dataclass(slots=True)
class Holdings:
    """What teams hold over time: (start, end, count) intervals per (team, model), in any unit
    of time (datetimes or epoch seconds); ``end`` None holds until further notice."""

    intervals: dict[tuple[str, str], list[tuple]] = field(default_factory=lambda: defaultdict(list))

    def add(self, team: str, model: str, start, end, count: int = 1) -> None:
        self.intervals[(team, model)].append((start, end, count))

    def peak(self, team: str, model: str | None, start, end) -> int:
        """Most GPUs the team holds at once over [start, end) of ``model`` (None: all models
        together)."""
        return self.peak_of((team,), model, start, end)

    def peak_of(self, teams, model: str | None, start, end) -> int:
        """Most GPUs ``teams`` hold together at once over [start, end) of ``model`` (None: all
        models): a unit's holding."""
        events = []
        for (t, m), spans in self.intervals.items():
            if t not in teams or (model is not None and m != model):
                continue
            for s, e, n in spans:
                if s < end and (e is None or e > start):
                    events.append((max(s, start), n))
                    if e is not None and e < end:
                        events.append((e, -n))
        # Releases before takes at one instant: a booking ending at 10:00 and one starting then
        # are never held together (events are (instant, change) pairs: their own order).
        events.sort()
        peak = current = 0
        for _, delta in events:
            current += delta
            if current > peak:
                peak = current
        return peak


class QuotaRule:
    """The quota rows of teams (and of the units above them) and the questions asked of them
    (see the module docstring). ``unit_rows`` and ``tree`` are optional: without them the
    rule is flat."""

    def __init__(
        self, rows: Iterable, unit_rows: Iterable = (), tree: OrgTree | None = None
    ) -> None:
        self._rows: dict[tuple[str, str | None], QuotaRow] = {}
        for r in rows:
            row = r if isinstance(r, QuotaRow) else QuotaRow(r.team, r.model, r.guaranteed, r.limit)
            self._rows[(row.team, row.model)] = row
        self._applying: dict[tuple[str, str], tuple[QuotaRow, ...]] = {}
        self.tree = tree
        self._unit_rows: dict[tuple[Hashable, str | None], UnitQuotaRow] = {}
        if tree is not None:
            for r in unit_rows:
                row = (
                    r
                    if isinstance(r, UnitQuotaRow)
                    else UnitQuotaRow(r.unit, r.model, r.guaranteed, r.limit)
                )
                self._unit_rows[(row.unit, row.model)] = row
        self.has_unit_rows = bool(self._unit_rows)
        self._unit_applying: dict[tuple[str, str | None], tuple[UnitQuotaRow, ...]] = {}
        self._teams_under: dict[Hashable, frozenset] = {}
        self._ceilings: dict[tuple[str, str, bool], Ceiling] = {}

    def rows_for(self, team: str, model: str) -> tuple[QuotaRow, ...]:
        """The rows that bound ``team``'s GPUs of ``model``: its own, then the any-model one."""
        key = (team, model)
        rows = self._applying.get(key)
        if rows is None:
            found = (self._rows.get((team, model)), self._rows.get((team, ANY_MODEL)))
            rows = self._applying[key] = tuple(r for r in found if r is not None)
        return rows

    def unit_rows_for(self, team: str, model: str | None) -> tuple[UnitQuotaRow, ...]:
        """The unit rows that cap ``team``'s GPUs of ``model`` (None: any model row only): of
        its unit first, then up to the root; per unit the model's row, then the any-model one.
        Empty for a flat rule."""
        key = (team, model)
        rows = self._unit_applying.get(key)
        if rows is None:
            rows = ()
            if self._unit_rows:
                found = []
                for unit in self.tree.ancestors(self.tree.team_units.get(team)):
                    if model is not None:
                        found.append(self._unit_rows.get((unit, model)))
                    found.append(self._unit_rows.get((unit, ANY_MODEL)))
                rows = tuple(r for r in found if r is not None)
            self._unit_applying[key] = rows
        return rows

    def unit_row(self, unit, model: str | None) -> UnitQuotaRow | None:
        return self._unit_rows.get((unit, model))

    def units_with_rows(self, team: str) -> tuple:
        """The units above ``team`` (its own first) that have a row: whose holdings count."""
        if not self._unit_rows:
            return ()
        with_rows = {unit for unit, _ in self._unit_rows}
        return tuple(
            u for u in self.tree.ancestors(self.tree.team_units.get(team)) if u in with_rows
        )

    def teams_under(self, unit) -> frozenset:
        """The teams a unit row's holding sums over (cached: the tree does not change)."""
        teams = self._teams_under.get(unit)
        if teams is None:
            teams = self._teams_under[unit] = frozenset(self.tree.teams_under(unit))
        return teams

    def row(self, team: str, model: str | None) -> QuotaRow | None:
        """The team's row of ``model`` (None: its any-model row), if it has one."""
        return self._rows.get((team, model))

    def teams(self) -> set[str]:
        return {team for team, _ in self._rows}

    def weight(self, team: str) -> int:
        """The team's guaranteed GPUs over all its rows (its weight in the fair share)."""
        return sum(r.guaranteed for (t, _), r in self._rows.items() if t == team)

    def ceiling(self, team: str, model: str) -> int:
        """The most GPUs of ``model`` the team may ever hold (0 without a row): its rows'
        limits, and its units' limits above what it is guaranteed (``binding_ceiling``)."""
        return self.binding_ceiling(team, model).gpus

    def binding_ceiling(self, team: str, model: str, *, guarantee: bool = False) -> Ceiling:
        """The most GPUs of ``model`` the team may ever hold (within its guarantee when
        ``guarantee``), and the row that sets it: the team's model row, its any-model row, or
        a unit's row above it. Without ``guarantee``: the lowest of the team's limits, unless
        a unit's limit is lower still; a unit caps only borrowing, so never below the team's
        guarantee. With ``guarantee``: the lowest guarantee of the team's rows (units gate no
        guarantee). On a tie the team's own row binds, its model row before its any-model
        one, and a unit nearer the team before one above it. No row: 0 and None."""
        key = (team, model, guarantee)
        found = self._ceilings.get(key)
        if found is not None:
            return found
        rows = self.rows_for(team, model)
        if not rows:
            found = Ceiling(0, None)
        elif guarantee:
            row = min(rows, key=lambda r: r.guaranteed)
            found = Ceiling(row.guaranteed, row)
        else:
            row = min(rows, key=lambda r: r.limit)
            found = Ceiling(row.limit, row)
            unit_rows = self.unit_rows_for(team, model)
            if unit_rows:
                unit_row = min(unit_rows, key=lambda r: r.limit)
                within = self.binding_ceiling(team, model, guarantee=True).gpus
                capped = max(within, unit_row.limit)
                if capped < found.gpus:
                    found = Ceiling(capped, unit_row)
        self._ceilings[key] = found
        return found

    def room(
        self,
        team: str,
        model: str,
        held_model: int,
        held_all: int,
        *,
        guarantee: bool = False,
        unit_held: Mapping | None = None,
    ) -> int:
        """GPUs of ``model`` the team may still take (within its guarantee when ``guarantee``),
        holding ``held_model`` of the model and ``held_all`` of all models; may be negative
        after a quota was lowered, 0 without a row. ``unit_held`` maps (unit, model or None)
        to what the unit's teams hold together (missing: 0); only unit rows read it."""
        rows = self._applying.get((team, model))
        if rows is None:
            rows = self.rows_for(team, model)
        room = None
        for r in rows:  # a loop, not min(): the scheduler asks this in its inner loops
            left = (r.guaranteed if guarantee else r.limit) - (
                held_model if r.model is not None else held_all
            )
            if room is None or left < room:
                room = left
        if room is None:
            return 0
        if guarantee or not self.has_unit_rows:
            return room
        unit_rows = self.unit_rows_for(team, model)
        if not unit_rows:
            return room
        unit_room = None
        for r in unit_rows:
            left = r.limit - (unit_held.get((r.unit, r.model), 0) if unit_held else 0)
            if unit_room is None or left < unit_room:
                unit_room = left
        within = None  # room(guarantee=True), without asking again
        for r in rows:
            left = r.guaranteed - (held_model if r.model is not None else held_all)
            if within is None or left < within:
                within = left
        return min(room, max(within, unit_room))

    def binding(self, team: str, model: str, held_model: int, held_all: int, *, guarantee=False):
        """The row that leaves the least room (None without a row): what a message names."""
        rows = self.rows_for(team, model)
        return min(
            rows,
            key=lambda r: (
                (r.guaranteed if guarantee else r.limit)
                - (held_model if r.model is not None else held_all)
            ),
            default=None,
        )

    def verdict(self, team: str, model: str, count: int, held_by_row) -> Verdict:
        """Whether ``count`` more GPUs of ``model`` fit, given ``held_by_row(row)``: what the
        team holds (peak over the window in question) in the row's scope; for a unit row, what
        all the unit's teams hold together."""
        rows = self.rows_for(team, model)
        over = not rows
        first_held = None
        guaranteed_room = None
        for row in rows:
            held = held_by_row(row)
            if first_held is None:
                first_held = held
            if held + count > row.limit:
                return Verdict(rows, row, held, True, count)
            over = over or held + count > row.guaranteed
            left = max(row.guaranteed - held, 0)
            guaranteed_room = left if guaranteed_room is None else min(guaranteed_room, left)
        if rows and over:
            # Borrowed GPUs: every unit above caps them with all its teams' holdings.
            for unit_row in self.unit_rows_for(team, model):
                held = held_by_row(unit_row)
                if held + count > unit_row.limit:
                    return Verdict(rows, unit_row, held, True, count)
        over_gpus = count - min(count, guaranteed_room or 0)
        return Verdict(rows, None, first_held or 0, over, over_gpus)

    def guarantee_ceiling(self, team: str, model: str) -> int:
        """The most GPUs of ``model`` the team may ever hold within its guarantee (0 without a
        row): what one job of the Guaranteed class may ask for at most."""
        return self.binding_ceiling(team, model, guarantee=True).gpus

    def held_by_row(self, team: str, start, end, holdings: Holdings):
        """``verdict``'s ``held_by_row`` over [start, end) of ``holdings``: the team's peak for
        its rows, the unit's teams' peak together for unit rows."""

        def held(row) -> int:
            if isinstance(row, UnitQuotaRow):
                return holdings.peak_of(self.teams_under(row.unit), row.model, start, end)
            return holdings.peak(team, row.model, start, end)

        return held

    def room_over(
        self, team: str, model: str, start, end, holdings: Holdings, *, guarantee: bool = False
    ) -> int:
        """GPUs of ``model`` the team may take for the whole of [start, end) on top of
        ``holdings`` (its peak holding over the window counts; for unit rows, the unit's
        teams' peak together); 0 without a row."""
        unit_held = None
        if not guarantee and self.has_unit_rows:
            unit_held = {
                (r.unit, r.model): holdings.peak_of(self.teams_under(r.unit), r.model, start, end)
                for r in self.unit_rows_for(team, model)
            }
        return self.room(
            team,
            model,
            holdings.peak(team, model, start, end),
            holdings.peak(team, ANY_MODEL, start, end),
            guarantee=guarantee,
            unit_held=unit_held,
        )

    def full_windows(
        self, team: str, model: str, count: int, start, end, holdings: Holdings
    ) -> list[tuple]:
        """The parts of [start, end), merged, where ``count`` more GPUs of ``model`` would pass
        a limit: where a booking of them may not overlap. All of it without a row."""
        if not self.rows_for(team, model) or count > self.ceiling(team, model):
            return [(start, end)]
        # Whose holdings count: the team's, and those of every team below a unit row above it.
        counted = {team}
        for r in self.unit_rows_for(team, model):
            counted |= self.teams_under(r.unit)
        cuts = {start, end}
        for (t, _), spans in holdings.intervals.items():
            if t not in counted:
                continue
            for s, e, _ in spans:
                cuts.update(x for x in (s, e) if x is not None and start < x < end)
        ordered = sorted(cuts)
        windows: list[tuple] = []
        for a, b in zip(ordered, ordered[1:], strict=False):
            # What the teams hold is constant between two cuts: their peak there is that value.
            if self.room_over(team, model, a, b, holdings) >= count:
                continue
            if windows and windows[-1][1] == a:
                windows[-1] = (windows[-1][0], b)
            else:
                windows.append((a, b))
        return windows

    def admit(self, team: str, model: str, count: int, start, end, holdings: Holdings) -> Verdict:
        """Whether the team may take ``count`` GPUs of ``model`` over [start, end) on top of
        ``holdings`` (bookings and running jobs alike; for unit rows, those of every team
        below the unit)."""
        return self.verdict(team, model, count, self.held_by_row(team, start, end, holdings))
