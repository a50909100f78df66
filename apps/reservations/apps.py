from django.apps import AppConfig


class ReservationsConfig(AppConfig):
    name = "apps.reservations"
    label = "reservations"
    verbose_name = "Reservations"

    def ready(self) -> None:
        from apps.reservations.holdings import bookings_by_gpu
        from apps.reservations.relocation import reservations_relocate_off_gpus
        from apps.reservations.selectors import quota_usage
        from portal import queries

        # Fleet takes GPUs out of service; the bookings on them move.
        queries.answer("gpus.leaving_service", reservations_relocate_off_gpus)
        # Fleet shows whom a drain or a power-off would hurt.
        queries.answer("gpus.bookings", bookings_by_gpu)
        # Quota tables (teams) show what the team's bookings use.
        queries.answer("quota.usage", quota_usage)
