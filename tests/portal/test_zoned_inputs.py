"""Times people type (maintenance windows, rate cards, the dashboards' custom range) are read in
their zone, which the form names, and stored in UTC."""

from datetime import UTC, datetime, timedelta
from decimal import Decimal
from zoneinfo import ZoneInfo

import pytest
from django.utils import timezone

from apps.billing.models import RateCard
from apps.dashboards.selectors import FilterError, parse_filters
from apps.fleet.models import MaintenanceWindow, Node
from portal.timezones import in_zone

pytestmark = pytest.mark.django_db

NEW_YORK = ZoneInfo("America/New_York")


def _in_new_york(user):
    user.time_zone = "America/New_York"
    user.save()
    return user


def _next_week_at(hour: int) -> datetime:
    day = (timezone.now().astimezone(NEW_YORK) + timedelta(days=7)).date()
    return datetime(day.year, day.month, day.day, hour, tzinfo=NEW_YORK)


def test_maintenance_window_is_typed_in_the_readers_zone(client, platform_admin, fleet):
    client.force_login(_in_new_york(platform_admin))
    page = client.get("/fleet/").content.decode()
    assert "Start (America/New_York)" in page and "End (America/New_York)" in page
    node = Node.objects.get(hostname="l40s-a")
    start = _next_week_at(22)
    response = client.post(
        f"/fleet/nodes/{node.pk}/maintenance/",
        {
            "start": start.strftime("%Y-%m-%dT%H:%M"),
            "end": (start + timedelta(hours=3)).strftime("%Y-%m-%dT%H:%M"),
            "reason": "PSU swap",
        },
        follow=True,
    )
    window = MaintenanceWindow.objects.get()
    assert window.start == start and window.start.astimezone(UTC).hour in (2, 3)
    assert window.end == start + timedelta(hours=3)
    assert f"{start:%b} {start.day}, {start.year}, 22:00 {start.tzname()}" in (
        response.content.decode()
    )


def test_maintenance_window_that_is_not_a_time_is_refused(client, platform_admin, fleet):
    client.force_login(_in_new_york(platform_admin))
    node = Node.objects.get(hostname="l40s-a")
    response = client.post(
        f"/fleet/nodes/{node.pk}/maintenance/",
        {"start": "soon", "end": "later", "reason": "x"},
        follow=True,
    )
    assert "start: Enter a valid date/time." in response.content.decode()
    assert not MaintenanceWindow.objects.exists()


def test_rate_card_is_typed_in_the_readers_zone(client, finance_user, h100):
    client.force_login(_in_new_york(finance_user))
    page = client.get("/billing/rate-cards/").content.decode()
    assert "Your time zone: America/New_York." in page
    assert 'type="datetime-local" name="effective_from"' in page
    start = _next_week_at(0)
    data = {
        "gpu_model": h100.name, "price_per_gpu_hour": "2.10", "currency": "USD",
        "effective_from": start.strftime("%Y-%m-%dT%H:%M"), "over_quota_multiplier": "1",
    }  # fmt: skip
    assert client.post("/billing/rate-cards/", data).status_code == 302
    card = RateCard.objects.get()
    assert card.effective_from == start
    assert card.effective_from.astimezone(UTC).hour in (4, 5)
    # Ending it: the inline picker is read in the same zone.
    end = start + timedelta(days=3, hours=9)
    client.post(
        "/billing/rate-cards/",
        {"card": card.pk, "effective_to": end.strftime("%Y-%m-%dT%H:%M")},
    )
    card.refresh_from_db()
    assert card.effective_to == end


def test_rate_card_end_that_is_not_a_time_names_the_zone(client, finance_user, h100):
    client.force_login(_in_new_york(finance_user))
    card = RateCard.objects.create(
        gpu_model=h100, price_per_gpu_hour=Decimal("2"), effective_from=timezone.now()
    )
    page = client.post(
        "/billing/rate-cards/", {"card": card.pk, "effective_to": "tomorrow"}
    ).content.decode()
    assert "Give the end time as a date and time in your zone (America/New_York)" in page
    card.refresh_from_db()
    assert card.effective_to is None


def test_dashboard_custom_range_pickers_read_the_readers_zone(client, member):
    client.force_login(_in_new_york(member))
    page = client.get(
        "/dashboards/utilization/?range=custom&start=2026-12-01T09:00&end=2026-12-02T09:00"
    ).content.decode()
    assert "needs a time zone" not in page
    assert (
        'name="start" type="datetime-local" aria-describedby="f-zone" value="2026-12-01T09:00"'
        in page
    )
    assert '<small class="muted" id="f-zone">America/New_York; no end: now</small>' in page
    with in_zone("America/New_York"):
        filters = parse_filters(
            {"range": "custom", "start": "2026-12-01T09:00"}, member, local=True
        )
        assert filters.start == datetime(2026, 12, 1, 14, tzinfo=UTC)
        with pytest.raises(FilterError, match="needs a time zone"):
            parse_filters({"range": "custom", "start": "2026-12-01T09:00"}, member)


def test_rate_card_end_the_rules_refuse_is_shown_not_a_crash(client, finance_user, h100):
    client.force_login(_in_new_york(finance_user))
    start = _next_week_at(0)
    card = RateCard.objects.create(
        gpu_model=h100, price_per_gpu_hour=Decimal("2"), effective_from=start
    )
    before_start = start - timedelta(days=1)
    response = client.post(
        "/billing/rate-cards/",
        {"card": card.pk, "effective_to": before_start.strftime("%Y-%m-%dT%H:%M")},
    )
    assert response.status_code == 200
    assert 'data-testid="rate-card-end-error"' in response.content.decode()
    card.refresh_from_db()
    assert card.effective_to is None
