"""The reader's zone (portal/timezones.py) and chart times in it (portal/plotting.py)."""

from datetime import UTC, date, datetime, timedelta
from zoneinfo import ZoneInfo

import plotly.graph_objects as go
import pytest
from django.utils import timezone

from portal.formatting import format_span, format_when
from portal.plotting import TIME_AXIS, figure_json
from portal.timezones import (
    ZonedDateTimeField,
    in_zone,
    local_day,
    local_days,
    parse_local,
    zone_or_none,
)

NEW_YORK = ZoneInfo("America/New_York")
# Saturday Dec 5, 2026, 19:00 in New York is Sunday 00:00 UTC.
SATURDAY_EVENING_UTC = datetime(2026, 12, 6, 0, 0, tzinfo=UTC)


def test_known_zones_only():
    assert zone_or_none("America/New_York") == NEW_YORK
    assert zone_or_none("Mars/Olympus") is None
    assert zone_or_none("") is None
    assert zone_or_none("../../etc/passwd") is None


def test_a_time_reads_in_the_current_zone_named():
    with in_zone("America/New_York"):
        assert format_when(SATURDAY_EVENING_UTC) == "Dec 5, 2026, 19:00 EST"
        assert local_day(SATURDAY_EVENING_UTC) == date(2026, 12, 5)
        assert (
            format_span(SATURDAY_EVENING_UTC, SATURDAY_EVENING_UTC + timedelta(hours=3))
            == "Dec 5, 2026, 19:00 – 22:00 EST"
        )
    assert local_day(SATURDAY_EVENING_UTC) == date(2026, 12, 6)
    assert format_when(SATURDAY_EVENING_UTC) == "Dec 6, 2026, 00:00 UTC"


def test_an_unknown_zone_falls_back_to_the_servers():
    with in_zone("Nowhere/Special"):
        assert format_when(SATURDAY_EVENING_UTC).endswith(" UTC")


def test_typed_local_time_is_read_in_the_readers_zone():
    with in_zone("America/New_York"):
        assert parse_local("2026-12-05T19:00") == SATURDAY_EVENING_UTC
        assert parse_local("2026-07-04 12:00") == datetime(2026, 7, 4, 16, tzinfo=UTC)
        with pytest.raises(ValueError, match=r"YYYY-MM-DD HH:MM \(America/New_York\)"):
            parse_local("next tuesday")


def test_days_follow_the_readers_midnights_across_a_dst_change():
    with in_zone("America/New_York"):
        days = local_days(date(2026, 10, 31), 3)
    assert [d for d, _, _ in days] == [date(2026, 10, 31), date(2026, 11, 1), date(2026, 11, 2)]
    assert days[0][1] == datetime(2026, 10, 31, 4, tzinfo=UTC)
    # Nov 1 is 25 hours long in New York (EDT ends).
    assert days[1][2] - days[1][1] == timedelta(hours=25)


def test_zoned_field_reads_the_readers_zone_and_names_it():
    field = ZonedDateTimeField()
    with in_zone("America/New_York"):
        assert field.clean("2026-12-05T19:00") == SATURDAY_EVENING_UTC
        assert str(field.help_text) == "Your time zone: America/New_York."
    with in_zone("Europe/Berlin"):
        assert field.clean("2026-12-05T19:00") == datetime(2026, 12, 5, 18, tzinfo=UTC)
        assert str(field.help_text) == "Your time zone: Europe/Berlin."


def test_chart_times_are_the_readers_wall_clock_and_the_axis_names_the_zone():
    figure = go.Figure(layout={"xaxis": {"type": "date", "title": TIME_AXIS}})
    moments = [SATURDAY_EVENING_UTC, SATURDAY_EVENING_UTC + timedelta(hours=1)]
    figure.add_scatter(x=moments, y=[1, 2])
    figure.add_bar(base=[m.isoformat() for m in moments], x=[3600_000, 3600_000], y=["a", "b"])
    figure.update_layout(xaxis_range=[moments[0].isoformat(), moments[1].isoformat()])
    with in_zone("America/New_York"):
        data = figure_json(figure)
    assert data["data"][0]["x"] == ["2026-12-05 19:00:00", "2026-12-05 20:00:00"]
    assert data["data"][1]["base"] == ["2026-12-05 19:00:00", "2026-12-05 20:00:00"]
    assert data["data"][1]["x"] == [3600_000, 3600_000]  # durations stay numbers
    assert data["layout"]["xaxis"]["range"] == ["2026-12-05 19:00:00", "2026-12-05 20:00:00"]
    assert data["layout"]["xaxis"]["title"]["text"] == "Time (EST)"


def test_chart_across_a_dst_change_names_both_zones():
    figure = go.Figure(layout={"xaxis": {"type": "date", "title": TIME_AXIS}})
    figure.add_scatter(
        x=[datetime(2026, 10, 31, 12, tzinfo=UTC), datetime(2026, 11, 2, 12, tzinfo=UTC)], y=[1, 2]
    )
    with timezone.override(NEW_YORK):
        data = figure_json(figure)
    assert data["layout"]["xaxis"]["title"]["text"] == "Time (EDT/EST)"
    assert data["data"][0]["x"] == ["2026-10-31 08:00:00", "2026-11-02 07:00:00"]
