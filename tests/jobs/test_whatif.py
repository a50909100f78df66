"""The what-if page: replaying recent jobs under proposed quotas, for platform admins only.
A POST records a run and answers at once; a worker replays it and the page follows the run."""

import json
from datetime import timedelta
from decimal import Decimal

import pytest
from django.utils import timezone

from apps.billing.models import RateCard
from apps.jobs.choices import WhatIfStatus
from apps.jobs.models import Job, WhatIfRun
from apps.jobs.whatif import whatif_run_execute
from apps.outbox.models import OutboxMessage
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


def replay(client, data: dict):
    """Post the form (which must answer at once with a redirect to the run), replay the run as
    the worker would, and return the page that shows it."""
    response = client.post("/jobs/what-if/", data)
    assert response.status_code == 302 and "?run=" in response["Location"]
    run = WhatIfRun.objects.get(pk=int(response["Location"].split("?run=")[1]))
    assert run.status == WhatIfStatus.QUEUED and run.result is None  # nothing ran in the request
    assert whatif_run_execute(run_id=run.pk) == WhatIfStatus.DONE
    return client.get(response["Location"])


def form(**overrides) -> dict:
    data = {"window": "7d", "policy": "fairshare", "g-0": "4", "l-0": "16", "g-1": "12",
            "l-1": "16"}  # fmt: skip
    return data | overrides


def test_giving_a_team_the_bigger_guarantee_shortens_its_wait(client, platform_admin, history):
    client.force_login(platform_admin)
    page = client.get("/jobs/what-if/").content.decode()
    assert 'data-testid="whatif-quotas"' in page and 'value="12"' in page
    # Rows are ordered nlp, vision: swap the guarantees.
    response = replay(client, form())
    assert response.status_code == 200
    result = rows(response)
    assert result["vision"]["jobs"] == 8 and result["nlp"]["jobs"] == 8
    assert result["vision"]["wait_after_h"] < result["vision"]["wait_before_h"]
    assert result["nlp"]["wait_after_h"] > result["nlp"]["wait_before_h"]
    for team in ("vision", "nlp"):  # every job ran: 8 jobs x 4 GPUs x 2 h
        assert result[team]["gpu_hours_after"] == pytest.approx(64)
        assert Decimal(result[team]["cost_after"]) >= Decimal("128.00")  # more if over quota
    assert 'id="dashboard-figures"' in response.content.decode()


def test_the_run_says_which_teams_a_proposal_leaves_better_or_worse_off(
    client, platform_admin, history
):
    client.force_login(platform_admin)
    result = replay(client, form()).context["result"]
    by_team = {row["team"]: row for row in result["teams"]}
    vision, nlp = by_team["vision"], by_team["nlp"]
    assert vision["change"] == "better" and nlp["change"] == "worse"
    assert vision["jct_after_h"] < vision["jct_before_h"]
    # All sixteen jobs arrive at once, when neither team runs anything: each one fits its
    # team's unused guarantee, and vision's wait for the last of them shrinks with 12 GPUs.
    assert vision["guarantee_wait_p99_after_h"] < vision["guarantee_wait_p99_before_h"]
    assert nlp["guarantee_wait_p99_after_h"] > nlp["guarantee_wait_p99_before_h"]
    # With 4 guaranteed GPUs vision runs its 4-GPU jobs one by one alone as well (the
    # fairshare replay lends it nlp's spare GPUs): not worse off than alone, before or after.
    assert vision["worse_off_than_alone_before"] is False
    assert vision["worst_rho_before"] is not None
    overall = result["guarantee"]
    assert set(overall) == {"before", "after"}
    assert overall["before"]["teams_worse_off_than_alone"] == []


def test_the_page_lists_the_teams_worse_off_first_then_those_better_off(
    client, platform_admin, history
):
    client.force_login(platform_admin)
    html = replay(client, form()).content.decode()
    assert (
        '<p data-testid="whatif-verdict">Worse off: nlp. Better off: vision. '
        "About the same: no team.</p>" in html
    )
    table = html.split('data-testid="whatif-better-worse"', 1)[1].split("</table>", 1)[0]
    body = table.split("<tbody>", 1)[1]
    assert body.index('data-team="nlp"') < body.index('data-team="vision"')
    nlp = body.split('data-team="nlp"', 1)[1].split("</tr>", 1)[0]
    assert 'data-change="worse" class="warn"><td>nlp</td><td>Worse off</td>' in nlp
    vision = body.split('data-team="vision"', 1)[1].split("</tr>", 1)[0]
    assert "<td>vision</td><td>Better off</td>" in vision


