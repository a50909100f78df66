"""FinOps FOCUS exports: 1.3 against the column list of the 1.3 specification, 1.2 in the FinOps
Foundation's own validator, both versions through the API, and the 1.3 split-cost allocation of
each GPU-day (ratios add up to 1, shares add up to the line, the platform's share unallocated)."""

import csv
import io
import json
import os
import re
from collections import defaultdict
from datetime import timedelta
from decimal import Decimal, InvalidOperation

import pytest
from django.core.management import call_command
from django.utils import timezone

from apps.billing import exports, focus
from apps.billing.choices import RecoveryMethod
from apps.billing.models import BillingPeriod
from apps.billing.periods import month_start
from apps.billing.services import cost_recovery_set, period_close
from apps.teams.models import Team, User
from tests.billing import focus_validator, reconcile
from tests.conftest import client_for

pytestmark = pytest.mark.django_db

# ---- The FOCUS 1.3 column list -------------------------------------------------------------
# FinOps Open Cost and Usage Specification (FOCUS) version 1.3, ratified December 2025: the
# Cost and Usage dataset's columns (FinOps-Open-Cost-and-Usage-Spec/FOCUS_Spec,
# specification/datasets/cost_and_usage/columns/*.md), each with its data type, feature level
# and whether it allows nulls ("Content Constraints"), and the allowed values where the spec
# lists them. ProviderName and PublisherName are deprecated in 1.3 (replaced by
# ServiceProviderName) but still present.
DECIMAL, STRING, DATETIME, JSON_OBJECT = "Decimal", "String", "Date/Time", "JSON"
MANDATORY, RECOMMENDED, CONDITIONAL = "Mandatory", "Recommended", "Conditional"

CHARGE_CATEGORIES = {"Usage", "Purchase", "Tax", "Credit", "Adjustment"}
SERVICE_CATEGORIES = {
    "AI and Machine Learning", "Analytics", "Business Applications", "Compute", "Databases",
    "Developer Tools", "Multicloud", "Identity", "Integration", "Internet of Things",
    "Management and Governance", "Media", "Migration", "Mobile", "Networking", "Security",
    "Storage", "Web", "Other",
}  # fmt: skip
# The spec's subcategories whose parent is "AI and Machine Learning" (the category we export).
AI_SUBCATEGORIES = {
    "AI Platforms", "Bots", "Generative AI", "Machine Learning", "Natural Language Processing",
    "Other (AI and Machine Learning)",
}  # fmt: skip

