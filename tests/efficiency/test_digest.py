"""The weekly digest: content, once per week, opt-out per team (team admins only), and the
real path: the beat task by name, through the broker, to a portal worker process, out through
the outbox to the mail backend."""

import subprocess
import sys

import pytest
from celery import current_app
from django.conf import settings
from django.core import mail

from apps.audit.models import AuditEvent
from apps.efficiency.models import DigestSent, DigestSetting
from apps.efficiency.services import digest_setting_set, weekly_digest_send
from apps.outbox.models import OutboxMessage
from portal.exceptions import PolicyRefusal
from tests.processes import ROOT, portal_environment, stop, wait_for


@pytest.mark.django_db
def test_digest_tells_team_admins_what_their_team_could_have_saved(
    scenario, team_admin, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks(execute=True):
        result = weekly_digest_send(week_of=scenario.t0.date())
    # vision has an admin and findings; nlp has findings but no admin.
    assert result == {"sent": 1, "skipped": 1}
    assert len(mail.outbox) == 1
    message = mail.outbox[0]
    assert message.to == [team_admin.email] and "vision" in message.subject
    # The hand-computed total of test_advice.py, per user and the largest item first.
    assert "23.79 USD" in message.body
    assert "- alice: 2 flagged, 16.79 USD" in message.body
    assert "- bob: 2 flagged, 7.00 USD" in message.body
    assert f"job #{scenario.a.pk} (alice, 4 x H100-SXM-80GB)" in message.body
    assert "/efficiency/?team=vision" in message.body
    assert "Monday to Monday UTC" in message.body
    with django_capture_on_commit_callbacks(execute=True):
        again = weekly_digest_send(week_of=scenario.t0.date())
    assert again["sent"] == 0 and len(mail.outbox) == 1  # once per week


@pytest.mark.django_db
def test_a_team_that_opted_out_gets_no_digest(
    scenario, team, team_admin, member, django_capture_on_commit_callbacks
):
    with pytest.raises(PolicyRefusal):
        digest_setting_set(team=team, weekly_digest=False, actor=member)
    digest_setting_set(team=team, weekly_digest=False, actor=team_admin)
    assert AuditEvent.objects.filter(action="efficiency.digest").count() == 1
    with django_capture_on_commit_callbacks(execute=True):
        assert weekly_digest_send(week_of=scenario.t0.date())["sent"] == 0
    assert mail.outbox == []


@pytest.mark.django_db
def test_a_week_with_nothing_to_say_sends_nothing(scenario, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True):
        assert weekly_digest_send(week_of=scenario.t0.date().replace(year=2025))["sent"] == 0
    assert mail.outbox == [] and not DigestSent.objects.exists()


@pytest.mark.django_db
def test_digest_toggle_page_is_for_team_admins(scenario, team, team_admin, member, client):
    client.force_login(member)
    response = client.post(f"/efficiency/teams/{team.slug}/digest/", follow=True)
    assert "Only the team" in response.content.decode()
    assert not DigestSetting.objects.filter(team=team).exists()
    assert client.post("/efficiency/teams/nlp/digest/").status_code == 404
    client.force_login(team_admin)
    client.post(f"/efficiency/teams/{team.slug}/digest/")  # no "on": turn it off
    assert DigestSetting.objects.get(team=team).weekly_digest is False
    client.post(f"/efficiency/teams/{team.slug}/digest/", {"weekly_digest": "on"})
    assert DigestSetting.objects.get(team=team).weekly_digest is True


def test_beat_schedules_the_digest_weekly():
    from apps.efficiency.tasks import weekly_digest

    entry = settings.CELERY_BEAT_SCHEDULE["efficiency-weekly-digest"]
    assert entry["task"] == weekly_digest.name == "efficiency.weekly_digest"
    assert entry["schedule"].day_of_week == {1}  # Mondays


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_digest_goes_from_the_task_through_a_worker_and_the_outbox_to_email(scenario, team_admin):
    worker = subprocess.Popen(
        [sys.executable, "-m", "celery", "-A", "portal", "worker", "-Q", "portal", "-P", "solo"]
        + ["--without-heartbeat", "--without-mingle", "--without-gossip", "-l", "WARNING"],
        cwd=ROOT,
        env=portal_environment(
            DJANGO_EMAIL_BACKEND="django.core.mail.backends.console.EmailBackend"
        ),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        current_app.send_task(
            "efficiency.weekly_digest",
            kwargs={"week_of": scenario.t0.date().isoformat()},
            queue="portal",
        )
        assert wait_for(
            lambda: OutboxMessage.objects.filter(sent_at__isnull=False).exists(), timeout=120
        ), "the worker sent no digest"
    finally:
        stop(worker)
    output = worker.stdout.read()
    sent = DigestSent.objects.get()
    assert sent.team.slug == "vision" and str(sent.saving) == "23.79"
    # The console mail backend of the worker printed the email it sent.
    assert f"To: {team_admin.email}" in output and "23.79 USD" in output


@pytest.mark.django_db
def test_admin_lists_digests_read_only(
    scenario, team_admin, client, django_capture_on_commit_callbacks
):
    from tests.factories import PlatformAdminFactory

    with django_capture_on_commit_callbacks(execute=True):
        weekly_digest_send(week_of=scenario.t0.date())
    client.force_login(PlatformAdminFactory(is_staff=True, is_superuser=True))
    page = client.get("/admin/efficiency/digestsent/")
    assert page.status_code == 200 and "vision" in page.content.decode()
    assert client.get("/admin/efficiency/digestsent/add/").status_code == 403


@pytest.mark.django_db
def test_each_admin_reads_the_weeks_bounds_in_their_zone(
    scenario, team_admin, django_capture_on_commit_callbacks
):
    team_admin.time_zone = "America/New_York"
    team_admin.save(update_fields=["time_zone"])
    with django_capture_on_commit_callbacks(execute=True):
        weekly_digest_send(week_of=scenario.t0.date())
    (message,) = mail.outbox
    # The week starts Monday 00:00 UTC: Sunday 19:00 in New York.
    assert "19:00 EST" in message.body and "UTC)" in message.body
