"""Platform admins create teams in the portal (with optional quotas, audited); the team page
links its statement and the digest switch; "ask a platform admin" links to the admins."""

import pytest

from apps.audit.models import AuditEvent
from apps.teams.models import Quota, Team
from tests.factories import PlatformAdminFactory

pytestmark = pytest.mark.django_db


def _post(client, **fields):
    data = {"slug": "genomics", "name": "Genomics", "cost_center": "CC-9"}
    data.update(fields)
    return client.post("/teams/new/", data)


def test_platform_admin_creates_a_team_with_quotas_and_it_is_audited(client, platform_admin, h100):
    client.force_login(platform_admin)
    response = _post(client, **{f"guaranteed_{h100.pk}": 2, f"limit_{h100.pk}": 6})
    assert response.status_code == 302 and response.url == "/teams/genomics/"
    team = Team.objects.get(slug="genomics")
    assert (team.name, team.cost_center) == ("Genomics", "CC-9")
    quota = Quota.objects.get(team=team)
    assert (quota.gpu_model, quota.guaranteed, quota.limit) == (h100, 2, 6)
    actions = list(AuditEvent.objects.order_by("id").values_list("action", "actor__username"))
    assert actions == [("team.create", "root-admin"), ("quota.create", "root-admin")]


def test_quotas_are_optional(client, platform_admin, fleet):
    client.force_login(platform_admin)
    assert _post(client).status_code == 302
    assert Team.objects.filter(slug="genomics").exists() and not Quota.objects.exists()


@pytest.mark.parametrize("who", ["member", "team_admin", "finance_user"])
def test_only_platform_admins_may_create_teams(client, request, who, fleet):
    client.force_login(request.getfixturevalue(who))
    assert client.get("/teams/new/").status_code == 403
    assert _post(client).status_code == 403
    assert not Team.objects.filter(slug="genomics").exists()
    assert 'href="/teams/new/"' not in client.get("/teams/").content.decode()


@pytest.mark.parametrize(
    ("fields", "field", "message"),
    [
        ({"slug": "Bad Slug"}, "slug", "Use lowercase letters, digits and hyphens"),
        ({"slug": "vision"}, None, "A team with the slug “vision” already exists."),
        ({"slug": "new"}, "slug", "names a portal page"),
        ({"name": ""}, "name", "This field is required."),
        ({"guaranteed_any": 3}, "limit_any", "Give both numbers for any model, or neither."),
        ({"guaranteed_any": 5, "limit_any": 2}, "limit_any", "must be at least guaranteed (5)"),
        ({"guaranteed_any": -1, "limit_any": 2}, "guaranteed_any", "greater than or equal to 0"),
    ],
)
def test_bad_input_is_refused_with_a_clear_message_and_nothing_written(
    client, platform_admin, team, fleet, fields, field, message
):
    client.force_login(platform_admin)
    response = _post(client, **fields)
    assert response.status_code == 200
    form = response.context["form"]
    errors = form.errors.get(field or "__all__", [])
    assert any(message in e for e in errors), form.errors
    assert message[-20:] in response.content.decode()  # shown on the page
    assert list(Team.objects.values_list("slug", flat=True)) == ["vision"]
    assert not Quota.objects.exists() and not AuditEvent.objects.exists()


def test_a_refused_quota_leaves_no_team_behind(platform_admin, fleet):
    from django.core.exceptions import ValidationError

    from apps.teams.services import team_create

    with pytest.raises(ValidationError):
        team_create(slug="genomics", name="G", quotas=[(None, 4, 1)], actor=platform_admin)
    assert not Team.objects.filter(slug="genomics").exists()
    assert not AuditEvent.objects.exists()


def test_team_page_links_statement_and_digest_switch_for_its_admins(client, team_admin, member):
    client.force_login(team_admin)
    page = client.get("/teams/vision/").content.decode()
    assert "/billing/statements/" in page and "/vision/" in page
    assert "#digest-settings" in page
    client.force_login(member)
    page = client.get("/teams/vision/").content.decode()
    assert "statement" not in page.lower() and "#digest-settings" not in page


def test_ask_a_platform_admin_links_to_the_list_of_admins(client, member):
    PlatformAdminFactory(username="pat", email="pat@example.com")
    client.force_login(member)
    page = client.get("/teams/vision/").content.decode()  # vision has no quota
    assert 'href="/teams/platform-admins/">Ask a platform admin</a>' in page
    admins = client.get("/teams/platform-admins/").content.decode()
    assert 'href="mailto:pat@example.com"' in admins
    assert 'data-admin="pat"' in admins and 'data-admin="alice"' not in admins


def test_service_refusals_in_flash_messages_get_the_link():
    from apps.teams.templatetags.team_links import link_platform_admins

    html = link_platform_admins("Team <x> has no quota. Ask a platform admin for one.")
    assert "&lt;x&gt;" in html
    assert '<a href="/teams/platform-admins/">Ask a platform admin</a> for one.' in html
