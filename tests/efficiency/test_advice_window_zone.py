"""The right-sizing window is whole days of the reader's zone, as typed."""

from datetime import UTC, datetime

from apps.efficiency.forms import AdviceFilterForm
from portal.timezones import in_zone


def test_days_are_read_in_the_readers_zone():
    with in_zone("America/New_York"):
        form = AdviceFilterForm({"since": "2026-11-02", "until": "2026-11-03"})
        assert form.is_valid(), form.errors
    assert form.cleaned_data["start"] == datetime(2026, 11, 2, 5, tzinfo=UTC)  # EST midnight
    assert form.cleaned_data["end"] == datetime(2026, 11, 4, 5, tzinfo=UTC)


def test_a_window_that_ends_before_it_starts_is_refused():
    with in_zone("Europe/Berlin"):
        form = AdviceFilterForm({"since": "2026-11-05", "until": "2026-11-03"})
        assert not form.is_valid()
    assert "end after it starts" in str(form.errors)
