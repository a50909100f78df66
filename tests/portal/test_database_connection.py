"""The portal's PostgreSQL sessions run with the options the settings give them."""

import pytest
from django.db import connection


@pytest.mark.django_db
def test_postgresql_sessions_run_without_jit_compiling():
    """The month-wide billing reads cost more to JIT-compile than the compiled code saves."""
    with connection.cursor() as cursor:
        cursor.execute("SHOW jit")
        assert cursor.fetchone()[0] == "off"
