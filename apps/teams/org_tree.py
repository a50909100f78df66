"""The organisation tree above teams, as plain data: which unit is under which, and which
teams sit in which unit. Pure Python (no Django), so the scheduler, the replayer and the
quota rule can walk it as they walk quota rows. Units and teams are named by any hashable key
(ids in the portal, names in a replayed trace)."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Hashable, Mapping


class OrgTree:
    def __init__(
        self,
        parents: Mapping[Hashable, Hashable | None],
        team_units: Mapping[Hashable, Hashable],
        names: Mapping[Hashable, str] | None = None,
    ) -> None:
        self.parents = dict(parents)
        self.team_units = dict(team_units)
        self.names = dict(names or {})
        self._children: dict = defaultdict(set)
        for unit, parent in self.parents.items():
            if parent is not None:
                self._children[parent].add(unit)

    def name(self, unit) -> str:
        """How messages name a unit: its name where the tree knows it, else its key."""
        return self.names.get(unit) or str(unit)

    def ancestors(self, unit) -> list:
        """The unit, its parent, ... up to the root (a cycle, which the services refuse, stops
        the walk rather than looping)."""
        chain, seen = [], set()
        while unit is not None and unit not in seen:
            chain.append(unit)
            seen.add(unit)
            unit = self.parents.get(unit)
        return chain

    def path(self, unit) -> list:
        """Root first, down to the unit."""
        return list(reversed(self.ancestors(unit)))

    def team_path(self, team) -> list:
        """The units above a team, root first (empty for a team outside the tree)."""
        unit = self.team_units.get(team)
        return self.path(unit) if unit is not None else []

    def children(self, unit) -> set:
        return set(self._children.get(unit, ()))

    def subtree(self, unit) -> set:
        """The unit and every unit below it."""
        found, todo = {unit}, [unit]
        while todo:
            for child in self._children.get(todo.pop(), ()):
                if child not in found:
                    found.add(child)
                    todo.append(child)
        return found

    def teams_under(self, unit) -> set:
        """Every team in the unit's subtree."""
        units = self.subtree(unit)
        return {team for team, home in self.team_units.items() if home in units}

    def teams_directly_in(self, unit) -> set:
        return {team for team, home in self.team_units.items() if home == unit}

    def would_cycle(self, unit, new_parent) -> bool:
        """Whether moving ``unit`` under ``new_parent`` would put it below itself."""
        return new_parent is not None and new_parent in self.subtree(unit)
