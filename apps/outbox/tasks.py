"""Beat sends what the outbox holds; thin wrappers around the services."""

from celery import shared_task

from apps.outbox import services


@shared_task(name="outbox.flush", time_limit=60, soft_time_limit=55)
def flush() -> dict:
    return services.outbox_flush()


@shared_task(name="outbox.prune")
def prune() -> int:
    return services.outbox_prune()
