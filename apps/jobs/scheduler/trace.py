"""Loading job traces, fleets and quotas for the replayer. Pure Python, no Django.

Traces:

* ``load_generic(path, submit=..., duration=... or end=..., gpus=..., team=..., model=...)``
  reads any CSV; the keyword arguments name its columns. Times are seconds, ISO 8601 or
  ``YYYY-MM-DD HH:MM:SS`` (UTC unless the time says otherwise); durations are seconds or
  Slurm's ``[D-]HH:MM:SS``.
* ``load_slurm(path)`` reads ``sacct --parsable2`` output (see its docstring).
* Bad rows are skipped and counted by reason with their first line numbers
  (``LoadedTrace.describe()``); a file that cannot be opened or parsed, or lacks a needed
  column, raises one ``TraceError``.
* ``load_alibaba_pods(path)`` reads the Alibaba ``openb_pod_list`` (cluster-trace-gpu-v2023):
  submit = ``creation_time``; duration = ``deletion_time - scheduled_time`` (or
  ``- creation_time`` when the pod was never scheduled); GPUs = ``num_gpu``. Pods sharing a
  GPU (``gpu_milli < 1000``) are rounded up to whole GPUs and counted; pods asking for no GPU
  are skipped and counted. Team rule: the pod's Kubernetes QoS class (``LS``, ``BE``,
  ``Burstable``, ``Guaranteed``) is its team, the only grouping the trace has. Model =
  ``gpu_spec`` (first of ``a|b``) or any model when empty.

Fleets: ``parse_fleet("4x8:H100,2x4:L40S")`` (nodes x GPUs : model; model ``any`` is named
``GPU``) or ``load_fleet_csv(path)`` for the Alibaba node list (nodes with ``gpu > 0``; each
node is its own NVLink domain).

Quotas: ``load_quota_units(path)`` (CSV ``team,model,guaranteed,limit[,parent]``; empty model =
any; with ``parent``, organisation units and their rows: see ``quota_file``) or
``default_quotas(gpus, teams)``: each team is guaranteed an equal share (rounded down) of each
model and may burst to the whole model. ``helios_quotas(path, gpus)`` maps the first day of the
Helios Venus virtual-cluster quotas onto the fleet, scaled to its size.
"""

from __future__ import annotations

import csv
import math
import random
import re
from collections import Counter
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path

from apps.jobs.scheduler.quota_file import OrgUnits, QuotaFileError, load_quota_file
from apps.jobs.scheduler.replay import TraceJob
from apps.jobs.scheduler.state import GpuInfo, TeamQuota

FLEET_RE = re.compile(r"^\s*(\d+)\s*x\s*(\d+)\s*:\s*([\w.\-]+)\s*$")


class TraceError(ValueError):
    """A trace, fleet or quota file that cannot be read; the message says why."""


MAX_LINES_PER_REASON = 20


@dataclass
class LoadedTrace:
    jobs: list[TraceJob]
    counts: Counter = field(default_factory=Counter)  # skipped / adjusted rows, by reason
    lines: dict[str, list[int]] = field(default_factory=dict)  # first line numbers, by reason

    def skip(self, reason: str, line: int) -> None:
        self.counts[reason] += 1
        numbers = self.lines.setdefault(reason, [])
        if len(numbers) < MAX_LINES_PER_REASON:
            numbers.append(line)

    def describe(self) -> str:
        """``reason: N (lines a, b, ...)`` for each reason, or ``none``."""
        if not self.counts:
            return "none"
        parts = []
        for reason, n in sorted(self.counts.items()):
            numbers = self.lines.get(reason, [])
            more = ", ..." if n > len(numbers) else ""
            where = f" (lines {', '.join(map(str, numbers))}{more})" if numbers else ""
            parts.append(f"{reason}: {n}{where}")
        return "; ".join(parts)


DURATION_RE = re.compile(r"^(?:(\d+)-)?(?:(\d+):)?(\d+):(\d+(?:\.\d+)?)$")


def parse_time(value: str) -> float:
    """Seconds, or an ISO 8601 / ``YYYY-MM-DD HH:MM:SS`` time (UTC unless it says otherwise),
    as epoch seconds. Raises ValueError."""
    text = (value or "").strip()
    try:
        return float(text)
    except ValueError:
        pass
    if text.endswith("Z"):
        text = text[:-1] + "+00:00"
    moment = datetime.fromisoformat(text)
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.timestamp()


