"""Ledger corrections for late telemetry, and the held-idle part of each charge as a column.

A slice's busy seconds and energy come from telemetry, which can arrive or change after the
slice was charged; metering then appends a correction row (revision 1, 2, ...) beside the charge
instead of editing it, so the unique key gains `revision` and `busy_seconds` may be negative in a
correction. `idle_cost` (the share of a booking's GPU cost its GPU sat idle) was computed by each
export from the row; it is now stored, so corrections can carry it and every database sums it
exactly. Existing rows are filled in from their own columns, closed months included: the
figure was already derived from those rows (no amount changes), so the closed-period guard is
lifted for the duration of that one update on PostgreSQL.
"""

from decimal import Decimal

from django.db import migrations, models

COST_PLACES = Decimal("1e-10")
GUARD = "ledger_closed_period_guard"


def fill_idle_cost(apps, schema_editor):
    LedgerEntry = apps.get_model("billing", "LedgerEntry")
    postgres = schema_editor.connection.vendor == "postgresql"
    if postgres:
        schema_editor.execute(f"ALTER TABLE billing_ledgerentry DISABLE TRIGGER {GUARD}")
    rows = LedgerEntry.objects.filter(source="reservation", gpu_seconds__gt=0).only(
        "gpu_cost", "gpu_seconds", "busy_seconds"
    )
    batch = []
    for entry in rows.iterator(chunk_size=5000):
        idle = max(entry.gpu_seconds - entry.busy_seconds, 0)
        entry.idle_cost = (entry.gpu_cost * idle / entry.gpu_seconds).quantize(COST_PLACES)
        batch.append(entry)
        if len(batch) >= 5000:
            LedgerEntry.objects.bulk_update(batch, ["idle_cost"])
            batch = []
    LedgerEntry.objects.bulk_update(batch, ["idle_cost"])
    if postgres:
        schema_editor.execute(f"ALTER TABLE billing_ledgerentry ENABLE TRIGGER {GUARD}")


class Migration(migrations.Migration):
    dependencies = [
        ("billing", "0002_postgres_guards"),
    ]

    operations = [
        migrations.RemoveConstraint(
            model_name="ledgerentry",
            name="ledger_unique_source_gpu_slice",
        ),
        migrations.AddField(
            model_name="ledgerentry",
            name="idle_cost",
            field=models.DecimalField(
                decimal_places=10,
                default=Decimal("0"),
                help_text="The part of gpu_cost a booking held idle (reservations only).",
                max_digits=24,
            ),
        ),
        migrations.AddField(
            model_name="ledgerentry",
            name="revision",
            field=models.PositiveSmallIntegerField(
                default=0,
                help_text=(
                    "0: the charge of the slice. 1, 2, ...: corrections appended when telemetry "
                    "of the slice arrived or changed after it was charged (busy seconds, energy "
                    "and their cost)."
                ),
            ),
        ),
        migrations.AlterField(
            model_name="ledgerentry",
            name="busy_seconds",
            field=models.IntegerField(default=0),
        ),
        migrations.AddConstraint(
            model_name="ledgerentry",
            constraint=models.UniqueConstraint(
                fields=("slice_start", "gpu", "source", "source_id", "revision"),
                name="ledger_unique_source_gpu_slice_revision",
            ),
        ),
        migrations.RunPython(fill_idle_cost, migrations.RunPython.noop),
    ]
