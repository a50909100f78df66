"""Shared by the benchmarks: a fresh, migrated PostgreSQL database for each run."""

import psycopg
from django.conf import settings
from django.core.management import call_command


def recreate_database() -> None:
    """Drop and recreate the database in settings, then migrate it (benchmarks only)."""
    db = settings.DATABASES["default"]
    admin = psycopg.connect(
        host=db["HOST"] or "127.0.0.1",
        port=db["PORT"] or 5432,
        user=db["USER"],
        dbname="postgres",
        autocommit=True,
    )
    admin.execute(f'DROP DATABASE IF EXISTS "{db["NAME"]}" WITH (FORCE)')
    admin.execute(f'CREATE DATABASE "{db["NAME"]}"')
    admin.close()
    call_command("migrate", verbosity=0)
