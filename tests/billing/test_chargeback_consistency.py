"""Every export format and level equals the chargeback page to the cent, on PostgreSQL and on
SQLite (the demo's database), for the demo's months and for random months; and no component of
a line (held-idle, over-quota, energy cost) is ever negative or more than the line; and every
download of the demo (chargeback formats, statements, efficiency CSVs) comes whole on both."""

from decimal import Decimal

import pytest
from django.core.management import call_command
from django.db import transaction
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from apps.billing.exports import RunningRounder, cents
from apps.billing.models import BillingPeriod
from tests import downloads
from tests.billing import reconcile
from tests.billing.sqlite_chargeback import demo_downloads, demo_usage
from tests.sqlite_runner import run_on_sqlite

AMOUNTS = st.decimals(min_value=Decimal("-50"), max_value=Decimal("500"), places=10)


@given(
    st.lists(
        st.tuples(AMOUNTS, st.lists(st.floats(min_value=0, max_value=1), max_size=3)),
        min_size=1,
        max_size=60,
    )
)
def test_rounded_components_never_exceed_their_line(lines):
    rounder, exact_total = RunningRounder(), Decimal(0)
    rounded_total = Decimal(0)
    for amount, shares in lines:
        parts = {
            i: (amount * Decimal(share)).quantize(Decimal("1e-10")) if amount > 0 else Decimal(0)
            for i, share in enumerate(shares)
        }
        cost = rounder.take(amount, parts)
        for part in parts.values():
            assert Decimal(0) <= part <= max(cost, Decimal(0))
        exact_total += amount
        rounded_total += cost
    assert rounded_total == cents(exact_total)  # the parts do not disturb the running total


@given(
    st.lists(
        st.tuples(
            st.decimals(min_value=Decimal(0), max_value=Decimal("500"), places=10),
            st.floats(min_value=0, max_value=1),
            st.floats(min_value=0, max_value=1),
        ),
        min_size=1,
        max_size=60,
    )
)
def test_stacked_parts_fit_their_line_and_leave_a_busy_part(lines):
    """Held idle and energy, rounded side by side, never exceed the line together, so the busy
    part (the rest) is never negative; the running total stays exact."""
    rounder, exact_total, rounded_total = RunningRounder(), Decimal(0), Decimal(0)
    for amount, idle_share, energy_share in lines:
        idle = (amount * Decimal(idle_share)).quantize(Decimal("1e-10"))
        energy = ((amount - idle) * Decimal(energy_share)).quantize(Decimal("1e-10"))
        stacked = {"idle": idle, "energy": energy}
        cost = rounder.take_stacked(amount, stacked, {})
        assert stacked["idle"] >= 0 and stacked["energy"] >= 0
        assert stacked["idle"] + stacked["energy"] <= cost
        exact_total += amount
        rounded_total += cost
    assert rounded_total == cents(exact_total)


@pytest.mark.django_db
def test_demo_months_match_the_page_on_postgresql():
    call_command("seed_demo", stdout=open("/dev/null", "w"))  # noqa: SIM115
    periods = list(BillingPeriod.objects.all())
    assert periods
    for period in periods:
        assert reconcile.drift(period) == {}, period
        assert reconcile.component_violations(period) == [], period
        # Metered after its telemetry: booked teams were busy part of the time and used energy.
        usage = {t: u for t, u in demo_usage(period).items() if t != "platform"}
        assert usage, period
        for team, figures in usage.items():
            assert 0 < Decimal(figures["busy_gpu_hours"]) < Decimal(figures["gpu_hours"]), team
            assert Decimal(figures["energy_kwh"]) > 0, team
    report = demo_downloads()
    assert set(report) >= {"chargeback-xlsx", "statements-zip", "advice-csv", "jobs-nlp-csv"}
    assert downloads.problems(report) == []


@pytest.mark.django_db
@settings(
    max_examples=8, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(st.integers(min_value=0, max_value=2**31))
def test_random_months_match_the_page_on_postgresql(seed):
    with transaction.atomic():
        period = reconcile.build_random_month(seed)
        assert "platform" in reconcile.page_totals(period)
        assert reconcile.drift(period) == {}
        assert reconcile.component_violations(period) == []
        transaction.set_rollback(True)


@pytest.mark.slow
def test_demo_and_random_months_match_the_page_on_sqlite(tmp_path, monkeypatch):
    monkeypatch.setenv("RANDOM_MONTHS", "8")
    outcome = run_on_sqlite("tests.billing.sqlite_chargeback", tmp_path / "chargeback.sqlite3")
    assert outcome["vendor"] == "sqlite"
    assert outcome["demo"]
    for month, report in outcome["demo"].items():
        assert report["drift"] == {}, month
        assert report["components"] == [], month
        assert report["parts"] == {}, month  # every part agrees in all ten outputs
        assert report["members"] == {}, month  # cost by member adds up to each team's total
        # The demo's charges carry its telemetry: booked teams were busy and used energy.
        teams = {t: u for t, u in report["usage"].items() if t != "platform"}
        assert teams, month
        for team, usage in teams.items():
            assert Decimal(usage["busy_gpu_hours"]) > 0, (month, team)
            assert Decimal(usage["held_idle_gpu_hours"]) < Decimal(usage["gpu_hours"])
            assert Decimal(usage["energy_kwh"]) > 0, (month, team)
    assert set(outcome["downloads"]) >= {"chargeback-xlsx", "statements-zip", "jobs-nlp-csv"}
    assert downloads.problems(outcome["downloads"]) == []
    assert outcome["pages"]["team"] == {"status": 200, "member_costs": True}
    assert len(outcome["random"]) == 8
    for month in outcome["random"]:
        assert month["drift"] == {} and month["components"] == [], month["seed"]
        assert month["parts"] == {} and month["members"] == {}, month["seed"]


def _logged_in(user):
    from django.test import Client

    client = Client()
    client.force_login(user)
    return client


def _finance_client():
    from apps.teams.choices import GlobalRole
    from apps.teams.models import User

    return _logged_in(User.objects.filter(global_role=GlobalRole.FINANCE).first())


@pytest.mark.django_db
@settings(
    max_examples=6, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(st.integers(min_value=0, max_value=2**31))
def test_every_part_of_random_months_agrees_in_all_ten_outputs(seed):
    """Busy, held idle, over quota, energy and adjustments per team read the same on the page,
    in CSV and JSON (both levels), XLSX, FOCUS 1.2 and 1.3 and the statements (page and ZIP,
    as their HTML shows them); energy in kWh too, wherever a file carries it."""
    with transaction.atomic():
        period = reconcile.build_random_month(seed)
        outputs = reconcile.format_parts(period, _finance_client())
        assert set(outputs) == {
            "page", "csv-summary", "csv-detail", "json-summary", "json-detail", "xlsx",
            "focus-1.2", "focus-1.3", "statement", "statement-zip",
        }  # fmt: skip
        page = outputs["page"]
        assert any(parts["held_idle_cost"] > 0 for parts in page.values())
        assert any(parts["adjustment_cost"] < 0 for parts in page.values())  # the credit
        assert reconcile.part_drift(period, _finance_client()) == {}
        transaction.set_rollback(True)


@pytest.mark.django_db
def test_every_part_of_the_demo_months_agrees_in_all_ten_outputs():
    call_command("seed_demo", stdout=open("/dev/null", "w"))  # noqa: SIM115
    from apps.teams.models import User

    admin = _logged_in(User.objects.get(username="admin"))
    for period in BillingPeriod.objects.all():
        assert reconcile.part_drift(period, admin) == {}, period
        assert reconcile.member_drift(period) == {}, period
