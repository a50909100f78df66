"""Cost recovery: a month's platform cost kept, or shared to teams by usage, guarantees or
evenly, to the cent (largest remainder), reconciling to the fleet's total; closed months final."""

from datetime import timedelta
from decimal import Decimal

import pytest
from hypothesis import given
from hypothesis import strategies as st

from apps.audit.models import AuditEvent
from apps.billing.choices import RecoveryMethod
from apps.billing.exports import team_totals
from apps.billing.metering import meter_interval
from apps.billing.models import CostRecoveryPolicy
from apps.billing.recovery import recovery, split_largest_remainder
from apps.billing.services import cost_recovery_set, period_close
from apps.reservations.choices import ReservationStatus
from apps.teams.models import Quota
from portal.exceptions import ConflictError, PolicyRefusal
from tests.billing.conftest import AFTER_NOV, DEC, NOV
from tests.factories import TeamFactory, make_booking

pytestmark = pytest.mark.django_db


def test_largest_remainder_gives_the_odd_cents_to_the_largest_remainders():
    assert split_largest_remainder(Decimal("100.00"), {1: 1, 2: 1, 3: 1}) == {
        1: Decimal("33.34"), 2: Decimal("33.33"), 3: Decimal("33.33")
    }  # fmt: skip
    assert split_largest_remainder(Decimal("0.05"), {1: 2, 2: 1, 3: 0}) == {
        1: Decimal("0.03"), 2: Decimal("0.02")
    }  # fmt: skip
    assert split_largest_remainder(Decimal("-10.00"), {1: 1, 2: 2}) == {
        1: Decimal("-3.33"), 2: Decimal("-6.67")
    }  # fmt: skip
    assert split_largest_remainder(Decimal("10.00"), {1: 0}) == {}


@given(
    cents=st.integers(min_value=-(10**9), max_value=10**9),
    weights=st.lists(st.integers(min_value=0, max_value=10**7), min_size=1, max_size=12),
)
def test_any_split_sums_to_the_amount_to_the_cent(cents, weights):
    amount = Decimal(cents) / 100
    parts = split_largest_remainder(amount, dict(enumerate(weights)))
    if sum(weights) and amount:
        assert sum(parts.values()) == amount
        assert all(abs(p - amount * w / sum(weights)) < Decimal("0.01") for p, w in
                   ((parts.get(k, Decimal(0)), w) for k, w in enumerate(weights)))  # fmt: skip
    else:
        assert parts == {}


@pytest.fixture
def month(team, other_team, member, outsider, fleet, rates, h100):
    """November: vision 6 h on one H100 (15.00), nlp 10 h on two (50.00), the rest of the
    fleet idle on the platform; vision guarantees 4 GPUs, nlp 8, robotics (active, unused) 2."""
    from apps.billing.models import BillingPeriod

    robotics = TeamFactory(slug="robotics")
    Quota.objects.create(team=team, gpu_model=h100, guaranteed=4, limit=12)
    Quota.objects.create(team=other_team, gpu_model=h100, guaranteed=8, limit=16)
    Quota.objects.create(team=robotics, gpu_model=None, guaranteed=2, limit=4)
    gpus = list(fleet[0].gpus.all())
    start = NOV + timedelta(days=4)
    make_booking(team, member, gpus[:1], start, start + timedelta(hours=6),
                 status=ReservationStatus.COMPLETED)  # fmt: skip
    make_booking(other_team, outsider, gpus[1:3], start, start + timedelta(hours=10),
                 status=ReservationStatus.COMPLETED)  # fmt: skip
    meter_interval(start=NOV, end=DEC, now=AFTER_NOV)
    return BillingPeriod.objects.get(month=NOV.date())


