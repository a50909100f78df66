"""The cost dashboard by organisation unit: `unit=<slug>` keeps the teams below it, `group=unit`
sums them per child unit, and each unit's figures are its teams' to the cent."""

from datetime import timedelta
from decimal import Decimal

import pytest

from apps.billing.figures import cost_figures
from apps.billing.metering import meter_interval
from apps.billing.models import BillingPeriod, Budget
from apps.fleet.models import Gpu
from apps.reservations.choices import ReservationStatus
from apps.teams.selectors import unit_scope
from tests.billing.conftest import AFTER_NOV, DEC, NOV
from tests.conftest import client_for
from tests.factories import make_booking
from tests.teams.departments import build_departments

pytestmark = pytest.mark.django_db


@pytest.fixture
def org_november(platform_admin, h100, l40s, rates):
    """Research (nlp; lab: cv) and ops (sre) each book in November, for odd minutes so the
    line costs round; one of cv's GPUs is over quota. November metered."""
    org = build_departments(platform_admin, h100)
    h100s = list(Gpu.objects.filter(model=h100).order_by("node__hostname", "index"))
    l40 = Gpu.objects.filter(model=l40s).order_by("index").first()
    day = NOV + timedelta(days=4)
    plan = [
        ("nlp", "ra", h100s[:2], timedelta(hours=3, minutes=7), 0),
        ("cv", "cv-member", h100s[2:5], timedelta(hours=5, minutes=13), 1),
        ("sre", "sre-member", [l40], timedelta(hours=7, minutes=41), 0),
    ]
    for offset, (slug, user, gpus, length, over) in enumerate(plan):
        start = day + timedelta(days=offset, minutes=11)
        make_booking(org["teams"][slug], org["users"][user], gpus, start, start + length,
                     over_quota_gpus=over, status=ReservationStatus.COMPLETED)  # fmt: skip
    meter_interval(start=NOV, end=DEC, now=AFTER_NOV)
    return {**org, "period": BillingPeriod.objects.get(month=NOV.date())}


def _figures(user, period, **filters):
    scope = unit_scope(user=user, **filters)
    return cost_figures(
        period=period, teams=list(scope.teams), include_platform=False, now=AFTER_NOV,
        group_units=scope.group_units,
    )  # fmt: skip


def _by_name(rows) -> dict[str, dict]:
    return {row["name"]: row for row in rows}


def test_unit_rows_are_their_teams_to_the_cent(org_november):
    pa, period = org_november["users"]["pa"], org_november["period"]
    teams = _by_name(_figures(pa, period)["rows"])
    assert {"nlp", "cv", "sre"} == set(teams)
    assert all(row["cost"] % Decimal("0.01") == 0 and row["cost"] > 0 for row in teams.values())
    units = _by_name(_figures(pa, period, group="unit")["rows"])
    assert set(units) == {"Research", "Ops"}
    assert units["Research"]["teams"] == ["cv", "nlp"]
    for key in ("cost", "gpu_hours", "over_quota_cost"):
        assert units["Research"][key] == teams["nlp"][key] + teams["cv"][key], key
        assert units["Ops"][key] == teams["sre"][key], key
    assert units["Research"]["over_quota_cost"] > 0
    inside = _by_name(_figures(pa, period, unit_slug="research", group="unit")["rows"])
    assert set(inside) == {"Research", "Lab"}  # nlp directly in research, cv below it in lab
    assert inside["Research"]["cost"] == teams["nlp"]["cost"]
    assert inside["Lab"]["cost"] == teams["cv"]["cost"]


def test_month_bars_and_over_quota_are_summed_per_unit(org_november):
    pa, period = org_november["users"]["pa"], org_november["period"]
    teams = _by_name(_figures(pa, period)["rows"])
    by_team = _figures(pa, period)["figures"]["cost-by-month"]["data"]
    team_bars = {t["name"]: t["y"][-1] for t in by_team}
    figures = _figures(pa, period, group="unit")["figures"]
    bars = {t["name"]: t["y"][-1] for t in figures["cost-by-month"]["data"]}
    assert set(bars) == {"Research", "Ops"}
    # the month bars add the ledger's exact costs, as they do per team
    assert bars["Research"] == pytest.approx(team_bars["nlp"] + team_bars["cv"])
    assert bars["Ops"] == team_bars["sre"]
    over = {
        t["name"]: dict(zip(t["x"], t["y"], strict=True)) for t in figures["over-quota"]["data"]
    }
    assert over["over quota"]["Research"] == pytest.approx(float(teams["cv"]["over_quota_cost"]))
    assert figures["over-quota"]["layout"]["xaxis"]["title"]["text"] == "Unit"