FOCUS_1_3_SPEC = {
    # name: (data type, feature level, allows nulls, allowed values or None)
    "AllocatedMethodDetails": (JSON_OBJECT, RECOMMENDED, True, None),
    "AllocatedMethodId": (STRING, CONDITIONAL, True, None),
    "AllocatedResourceId": (STRING, CONDITIONAL, True, None),
    "AllocatedResourceName": (STRING, CONDITIONAL, True, None),
    "AllocatedTags": (JSON_OBJECT, CONDITIONAL, True, None),
    "AvailabilityZone": (STRING, RECOMMENDED, True, None),
    "BilledCost": (DECIMAL, MANDATORY, False, None),
    "BillingAccountId": (STRING, MANDATORY, False, None),
    "BillingAccountName": (STRING, MANDATORY, True, None),
    "BillingAccountType": (STRING, CONDITIONAL, False, None),
    "BillingCurrency": (STRING, MANDATORY, False, None),
    "BillingPeriodEnd": (DATETIME, MANDATORY, False, None),
    "BillingPeriodStart": (DATETIME, MANDATORY, False, None),
    "CapacityReservationId": (STRING, CONDITIONAL, True, None),
    "CapacityReservationStatus": (STRING, CONDITIONAL, True, {"Used", "Unused"}),
    "ChargeCategory": (STRING, MANDATORY, False, CHARGE_CATEGORIES),
    "ChargeClass": (STRING, MANDATORY, True, {"Correction"}),
    "ChargeDescription": (STRING, MANDATORY, True, None),
    "ChargeFrequency": (STRING, RECOMMENDED, False, {"One-Time", "Recurring", "Usage-Based"}),
    "ChargePeriodEnd": (DATETIME, MANDATORY, False, None),
    "ChargePeriodStart": (DATETIME, MANDATORY, False, None),
    "CommitmentDiscountCategory": (STRING, CONDITIONAL, True, {"Spend", "Usage"}),
    "CommitmentDiscountId": (STRING, CONDITIONAL, True, None),
    "CommitmentDiscountName": (STRING, CONDITIONAL, True, None),
    "CommitmentDiscountQuantity": (DECIMAL, CONDITIONAL, True, None),
    "CommitmentDiscountStatus": (STRING, CONDITIONAL, True, {"Used", "Unused"}),
    "CommitmentDiscountType": (STRING, CONDITIONAL, True, None),
    "CommitmentDiscountUnit": (STRING, CONDITIONAL, True, None),
    "ConsumedQuantity": (DECIMAL, CONDITIONAL, True, None),
    "ConsumedUnit": (STRING, CONDITIONAL, True, None),
    "ContractApplied": (JSON_OBJECT, CONDITIONAL, True, None),
    "ContractedCost": (DECIMAL, MANDATORY, False, None),
    "ContractedUnitPrice": (DECIMAL, CONDITIONAL, True, None),
    "EffectiveCost": (DECIMAL, MANDATORY, False, None),
    "HostProviderName": (STRING, MANDATORY, False, None),
    "InvoiceId": (STRING, RECOMMENDED, True, None),
    "InvoiceIssuerName": (STRING, MANDATORY, False, None),
    "ListCost": (DECIMAL, MANDATORY, False, None),
    "ListUnitPrice": (DECIMAL, CONDITIONAL, True, None),
    "PricingCategory": (STRING, CONDITIONAL, True, {"Standard", "Dynamic", "Committed", "Other"}),
    "PricingCurrency": (STRING, CONDITIONAL, True, None),
    "PricingCurrencyContractedUnitPrice": (DECIMAL, CONDITIONAL, True, None),
    "PricingCurrencyEffectiveCost": (DECIMAL, CONDITIONAL, True, None),
    "PricingCurrencyListUnitPrice": (DECIMAL, CONDITIONAL, True, None),
    "PricingQuantity": (DECIMAL, MANDATORY, True, None),
    "PricingUnit": (STRING, MANDATORY, True, None),
    "ProviderName": (STRING, MANDATORY, False, None),  # deprecated in 1.3
    "PublisherName": (STRING, MANDATORY, False, None),  # deprecated in 1.3
    "RegionId": (STRING, CONDITIONAL, True, None),
    "RegionName": (STRING, CONDITIONAL, True, None),
    "ResourceId": (STRING, CONDITIONAL, True, None),
    "ResourceName": (STRING, CONDITIONAL, True, None),
    "ResourceType": (STRING, CONDITIONAL, True, None),
    "ServiceCategory": (STRING, MANDATORY, False, SERVICE_CATEGORIES),
    "ServiceName": (STRING, MANDATORY, False, None),
    "ServiceProviderName": (STRING, MANDATORY, False, None),
    "ServiceSubcategory": (STRING, RECOMMENDED, False, AI_SUBCATEGORIES),
    "SkuId": (STRING, CONDITIONAL, True, None),
    "SkuMeter": (STRING, CONDITIONAL, True, None),
    "SkuPriceDetails": (JSON_OBJECT, CONDITIONAL, True, None),
    "SkuPriceId": (STRING, CONDITIONAL, True, None),
    "SubAccountId": (STRING, CONDITIONAL, True, None),
    "SubAccountName": (STRING, CONDITIONAL, True, None),
    "SubAccountType": (STRING, CONDITIONAL, True, None),
    "Tags": (JSON_OBJECT, CONDITIONAL, True, None),
}
DATETIME_FORMAT = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}Z$")
# Conditional and recommended columns we have data for, so they must be there.
EXPECTED_OPTIONAL = {
    "AllocatedMethodDetails", "AllocatedMethodId", "AllocatedResourceId",
    "AllocatedResourceName", "AllocatedTags", "BillingAccountType", "CapacityReservationId",
    "CapacityReservationStatus", "ChargeFrequency", "ConsumedQuantity", "ConsumedUnit",
    "ContractedUnitPrice", "InvoiceId", "ListUnitPrice", "PricingCategory", "ResourceId",
    "ResourceName", "ResourceType", "ServiceSubcategory", "SkuId", "SkuMeter", "SkuPriceId",
    "SubAccountId", "SubAccountName", "SubAccountType", "Tags",
}  # fmt: skip


