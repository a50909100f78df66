"""Cost by member inside a team (the team page and a CSV) reconciles to the team's total on the
chargeback page to the cent; the chargeback page compares each team with the month before."""

import csv
import io
import random
import re
from datetime import timedelta
from decimal import Decimal

import pytest
from django.db import transaction
from django.db.models import Sum
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from apps.billing.member_costs import ADJUSTMENTS_ROW, TOTAL_ROW, team_member_costs
from apps.billing.metering import meter_interval
from apps.billing.models import LedgerEntry
from apps.billing.services import adjustment_create
from apps.fleet.models import Gpu
from apps.jobs.models import JobAllocation
from apps.reservations.models import Reservation
from tests.billing import reconcile
from tests.billing.conftest import AFTER_NOV, DEC, NOV
from tests.billing.test_job_metering import job
from tests.billing.test_metering import book
from tests.factories import MembershipFactory, UserFactory

pytestmark = pytest.mark.django_db
OCT = NOV - timedelta(days=31)


@pytest.fixture
def carol(team):
    return MembershipFactory(team=team, user=UserFactory(username="carol")).user


@pytest.fixture
def members_month(team, other_team, member, team_admin, carol, outsider, finance_user, rates):
    """November: alice books 2 H100 for 5 h (25.00), tara 1 H100 over quota for 3 h 20 min
    (2.50 x 1.5 = 12.50), carol runs a job outside bookings on an L40S for 90 min (1.35);
    finance credits vision 3.33. nlp (olga) books 1 H100 for 2 h (5.00)."""
    h100 = list(Gpu.objects.filter(model__name__startswith="H100").order_by("pk"))
    l40s = Gpu.objects.filter(model__name__startswith="L40S").first()
    start = NOV + timedelta(days=6, hours=9)
    book(team, member, h100[:2], start, start + timedelta(hours=5))
    book(
        team, team_admin, h100[2:3], start, start + timedelta(hours=3, minutes=20), over_quota=True
    )
    work = job(team, carol, submitted_at=start)
    JobAllocation.objects.create(
        job=work, gpu=l40s, attempt=1, start=start, end=start + timedelta(minutes=90)
    )
    book(other_team, outsider, h100[3:4], start, start + timedelta(hours=2))
    meter_interval(start=NOV, end=DEC, now=AFTER_NOV)
    period = LedgerEntry.objects.first().period
    adjustment_create(
        actor=finance_user, team=team, amount=Decimal("-3.33"), reason="node 2 was down",
        period=period, corrects_period=period, now=AFTER_NOV,
    )  # fmt: skip
    return period


def test_members_and_adjustments_add_up_to_the_team_total(members_month, team, other_team):
    costs = team_member_costs(members_month, team)
    assert {m.username: m.cost for m in costs.members} == {
        "alice": Decimal("25.00"), "tara": Decimal("12.50"), "carol": Decimal("1.35"),
    }  # fmt: skip
    assert [m.username for m in costs.members] == ["alice", "tara", "carol"]  # largest first
    assert costs.adjustments == Decimal("-3.33")
    page = reconcile.page_totals(members_month)
    assert costs.total == page["vision"] == Decimal("35.52")
    tara = next(m for m in costs.members if m.username == "tara")
    assert tara.parts["over_quota_cost"] == Decimal("12.50")
    assert tara.gpu_hours == Decimal("3.333333")
    assert team_member_costs(members_month, other_team).total == page["nlp"] == Decimal("5.00")