@pytest.mark.parametrize("method", RecoveryMethod.values)
def test_each_policy_shares_exactly_the_platform_cost_and_reconciles(
    month, method, finance_user, team, other_team
):
    cost_recovery_set(actor=finance_user, period=month, method=method)
    totals = team_totals(month)
    fleet_total = sum(row["cost"] for row in totals)
    split = recovery(month)
    assert split.platform_cost == next(r["cost"] for r in totals if r["team_id"] is None)
    assert split.platform_cost == Decimal("31327.00")  # (16 x 2.50 + 4 x 0.90) x 720 h - 65.00
    assert split.recovered + split.kept == split.platform_cost
    teams_after = sum(r["cost"] for r in totals if r["team_id"]) + split.recovered
    assert teams_after + split.kept == fleet_total
    if method == RecoveryMethod.KEEP:
        assert split.shares == {} and split.kept == split.platform_cost
        return
    assert split.kept == 0
    shares = split.shares
    if method == RecoveryMethod.USAGE:  # 6 vs 20 GPU-hours
        assert set(shares) == {team.pk, other_team.pk}
        assert shares[team.pk] == Decimal("7229.31")
        assert shares[other_team.pk] == Decimal("24097.69")
    elif method == RecoveryMethod.GUARANTEE:  # 4 : 8 : 2
        assert shares[other_team.pk] == 2 * shares[team.pk] == Decimal("17901.14")
        assert len(shares) == 3
    else:
        assert sorted(shares.values()) == [
            Decimal("10442.33"),
            Decimal("10442.33"),
            Decimal("10442.34"),
        ]


def test_closed_month_refuses_a_new_policy_and_changes_are_audited(month, finance_user, member):
    cost_recovery_set(actor=finance_user, period=month, method=RecoveryMethod.EVEN)
    event = AuditEvent.objects.get(action="cost_recovery.change")
    assert event.before == {"method": "keep"} and event.after["method"] == "even"
    with pytest.raises(PolicyRefusal):
        cost_recovery_set(actor=member, period=month, method=RecoveryMethod.USAGE)
    period_close(actor=finance_user, period=month)
    with pytest.raises(ConflictError) as refused:
        cost_recovery_set(actor=finance_user, period=month, method=RecoveryMethod.USAGE)
    assert "closed" in str(refused.value.message)
    assert CostRecoveryPolicy.objects.get(period=month).method == RecoveryMethod.EVEN


def test_unknown_method_is_refused(month, finance_user):
    from django.core.exceptions import ValidationError

    with pytest.raises(ValidationError):
        cost_recovery_set(actor=finance_user, period=month, method="lottery")
    assert not CostRecoveryPolicy.objects.exists()


def test_chargeback_page_sets_the_policy_and_shows_the_shares(client, month, finance_user):
    client.force_login(finance_user)
    response = client.post("/billing/?period=2026-11", {"action": "recovery", "method": "usage"})
    assert response.status_code == 302
    page = client.get("/billing/?period=2026-11").content.decode()
    assert 'data-testid="recovery-summary"' in page
    assert "31,327.00 USD shared to teams" in page
    row = page[page.index('data-team="vision"') :]
    assert 'data-testid="platform-share">7,229.31' in row
    platform = page[page.index('data-team="platform"') :]
    assert 'data-testid="cost-after-recovery">0.00' in platform


def test_a_team_charged_nothing_still_shows_its_share(client, month, finance_user):
    cost_recovery_set(actor=finance_user, period=month, method=RecoveryMethod.GUARANTEE)
    client.force_login(finance_user)
    page = client.get("/billing/?period=2026-11").content.decode()
    robotics = page[page.index('data-team="robotics"') :]
    assert 'data-testid="platform-share">4,475.29' in robotics
    assert 'data-testid="grand-total-after-recovery">31,392.00' in page


