"""How long a waiting job actually had its team's unused guarantee (``GuaranteeRoomClock``):
the time from its submission to its first start during which the team's unused guarantee of
its model had room for it after the team's waiting jobs ahead of it in the team's own order
(the scheduler's queue order) took theirs. A job counted within its guarantee at submission
may have had that room for minutes only (the team's own work filled it), and a job counted
outside may have had it for hours (the team's work ended); and of a team's backlog of jobs
that each fit the guarantee alone, only those the room covers together with the jobs ahead
of them have it, as the scheduler keeps the room for the team's first job within its
guarantee (``Engine._hold``), not for its later ones. This says which waits a reclaim was
owed. Pure Python, used by the trace replayer."""

from __future__ import annotations

from bisect import bisect_left, insort

from apps.jobs.scheduler.quotas import QuotaBook

# A waiting job: [its key in the team's order, GPUs, seconds had, since (None: stopped)]
KEY, GPUS, SECONDS, SINCE = range(4)


class GuaranteeRoomClock:
    """Per team and model (None: a job of any model) the team's waiting jobs in its own
    order, each with a clock that runs while the job has the room: walking them in order, a
    job has it when its GPUs fit what the unused guarantee has left after the earlier jobs
    that have it (a job ahead that does not fit takes nothing, as the scheduler keeps the
    room for the team's first job that fits). The walk stops where nothing is left: a team
    without unused guarantee costs one room lookup whatever its backlog. Groups
    are re-checked when their team's holdings change (every team's, with unit rows: another
    team's GPUs change a unit's room) and when a job joins or leaves them."""

    def __init__(self, book: QuotaBook, models: list[str]) -> None:
        self.book = book
        self.models = models
        # team -> model -> (waiting jobs in order, the jobs among them whose clock runs)
        self.groups: dict[str, dict[str | None, tuple[list[list], list[list]]]] = {}

    def _room(self, team: str, model: str | None) -> int:
        room = self.book.room
        if model:
            return room(team, model, guarantee=True)
        return max((room(team, m, guarantee=True) for m in self.models), default=0)

    def wait(self, team: str, model: str | None, gpus: int, key: tuple, now: float) -> None:
        """A job starts waiting; ``key``: its place in the team's order (unique per job)."""
        group = self.groups.setdefault(team, {}).setdefault(model, ([], []))
        insort(group[0], [key, gpus, 0.0, None])
        self._check(team, model, group, now)

    def started(self, team: str, model: str | None, key: tuple, now: float) -> float:
        """The job waiting under ``key`` first starts: the seconds it had the room."""
        shapes = self.groups[team]
        group = shapes[model]
        jobs, running = group
        job = jobs.pop(bisect_left(jobs, [key]))
        seconds = job[SECONDS]
        if job[SINCE] is not None:
            seconds += now - job[SINCE]
            running.remove(job)
        if not jobs:
            del shapes[model]
        # the jobs behind it are re-checked by ``changed`` once its GPUs are taken
        return seconds

    def changed(self, team: str, now: float) -> None:
        """The team's holdings changed (call after the quota book was told)."""
        teams = self.groups if self.book.rule.has_unit_rows else (team,)
        for other in teams:
            for model, group in self.groups.get(other, {}).items():
                self._check(other, model, group, now)

    def _check(self, team: str, model: str | None, group: tuple, now: float) -> None:
        jobs, running = group
        left = self._room(team, model)
        having = []
        if left > 0:
            for job in jobs:
                if job[GPUS] <= left:
                    having.append(job)
                    left -= job[GPUS]
                    if not left:
                        break
        if having == running:
            return
        for job in running:
            if not any(job is h for h in having):
                job[SECONDS] += now - job[SINCE]
                job[SINCE] = None
        for job in having:
            if job[SINCE] is None:
                job[SINCE] = now
        running[:] = having