def read_focus(period, version: str, team_id=None) -> list[dict]:
    scope = exports.ExportScope(period, team_id)
    text = "".join(
        exports.csv_chunks(focus.focus_columns(version), focus.focus_rows(scope, version))
    )
    return list(csv.DictReader(io.StringIO(text)))


def schema_violations(header: list[str], rows: list[dict]) -> list[str]:
    found = []
    for name in header:
        if name not in FOCUS_1_3_SPEC and not name.startswith("x_"):
            found.append(f"{name}: neither a FOCUS 1.3 column nor x_-prefixed")
    for name, (_, level, _, _) in FOCUS_1_3_SPEC.items():
        if (level == MANDATORY or name in EXPECTED_OPTIONAL) and name not in header:
            found.append(f"{name}: missing")
    for number, row in enumerate(rows, start=2):
        for name in header:
            if name in FOCUS_1_3_SPEC:
                problem = _value_problem(name, row[name])
                if problem:
                    found.append(f"line {number} {name}={row[name]!r}: {problem}")
    return found


def _value_problem(name: str, value: str) -> str | None:
    kind, _, nullable, allowed = FOCUS_1_3_SPEC[name]
    if value == "":
        return None if nullable else "null where the spec allows none"
    if allowed is not None and value not in allowed:
        return "not an allowed value"
    if kind == DECIMAL:
        try:
            Decimal(value)
        except InvalidOperation:
            return "not a decimal"
    if kind == DATETIME and not DATETIME_FORMAT.match(value):
        return "not an ISO 8601 UTC date/time"
    if kind == JSON_OBJECT and not isinstance(json.loads(value), dict):
        return "not a JSON object"
    return None


@pytest.fixture
def random_month():
    return reconcile.build_random_month(20261)


def test_focus_1_3_matches_the_column_list_of_the_spec(random_month):
    rows = read_focus(random_month, focus.FOCUS_1_3)
    header = focus.focus_columns(focus.FOCUS_1_3)
    assert rows
    assert schema_violations(header, rows) == []
    assert {r["ProviderName"] for r in rows} == {r["ServiceProviderName"] for r in rows}
    assert {r["ServiceCategory"] for r in rows} == {"AI and Machine Learning"}
    assert {r["ServiceSubcategory"] for r in rows} <= AI_SUBCATEGORIES  # a child of its parent


def test_the_schema_check_catches_a_bad_export(random_month):
    """The check above can fail: a null mandatory value, a wrong allowed value, a bad date and a
    column without the x_ prefix are each reported."""
    rows = read_focus(random_month, focus.FOCUS_1_3)[:1]
    rows[0] |= {"BilledCost": "", "ChargeCategory": "Refund", "ChargePeriodStart": "2026-09-01"}
    header = [*focus.focus_columns(focus.FOCUS_1_3), "GpuUuid"]
    rows[0]["GpuUuid"] = "x"
    problems = "\n".join(schema_violations(header, rows))
    assert "BilledCost" in problems and "Refund" in problems
    assert "ChargePeriodStart" in problems and "GpuUuid" in problems


