"""The demo's organisation: two departments of two teams each, Research's envelope and its
unit admin, who may sign in and sees only their department; seeding twice changes nothing."""

import pytest
from django.core.management import call_command
from django.test import Client

from apps.teams.models import OrgUnit, UnitMembership, UnitQuota
from apps.teams.selectors import unit_path_label

pytestmark = pytest.mark.django_db


def test_demo_seeds_two_departments_with_two_teams_and_a_unit_admin(settings):
    settings.DEMO_PASSWORD = "s3cret-demo"
    call_command("seed_demo", "--without-reservations")
    call_command("seed_demo", "--without-reservations")
    departments = {
        unit.slug: sorted(unit.teams.values_list("slug", flat=True))
        for unit in OrgUnit.objects.filter(parent__slug="organisation")
    }
    assert departments == {"engineering": ["robotics", "speech"], "research": ["nlp", "vision"]}
    assert unit_path_label(OrgUnit.objects.get(slug="research")) == "Organisation / Research"
    envelope = UnitQuota.objects.get(unit__slug="research")
    assert (envelope.gpu_model.name, envelope.guaranteed, envelope.limit) == (
        "H100-SXM-80GB",
        12,
        16,
    )
    assert list(UnitMembership.objects.values_list("user__username", "unit__slug")) == [
        ("rita", "research")
    ]
    client = Client()
    signed_in = client.post("/login/", {"username": "rita", "password": "s3cret-demo"})
    assert signed_in.status_code == 302
    html = client.get("/teams/units/").text
    assert 'data-unit="research"' in html and 'data-unit="engineering"' not in html
