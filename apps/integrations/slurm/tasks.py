"""Thin Celery tasks of the Slurm integration (beat: settings SLURM_POLL_SECONDS and slurm.sync)."""

from celery import shared_task

from apps.integrations.slurm import services


@shared_task(name="slurm.poll", acks_late=False, time_limit=120, soft_time_limit=100)
def poll() -> dict:
    """Follow the states of the portal's jobs in Slurm. Bounded (SLURM_POLL_BATCH jobs per
    run) and idempotent; a lost run is the next one's work, hence not acked late."""
    return services.jobs_poll()


@shared_task(name="slurm.sync", time_limit=600, soft_time_limit=540)
def sync() -> dict:
    """Correct drift: quotas to GrpTRES/Fairshare, stale portal reservations and orphaned portal
    jobs removed from Slurm, sacct records imported."""
    return {
        "quotas": services.quotas_sync(),
        "reservations": services.reservations_reconcile(),
        "orphan_jobs": services.jobs_reconcile(),
        "accounting": services.accounting_import(),
    }


@shared_task(name="slurm.nodes", acks_late=False, time_limit=120, soft_time_limit=100)
def nodes() -> dict:
    """Follow Slurm's node states (one sinfo per run) into the fleet; idempotent, and a lost
    run is the next one's work."""
    return services.nodes_sync()
