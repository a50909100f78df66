"""The quota rule (``apps.teams.quota_rule``) as the engine keeps it between cycles: what each
team holds now (running jobs outside bookings plus active bookings) and the bookings that start
later, so a job is placed only when its whole run fits beside them. With organisation units, it
also keeps what each unit with a quota row holds now (the sum over its teams), updated as
teams take and give GPUs, so a unit's limit costs one lookup per question."""

from __future__ import annotations

from collections import defaultdict

from apps.jobs.scheduler.state import Booking, TeamQuota
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
        # unit -> (row, start, end, grace) -> its teams' peak over the window: shared by the
        # unit's teams, dropped when one of them takes or gives GPUs back.
        self._unit_peaks: dict = defaultdict(dict)
        self.weight: dict[str, float] = {team: self.rule.weight(team) for team in self.rule.teams()}
        # team -> its bookings (reservation id -> [start, end, model, GPUs])
        self.booked: dict[str, dict[int, list]] = {}
        self.later: set[str] = set()  # teams with a booking that starts after now
        # team -> (model, guarantee) -> room: the scheduler asks for every candidate and
        # victim, the answer changes only when the team takes or gives GPUs back.
        self._room: dict[str, dict[tuple[str, bool], int]] = {}
        # team -> ((start, grace), its bookings and running jobs as Holdings, memo) for
        # fits_window (memo: (row, end) -> peak, (model, count, end, guarantee) -> answer);
        # dropped, like the room, when the team (or, for unit rows, a team of its units)
        # takes or gives GPUs back.
        self._window: dict[str, tuple[tuple[float, float], Holdings, dict]] = {}

    def shares(self, team: str) -> tuple[tuple, frozenset]:
        """The units above ``team`` with a quota row and the teams below them (whose room
        depends on what ``team`` holds)."""
        found = self._shares.get(team)
        if found is None:
            units = self.rule.units_with_rows(team)
            peers = frozenset().union(*(self.rule.teams_under(u) for u in units))
            found = self._shares[team] = (units, peers)
        return found

    def take(self, team: str, model: str, count: int) -> None:
        used = self.used
        used[(team, model)] += count
        used[(team, None)] += count
        self._room.pop(team, None)
        self._window.pop(team, None)
        if self.rule.has_unit_rows:
            self._unit_change(team, model, count)

    def give(self, team: str, model: str, count: int) -> None:
        used = self.used
        used[(team, model)] -= count
        used[(team, None)] -= count
        self._room.pop(team, None)
        self._window.pop(team, None)
        if self.rule.has_unit_rows:
            self._unit_change(team, model, -count)

    def _unit_change(self, team: str, model: str, delta: int) -> None:
        units, peers = self.shares(team)
        if not units:
            return
        unit_used = self.unit_used
        for unit in units:
            unit_used[(unit, model)] += delta
            unit_used[(unit, None)] += delta
            self._unit_peaks.pop(unit, None)
        for peer in peers:
            self._room.pop(peer, None)
            self._window.pop(peer, None)

    def room(self, team: str, model: str, *, guarantee: bool) -> int:
        """GPUs of ``model`` the team may take now (within its guarantee when ``guarantee``)."""
        known = self._room.get(team)
        if known is None:
            known = self._room[team] = {}
        else:
            room = known.get((model, guarantee))
            if room is not None:
                return room
        used = self.used
        room = known[(model, guarantee)] = self.rule.room(
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
                    self._unit_peaks.pop(unit, None)
                for peer in self.shares(booking.team)[1]:
                    self._window.pop(peer, None)

    def fits_window(
        self,
        team: str,
        model: str,
        count: int,
        start: float,
        end: float,
        running,
        grace: float,
        *,
        guarantee: bool,
    ) -> bool:
        """Whether ``count`` GPUs over [start, end) fit beside the team's bookings and its
        running jobs (each held until its maximum runtime ends): the window the bookings'
        admission checks. Only teams with a booking ahead (``later``) need it; for the others
        the most they hold over any window is what they hold now."""
        cached = self._window.get(team)
        if cached is not None and cached[0] == (start, grace):
            holdings, peaks = cached[1], cached[2]
            # Queued jobs repeat a few shapes and runtimes: each answer is worked out once.
            answer = peaks.get((model, count, end, guarantee))
            if answer is not None:
                return answer
        else:
            holdings, peaks = Holdings(), {}
            # Whose holdings count: the team's, and those of its units' teams.
            counted = self.shares(team)[1] or (team,)
            for who in counted:
                for s, e, m, n in self.booked.get(who, {}).values():
                    holdings.add(who, m, s, e, n)
            for run in running:
                if run.team in counted and run.reservation_id is None:
                    ends = job_held_until(run.started_at + run.max_runtime, start, grace)
                    holdings.add(run.team, run.model, run.started_at, ends, len(run.gpu_ids))
            self._window[team] = ((start, grace), holdings, peaks)
        peak = self.rule.held_by_row(team, start, end, holdings)
        unit_peaks = self._unit_peaks

        def held(row) -> int:
            # Queued jobs share a few runtimes: a row's peak over [start, end) is swept once
            # (a unit row's once for all the unit's teams).
            if isinstance(row, UnitQuotaRow):
                known = unit_peaks[row.unit]
                key = (row, start, end, grace)
            else:
                known, key = peaks, (row, end)
            found = known.get(key)
            if found is None:
                found = known[key] = peak(row)
            return found

        verdict = self.rule.verdict(team, model, count, held)
        answer = peaks[(model, count, end, guarantee)] = verdict.admitted and not (
            guarantee and verdict.over_guarantee
        )
        return answer
