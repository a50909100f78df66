"""Beat's weekly digest; a thin wrapper around the service."""

from datetime import date

from celery import shared_task

from apps.efficiency import services


@shared_task(name="efficiency.weekly_digest", acks_late=True, time_limit=600, soft_time_limit=590)
def weekly_digest(week_of: str | None = None) -> dict:
    """Beat sends it on Mondays for the week before; `week_of` (an ISO date) reports the week
    of that day instead (sending again a week a team missed)."""
    day = date.fromisoformat(week_of) if week_of else None
    return services.weekly_digest_send(week_of=day)


@shared_task(name="efficiency.summarize", acks_late=True, time_limit=600, soft_time_limit=590)
def summarize() -> dict:
    return services.allocation_summaries_update()
