"""GPUs get the interval they are in the fleet, so metering charges capacity only inside it.

Existing GPUs have no creation time of their own: they joined the fleet when their node was
registered (`Node.created_at`). A GPU already retired keeps being charged for nothing, as before
(its retirement time was not recorded, so it is set to when it joined).
"""

import django.utils.timezone
from django.db import migrations, models


def backfill(apps, schema_editor):
    Gpu = apps.get_model("fleet", "Gpu")
    for gpu in Gpu.objects.select_related("node").iterator():
        gpu.in_fleet_since = gpu.node.created_at or django.utils.timezone.now()
        if gpu.status == "retired":
            gpu.retired_at = gpu.in_fleet_since
        gpu.save(update_fields=["in_fleet_since", "retired_at"])


class Migration(migrations.Migration):
    dependencies = [
        ("fleet", "0002_maintenance_window"),
    ]

    operations = [
        migrations.AddField(
            model_name="gpu",
            name="in_fleet_since",
            field=models.DateTimeField(null=True),
        ),
        migrations.AddField(
            model_name="gpu",
            name="retired_at",
            field=models.DateTimeField(
                blank=True, help_text="When the GPU left the fleet; empty: still in it.", null=True
            ),
        ),
        migrations.RunPython(backfill, migrations.RunPython.noop),
        migrations.AlterField(
            model_name="gpu",
            name="in_fleet_since",
            field=models.DateTimeField(
                default=django.utils.timezone.now,
                help_text="When the GPU joined the fleet (its capacity is billed).",
            ),
        ),
        migrations.AddConstraint(
            model_name="gpu",
            constraint=models.CheckConstraint(
                condition=models.Q(
                    ("retired_at__isnull", True),
                    ("retired_at__gte", models.F("in_fleet_since")),
                    _connector="OR",
                ),
                name="gpu_retired_after_joining",
                violation_error_message="A GPU cannot retire before it joined the fleet.",
            ),
        ),
    ]
