"""Each download of a month gets its own file name, so one never overwrites another."""

import pytest

from tests.conftest import client_for

pytestmark = pytest.mark.django_db


def _filename(response) -> str:
    return response["Content-Disposition"].split('filename="', 1)[1].rstrip('"')


def test_summary_detail_and_team_csv_downloads_have_distinct_file_names(finance_user, team):
    api = client_for(finance_user)
    base = "/api/v1/chargeback/?period=2026-11&format=csv"
    names = [
        _filename(api.get(base)),
        _filename(api.get(base + "&level=detail")),
        _filename(api.get(base + "&team=vision")),
        _filename(api.get(base + "&level=detail&team=vision")),
    ]
    assert len(set(names)) == 4, names
    assert all(name.startswith("chargeback-2026-11") and name.endswith(".csv") for name in names)
    assert "detail" in names[1] and "vision" in names[2]
