from celery import shared_task

from apps.reservations import lifecycle


@shared_task(name="reservations.lifecycle_tick", time_limit=55, soft_time_limit=50)
def lifecycle_tick() -> dict[str, int]:
    """Beat, every minute: start, finish and remind bookings. Idempotent."""
    return lifecycle.reservation_lifecycle_tick()
