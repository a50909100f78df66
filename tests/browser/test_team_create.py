"""A platform admin creates a team with a quota in the browser; a bad slug is explained next
to the field; the new team's page links its statement and whom to ask."""

from playwright.sync_api import expect

from apps.audit.models import AuditEvent
from apps.fleet.models import GpuModel
from apps.teams.models import Quota, Team


def test_admin_creates_a_team_with_a_quota(login_as):
    page = login_as("admin")
    page.get_by_test_id("nav").get_by_role("link", name="Teams", exact=True).click()
    page.get_by_role("link", name="New team").click()
    page.fill("#id_slug", "vision")
    page.fill("#id_name", "Genomics")
    page.get_by_role("button", name="Create team").click()
    expect(page.get_by_role("alert")).to_contain_text(
        "A team with the slug “vision” already exists."
    )

    page.fill("#id_slug", "genomics")
    l40s = GpuModel.objects.get(name="L40S-48GB")
    page.fill(f"#id_guaranteed_{l40s.pk}", "1")
    page.get_by_role("button", name="Create team").click()
    expect(page.locator(f"#id_limit_{l40s.pk}-error")).to_contain_text("Give both numbers")
    page.fill(f"#id_limit_{l40s.pk}", "3")
    page.get_by_role("button", name="Create team").click()

    page.wait_for_url("**/teams/genomics/")
    expect(page.get_by_role("heading", name="Genomics")).to_be_visible()
    expect(page.get_by_test_id("team-quota")).to_contain_text("L40S-48GB")
    expect(page.get_by_test_id("team-links")).to_contain_text("This month's statement")
    team = Team.objects.get(slug="genomics")
    assert Quota.objects.get(team=team).limit == 3
    assert AuditEvent.objects.filter(action="team.create").count() == 1


def test_a_member_without_quota_finds_whom_to_ask(login_as):
    Quota.objects.filter(team__slug="vision").delete()
    page = login_as("alice")
    page.goto("/teams/vision/")
    page.get_by_role("link", name="Ask a platform admin").click()
    expect(page.get_by_role("heading", name="Platform admins")).to_be_visible()
    expect(page.get_by_test_id("platform-admins").locator("[data-admin=admin]")).to_be_visible()
