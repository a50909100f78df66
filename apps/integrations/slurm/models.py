from django.db import models
from django.db.models import Q

from apps.integrations.slurm.choices import SlurmJobState


class SlurmJob(models.Model):
    """A Slurm job id and what the portal knows of it: for a portal job, the link between the
    two ids (both ways, kept in the database so restarts lose nothing); for a job submitted to
    Slurm directly, its imported accounting record."""

    cluster = models.CharField(max_length=64)
    slurm_job_id = models.PositiveBigIntegerField()
    job = models.OneToOneField(
        "jobs.Job", null=True, blank=True, on_delete=models.CASCADE, related_name="slurm"
    )
    team = models.ForeignKey(
        "teams.Team", null=True, blank=True, on_delete=models.PROTECT, related_name="slurm_jobs"
    )
    account = models.CharField(max_length=64, blank=True)
    user = models.CharField(max_length=64, blank=True)
    name = models.CharField(max_length=200, blank=True)
    state = models.CharField(
        max_length=16, choices=SlurmJobState.choices, default=SlurmJobState.PENDING
    )
    reason = models.CharField(max_length=64, blank=True)
    nodes = models.CharField(max_length=500, blank=True)
    gpu_type = models.CharField(max_length=64, blank=True)
    gpus = models.PositiveIntegerField(default=0)
    exit_code = models.IntegerField(null=True, blank=True)
    output_path = models.CharField(max_length=1024, blank=True)
    submitted_at = models.DateTimeField(null=True, blank=True)
    started_at = models.DateTimeField(null=True, blank=True)
    ended_at = models.DateTimeField(null=True, blank=True)
    finished = models.BooleanField(default=False, db_index=True)
    polled_at = models.DateTimeField(null=True, blank=True)
    missing_since = models.DateTimeField(
        null=True, blank=True, help_text="First poll that found it in neither squeue nor sacct."
    )

    class Meta:
        ordering = ["cluster", "slurm_job_id"]
        indexes = [
            models.Index(
                fields=["polled_at"], condition=Q(finished=False), name="slurmjob_open_poll_idx"
            )
        ]
        constraints = [
            models.UniqueConstraint(
                fields=["cluster", "slurm_job_id"],
                name="slurmjob_unique_cluster_id",
                violation_error_message="This Slurm job is already known.",
            )
        ]

    def __str__(self) -> str:
        return f"{self.cluster}:{self.slurm_job_id}"


class SlurmReservation(models.Model):
    """The Slurm advance reservation that mirrors a portal booking."""

    reservation = models.OneToOneField(
        "reservations.Reservation", on_delete=models.CASCADE, related_name="slurm"
    )
    name = models.CharField(max_length=100, unique=True)
    nodes = models.CharField(max_length=500)
    end = models.DateTimeField()
    deleted_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return self.name


class SlurmNode(models.Model):
    """The last `sinfo` reading of a node (the fleet page shows it; no Slurm call per page
    view), and whether the portal's node is drained because Slurm took it out of service."""

    hostname = models.CharField(max_length=253, unique=True)
    state = models.CharField(max_length=64)
    reason = models.CharField(max_length=500, blank=True)
    read_at = models.DateTimeField()
    drained_in_portal = models.BooleanField(
        default=False,
        help_text="The portal drained its node because Slurm did; Slurm's resume undrains it.",
    )

    class Meta:
        ordering = ["hostname"]

    def __str__(self) -> str:
        return f"{self.hostname}: {self.state}"
