import pytest
from django.core.management import call_command
from django.db.models import Sum

from apps.reservations.models import ReservationGpu
from apps.telemetry.choices import IdleKind
from apps.telemetry.models import (
    GpuHourRollup,
    GpuMinuteRollup,
    GpuSample,
    IdleInterval,
    TeamModelHourRollup,
)

pytestmark = pytest.mark.django_db


def test_seed_demo_writes_30_days_of_telemetry_matching_bookings_once():
    call_command("seed_demo")
    hours = GpuHourRollup.objects.count()
    assert hours == 28 * 30 * 24
    assert GpuMinuteRollup.objects.exists()
    assert GpuSample.objects.count() == 28
    assert IdleInterval.objects.filter(kind=IdleKind.UNALLOCATED, team__isnull=True).exists()
    assert IdleInterval.objects.filter(kind=IdleKind.HELD_IDLE, team__isnull=False).exists()
    # A held hour belongs to the team whose booking covers it.
    held = GpuHourRollup.objects.filter(team__isnull=False).first()
    assert ReservationGpu.objects.filter(
        gpu=held.gpu,
        reservation__team=held.team,
        start__lte=held.bucket,
        end__gt=held.bucket,
        active=True,
    ).exists()
    # H100s report GPM metrics, the A100s and L40S do not; the month-long dashboards' sums
    # cover every hour rollup
    h100 = GpuHourRollup.objects.filter(gpu__model__name__startswith="H100")
    assert h100.exists() and not h100.filter(sm_active_avg__isnull=True).exists()
    assert not GpuHourRollup.objects.filter(
        gpu__model__name__startswith="L40S", sm_active_avg__isnull=False
    ).exists()
    assert TeamModelHourRollup.objects.aggregate(n=Sum("gpu_hours"))["n"] == hours
    call_command("seed_demo")
    assert GpuHourRollup.objects.count() == hours


def test_demo_minute_rollups_cover_the_24h_charts_and_agree_with_the_hours():
    from datetime import timedelta

    from django.db.models import Sum
    from django.db.models.functions import TruncHour
    from django.utils import timezone

    call_command("seed_demo")
    this_hour = timezone.now().replace(minute=0, second=0, microsecond=0)
    day_ago = this_hour - timedelta(hours=24)
    minutes = (
        GpuMinuteRollup.objects.filter(bucket__gte=day_ago, bucket__lt=this_hour)
        .annotate(hour=TruncHour("bucket"))
        .values_list("gpu_id", "hour")
        .annotate(busy=Sum("busy_seconds"))
        .order_by()
    )
    by_hour = {(gpu_id, hour): busy for gpu_id, hour, busy in minutes}
    hours = GpuHourRollup.objects.filter(bucket__gte=day_ago, bucket__lt=this_hour)
    assert hours.count() == 28 * 24
    for rollup in hours:
        assert by_hour[(rollup.gpu_id, rollup.bucket)] == rollup.busy_seconds


def test_demo_jobs_have_cost_efficiency_advice_and_a_waiting_job_once():
    from apps.billing.choices import ChargeSource
    from apps.billing.selectors import cost_by_source
    from apps.efficiency.advice import Filters, FindingKind, right_sizing
    from apps.efficiency.selectors import job_figures, window_bounds
    from apps.jobs.choices import FINISHED_STATUSES, JobStatus
    from apps.jobs.dispatch import schedule_cycle
    from apps.jobs.models import Job, JobAllocation
    from apps.reservations.models import ReservationGpu
    from apps.teams.models import User

    call_command("seed_demo")
    finished = Job.objects.filter(status__in=FINISHED_STATUSES)
    assert finished.count() == 6
    assert {j.team.slug for j in finished} == {"nlp", "vision"}
    # No job shares a GPU with a booking or another job while it runs.
    for a in JobAllocation.objects.all():
        assert a.end and a.released_at == a.end
        assert not ReservationGpu.objects.filter(
            gpu=a.gpu, active=True, start__lt=a.end, end__gt=a.start
        ).exists()
        assert (
            not JobAllocation.objects.filter(gpu=a.gpu, start__lt=a.end, end__gt=a.start)
            .exclude(pk=a.pk)
            .exists()
        )
    costs = cost_by_source(source=ChargeSource.JOB, ids=finished.values_list("pk", flat=True))
    assert len(costs) == 6 and all(cost > 0 for cost in costs.values())
    figures = job_figures(jobs=finished)
    train = finished.get(name="segmentation-train")
    eff = figures[train.pk]["efficiency"]
    assert eff["busy_gpu_hours"] > 0 and eff["idle_gpus"] == 0
    assert float(figures[train.pk]["cost"]) > 0

    start, end = window_bounds()
    items = right_sizing(user=User.objects.get(username="bob"), filters=Filters(start, end))
    over_asker = finished.get(name="llm-finetune-7b")
    item = next(i for i in items if i.kind == "job" and i.pk == over_asker.pk)
    assert [f.kind for f in item.findings if f.kind == FindingKind.IDLE_GPUS] == ["idle_gpus"]
    assert item.efficiency.idle_gpus == 3

    waiting = Job.objects.get(status=JobStatus.QUEUED)
    assert waiting.gpu_count == 16 and waiting.team.slug == "nlp"
    schedule_cycle()
    waiting.refresh_from_db()
    # 16 GPUs on nlp's limit of 12: it waits for the limit, with no start estimate.
    assert waiting.status == JobStatus.QUEUED and waiting.pending_reason == "beyond_quota"
    assert waiting.estimated_start is None
    assert float(job_figures(jobs=[waiting])[waiting.pk]["estimated_cost"]) > 0

    call_command("seed_demo")
    assert Job.objects.count() == 7 and JobAllocation.objects.count() == 12
