"""Loading job traces, fleets and quotas for the replayer. Pure Python, no Django.

Traces:

* ``load_generic(path, submit=..., duration=... or end=..., gpus=..., team=..., model=...)``
  reads any CSV; the keyword arguments name its columns. Times are seconds.
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

Quotas: ``load_quotas(path)`` (CSV ``team,model,guaranteed,limit``; empty model = any) or
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
from pathlib import Path

from apps.jobs.scheduler.replay import TraceJob
from apps.jobs.scheduler.state import GpuInfo, TeamQuota

FLEET_RE = re.compile(r"^\s*(\d+)\s*x\s*(\d+)\s*:\s*([\w.\-]+)\s*$")


class TraceError(ValueError):
    """A trace, fleet or quota file that cannot be read; the message says why."""


@dataclass
class LoadedTrace:
    jobs: list[TraceJob]
    counts: Counter = field(default_factory=Counter)  # skipped / adjusted rows, by reason


def _num(row: dict, column: str, line: int) -> float:
    try:
        return float(row[column])
    except KeyError:
        raise TraceError(f"Column {column!r} is missing.") from None
    except ValueError:
        raise TraceError(f"Line {line}: {column}={row[column]!r} is not a number.") from None


def load_generic(
    path: str | Path,
    *,
    submit: str = "submit",
    duration: str | None = "duration",
    end: str | None = None,
    gpus: str = "gpus",
    team: str = "team",
    model: str | None = "model",
) -> LoadedTrace:
    """Jobs from a CSV whose columns are named by the keyword arguments."""
    counts: Counter = Counter()
    jobs: list[TraceJob] = []
    with open(path, newline="") as fh:
        reader = csv.DictReader(fh)
        for line, row in enumerate(reader, start=2):
            start = _num(row, submit, line)
            if end:
                length = _num(row, end, line) - start
            elif duration:
                length = _num(row, duration, line)
            else:
                raise TraceError("Give a duration column or an end column.")
            count = math.ceil(_num(row, gpus, line))
            if count <= 0:
                counts["no_gpu"] += 1
                continue
            if length <= 0:
                counts["non_positive_duration"] += 1
                continue
            gpu_model = ((row.get(model) or "").strip() or None) if model else None
            owner = row.get(team) or "default"
            jobs.append(TraceJob(len(jobs) + 1, start, length, count, owner, gpu_model))
    jobs.sort(key=lambda j: (j.submit, j.job_id))
    return LoadedTrace(jobs, counts)


def load_alibaba_pods(path: str | Path, *, limit: int | None = None) -> LoadedTrace:
    """The Alibaba openb pod list as trace jobs (rules in the module docstring)."""
    counts: Counter = Counter()
    jobs: list[TraceJob] = []
    with open(path, newline="") as fh:
        for line, row in enumerate(csv.DictReader(fh), start=2):
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
    out = []
    with open(path, newline="") as fh:
        for line, row in enumerate(csv.DictReader(fh), start=2):
            g, lim = int(_num(row, "guaranteed", line)), int(_num(row, "limit", line))
            if not 0 <= g <= lim:
                raise TraceError(f"Line {line}: need 0 <= guaranteed <= limit.")
            out.append(TeamQuota(row["team"], (row.get("model") or "").strip() or None, g, lim))
    return out


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
