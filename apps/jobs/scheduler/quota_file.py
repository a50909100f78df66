"""The replayer's quota file: teams' quota rows and, optionally, the organisation units above
them with their own rows. Pure Python, no Django.

CSV columns ``team,model,guaranteed,limit[,parent]``; an empty model covers every model.

* ``team`` names a team, or a unit: a name that appears in some row's ``parent`` column is a
  unit, any other name a team.
* ``parent`` (optional column; may be empty) names the unit the team or unit sits in. A team
  or unit without one is at the top. Every row of one name must agree on its parent.
* A unit's row is its quota for all the teams below it together (its limit caps their
  borrowing; its guarantee is lent to them first). A row with empty ``guaranteed`` and
  ``limit`` only places the name in the tree.

Example: two departments of two teams each, research capped at 12 H100 together::

    team,model,guaranteed,limit,parent
    research,H100,8,12,
    ops,H100,4,8,
    vision,H100,4,8,research
    nlp,H100,4,8,research
    sre,H100,2,8,ops
    db,H100,2,8,ops

Without a ``parent`` column the file is the flat one (``team,model,guaranteed,limit``).
"""

from __future__ import annotations

import csv
from dataclasses import dataclass, field
from pathlib import Path

from apps.jobs.scheduler.state import TeamQuota
from apps.teams.org_tree import OrgTree
from apps.teams.quota_rule import UnitQuotaRow


class QuotaFileError(ValueError):
    """A quota file that cannot be read; the message names the line and why."""


@dataclass
class OrgUnits:
    """The units of a replay: their quota rows and the tree (units and teams by name)."""

    rows: list[UnitQuotaRow] = field(default_factory=list)
    tree: OrgTree | None = None

    def unit_of(self, team: str):
        return self.tree.team_units.get(team) if self.tree else None


def _int(row: dict, name: str, line: int) -> int | None:
    raw = (row.get(name) or "").strip()
    if not raw:
        return None
    try:
        return int(raw)
    except ValueError:
        raise QuotaFileError(f"Line {line}: {name} must be a whole number, not {raw!r}.") from None


def load_quota_file(path: str | Path) -> tuple[list[TeamQuota], OrgUnits | None]:
    """The teams' rows and the units (None when the file has no ``parent`` column)."""
    try:
        with open(path, newline="") as fh:
            reader = csv.DictReader(fh)
            header = reader.fieldnames or []
            parsed = list(enumerate(reader, start=2))
    except OSError as error:
        raise QuotaFileError(f"Cannot read the quota file: {error}.") from None
    missing = {"team", "guaranteed", "limit"} - set(header)
    if missing:
        raise QuotaFileError(f"The quota file lacks the column(s) {', '.join(sorted(missing))}.")
    nested = "parent" in header
    parents: dict[str, str | None] = {}
    rows = []
    for line, row in parsed:
        name = (row.get("team") or "").strip()
        if not name:
            raise QuotaFileError(f"Line {line}: the team (or unit) name is empty.")
        model = (row.get("model") or "").strip() or None
        g, lim = _int(row, "guaranteed", line), _int(row, "limit", line)
        if (g is None) != (lim is None) or (g is None and not nested):
            raise QuotaFileError(f"Line {line}: give both guaranteed and limit.")
        if g is not None and not 0 <= g <= lim:
            raise QuotaFileError(f"Line {line}: need 0 <= guaranteed <= limit.")
        parent = ((row.get("parent") or "").strip() or None) if nested else None
        if parent == name:
            raise QuotaFileError(f"Line {line}: {name} cannot be its own parent.")
        known = parents.get(name)
        if known is not None and parent is not None and known != parent:
            raise QuotaFileError(f"Line {line}: {name} is under {known} on an earlier line.")
        parents[name] = parent or known
        if g is not None:
            rows.append((name, model, g, lim))
    if not nested:
        return [TeamQuota(*r) for r in rows], None
    units = {p for p in parents.values() if p is not None}
    unit_parents = {u: parents.get(u) for u in units}
    tree = OrgTree(unit_parents, {n: p for n, p in parents.items() if n not in units and p})
    for unit in sorted(units):
        # The walk up stops short of a top unit only when it came round to itself.
        if tree.parents.get(tree.ancestors(unit)[-1]) is not None:
            raise QuotaFileError(f"The units form a cycle through {unit}.")
    teams = [TeamQuota(*r) for r in rows if r[0] not in units]
    unit_rows = [UnitQuotaRow(*r) for r in rows if r[0] in units]
    return teams, OrgUnits(unit_rows, tree)
