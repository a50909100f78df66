from django.apps import AppConfig


class ReservationsConfig(AppConfig):
    name = "apps.reservations"
    label = "reservations"
    verbose_name = "Reservations"

    def ready(self) -> None:
        from apps.reservations.relocation import reservations_relocate_off_gpus
        from apps.reservations.selectors import quota_usage
        from portal import hooks

        # Fleet takes GPUs out of service; the bookings on them move.
        hooks.subscribe("gpus.leaving_service", reservations_relocate_off_gpus)
        # Quota tables (teams) show what the team's bookings use.
        hooks.subscribe("quota.usage", quota_usage)
