import re

import pytest

from apps.audit.models import AuditEvent
from apps.audit.selectors import FieldChange, audit_filter_choices, field_changes
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


def test_audit_filter_menus_list_each_value_once(client, platform_admin, team):
    # Many events of the same action: the menus must still list it once (the model's default
    # ordering used to leak into SELECT DISTINCT and repeat it per event).
    for i in range(12):
        audit_record(actor=platform_admin, action="quota.change", target=team, after={"limit": i})
    for _ in range(9):
        audit_record(actor=None, action="node.drain", target=team)
    client.force_login(platform_admin)
    html = client.get("/audit/").content.decode()
    assert html.count('<option value="quota.change"') == 1
    assert html.count('<option value="node.drain"') == 1
    assert html.count('<option value="teams.team"') == 1
    assert html.count('<option value="root-admin"') == 1
    assert html.count('<option value="system"') == 1
    choices = audit_filter_choices()
    assert choices["actions"] == ["node.drain", "quota.change"]
    assert choices["actors"] == ["root-admin", "system"]


def test_field_changes_lists_changed_fields_only():
    changes = field_changes(
        {"guaranteed": 2, "limit": 4, "gpu_model": "H100", "note": None},
        {"guaranteed": 2, "limit": 8, "gpu_model": "H100", "note": "burst", "active": True},
    )
    assert changes == [
        FieldChange("limit", "4", "8"),
        FieldChange("note", "—", "burst"),
        FieldChange("active", "—", "yes"),
    ]


def test_field_changes_of_creation_deletion_and_nothing():
    assert field_changes(None, {"slug": "audio"}) == [FieldChange("slug", "—", "audio")]
    assert field_changes({"slug": "audio"}, None) == [FieldChange("slug", "audio", "—")]
    assert field_changes(None, None) == []
    assert field_changes({"tags": ["a"]}, {"tags": ["a", "b"]}) == [
        FieldChange("tags", '["a"]', '["a", "b"]')
    ]


def test_audit_page_shows_a_field_diff_not_python_dicts(client, platform_admin, team):
    audit_record(
        actor=platform_admin,
        action="quota.change",
        target=team,
        before={"guaranteed": 2, "limit": 4},
        after={"guaranteed": 2, "limit": 6},
    )
    client.force_login(platform_admin)
    html = client.get("/audit/").content.decode()
    assert "{&#x27;" not in html and "{'" not in html  # no raw dict repr
    row = re.search(r'<tr data-field="limit">(.*?)</tr>', html, re.S)
    assert row is not None
    assert re.findall(r'<td class="(before|after)">([^<]*)</td>', row.group(1)) == [
        ("before", "4"),
        ("after", "6"),
    ]
    assert 'data-field="guaranteed"' not in html  # unchanged fields are left out
