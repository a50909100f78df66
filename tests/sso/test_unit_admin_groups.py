"""IdP groups map to organisation unit admins (SSO_UNIT_ADMIN_GROUPS), against the real
provider process: granted at sign-in, removed when the group goes (at the next sign-in and by
the periodic check), audited; units no group maps to keep the admins set in the portal."""

import pytest
from django.test import Client

from apps.audit.models import AuditEvent
from apps.sso.provider_check import sso_identities_check
from apps.teams.models import ROOT_UNIT_SLUG, OrgUnit, UnitMembership, User
from tests.sso.test_login import claims, refused, sign_in

pytestmark = pytest.mark.django_db


@pytest.fixture
def units(settings, teams):
    root = OrgUnit.objects.get(slug=ROOT_UNIT_SLUG)
    research = OrgUnit.objects.create(slug="research", name="Research", parent=root)
    ops = OrgUnit.objects.create(slug="ops", name="Ops", parent=root)
    settings.SSO_UNIT_ADMIN_GROUPS = {"research-leads": "research", "ghost-leads": "nowhere"}
    return {"research": research, "ops": ops}


def admin_of(username: str) -> set[str]:
    return set(
        UnitMembership.objects.filter(user__username=username).values_list("unit__slug", flat=True)
    )


def test_a_mapped_group_makes_a_unit_admin_at_sign_in_and_its_loss_removes_it(sso, units):
    sso.set_user("sub-rita", claims("rita", groups=["research-leads"]))
    assert sign_in(Client(), sso, "sub-rita").status_code == 302  # the unit role alone admits
    rita = User.objects.get(username="rita")
    assert admin_of("rita") == {"research"}
    added = AuditEvent.objects.get(action="unit.admin_add")
    assert added.object_repr == "research" and "group research-leads" in added.reason
    # An admin of ops set in the portal stays: no group maps to ops.
    UnitMembership.objects.create(user=rita, unit=units["ops"])

    sso.set_user("sub-rita", claims("rita", groups=["gpu-vision"]))
    assert sign_in(Client(), sso, "sub-rita").status_code == 302
    assert admin_of("rita") == {"ops"}
    removed = AuditEvent.objects.get(action="unit.admin_remove")
    assert removed.object_repr == "research" and removed.before == {"user": "rita"}


def test_a_group_mapped_to_a_unit_that_does_not_exist_grants_nothing(sso, units):
    sso.set_user("sub-gus", claims("gus", groups=["ghost-leads"]))
    refused(sign_in(Client(), sso, "sub-gus"), "no_mapped_groups", status=403)
    assert not User.objects.filter(username="gus").exists()


def test_the_periodic_check_removes_a_unit_admin_whose_group_went(sso, units):
    sso.set_user("sub-rita", claims("rita", groups=["research-leads", "gpu-vision"]))
    sign_in(Client(), sso, "sub-rita")
    assert admin_of("rita") == {"research"}
    sso.set_user("sub-rita", claims("rita", groups=["gpu-vision"]))
    assert sso_identities_check() == {"synced": 1}
    assert admin_of("rita") == set()
    assert "Periodic check" in AuditEvent.objects.get(action="unit.admin_remove").reason


def test_losing_every_group_ends_the_unit_admin_role_with_the_rest(sso, units):
    sso.set_user("sub-rita", claims("rita", groups=["research-leads"]))
    sign_in(Client(), sso, "sub-rita")
    sso.set_user("sub-rita", claims("rita", groups=[]))
    refused(sign_in(Client(), sso, "sub-rita"), "no_mapped_groups", status=403)
    assert admin_of("rita") == set()
    assert AuditEvent.objects.filter(action="sso_identity.deprovision").exists()
