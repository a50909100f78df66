from django.apps import AppConfig


class PowerConfig(AppConfig):
    name = "apps.power"
    label = "power"
    verbose_name = "Power saving (capacity that follows demand)"
