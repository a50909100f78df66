from django.db import models

from apps.telemetry.activity import signal_of_average
from apps.telemetry.choices import IdleKind
from portal.formatting import format_span


class GpuSample(models.Model):
    """One NVML reading of one GPU (or MIG device). Raw; kept `TELEMETRY_RAW_RETENTION_DAYS`.

    Fields NVML could not read on that device are null."""

    id = models.BigAutoField(primary_key=True)
    gpu = models.ForeignKey("fleet.Gpu", on_delete=models.CASCADE, related_name="samples")
    ts = models.DateTimeField()
    util_gpu = models.SmallIntegerField(null=True)
    util_mem = models.SmallIntegerField(null=True)
    mem_used_mib = models.IntegerField(null=True)
    power_w = models.FloatField(null=True)
    temp_c = models.SmallIntegerField(null=True)
    energy_mj = models.BigIntegerField(null=True, help_text="NVML total energy counter, mJ.")
    # NVML GPU Performance Metrics (Hopper and newer), percent 0-100 over the poll interval;
    # null on devices without GPM. Unlike util_gpu ("some kernel ran"), they say how much of
    # the GPU was actually working.
    sm_active = models.FloatField(null=True, help_text="SM activity (GPM SM_UTIL), %.")
    sm_occupancy = models.FloatField(null=True, help_text="SM occupancy (GPM), %.")
    tensor_active = models.FloatField(null=True, help_text="Tensor core activity (GPM), %.")
    dram_bw_util = models.FloatField(null=True, help_text="DRAM bandwidth utilization (GPM), %.")

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["gpu", "ts"],
                name="gpusample_unique_gpu_ts",
                violation_error_message="This GPU already has a sample at this time.",
            )
        ]
        indexes = [models.Index(fields=["ts"], name="gpusample_ts_idx")]

    def __str__(self) -> str:
        return f"gpu {self.gpu_id} @ {self.ts:%Y-%m-%d %H:%M:%S}"


class IngestBatch(models.Model):
    """A telemetry batch already stored, by the node's own sequence number: a redelivered
    batch finds its key here and is skipped whole."""

    node = models.CharField(max_length=253)
    seq = models.BigIntegerField()
    received_at = models.DateTimeField(auto_now_add=True)
    stored = models.PositiveIntegerField(default=0)
    rejected = models.PositiveIntegerField(default=0)

    class Meta:
        verbose_name_plural = "ingest batches"
        constraints = [
            models.UniqueConstraint(fields=["node", "seq"], name="ingestbatch_unique_node_seq")
        ]
        indexes = [models.Index(fields=["received_at"], name="ingestbatch_received_idx")]

    def __str__(self) -> str:
        return f"{self.node} #{self.seq}"


class TelemetryCounter(models.Model):
    """Running totals shown on /metrics (every process sees them, unlike in-memory counters)."""

    name = models.CharField(max_length=64)
    reason = models.CharField(max_length=64, blank=True)
    value = models.BigIntegerField(default=0)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["name", "reason"], name="telemetrycounter_unique")
        ]

    def __str__(self) -> str:
        return f"{self.name}{{{self.reason}}} = {self.value}"


class DrainHeartbeat(models.Model):
    """When the telemetry drain last ran, and since when it has run without a break (one row).

    Node health reads it before it judges: a node's batches may sit in the queue (the broker
    was paused, the drain is behind or was down), and silence the portal could not have heard
    proves nothing about the node."""

    listening_since = models.DateTimeField(
        help_text="Start of the drain's current unbroken run (no gap over the stale limit)."
    )
    last_run_at = models.DateTimeField(help_text="When the last drain finished.")
    backlog = models.BooleanField(
        default=False, help_text="The last drain left batches in the queue (or in flight)."
    )

    def __str__(self) -> str:
        return f"drain listening since {self.listening_since:%Y-%m-%d %H:%M:%S}"