def test_focus_1_2_has_no_1_3_columns_and_both_have_invoice_ids(random_month):
    header_12 = focus.focus_columns(focus.FOCUS_1_2)
    assert not {c for c in header_12 if c.startswith("Allocated")}
    assert "ServiceProviderName" not in header_12 and "HostProviderName" not in header_12
    for version in focus.FOCUS_VERSIONS:
        rows = read_focus(random_month, version)
        assert {r["InvoiceId"] for r in rows} == {
            f"DRAFT-GPU-2026-09-{r['SubAccountId']}" for r in rows
        }, version  # the month is open: provisional ids that say so
        assert {r["ServiceSubcategory"] for r in rows} == {"Machine Learning"}
        assert all(r["SkuMeter"] == "GPU time" for r in rows if r["SkuId"])


def test_closed_months_get_final_invoice_ids(random_month, finance_user):
    period_close(actor=finance_user, period=random_month, now=reconcile.AFTER_MONTH)
    random_month.refresh_from_db()
    rows = read_focus(random_month, focus.FOCUS_1_3)
    assert {r["InvoiceId"] for r in rows} == {f"GPU-2026-09-{r['SubAccountId']}" for r in rows}
    assert {r["x_Draft"] for r in rows} == {"false"}


def test_each_gpu_day_is_split_between_holders_idle_share_and_platform(random_month):
    rows = read_focus(random_month, focus.FOCUS_1_3)
    ratios: dict[tuple, Decimal] = defaultdict(Decimal)
    shares = set()
    for row in rows:
        if row["ChargeCategory"] == "Adjustment":
            assert row["AllocatedMethodId"] == "" and row["AllocatedResourceId"] == ""
            continue
        assert row["AllocatedMethodId"] == focus.ALLOCATION_METHOD
        details = json.loads(row["AllocatedMethodDetails"])
        share = details["x_Share"]
        shares.add(share)
        (element,) = details["Elements"]
        assert element["UsageUnit"] == "GPU-Hours"
        assert Decimal(str(element["UsageQuantity"])) == Decimal(row["ConsumedQuantity"])
        ratios[(row["ResourceId"], row["ChargePeriodStart"])] += Decimal(
            str(element["AllocatedRatio"])
        )
        tags = json.loads(row["AllocatedTags"])
        assert tags[f"{focus.TAG_PREFIX}share"] == share
        if share == focus.UNALLOCATED:
            # The spec: the unallocated portion of an origin charge has no AllocatedResourceId.
            assert row["SubAccountId"] == "platform" and row["AllocatedResourceId"] == ""
        else:
            assert row["AllocatedResourceId"] and row["AllocatedResourceName"]
            assert tags[f"{focus.TAG_PREFIX}team"] == row["SubAccountId"]
        reserved = share in (focus.BUSY, focus.HELD_IDLE)
        assert (row["CapacityReservationId"] != "") == reserved
        if reserved:
            expected = "Unused" if share == focus.HELD_IDLE else "Used"
            assert row["CapacityReservationStatus"] == expected
    assert {focus.BUSY, focus.HELD_IDLE, focus.UNALLOCATED} <= shares
    assert ratios and set(ratios.values()) == {Decimal(1)}  # every GPU-day adds up to exactly 1


def test_a_bookings_busy_and_idle_rows_add_up_to_its_1_2_line(random_month):
    old = read_focus(random_month, focus.FOCUS_1_2)
    new = read_focus(random_month, focus.FOCUS_1_3)

    def by_line(rows, column):
        sums = defaultdict(Decimal)
        for r in rows:
            key = (r["SubAccountId"], r["ResourceId"], r["ChargePeriodStart"], r["x_ReservationId"])
            sums[key + (r["x_JobId"], r["x_OverQuota"])] += Decimal(r[column] or 0)
        return dict(sums)

    assert len(new) > len(old)  # bookings held partly idle became two rows
    for column in SPLIT_COLUMNS:
        assert by_line(new, column) == by_line(old, column), column


