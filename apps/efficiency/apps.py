from django.apps import AppConfig


class EfficiencyConfig(AppConfig):
    name = "apps.efficiency"
    label = "efficiency"
    verbose_name = "GPU efficiency and right-sizing"

    def ready(self) -> None:
        from apps.efficiency.selectors import job_figures, member_figures, reservation_figures
        from portal import hooks

        # Job, booking and team pages (lower apps) show efficiency and cost through these.
        hooks.subscribe("jobs.figures", job_figures)
        hooks.subscribe("reservations.figures", reservation_figures)
        hooks.subscribe("teams.member_figures", member_figures)
