"""Powered-off capacity: metering charges none of a powered-down node's time as unallocated, and
the energy it saved is its GPUs' measured idle draw x hours off, priced at the energy tariff."""

from collections import defaultdict
from datetime import date, timedelta
from decimal import Decimal

import pytest
from django.db.models import Sum

from apps.billing.choices import ChargeSource
from apps.billing.energy import powered_off_by_gpu_day, powered_off_by_model
from apps.billing.metering import meter_interval
from apps.billing.models import LedgerEntry, RateCard
from apps.fleet.choices import PowerState
from apps.fleet.models import NodePowerEvent
from apps.telemetry.models import GpuHourRollup
from tests.billing.conftest import AFTER_NOV, NOV
from tests.factories import GpuFactory, GpuModelFactory, NodeFactory

pytestmark = pytest.mark.django_db
DAY = NOV + timedelta(days=4)  # the 5th


@pytest.fixture
def node():
    """A B200 node of two GPUs (4.00 per GPU-hour, energy 0.30 per kWh) that idled at 60 W and
    80 W per GPU the day before (a busy hour at 300 W does not count)."""
    model = GpuModelFactory(name="B200")
    RateCard.objects.create(gpu_model=model, price_per_gpu_hour=Decimal("4.00"),
                            energy_price_per_kwh=Decimal("0.30"),
                            effective_from=NOV - timedelta(days=90))  # fmt: skip
    node = NodeFactory(hostname="b200-a")
    for index, watts in enumerate((60.0, 80.0)):
        gpu = GpuFactory(node=node, index=index, model=model, uuid=f"GPU-b200-a-{index}",
                         in_fleet_since=NOV - timedelta(days=30))  # fmt: skip
        for hour, (busy, power) in enumerate([(0.0, watts), (0.0, watts), (3600.0, 300.0)]):
            GpuHourRollup.objects.create(
                gpu=gpu, bucket=DAY - timedelta(hours=10 - hour), samples=60, busy_seconds=busy,
                power_avg_w=power,
            )  # fmt: skip
    return node


def power(node, changes):
    """The node's power history: (hours after DAY's midnight, from state, to state)."""
    for hours, before, after in changes:
        NodePowerEvent.objects.create(node=node, from_state=before, to_state=after,
                                      at=DAY + timedelta(hours=hours))  # fmt: skip


OFF_10_TO_14 = [
    (10, PowerState.ON, PowerState.SUSPENDING),
    (10.25, PowerState.SUSPENDING, PowerState.OFF),
    (13.75, PowerState.OFF, PowerState.RESUMING),
    (14, PowerState.RESUMING, PowerState.ON),
]


def test_powered_off_hours_are_not_charged_as_unallocated(node):
    power(node, OFF_10_TO_14)
    meter_interval(start=DAY, end=DAY + timedelta(days=1), now=AFTER_NOV)
    rows = LedgerEntry.objects.filter(gpu__node=node)
    assert set(rows.values_list("source", flat=True)) == {ChargeSource.UNALLOCATED}
    # 24 h less the 4 h powered down (10:00-14:00, suspending to resumed), for both GPUs.
    assert rows.aggregate(s=Sum("gpu_seconds"))["s"] == 2 * 20 * 3600
    assert rows.aggregate(c=Sum("cost"))["c"] == Decimal("160.00")  # 40 GPU-h x 4.00
    assert not rows.filter(slice_start__lt=DAY + timedelta(hours=14),
                           slice_end__gt=DAY + timedelta(hours=10)).exists()  # fmt: skip


def test_energy_saved_is_the_measured_idle_draw_times_hours_off(node):
    power(node, OFF_10_TO_14)
    [b200] = powered_off_by_model(DAY, DAY + timedelta(days=1))
    assert b200.gpu_model == "B200" and b200.gpu_hours == Decimal(8)
    # (60 W + 80 W) x 4 h = 0.56 kWh, at 0.30 per kWh = 0.168.
    assert b200.energy_saved_kwh == Decimal("0.56")
    assert b200.energy_saved_cost == Decimal("0.168")
    assert b200.unmeasured_gpus == 0


