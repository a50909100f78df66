"""Re-meter a whole month: the full path for repairs (the hourly run is incremental and only
corrects the hours late telemetry touched). Idempotent; a closed month is left as it is."""

from datetime import datetime

from django.core.management.base import BaseCommand, CommandError

from apps.billing.metering import meter_interval
from apps.billing.periods import month_bounds


class Command(BaseCommand):
    help = "Charge and correct every complete hour of one month (YYYY-MM) from the rollups."

    def add_arguments(self, parser):
        parser.add_argument("month", help="the month to re-meter, as YYYY-MM")

    def handle(self, *args, month: str, **options):
        try:
            first_day = datetime.strptime(month, "%Y-%m").date()
        except ValueError as error:
            raise CommandError(f"{month!r} is not a month: write it as YYYY-MM.") from error
        start, end = month_bounds(first_day)
        result = meter_interval(start=start, end=end)
        self.stdout.write(
            f"{month}: {result.inserted} rows charged, {result.corrected} corrected, "
            f"{result.skipped_closed} slices of a closed month left as they were"
        )