class RollupBase(models.Model):
    gpu = models.ForeignKey("fleet.Gpu", on_delete=models.CASCADE, related_name="+")
    bucket = models.DateTimeField(help_text="Start of the minute or hour.")
    team = models.ForeignKey(
        "teams.Team",
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
        help_text="Who held the GPU (booking) at the start of the bucket; empty: unallocated.",
    )
    samples = models.PositiveIntegerField()
    util_avg = models.FloatField(null=True)
    util_max = models.SmallIntegerField(null=True)
    mem_used_avg_mib = models.FloatField(null=True)
    mem_used_max_mib = models.IntegerField(null=True)
    power_avg_w = models.FloatField(null=True)
    energy_j = models.FloatField(null=True, help_text="Energy used in the bucket, joules.")
    busy_seconds = models.FloatField(
        help_text="Seconds of the bucket the GPU was busy: SM activity at or above "
        "TELEMETRY_SM_ACTIVE_BUSY_PERCENT where the GPU reports GPM, utilization at or above "
        "TELEMETRY_BUSY_UTIL_PERCENT otherwise."
    )
    # Averages over the bucket's samples that had a value; null when none had (no GPM).
    sm_active_avg = models.FloatField(null=True, help_text="Average SM activity, %.")
    sm_occupancy_avg = models.FloatField(null=True, help_text="Average SM occupancy, %.")
    tensor_active_avg = models.FloatField(null=True, help_text="Average tensor activity, %.")
    dram_bw_avg = models.FloatField(null=True, help_text="Average DRAM bandwidth use, %.")

    class Meta:
        abstract = True

    def __str__(self) -> str:
        return f"gpu {self.gpu_id} @ {self.bucket:%Y-%m-%d %H:%M}"

    @property
    def activity_signal(self) -> str:
        """Which signal this bucket's busy time and idleness come from."""
        return signal_of_average(self.sm_active_avg)


class GpuMinuteRollup(RollupBase):  # noqa: DJ008 - __str__ inherited
    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["gpu", "bucket"], name="minuterollup_unique_gpu_bucket")
        ]
        indexes = [models.Index(fields=["bucket"], name="minuterollup_bucket_idx")]


class GpuHourRollup(RollupBase):  # noqa: DJ008 - __str__ inherited
    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["gpu", "bucket"], name="hourrollup_unique_gpu_bucket")
        ]
        indexes = [models.Index(fields=["bucket"], name="hourrollup_bucket_idx")]


class TeamModelHourRollup(models.Model):
    """Hour rollups pre-summed per (hour, team, GPU model): what the dashboards and efficiency
    pages read for windows longer than a day, instead of one row per GPU and hour.

    Rewritten with the hour rollups it sums, in the same transaction (`rollup_hours`, late
    samples included), so the two never disagree. Sums and counts rather than averages, so any
    set of rows adds up: an average is `<metric>_sum / <metric>_n` (GPU-hours that had a value).
    MIG devices are counted like GPUs, as in the per-GPU rollups."""

    bucket = models.DateTimeField(help_text="Start of the hour.")
    team = models.ForeignKey(
        "teams.Team",
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
        help_text="Team the GPUs were attributed to in the hour rollups; empty: unallocated.",
    )
    gpu_model = models.ForeignKey("fleet.GpuModel", on_delete=models.CASCADE, related_name="+")
    gpu_hours = models.PositiveIntegerField(help_text="Hour rollup rows summed (GPU-hours).")
    samples = models.PositiveBigIntegerField()
    busy_seconds = models.FloatField()
    energy_j = models.FloatField(null=True)
    util_sum = models.FloatField(null=True)
    util_n = models.PositiveIntegerField()
    mem_used_sum_mib = models.FloatField(null=True)
    mem_used_n = models.PositiveIntegerField()
    mem_used_max_mib = models.IntegerField(null=True)
    sm_active_sum = models.FloatField(null=True)
    sm_active_n = models.PositiveIntegerField()
    sm_occupancy_sum = models.FloatField(null=True)
    sm_occupancy_n = models.PositiveIntegerField()
    tensor_active_sum = models.FloatField(null=True)
    tensor_active_n = models.PositiveIntegerField()
    dram_bw_sum = models.FloatField(null=True)
    dram_bw_n = models.PositiveIntegerField()

    class Meta:
        indexes = [models.Index(fields=["bucket"], name="teammodelhour_bucket_idx")]

    def __str__(self) -> str:
        team = self.team_id or "unallocated"
        return f"team {team} model {self.gpu_model_id} @ {self.bucket:%Y-%m-%d %H:%M}"


