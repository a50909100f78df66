from django.conf import settings
from django.db import models
from django.db.models import F, Q

from apps.jobs.choices import (
    ACTIVE_STATUSES,
    FINISHED_STATUSES,
    WAITING_STATUSES,
    JobPriorityClass,
    JobStatus,
    WhatIfStatus,
)
from apps.teams.models import TeamOwnedQuerySet


class Job(models.Model):
    """A team's GPU job: an argv command run on `gpu_count` GPUs until it exits or is stopped."""

    team = models.ForeignKey("teams.Team", on_delete=models.PROTECT, related_name="jobs")
    submitted_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="jobs"
    )
    name = models.CharField(max_length=200, blank=True)
    argv = models.JSONField(help_text="The command as a list of arguments; never a shell string.")
    workdir = models.CharField(max_length=1024, blank=True)
    env = models.JSONField(default=dict, blank=True, help_text="Extra environment variables.")
    gpu_model = models.ForeignKey(
        "fleet.GpuModel",
        verbose_name="GPU model",
        null=True,
        blank=True,
        on_delete=models.PROTECT,
        related_name="jobs",
        help_text="Empty: any model.",
    )
    gpu_count = models.PositiveIntegerField("GPU count")
    same_node = models.BooleanField(default=True)
    max_runtime_seconds = models.PositiveIntegerField()
    priority_class = models.CharField(
        max_length=16, choices=JobPriorityClass.choices, default=JobPriorityClass.OVER_QUOTA
    )
    reservation = models.ForeignKey(
        "reservations.Reservation",
        null=True,
        blank=True,
        on_delete=models.PROTECT,
        related_name="jobs",
    )
    status = models.CharField(
        max_length=16, choices=JobStatus.choices, default=JobStatus.QUEUED, db_index=True
    )
    node = models.ForeignKey(
        "fleet.Node", null=True, blank=True, on_delete=models.PROTECT, related_name="jobs"
    )
    exit_code = models.IntegerField(null=True, blank=True)
    submitted_at = models.DateTimeField(auto_now_add=True, db_index=True)
    dispatched_at = models.DateTimeField(null=True, blank=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    requeue_count = models.PositiveIntegerField(default=0)
    checkpointable = models.BooleanField(
        default=False,
        help_text="The job saves its progress when stopped (SIGTERM) and resumes from it, so a "
        "preemption loses no work.",
    )
    preemption_count = models.PositiveIntegerField(default=0)
    # GPU-seconds of work thrown away by preemptions (runtime of preempted attempts of a job
    # that is not checkpointable); reported beside the preemption count.
    gpu_seconds_lost = models.FloatField(default=0.0)
    # A multi-node job whose gang broke (a node failed to launch it or lost it) is requeued
    # once; a second break fails it.
    gang_requeued = models.BooleanField(default=False)
    log_tail = models.TextField(blank=True)
    pending_reason = models.CharField(max_length=32, blank=True)
    pending_message = models.CharField(max_length=500, blank=True)
    estimated_start = models.DateTimeField(null=True, blank=True)
    # When the scheduler first found the waiting job within its team's unused guarantee: its
    # patience before a reclaim counts from then, not from submission (a job that fits only
    # once its team's own jobs end must not stop another team's days-old run at once). Kept
    # between cycles, since each cycle rebuilds the scheduler's state; cleared when it leaves
    # the queue.
    reclaim_since = models.DateTimeField(null=True, blank=True)

    objects = TeamOwnedQuerySet.as_manager()

    class Meta:
        ordering = ["-submitted_at", "-id"]
        indexes = [models.Index(fields=["team", "status"], name="job_team_status_idx")]
        constraints = [
            models.CheckConstraint(
                condition=Q(gpu_count__gt=0),
                name="job_gpu_count_positive",
                violation_error_message="A job needs at least one GPU.",
            ),
            models.CheckConstraint(
                condition=Q(max_runtime_seconds__gt=0),
                name="job_max_runtime_positive",
                violation_error_message="The maximum runtime must be positive.",
            ),
        ]

    def __str__(self) -> str:
        return f"#{self.pk} {self.name or self.argv[:1]} ({self.status})"

    @property
    def attempt(self) -> int:
        """The current attempt number: 1 for the first run, +1 per requeue."""
        return self.requeue_count + 1

    @property
    def badge_class(self) -> str:
        """CSS class of the status pill: green running/succeeded, amber waiting, red failed."""
        if self.status in (JobStatus.RUNNING, JobStatus.SUCCEEDED):
            return "status-up"
        if self.status in (JobStatus.FAILED, JobStatus.PREEMPTED):
            return "status-unreachable"
        if self.status in (JobStatus.QUEUED, JobStatus.REQUEUED, JobStatus.DISPATCHED):
            return "status-drained"
        return ""

    @property
    def short_priority_class(self) -> str:
        """The class's name without its explanation: "Over quota" for a narrow column."""
        return self.get_priority_class_display().split(" (", 1)[0]

    @property
    def is_finished(self) -> bool:
        return self.status in FINISHED_STATUSES

    @property
    def is_waiting(self) -> bool:
        return self.status in WAITING_STATUSES

    @property
    def is_active(self) -> bool:
        return self.status in ACTIVE_STATUSES


class JobAllocation(models.Model):
    """One GPU used by one attempt of a job over [start, end); end is null while it runs.

    The billing meter charges jobs outside reservations from these intervals, so every
    allocation is closed (end set) whenever its job stops for any reason.
    """

    job = models.ForeignKey(Job, on_delete=models.CASCADE, related_name="allocations")
    gpu = models.ForeignKey("fleet.Gpu", on_delete=models.PROTECT, related_name="job_allocations")
    attempt = models.PositiveIntegerField(default=1)
    start = models.DateTimeField()
    end = models.DateTimeField(null=True, blank=True)
    released_at = models.DateTimeField(
        null=True,
        blank=True,
        help_text="When the node confirmed the process is gone; until then the GPU is not free.",
    )
    over_quota = models.BooleanField(default=False)

    class Meta:
        ordering = ["job_id", "attempt", "gpu_id"]
        indexes = [
            models.Index(
                fields=["gpu"], condition=Q(end__isnull=True), name="joballoc_open_gpu_idx"
            ),
            models.Index(fields=["start", "end"], name="joballoc_time_idx"),
            models.Index(
                fields=["gpu"],
                condition=Q(released_at__isnull=True),
                name="joballoc_unreleased_gpu_idx",
            ),
        ]
        constraints = [
            models.UniqueConstraint(
                fields=["job", "attempt", "gpu"], name="joballoc_unique_job_attempt_gpu"
            ),
            models.UniqueConstraint(
                fields=["gpu"],
                condition=Q(end__isnull=True),
                name="joballoc_one_open_per_gpu",
                violation_error_message="The GPU is already allocated to a running job.",
            ),
            models.CheckConstraint(
                condition=Q(end__isnull=True) | Q(end__gte=F("start")),
                name="joballoc_end_after_start",
            ),
        ]

    def __str__(self) -> str:
        return f"job {self.job_id} attempt {self.attempt} gpu {self.gpu_id}"


class WhatIfRun(models.Model):
    """One what-if replay a platform admin asked for: the proposal, how far the worker got and
    what it found. Kept (not cached) so a run survives a restart and who tried what is on record."""

    status = models.CharField(
        max_length=16, choices=WhatIfStatus.choices, default=WhatIfStatus.QUEUED
    )
    progress = models.PositiveSmallIntegerField(default=0)  # percent
    # Last sign of life from the worker replaying it; a running run silent for
    # JOBS_WHATIF_STALL_MINUTES is marked failed (the worker died or was restarted).
    progress_at = models.DateTimeField(null=True, blank=True)
    window = models.CharField(max_length=8)
    policy = models.CharField(max_length=32)
    # [{"team", "model", "guaranteed", "limit"}], in the order of the form's rows
    proposed = models.JSONField(default=list)
    # {"idle_seconds", "resume_seconds", "warm_gpus", "idle_watts"}: also replay the proposal
    # with power saving (``whatif.power_saving_from``); None: always on only
    power_saving = models.JSONField(null=True, blank=True)
    result = models.JSONField(null=True, blank=True)
    error = models.TextField(blank=True)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]
        constraints = [
            models.CheckConstraint(
                condition=Q(progress__lte=100), name="whatifrun_progress_at_most_100"
            ),
        ]

    def __str__(self) -> str:
        return f"what-if run {self.pk} ({self.status})"

    @property
    def is_failed(self) -> bool:
        return self.status == WhatIfStatus.FAILED

    @property
    def is_pending(self) -> bool:
        """Queued or running: the page keeps following it."""
        return self.status in (WhatIfStatus.QUEUED, WhatIfStatus.RUNNING)
