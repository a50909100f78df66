"""Organisation units above teams. Every existing team moves into one root unit, so a flat list
of teams behaves exactly as before (a unit without quota rows sets no envelope)."""

import django.core.validators
import django.db.models.deletion
from django.db import migrations, models

import apps.teams.models


def teams_into_root_unit(apps, schema_editor):
    unit_model = apps.get_model("teams", "OrgUnit")
    root, _ = unit_model.objects.get_or_create(
        slug="organisation", defaults={"name": "Organisation"}
    )
    apps.get_model("teams", "Team").objects.filter(unit__isnull=True).update(unit=root)


class Migration(migrations.Migration):
    dependencies = [
        ("fleet", "0004_verbose_names"),
        ("teams", "0007_user_time_zone"),
    ]

    operations = [
        migrations.CreateModel(
            name="OrgUnit",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                (
                    "slug",
                    models.SlugField(
                        unique=True,
                        validators=[
                            django.core.validators.RegexValidator(
                                "^[a-z0-9][a-z0-9-]*$",
                                "Use lowercase letters, digits and hyphens, starting with a letter or digit.",
                            )
                        ],
                    ),
                ),
                ("name", models.CharField(max_length=200)),
                (
                    "cost_center",
                    models.CharField(
                        blank=True, help_text="Finance cost-center code of the unit.", max_length=64
                    ),
                ),
                ("created_at", models.DateTimeField(auto_now_add=True)),
                (
                    "parent",
                    models.ForeignKey(
                        blank=True,
                        help_text="Empty: the root of the organisation.",
                        null=True,
                        on_delete=django.db.models.deletion.PROTECT,
                        related_name="children",
                        to="teams.orgunit",
                    ),
                ),
            ],
            options={
                "verbose_name": "organisation unit",
                "ordering": ["slug"],
            },
        ),
        migrations.AddField(
            model_name="team",
            name="unit",
            field=models.ForeignKey(
                null=True,
                on_delete=django.db.models.deletion.PROTECT,
                related_name="teams",
                to="teams.orgunit",
            ),
        ),
        migrations.RunPython(teams_into_root_unit, migrations.RunPython.noop),
        migrations.AlterField(
            model_name="team",
            name="unit",
            field=models.ForeignKey(
                default=apps.teams.models.root_unit_pk,
                help_text="Where the team sits in the organisation tree.",
                on_delete=django.db.models.deletion.PROTECT,
                related_name="teams",
                to="teams.orgunit",
                verbose_name="organisation unit",
            ),
        ),
        migrations.CreateModel(
            name="UnitQuota",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("guaranteed", models.PositiveIntegerField(default=0)),
                (
                    "limit",
                    models.PositiveIntegerField(
                        default=0, help_text="Burst ceiling, at least guaranteed."
                    ),
                ),
                ("updated_at", models.DateTimeField(auto_now=True)),
                (
                    "gpu_model",
                    models.ForeignKey(
                        blank=True,
                        help_text="Blank: the quota caps the unit's GPUs of all models together.",
                        null=True,
                        on_delete=django.db.models.deletion.PROTECT,
                        related_name="unit_quotas",
                        to="fleet.gpumodel",
                        verbose_name="GPU model",
                    ),
                ),
                (
                    "unit",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="quotas",
                        to="teams.orgunit",
                    ),
                ),
            ],
            options={
                "ordering": ["unit__slug", "gpu_model__name"],
            },
        ),
        migrations.AddConstraint(
            model_name="orgunit",
            constraint=models.CheckConstraint(
                condition=models.Q(("parent", models.F("id")), _negated=True),
                name="orgunit_not_its_own_parent",
                violation_error_message="A unit cannot be its own parent.",
            ),
        ),
        migrations.AddConstraint(
            model_name="unitquota",
            constraint=models.UniqueConstraint(
                condition=models.Q(("gpu_model__isnull", False)),
                fields=("unit", "gpu_model"),
                name="unitquota_unique_unit_model",
                violation_error_message="The unit already has a quota for this GPU model.",
            ),
        ),
        migrations.AddConstraint(
            model_name="unitquota",
            constraint=models.UniqueConstraint(
                condition=models.Q(("gpu_model__isnull", True)),
                fields=("unit",),
                name="unitquota_unique_unit_any_model",
                violation_error_message="The unit already has an any-model quota.",
            ),
        ),
        migrations.AddConstraint(
            model_name="unitquota",
            constraint=models.CheckConstraint(
                condition=models.Q(("limit__gte", models.F("guaranteed"))),
                name="unitquota_limit_gte_guaranteed",
                violation_error_message="The limit must be at least the guaranteed number of GPUs.",
            ),
        ),
    ]
