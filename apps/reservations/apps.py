from django.apps import AppConfig


class ReservationsConfig(AppConfig):
    name = "apps.reservations"
    label = "reservations"
    verbose_name = "Reservations"