class IdleInterval(models.Model):
    """A stretch of time a GPU sat idle: held by a team but unused, or held by nobody."""

    gpu = models.ForeignKey("fleet.Gpu", on_delete=models.CASCADE, related_name="idle_intervals")
    kind = models.CharField(max_length=16, choices=IdleKind.choices)
    team = models.ForeignKey(
        "teams.Team", null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    reservation = models.ForeignKey(
        "reservations.Reservation",
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="idle_intervals",
    )
    start = models.DateTimeField()
    end = models.DateTimeField()

    class Meta:
        ordering = ["-end"]
        indexes = [
            models.Index(fields=["gpu", "kind", "end"], name="idle_gpu_kind_end_idx"),
            models.Index(fields=["end", "start"], name="idle_time_idx"),
        ]
        constraints = [
            models.CheckConstraint(
                condition=models.Q(end__gte=models.F("start")),
                name="idle_end_not_before_start",
                violation_error_message="An idle interval cannot end before it starts.",
            )
        ]

    def __str__(self) -> str:
        return f"{self.kind} gpu {self.gpu_id} {format_span(self.start, self.end)}"


class IdleHourRollup(models.Model):
    """Idle intervals pre-summed per (hour, kind, team, GPU model): their time inside each hour,
    in microseconds (exact sums). The idle dashboard sums these for the whole hours of its
    window instead of clipping a month of intervals to its steps.

    Rewritten for the hour the minutely idle update extends the intervals in, in the same
    transaction (`idle.idle_intervals_update`, `idle.idle_hours_rollup`), so the two never
    disagree."""

    bucket = models.DateTimeField(help_text="Start of the hour.")
    kind = models.CharField(max_length=16, choices=IdleKind.choices)
    team = models.ForeignKey(
        "teams.Team",
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
        help_text="The intervals' team; empty: unallocated (or a team since deleted).",
    )
    gpu_model = models.ForeignKey("fleet.GpuModel", on_delete=models.CASCADE, related_name="+")
    idle_us = models.PositiveBigIntegerField(help_text="Idle GPU-time in the hour, microseconds.")

    class Meta:
        indexes = [models.Index(fields=["bucket"], name="idlehour_bucket_idx")]

    def __str__(self) -> str:
        team = self.team_id or "unallocated"
        return f"{self.kind} team {team} model {self.gpu_model_id} @ {self.bucket:%Y-%m-%d %H:%M}"


class IdleWarning(models.Model):
    """A held-idle booking whose team was warned; released if still idle after the grace."""

    reservation = models.OneToOneField(
        "reservations.Reservation", on_delete=models.CASCADE, related_name="idle_warning"
    )
    warned_at = models.DateTimeField()
    reason = models.CharField(max_length=200)

    def __str__(self) -> str:
        return f"idle warning for reservation {self.reservation_id}"


class TelemetryDeadLetter(models.Model):
    """A telemetry message that could not be stored (malformed, or refused by the database),
    kept for admins to inspect instead of blocking the queue. Counted as `malformed`."""

    received_at = models.DateTimeField(auto_now_add=True, db_index=True)
    node = models.CharField(max_length=253, blank=True, help_text="As the message named it.")
    reason = models.CharField(max_length=200)
    error = models.TextField(blank=True)
    payload = models.TextField(help_text="The message as received (cut at 64 KiB).")
    # SHA-256 of the whole message as received: a message delivered again (a drain that died
    # after parking it) is recognised and parked once.
    digest = models.CharField(max_length=64, blank=True, editable=False)

    class Meta:
        ordering = ["-received_at"]
        constraints = [
            models.UniqueConstraint(
                fields=["digest"],
                condition=~models.Q(digest=""),
                name="telemetrydeadletter_unique_digest",
                violation_error_message="This message is already parked as a dead letter.",
            )
        ]

    def __str__(self) -> str:
        return f"{self.node or '?'}: {self.reason}"


class LateSampleRange(models.Model):
    """Samples stored after the minutely rollup had passed their time (an agent flushing its
    buffer after a broker outage). The next rollup run recomputes these minutes and hours."""

    start = models.DateTimeField()
    end = models.DateTimeField()
    noted_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            models.CheckConstraint(
                condition=models.Q(end__gt=models.F("start")),
                name="latesamplerange_end_after_start",
                violation_error_message="A late sample range must end after it starts.",
            )
        ]

    def __str__(self) -> str:
        return format_span(self.start, self.end)
