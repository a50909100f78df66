"""The FOCUS exports of a random month (bookings, idle capacity, a credit and the platform's
cost shared by usage), byte for byte, against their stored rendering
(tests/billing/data/focus-*.csv), so a change to how rows are built cannot change a byte of the
file finance and its tools read. Ids are drawn from sequences set for the test, so they are
the same in every run. After a deliberate change of the format, write the files anew with
FOCUS_RENDERING_WRITE=1 and review their diff."""

import os
from pathlib import Path

import pytest
from django.db import connection

from apps.billing import exports, focus
from apps.billing.choices import RecoveryMethod
from apps.billing.services import cost_recovery_set
from apps.fleet.models import GpuModel
from apps.teams.models import Team, User
from tests.billing import reconcile

pytestmark = pytest.mark.django_db
DATA = Path(__file__).parent / "data"
FIRST_ID = 7_000_000


def _sequences_from(first: int) -> None:
    """Every id sequence restarted at `first` (not undone with the test's transaction; later
    ids only grow, so no other test is affected)."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT schemaname, sequencename FROM pg_sequences")
        for schema, name in cursor.fetchall():
            cursor.execute("SELECT setval(%s, %s, false)", [f'"{schema}"."{name}"', first])


def _written_by_python(scope, version) -> str:
    """The export as the csv module writes `focus_rows` (SQLite's path)."""
    return "".join(
        exports.csv_chunks(focus.focus_columns(version), focus.focus_rows(scope, version))
    )


def _exported(scope, version) -> str:
    """The export as the API streams it (on PostgreSQL rendered by the database)."""
    return "".join(focus.focus_csv_chunks(scope, version))


@pytest.mark.skipif(connection.vendor != "postgresql", reason="ids from PostgreSQL sequences")
@pytest.mark.parametrize("render", [_written_by_python, _exported])
@pytest.mark.parametrize("version", focus.FOCUS_VERSIONS)
def test_focus_csv_of_a_random_month_is_byte_identical_to_its_stored_rendering(version, render):
    _sequences_from(FIRST_ID)
    period = reconcile.build_random_month(20262)
    # The platform's cost shared by usage: the recovery rows are rendered too.
    finance = User.objects.get(username="fin-20262")
    cost_recovery_set(actor=finance, period=period, method=RecoveryMethod.USAGE)
    scope = exports.ExportScope(period)
    text = render(scope, version)
    stored = DATA / f"focus-{version}-random-month.csv"
    if os.environ.get("FOCUS_RENDERING_WRITE"):
        stored.write_bytes(text.encode())
    expected = stored.read_bytes().decode()
    assert text.count("\r\n") > 10 and "platform-share" in text
    assert text == expected


@pytest.mark.parametrize("seed", [3, 41, 2027])
def test_the_exported_focus_csv_is_what_the_csv_module_writes_of_focus_rows(seed):
    """On PostgreSQL the database renders the rows (`focus_sql`): every byte as `focus_rows`
    written by the csv module, for every team's export and the whole month's, in both
    versions, on months with half-cent totals, split bookings, a credit and recovery rows."""
    period = reconcile.build_random_month(seed)
    # Names the csv module quotes: a comma and quotes in a model's (SkuId, descriptions).
    GpuModel.objects.filter(name=f"M{seed}-0").update(name=f'M{seed}, the "first"')
    finance = User.objects.get(username=f"fin-{seed}")
    cost_recovery_set(actor=finance, period=period, method=RecoveryMethod.USAGE)
    teams = [
        None,
        *Team.objects.filter(slug__startswith=f"team-{seed}-").values_list("pk", flat=True),
    ]
    for version in focus.FOCUS_VERSIONS:
        for team_id in teams:
            scope = exports.ExportScope(period, team_id)
            written = _written_by_python(scope, version)
            assert written.count("\r\n") > (20 if team_id is None else 1)
            assert _exported(scope, version) == written, (version, team_id)
