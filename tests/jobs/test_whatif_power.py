"""The what-if page's power-saving option: the proposal replayed with idle nodes powered down,
the money the energy saves against the job completion time it adds."""

from datetime import timedelta
from decimal import Decimal

import pytest
from django.utils import timezone

from apps.billing.models import RateCard
from apps.fleet.models import GpuModel
from apps.jobs.models import WhatIfRun
from apps.outbox.models import OutboxMessage
from tests.jobs.test_whatif import form, history, replay  # noqa: F401 - the fixture

pytestmark = pytest.mark.django_db

POWER = {"power_save_after": "1800", "resume_seconds": "300", "warm_gpus": "0",
         "idle_watts": "400"}  # fmt: skip


@pytest.fixture
def l40s_energy_price(history):  # noqa: F811 - the fixture imported above
    RateCard.objects.create(
        gpu_model=GpuModel.objects.get(name="L40S-48GB"),
        price_per_gpu_hour=Decimal("1.00"),
        effective_from=timezone.now() - timedelta(days=60),
        energy_price_per_kwh=Decimal("0.25"),
    )


def test_power_saving_prices_the_energy_saved_against_the_jct_added(
    client, platform_admin, l40s_energy_price
):
    client.force_login(platform_admin)
    response = replay(client, form(**POWER))
    power = response.context["result"]["power"]
    # The sixteen 4-GPU H100 jobs of 2 h keep both H100 nodes busy for 8 h in four waves; the
    # L40S node (no job asks for it) idles all 8 h and powers down after 30 min: 7.5 h off,
    # 7.5 h x 400 W = 3 kWh, at 0.25 per kWh = 0.75 saved; no job waits for a node.
    assert power["idle_node_hours"] == pytest.approx(8.0)
    assert power["node_hours_off"] == pytest.approx(7.5)
    assert power["off_percent"] == pytest.approx(93.75)
    assert power["energy_saved_kwh"] == pytest.approx(3.0)
    assert Decimal(power["money_saved"]) == Decimal("0.75")
    assert power["jct_added_h"] == 0 and power["finished"] == 16
    assert power["power_cycles"] == 1 and power["bookings_late"] == 0
    html = response.content.decode()
    said = html.split('data-testid="whatif-power">', 1)[1].split("</p>", 1)[0]
    assert "turns off 7.5 of 8.0 fully idle node-hours (94 %)" in said
    assert "saves 3.0 kWh" in said and "0.75" in said and "replay has no bookings" in said
    # the options stay in the form beside their result
    assert 'name="power_save_after" type="number" min="0" step="any" value="1800"' in html


@pytest.mark.usefixtures("history")
def test_without_an_energy_price_the_page_says_so(client, platform_admin):
    client.force_login(platform_admin)
    response = replay(client, form(**POWER))
    power = response.context["result"]["power"]
    assert power["energy_saved_kwh"] == pytest.approx(3.0) and power["money_saved"] is None
    assert "no rate card prices energy" in response.content.decode()


@pytest.mark.usefixtures("history")
def test_without_power_saving_there_is_no_power_replay(client, platform_admin):
    client.force_login(platform_admin)
    response = replay(client, form(power_save_after=""))
    assert response.context["result"]["power"] is None
    assert WhatIfRun.objects.get().power_saving is None
    assert 'data-testid="whatif-power"' not in response.content.decode()


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("power_save_after", "-60", "Power down after must be 0 or more."),
        ("resume_seconds", "-1", "Resume time must be 0 or more."),
        ("warm_gpus", "1.5", "Warm GPUs: &#x27;1.5&#x27; is not a whole number."),
        ("idle_watts", "lots", "Idle draw: &#x27;lots&#x27; is not a number."),
    ],
)
@pytest.mark.usefixtures("history")
def test_bad_power_options_are_refused_inline(client, platform_admin, field, value, message):
    client.force_login(platform_admin)
    response = client.post("/jobs/what-if/", form(**(POWER | {field: value})))
    assert response.status_code == 400
    html = response.content.decode()
    assert message in html.split('data-testid="whatif-errors"', 1)[1]
    assert f'value="{value}"' in html  # what was typed stays to be corrected
    assert not WhatIfRun.objects.exists() and not OutboxMessage.objects.exists()
