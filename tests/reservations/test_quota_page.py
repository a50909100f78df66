"""The quota page: an error names its row and keeps what was typed."""

import re

import pytest
from django.test import Client

from apps.teams.models import Quota

pytestmark = pytest.mark.django_db


def _admin(platform_admin) -> Client:
    client = Client()
    client.force_login(platform_admin)
    return client


def test_refused_quota_edit_names_its_row_and_keeps_the_typed_numbers(platform_admin, quotas, h100):
    vision = quotas[0]
    response = _admin(platform_admin).post(
        "/quotas/", {"team": "vision", "gpu_model": h100.name, "guaranteed": "7", "limit": "3"}
    )
    html = response.text
    error = html.split('data-testid="quota-error"', 1)[1].split("</td>", 1)[0]
    assert f"vision / {h100.name}: Limit: The limit (3) must be at least guaranteed (7)" in error
    assert (
        f'id="g-{vision.pk}" form="quota-{vision.pk}" name="guaranteed" type="number" '
        'min="0" value="7"' in html
    )
    assert (
        f'id="l-{vision.pk}" form="quota-{vision.pk}" name="limit" type="number" min="0" value="3"'
        in html
    )
    # The other team's row still shows its saved numbers.
    nlp = quotas[1]
    assert f'name="guaranteed" type="number" min="0" value="{nlp.guaranteed}"' in html
    vision.refresh_from_db()
    assert (vision.guaranteed, vision.limit) == (4, 12)


def test_refused_new_quota_keeps_team_model_and_numbers_on_the_add_form(
    platform_admin, quotas, fleet
):
    html = (
        _admin(platform_admin)
        .post(
            "/quotas/", {"team": "nlp", "gpu_model": "L40S-48GB", "guaranteed": "5", "limit": "1"}
        )
        .text
    )
    add_form = html.split("Add or replace a quota", 1)[1]
    assert '<option value="nlp" selected>' in add_form
    assert '<option value="L40S-48GB" selected>' in add_form
    assert 'id="new-g" name="guaranteed" type="number" min="0" value="5"' in add_form
    assert "Limit: The limit (1) must be at least guaranteed (5)" in add_form
    assert not Quota.objects.filter(gpu_model__name="L40S-48GB").exists()


def test_each_quota_input_sits_under_its_own_header(platform_admin, quotas):
    html = _admin(platform_admin).get("/quotas/").text
    table = html.split('data-testid="quota-table"', 1)[1].split("</table>", 1)[0]
    headers = len(re.findall(r"<th[ >]", table.split("<tbody>", 1)[0]))
    first_row = table.split("<tbody>", 1)[1].split("</tr>", 1)[0]
    assert "colspan" not in first_row
    assert first_row.count("<td") == headers
    cells = first_row.split("<td")[1:]
    assert 'name="guaranteed"' in cells[2] and 'name="limit"' in cells[3]
