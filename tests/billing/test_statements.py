"""Monthly team statements: who may read them, what they show (lines, idle and over-quota
shares, adjustments, budget, invoice id, a total equal to the exports), drafts, and the ZIP of
every team's statement for finance."""

import io
import re
import zipfile
from decimal import Decimal

import pytest
from django.test import override_settings

from apps.billing import statements
from apps.billing.models import Budget
from apps.billing.services import adjustment_create, period_close
from apps.teams.choices import TeamRole
from tests.billing import reconcile
from tests.billing.conftest import AFTER_NOV
from tests.factories import MembershipFactory, PlatformAdminFactory, UserFactory

pytestmark = pytest.mark.django_db

URL = "/billing/statements/2026-11/vision/"


@pytest.fixture
def closed_november(november, finance_user, team):
    adjustment_create(
        actor=finance_user, team=team, amount=Decimal("-1.25"), reason="Outage credit",
        period=november, now=AFTER_NOV,
    )  # fmt: skip
    Budget.objects.create(team=team, period=november, amount=Decimal("100"))
    period_close(actor=finance_user, period=november, now=AFTER_NOV)
    november.refresh_from_db()
    return november


def page(client, user, url=URL):
    client.force_login(user)
    return client.get(url)


def test_a_closed_months_statement_shows_lines_shares_budget_and_the_exports_total(
    client, closed_november, finance_user
):
    response = page(client, finance_user)
    assert response.status_code == 200
    html = response.content.decode()
    assert 'data-testid="invoice-id">GPU-2026-11-vision<' in html
    assert "DRAFT" not in html
    assert "H100-SXM-80GB" in html and "Reservation" in html
    assert "Outage credit" in html and "-1.25 USD" in html
    assert 'data-testid="statement-total">13.75 USD<' in html  # 6 h x 2.50 - 1.25
    # no telemetry: the whole booking was held idle
    assert 'data-testid="idle-share">15.00 USD<' in html
    assert "100.00 USD (13.8 % used, 86.25 USD left)" in html
    page_total = reconcile.page_totals(closed_november)["vision"]
    assert page_total == Decimal("13.75")


def test_team_admins_read_their_teams_statement_others_are_refused(
    client, closed_november, team_admin, member, outsider
):
    assert page(client, team_admin).status_code == 200
    assert page(client, member).status_code == 403  # their team, but not its admin
    assert page(client, outsider).status_code == 404  # not their team: it does not exist
    nlp_admin = UserFactory(username="nick")
    nlp = outsider.memberships.get().team
    MembershipFactory(user=nlp_admin, team=nlp, role=TeamRole.TEAM_ADMIN)
    assert page(client, nlp_admin).status_code == 404
    assert page(client, PlatformAdminFactory(username="pat")).status_code == 200


@pytest.mark.parametrize(
    "url",
    [
        "/billing/statements/2026-13/vision/",
        "/billing/statements/nov/vision/",
        "/billing/statements/2999-01/vision/",
        "/billing/statements/2026-11/no-such-team/",
    ],
)
def test_bad_months_and_unknown_teams_are_404(client, closed_november, finance_user, url):
    assert page(client, finance_user, url).status_code == 404


def test_an_open_months_statement_says_it_is_a_draft(client, november, team_admin):
    html = page(client, team_admin).content.decode()
    assert 'data-testid="statement-draft"' in html and "This is not an invoice" in html
    assert 'data-testid="invoice-id">DRAFT-GPU-2026-11-vision<' in html
    assert 'data-testid="statement-total">15.00 USD<' in html


def test_a_month_without_charges_has_an_empty_statement(client, finance_user, team):
    html = page(client, finance_user, "/billing/statements/2026-10/vision/").content.decode()
    assert "No GPU use was charged to vision in 2026-10." in html
    assert 'data-testid="statement-total">0.00 USD<' in html


def test_finance_downloads_every_teams_statement_as_one_zip(client, finance_user):
    period = reconcile.build_random_month(7)
    client.force_login(finance_user)
    response = client.get("/billing/statements/2026-09.zip")
    assert response.status_code == 200
    assert response["Content-Type"] == "application/zip"
    assert 'filename="statements-2026-09-draft.zip"' in response["Content-Disposition"]
    archive = zipfile.ZipFile(io.BytesIO(b"".join(response.streaming_content)))
    page_totals = reconcile.page_totals(period)
    teams = sorted(t for t in page_totals if t != "platform")
    assert sorted(archive.namelist()) == [f"statement-2026-09-{t}-draft.html" for t in teams]
    for slug in teams:
        html = archive.read(f"statement-2026-09-{slug}-draft.html").decode()
        total = re.search(r'data-testid="statement-total">([-\d,.]+) USD<', html).group(1)
        assert Decimal(total.replace(",", "")) == page_totals[slug], slug
        assert "<style>" in html and "DRAFT" in html  # a file that prints on its own


def test_only_finance_and_platform_admins_download_the_zip(client, november, team_admin, member):
    for user in (team_admin, member):
        assert page(client, user, "/billing/statements/2026-11.zip").status_code == 403
    admin = PlatformAdminFactory(username="pat")
    assert page(client, admin, "/billing/statements/2026-11.zip").status_code == 200


def test_statement_totals_equal_every_export_and_lines_sum_to_them(finance_user):
    period = reconcile.build_random_month(11)
    page_totals = reconcile.page_totals(period)
    built = statements.team_statements(period)
    assert {s.team.slug: s.total for s in built} == {
        t: c for t, c in page_totals.items() if t != "platform"
    }
    for statement in built:
        # the statement's parts add up, and one team's statement equals its share of the lot
        assert statement.total == statement.usage_total + statement.adjustments_total
        alone = statements.team_statement(period, statement.team)
        assert alone.total == statement.total
        assert [(x.gpu_model, x.source, x.cost) for x in alone.lines] == [
            (x.gpu_model, x.source, x.cost) for x in statement.lines
        ]
        assert statement.held_idle_cost <= statement.usage_total
    assert reconcile.drift(period) == {}


@override_settings(BILLING_MODE="showback")
def test_showback_portals_issue_no_statements(client, november, finance_user):
    assert page(client, finance_user).status_code == 404
    assert page(client, finance_user, "/billing/statements/2026-11.zip").status_code == 404


def test_chargeback_and_budgets_pages_link_the_statements(
    client, november, finance_user, team_admin
):
    html = page(client, finance_user, "/billing/?period=2026-11").content.decode()
    assert URL in html and "/billing/statements/2026-11.zip" in html
    assert "/billing/statements/2026-11/platform/" not in html
    html = page(client, team_admin, "/billing/budgets/?period=2026-11").content.decode()
    assert URL in html
