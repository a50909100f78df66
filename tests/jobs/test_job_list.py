"""The jobs page as a list: sortable columns and filters over the user's own teams only; a bad
filter value gets a message, never a 500 and never another team's rows."""

import re

import pytest

from apps.jobs.choices import JobPriorityClass, JobStatus
from tests.factories import JobFactory

pytestmark = pytest.mark.django_db


def _rows(html: str) -> list[int]:
    return [int(pk) for pk in re.findall(r'<tr data-job="(\d+)"', html)]


@pytest.fixture
def jobs(team, other_team, member, outsider, h100):
    """Three of the member's team (names b, a, c; one by the member), two of another team."""
    mine = JobFactory(team=team, submitted_by=member, name="bert-large", gpu_count=4)
    ours = [
        mine,
        JobFactory(team=team, name="alexnet", gpu_count=1, status=JobStatus.RUNNING),
        JobFactory(team=team, name="clip", gpu_count=2, argv=["python", "finetune.py"]),
    ]
    theirs = [
        JobFactory(team=other_team, submitted_by=outsider, name="aaa-secret", gpu_count=8),
        JobFactory(team=other_team, submitted_by=outsider, name="zzz-secret", gpu_count=1),
    ]
    return {"ours": [j.pk for j in ours], "theirs": [j.pk for j in theirs], "mine": mine.pk}


def test_sorting_by_each_column_shows_only_the_users_teams(client, member, jobs):
    client.force_login(member)
    for sort in ("name", "-name", "team", "gpus", "-gpus", "submitted_at", "submitted_by",
                 "priority_class", "status", "id", "-id"):  # fmt: skip
        rows = _rows(client.get(f"/jobs/?sort={sort}").content.decode())
        assert sorted(rows) == sorted(jobs["ours"]), sort
    by_name = _rows(client.get("/jobs/?sort=name").content.decode())
    assert by_name == [jobs["ours"][1], jobs["ours"][0], jobs["ours"][2]]  # alexnet, bert, clip
    assert _rows(client.get("/jobs/?sort=-name").content.decode()) == by_name[::-1]
    by_gpus = _rows(client.get("/jobs/?sort=-gpus").content.decode())
    assert by_gpus == [jobs["ours"][0], jobs["ours"][2], jobs["ours"][1]]  # 4, 2, 1


def test_filters_keep_their_query_parameters(client, member, jobs, h100):
    client.force_login(member)
    assert _rows(client.get("/jobs/?status=running").content.decode()) == [jobs["ours"][1]]
    assert _rows(client.get("/jobs/?mine=on").content.decode()) == [jobs["mine"]]
    assert sorted(_rows(client.get("/jobs/?team=vision").content.decode())) == sorted(jobs["ours"])
    on_h100 = _rows(client.get(f"/jobs/?gpu_model={h100.name}").content.decode())
    assert sorted(on_h100) == sorted(jobs["ours"])
    assert _rows(client.get("/jobs/?q=finetune").content.decode()) == [jobs["ours"][2]]
    assert _rows(client.get("/jobs/?q=secret").content.decode()) == []


@pytest.mark.parametrize(
    ("query", "message"),
    [
        ("team=nlp", "Team: Select a valid choice."),  # exists, but not the member's
        ("team=no-such-team", "Team: Select a valid choice."),
        ("status=sleeping", "Status: Select a valid choice."),
        ("gpu_model=Z9000", "GPU model: Select a valid choice."),
    ],
)
def test_bad_or_foreign_filter_values_get_a_message_and_no_rows(
    client, member, jobs, query, message
):
    client.force_login(member)
    response = client.get(f"/jobs/?{query}")
    assert response.status_code == 200
    html = response.content.decode()
    assert message in html and 'data-testid="filter-problems"' in html
    assert _rows(html) == []
    assert "secret" not in html


def test_platform_admin_sorts_over_every_team(client, platform_admin, jobs):
    client.force_login(platform_admin)
    rows = _rows(client.get("/jobs/?sort=name").content.decode())
    assert sorted(rows) == sorted(jobs["ours"] + jobs["theirs"])
    assert rows[0] == jobs["theirs"][0] and rows[-1] == jobs["theirs"][1]  # aaa..., zzz...
    assert _rows(client.get("/jobs/?team=nlp").content.decode()) == jobs["theirs"][::-1]


def test_class_column_shows_the_whole_short_name(client, member, team):
    JobFactory(team=team, submitted_by=member, priority_class=JobPriorityClass.OVER_QUOTA)
    client.force_login(member)
    html = client.get("/jobs/").content.decode()
    assert 'title="Over quota (spare capacity, preemptible)">Over quota</span>' in html


def test_the_only_my_jobs_box_is_labelled_apart_from_the_button(client, member, jobs):
    client.force_login(member)
    html = client.get("/jobs/").content.decode()
    start = html.index('data-testid="job-filters"')
    form = html[start : html.index("</form>", start)]
    assert re.search(r'<span class="filter check"><input type="checkbox" name="mine"[^>]*> '
                     r'<label for="id_mine">Only my jobs</label></span>', form)  # fmt: skip