SPLIT_COLUMNS = (
    "BilledCost", "EffectiveCost", "ContractedCost", "ListCost", "ConsumedQuantity",
    "PricingQuantity", "x_BusyGpuHours", "x_IdleGpuHours", "x_EnergyKwh", "x_EnergyCost",
    "x_BusyCost", "x_HeldIdleCost", "x_OverQuotaCost",
)  # fmt: skip


def test_split_rows_split_every_quantity_by_the_same_ratio(random_month):
    """A booking GPU-day's Used and Unused rows each carry their share of the energy (kWh and
    its cost), not the whole of it: the shares follow the GPU-time split and sum to the
    origin, so a team's kWh in 1.3 is the kWh of every other format."""
    old = {
        (r["ResourceId"], r["ChargePeriodStart"], r["x_ReservationId"]): r
        for r in read_focus(random_month, focus.FOCUS_1_2)
        if r["x_ReservationId"]
    }
    split = defaultdict(list)
    for row in read_focus(random_month, focus.FOCUS_1_3):
        if row["CapacityReservationStatus"]:
            split[(row["ResourceId"], row["ChargePeriodStart"], row["x_ReservationId"])].append(row)
    pairs = [rows for rows in split.values() if len(rows) == 2]
    assert any(Decimal(o["x_EnergyKwh"]) > 0 for rows in pairs for o in rows)
    for key, rows in split.items():
        origin = old[key]
        for column in SPLIT_COLUMNS:
            total = sum(Decimal(r[column] or 0) for r in rows)
            assert total == Decimal(origin[column] or 0), (key, column)
        if len(rows) < 2:
            continue
        unused = next(r for r in rows if r["CapacityReservationStatus"] == "Unused")
        origin_kwh = Decimal(origin["x_EnergyKwh"])
        share = Decimal(unused["ConsumedQuantity"]) / Decimal(origin["ConsumedQuantity"])
        assert abs(Decimal(unused["x_EnergyKwh"]) - origin_kwh * share) <= Decimal("0.00001")
        assert Decimal(unused["BilledCost"]) == Decimal(unused["x_HeldIdleCost"]) + Decimal(
            unused["x_EnergyCost"]
        )


def test_adjustments_are_labelled_in_focus(random_month):
    rows = [r for r in read_focus(random_month, focus.FOCUS_1_3) if r["x_LineType"] == "adjustment"]
    assert rows and all(r["ChargeCategory"] == "Adjustment" for r in rows)
    assert all(r["ChargeDescription"].startswith("Adjustment") for r in rows)


def test_team_filtered_focus_export_matches_the_full_one(random_month):
    """Costs and allocation ratios of one team's file are those of its rows in the full file."""
    full = read_focus(random_month, focus.FOCUS_1_3)
    teams = reconcile.page_totals(random_month)
    for slug in (t for t in teams if t != "platform"):
        only = read_focus(random_month, focus.FOCUS_1_3, Team.objects.get(slug=slug).pk)
        assert only == [r for r in full if r["SubAccountId"] == slug], slug
        assert sum(Decimal(r["BilledCost"]) for r in only) == teams[slug]


# ---- Through the API -------------------------------------------------------------------------


def download(user, query: str):
    response = client_for(user).get(f"/api/v1/chargeback/?period=2026-09&{query}")
    body = b"".join(response.streaming_content) if response.streaming else response.content
    return response, body


def test_the_api_exports_1_3_by_default_and_1_2_on_request(random_month, finance_user):
    response, body = download(finance_user, "format=focus")
    assert response.status_code == 200
    assert 'filename="chargeback-2026-09-draft-focus-1.3.csv"' in response["Content-Disposition"]
    assert body.decode().splitlines()[0].split(",") == focus.focus_columns(focus.FOCUS_1_3)
    response, body = download(finance_user, "format=focus&focus_version=1.2")
    assert response.status_code == 200 and "focus-1.2" in response["Content-Disposition"]
    assert body.decode().splitlines()[0].split(",") == focus.focus_columns(focus.FOCUS_1_2)


