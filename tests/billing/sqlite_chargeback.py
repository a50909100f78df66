"""The chargeback on SQLite (the demo's database), run as a script by the test suite:
`python -m tests.billing.sqlite_chargeback` with DATABASE_URL pointing at a fresh file.

Seeds the demo and reports, per month, how far each export format and level is from the page
(it must be nowhere) and the demo's busy hours and energy; then does the same for random months
drawn by hypothesis; and fetches every download of the demo's latest month over HTTP
(tests.downloads). Prints one JSON line."""

import json
import os


def main() -> None:
    import django

    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")
    django.setup()
    from django.core.management import call_command
    from django.db import connection, transaction
    from hypothesis import given, settings
    from hypothesis import strategies as st

    from apps.billing.models import BillingPeriod
    from tests.billing import reconcile

    call_command("migrate", verbosity=0)
    call_command("seed_demo", stdout=open(os.devnull, "w"))  # noqa: SIM115
    from django.test import Client

    from apps.teams.models import User

    admin = Client(HTTP_HOST="localhost")
    admin.force_login(User.objects.get(username="admin"))
    demo = {}
    for period in BillingPeriod.objects.order_by("month"):
        page = reconcile.page_totals(period)
        demo[f"{period.month:%Y-%m}"] = {
            "page": {team: str(cost) for team, cost in page.items()},
            "drift": reconcile.drift(period),
            "components": reconcile.component_violations(period),
            "parts": reconcile.part_drift(period, admin),
            "members": reconcile.member_drift(period),
            "usage": demo_usage(period),
        }

    downloads = demo_downloads()
    team_page = admin.get("/teams/nlp/")
    pages = {
        "team": {
            "status": team_page.status_code,
            "member_costs": 'data-testid="member-costs-total"' in team_page.content.decode(),
        }
    }
    random_months = []

    @settings(max_examples=int(os.environ.get("RANDOM_MONTHS", "12")), deadline=None, database=None)
    @given(st.integers(min_value=0, max_value=2**31))
    def random_month(seed):
        with transaction.atomic():
            period = reconcile.build_random_month(seed)
            random_months.append(
                {
                    "seed": seed,
                    "teams": len(reconcile.page_totals(period)),
                    "drift": reconcile.drift(period),
                    "components": reconcile.component_violations(period),
                    "parts": reconcile.part_drift(period),
                    "members": reconcile.member_drift(period),
                }
            )
            transaction.set_rollback(True)

    random_month()
    print(
        json.dumps(
            {
                "vendor": connection.vendor,
                "demo": demo,
                "downloads": downloads,
                "pages": pages,
                "random": random_months,
            }
        )
    )


def demo_downloads() -> dict:
    """Every download of the demo's latest month, as its platform admin gets them."""
    from django.test import Client

    from apps.billing.models import BillingPeriod
    from apps.teams.models import Team, User
    from tests.downloads import every_download

    client = Client(HTTP_HOST="localhost", raise_request_exception=False)
    client.force_login(User.objects.get(username="admin"))
    latest = BillingPeriod.objects.order_by("-month").first()
    teams = sorted(Team.objects.values_list("slug", flat=True))
    return every_download(client, month=f"{latest.month:%Y-%m}", teams=teams)


def demo_usage(period) -> dict:
    """Per team: busy GPU-hours, energy (kWh) and held-idle share of the GPU-hours."""
    from django.db.models import Sum

    from apps.billing import exports
    from apps.billing.models import LedgerEntry

    energy = dict(
        LedgerEntry.objects.filter(period=period)
        .values_list("team__slug")
        .annotate(kwh=Sum("energy_kwh"))
        .values_list("team__slug", "kwh")
    )
    return {
        row["sub_account"]: {
            "busy_gpu_hours": str(row["busy_gpu_hours"]),
            "gpu_hours": str(row["gpu_hours"]),
            "held_idle_gpu_hours": str(row["held_idle_gpu_hours"]),
            "energy_kwh": str(energy.get(row["team__slug"]) or 0),
        }
        for row in exports.team_totals(period)
    }


if __name__ == "__main__":
    main()
