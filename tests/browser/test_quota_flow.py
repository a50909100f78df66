"""Flow 3, the parts the quota page test (test_reservations.py) leaves out: the platform admin's
quota change appears in the audit log, and the team's member sees the new quota on their home
page and in the quota pressure the admin's home page shows."""

from playwright.sync_api import expect

from tests.browser.conftest import login

H100 = "H100-SXM-80GB"


def test_quota_change_is_audited_and_shown_on_home_pages(page, browser):
    login(page, "admin")
    page.goto("/quotas/")
    row = page.locator(f'tr[data-quota="vision/{H100}"]')
    # Within Research's envelope in the demo (12 guaranteed H100 for vision and nlp's 8).
    row.get_by_label(f"Guaranteed GPUs for vision {H100}").fill("3")
    row.get_by_label(f"Limit for vision {H100}").fill("11")
    row.get_by_role("button", name=f"Save quota of vision {H100}").click()
    expect(page.get_by_role("status")).to_contain_text("Quota of vision saved.")

    page.goto("/audit/")
    event = page.get_by_test_id("audit-table").locator("tbody tr").first
    expect(event).to_contain_text("admin")
    expect(event).to_contain_text("quota")
    expect(event).to_contain_text("11")

    member = browser.new_context(base_url=page.url.split("/audit/")[0])
    try:
        alice = member.new_page()
        login(alice, "alice")
        alice.goto("/")
        quota = alice.get_by_test_id("home-team-vision").get_by_test_id("home-quota")
        expect(quota).to_contain_text(f"{H100}: 3 guaranteed, up to 11")
        expect(alice.get_by_test_id("home-quota-pressure")).to_have_count(0)
    finally:
        member.close()

    page.goto("/")
    expect(page.get_by_test_id("home-idle")).to_contain_text("held but idle")
