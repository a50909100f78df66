"""How long a waiting job actually had its team's unused guarantee (``GuaranteeRoomClock``):
the time from its submission to its first start during which the team's running GPUs of its
model plus the job's fit the team's guarantee. A job counted within its guarantee at
submission may have had that room for minutes only (the team's own work filled it), and a job
counted outside may have had it for hours (the team's work ended): this says which waits a
reclaim was owed. Pure Python, used by the trace replayer."""

from __future__ import annotations

from apps.jobs.scheduler.quotas import QuotaBook


class GuaranteeRoomClock:
    """Per team and job shape (model or None for any model, GPUs) a clock that runs while the
    shape fits the team's unused guarantee; a job reads it when it starts waiting and when it
    first starts. Shapes are re-checked when their team's holdings change (every team's, with
    unit rows: another team's GPUs change a unit's room)."""

    def __init__(self, book: QuotaBook, models: list[str]) -> None:
        self.book = book
        self.models = models
        # team -> (model, gpus) -> [seconds run before ``since``, since (None: stopped), jobs]
        self.clocks: dict[str, dict[tuple[str | None, int], list]] = {}

    def _fits(self, team: str, model: str | None, gpus: int) -> bool:
        room = self.book.room
        return any(
            gpus <= room(team, m, guarantee=True) for m in ([model] if model else self.models)
        )

    def wait(self, team: str, model: str | None, gpus: int, now: float) -> float:
        """A job of this shape starts waiting: the reading to pass to ``started``."""
        shapes = self.clocks.setdefault(team, {})
        clock = shapes.get((model, gpus))
        if clock is None:
            since = now if self._fits(team, model, gpus) else None
            clock = shapes[(model, gpus)] = [0.0, since, 0]
        clock[2] += 1
        return clock[0] + (now - clock[1] if clock[1] is not None else 0.0)

    def started(self, team: str, model: str | None, gpus: int, mark: float, now: float) -> float:
        """A job that waited since reading ``mark`` starts: the seconds it had the room."""
        shapes = self.clocks[team]
        clock = shapes[(model, gpus)]
        seconds = clock[0] + (now - clock[1] if clock[1] is not None else 0.0) - mark
        clock[2] -= 1
        if not clock[2]:
            del shapes[(model, gpus)]
        return seconds

    def changed(self, team: str, now: float) -> None:
        """The team's holdings changed (call after the quota book was told)."""
        if self.book.rule.has_unit_rows:
            for other in self.clocks:
                self._check(other, now)
        else:
            self._check(team, now)

    def _check(self, team: str, now: float) -> None:
        for (model, gpus), clock in self.clocks.get(team, {}).items():
            fits = self._fits(team, model, gpus)
            if fits and clock[1] is None:
                clock[1] = now
            elif not fits and clock[1] is not None:
                clock[0] += now - clock[1]
                clock[1] = None
