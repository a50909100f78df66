"""No GPU is ever held twice at once: a PostgreSQL exclusion constraint over active holdings.

SQLite has no exclusion constraints; there every booking runs in one BEGIN IMMEDIATE
transaction that re-checks overlaps (see apps/reservations/services.py).
"""

from django.contrib.postgres.operations import BtreeGistExtension
from django.db import migrations

CONSTRAINT = "holding_no_overlap_per_gpu"


def add_exclusion_constraint(apps, schema_editor):
    if schema_editor.connection.vendor != "postgresql":
        return
    schema_editor.execute(
        f"ALTER TABLE reservations_reservationgpu ADD CONSTRAINT {CONSTRAINT} "
        "EXCLUDE USING gist (gpu_id WITH =, tstzrange(start, \"end\", '[)') WITH &&) "
        "WHERE (active)"
    )


def drop_exclusion_constraint(apps, schema_editor):
    if schema_editor.connection.vendor != "postgresql":
        return
    schema_editor.execute(
        f"ALTER TABLE reservations_reservationgpu DROP CONSTRAINT IF EXISTS {CONSTRAINT}"
    )


class Migration(migrations.Migration):
    dependencies = [("reservations", "0001_initial")]

    operations = [
        BtreeGistExtension(),
        migrations.RunPython(add_exclusion_constraint, drop_exclusion_constraint),
    ]
