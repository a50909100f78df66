"""The quota rule (``apps.teams.quota_rule``) as the engine keeps it between cycles: what each
team holds now (running jobs outside bookings plus active bookings) and the bookings that start
later, so a job is placed only when its whole run fits beside them. With organisation units, it
also keeps what each unit with a quota row holds now (the sum over its teams), updated as
teams take and give GPUs, so a unit's limit costs one lookup per question."""

from __future__ import annotations

from collections import defaultdict

from apps.jobs.scheduler.state import Booking, RunningJob, TeamQuota
from apps.teams.org_tree import OrgTree
from apps.teams.quota_rule import Holdings, QuotaRule, UnitQuotaRow, job_held_until


class QuotaBook:
    """What teams hold and may hold, for the engine."""

    def __init__(
        self,
        quotas: list[TeamQuota],
        unit_quotas: list[UnitQuotaRow] = (),
        tree: OrgTree | None = None,
    ) -> None:
        self.rule = QuotaRule(quotas, unit_quotas, tree)
        # (team, model) and (team, None) -> GPUs held now
        self.used: dict[tuple[str, str | None], int] = defaultdict(int)
        # (unit, model) and (unit, None) -> GPUs its teams hold now (units with a row only)
        self.unit_used: dict[tuple, int] = defaultdict(int)
        # team -> (units above it with a row, teams whose room its GPUs change): empty when
        # no unit row applies, which keeps the flat engine's bookkeeping as it was.
        self._shares: dict[str, tuple[tuple, frozenset]] = {}
        # unit -> ((start, grace), its teams' bookings and running jobs as Holdings, memo of
        # (row, end) -> their peak over the window): shared by the unit's teams; a job one of
        # them starts is added to it, anything else they take or give back drops it.
        self._unit_window: dict = {}
        # team -> job id -> its running jobs outside bookings (``start``): what fits_window
        # sweeps, without walking every running job of the fleet.
        self._runs: dict[str, dict[int, RunningJob]] = {}
        self.weight: dict[str, float] = {team: self.rule.weight(team) for team in self.rule.teams()}
        # team -> its bookings (reservation id -> [start, end, model, GPUs])
        self.booked: dict[str, dict[int, list]] = {}
        self.later: set[str] = set()  # teams with a booking that starts after now
        # team -> model -> room up to its limits / within its guarantee: the scheduler asks
        # for every candidate and victim, the answer changes only when the team takes or gives
        # GPUs back or, up to its limits, when a team of its units does (units gate no
        # guarantee).
        self._room: dict[str, dict[str, int]] = {}
        self._within: dict[str, dict[str, int]] = {}
        # team -> ((start, grace), its own bookings and running jobs as Holdings, memo of
        # (row, end) -> peak) for fits_window; a job the team starts is added to it, anything
        # else it takes or gives back drops it. Its units' rows read the units' own
        # (``_unit_window``), so another team's change leaves it.
        self._window: dict[str, tuple[tuple[float, float], Holdings, dict]] = {}
        # team -> (start, grace, model, count, end, guarantee) -> fits_window's answer; in
        # ``_unit_answers`` when a unit's row was read for it: dropped when a team of the unit
        # changes. The others only when the team itself does.
        self._answers: dict[str, dict] = {}
        self._unit_answers: dict[str, dict] = {}

    def shares(self, team: str) -> tuple[tuple, frozenset]:
        """The units above ``team`` with a quota row and the teams below them (whose room
        depends on what ``team`` holds)."""
        found = self._shares.get(team)
        if found is None:
            units = self.rule.units_with_rows(team)
            peers = frozenset().union(*(self.rule.teams_under(u) for u in units))
            found = self._shares[team] = (units, peers)
        return found

    def start(self, run: RunningJob) -> None:
        """A job starts outside bookings: its GPUs count from now until it ends (``stop``)."""
        self._runs.setdefault(run.team, {})[run.job_id] = run
        self.take(run.team, run.model, len(run.gpu_ids), run)

    def stop(self, run: RunningJob) -> None:
        """A job started with ``start`` ends or is preempted: its GPUs go back."""
        self._runs.get(run.team, {}).pop(run.job_id, None)
        self.give(run.team, run.model, len(run.gpu_ids))

    def take(self, team: str, model: str, count: int, run: RunningJob | None = None) -> None:
        """The team holds ``count`` more GPUs of ``model`` (those of ``run`` when given)."""
        used = self.used
        used[(team, model)] += count
        used[(team, None)] += count
        self._room.pop(team, None)
        self._within.pop(team, None)
        self._answers.pop(team, None)
        self._unit_answers.pop(team, None)
        window = self._window.get(team)
        if window is not None:
            if run is None:
                del self._window[team]
            else:
                _add_run(window, run)
        if self.rule.has_unit_rows:
            self._unit_change(team, model, count, run)

    def give(self, team: str, model: str, count: int) -> None:
        used = self.used
        used[(team, model)] -= count
        used[(team, None)] -= count
        self._room.pop(team, None)
        self._within.pop(team, None)
        self._window.pop(team, None)
        self._answers.pop(team, None)
        self._unit_answers.pop(team, None)
        if self.rule.has_unit_rows:
            self._unit_change(team, model, -count)

    def _unit_change(
        self, team: str, model: str, delta: int, run: RunningJob | None = None
    ) -> None:
        units, peers = self.shares(team)
        if not units:
            return
        unit_used = self.unit_used
        unit_window = self._unit_window
        for unit in units:
            unit_used[(unit, model)] += delta
            unit_used[(unit, None)] += delta
            window = unit_window.get(unit)
            if window is not None:
                if run is None:
                    del unit_window[unit]
                else:
                    _add_run(window, run)
        room, answers = self._room, self._unit_answers
        for peer in peers:
            room.pop(peer, None)
            answers.pop(peer, None)

    def room(self, team: str, model: str, *, guarantee: bool) -> int:
        """GPUs of ``model`` the team may take now (within its guarantee when ``guarantee``)."""
        rooms = self._within if guarantee else self._room
        known = rooms.get(team)
        if known is None:
            known = rooms[team] = {}
        else:
            room = known.get(model)
            if room is not None:
                return room
        used = self.used
        room = known[model] = self.rule.room(
            team,
            model,
            used[(team, model)],
            used[(team, None)],
            guarantee=guarantee,
            unit_held=self.unit_used,
        )
        return room

    def binding(self, team: str, model: str, *, guarantee: bool) -> TeamQuota | None:
        used = self.used
        return self.rule.binding(
            team, model, used[(team, model)], used[(team, None)], guarantee=guarantee
        )

    def key(self, team: str, model: str) -> tuple[str, str | None]:
        """The row a team's GPUs of ``model`` are pooled under when its work is replayed alone
        on its guaranteed GPUs (``team_metrics``): its model row, else its any-model row."""
        rows = self.rule.rows_for(team, model)
        return (team, rows[0].model if rows else None)

    def guaranteed(self, key: tuple[str, str | None]) -> int:
        """The guarantee of the row ``key`` names (0 when the team has none)."""
        row = self.rule.row(*key)
        return row.guaranteed if row else 0

    def over_guarantee(self, team: str, model: str, count: int) -> bool:
        return count > self.room(team, model, guarantee=True)

    def book(self, booking: Booking, model: str, now: float) -> None:
        """A booking's GPU: counted now while the booking is active, and by ``fits_window``."""
        self._window.pop(booking.team, None)
        self._answers.pop(booking.team, None)
        self._unit_answers.pop(booking.team, None)
        spans = self.booked.setdefault(booking.team, {})
        span = spans.get(booking.reservation_id)
        if span is None:
            spans[booking.reservation_id] = [booking.start, booking.end, model, 1]
        else:
            span[0], span[1] = min(span[0], booking.start), max(span[1], booking.end)
            span[3] += 1
        if booking.start <= now:
            self.take(booking.team, model, 1)
        else:
            self.later.add(booking.team)
            if self.rule.has_unit_rows:
                # A booking ahead counts against its units' limits: every team below them
                # must fit beside it too.
                self.later.update(self.shares(booking.team)[1])
                for unit in self.shares(booking.team)[0]:
                    self._unit_window.pop(unit, None)
                for peer in self.shares(booking.team)[1]:
                    self._unit_answers.pop(peer, None)

    def fits_window(
        self,
        team: str,
        model: str,
        count: int,
        start: float,
        end: float,
        grace: float,
        *,
        guarantee: bool,
    ) -> bool:
        """Whether ``count`` GPUs over [start, end) fit beside the team's bookings and its
        running jobs (each held until its maximum runtime ends): the window the bookings'
        admission checks. Only teams with a booking ahead (``later``) need it; for the others
        the most they hold over any window is what they hold now."""
        # Queued jobs repeat a few shapes and runtimes: each answer is worked out once.
        question = (start, grace, model, count, end, guarantee)
        answers = self._answers.get(team)
        if answers is None:
            answers = self._answers[team] = {}
        else:
            answer = answers.get(question)
            if answer is not None:
                return answer
        unit_answers = self._unit_answers.get(team)
        if unit_answers is None:
            unit_answers = self._unit_answers[team] = {}
        else:
            answer = unit_answers.get(question)
            if answer is not None:
                return answer
        cached = self._window.get(team)
        if cached is None or cached[0] != (start, grace):
            cached = self._window[team] = (
                (start, grace),
                self._holdings((team,), start, grace),
                {},
            )
        holdings, peaks = cached[1], cached[2]
        read_units = False

        def held(row) -> int:
            nonlocal read_units
            # Queued jobs share a few runtimes: a row's peak over [start, end) is swept once
            # (a unit row's once for all the unit's teams, over their holdings alone).
            if isinstance(row, UnitQuotaRow):
                if guarantee:
                    # A unit's row is read only for GPUs over the team's guarantee: the
                    # answer within the guarantee is no, whatever the unit holds.
                    return 0
                read_units = True
                found = self._unit_window.get(row.unit)
                if found is None or found[0] != (start, grace):
                    teams = self.rule.teams_under(row.unit)
                    found = self._unit_window[row.unit] = (
                        (start, grace),
                        self._holdings(teams, start, grace),
                        {},
                    )
                source, known = found[1], found[2]
            else:
                source, known = holdings, peaks
            key = (row, end)
            peak = known.get(key)
            if peak is None:
                peak = known[key] = self.rule.held_by_row(team, start, end, source)(row)
            return peak

        verdict = self.rule.verdict(team, model, count, held)
        answer = verdict.admitted and not (guarantee and verdict.over_guarantee)
        (unit_answers if read_units else answers)[question] = answer
        return answer

    def _holdings(self, teams, start: float, grace: float) -> Holdings:
        """What ``teams`` hold from ``start`` on: their bookings and their running jobs
        outside bookings (each until its maximum runtime ends, or its kill's grace after)."""
        holdings = Holdings()
        booked, runs = self.booked, self._runs
        for who in teams:
            for s, e, m, n in booked.get(who, {}).values():
                holdings.add(who, m, s, e, n)
            for run in runs.get(who, {}).values():
                ends = job_held_until(run.started_at + run.max_runtime, start, grace)
                holdings.add(who, run.model, run.started_at, ends, len(run.gpu_ids))
        return holdings


def _add_run(window: tuple, run: RunningJob) -> None:
    """Adds a job that starts to a window's holdings (``fits_window``). A peak swept before
    stays right without a new sweep where the job holds its GPUs over the whole window (it
    adds its GPUs to every instant of it) or is of another model than the row's; the others
    are swept again when next asked."""
    (start, grace), holdings, peaks = window
    ends = job_held_until(run.started_at + run.max_runtime, start, grace)
    count = len(run.gpu_ids)
    holdings.add(run.team, run.model, run.started_at, ends, count)
    covers = run.started_at <= start
    for key in list(peaks):
        row, end = key
        if row.model is not None and row.model != run.model:
            continue
        if covers and ends >= end:
            peaks[key] += count
        else:
            del peaks[key]
