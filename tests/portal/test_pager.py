"""The shared pager of the list pages (jobs, bookings, audit, right-sizing advice)."""

from django.core.paginator import Paginator
from django.template import Context, Template


def _render(snippet: str, **context) -> str:
    return Template(snippet).render(Context(context))


def test_pager_keeps_the_filters_and_links_both_ways():
    page = Paginator(list(range(100)), 10).page(3)
    html = _render('{% include "_pager.html" %}', page=page, query="team=nlp")
    assert '<a href="?team=nlp&page=2">← Previous</a>' in html
    assert '<a href="?team=nlp&page=4">Next →</a>' in html
    assert "Page 3 of 10" in html


def test_pager_takes_its_own_labels_and_a_built_query():
    page = Paginator(list(range(20)), 10).page(1)
    html = _render(
        '{% include "_pager.html" with query="when="|add:when previous_label="← Newer" '
        'next_label="Older →" %}',
        page=page,
        when="past",
    )
    assert '<a href="?when=past&page=2">Older →</a>' in html
    assert "Newer" not in html  # no previous page on the first one


def test_one_page_shows_no_pager():
    page = Paginator([1], 10).page(1)
    assert _render('{% include "_pager.html" %}', page=page, query="").strip() == ""