def test_a_result_stored_before_runs_compared_teams_shows_no_comparison(
    client, platform_admin, history
):
    client.force_login(platform_admin)
    response = replay(client, form())
    run = response.context["run"]
    result = dict(run.result)
    result["teams"] = [{k: v for k, v in row.items() if k != "change"} for row in result["teams"]]
    WhatIfRun.objects.filter(pk=run.pk).update(result=result)
    html = client.get(f"/jobs/what-if/?run={run.pk}").content.decode()
    assert 'data-testid="whatif-result"' in html
    assert 'data-testid="whatif-better-worse"' not in html


def test_bad_quota_numbers_are_refused_inline(client, platform_admin, history):
    client.force_login(platform_admin)
    response = client.post("/jobs/what-if/", form(**{"g-0": "20", "l-0": "16"}))
    assert response.status_code == 400
    assert "The limit (16) must be at least guaranteed (20)." in response.content.decode()
    response = client.post("/jobs/what-if/", form(**{"l-1": "lots"}))
    assert response.status_code == 400 and "whole numbers" in response.content.decode()
    assert Quota.objects.get(team__slug="nlp").guaranteed == 12  # nothing was changed
    assert not WhatIfRun.objects.exists() and not OutboxMessage.objects.exists()  # nor started


def test_empty_history_says_so(client, platform_admin, quotas):
    client.force_login(platform_admin)
    response = replay(client, form())
    assert 'data-testid="whatif-empty"' in response.content.decode()


def test_only_platform_admins(client, member, finance_user, platform_admin, history):
    client.force_login(platform_admin)
    run_page = client.post("/jobs/what-if/", form())["Location"]
    run = WhatIfRun.objects.get()
    for user in (member, finance_user):
        client.force_login(user)
        assert client.get("/jobs/what-if/").status_code == 403
        assert client.get(run_page).status_code == 403
        assert client.get(f"/jobs/what-if/runs/{run.pk}/").status_code == 404
        assert client.post("/jobs/what-if/", form()).status_code == 403
    assert WhatIfRun.objects.count() == 1


def test_proposed_numbers_stay_in_the_form_after_a_run(client, platform_admin, history):
    client.force_login(platform_admin)
    html = replay(client, form(**{"g-0": "5", "g-1": "9"})).content.decode()
    table = html.split('data-testid="whatif-quotas"', 1)[1].split("</table>", 1)[0]
    assert 'name="g-0" type="number" min="0" value="5"' in table
    assert 'name="g-1" type="number" min="0" value="9"' in table
    assert "now 12" in table  # nlp's current guarantee is shown beside the proposal


def test_the_chart_gets_the_waits_it_compares(client, platform_admin, history):
    client.force_login(platform_admin)
    response = replay(client, form())
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
    html = replay(client, form()).content.decode()
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
    html = replay(client, form()).content.decode()
    assert 'data-testid="whatif-no-wait"' in html
    assert "dashboard-figures" not in html


def test_the_result_compares_the_replays_new_metrics(client, platform_admin, history):
    client.force_login(platform_admin)
    response = replay(client, form())
    result = response.context["result"]
    vision, nlp = rows(response)["vision"], rows(response)["nlp"]
    # vision's jobs start in waves of one, then four: its p95 wait is at least its average.
    assert vision["p95_wait_before_h"] >= vision["wait_before_h"] > 0
    assert vision["p95_wait_after_h"] < vision["p95_wait_before_h"]
    # Slowdown is (end - submit) / run time: a job that waited has one above 1.
    assert vision["slowdown_before"] > 1 and nlp["slowdown_after"] > 1
    assert vision["slowdown_after"] < vision["slowdown_before"]
    for team in (vision, nlp):
        assert team["lost_gpu_hours_before"] >= 0 and team["lost_gpu_hours_after"] >= 0
    for side in ("before", "after"):
        assert 0 < result[side]["jain_fairness"] <= 1
        assert result[side]["gpu_hours_lost"] == pytest.approx(
            sum(row[f"lost_gpu_hours_{side}"] for row in result["teams"])
        )
    html = response.content.decode()
    fairness = html.split('data-testid="whatif-fairness">', 1)[1].split("</p>", 1)[0]
    assert f"now {result['before']['jain_fairness']:.3f}" in fairness
    assert "p95 wait now (h)" in html and "lost to preemption" in html