def parse_duration(value: str) -> float:
    """Seconds, or Slurm's ``[D-]HH:MM:SS`` (also ``MM:SS``). Raises ValueError."""
    text = (value or "").strip()
    try:
        return float(text)
    except ValueError:
        pass
    m = DURATION_RE.match(text)
    if not m:
        raise ValueError(f"{value!r} is not a duration")
    days, hours, minutes, seconds = m.groups()
    return int(days or 0) * 86400 + int(hours or 0) * 3600 + int(minutes) * 60 + float(seconds)


def _num(row: dict, column: str, line: int) -> float:
    try:
        return float(row[column])
    except KeyError:
        raise TraceError(f"Column {column!r} is missing.") from None
    except (TypeError, ValueError):
        raise TraceError(f"Line {line}: {column}={row[column]!r} is not a number.") from None


def _reader(handle, path, delimiter: str = ","):
    try:
        reader = csv.DictReader(handle, delimiter=delimiter)
        if not reader.fieldnames:
            raise TraceError(f"{path} is empty or not a CSV file.")
        return reader
    except (csv.Error, UnicodeDecodeError) as error:
        raise TraceError(f"{path} cannot be read as CSV: {error}") from None


def _require(reader, path, *columns: str | None) -> None:
    missing = [c for c in columns if c and c not in reader.fieldnames]
    if missing:
        raise TraceError(
            f"{path} has no column {', '.join(map(repr, missing))}; its columns are "
            f"{', '.join(reader.fieldnames)}."
        )


def _open(path: str | Path):
    try:
        return open(path, newline="", encoding="utf-8")
    except OSError as error:
        raise TraceError(f"Cannot open {path}: {error.strerror or error}.") from None


def load_generic(
    path: str | Path,
    *,
    submit: str = "submit",
    duration: str | None = "duration",
    end: str | None = None,
    gpus: str = "gpus",
    team: str = "team",
    model: str | None = "model",
    user: str | None = "user",
) -> LoadedTrace:
    """Jobs from a CSV whose columns are named by the keyword arguments. Submit / end times
    are seconds, ISO 8601 or ``YYYY-MM-DD HH:MM:SS``; durations seconds or ``[D-]HH:MM:SS``.
    A ``checkpointable`` column (1/true/yes) marks jobs that resume after a preemption; a
    ``user`` column (when the file has one) who submitted each job, for fair share between
    the users of a team. Bad rows are skipped and counted by reason with their line numbers."""
    if not end and not duration:
        raise TraceError("Give a duration column or an end column.")
    loaded = LoadedTrace([])
    with _open(path) as fh:
        reader = _reader(fh, path)
        _require(reader, path, submit, gpus, end or duration)
        try:
            for line, row in enumerate(reader, start=2):
                _generic_row(loaded, row, line, submit, duration, end, gpus, team, model, user)
        except (csv.Error, UnicodeDecodeError) as error:
            raise TraceError(f"{path} cannot be read as CSV: {error}") from None
    loaded.jobs.sort(key=lambda j: (j.submit, j.job_id))
    return loaded


def _generic_row(loaded, row, line, submit, duration, end, gpus, team, model, user) -> None:
    try:
        start = parse_time(row[submit])
    except (TypeError, ValueError):
        loaded.skip("bad_submit", line)
        return
    try:
        length = parse_time(row[end]) - start if end else parse_duration(row[duration])
    except (TypeError, ValueError):
        loaded.skip("bad_end" if end else "bad_duration", line)
        return
    try:
        count = math.ceil(float(row[gpus]))
    except (TypeError, ValueError):
        loaded.skip("bad_gpus", line)
        return
    if count <= 0:
        loaded.skip("no_gpu", line)
        return
    if length <= 0:
        loaded.skip("non_positive_duration", line)
        return
    gpu_model = ((row.get(model) or "").strip() or None) if model else None
    owner = (row.get(team) or "").strip() or "default"
    checkpointable = (row.get("checkpointable") or "").strip().lower() in ("1", "true", "yes")
    submitter = ((row.get(user) or "").strip() or None) if user else None
    loaded.jobs.append(
        TraceJob(len(loaded.jobs) + 1, start, length, count, owner, gpu_model,
                 checkpointable=checkpointable, user=submitter)
    )  # fmt: skip


