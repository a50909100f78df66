from django.apps import AppConfig


class PowerConfig(AppConfig):
    name = "apps.power"
    label = "power"
    verbose_name = "Power saving (capacity that follows demand)"

    def ready(self) -> None:
        from apps.power.services import power_request_on_commit
        from portal import hooks

        # Fleet recorded a power request (the policy's or an admin's): ask the node's driver.
        hooks.subscribe("node.power_requested", power_request_on_commit)