@pytest.mark.django_db
@settings(
    max_examples=5, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(st.integers(min_value=0, max_value=2**31))
def test_random_months_split_by_member_reconcile_to_the_cent(seed):
    with transaction.atomic():
        period = reconcile.build_random_month(seed)
        rng = random.Random(seed)
        users = [UserFactory(username=f"u{seed}-{i}") for i in range(3)]
        for reservation in Reservation.objects.filter(team__slug__startswith=f"team-{seed}-"):
            reservation.created_by = rng.choice(users)
            reservation.save(update_fields=["created_by"])
        page = reconcile.page_totals(period)
        for team_row in reconcile.page_totals(period):
            if team_row == "platform":
                continue
            team = Reservation.objects.filter(team__slug=team_row).first().team
            costs = team_member_costs(period, team)
            assert costs.total == page[team_row]
            for member in costs.members:  # each member within a cent per line of the exact sum
                mine = Reservation.objects.filter(team=team, created_by_id=member.user_id)
                entries = LedgerEntry.objects.filter(
                    period=period, source="reservation", source_id__in=mine.values("pk")
                )
                exact = entries.aggregate(t=Sum("cost"))["t"]
                assert abs(member.cost - exact) <= Decimal("0.01") * entries.count()
        transaction.set_rollback(True)


def member_csv(client, month: str, slug: str):
    return client.get(f"/billing/members/{month}/{slug}.csv")


def test_team_admins_and_finance_download_the_members_csv(
    client, members_month, team, team_admin, finance_user
):
    for user in (team_admin, finance_user):
        client.force_login(user)
        response = member_csv(client, "2026-11", team.slug)
        assert response.status_code == 200
        assert 'filename="member-costs-2026-11-vision-draft.csv"' in response["Content-Disposition"]
        rows = list(csv.DictReader(io.StringIO(response.content.decode())))
        by_member = {r["member"]: Decimal(r["cost"]) for r in rows}
        assert by_member[ADJUSTMENTS_ROW] == Decimal("-3.33")
        assert by_member[TOTAL_ROW] == reconcile.page_totals(members_month)["vision"]
        members = [r for r in rows if not r["member"].startswith("(")]
        assert sum(Decimal(r["cost"]) for r in members) - Decimal("3.33") == by_member[TOTAL_ROW]
        assert {r["team"] for r in rows} == {"vision"} and {r["draft"] for r in rows} == {"true"}


def test_the_members_csv_refuses_members_outsiders_and_bad_months(
    client, members_month, team, member, outsider, team_admin
):
    client.force_login(member)
    assert member_csv(client, "2026-11", team.slug).status_code == 403
    client.force_login(outsider)
    assert member_csv(client, "2026-11", team.slug).status_code == 404
    client.force_login(team_admin)
    response = member_csv(client, "2026-13", team.slug)
    assert response.status_code == 400 and b"YYYY-MM" in response.content


def _amounts(html: str, testid: str) -> list[Decimal]:
    found = re.findall(rf'data-testid="{testid}">(-?[\d,]+\.\d+)', html)
    return [Decimal(value.replace(",", "")) for value in found]


def test_the_team_page_shows_cost_by_member_to_its_admin(
    client, members_month, team, team_admin, member
):
    client.force_login(team_admin)
    html = client.get("/teams/vision/?cost_period=2026-11").content.decode()
    assert 'data-testid="member-costs"' in html
    members = _amounts(html, "member-cost")
    assert members == [Decimal("25.00"), Decimal("12.50"), Decimal("1.35")]
    (adjustments,) = _amounts(html, "member-costs-adjustments")
    (total,) = _amounts(html, "member-costs-total")
    assert sum(members) + adjustments == total == reconcile.page_totals(members_month)["vision"]
    assert "/billing/members/2026-11/vision.csv" in html
    # A plain member sees their own row only: no teammates, no team total, no CSV.
    client.force_login(member)
    html = client.get("/teams/vision/?cost_period=2026-11").content.decode()
    assert _amounts(html, "member-cost") == [Decimal("25.00")]
    assert 'data-member-cost="tara"' not in html and "member-costs-total" not in html
    assert "members/2026-11/vision.csv" not in html


def test_a_bad_month_on_the_team_page_falls_back_with_a_message(client, members_month, team_admin):
    client.force_login(team_admin)
    html = client.get("/teams/vision/?cost_period=2026-99").content.decode()
    assert 'data-testid="member-costs-error"' in html and "YYYY-MM" in html


def test_the_chargeback_page_compares_with_the_month_before(
    client, members_month, team, other_team, member, outsider, finance_user, rates
):
    """October: vision 4 h on one H100 (10.00); nlp was not charged; a third team was charged
    in October only. November (above): vision 35.52, nlp 5.00."""
    from tests.factories import TeamFactory

    h100 = Gpu.objects.filter(model__name__startswith="H100").order_by("pk")
    start = OCT + timedelta(days=3, hours=8)
    book(team, member, [h100[0]], start, start + timedelta(hours=4))
    gone = TeamFactory(slug="audio")
    book(gone, outsider, [h100[1]], start, start + timedelta(hours=1))
    meter_interval(start=start, end=start + timedelta(hours=4), now=AFTER_NOV)
    client.force_login(finance_user)
    html = client.get("/billing/?period=2026-11").content.decode()
    rows = {
        slug: body for slug, body in re.findall(r'<tr data-team="([^"]+)">(.*?)</tr>', html, re.S)
    }
    assert '<th scope="col">2026-10 (USD)</th>' in html
    assert _amounts(rows["vision"], "previous-cost") == [Decimal("10.00")]
    assert _amounts(rows["vision"], "change") == [Decimal("25.52")]
    assert 'data-testid="change-percent">255.2 %' in rows["vision"]
    assert 'data-testid="previous-cost">—' in rows["nlp"]
    assert 'data-testid="change-percent">new' in rows["nlp"]
    assert _amounts(rows["audio"], "team-cost") == [Decimal("0.00")]
    assert 'data-testid="change-percent">-100.0 %' in rows["audio"]
    page = reconcile.page_totals(members_month)
    (grand,) = _amounts(html, "grand-total")
    (grand_previous,) = _amounts(html, "grand-previous")
    assert grand == sum(page.values())
    october = LedgerEntry.objects.filter(period__month=OCT.date()).aggregate(t=Sum("cost"))["t"]
    assert grand_previous == october.quantize(Decimal("0.01"))
    assert _amounts(html, "grand-change") == [grand - grand_previous]