def test_the_page_filters_and_groups_by_unit(client, finance_user, org_november):
    client.force_login(finance_user)
    teams = _by_name(_figures(finance_user, org_november["period"])["rows"])
    page = client.get("/billing/cost/?period=2026-11&group=unit").text
    assert '<tr data-row="Research" data-kind="unit">' in page
    research = teams["nlp"]["cost"] + teams["cv"]["cost"]
    assert f'<td data-testid="row-cost">{research:,.2f}</td>' in page
    assert 'data-row="platform"' in page  # finance sees the platform's idle capacity
    assert '<option value="unit" selected>' in page
    narrowed = client.get("/billing/cost/?period=2026-11&unit=research").text
    assert 'data-row="nlp"' in narrowed and 'data-row="cv"' in narrowed
    assert 'data-row="sre"' not in narrowed and 'data-row="platform"' not in narrowed
    total = teams["nlp"]["cost"] + teams["cv"]["cost"]
    assert f'data-testid="cost-total">{total:,.2f}' in narrowed


def test_a_unit_admin_sums_only_the_teams_they_see(client, org_november):
    la = org_november["users"]["la"]  # admin of lab (cv) only
    teams = _by_name(_figures(org_november["users"]["pa"], org_november["period"])["rows"])
    client.force_login(la)
    page = client.get("/billing/cost/?period=2026-11&group=unit").text
    # cv sits below research; nlp (also below research) is not la's to see
    assert f'<td data-testid="row-cost">{teams["cv"]["cost"]:,.2f}</td>' in page
    assert 'data-row="Ops"' not in page and 'data-row="platform"' not in page
    assert client.get("/billing/cost/?period=2026-11&unit=research").status_code == 404
    assert client.get("/billing/cost/?period=2026-11&unit=lab").status_code == 200


def test_bad_filters_get_an_answer_not_an_error(client, finance_user, org_november):
    client.force_login(finance_user)
    refused = client.get("/billing/cost/?period=2026-11&group=dept")
    assert refused.status_code == 200
    assert "group must be team or unit. Showing the cost by team instead." in refused.text
    assert 'data-row="nlp"' in refused.text
    assert client.get("/billing/cost/?period=2026-11&unit=nowhere").status_code == 404


def test_the_burn_down_draws_a_unit_against_its_budget_only_when_all_its_teams_show(
    org_november,
):
    pa, la, period = (
        org_november["users"]["pa"],
        org_november["users"]["la"],
        org_november["period"],
    )
    Budget.objects.create(
        unit=org_november["units"]["research"], period=period, amount=Decimal(400)
    )
    by_team = {t["name"]: t["y"] for t in _figures(pa, period)["figures"]["burn-down"]["data"]}
    burn = _figures(pa, period, group="unit")["figures"]["burn-down"]["data"]
    traces = {t["name"]: t["y"] for t in burn}
    assert {"Research spent", "Ops spent"} <= set(traces)
    research = by_team["nlp spent"][-1] + by_team["cv spent"][-1]
    assert traces["Research spent"][-1] == pytest.approx(research)
    assert traces["Research spent, % of budget"][-1] == pytest.approx(research / 400 * 100)
    assert "Ops spent, % of budget" not in traces  # ops has no budget
    # la sees cv only: Research's line is cv's spend, and research's budget is not drawn
    partial = _figures(la, period, group="unit")["figures"]["burn-down"]["data"]
    assert [t["name"] for t in partial] == ["Research spent"]
    assert partial[0]["y"][-1] == pytest.approx(by_team["cv spent"][-1])


def test_the_usage_api_filters_and_groups_by_unit(finance_user, org_november):
    client = client_for(finance_user)
    teams = {
        row["team"]: row for row in client.get("/api/v1/usage/?period=2026-11").json()["teams"]
    }
    body = client.get("/api/v1/usage/?period=2026-11&group=unit").json()
    assert body["group"] == "unit"
    units = {row["unit"]: row for row in body["units"]}
    assert set(units) == {"research", "ops"}
    assert units["research"]["name"] == "Research" and units["research"]["teams"] == ["cv", "nlp"]
    for key in ("cost", "over_quota_cost", "held_idle_cost", "gpu_hours", "busy_gpu_hours"):
        assert Decimal(units["research"][key]) == Decimal(teams["nlp"][key]) + Decimal(
            teams["cv"][key]
        ), key
    assert units["ops"]["cost"] == teams["sre"]["cost"]
    narrowed = client.get("/api/v1/usage/?period=2026-11&unit=research").json()
    assert [row["team"] for row in narrowed["teams"]] == ["cv", "nlp"]  # no platform, no sre
    assert "units" not in narrowed
    refused = client.get("/api/v1/usage/?period=2026-11&group=dept")
    assert refused.status_code == 400 and refused.json()["code"] == "bad_filter"
    assert client.get("/api/v1/usage/?period=2026-11&unit=nowhere").status_code == 404
    la = client_for(org_november["users"]["la"])
    assert la.get("/api/v1/usage/?period=2026-11&unit=research").status_code == 404
    (lab,) = la.get("/api/v1/usage/?period=2026-11&group=unit").json()["units"]
    assert (lab["unit"], lab["teams"], lab["cost"]) == ("research", ["cv"], teams["cv"]["cost"])
