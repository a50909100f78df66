"""Money rolls up by organisation unit: exports, FOCUS rows and statements carry the unit path
and its cost centre; the chargeback by unit reconciles to the sum of its teams to the cent;
unit admins read their units' subtrees and nothing outside."""

import csv
import io
import json
from datetime import datetime, timedelta
from decimal import Decimal

import pytest
from openpyxl import load_workbook

from apps.billing import exports, focus, statements
from apps.billing import units as units_module
from apps.billing.models import BillingPeriod, LedgerEntry
from apps.fleet.models import Gpu
from apps.teams.models import OrgUnit, UnitMembership
from tests.conftest import client_for
from tests.factories import MembershipFactory, TeamFactory, UserFactory

pytestmark = pytest.mark.django_db

# Each team's GPU-hours: one line per hour, each a third of a cent off (they round).
THIRDS = {"vision": 5, "nlp": 4, "cv": 7, "infra": 2}
LINE_COST = Decimal("0.3333")


@pytest.fixture
def org(fleet):
    """organisation (ORG-1) > research (R-100) > vision, nlp and research > lab > cv;
    organisation > ops (no cost centre of its own) > infra."""
    from datetime import UTC

    root = OrgUnit.objects.get_or_create(slug="organisation", defaults={"name": "Organisation"})[0]
    OrgUnit.objects.filter(pk=root.pk).update(cost_center="ORG-1")
    research = OrgUnit.objects.create(
        slug="research", name="Research", parent=root, cost_center="R-100"
    )
    lab = OrgUnit.objects.create(slug="lab", name="Lab", parent=research, cost_center="L-7")
    ops = OrgUnit.objects.create(slug="ops", name="Ops", parent=root)
    homes = {"vision": research, "nlp": research, "cv": lab, "infra": ops}
    teams = {slug: TeamFactory(slug=slug, unit=unit) for slug, unit in homes.items()}
    period = BillingPeriod.objects.create(month=datetime(2026, 10, 1).date())
    gpu = Gpu.objects.order_by("pk").first()
    start = datetime(2026, 10, 5, tzinfo=UTC)
    for n, (slug, hours) in enumerate(THIRDS.items()):
        for hour in range(hours):
            slice_start = start + timedelta(hours=hour)
            LedgerEntry.objects.create(
                period=period, team=teams[slug], source="reservation", source_id=100 + n,
                gpu=gpu, gpu_model=gpu.model, slice_start=slice_start,
                slice_end=slice_start + timedelta(hours=1), gpu_seconds=3600,
                busy_seconds=3600, unit_price=LINE_COST, gpu_cost=LINE_COST, cost=LINE_COST,
            )  # fmt: skip
    return {"period": period, "teams": teams, "research": research, "lab": lab, "ops": ops}


def _csv(user, **params):
    response = client_for(user).get("/api/v1/chargeback/", {"period": "2026-10", **params})
    assert response.status_code == 200, response.content
    body = b"".join(response.streaming_content) if response.streaming else response.content
    return response, body


def test_unit_totals_reconcile_to_their_teams_to_the_cent(org, finance_user):
    team_cost = {row["sub_account"]: row["cost"] for row in exports.team_totals(org["period"])}
    # Each team's lines round to its exact total: 5 x 0.3333 = 1.6665 -> 1.67 and so on.
    assert team_cost == {
        "vision": Decimal("1.67"), "nlp": Decimal("1.33"), "cv": Decimal("2.33"),
        "infra": Decimal("0.67"),
    }  # fmt: skip
    # The by-unit page's one GROUP BY gives each team exactly what its export lines add up to.
    assert {r["sub_account"]: r["cost"] for r in units_module.team_cost_totals(org["period"])} == (
        team_cost
    )
    body = client_for(finance_user).get("/api/v1/chargeback/units/?period=2026-10").json()
    units = {row["unit"]: row for row in body["units"]}
    assert [row["unit"] for row in body["units"]] == [
        "organisation", "ops", "research", "lab",
    ]  # fmt: skip
    # research: 1.67 + 1.33 + 2.33 = 5.33, whereas 16 x 0.3333 = 5.3328 would round to 5.33 too
    # only by chance; the rule is the sum of the teams' rounded totals.
    assert units["research"]["cost"] == "5.33" and units["research"]["charged_teams"] == 3
    assert units["lab"]["cost"] == "2.33" and units["ops"]["cost"] == "0.67"
    assert units["organisation"]["cost"] == "6.00"  # 18 x 0.3333 = 5.9994 exact
    assert units["research"]["gpu_hours"] == "16.0000" or Decimal(
        units["research"]["gpu_hours"]
    ) == Decimal(16)
    assert [t["team"] for t in units["research"]["teams"]] == ["nlp", "vision"]
    # The exports agree: the CSV lines of the teams below a unit sum to the unit's total.
    _, body = _csv(finance_user, format="csv")
    rows = list(csv.DictReader(io.StringIO(body.decode())))
    below_research = [r for r in rows if r["unit_path"].startswith("organisation/research")]
    assert sum(Decimal(r["cost"]) for r in below_research) == Decimal("5.33")