def test_a_gpu_never_measured_idle_saves_nothing_and_is_counted(node):
    GpuFactory(node=node, index=2, model=node.gpus.first().model, uuid="GPU-b200-a-2",
               in_fleet_since=NOV - timedelta(days=30))  # fmt: skip
    power(node, OFF_10_TO_14)
    [b200] = powered_off_by_model(DAY, DAY + timedelta(days=1))
    assert b200.gpu_hours == Decimal(12) and b200.energy_saved_kwh == Decimal("0.56")
    assert b200.unmeasured_gpus == 1


def test_a_night_off_is_cut_at_midnight_per_gpu_day(node):
    power(node, [(22, PowerState.ON, PowerState.OFF), (27, PowerState.OFF, PowerState.ON)])
    days = powered_off_by_gpu_day(DAY, DAY + timedelta(days=2))
    first = days[("GPU-b200-a-0", date(2026, 11, 5))]
    second = days[("GPU-b200-a-0", date(2026, 11, 6))]
    assert (first.gpu_hours, second.gpu_hours) == (Decimal(2), Decimal(3))
    assert first.energy_saved_kwh == Decimal("0.12")  # 60 W x 2 h
    assert days[("GPU-b200-a-1", date(2026, 11, 6))].energy_saved_kwh == Decimal("0.24")
    assert len(days) == 4


def test_a_node_never_powered_down_saves_nothing(node):
    assert powered_off_by_model(DAY, DAY + timedelta(days=1)) == []
    meter_interval(start=DAY, end=DAY + timedelta(days=1), now=AFTER_NOV)
    total = LedgerEntry.objects.filter(gpu__node=node).aggregate(s=Sum("gpu_seconds"))["s"]
    assert total == 2 * 24 * 3600


# -- FOCUS ---------------------------------------------------------------------------------------

# Off 22:00 on the 5th until 02:00 on the 7th: 2 h on the 5th, the whole 6th, 2 h on the 7th.
OFF_OVER_A_DAY = [(22, PowerState.ON, PowerState.OFF), (50, PowerState.OFF, PowerState.ON)]


def _focus_rows(version):
    from apps.billing import exports, focus
    from apps.billing.models import BillingPeriod

    period = BillingPeriod.objects.get(month=NOV.date())
    return list(focus.focus_rows(exports.ExportScope(period), version))


@pytest.mark.parametrize("version", ["1.2", "1.3"])
def test_focus_rows_carry_powered_off_hours_and_energy_saved(node, version):
    power(node, OFF_OVER_A_DAY)
    meter_interval(start=NOV, end=NOV + timedelta(days=30), now=AFTER_NOV)
    rows = [r for r in _focus_rows(version) if (r["ResourceId"] or "").startswith("GPU-b200-a-0")]
    by_day = defaultdict(list)
    for row in rows:
        by_day[row["ChargePeriodStart"][:10]].append(row)
    assert sum(r["x_PoweredOffGpuHours"] for r in rows) == Decimal(28)
    assert [r["x_PoweredOffGpuHours"] for r in by_day["2026-11-05"]] == [Decimal(2)]
    assert by_day["2026-11-05"][0]["ConsumedQuantity"] == Decimal(22)  # charged: on 22 h
    # The 6th, off throughout, has no charge but a row that costs nothing and carries its hours.
    [sixth] = by_day["2026-11-06"]
    assert sixth["BilledCost"] == 0 and sixth["ConsumedQuantity"] == 0
    assert sixth["x_PoweredOffGpuHours"] == Decimal(24)
    assert sixth["x_EnergySavedKwh"] == Decimal("1.44")  # 60 W x 24 h
    assert sixth["ChargeDescription"] == "B200 powered off (not charged)"
    assert sixth["SubAccountType"] == "Platform"
    # Any other day: the unallocated row, nothing powered off.
    assert by_day["2026-11-20"][0]["x_PoweredOffGpuHours"] == 0


