"""Scenario run by test_sqlite.py in a subprocess on a fresh SQLite database: the 7-day
utilization and idle dashboards (pre-summed hour sums, idle hours summed in Python) as the
SQLite demo serves them. Prints one JSON line."""

import json
import os
from datetime import timedelta


def main() -> None:
    import django

    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")
    django.setup()
    from django.core.management import call_command
    from django.db import connection
    from django.test import Client
    from django.utils import timezone

    from apps.fleet.models import Gpu, GpuModel, Node
    from apps.teams.models import Team, User
    from apps.telemetry.choices import IdleKind
    from apps.telemetry.idle import idle_hours_rollup
    from apps.telemetry.models import GpuHourRollup, IdleInterval
    from apps.telemetry.rollups import rollup_team_models

    call_command("migrate", verbosity=0)
    team = Team.objects.create(slug="vision", name="Vision", cost_center="CC-1")
    admin = User.objects.create_user("sqlite-admin", global_role="platform_admin")
    h100 = GpuModel.objects.create(name="H100-SXM-80GB", memory_mib=81559)
    l40s = GpuModel.objects.create(name="L40S-48GB", memory_mib=46068)
    node = Node.objects.create(hostname="sqlite-node")
    gpus = [
        Gpu.objects.create(node=node, index=i, uuid=f"GPU-sqlite-{i}", model=model)
        for i, model in enumerate([h100, h100, l40s])
    ]
    end = timezone.now().replace(minute=0, second=0, microsecond=0)
    start = end - timedelta(hours=48)
    rows = []
    for h in range(48):
        bucket = start + timedelta(hours=h)
        common = {"bucket": bucket, "samples": 240}
        rows += [
            GpuHourRollup(gpu=gpus[0], team=team, util_avg=50, busy_seconds=1800,
                          sm_active_avg=20, **common),
            GpuHourRollup(gpu=gpus[1], team=None, util_avg=1, busy_seconds=0, **common),
            GpuHourRollup(gpu=gpus[2], team=team, util_avg=90, busy_seconds=3600, **common),
        ]  # fmt: skip
    GpuHourRollup.objects.bulk_create(rows)
    rollup_team_models(start=start, end=end)
    IdleInterval.objects.create(
        gpu=gpus[1],
        kind=IdleKind.UNALLOCATED,
        start=end - timedelta(hours=30),
        end=end - timedelta(hours=20),
    )
    idle_hours_rollup(start=start, end=end)
    client = Client(HTTP_HOST="localhost")
    client.force_login(admin)
    utilization = client.get("/api/v1/dashboards/utilization/?range=7d").json()
    idle = client.get("/api/v1/dashboards/idle/?range=7d").json()
    busy = {
        trace["name"]: sum(y for y in trace["y"] if y) * utilization["step_seconds"] / 3600
        for trace in utilization["figures"]["allocated-busy"]["data"]
        if trace["name"].endswith("busy")
    }
    print(
        json.dumps(
            {
                "vendor": connection.vendor,
                "busy_gpu_hours": busy,
                "idle_by_kind": [
                    (row["kind"], row["model_name"], row["gpu_hours"]) for row in idle["by_kind"]
                ],
                "idle_traces": [t["name"] for t in idle["figures"]["idle-hours"]["data"]],
            }
        )
    )


if __name__ == "__main__":
    main()
