import pytest

from apps.audit.models import AuditEvent
from apps.audit.services import audit_record
from apps.fleet.models import GpuModel
from apps.teams.models import Team
from tests.factories import TeamFactory

pytestmark = pytest.mark.django_db


def test_audit_record_keeps_actor_name_after_user_is_deleted(platform_admin, team):
    audit_record(
        actor=platform_admin, action="team.change", target=team, before={"a": 1}, after={"a": 2}
    )
    platform_admin.delete()
    event = AuditEvent.objects.get()
    assert event.actor is None and event.actor_name == "root-admin"
    assert (event.object_type, event.object_id, event.object_repr) == (
        "teams.team",
        str(team.pk),
        "vision",
    )


def test_audit_page_filters_and_paginates(client, platform_admin):
    teams = [TeamFactory(slug=f"t{i}") for i in range(60)]
    for t in teams:
        audit_record(actor=platform_admin, action="team.change", target=t)
    audit_record(actor=None, action="node.drain", target=teams[0], reason="nightly")
    client.force_login(platform_admin)
    first = client.get("/audit/").content.decode()
    assert "Page 1 of 2" in first
    filtered = client.get("/audit/?action=node.drain").content.decode()
    assert "nightly" in filtered and "team.change</code>" not in filtered


def test_django_admin_edits_are_audited(client, platform_admin):
    platform_admin.is_staff = platform_admin.is_superuser = True
    platform_admin.save()
    client.force_login(platform_admin)
    response = client.post(
        "/admin/teams/team/add/",
        {
            "slug": "audio",
            "name": "Audio",
            "cost_center": "CC-9",
            "is_active": "on",
            "memberships-TOTAL_FORMS": "0",
            "memberships-INITIAL_FORMS": "0",
        },
    )
    assert response.status_code == 302
    team = Team.objects.get(slug="audio")
    event = AuditEvent.objects.get(action="team.create")
    assert event.after["cost_center"] == "CC-9" and event.object_id == str(team.pk)

    client.post(
        "/admin/fleet/gpumodel/add/", {"name": "B200", "vendor": "NVIDIA", "memory_mib": 183000}
    )
    model = GpuModel.objects.get(name="B200")
    client.post(
        f"/admin/fleet/gpumodel/{model.pk}/change/",
        {"name": "B200-SXM", "vendor": "NVIDIA", "memory_mib": 183000},
    )
    change = AuditEvent.objects.get(action="gpumodel.change")
    assert change.before["name"] == "B200" and change.after["name"] == "B200-SXM"


def test_audit_events_cannot_be_edited_in_django_admin(client, platform_admin, team):
    platform_admin.is_staff = platform_admin.is_superuser = True
    platform_admin.save()
    event = audit_record(actor=platform_admin, action="team.change", target=team)
    client.force_login(platform_admin)
    client.post(f"/admin/audit/auditevent/{event.pk}/delete/", {"post": "yes"})
    assert AuditEvent.objects.filter(pk=event.pk).exists()