@pytest.mark.parametrize("version", ["1.2", "1.3"])
def test_the_exported_focus_csv_carries_powered_off_days_as_focus_rows_do(node, version):
    """The export as streamed (on PostgreSQL rendered by the database, the powered-off figures
    handed to it) is every byte of `focus_rows` written by the csv module: the hours on the
    first unallocated row of a GPU-day, and a row for each day off throughout, after the
    lines."""
    from apps.billing import exports, focus
    from apps.billing.models import BillingPeriod

    power(node, OFF_OVER_A_DAY)
    meter_interval(start=NOV, end=NOV + timedelta(days=30), now=AFTER_NOV)
    scope = exports.ExportScope(BillingPeriod.objects.get(month=NOV.date()))
    columns = focus.focus_columns(version)
    written = "".join(exports.csv_chunks(columns, focus.focus_rows(scope, version)))
    assert "powered off (not charged)" in written and ",24.000000," in written
    assert "".join(focus.focus_csv_chunks(scope, version)) == written


@pytest.mark.slow
def test_powered_off_rows_pass_the_finops_foundation_validator(node, tmp_path, finance_user):
    from apps.billing import exports, focus
    from apps.billing.models import BillingPeriod
    from apps.billing.services import period_close
    from tests.billing import focus_validator

    python = focus_validator.python_312()
    if python is None:
        pytest.skip("focus-validator needs Python >= 3.12: none on PATH or in pyenv")
    executable = focus_validator.ensure_validator(python)
    power(node, OFF_OVER_A_DAY)
    period = BillingPeriod.objects.create(month=NOV.date())
    period_close(actor=finance_user, period=period, now=AFTER_NOV)
    period.refresh_from_db()
    rows = list(focus.focus_rows(exports.ExportScope(period), focus.FOCUS_1_2))
    assert any(r["x_PoweredOffGpuHours"] == 24 and r["BilledCost"] == 0 for r in rows)
    data_file = tmp_path / "focus-1.2.csv"
    data_file.write_text("".join(exports.csv_chunks(focus.focus_columns(focus.FOCUS_1_2), rows)))
    report = focus_validator.run_validator(executable, data_file, "1.2.0.1")
    assert report.passed > 100
    # As for the demo month (tests/billing/test_focus.py): only the validator's own
    # contradiction fails.
    assert set(report.failed_rules) <= {"InvoiceId-C-004-C"}, report.output[-4000:]


# -- the cost dashboard --------------------------------------------------------------------------


def test_cost_dashboard_shows_powered_off_hours_and_energy_saved(node, client, finance_user,
                                                                member, team):  # fmt: skip
    power(node, OFF_10_TO_14)
    meter_interval(start=NOV, end=NOV + timedelta(days=30), now=AFTER_NOV)
    client.force_login(finance_user)
    page = client.get("/billing/cost/?period=2026-11").content.decode()
    section = page.split('data-testid="cost-powered-off"', 1)[1].split("</section>", 1)[0]
    # 2 GPUs x 4 h; (60 + 80) W x 4 h = 0.56 kWh at 0.30 = 0.17 (0.168).
    assert "8.0 GPU-hours powered off in 2026-11" in section
    assert "0.6 kWh saved" in section and "0.17" in section
    assert '<tr data-model="B200"><td>B200</td><td>8.0</td><td>0.560</td><td>0.17</td>' in section
    # A member sees only their teams' costs: not the platform's capacity.
    client.force_login(member)
    page = client.get("/billing/cost/?period=2026-11").content.decode()
    assert 'data-testid="cost-powered-off"' not in page


# -- statements ----------------------------------------------------------------------------------


def test_a_statement_notes_the_fleets_powered_off_capacity(node, november, client, finance_user):
    power(node, OFF_10_TO_14)
    client.force_login(finance_user)
    page = client.get("/billing/statements/2026-11/vision/").content.decode()
    note = page.split('data-testid="statement-powered-off">', 1)[1].split("</p>", 1)[0]
    # vision's own charges do not change (its booking, 15.00); the fleet's 8 GPU-hours off
    # saved (60 + 80) W x 4 h = 0.56 kWh, 0.17 at 0.30 per kWh.
    assert "8.0 GPU-hours were powered off in 2026-11" in note
    assert "saving 0.6 kWh" in note and "0.17" in note
    assert 'data-testid="statement-total">15.00' in page


def test_without_powered_off_capacity_a_statement_has_no_note(node, november, client,
                                                             finance_user):  # fmt: skip
    client.force_login(finance_user)
    page = client.get("/billing/statements/2026-11/vision/").content.decode()
    assert 'data-testid="statement-powered-off"' not in page
