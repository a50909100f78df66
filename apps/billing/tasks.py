from celery import shared_task

from apps.billing.metering import meter_hourly
from apps.billing.models import BillingPeriod
from apps.billing.services import budget_alerts_check_all


@shared_task(name="billing.meter", acks_late=True)
def meter() -> dict:
    """Charge the hours that just ended and correct the hours late telemetry touched
    (`metering.meter_hourly`: incremental, never the whole month; idempotent), then check
    budget thresholds."""
    result = meter_hourly()
    alerts = budget_alerts_check_all(periods=BillingPeriod.objects.filter(pk__in=result.periods))
    return {
        "inserted": result.inserted,
        "corrected": result.corrected,
        "skipped_closed": result.skipped_closed,
        "alerts": alerts,
    }