SLURM_COLUMNS = ("JobID", "Account", "Submit", "Start", "End", "Elapsed", "AllocTRES", "State")
GRES_RE = re.compile(r"gres/gpu(?::([\w.\-]+))?=(\d+)")


def load_slurm(path: str | Path) -> LoadedTrace:
    """``sacct --parsable2`` output (``|``-separated, with a header) with at least the columns
    JobID, Account, Submit, Start, End, Elapsed, AllocTRES and State. One job per allocation:
    job steps (``123.batch``, ``123.0``) are skipped; GPUs from ``gres/gpu=N`` in AllocTRES
    (a typed ``gres/gpu:a100=N`` also names the model); duration = Elapsed (or End - Start);
    team = Account; user = User when the output has it. Jobs that never started are counted as
    ``not_started``."""
    loaded = LoadedTrace([])
    with _open(path) as fh:
        reader = _reader(fh, path, delimiter="|")
        _require(reader, path, *SLURM_COLUMNS)
        try:
            for line, row in enumerate(reader, start=2):
                _slurm_row(loaded, row, line)
        except (csv.Error, UnicodeDecodeError) as error:
            raise TraceError(f"{path} cannot be read as sacct output: {error}") from None
    loaded.jobs.sort(key=lambda j: (j.submit, j.job_id))
    return loaded


def _slurm_row(loaded: LoadedTrace, row: dict, line: int) -> None:
    job_id = (row.get("JobID") or "").strip()
    if not job_id:
        loaded.skip("no_job_id", line)
        return
    if "." in job_id:
        loaded.counts["job_step"] += 1  # steps belong to their job: not an error
        return
    try:
        submit = parse_time(row["Submit"])
    except (TypeError, ValueError):
        loaded.skip("bad_submit", line)
        return
    if (row.get("Start") or "").strip() in ("", "Unknown", "None"):
        loaded.skip("not_started", line)
        return
    try:
        length = parse_duration(row["Elapsed"])
        if length <= 0 and (row.get("End") or "").strip() not in ("", "Unknown", "None"):
            length = parse_time(row["End"]) - parse_time(row["Start"])
    except (TypeError, ValueError):
        loaded.skip("bad_elapsed", line)
        return
    matches = GRES_RE.findall(row.get("AllocTRES") or "")
    untyped = [int(n) for kind, n in matches if not kind]
    typed = [(kind, int(n)) for kind, n in matches if kind]
    count = untyped[0] if untyped else sum(n for _, n in typed)
    if count <= 0:
        loaded.skip("no_gpu", line)
        return
    if length <= 0:
        loaded.skip("non_positive_duration", line)
        return
    model = typed[0][0] if len(typed) == 1 else None
    team = (row.get("Account") or "").strip() or "default"
    user = (row.get("User") or "").strip() or None
    loaded.jobs.append(
        TraceJob(len(loaded.jobs) + 1, submit, length, count, team, model, user=user)
    )


def load_alibaba_pods(path: str | Path, *, limit: int | None = None) -> LoadedTrace:
    """The Alibaba openb pod list as trace jobs (rules in the module docstring)."""
    counts: Counter = Counter()
    jobs: list[TraceJob] = []
    with _open(path) as fh:
        for line, row in enumerate(_reader(fh, path), start=2):
            num_gpu = int(_num(row, "num_gpu", line))
            if num_gpu <= 0:
                counts["no_gpu"] += 1
                continue
            milli = int(_num(row, "gpu_milli", line) or 1000)
            if milli < 1000:
                counts["fractional_rounded_up"] += 1
            created = _num(row, "creation_time", line)
            started = float(row["scheduled_time"]) if row.get("scheduled_time") else created
            length = _num(row, "deletion_time", line) - started
            if length <= 0:
                counts["non_positive_duration"] += 1
                continue
            spec = (row.get("gpu_spec") or "").split("|")[0].strip() or None
            jobs.append(TraceJob(len(jobs) + 1, created, length, num_gpu, row["qos"], spec))
            if limit and len(jobs) >= limit:
                break
    jobs.sort(key=lambda j: (j.submit, j.job_id))
    return LoadedTrace(jobs, counts)


