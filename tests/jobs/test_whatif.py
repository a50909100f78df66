"""The what-if page: replaying recent jobs under proposed quotas, for platform admins only."""

from datetime import timedelta
from decimal import Decimal

import pytest
from django.utils import timezone

from apps.billing.models import RateCard
from apps.jobs.models import Job
from apps.teams.models import Quota

pytestmark = pytest.mark.django_db


@pytest.fixture
def history(team, other_team, member, outsider, fleet, h100):
    """vision and nlp each ran eight 4-GPU H100 jobs of 2 h, all submitted at once, an hour ago,
    on a fleet of 16 H100: with nlp guaranteed 12 and vision 4, nlp runs three at a time and
    vision one, so the guarantees decide who waits."""
    Quota.objects.create(team=team, gpu_model=h100, guaranteed=4, limit=16)
    Quota.objects.create(team=other_team, gpu_model=h100, guaranteed=12, limit=16)
    RateCard.objects.create(
        gpu_model=h100,
        price_per_gpu_hour=Decimal("2.00"),
        effective_from=timezone.now() - timedelta(days=60),
        over_quota_multiplier=Decimal("1.5"),
    )
    submitted = timezone.now() - timedelta(hours=1)
    for owner, user in ((team, member), (other_team, outsider)):
        for _ in range(8):
            job = Job.objects.create(
                team=owner, submitted_by=user, name="train", argv=["train"], gpu_model=h100,
                gpu_count=4, max_runtime_seconds=7200, status="succeeded",
            )  # fmt: skip
            Job.objects.filter(pk=job.pk).update(submitted_at=submitted)


def rows(response) -> dict:
    return {row["team"]: row for row in response.context["result"]["teams"]}


def form(**overrides) -> dict:
    data = {"window": "7d", "policy": "fairshare", "g-0": "4", "l-0": "16", "g-1": "12",
            "l-1": "16"}  # fmt: skip
    return data | overrides


def test_giving_a_team_the_bigger_guarantee_shortens_its_wait(client, platform_admin, history):
    client.force_login(platform_admin)
    page = client.get("/jobs/what-if/").content.decode()
    assert 'data-testid="whatif-quotas"' in page and 'value="12"' in page
    # Rows are ordered nlp, vision: swap the guarantees.
    response = client.post("/jobs/what-if/", form())
    assert response.status_code == 200
    result = rows(response)
    assert result["vision"]["jobs"] == 8 and result["nlp"]["jobs"] == 8
    assert result["vision"]["wait_after_h"] < result["vision"]["wait_before_h"]
    assert result["nlp"]["wait_after_h"] > result["nlp"]["wait_before_h"]
    for team in ("vision", "nlp"):  # every job ran: 8 jobs x 4 GPUs x 2 h
        assert result[team]["gpu_hours_after"] == pytest.approx(64)
        assert result[team]["cost_after"] >= Decimal("128.00")  # list price, more if over quota
    assert 'id="dashboard-figures"' in response.content.decode()


def test_bad_quota_numbers_are_refused_inline(client, platform_admin, history):
    client.force_login(platform_admin)
    response = client.post("/jobs/what-if/", form(**{"g-0": "20", "l-0": "16"}))
    assert response.status_code == 400
    assert "The limit (16) must be at least guaranteed (20)." in response.content.decode()
    response = client.post("/jobs/what-if/", form(**{"l-1": "lots"}))
    assert response.status_code == 400 and "whole numbers" in response.content.decode()
    assert Quota.objects.get(team__slug="nlp").guaranteed == 12  # nothing was changed


def test_empty_history_says_so(client, platform_admin, quotas):
    client.force_login(platform_admin)
    response = client.post("/jobs/what-if/", form())
    assert 'data-testid="whatif-empty"' in response.content.decode()


def test_only_platform_admins(client, member, finance_user):
    for user in (member, finance_user):
        client.force_login(user)
        assert client.get("/jobs/what-if/").status_code == 403


def test_proposed_numbers_stay_in_the_form_after_a_run(client, platform_admin, history):
    client.force_login(platform_admin)
    html = client.post("/jobs/what-if/", form(**{"g-0": "5", "g-1": "9"})).content.decode()
    table = html.split('data-testid="whatif-quotas"', 1)[1].split("</table>", 1)[0]
    assert 'name="g-0" type="number" min="0" value="5"' in table
    assert 'name="g-1" type="number" min="0" value="9"' in table
    assert "now 12" in table  # nlp's current guarantee is shown beside the proposal


def test_the_chart_gets_the_waits_it_compares(client, platform_admin, history):
    import json

    client.force_login(platform_admin)
    response = client.post("/jobs/what-if/", form())
    html = response.content.decode()
    data = html.split('id="dashboard-figures" type="application/json">', 1)[1].split("</script>")[0]
    bars = json.loads(data)["wait"]["data"]
    waits = {row["team"]: row for row in response.context["result"]["teams"]}
    current = dict(zip(bars[0]["x"], bars[0]["y"], strict=True))
    assert current["vision"] == pytest.approx(waits["vision"]["wait_before_h"])
    assert max(current.values()) > 0


def test_too_little_history_says_so_instead_of_comparing_zeros(
    client, platform_admin, member, team, h100, quotas
):
    job = Job.objects.create(
        team=team, submitted_by=member, argv=["x"], gpu_model=h100, gpu_count=1,
        max_runtime_seconds=600, status="succeeded",
    )  # fmt: skip
    Job.objects.filter(pk=job.pk).update(submitted_at=timezone.now() - timedelta(hours=1))
    client.force_login(platform_admin)
    html = client.post("/jobs/what-if/", form()).content.decode()
    assert 'data-testid="whatif-too-little"' in html
    assert "Only 1 job was submitted in the last 7d" in html
    assert 'data-testid="whatif-result"' not in html and "dashboard-figures" not in html


def test_when_nobody_waits_the_page_says_so_and_draws_no_empty_chart(
    client, platform_admin, member, team, h100, quotas
):
    for hours in range(1, 7):
        job = Job.objects.create(
            team=team, submitted_by=member, argv=["x"], gpu_model=h100, gpu_count=1,
            max_runtime_seconds=600, status="succeeded",
        )  # fmt: skip
        Job.objects.filter(pk=job.pk).update(submitted_at=timezone.now() - timedelta(hours=hours))
    client.force_login(platform_admin)
    html = client.post("/jobs/what-if/", form()).content.decode()
    assert 'data-testid="whatif-no-wait"' in html
    assert "dashboard-figures" not in html
