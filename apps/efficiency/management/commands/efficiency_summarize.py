from datetime import timedelta

from django.core.management.base import BaseCommand
from django.utils import timezone

from apps.efficiency.services import allocation_summaries_update


class Command(BaseCommand):
    help = (
        "Sum and store the efficiency of jobs and bookings that ended in the last DAYS days "
        "(beat does the last hours every 10 minutes; this fills the past, e.g. after an upgrade)."
    )

    def add_arguments(self, parser):
        parser.add_argument("--days", type=int, default=90)

    def handle(self, *args, days: int, **options):
        done = allocation_summaries_update(since=timezone.now() - timedelta(days=days))
        self.stdout.write(f"Summed {done['jobs']:,} jobs and {done['bookings']:,} bookings.")