@pytest.mark.parametrize("version", ["1.4", "1", "latest", "1.3; DROP", "x" * 5000])
def test_an_unknown_focus_version_is_a_clear_400(random_month, finance_user, version):
    response, body = download(finance_user, f"format=focus&focus_version={version}")
    assert response.status_code == 400
    document = json.loads(body)
    assert document["code"] == "invalid_focus_version"
    assert "1.2" in document["message"] and "1.3" in document["message"]


def test_members_cannot_download_focus(random_month, member):
    response, _ = download(member, "format=focus")
    assert response.status_code == 403


# ---- The FinOps Foundation's validator --------------------------------------------------------

# focus-validator 2.2.1's model of FOCUS 1.2 (model-1.2.0.1.json) gives InvoiceId two nullability
# rules without a condition, joined by an OR (InvoiceId-C-003-C): C-004 "MUST be null" and C-005
# "MUST NOT be null". It also reports each of them on its own, so any file with an InvoiceId fails
# exactly one of them whatever its values (all null fails C-005). We fill InvoiceId (the spec
# recommends it, and the validator's own column-presence rule fails without it), so C-004 is the
# one left; the test requires the OR and C-005 to pass, and nothing else to fail.
VALIDATOR_MODEL_CONTRADICTION = {"InvoiceId-C-004-C"}


@pytest.mark.slow
@pytest.mark.parametrize("recovery", [RecoveryMethod.KEEP, RecoveryMethod.USAGE])
def test_a_closed_demo_month_passes_the_finops_foundation_validator(tmp_path, capsys, recovery):
    python = focus_validator.python_312()
    if python is None:
        if os.environ.get("CI"):
            pytest.fail("CI must run focus-validator, but no Python >= 3.12 was found.")
        pytest.skip("focus-validator needs Python >= 3.12: none on PATH or in pyenv")
    executable = focus_validator.ensure_validator(python)
    call_command("seed_demo", stdout=open(os.devnull, "w"))  # noqa: SIM115
    last_month = month_start(month_start(timezone.now()) - timedelta(days=1))
    period = BillingPeriod.objects.get(month=last_month)
    fran = User.objects.get(username="fran")
    # With the platform's cost shared to the teams, its split-cost rows must validate too.
    cost_recovery_set(actor=fran, period=period, method=recovery)
    period_close(actor=fran, period=period)
    period.refresh_from_db()
    data_file = tmp_path / "focus-1.2.csv"
    rows = focus.focus_rows(exports.ExportScope(period), focus.FOCUS_1_2)
    data_file.write_text("".join(exports.csv_chunks(focus.focus_columns(focus.FOCUS_1_2), rows)))
    assert ("platform-share" in data_file.read_text()) == (recovery != RecoveryMethod.KEEP)

    report = focus_validator.run_validator(executable, data_file, "1.2.0.1")

    with capsys.disabled():
        print(
            f"\nfocus-validator 1.2.0.1 on {period}, recovery {recovery} "
            f"({data_file.stat().st_size:,} bytes): "
            f"{report.total} rules, {report.passed} passed, {report.failed} failed, "
            f"{report.skipped} skipped; failed: {report.failed_rules}"
        )
    assert report.passed > 100
    assert report.failed == len(report.failed_rules)
    assert set(report.failed_rules) - VALIDATOR_MODEL_CONTRADICTION == set(), report.output[-4000:]
    for rule in ("InvoiceId-C-003-C", "InvoiceId-C-005-C", "CostAndUsage-D-033-O"):
        assert report.status_of(rule) == "PASS", rule  # InvoiceId present, filled, well-formed
    for rule in ("CostAndUsage-D-042-O", "ServiceSubcategory-C-000-O", "ServiceName-C-000-M"):
        assert report.status_of(rule) == "PASS", rule
