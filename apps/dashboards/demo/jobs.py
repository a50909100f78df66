"""Demo jobs: a few finished jobs in the gaps between the demo's past bookings, with the hour
rollups of their GPUs rewritten to show the work they did (one job asked for four GPUs and kept
one busy), and one job waiting above its team's limit.

Part of `seed_demo`, after the telemetry is written and before the metering, so the
ledger charges the jobs; does nothing on a database that already has jobs.
"""

import random
from datetime import datetime, timedelta

from apps.dashboards.demo.telemetry import gpm_averages
from apps.fleet.models import Gpu, GpuModel
from apps.jobs.choices import JobPriorityClass, JobStatus
from apps.jobs.holdings import holders
from apps.jobs.models import Job, JobAllocation
from apps.jobs.services import job_submit
from apps.jobs.transitions import initial_job_status
from apps.teams.models import Team, User
from apps.telemetry.choices import IdleKind
from apps.telemetry.idle import idle_hours_rollup
from apps.telemetry.models import GpuHourRollup, IdleInterval
from apps.telemetry.rollups import rollup_team_models

# team, user, name, model, GPUs asked, GPUs kept busy, days ago, hours, utilization %, status
FINISHED_JOBS = [
    ("nlp", "bob", "tokenizer-train", "A100-SXM4-80GB", 2, 2, 26, 5, 78, JobStatus.SUCCEEDED),
    ("vision", "alice", "detector-eval", "L40S-48GB", 1, 1, 22, 3, 64, JobStatus.SUCCEEDED),
    (
        "vision",
        "alice",
        "segmentation-train",
        "H100-SXM-80GB",
        2,
        2,
        15,
        8,
        91,
        JobStatus.SUCCEEDED,
    ),
    ("nlp", "bob", "eval-harness", "A100-SXM4-80GB", 1, 1, 10, 2, 55, JobStatus.FAILED),
    ("nlp", "bob", "llm-finetune-7b", "H100-SXM-80GB", 4, 1, 5, 6, 88, JobStatus.SUCCEEDED),
    ("vision", "alice", "augment-sweep", "L40S-48GB", 2, 2, 3, 4, 70, JobStatus.CANCELLED),
]
# Over the team's H100 limit (12) whatever is free, so it waits with a reason the page explains.
WAITING_JOB = ("nlp", "bob", "pretraining-run-15", "H100-SXM-80GB", 16, 48)


def _free_gpus(model: GpuModel, count: int, start: datetime, end: datetime) -> list[Gpu]:
    """`count` GPUs of the model on one node that no booking or job holds in [start, end)."""
    taken = {holder.gpu_id for holder in holders(start, end)}
    by_node: dict[int, list[Gpu]] = {}
    for gpu in Gpu.objects.filter(model=model, mig_parent__isnull=True).order_by("node", "index"):
        if gpu.pk not in taken:
            by_node.setdefault(gpu.node_id, []).append(gpu)
    return next((gpus[:count] for gpus in by_node.values() if len(gpus) >= count), [])


def _show_work(gpu: Gpu, start: datetime, end: datetime, util: float, busy: bool, rng) -> None:
    """Rewrite the hour rollups of [start, end) on the GPU as a job's work (or idleness), and
    take those hours out of its unallocated idle intervals."""
    hour = start
    while hour < end:
        level = max(0.0, min(100.0, util + rng.uniform(-6, 6))) if busy else rng.uniform(0, 2)
        GpuHourRollup.objects.filter(gpu=gpu, bucket=hour).update(
            util_avg=level,
            util_max=min(100, int(level + rng.uniform(0, 8))),
            mem_used_avg_mib=gpu.model.memory_mib * (0.72 if busy else 0.02),
            mem_used_max_mib=int(gpu.model.memory_mib * (0.8 if busy else 0.03)),
            power_avg_w=450 * level / 100 + 70,
            energy_j=(450 * level / 100 + 70) * 3600,
            busy_seconds=3600.0 if busy else 0.0,
            **gpm_averages(gpu, level, 0.75),
        )
        hour += timedelta(hours=1)
    for idle in IdleInterval.objects.filter(
        gpu=gpu, kind=IdleKind.UNALLOCATED, start__lt=end, end__gt=start
    ):
        if idle.end > end:
            IdleInterval.objects.create(gpu=gpu, kind=idle.kind, start=end, end=idle.end)
        if idle.start < start:
            idle.end = start
            idle.save(update_fields=["end"])
        else:
            idle.delete()


def _place(spec, *, now: datetime, rng) -> Job | None:
    slug, username, name, model_name, asked, busy, days_ago, hours, util, status = spec
    model = GpuModel.objects.get(name=model_name)
    start = (now - timedelta(days=days_ago)).replace(minute=0, second=0, microsecond=0)
    for _ in range(96):  # the first hour from the wished-for one with enough free GPUs
        end = start + timedelta(hours=hours)
        gpus = _free_gpus(model, asked, start, end)
        if gpus:
            break
        start += timedelta(hours=1)
    else:
        return None
    job = Job.objects.create(
        team=Team.objects.get(slug=slug),
        submitted_by=User.objects.get(username=username),
        name=name,
        argv=["python", "train.py" if "train" in name else "run.py", f"--config={name}.yaml"],
        gpu_model=model,
        gpu_count=asked,
        max_runtime_seconds=(hours + 4) * 3600,
        priority_class=JobPriorityClass.GUARANTEED,
        status=initial_job_status(status),
        node=gpus[0].node,
        exit_code={JobStatus.SUCCEEDED: 0, JobStatus.FAILED: 1}.get(status),
        dispatched_at=start,
        started_at=start,
        finished_at=end,
        log_tail="Traceback ...\nRuntimeError: CUDA error: device-side assert triggered"
        if status == JobStatus.FAILED
        else "",
    )
    Job.objects.filter(pk=job.pk).update(submitted_at=start - timedelta(minutes=rng.randint(2, 40)))
    for i, gpu in enumerate(gpus):
        JobAllocation.objects.create(job=job, gpu=gpu, start=start, end=end, released_at=end)
        _show_work(gpu, start, end, util, i < busy, rng)
    return job


def seed_demo_jobs(*, start: datetime, now: datetime) -> int:
    """Write the demo jobs (telemetry from `start` must exist); returns how many were made."""
    if Job.objects.exists() or not GpuHourRollup.objects.exists():
        return 0
    rng = random.Random(5)
    made = [job for spec in FINISHED_JOBS if (job := _place(spec, now=now, rng=rng))]
    rollup_team_models(start=start, end=now.replace(minute=0, second=0, microsecond=0))
    idle_hours_rollup(start=start, end=now)  # the jobs took hours out of idle intervals
    slug, username, name, model_name, count, hours = WAITING_JOB
    job_submit(
        actor=User.objects.get(username=username),
        team=Team.objects.get(slug=slug),
        argv=["torchrun", "--nnodes=2", "pretrain.py", "--run=15"],
        name=name,
        gpu_model=GpuModel.objects.get(name=model_name),
        gpu_count=count,
        max_runtime_seconds=hours * 3600,
        same_node=False,
    )
    return len(made) + 1
