"""Fleet drain with its confirm dialog, the audit trail it leaves, and team membership admin."""

from urllib.parse import urlparse

from playwright.sync_api import expect

from apps.fleet.choices import NodeStatus
from apps.fleet.models import Node
from tests.browser.conftest import login

NODE = "gpu-h100-01"


def _node_card(page, hostname: str = NODE):
    return page.locator(f'section.node[data-node="{hostname}"]')


def _node_status(hostname: str = NODE) -> str:
    return Node.objects.get(hostname=hostname).status


def test_admin_drains_node_after_confirming(page):
    dialogs = []

    def accept(dialog):
        dialogs.append((dialog.type, dialog.message))
        dialog.accept()

    page.on("dialog", accept)
    login(page, "admin")
    page.goto("/fleet/")
    card = _node_card(page)
    expect(card.get_by_test_id("node-status")).to_have_text("Up")

    card.get_by_role("textbox", name=f"Reason for draining {NODE}").fill("firmware update")
    card.locator("header").get_by_role("button", name="Drain node gpu-h100-01", exact=True).click()

    page.wait_for_load_state()
    expect(_node_card(page).get_by_test_id("node-status")).to_have_text("Drained")
    assert dialogs == [("confirm", f"Drain {NODE}? It gets no new bookings or jobs.")]
    expect(page.get_by_role("status")).to_contain_text("drain done")
    # Drained nodes offer Undrain instead of Drain; the other nodes are untouched.
    header = _node_card(page).locator("header")
    expect(header.get_by_role("button", name="Undrain")).to_be_visible()
    expect(header.get_by_role("button", name="Drain node gpu-h100-01", exact=True)).to_have_count(0)
    expect(_node_card(page, "gpu-h100-02").get_by_test_id("node-status")).to_have_text("Up")
    assert _node_status() == NodeStatus.DRAINED

    page.goto("/audit/")
    table = page.get_by_test_id("audit-table")
    row = table.locator("tbody tr", has=page.locator("code", has_text="node.drain"))
    expect(row).to_have_count(1)
    cells = row.locator(":scope > td")  # not the cells of its field diff
    expect(cells.nth(1)).to_have_text("admin")
    expect(cells.nth(3)).to_contain_text(NODE)
    expect(cells.nth(5)).to_have_text("firmware update")
    expect(row.locator("tr[data-field='status'] td.after")).to_have_text("drained")


def test_dismissing_confirm_leaves_node_up(page):
    dialogs = []

    def dismiss(dialog):
        dialogs.append(dialog.message)
        dialog.dismiss()

    page.on("dialog", dismiss)
    requests = []
    login(page, "admin")
    page.goto("/fleet/")
    page.on("request", lambda request: requests.append((request.method, request.url)))

    _node_card(page).locator("header").get_by_role(
        "button", name="Drain node gpu-h100-01", exact=True
    ).click()

    assert dialogs == [f"Drain {NODE}? It gets no new bookings or jobs."]
    expect(_node_card(page).get_by_test_id("node-status")).to_have_text("Up")
    assert not [r for r in requests if r[0] == "POST"], f"the form was submitted: {requests}"
    assert _node_status() == NodeStatus.UP
    # Reloading shows the server's view, not a stale page.
    page.reload()
    expect(_node_card(page).get_by_test_id("node-status")).to_have_text("Up")


def test_member_sees_fleet_without_drain_buttons(page):
    login(page, "alice")
    page.goto("/fleet/")
    expect(page.locator("section.node")).to_have_count(4)
    expect(page.locator("section.node tbody tr")).to_have_count(28)
    expect(page.get_by_role("button", name="Drain")).to_have_count(0)
    expect(page.get_by_role("button", name="Retire")).to_have_count(0)
    expect(page.locator('form[action*="/drain"], form[action*="/retire"]')).to_have_count(0)


def test_team_admin_adds_member(page):
    login(page, "bob")
    page.goto("/teams/nlp/")
    members = page.locator("[data-testid=members] tbody")
    expect(members.locator("tr")).to_have_count(1)
    expect(members.locator("tr td:first-child")).to_have_text(["bob"])

    page.get_by_label("Username").fill("alice")
    page.get_by_label("Role", exact=True).select_option(label="Member")
    page.get_by_role("button", name="Add", exact=True).click()

    page.wait_for_url("**/teams/nlp/")
    expect(page.get_by_role("status")).to_contain_text("Added alice.")
    expect(members.locator("tr td:first-child")).to_have_text(["alice", "bob"], ignore_case=False)
    alice_row = members.locator("tr", has=page.locator("td", has_text="alice"))
    # A team admin sees each member's role in the form that changes it.
    expect(alice_row.get_by_label("Role of alice", exact=True)).to_have_value("member")


def test_adding_unknown_user_shows_inline_error(page):
    login(page, "bob")
    page.goto("/teams/nlp/")
    page.get_by_label("Username").fill("nobody-here")
    page.get_by_role("button", name="Add", exact=True).click()

    error = page.get_by_role("alert")
    expect(error).to_contain_text("No active user named “nobody-here”.")
    assert urlparse(page.url).path == "/teams/nlp/"
    expect(page.locator("[data-testid=members] tbody tr")).to_have_count(1)
    # The typed value is kept so the user can correct it.
    expect(page.get_by_label("Username")).to_have_value("nobody-here")


def test_admin_powers_a_node_off_and_on_after_confirming(page):
    from apps.fleet.choices import PowerState

    dialogs = []

    def answer(dialog):
        dialogs.append(dialog.message)
        # The first power-off is dismissed: nothing changes.
        dialog.dismiss() if len(dialogs) == 1 else dialog.accept()

    page.on("dialog", answer)
    login(page, "admin")
    page.goto("/fleet/")
    card = _node_card(page)
    expect(card.get_by_test_id("node-power")).to_contain_text("Power: On")
    button = card.locator("header").get_by_role("button", name=f"Power off node {NODE}")
    button.click()
    assert Node.objects.get(hostname=NODE).power_state == PowerState.ON
    button.click()
    page.wait_for_load_state()
    expect(page.get_by_role("status")).to_contain_text("power off requested")
    expect(_node_card(page).get_by_test_id("node-power")).to_contain_text("Powering off")
    expect(_node_card(page).get_by_test_id("node-power")).to_contain_text("(admin)")
    assert dialogs[0].startswith(f"Power off {NODE}? Its GPUs take no work")
    node = Node.objects.get(hostname=NODE)
    assert (node.power_state, node.power_state_by) == (PowerState.SUSPENDING, "admin")
    # Powering off offers no power on until the node is off.
    header = _node_card(page).locator("header")
    expect(header.get_by_role("button", name=f"Power on node {NODE}")).to_have_count(0)
