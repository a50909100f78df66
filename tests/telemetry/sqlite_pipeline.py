"""The telemetry pipeline on SQLite (the demo's database), run as a script by the test suite:
`python -m tests.telemetry.sqlite_pipeline` with DATABASE_URL pointing at a fresh file."""

import json
import os
from datetime import timedelta


def main() -> None:
    import django

    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")
    django.setup()
    from django.core.management import call_command
    from django.db import connection
    from django.utils import timezone

    from apps.fleet.models import Node
    from apps.fleet.services import node_register
    from apps.telemetry.idle import idle_intervals_update
    from apps.telemetry.ingest import telemetry_ingest
    from apps.telemetry.models import (
        GpuMinuteRollup,
        GpuSample,
        IdleInterval,
        TeamModelHourRollup,
        TelemetryDeadLetter,
    )
    from apps.telemetry.rollups import rollup_hours, rollup_minutes
    from apps.telemetry.selectors import team_model_totals
    from apps.telemetry.services import (
        drain_heartbeat_record,
        node_health_withheld,
        nodes_mark_unreachable,
    )
    from workers.agent.agent import Agent
    from workers.agent.backends import make_reader

    call_command("migrate", verbosity=0)
    sent = []
    reader = make_reader("simulated", "sqlite-node", gpu_count=4, profile="busy")
    agent = Agent(
        hostname="sqlite-node",
        backend="simulated",
        reader=reader,
        send=lambda task, payload: sent.append((task, payload)),
    )
    agent.register()
    node_register(inventory=sent[0][1])
    for _ in range(6):
        agent.poll()
    batches = [payload for task, payload in sent if task == "telemetry.ingest"]
    stored = [telemetry_ingest(batch=b).stored for b in batches]
    again = telemetry_ingest(batch=batches[0])
    resent = telemetry_ingest(batch={**batches[0], "seq": batches[0]["seq"] + 10**6})
    poison = {"node": "probe-\ud800", "seq": 1, "samples": [{"uuid": "\udfff"}]}
    parked = [telemetry_ingest(batch=poison).duplicate_batch for _ in range(2)]
    now = timezone.now()
    minutes = rollup_minutes(start=now - timedelta(minutes=5), end=now + timedelta(minutes=1))
    hours = rollup_hours(start=now - timedelta(minutes=5), end=now + timedelta(minutes=1))
    idle_intervals_update(now=now + timedelta(minutes=1))
    # Node health on SQLite: the agent's stamp is last_seen; judged once the drain has listened.
    last_seen = Node.objects.get().last_seen.timestamp()
    last_seen_is_agent_stamp = abs(last_seen - batches[-1]["sent_at"]) < 0.001
    drain_heartbeat_record(
        started=now - timedelta(hours=1), finished=now + timedelta(minutes=1), backlog=False
    )
    unreachable = nodes_mark_unreachable(now=now + timedelta(minutes=1))
    later = now + timedelta(minutes=10)
    drain_heartbeat_record(started=later, finished=later, backlog=False)  # after a gap
    withheld_after_gap = bool(node_health_withheld(later))
    totals = team_model_totals(
        start=now - timedelta(hours=2), end=now + timedelta(hours=1), unallocated=True
    )
    print(
        json.dumps(
            {
                "vendor": connection.vendor,
                "stored": stored,
                "duplicate": again.duplicate_batch,
                "resent_stored": resent.stored,
                "poison_redelivered": parked,
                "dead_letter_nodes": list(
                    TelemetryDeadLetter.objects.values_list("node", flat=True)
                ),
                "samples": GpuSample.objects.count(),
                "minute_rows": minutes,
                "minute_rollups": GpuMinuteRollup.objects.count(),
                "hour_rows": hours,
                "unallocated": IdleInterval.objects.filter(kind="unallocated").count(),
                "gpm_samples": GpuSample.objects.filter(sm_active__isnull=False).count(),
                "team_model_gpu_hours": sum(
                    TeamModelHourRollup.objects.values_list("gpu_hours", flat=True)
                ),
                "last_seen_is_agent_stamp": last_seen_is_agent_stamp,
                "withheld_after_gap": withheld_after_gap,
                "unreachable": unreachable,
                "totals": [(t["gpu_hours"], t["signal"], t["sm_active_avg"]) for t in totals],
            }
        )
    )


if __name__ == "__main__":
    main()
