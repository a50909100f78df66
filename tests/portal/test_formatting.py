"""The one rule for times, durations, counts and amounts (portal/formatting.py)."""

from datetime import UTC, datetime, timedelta
from decimal import Decimal
from zoneinfo import ZoneInfo

import pytest
from django.template import Context, Template
from django.test import override_settings
from django.utils import timezone

from portal.formatting import (
    format_count,
    format_duration,
    format_money,
    format_number,
    format_price,
    format_when,
)

MOMENT = datetime(2026, 12, 4, 9, 5, tzinfo=UTC)


def render(source: str, **context) -> str:
    return Template(source).render(Context(context))


def test_a_moment_reads_the_same_format_with_its_zone_named():
    assert format_when(MOMENT) == "Dec 4, 2026, 09:05 UTC"
    assert format_when(MOMENT, "date") == "Dec 4, 2026"
    assert format_when(MOMENT, "time") == "09:05 UTC"
    with timezone.override(ZoneInfo("America/New_York")):
        assert format_when(MOMENT) == "Dec 4, 2026, 04:05 EST"


def test_when_filter_is_a_time_element_any_template_can_use_without_loading():
    html = render("{{ moment|when }}", moment=MOMENT)
    assert html == (
        '<time datetime="2026-12-04T09:05:00+00:00" data-style="datetime">'
        "Dec 4, 2026, 09:05 UTC</time>"
    )
    assert render("{{ moment|when }}", moment=None) == "—"
    assert 'data-style="date">Dec 4, 2026</time>' in render('{{ m|when:"date" }}', m=MOMENT)


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        (45, "45 s"),
        (600, "10 min"),
        (3600, "1 h"),
        (5400, "1 h 30 min"),
        (86400 * 2 + 3600 * 4, "2 d 4 h"),
        (timedelta(minutes=90), "1 h 30 min"),
    ],
)
def test_durations_in_human_units(seconds, text):
    assert format_duration(seconds) == text


def test_numbers_money_and_counts():
    assert format_number(Decimal("1234567.891"), 2) == "1,234,567.89"
    assert format_number(Decimal("0.125"), 2) == "0.12"  # half-even, as the exports round
    assert format_money(Decimal("28543")) == "28,543.00 USD"
    with override_settings(BILLING_CURRENCY="EUR"):
        assert format_money(Decimal("1.5")) == "1.50 EUR"
    assert format_price(Decimal("2.1000"), "USD") == "2.1000 USD"
    assert format_price(Decimal("3"), "USD") == "3.00 USD"
    assert format_count(1, "GPU") == "1 GPU"
    assert format_count(2, "GPU") == "2 GPUs"
    assert format_count(1024, "GPU") == "1,024 GPUs"
    assert format_count(2, "entry,entries") == "2 entries"
    assert render('{{ n|counted:"GPU" }} · {{ a|money }}', n=1, a=Decimal("1000")) == (
        "1 GPU · 1,000.00 USD"
    )


@pytest.mark.django_db
def test_messages_count_gpus_in_the_right_number(team, member, h100, tomorrow_9):
    from apps.reservations.services import reservation_create
    from apps.teams.models import Quota
    from portal.exceptions import ApplicationError

    Quota.objects.create(team=team, gpu_model=h100, guaranteed=1, limit=1)
    with pytest.raises(ApplicationError) as refusal:
        reservation_create(
            team=team,
            user=member,
            gpu_model=h100,
            count=2,
            start=tomorrow_9,
            end=tomorrow_9 + timedelta(hours=1),
        )
    assert f"may hold 1 GPU of {h100.name};" in refusal.value.message
