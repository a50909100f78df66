"""The invariants a soak run must keep, each checked against the soak's database and what the
soak's own clients, agents and job processes recorded (never against the portal's own view of
what it did, where an outside record exists).

Every check returns a `Check`: how many things it looked at, how many broke the rule, and a
few examples. PostgreSQL only (the soak runs on it)."""

import json
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path

from django.db import connection

from apps.jobs.choices import FINISHED_STATUSES

EXAMPLES = 5
MICROSECOND = timedelta(microseconds=1)
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


@dataclass
class Check:
    name: str
    checked: int
    violations: int
    examples: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.violations == 0


def _check(name: str, checked: int, broken: list) -> Check:
    return Check(name, checked, len(broken), [str(b) for b in broken[:EXAMPLES]])


def _rows(sql: str, params: Iterable = ()) -> list[tuple]:
    with connection.cursor() as cursor:
        cursor.execute(sql, list(params))
        return cursor.fetchall()


def _count(sql: str) -> int:
    return _rows(sql)[0][0]


# --- GPUs held twice ----------------------------------------------------------------------------


def bookings_overlap() -> Check:
    """No GPU in two active booking holdings over overlapping time."""
    broken = _rows(
        """
        SELECT a.gpu_id, a.reservation_id, b.reservation_id
        FROM reservations_reservationgpu a JOIN reservations_reservationgpu b
          ON a.gpu_id = b.gpu_id AND a.id < b.id AND a.active AND b.active
         AND a.start < b."end" AND b.start < a."end"
        """
    )
    checked = _count("SELECT count(*) FROM reservations_reservationgpu WHERE active")
    examples = [f"gpu {g}: bookings {r1} and {r2}" for g, r1, r2 in broken]
    return _check("no GPU in two overlapping bookings", checked, examples)


# An allocation holds its GPU from its start until the node confirmed the process gone
# (released_at, now while unconfirmed); the scheduler does not offer the GPU before that.


def allocations_overlap() -> Check:
    """No GPU in two job allocations (other job or other attempt) over overlapping time."""
    broken = _rows(
        """
        SELECT a.gpu_id, a.job_id, a.attempt, ja.status, a.start, a."end", a.released_at,
               b.job_id, b.attempt, jb.status, b.start, b."end", b.released_at
        FROM jobs_joballocation a JOIN jobs_joballocation b
          ON a.gpu_id = b.gpu_id AND a.id < b.id
         AND (a.job_id, a.attempt) <> (b.job_id, b.attempt)
         AND a.start < coalesce(b.released_at, now()) AND b.start < coalesce(a.released_at, now())
        JOIN jobs_job ja ON ja.id = a.job_id
        JOIN jobs_job jb ON jb.id = b.job_id
        """
    )
    checked = _count("SELECT count(*) FROM jobs_joballocation")
    examples = [
        f"gpu {row[0]}: {_allocation(*row[1:7])} and {_allocation(*row[7:])}" for row in broken
    ]
    return _check("no GPU in two overlapping job allocations", checked, examples)


def _allocation(job, attempt, status, start, end, released) -> str:
    def at(moment):
        return f"{moment:%H:%M:%S.%f}"[:-3] if moment else "-"

    return (
        f"job {job}/{attempt} ({status}) from {at(start)} ended {at(end)} released {at(released)}"
    )


def allocations_in_foreign_bookings() -> Check:
    """No job runs on a GPU over time another booking holds it (a job inside a booking uses
    that booking's GPUs)."""
    broken = _rows(
        """
        SELECT a.gpu_id, a.job_id, a.attempt, h.reservation_id
        FROM jobs_joballocation a
        JOIN jobs_job j ON j.id = a.job_id
        JOIN reservations_reservationgpu h
          ON h.gpu_id = a.gpu_id AND h.active
         AND h.reservation_id IS DISTINCT FROM j.reservation_id
         AND a.start < h."end" AND h.start < coalesce(a.released_at, now())
        """
    )
    checked = _count("SELECT count(*) FROM jobs_joballocation")
    examples = [f"gpu {g}: job {j} attempt {a} inside booking {r}" for g, j, a, r in broken]
    return _check("no job allocation inside another booking", checked, examples)


# --- money -------------------------------------------------------------------------------------


def gpu_time_charged_twice() -> Check:
    """No second of any GPU in two charges: first-revision ledger rows of one GPU never overlap
    (corrections, revision > 0, carry no GPU time)."""
    broken = _rows(
        """
        SELECT a.gpu_id, a.source, a.source_id, b.source, b.source_id, a.slice_start
        FROM billing_ledgerentry a JOIN billing_ledgerentry b
          ON a.gpu_id = b.gpu_id AND a.id < b.id AND a.revision = 0 AND b.revision = 0
         AND a.slice_start < b.slice_end AND b.slice_start < a.slice_end
        """
    )
    checked = _count("SELECT count(*) FROM billing_ledgerentry WHERE revision = 0")
    examples = [
        f"gpu {g} at {start:%H:%M:%S}: {s1} {i1} and {s2} {i2}"
        for g, s1, i1, s2, i2, start in broken
    ]
    return _check("no GPU-time charged twice", checked, examples)


def remetering_inserted(rows: int, charges: int) -> Check:
    """Metering the same hours again adds nothing."""
    broken = [f"{rows} rows inserted by the second run"] if rows else []
    return Check("metering again charges nothing", charges, rows, broken)


# --- telemetry ---------------------------------------------------------------------------------


def sample_key(uuid: str, ts: float) -> tuple[str, int]:
    """A sample's identity as the portal stores it: GPU and timestamp to the microsecond."""
    return uuid, (datetime.fromtimestamp(ts, tz=UTC) - EPOCH) // MICROSECOND


