"""Create the demo's teams, users and simulated fleet. Safe to run again: it converges."""

from django.core.management.base import BaseCommand

from apps.dashboards.demo import seed_demo


class Command(BaseCommand):
    help = "Seed demo teams, users (password DEMO_PASSWORD), quotas and a simulated 28-GPU fleet."

    def add_arguments(self, parser):
        parser.add_argument(
            "--without-reservations",
            action="store_true",
            help="Seed no sample bookings (tests that need an empty calendar).",
        )

    def handle(self, *args, **options):
        summary = seed_demo(with_bookings=not options["without_reservations"])
        self.stdout.write(self.style.SUCCESS(summary))
