from datetime import UTC, datetime, time, timedelta

from celery import shared_task
from django.conf import settings
from django.utils import timezone

from apps.billing.metering import floor_hour, meter_interval
from apps.billing.models import BillingPeriod
from apps.billing.periods import month_start
from apps.billing.services import budget_alerts_check_all


@shared_task(name="billing.meter", acks_late=True)
def meter() -> dict:
    """Charge the last complete hours (idempotent) and correct the month so far for telemetry
    that arrived late, then check budget thresholds."""
    end = floor_hour(timezone.now())
    # From the start of the month: late telemetry of any of its hours is corrected.
    start = datetime.combine(
        month_start(end - timedelta(hours=settings.BILLING_METER_LOOKBACK_HOURS)), time(), UTC
    )
    result = meter_interval(start=start, end=end)
    alerts = budget_alerts_check_all(periods=BillingPeriod.objects.filter(pk__in=result.periods))
    return {
        "inserted": result.inserted,
        "corrected": result.corrected,
        "skipped_closed": result.skipped_closed,
        "alerts": alerts,
    }