def read_sent(folder: Path) -> dict[tuple[str, int], int]:
    """Samples the agents handed to the broker (see bench.soak.agent), with how often."""
    sent: dict[tuple[str, int], int] = defaultdict(int)
    for path in sorted(folder.glob("sent-*.jsonl")):
        for line in path.read_text().splitlines():
            if not line.strip():
                continue
            for uuid, ts in json.loads(line)["samples"]:
                sent[sample_key(uuid, ts)] += 1
    return sent


def samples_stored_once(sent: dict[tuple[str, int], int]) -> list[Check]:
    """Every sample an agent sent is stored exactly once (none lost, none twice), and an agent
    sent each sample once."""
    stored: dict[tuple[str, int], int] = {
        (uuid, micros): n
        for uuid, micros, n in _rows(
            """
            SELECT g.uuid, (extract(epoch FROM s.ts) * 1000000)::bigint, count(*)
            FROM telemetry_gpusample s JOIN fleet_gpu g ON g.id = s.gpu_id
            GROUP BY 1, 2
            """
        )
    }
    missing = [
        f"{uuid} at {micros / 1e6:.6f}" for (uuid, micros) in sent if (uuid, micros) not in stored
    ]
    twice = [f"{uuid} at {m / 1e6:.6f}: {n} rows" for (uuid, m), n in stored.items() if n > 1]
    resent = [f"{uuid} at {m / 1e6:.6f}: sent {n} times" for (uuid, m), n in sent.items() if n > 1]
    return [
        _check("every sent sample stored", len(sent), missing),
        _check("no sample stored twice", sum(stored.values()), twice),
        _check("no sample sent twice", sum(sent.values()), resent),
    ]


# --- jobs --------------------------------------------------------------------------------------


def jobs_stuck() -> Check:
    """After the load stopped and the system settled, every job has finished."""
    finished = [str(s) for s in FINISHED_STATUSES]
    jobs = _rows("SELECT id, status FROM jobs_job ORDER BY id")
    broken = [f"job {pk} still {status}" for pk, status in jobs if status not in finished]
    return _check("no job stuck unfinished", len(jobs), broken)


@dataclass(frozen=True)
class Run:
    """One job process as it recorded itself (see bench.soak.job)."""

    job: int
    attempt: int
    pid: int
    gpus: tuple[str, ...]
    start: float
    last: float


def read_runs(folder: Path) -> list[Run]:
    runs = []
    for path in sorted(folder.glob("run-*.json")):
        data = json.loads(path.read_text())
        runs.append(
            Run(
                job=int(data["job"]),
                attempt=int(data["attempt"]),
                pid=int(data["pid"]),
                gpus=tuple(g for g in data["gpus"].split(",") if g),
                start=float(data["start"]),
                last=float(data["last"]),
            )
        )
    return runs


def _overlapping_pairs(runs: list[Run]):
    ordered = sorted(runs, key=lambda r: r.start)
    for i, first in enumerate(ordered):
        for second in ordered[i + 1 :]:
            if second.start >= first.last:
                break
            yield first, second


def jobs_ran_twice(runs: list[Run]) -> Check:
    """No job has two processes alive at once (two attempts, or one attempt launched twice)."""
    by_job: dict[int, list[Run]] = defaultdict(list)
    for run in runs:
        by_job[run.job].append(run)
    broken = [
        f"job {a.job}: attempt {a.attempt} (pid {a.pid}) and attempt {b.attempt} (pid {b.pid}) "
        f"overlap {min(a.last, b.last) - b.start:.0f} s"
        for same_job in by_job.values()
        for a, b in _overlapping_pairs(same_job)
    ]
    return _check("no job running twice", len(runs), broken)


def gpus_in_two_processes(runs: list[Run]) -> Check:
    """No GPU (CUDA_VISIBLE_DEVICES) given to two jobs' processes alive at once."""
    by_gpu: dict[str, list[Run]] = defaultdict(list)
    for run in runs:
        for gpu in run.gpus:
            by_gpu[gpu].append(run)
    broken = [
        f"{gpu}: job {a.job}/{a.attempt} and job {b.job}/{b.attempt}"
        for gpu, on_gpu in by_gpu.items()
        for a, b in _overlapping_pairs(on_gpu)
        if a.job != b.job
    ]
    return _check("no GPU given to two running jobs", len(runs), broken)


# --- HTTP --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Answer:
    """One API request of the soak's clients: status (0: no answer) and Retry-After."""

    route: str
    status: int
    retry_after: bool = False
    error: str = ""
    at: str = ""  # when it was sent, HH:MM:SS


def server_errors(answers: list[Answer]) -> list[Check]:
    """No 5xx except 503 with Retry-After; every request answered."""
    errors = [
        f"{a.at} {a.route}: {a.status}"
        for a in answers
        if a.status >= 500 and not (a.status == 503 and a.retry_after)
    ]
    unanswered = [f"{a.at} {a.route}: {a.error}" for a in answers if a.status == 0]
    return [
        _check("no 5xx but 503 with Retry-After", len(answers), errors),
        _check("every request answered", len(answers), unanswered),
    ]


def table(checks: list[Check]) -> str:
    """The checks as a plain text table, with examples of each violation under it."""
    width = max(len(c.name) for c in checks)
    lines = [f"{'invariant':<{width}}  {'checked':>8}  {'violations':>10}  result"]
    for check in checks:
        result = "ok" if check.ok else "FAIL"
        lines.append(f"{check.name:<{width}}  {check.checked:>8}  {check.violations:>10}  {result}")
        lines.extend(f"    {example}" for example in check.examples)
    return "\n".join(lines)