def test_a_run_shows_its_progress_and_polls_until_done(client, platform_admin, history):
    client.force_login(platform_admin)
    location = client.post("/jobs/what-if/", form(**{"g-0": "7"}))["Location"]
    run = WhatIfRun.objects.get()
    assert run.created_by == platform_admin and run.window == "7d" and run.policy == "fairshare"
    assert run.proposed[0] == {"team": "nlp", "model": run.proposed[0]["model"], "guaranteed": 7,
                               "limit": 16}  # fmt: skip
    message = OutboxMessage.objects.get()  # sent once the request's transaction commits
    assert message.name == "jobs.what_if" and message.payload["args"] == [run.pk]
    html = client.get(location).content.decode()
    assert 'data-testid="whatif-progress"' in html and "js/what_if.js" in html
    assert f'data-whatif-poll="/jobs/what-if/runs/{run.pk}/"' in html
    assert 'name="g-0" type="number" min="0" value="7"' in html  # the proposal is on screen
    assert 'data-testid="whatif-result"' not in html
    status = client.get(f"/jobs/what-if/runs/{run.pk}/").json()
    assert status == {"id": run.pk, "status": WhatIfStatus.QUEUED, "progress": 0, "error": ""}
    whatif_run_execute(run_id=run.pk)
    assert client.get(f"/jobs/what-if/runs/{run.pk}/").json()["status"] == WhatIfStatus.DONE
    assert client.get(f"/jobs/what-if/runs/{run.pk}/").json()["progress"] == 100
    html = client.get(location).content.decode()
    assert 'data-testid="whatif-result"' in html and "js/what_if.js" not in html
    # A redelivered task leaves a finished run alone.
    assert whatif_run_execute(run_id=run.pk) == WhatIfStatus.DONE


def test_a_failed_replay_says_so_instead_of_polling_forever(
    client, platform_admin, history, monkeypatch
):
    from apps.jobs import whatif

    def broken(*args, **kwargs):
        raise RuntimeError("the fleet could not be read")

    client.force_login(platform_admin)
    location = client.post("/jobs/what-if/", form())["Location"]
    run = WhatIfRun.objects.get()
    monkeypatch.setattr(whatif, "what_if", broken)
    with pytest.raises(RuntimeError):
        whatif_run_execute(run_id=run.pk)
    run.refresh_from_db()
    assert run.status == WhatIfStatus.FAILED and run.finished_at
    html = client.get(location).content.decode()
    assert 'data-testid="whatif-failed"' in html and "the fleet could not be read" in html
    assert "js/what_if.js" not in html


def test_an_unknown_run_is_not_found(client, platform_admin):
    client.force_login(platform_admin)
    assert client.get("/jobs/what-if/?run=999999").status_code == 404
    assert client.get("/jobs/what-if/?run=abc").status_code == 404
    assert client.get("/jobs/what-if/runs/999999/").status_code == 404


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_a_real_worker_replays_the_run_the_form_started(client, platform_admin, history):
    from celery.contrib.testing.worker import start_worker

    from portal.celery import app
    from tests.processes import wait_for

    app.control.purge()
    client.force_login(platform_admin)
    with start_worker(app, pool="solo", perform_ping_check=False, shutdown_timeout=30):
        response = client.post("/jobs/what-if/", form())
        assert response.status_code == 302  # answered before any replay
        run = WhatIfRun.objects.get()

        def done() -> bool:
            return client.get(f"/jobs/what-if/runs/{run.pk}/").json()["status"] == WhatIfStatus.DONE

        assert wait_for(done, timeout=60)
    run.refresh_from_db()
    assert run.progress == 100 and run.started_at and run.finished_at >= run.started_at
    teams = {row["team"]: row for row in run.result["teams"]}
    assert teams["vision"]["wait_after_h"] < teams["vision"]["wait_before_h"]
    assert teams["vision"]["p95_wait_before_h"] > 0 and teams["nlp"]["slowdown_after"] > 1
    assert 0 < run.result["after"]["jain_fairness"] <= 1
    html = client.get(response["Location"]).content.decode()
    assert 'data-testid="whatif-result"' in html


