from datetime import timedelta

import pytest
from django.test import Client
from django.utils import timezone

from apps.jobs.models import Job

pytestmark = pytest.mark.django_db


def home(user) -> str:
    client = Client()
    client.force_login(user)
    response = client.get("/")
    assert response.status_code == 200
    return response.content.decode()


def test_member_home_shows_quota_bookings_jobs_and_spend(member, quotas, history):
    html = home(member)
    assert 'data-testid="home-team-vision"' in html
    assert "H100-SXM-80GB: 4 guaranteed, up to 12" in html
    assert "2 × H100-SXM-80GB" in html
    assert "0 running, 0 queued" in html
    assert 'href="/billing/cost/?team=vision"' in html
    assert "home-team-nlp" not in html  # not their team
    assert "home-quota-pressure" not in html and "home-finance" not in html


def test_member_home_counts_queued_jobs(member, team, quotas, h100):
    Job.objects.create(
        team=team,
        submitted_by=member,
        name="train",
        argv=["python", "train.py"],
        gpu_model=h100,
        gpu_count=4,
        max_runtime_seconds=3600,
        submitted_at=timezone.now() - timedelta(minutes=5),
    )
    assert "0 running, 1 queued" in home(member)


def test_finance_home_links_cost_and_exports(finance_user):
    html = home(finance_user)
    assert 'data-testid="home-finance"' in html
    assert 'href="/billing/cost/"' in html and 'href="/billing/"' in html


def test_platform_admin_home_shows_idle_and_quota_pressure(platform_admin, quotas, history):
    html = home(platform_admin)
    assert "1 busy, <strong>2 held but idle</strong>, 17 unallocated" in html
    assert 'data-testid="home-quota-pressure"' in html
    assert "<td>vision</td><td>H100-SXM-80GB</td><td>2</td><td>0</td><td>4</td><td>12</td>" in html


def test_home_spend_has_thousands_separators_and_the_currency(member, finance_user, team):
    from decimal import Decimal

    from apps.billing.services import adjustment_create

    adjustment_create(actor=finance_user, team=team, amount=Decimal("1234.5"), reason="support")
    assert 'data-testid="home-spend">1,234.50 USD</strong>' in home(member)


def test_home_booking_times_name_their_zone(member, team, fleet):
    from apps.fleet.models import Gpu
    from tests.dashboards.conftest import book

    start = (timezone.now() + timedelta(days=1)).replace(hour=9, minute=0, second=0, microsecond=0)
    book(team, member, list(Gpu.objects.order_by("pk")[:1]), start, start + timedelta(hours=3))
    html = home(member)
    text = f"{start:%b} {start.day}, {start.year}, 09:00 UTC"
    assert f'<time datetime="{start.isoformat()}" data-style="datetime">{text}</time>' in html


def test_home_spend_is_the_statements_running_total_cents(member, team, other_team):
    """Exports round the month's lines on one running total (teams by slug), so a team's
    charge can differ by a cent from its own exact total rounded. The home page, the
    forecast and the budget check show the statement's figure, not the other one."""
    from datetime import UTC, datetime, time
    from decimal import Decimal

    from apps.billing.choices import ChargeSource
    from apps.billing.forecast import forecast
    from apps.billing.models import BillingPeriod, LedgerEntry
    from apps.billing.periods import month_start
    from apps.billing.selectors import teams_spend
    from apps.billing.statements import team_statements

    now = timezone.now()
    period = BillingPeriod.objects.get_or_create(month=month_start(now))[0]
    moment = datetime.combine(month_start(now), time(), tzinfo=UTC)
    for index, charged in enumerate((other_team, team)):  # nlp is exported before vision
        LedgerEntry.objects.create(
            period=period, team=charged, source=ChargeSource.JOB, source_id=index + 1,
            slice_start=moment, slice_end=moment + timedelta(minutes=1), gpu_seconds=60,
            gpu_cost=Decimal("0.004"), cost=Decimal("0.004"),
        )  # fmt: skip
    statement = {s.team.slug: s.total for s in team_statements(period)}
    # 0.004 alone rounds to 0.00; after nlp's 0.004 the running total reaches 0.01.
    assert statement == {"nlp": Decimal("0.00"), "vision": Decimal("0.01")}
    assert 'data-testid="home-spend">0.01 USD</strong>' in home(member)
    assert forecast(team=team, period=period, now=now).spent == Decimal("0.01")
    assert teams_spend(team_ids=[team.pk, other_team.pk], period=period) == Decimal("0.01")


def test_unit_admin_home_shows_their_units_teams_and_spend(team, other_team, platform_admin):
    """A unit admin in no team sees their unit, the teams below it and the unit's spend (the
    sum of the teams' charges), not "you are not in any team yet"; an unrelated unit's
    teams stay off their page."""
    from datetime import UTC, datetime, time
    from decimal import Decimal

    from apps.billing.choices import ChargeSource
    from apps.billing.models import BillingPeriod, LedgerEntry
    from apps.billing.periods import month_start
    from apps.teams.models import ROOT_UNIT_SLUG, OrgUnit
    from apps.teams.services import team_move, unit_admin_add, unit_create
    from tests.factories import TeamFactory, UserFactory

    root = OrgUnit.objects.get(slug=ROOT_UNIT_SLUG)
    research = unit_create(slug="research", name="Research", parent=root, actor=platform_admin)
    unit_create(slug="ops", name="Operations", parent=root, actor=platform_admin)
    for moved in (team, other_team):
        team_move(team=moved, unit=research, actor=platform_admin)
    outside = TeamFactory(slug="robotics")
    rita = UserFactory(username="rita")
    unit_admin_add(unit=research, user=rita, actor=platform_admin)
    now = timezone.now()
    period = BillingPeriod.objects.get_or_create(month=month_start(now))[0]
    moment = datetime.combine(month_start(now), time(), tzinfo=UTC)
    for index, (charged, cost) in enumerate(
        ((team, "10.004"), (other_team, "5.004"), (outside, "99.00"))
    ):
        LedgerEntry.objects.create(
            period=period, team=charged, source=ChargeSource.JOB, source_id=index + 1,
            slice_start=moment, slice_end=moment + timedelta(minutes=1), gpu_seconds=60,
            gpu_cost=Decimal(cost), cost=Decimal(cost),
        )  # fmt: skip
    html = home(rita)
    card = html.split('data-testid="home-unit-research"', 1)[1].split("</section>", 1)[0]
    assert "Organisation / Research" in card
    assert f">{other_team.name}</a>, <a" in card and f">{team.name}</a></p>" in card
    # nlp 5.00 (5.004 rounded), then vision 10.01 (15.008 rounded less 5.00): 15.01 together.
    assert 'data-testid="home-unit-spend">15.01 USD</strong>' in card
    assert "robotics" not in html and "home-unit-ops" not in html
    assert "You are not in any team yet" not in html
    assert 'href="/teams/units/research/"' in html
