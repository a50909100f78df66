from django.apps import AppConfig


class PortalConfig(AppConfig):
    """The project core as an app, so its system checks are registered."""

    name = "portal"
    verbose_name = "GPU portal core"

    def ready(self) -> None:
        from portal import checks  # noqa: F401 - registers the checks
