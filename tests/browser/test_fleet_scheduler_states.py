"""With the Slurm integration on, each node's card on the fleet page shows Slurm's state and
reason from the last node sync next to the portal's state."""

import pytest
from django.utils import timezone
from playwright.sync_api import expect

from apps.integrations.slurm.models import SlurmNode
from portal import hooks
from tests.browser.conftest import login


@pytest.fixture
def slurm_notes_on(settings):
    settings.PORTAL_HOOKS = {
        **settings.PORTAL_HOOKS,
        "fleet.node_notes": [settings.SLURM_HOOKS["fleet.node_notes"]],
    }
    hooks.reset_cache()
    yield
    hooks.reset_cache()


def test_node_card_shows_slurms_state_next_to_the_portal_state(page, slurm_notes_on):
    SlurmNode.objects.create(
        hostname="gpu-h100-01", state="drained", reason="bad_dimm", read_at=timezone.now()
    )
    SlurmNode.objects.create(hostname="gpu-h100-02", state="idle", read_at=timezone.now())
    login(page, "admin")
    page.goto("/fleet/")
    first = page.locator('section.node[data-node="gpu-h100-01"] header')
    expect(first.get_by_test_id("node-status")).to_have_text("Up")
    expect(first.get_by_test_id("node-scheduler-note")).to_have_text("Slurm: drained (bad_dimm)")
    second = page.locator('section.node[data-node="gpu-h100-02"] header')
    expect(second.get_by_test_id("node-scheduler-note")).to_have_text("Slurm: idle")
    # A node Slurm has not reported on shows no Slurm state.
    others = page.locator("section.node").filter(has_not=page.get_by_test_id("node-scheduler-note"))
    expect(others).to_have_count(page.locator("section.node").count() - 2)
