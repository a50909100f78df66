"""Quota rows as the engine reads them: guarantee, limit and fair-share weight per team."""

from __future__ import annotations

from collections import defaultdict

from apps.jobs.scheduler.state import TeamQuota

UNLIMITED = 10**9


class QuotaBook:
    """Quota rows by (team, model); a row with model None covers every model of the team."""

    def __init__(self, quotas: list[TeamQuota], default_limit: int) -> None:
        self.rows: dict[tuple[str, str | None], TeamQuota] = {(q.team, q.model): q for q in quotas}
        self.default_limit = default_limit
        self.used: dict[tuple[str, str | None], int] = defaultdict(int)
        self.weight: dict[str, float] = defaultdict(float)
        for q in quotas:
            self.weight[q.team] += q.guaranteed

    def key(self, team: str, model: str) -> tuple[str, str | None]:
        if (team, model) in self.rows:
            return (team, model)
        return (team, None)

    def guaranteed(self, key: tuple[str, str | None]) -> int:
        row = self.rows.get(key)
        return row.guaranteed if row else 0

    def limit(self, key: tuple[str, str | None]) -> int:
        row = self.rows.get(key)
        return row.limit if row else self.default_limit
