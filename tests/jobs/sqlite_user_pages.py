"""Scenario run by test_user_pages_sqlite.py in a subprocess on a fresh SQLite database (the
demo's engine): the queue page and API, a GPU's page and creating a team. Prints one JSON
line."""

import json
import os
from datetime import timedelta


def main() -> None:
    import django

    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")
    django.setup()
    from django.core.management import call_command
    from django.test import Client
    from django.test.utils import setup_test_environment
    from django.utils import timezone

    from apps.fleet.models import Gpu, GpuModel
    from apps.jobs.models import Job
    from apps.teams.models import Team, User
    from apps.telemetry.models import GpuHourRollup

    setup_test_environment()  # responses carry their context
    call_command("migrate", verbosity=0)
    call_command("seed_demo", "--without-reservations", stdout=open(os.devnull, "w"))  # noqa: SIM115
    alice = User.objects.get(username="alice")
    vision = Team.objects.get(slug="vision")
    h100 = GpuModel.objects.get(name="H100-SXM-80GB")
    for name in ("first", "second"):
        Job.objects.create(
            team=vision, submitted_by=alice, name=name, argv=["true"], gpu_model=h100,
            gpu_count=8, max_runtime_seconds=3600,
        )  # fmt: skip
    gpu = Gpu.objects.filter(model=h100).order_by("pk").first()
    now = timezone.now().replace(minute=0, second=0, microsecond=0)
    GpuHourRollup.objects.bulk_create(
        GpuHourRollup(gpu=gpu, bucket=now - timedelta(hours=h + 1), samples=1, util_avg=50.0,
                      busy_seconds=0)
        for h in range(24)
    )  # fmt: skip

    client = Client()
    client.force_login(alice)
    queue = client.get("/jobs/queue/")
    api = client.get("/api/v1/queue/").json()
    gpu_page = client.get(f"/dashboards/gpus/{gpu.pk}/?range=7d")
    client.force_login(User.objects.get(username="admin"))
    created = client.post(
        "/teams/new/",
        {"slug": "genomics", "name": "Genomics", f"guaranteed_{h100.pk}": 1, f"limit_{h100.pk}": 2},
    )
    print(
        json.dumps(
            {
                "queue_status": queue.status_code,
                "queue_names": [j["name"] for g in api["models"] for j in g["jobs"]],
                "teams_rows": len(api["teams"]),
                "gpu_status": gpu_page.status_code,
                "gpu_points": len(gpu_page.context["figures"]["gpu-activity"]["data"][0]["x"]),
                "team_created": created.status_code == 302
                and Team.objects.filter(slug="genomics").exists(),
            }
        )
    )


if __name__ == "__main__":
    main()
