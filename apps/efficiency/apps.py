from django.apps import AppConfig


class EfficiencyConfig(AppConfig):
    name = "apps.efficiency"
    label = "efficiency"
    verbose_name = "GPU efficiency and right-sizing"

    def ready(self) -> None:
        from apps.efficiency.selectors import job_figures, member_figures, reservation_figures
        from portal import queries

        # Job, booking and team pages (lower apps) show efficiency and cost through these.
        queries.answer("jobs.figures", job_figures)
        queries.answer("reservations.figures", reservation_figures)
        queries.answer("teams.member_figures", member_figures)