def resample(jobs: list[TraceJob], n: int, seed: int = 42) -> list[TraceJob]:
    """``n`` jobs drawn with replacement; submit times spread over ``n / len(jobs)`` times the
    original span so the offered load per hour stays that of the trace."""
    if not jobs:
        return []
    rng = random.Random(seed)
    span = max(j.submit for j in jobs) - min(j.submit for j in jobs) or 1.0
    total = span * n / len(jobs)
    out = []
    for k in range(n):
        base = rng.choice(jobs)
        out.append(replace(base, job_id=k + 1, submit=rng.uniform(0, total)))
    out.sort(key=lambda j: (j.submit, j.job_id))
    return out


def parse_fleet(spec: str) -> list[GpuInfo]:
    """``"4x8:H100,2x4:L40S"``: 4 nodes of 8 H100 and 2 nodes of 4 L40S."""
    gpus: list[GpuInfo] = []
    node_no = 0
    for part in spec.split(","):
        m = FLEET_RE.match(part)
        if not m:
            raise TraceError(f"Fleet part {part!r} is not NODESxGPUS:MODEL, e.g. 4x8:H100.")
        nodes, per_node, model = int(m[1]), int(m[2]), m[3]
        if model.lower() == "any":
            model = "GPU"
        for _ in range(nodes):
            node = f"node-{node_no:04d}"
            base = len(gpus)  # not inside the generator: extend grows the list as it goes
            gpus.extend(GpuInfo(base + i, node, model, node) for i in range(per_node))
            node_no += 1
    if not gpus:
        raise TraceError("The fleet has no GPUs.")
    return gpus


def load_fleet_csv(path: str | Path) -> list[GpuInfo]:
    """The Alibaba node list: nodes with ``gpu > 0``; empty model is ``GPU``."""
    gpus: list[GpuInfo] = []
    with open(path, newline="") as fh:
        for line, row in enumerate(csv.DictReader(fh), start=2):
            count = int(_num(row, "gpu", line))
            node = row.get("sn") or f"node-{line}"
            model = (row.get("model") or "").strip() or "GPU"
            base = len(gpus)
            gpus.extend(GpuInfo(base + i, node, model, node) for i in range(count))
    if not gpus:
        raise TraceError("The fleet file has no GPUs.")
    return gpus


def load_quotas(path: str | Path) -> list[TeamQuota]:
    """The teams' rows of a quota file (``quota_file``; units, if any, left out)."""
    return load_quota_units(path)[0]


def load_quota_units(path: str | Path) -> tuple[list[TeamQuota], OrgUnits | None]:
    """The teams' rows and the units of a quota file (``quota_file``)."""
    try:
        return load_quota_file(path)
    except QuotaFileError as error:
        raise TraceError(str(error)) from None


def default_quotas(gpus: list[GpuInfo], teams: list[str]) -> list[TeamQuota]:
    """Equal split: each team guaranteed capacity // teams of each model, limit = capacity."""
    capacity = Counter(g.model for g in gpus)
    if not teams:
        return []
    return [
        TeamQuota(team, model, cap // len(teams), cap)
        for team in teams
        for model, cap in sorted(capacity.items())
    ]


def helios_quotas(path: str | Path, gpus: list[GpuInfo], teams: list[str]) -> list[TeamQuota]:
    """Guarantees in proportion to the Helios Venus VCs' first-day GPU counts, assigned to
    ``teams`` in order (largest VC to the first team), scaled to the fleet; limit = capacity."""
    with open(path, newline="") as fh:
        first = next(csv.DictReader(fh))
    sizes = sorted(
        (int(v) for k, v in first.items() if k not in ("date", "total") and int(v) > 0),
        reverse=True,
    )[: len(teams)]
    total = sum(sizes) or 1
    capacity = Counter(g.model for g in gpus)
    return [
        TeamQuota(team, model, cap * size // total, cap)
        for team, size in zip(teams, sizes, strict=False)
        for model, cap in sorted(capacity.items())
    ]
