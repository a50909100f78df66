"""A unit admin finds the organisation tree, adds a child unit (a bad slug explained next to
the field), gives it a quota after confirming (one over the department's envelope refused with
the numbers), and sees the team page's unit path."""

from playwright.sync_api import expect

from apps.audit.models import AuditEvent
from apps.teams.models import OrgUnit, UnitQuota


def test_unit_admin_shapes_their_department(login_as):
    page = login_as("rita")
    questions = []
    page.on("dialog", lambda dialog: (questions.append(dialog.message), dialog.accept()))
    page.get_by_test_id("nav").get_by_role("link", name="Teams", exact=True).click()
    page.get_by_role("link", name="Organisation units").click()
    tree = page.get_by_test_id("unit-tree")
    expect(tree.locator("[data-unit=research]")).to_contain_text("Organisation / Research")
    expect(tree.locator("[data-unit=research]")).to_contain_text("H100-SXM-80GB: 12 / 16")
    expect(tree.locator("[data-unit=engineering]")).to_have_count(0)

    tree.get_by_role("link", name="Research").click()
    expect(page.get_by_test_id("form-set_quota")).to_have_count(0)  # not her own envelope
    form = page.get_by_test_id("form-create_unit")
    form.get_by_label("Slug").fill("Vision Lab")
    form.get_by_label("Name").fill("Vision lab")
    form.get_by_role("button", name="Create unit").click()
    expect(page.locator("#id_child-slug-error")).to_contain_text("Use lowercase letters")
    page.get_by_test_id("form-create_unit").get_by_label("Slug").fill("vision-lab")
    page.get_by_test_id("form-create_unit").get_by_role("button", name="Create unit").click()
    expect(page.get_by_role("status")).to_contain_text("Unit Vision lab is created in Research.")

    page.get_by_test_id("unit-children").get_by_role("link", name="Vision lab").click()
    expect(page.get_by_test_id("unit-path")).to_contain_text("Organisation / Research / Vision lab")
    quota = page.get_by_test_id("form-set_quota")
    quota.get_by_label("GPU model").select_option("H100-SXM-80GB")
    quota.get_by_label("Guaranteed").fill("2")
    quota.get_by_label("Limit").fill("4")
    quota.get_by_role("button", name="Save quota").click()
    expect(page.locator("#id_quota-guaranteed-error")).to_contain_text("more than the 12")
    assert questions == ["Change this unit's quota?"]
    assert not UnitQuota.objects.filter(unit__slug="vision-lab").exists()

    page.get_by_test_id("nav").get_by_role("link", name="Teams", exact=True).click()
    page.get_by_role("link", name="vision", exact=True).click()
    expect(page.get_by_test_id("team-unit")).to_contain_text("Organisation / Research")
    assert OrgUnit.objects.get(slug="vision-lab").parent.slug == "research"
    assert AuditEvent.objects.filter(action="unit.create", actor__username="rita").count() == 1
