from django.db import migrations, models
from django.db.models import OuterRef, Subquery


def flag_from_reservations(apps, schema_editor):
    """Bookings made before holdings carried the flag were charged at the over-quota price on
    every GPU when the booking was over quota; their holdings keep that price."""
    reservation_gpu = apps.get_model("reservations", "ReservationGpu")
    reservation = apps.get_model("reservations", "Reservation")
    reservation_gpu.objects.update(
        over_quota=Subquery(
            reservation.objects.filter(pk=OuterRef("reservation_id")).values("over_quota")[:1]
        )
    )


class Migration(migrations.Migration):
    dependencies = [("reservations", "0004_holding_changes")]

    operations = [
        migrations.AddField(
            model_name="reservationgpu",
            name="over_quota",
            field=models.BooleanField(
                default=False,
                help_text=(
                    "This GPU is above the team's guarantee: charged at the over-quota multiplier."
                ),
            ),
        ),
        migrations.RunPython(flag_from_reservations, migrations.RunPython.noop),
    ]
