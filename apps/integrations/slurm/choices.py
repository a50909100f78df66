from django.db import models


class SlurmJobState(models.TextChoices):
    """Slurm's job states (`squeue %T`, `sacct State`) that the portal acts on."""

    PENDING = "PENDING"
    CONFIGURING = "CONFIGURING"
    RUNNING = "RUNNING"
    COMPLETING = "COMPLETING"
    SUSPENDED = "SUSPENDED"
    REQUEUED = "REQUEUED"
    RESIZING = "RESIZING"
    COMPLETED = "COMPLETED"
    FAILED = "FAILED"
    CANCELLED = "CANCELLED"
    TIMEOUT = "TIMEOUT"
    NODE_FAIL = "NODE_FAIL"
    OUT_OF_MEMORY = "OUT_OF_MEMORY"
    BOOT_FAIL = "BOOT_FAIL"
    DEADLINE = "DEADLINE"
    PREEMPTED = "PREEMPTED"
    UNKNOWN = "UNKNOWN"


WAITING_STATES = {SlurmJobState.PENDING, SlurmJobState.REQUEUED}
RUNNING_STATES = {
    SlurmJobState.CONFIGURING,
    SlurmJobState.RUNNING,
    SlurmJobState.COMPLETING,
    SlurmJobState.SUSPENDED,
    SlurmJobState.RESIZING,
}
FAILED_STATES = {
    SlurmJobState.FAILED,
    SlurmJobState.TIMEOUT,
    SlurmJobState.NODE_FAIL,
    SlurmJobState.OUT_OF_MEMORY,
    SlurmJobState.BOOT_FAIL,
    SlurmJobState.DEADLINE,
    SlurmJobState.PREEMPTED,
}
FINISHED_STATES = {SlurmJobState.COMPLETED, SlurmJobState.CANCELLED, *FAILED_STATES}


def job_state(text: str) -> SlurmJobState:
    """Slurm's state word (`CANCELLED by 0` -> CANCELLED); unknown words are UNKNOWN."""
    word = (text or "").split()[0].rstrip("+") if text else ""
    try:
        return SlurmJobState(word)
    except ValueError:
        return SlurmJobState.UNKNOWN


# Why a job waits, as Slurm says it (`squeue %r`), in the portal's words.
PENDING_REASONS = {
    "None": "Slurm has not looked at the job yet.",
    "Resources": "Waiting for GPUs: not enough are free for the job right now.",
    "Priority": "Waiting behind jobs with a higher priority (fair share) for the same GPUs.",
    "Dependency": "Waiting for another job it depends on.",
    "BeginTime": "Waiting for its earliest start time.",
    "Reservation": "Waiting for its booking to start.",
    "ReqNodeNotAvail": "The nodes it needs are unavailable (down, drained or reserved).",
    "PartitionDown": "The partition for its GPU model is down.",
    "PartitionNodeLimit": "It asks for more nodes than the partition allows.",
    "PartitionTimeLimit": "Its maximum runtime is longer than the partition allows.",
    "JobHeldUser": "Held by its owner.",
    "JobHeldAdmin": "Held by a cluster administrator.",
    "AssocGrpGRES": "The team is at its GPU limit for this model; it starts when the team's "
    "other jobs finish.",
    "AssocGrpGRESMinutes": "The team has used up its GPU-minutes allowance.",
    "AssocGrpTRES": "The team is at its limit; it starts when the team's other jobs finish.",
    "AssocMaxJobsLimit": "The team runs as many jobs as it may at once.",
    "AssocGrpJobsLimit": "The team runs as many jobs as it may at once.",
    "QOSGrpGRES": "The quality of service is at its GPU limit; it starts when other jobs finish.",
    "QOSGrpTRES": "The quality of service is at its limit; it starts when other jobs finish.",
    "QOSMaxGRESPerUser": "You run as many GPUs as one user may at once.",
    "InvalidAccount": "The team has no Slurm account; ask a platform admin to sync quotas.",
    "InvalidQOS": "The job's quality of service is not allowed for the team.",
    "NodeDown": "A node it needs is down.",
    "BadConstraints": "No node can ever satisfy the job's request.",
}


def pending_message(reason: str) -> str:
    """The portal's sentence for Slurm's pending reason (Slurm's own word if we have none)."""
    if reason in PENDING_REASONS:
        return PENDING_REASONS[reason]
    return f"Waiting in Slurm ({reason})." if reason else "Waiting in Slurm."
