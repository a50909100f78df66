"""Thin Celery tasks of the power policy (rules in services)."""

from celery import shared_task

from apps.power import services


@shared_task(name="power.policy_cycle", time_limit=55, soft_time_limit=50)
def policy_cycle() -> dict:
    """Every minute: settle transitions, wake for demand, power idle nodes down."""
    return services.power_policy_cycle()


@shared_task(
    name="power.apply_request",
    acks_late=True,
    time_limit=300,
    soft_time_limit=280,
)
def apply_request(node_id: int, operation: str) -> str:
    """Ask the node's driver for the power change fleet recorded (idempotent)."""
    return services.power_apply_request(node_id=node_id, operation=operation)
