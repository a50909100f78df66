"""The quota page's capacity table: platform admins see the fleet's guarantees against its
healthy GPUs; a unit admin sees their units' envelopes (what each guarantees and caps, and
how much of the guarantee is given out below it) and only their teams' rows and history."""

import re

import pytest
from django.test import Client

from apps.teams.services import quota_set, unit_quota_set
from tests.teams.departments import build_departments

pytestmark = pytest.mark.django_db


@pytest.fixture
def org(platform_admin, h100):
    org = build_departments(platform_admin, h100)
    # Ops, outside research: an envelope and a team quota a research admin must not see.
    unit_quota_set(unit=org["units"]["ops"], gpu_model=h100, guaranteed=5, limit=8,
                   actor=platform_admin)  # fmt: skip
    quota_set(team=org["teams"]["sre"], gpu_model=h100, guaranteed=4, limit=5, actor=platform_admin)
    return org


def _page(user) -> str:
    client = Client()
    client.force_login(user)
    response = client.get("/quotas/")
    assert response.status_code == 200
    return response.text


def _envelopes(html: str) -> dict[str, list[str]]:
    table = html.split('data-testid="unit-envelopes"', 1)[1].split("</table>", 1)[0]
    return {
        key: [re.sub(r"<[^>]+>", "", cell) for cell in re.findall(r"<td>(.*?)</td>", cells)]
        for key, cells in re.findall(r'data-envelope="([^"]+)"[^>]*>(.*?)</tr>', table)
    }


def _history(html: str) -> str:
    return html.split('data-testid="quota-history"', 1)[1].split("</table>", 1)[0]


def test_a_unit_admin_sees_their_units_envelopes_not_the_fleets_sums(org):
    html = _page(org["users"]["ra"])
    # Research guarantees 6: nlp (2) and lab (3) are given 5 of them; lab's 3 go to cv (2).
    assert _envelopes(html) == {
        "research/H100-SXM-80GB": ["Organisation / Research", "H100-SXM-80GB", "6", "10", "5 of 6"],
        "lab/H100-SXM-80GB": ["Organisation / Research / Lab", "H100-SXM-80GB", "3", "6", "2 of 3"],
    }
    # Not the fleet: 8 GPUs guaranteed over all teams, 16 healthy H100s.
    assert 'data-testid="guarantee-pressure"' not in html
    assert "Sum of guarantees" not in html
    # Nor ops' envelope, sre's row or sre's history.
    assert "ops/" not in html
    assert 'data-quota="sre/' not in html
    history = _history(html)
    assert "nlp/H100-SXM-80GB" in history and "cv/H100-SXM-80GB" in history
    assert "sre" not in history


def test_a_lower_unit_admin_sees_only_their_own_subtree(org):
    html = _page(org["users"]["la"])
    assert list(_envelopes(html)) == ["lab/H100-SXM-80GB"]
    assert "nlp/" not in _history(html)
    assert 'data-quota="nlp/' not in html


def test_a_platform_admin_still_sees_the_fleet_wide_sums(org):
    html = _page(org["users"]["pa"])
    table = html.split('data-testid="guarantee-pressure"', 1)[1].split("</table>", 1)[0]
    assert "<td>H100-SXM-80GB</td><td>8</td><td>16</td>" in table
    assert 'data-testid="unit-envelopes"' not in html
    assert "sre/H100-SXM-80GB" in _history(html)