@pytest.mark.parametrize("version", ["1.3", "1.2"])
def test_focus_carries_the_shares_as_rows_that_reconcile_to_the_fleet_total(
    month, finance_user, version, team
):
    from apps.billing import focus
    from tests.billing.test_focus import read_focus, schema_violations

    kept = read_focus(month, version)
    assert not [r for r in kept if r["x_LineType"] == "platform-share"]  # keep: no rows
    cost_recovery_set(actor=finance_user, period=month, method=RecoveryMethod.USAGE)
    rows = read_focus(month, version)
    fleet_total = sum(row["cost"] for row in team_totals(month))
    assert sum(Decimal(r["BilledCost"]) for r in rows) == fleet_total == Decimal("31392.00")
    shares = {r["SubAccountId"]: Decimal(r["BilledCost"]) for r in rows
              if r["x_LineType"] == "platform-share"}  # fmt: skip
    assert shares == {"vision": Decimal("7229.31"), "nlp": Decimal("24097.69"),
                      "platform": Decimal("-31327.00")}  # fmt: skip
    by_account = {}
    for r in rows:
        by_account[r["SubAccountId"]] = by_account.get(r["SubAccountId"], 0) + Decimal(
            r["BilledCost"]
        )
    assert by_account["platform"] == 0
    assert by_account["vision"] == Decimal("15.00") + Decimal("7229.31")
    if version == "1.3":
        assert schema_violations(focus.focus_columns(version), rows) == []
        vision = next(r for r in rows if r["x_LineType"] == "platform-share"
                      and r["SubAccountId"] == "vision")  # fmt: skip
        assert vision["AllocatedMethodId"] == "platform-cost-recovery-usage"
    team_only = read_focus(month, version, team_id=team.pk)
    assert sum(Decimal(r["BilledCost"]) for r in team_only) == Decimal("7244.31")


@pytest.mark.slow
def test_prices_forecasts_and_recovery_agree_on_sqlite(tmp_path):
    from tests.sqlite_runner import run_on_sqlite

    outcome = run_on_sqlite("tests.billing.sqlite_money", tmp_path / "money.sqlite3")
    assert outcome["vendor"] == "sqlite"
    walkthrough = outcome["walkthrough"]
    assert (walkthrough["list_cost"], walkthrough["over_quota_premium"], walkthrough["total"]) == (
        "3124.80", "781.20", "3906.00"
    )  # fmt: skip
    assert "would cost 3,906.00 USD" in outcome["refusal"]
    assert outcome["metered"] == {"quoted": "330.15", "charged": "330.15"}
    assert outcome["forecast"]["exceeds_on"] == "2026-12-21"
    assert outcome["forecast"]["message"] == "At this rate nlp exceeds its budget on Dec 21."
    for method, split in outcome["recovery"].items():
        assert Decimal(split["recovered"]) + Decimal(split["kept"]) == Decimal(
            split["platform_cost"]
        ), method
        assert Decimal(split["teams_after"]) + Decimal(split["kept"]) == Decimal(
            split["fleet_total"]
        ), method
        if method != "keep":
            assert Decimal(split["kept"]) == 0 and Decimal(split["recovered"]) > 0, method


def test_csv_and_json_exports_carry_the_share_lines(client, month, finance_user):
    import csv
    import io

    client.force_login(finance_user)
    before = client.get("/api/v1/chargeback/", {"period": "2026-11", "format": "csv"})
    assert "platform-share" not in b"".join(before.streaming_content).decode()
    cost_recovery_set(actor=finance_user, period=month, method=RecoveryMethod.EVEN)
    response = client.get("/api/v1/chargeback/", {"period": "2026-11", "format": "csv"})
    rows = list(csv.DictReader(io.StringIO(b"".join(response.streaming_content).decode())))
    shares = {r["team"]: Decimal(r["cost"]) for r in rows if r["line_type"] == "platform-share"}
    assert shares.pop("platform") == Decimal("-31327.00")
    assert sorted(shares.values()) == [
        Decimal("10442.33"),
        Decimal("10442.33"),
        Decimal("10442.34"),
    ]
    assert sum(shares.values()) == Decimal("31327.00")
    assert sum(Decimal(r["cost"]) for r in rows) == Decimal("31392.00")
    body = b"".join(
        client.get(
            "/api/v1/chargeback/", {"period": "2026-11", "format": "json", "team": "vision"}
        ).streaming_content
    )
    assert b"platform-share" in body and b"-31327" not in body
