"""Organisation units in the engine: how near the idle guarantee a team borrows is, and how
near a borrower is to a team reclaiming its guarantee.

**Borrowing nearest first.** Work above a team's guarantee borrows, in the spare pool, first
the idle guarantee of the other teams of its own unit, then that of its parent unit's teams,
and so on; the root unit is the whole fleet. A team's *borrow distance* for a model is the
number of levels from its unit up to the nearest unit (below the root) where another team has
guarantee left for the model, or where the unit's own quota row guarantees more than its
teams hold; the fleet otherwise (``FLEET``). The spare pool serves lower distances first,
then its configured order.

**Reclaiming from outside first.** When a team reclaims its guarantee, the borrowers it may
preempt are taken first among teams outside its unit, then outside its parent unit, and so on:
ordered by the depth of the deepest unit they share with it (shallowest first), then by the
usual cost order.

With no tree, or every team in one unit, neither changes anything (``active`` is False)."""

from __future__ import annotations

from apps.teams.org_tree import OrgTree

FLEET = 1 << 20


class UnitDistance:
    def __init__(self, quotas, tree: OrgTree | None) -> None:
        self.quotas = quotas
        self.tree = tree
        # team -> its units below the root, its own first (the levels it may borrow from)
        self._levels: dict = {}
        # team -> its units, root first (the reclaim order compares them)
        self._paths: dict = {}
        self._closeness: dict = {}
        self.active = tree is not None and len(set(tree.team_units.values())) > 1
        self._teams_under: dict = {}

    def _levels_of(self, team) -> list:
        levels = self._levels.get(team)
        if levels is None:
            chain = self.tree.ancestors(self.tree.team_units.get(team))
            levels = self._levels[team] = [
                (unit, tuple(sorted(self._under(unit) - {team}, key=str))) for unit in chain[:-1]
            ]
        return levels

    def _under(self, unit) -> frozenset:
        teams = self._teams_under.get(unit)
        if teams is None:
            teams = self._teams_under[unit] = frozenset(self.tree.teams_under(unit))
        return teams

    def borrow_distance(self, team, model: str) -> int:
        """Levels from the team's unit up to the nearest unit with idle guarantee of
        ``model`` for it to borrow; ``FLEET`` when none below the root has any."""
        room = self.quotas.room
        rule = self.quotas.rule
        unit_used = self.quotas.unit_used
        for distance, (unit, others) in enumerate(self._levels_of(team)):
            for other in others:
                if room(other, model, guarantee=True) > 0:
                    return distance
            if rule.has_unit_rows:
                for scope in (model, None):
                    row = rule.unit_row(unit, scope)
                    if row is not None and row.guaranteed > unit_used.get((unit, scope), 0):
                        return distance
        return FLEET

    def closeness(self, team, other) -> int:
        """The depth of the deepest unit ``team`` and ``other`` share (0: only the root)."""
        key = (team, other)
        depth = self._closeness.get(key)
        if depth is None:
            a, b = self._path(team), self._path(other)
            depth = 0
            while depth < len(a) and depth < len(b) and a[depth] == b[depth]:
                depth += 1
            self._closeness[key] = depth
        return depth

    def _path(self, team) -> list:
        path = self._paths.get(team)
        if path is None:
            path = self._paths[team] = self.tree.team_path(team)
        return path

    def reclaim_order(self, victims: list, team) -> list:
        """``victims`` (in cost order) with those farthest from ``team`` first; the cost
        order is kept among equals."""
        return sorted(victims, key=lambda r: self.closeness(r.team, team))
