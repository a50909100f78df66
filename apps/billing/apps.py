from django.apps import AppConfig


class BillingConfig(AppConfig):
    name = "apps.billing"
    label = "billing"
    verbose_name = "Billing and chargeback"

    def ready(self) -> None:
        from apps.billing.member_costs import member_costs_hook
        from apps.billing.metering import note_hours_rolled_up_again
        from apps.billing.selectors import price_energy, price_gpu_hours
        from apps.billing.services import check_booking_budget
        from portal import hooks, queries

        # The what-if page (jobs) prices replayed GPU-hours with the rate cards.
        queries.answer("gpu_hours.price", price_gpu_hours)
        # ... and the energy power saving would save with the rate cards' energy price.
        queries.answer("energy.price", price_energy)
        # The team page (teams) shows the team's cost by member this month.
        queries.answer("teams.member_costs", member_costs_hook)
        # Booking admission (reservations) refuses what a block-mode budget cannot pay.
        queries.answer("reservations.budget_check", check_booking_budget)
        # Telemetry rolled up hours again (late samples): the next hourly run re-meters them.
        hooks.subscribe("telemetry.hours_rolled_up_again", note_hours_rolled_up_again)
