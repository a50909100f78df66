"""The jobs lifecycle on SQLite (the demo's database), run as a script by the test suite:
`python -m tests.jobs.sqlite_cycle` with DATABASE_URL pointing at a fresh file."""

import json
import os


def main() -> None:
    import django

    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")
    django.setup()
    from django.core.management import call_command

    from apps.fleet.models import GpuModel, Node
    from apps.jobs import dispatch, messaging, services
    from apps.jobs.models import Job, JobAllocation
    from apps.teams.models import Membership, Quota, Team, User
    from portal.celery import app

    messaging.send_agent_task = lambda *args, **kwargs: None
    app.send_task = lambda *args, **kwargs: None

    call_command("migrate", verbosity=0)
    from tests.factories import make_node_with_gpus

    make_node_with_gpus("sqlite-a", 4)
    team = Team.objects.create(slug="vision", name="Vision", cost_center="CC-1")
    user = User.objects.create(username="alice")
    Membership.objects.create(team=team, user=user)
    model = GpuModel.objects.get()
    Quota.objects.create(team=team, gpu_model=model, guaranteed=4, limit=4)
    job = services.job_submit(
        actor=user,
        team=team,
        argv=["true"],
        gpu_model=model,
        gpu_count=2,
        max_runtime_seconds=60,
    )
    placed = dispatch.schedule_cycle().placed
    again = dispatch.schedule_cycle().placed
    services.job_report(report={"job_id": job.pk, "attempt": 1, "event": "started"})
    requeued = services.jobs_requeue_for_node(node=Node.objects.get())
    dispatch.schedule_cycle()
    services.job_report(
        report={"job_id": job.pk, "attempt": 2, "event": "finished", "exit_code": 0}
    )
    job.refresh_from_db()
    print(
        json.dumps(
            {
                "vendor": django.db.connection.vendor,
                "placed": placed == [job.pk],
                "again": again,
                "requeued": requeued == [job.pk],
                "status": job.status,
                "allocations": JobAllocation.objects.filter(job=job).count(),
                "open": JobAllocation.objects.filter(end__isnull=True).count(),
                "jobs": Job.objects.count(),
            }
        )
    )


if __name__ == "__main__":
    main()
