from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("jobs", "0002_allocation_released_at"),
    ]

    operations = [
        migrations.AddField(
            model_name="job",
            name="checkpointable",
            field=models.BooleanField(
                default=False,
                help_text="The job saves its progress when stopped (SIGTERM) and resumes from "
                "it, so a preemption loses no work.",
            ),
        ),
        migrations.AddField(
            model_name="job",
            name="preemption_count",
            field=models.PositiveIntegerField(default=0),
        ),
        migrations.AddField(
            model_name="job",
            name="gpu_seconds_lost",
            field=models.FloatField(default=0.0),
        ),
        migrations.AddField(
            model_name="job",
            name="gang_requeued",
            field=models.BooleanField(default=False),
        ),
    ]