def test_a_run_whose_worker_died_is_failed_by_the_sweeper_and_says_so(
    client, platform_admin, history, monkeypatch, settings
):
    from apps.jobs import tasks, whatif

    settings.JOBS_WHATIF_STALL_MINUTES = 15

    def worker_killed(*args, progress, **kwargs):
        progress(30)
        raise SystemExit(1)  # what a warm shutdown leaves: no result, no failure written

    client.force_login(platform_admin)
    location = client.post("/jobs/what-if/", form())["Location"]
    run = WhatIfRun.objects.get()
    monkeypatch.setattr(whatif, "what_if", worker_killed)
    with pytest.raises(SystemExit):
        whatif_run_execute(run_id=run.pk)
    run.refresh_from_db()
    assert run.status == WhatIfStatus.RUNNING and run.progress == 30 and run.progress_at
    # Still reporting within the stall time: left alone.
    soon = run.progress_at + timedelta(minutes=14)
    assert whatif.whatif_runs_fail_stalled(now=soon) == []
    later = run.progress_at + timedelta(minutes=16)
    assert whatif.whatif_runs_fail_stalled(now=later) == [run.pk]
    run.refresh_from_db()
    assert run.status == WhatIfStatus.FAILED and run.finished_at == later
    assert "stopped reporting progress for 15 minutes" in run.error
    html = client.get(location).content.decode()
    assert 'data-testid="whatif-failed"' in html and "Start the run again" in html
    assert "js/what_if.js" not in html  # the page stops polling
    assert client.get(f"/jobs/what-if/runs/{run.pk}/").json()["status"] == WhatIfStatus.FAILED
    # The beat task finds nothing more; done, queued and failed runs are never touched.
    done = WhatIfRun.objects.create(window="7d", policy="fifo", status=WhatIfStatus.DONE)
    queued = WhatIfRun.objects.create(window="7d", policy="fifo")
    WhatIfRun.objects.filter(pk__in=[done.pk, queued.pk]).update(
        created_at=timezone.now() - timedelta(days=1)
    )
    assert tasks.what_if_sweep() == []
    from django.conf import settings as django_settings

    from portal.celery import app

    beat = django_settings.CELERY_BEAT_SCHEDULE["jobs-what-if-sweep"]
    assert beat["task"] == "jobs.what_if_sweep" and beat["task"] in app.tasks
    assert set(WhatIfRun.objects.values_list("pk", "status")) == {
        (run.pk, WhatIfStatus.FAILED), (done.pk, WhatIfStatus.DONE),
        (queued.pk, WhatIfStatus.QUEUED),
    }  # fmt: skip


def test_a_run_started_before_progress_was_timed_is_swept_by_its_start(platform_admin, settings):
    from apps.jobs.whatif import whatif_runs_fail_stalled

    settings.JOBS_WHATIF_STALL_MINUTES = 10
    started = timezone.now() - timedelta(minutes=11)
    old = WhatIfRun.objects.create(
        window="7d", policy="fifo", status=WhatIfStatus.RUNNING, started_at=started
    )
    fresh = WhatIfRun.objects.create(
        window="7d", policy="fifo", status=WhatIfStatus.RUNNING, started_at=timezone.now()
    )
    assert whatif_runs_fail_stalled() == [old.pk]
    fresh.refresh_from_db()
    assert fresh.status == WhatIfStatus.RUNNING


def test_a_long_replay_keeps_reporting_progress_between_its_steps():
    from apps.jobs.scheduler.replay import PROGRESS_EVERY_EVENTS, TraceJob, simulate
    from apps.jobs.scheduler.state import GpuInfo, TeamQuota

    gpus = [GpuInfo(i, "n0", "H100", "n0") for i in range(8)]
    jobs = [TraceJob(i, float(i), 5.0, 1, "vision") for i in range(3 * PROGRESS_EVERY_EVENTS)]
    seen: list[float] = []
    quota = [TeamQuota("vision", None, 0, 8)]
    simulate(jobs, gpus, quota, "fifo", progress=seen.append)
    assert len(seen) >= 3 and seen == sorted(seen) and 0 < seen[0] < seen[-1] <= 1


def test_the_run_reports_the_guarantee_wait_and_sharing_per_unit(client, platform_admin, history):
    from apps.teams.models import ROOT_UNIT_SLUG, OrgUnit, Team
    from apps.teams.services import unit_create

    root = OrgUnit.objects.get(slug=ROOT_UNIT_SLUG)
    research = unit_create(slug="research", name="Research", parent=root, actor=platform_admin)
    Team.objects.filter(slug="vision").update(unit=research)
    client.force_login(platform_admin)
    response = replay(client, form())
    result = response.context["result"]
    units = {row["unit"]: row for row in result["units"]}
    page = response.content.decode()
    assert '<tr data-unit="Organisation / Research" data-depth="1"' in page
    teams = {row["team"]: row for row in result["teams"]}
    assert units["Organisation / Research"]["jobs_before"] == 8  # vision alone
    assert units[root.name]["jobs_after"] == 16
    # one team below research: its figures are vision's
    research_row = units["Organisation / Research"]
    assert research_row["guarantee_wait_p99_after_h"] == pytest.approx(
        teams["vision"]["guarantee_wait_p99_after_h"]
    )
    assert research_row["guarantee_wait_p99_after_h"] < research_row["guarantee_wait_p99_before_h"]
