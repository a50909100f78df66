from django.apps import AppConfig


class BillingConfig(AppConfig):
    name = "apps.billing"
    label = "billing"
    verbose_name = "Billing and chargeback"

    def ready(self) -> None:
        from apps.billing.selectors import price_gpu_hours
        from portal import hooks

        # The what-if page (jobs) prices replayed GPU-hours with the rate cards.
        hooks.subscribe("gpu_hours.price", price_gpu_hours)
