"""Beat's weekly digest; a thin wrapper around the service."""

from celery import shared_task

from apps.efficiency import services


@shared_task(name="efficiency.weekly_digest", acks_late=True, time_limit=600, soft_time_limit=590)
def weekly_digest() -> dict:
    return services.weekly_digest_send()
