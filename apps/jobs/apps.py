from django.apps import AppConfig


class JobsConfig(AppConfig):
    name = "apps.jobs"
    label = "jobs"
    verbose_name = "GPU jobs"

    def ready(self) -> None:
        from apps.jobs.holdings import (
            booking_job_intervals,
            job_busy_intervals,
            teams_job_intervals,
        )
        from apps.jobs.services import jobs_kill_stale_attempts, jobs_requeue_for_node
        from portal import hooks, queries

        # Telemetry (through fleet) declares a node lost; its jobs are requeued.
        hooks.subscribe("node.lost", jobs_requeue_for_node)
        # It reports again: whatever it may still run of the attempts stopped meanwhile is killed.
        hooks.subscribe("node.back", jobs_kill_stale_attempts)
        # Availability of GPUs for bookings counts the GPUs running jobs hold.
        queries.answer("gpus.busy_intervals", job_busy_intervals)
        # Quota tables count many teams' running jobs at once.
        queries.answer("teams.busy_intervals", teams_job_intervals)
        # Booking admission counts the team's running jobs and keeps the model's from the pick.
        queries.answer("booking.busy_intervals", booking_job_intervals)