def test_csv_and_xlsx_carry_the_unit_path_and_cost_center(org, finance_user):
    _, body = _csv(finance_user, format="csv", level="detail")
    rows = list(csv.DictReader(io.StringIO(body.decode())))
    by_team = {r["team"]: r for r in rows}
    assert (by_team["vision"]["unit_path"], by_team["vision"]["unit_cost_center"]) == (
        "organisation/research", "R-100",
    )  # fmt: skip
    assert by_team["cv"]["unit_path"] == "organisation/research/lab"
    assert by_team["cv"]["unit_cost_center"] == "L-7"
    # ops has no cost centre of its own: the nearest one up the path is charged.
    assert by_team["infra"]["unit_cost_center"] == "ORG-1"
    response = client_for(finance_user).get(
        "/api/v1/chargeback/", {"period": "2026-10", "format": "xlsx"}
    )
    body = b"".join(response.streaming_content) if response.streaming else response.content
    sheet = load_workbook(io.BytesIO(body), read_only=True)["Detail"]
    header, *lines = [list(r) for r in sheet.iter_rows(values_only=True)]
    unit_col = header.index("unit_path")
    assert header[unit_col + 1] == "unit_cost_center"
    assert {line[unit_col] for line in lines if line[header.index("team")] == "nlp"} == {
        "organisation/research"
    }


def test_focus_rows_tag_the_unit_and_carry_x_unit_path(org):
    rows = list(focus.focus_rows(exports.ExportScope(org["period"], None, exports.DETAIL)))
    vision = [r for r in rows if r["SubAccountId"] == "vision"]
    assert vision and all(r["x_UnitPath"] == "organisation/research" for r in vision)
    tags = json.loads(vision[0]["Tags"])
    assert tags["unit"] == "organisation/research" and tags["unit_cost_center"] == "R-100"
    assert "x_UnitPath" in focus.focus_columns()


def test_statements_name_the_unit(org, finance_user, client):
    statement = statements.team_statement(org["period"], org["teams"]["cv"])
    assert statement.unit["unit_label"] == "Organisation / Research / Lab"
    client.force_login(finance_user)
    page = client.get("/billing/statements/2026-10/cv/").content.decode()
    assert "Organisation / Research / Lab" in page and "L-7" in page


def test_unit_admins_read_their_subtree_and_nothing_outside(org, client):
    admin = UserFactory(username="rhea")
    UnitMembership.objects.create(user=admin, unit=org["research"])
    body = client_for(admin).get("/api/v1/chargeback/units/?period=2026-10").json()
    assert [row["unit"] for row in body["units"]] == ["research", "lab"]
    usage = client_for(admin).get("/api/v1/usage/?period=2026-10").json()["teams"]
    assert sorted(row["team"] for row in usage) == ["cv", "nlp", "vision"]
    client.force_login(admin)
    page = client.get("/billing/units/?period=2026-10").content.decode()
    assert 'data-unit="lab"' in page and 'data-team="infra"' not in page
    assert 'data-unit="ops"' not in page
    # A plain member administers no unit: refused, nothing shown.
    member = MembershipFactory(team=org["teams"]["vision"], user=UserFactory()).user
    assert client_for(member).get("/api/v1/chargeback/units/").status_code == 403
    client.force_login(member)
    assert client.get("/billing/units/").status_code == 403
    # The per-line exports stay with finance and platform admins.
    assert client_for(admin).get("/api/v1/chargeback/?period=2026-10").status_code == 403
