"""Group mappings are managed on the admin site, and every change there is audited."""

import pytest
from django.test import Client

from apps.audit.models import AuditEvent
from apps.sso.models import GroupMapping
from tests.factories import TeamFactory, UserFactory

pytestmark = pytest.mark.django_db


def test_a_platform_admin_maps_a_group_to_a_team_on_the_admin_site_and_it_is_audited():
    team = TeamFactory(slug="vision")
    admin = UserFactory(username="root", is_superuser=True, is_staff=True)
    client = Client()
    client.force_login(admin)
    response = client.post(
        "/admin/sso/groupmapping/add/",
        {"group": "gpu-vision", "role": "team_admin", "team": team.pk},
    )
    assert response.status_code == 302, response.content.decode()[:2000]
    mapping = GroupMapping.objects.get()
    assert (mapping.group, mapping.role, mapping.team) == ("gpu-vision", "team_admin", team)
    event = AuditEvent.objects.get(action="groupmapping.create")
    assert event.actor == admin and event.after["group"] == "gpu-vision"


def test_the_admin_form_refuses_a_team_role_without_a_team():
    admin = UserFactory(username="root", is_superuser=True, is_staff=True)
    client = Client()
    client.force_login(admin)
    response = client.post(
        "/admin/sso/groupmapping/add/", {"group": "gpu-x", "role": "member", "team": ""}
    )
    assert response.status_code == 200
    assert "Team roles need a team" in response.content.decode()
    assert not GroupMapping.objects.exists()
