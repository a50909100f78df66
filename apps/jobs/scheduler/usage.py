"""Fair share's memory: GPU-seconds per team, decayed with a half-life."""

from __future__ import annotations

import math
from collections.abc import Mapping

from apps.jobs.scheduler.state import RunningJob

LN2 = math.log(2.0)


def decay_usage(
    usage: dict[str, float],
    running: list[RunningJob],
    *,
    elapsed: float,
    half_life: float,
) -> dict[str, float]:
    """Usage after ``elapsed`` seconds: old GPU-seconds decay, running jobs add theirs."""
    factor = 0.5 ** (elapsed / half_life) if half_life > 0 else 0.0
    out = {team: value * factor for team, value in usage.items()}
    for job in running:
        out[job.team] = out.get(job.team, 0.0) + len(job.gpu_ids) * elapsed
    return out


class UsageMeter:
    """Decayed GPU-seconds per team, brought up to date only when read or changed.

    Each team keeps (value at t, GPUs running, t); between changes the value follows
    du/dt = GPUs - ln2 / half_life * u exactly, so reading it costs O(1) whatever the gap."""

    def __init__(self, half_life: float) -> None:
        self.half_life = max(1.0, half_life)
        self.k = LN2 / self.half_life
        self.rec: dict[str, tuple[float, int, float]] = {}

    def at(self, team: str, now: float) -> float:
        rec = self.rec.get(team)
        if rec is None:
            return 0.0
        value, rate, t = rec
        if now <= t:
            return value
        factor = 0.5 ** ((now - t) / self.half_life)
        return value * factor + rate * (1.0 - factor) / self.k

    def change(self, team: str, gpus: int, now: float) -> None:
        """``gpus`` more (or fewer) GPUs of the team run from ``now``."""
        rate = self.rec[team][1] if team in self.rec else 0
        self.rec[team] = (self.at(team, now), rate + gpus, now)

    def snapshot(self, now: float) -> dict[str, float]:
        return {team: self.at(team, now) for team in self.rec}

    def view(self, now: float) -> Mapping[str, float]:
        """The usage of every team at ``now``, computed when a team's value is read."""
        return _UsageView(self, now)


class _UsageView(Mapping):
    def __init__(self, meter: UsageMeter, now: float) -> None:
        self.meter, self.now = meter, now

    def __getitem__(self, team: str) -> float:
        if team not in self.meter.rec:
            raise KeyError(team)
        return self.meter.at(team, self.now)

    def __iter__(self):
        return iter(self.meter.rec)

    def __len__(self) -> int:
        return len(self.meter.rec)


class UserClock:
    """Per-user fair share inside a team: a virtual clock per (team, user), as in Zhang's
    VirtualClock and in the spirit of Slurm's Fair Tree. Each job gets a *turn*, the time it
    counts as submitted in its team's queue: its submit time, or later when its user has asked
    for more than the team's guaranteed GPUs serve by then. A job advances its user's clock by
    its GPUs x runtime limit / the team's guaranteed GPUs, so a user who keeps the whole
    guarantee busy keeps pace with real time, and one who submits a thousand jobs at once
    pushes their later turns into the future: a teammate's job submitted meanwhile comes
    before them. A user idle for a while starts again at the present. Jobs without a user
    keep their submit time."""

    def __init__(self) -> None:
        self.clock: dict[tuple[str, str], float] = {}

    def turn(
        self, team: str, user: str | None, submitted_at: float, gpu_seconds: float, team_gpus: float
    ) -> float | None:
        """The job's turn (None without a user), advancing the user's clock. Call in submit
        order."""
        if user is None:
            return None
        key = (team, user)
        turn = max(submitted_at, self.clock.get(key, submitted_at))
        self.clock[key] = turn + gpu_seconds / max(1.0, team_gpus)
        return turn
