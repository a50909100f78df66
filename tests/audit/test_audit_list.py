"""The audit log as a list page: sortable columns, date range and text search, and a clear
message (never a 500) for a filter value that does not parse."""

import re
from datetime import datetime

import pytest
from django.utils import timezone

from apps.audit.models import AuditEvent
from apps.audit.services import audit_record
from tests.factories import TeamFactory

pytestmark = pytest.mark.django_db


def _rows(html: str) -> list[int]:
    return [int(pk) for pk in re.findall(r'<tr data-event="(\d+)"', html)]


@pytest.fixture
def events(platform_admin):
    """Three events on three days: alpha (Nov 1), bravo (Nov 2, "nightly"), charlie (Nov 3)."""
    made = []
    for day, slug, reason in [(1, "alpha", ""), (2, "bravo", "nightly check"), (3, "charlie", "")]:
        event = audit_record(
            actor=platform_admin, action="team.change", target=TeamFactory(slug=slug),
            reason=reason,
        )  # fmt: skip
        AuditEvent.objects.filter(pk=event.pk).update(
            created_at=timezone.make_aware(datetime(2026, 11, day, 12, 0))
        )
        made.append(event.pk)
    return made


def test_newest_first_and_a_column_header_sorts_both_ways(client, platform_admin, events):
    client.force_login(platform_admin)
    assert _rows(client.get("/audit/").content.decode()) == events[::-1]
    html = client.get("/audit/?sort=object_repr").content.decode()
    assert 'href="?sort=-object_repr' in html  # clicking again sorts descending
    by_object = _rows(html)
    assert by_object == sorted(by_object, key=lambda pk: AuditEvent.objects.get(pk=pk).object_repr)
    assert _rows(client.get("/audit/?sort=-object_repr").content.decode()) == by_object[::-1]
    assert _rows(client.get("/audit/?sort=created_at").content.decode()) == events


def test_date_range_keeps_whole_days_at_both_ends(client, platform_admin, events):
    client.force_login(platform_admin)
    html = client.get("/audit/?since=2026-11-02&until=2026-11-02").content.decode()
    assert _rows(html) == [events[1]]
    assert _rows(client.get("/audit/?since=2026-11-02").content.decode()) == events[:0:-1]


def test_text_search_finds_object_and_reason(client, platform_admin, events):
    client.force_login(platform_admin)
    assert _rows(client.get("/audit/?q=CHARLIE").content.decode()) == [events[2]]
    assert _rows(client.get("/audit/?q=nightly").content.decode()) == [events[1]]
    assert _rows(client.get("/audit/?q=nothing-like-this").content.decode()) == []


@pytest.mark.parametrize(
    ("query", "message"),
    [
        ("since=yesterday", "From: Enter a valid date."),
        ("since=2026-11-03&until=2026-11-01", "The range ends (2026-11-01) before it starts"),
        ("action=no.such.action", "Action: Select a valid choice."),
    ],
)
def test_bad_filter_values_get_a_message_and_no_rows(
    client, platform_admin, events, query, message
):
    client.force_login(platform_admin)
    response = client.get(f"/audit/?{query}")
    assert response.status_code == 200
    html = response.content.decode()
    assert 'data-testid="filter-problems"' in html and message in html
    assert _rows(html) == []


def test_unknown_sort_and_page_fall_back_without_error(client, platform_admin, events):
    client.force_login(platform_admin)
    for query in ("sort=before", "sort=nonsense", "page=999", "page=x"):
        response = client.get(f"/audit/?{query}")
        assert response.status_code == 200, query
        assert sorted(_rows(response.content.decode())) == sorted(events), query


def test_pages_keep_filters_and_sort(client, platform_admin):
    teams = [TeamFactory(slug=f"t{i:02}") for i in range(60)]
    for t in teams:
        audit_record(actor=platform_admin, action="team.change", target=t)
    client.force_login(platform_admin)
    html = client.get("/audit/?action=team.change&sort=object_repr").content.decode()
    assert "Page 1 of 2" in html
    assert re.search(r'href="\?[^"]*page=2[^"]*">Next →</a>', html)
    next_link = re.search(r'href="(\?[^"]*page=2[^"]*)">Next', html).group(1).replace("&amp;", "&")
    assert "action=team.change" in next_link and "sort=object_repr" in next_link
    second = client.get(f"/audit/{next_link}").content.decode()
    assert len(_rows(second)) == 10
    # Unsorted, the pager reads through time.
    assert "Older →" in client.get("/audit/").content.decode()
