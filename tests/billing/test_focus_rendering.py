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
from apps.teams.models import User
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


@pytest.mark.skipif(connection.vendor != "postgresql", reason="ids from PostgreSQL sequences")
@pytest.mark.parametrize("version", focus.FOCUS_VERSIONS)
def test_focus_csv_of_a_random_month_is_byte_identical_to_its_stored_rendering(version):
    _sequences_from(FIRST_ID)
    period = reconcile.build_random_month(20262)
    # The platform's cost shared by usage: the recovery rows are rendered too.
    finance = User.objects.get(username="fin-20262")
    cost_recovery_set(actor=finance, period=period, method=RecoveryMethod.USAGE)
    scope = exports.ExportScope(period)
    text = "".join(
        exports.csv_chunks(focus.focus_columns(version), focus.focus_rows(scope, version))
    )
    stored = DATA / f"focus-{version}-random-month.csv"
    if os.environ.get("FOCUS_RENDERING_WRITE"):
        stored.write_bytes(text.encode())
    expected = stored.read_bytes().decode()
    assert text.count("\r\n") > 10 and "platform-share" in text
    assert text == expected
