"""Demo data, written in one place: `manage.py seed_demo` (run by `make demo`) calls
`seed_demo`, and tests that need part of it call the parts.

The order matters: people and fleet, then bookings, then the telemetry those bookings caused,
then the jobs in the gaps between bookings (their hours rewritten), then the charges: metering
reads busy hours and energy from that telemetry, and charges jobs from their allocations.
Safe to run again: it converges, and the history is written only into an empty database.
"""

from datetime import timedelta

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from apps.dashboards.demo.billing import meter_billing_demo, seed_billing_demo, seed_billing_history
from apps.dashboards.demo.departments import seed_departments
from apps.dashboards.demo.fleet import HISTORY_DAYS, seed_bookings, seed_people_and_fleet
from apps.dashboards.demo.jobs import seed_demo_jobs
from apps.dashboards.demo.telemetry import seed_dashboard_history
from apps.fleet.models import Gpu, Node
from apps.teams.models import OrgUnit, Team, User


@transaction.atomic
def seed_demo(*, with_bookings: bool = True) -> str:
    """Seed the demo's teams, users, quotas and simulated fleet; with bookings, also the sample
    bookings and HISTORY_DAYS of telemetry, jobs and charges. Returns a one-line summary."""
    now = timezone.now()
    history_start = (now - timedelta(days=HISTORY_DAYS)).replace(minute=0, second=0, microsecond=0)
    teams, models = seed_people_and_fleet(history_start=history_start)
    seed_departments(teams=teams, models=models, password=settings.DEMO_PASSWORD)
    if with_bookings:
        seed_bookings(teams, models)
        seed_billing_history(start=history_start, now=now)
        seed_dashboard_history(now=now, days=HISTORY_DAYS)
        seed_demo_jobs(start=history_start, now=now)
        meter_billing_demo(start=history_start, now=now)
    return (
        f"Seeded {OrgUnit.objects.count()} units, {Team.objects.count()} teams, "
        f"{User.objects.count()} users, "
        f"{Node.objects.count()} nodes, {Gpu.objects.count()} GPUs."
    )


__all__ = [
    "HISTORY_DAYS",
    "seed_billing_demo",
    "seed_billing_history",
    "seed_dashboard_history",
    "seed_demo",
]
