"""Many clients booking at the same instant, each on its own database connection.

Used by the PostgreSQL test in-process and run as a script against a fresh SQLite file
(`python -m tests.reservations.race`), since the suite's own database is PostgreSQL.
"""

import threading
from collections import Counter
from datetime import timedelta

from django.db import connection, connections

from portal.exceptions import ConflictError, PolicyRefusal


def book_concurrently(requests: list[dict]) -> Counter:
    """Run reservation_create for every request at once; count outcomes by kind."""
    from apps.reservations.services import reservation_create

    barrier = threading.Barrier(len(requests))
    outcomes: Counter = Counter()
    lock = threading.Lock()

    def client(request: dict) -> None:
        try:
            barrier.wait(timeout=30)
            reservation_create(**request)
            kind = "booked"
        except ConflictError:
            kind = "conflict"
        except PolicyRefusal as refusal:
            kind = refusal.code
        except Exception as error:  # noqa: BLE001 - reported as a failure by the caller
            kind = f"error:{type(error).__name__}:{error}"
        finally:
            connections.close_all()
        with lock:
            outcomes[kind] += 1

    threads = [threading.Thread(target=client, args=(r,)) for r in requests]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    return outcomes


def overlapping_holdings() -> int:
    """Pairs of active holdings of one GPU that overlap in time: must always be 0."""
    with connection.cursor() as cursor:
        cursor.execute(
            """
            SELECT COUNT(*) FROM reservations_reservationgpu a
            JOIN reservations_reservationgpu b
              ON a.gpu_id = b.gpu_id AND a.id < b.id
             AND a.start < b."end" AND b.start < a."end"
            WHERE a.active AND b.active
            """
        )
        return cursor.fetchone()[0]


def scenario(clients: int):
    """Fleet of 16 H100; `clients` bookings of 4 GPUs by 4 teams over overlapping windows, and
    `clients` one-GPU bookings of one team whose quota has 5 left. Returns (requests, requests)."""
    from django.utils import timezone

    from apps.fleet.models import GpuModel
    from apps.teams.choices import TeamRole
    from apps.teams.models import Membership, Quota, Team, User
    from tests.factories import make_node_with_gpus

    make_node_with_gpus("race-a", 8)
    make_node_with_gpus("race-b", 8)
    model = GpuModel.objects.get(name="H100-SXM-80GB")
    start = (timezone.now() + timedelta(days=2)).replace(hour=10, minute=0, second=0, microsecond=0)
    teams, users = [], []
    for i in range(5):
        team = Team.objects.create(slug=f"race-{i}", name=f"Race {i}")
        user = User.objects.create(username=f"racer-{i}")
        Membership.objects.create(team=team, user=user, role=TeamRole.MEMBER)
        Quota.objects.create(team=team, gpu_model=model, guaranteed=0, limit=16 if i < 4 else 5)
        teams.append(team)
        users.append(user)
    overlapping = [
        dict(
            team=teams[i % 4],
            user=users[i % 4],
            gpu_model=model,
            count=4,
            start=start + timedelta(minutes=15 * (i % 3)),
            end=start + timedelta(hours=2, minutes=15 * (i % 3)),
        )
        for i in range(clients)
    ]
    last_unit = [
        dict(
            team=teams[4],
            user=users[4],
            gpu_model=model,
            count=1,
            start=start + timedelta(days=1),
            end=start + timedelta(days=1, hours=1),
        )
        for _ in range(clients)
    ]
    return overlapping, last_unit


def main() -> None:
    import json
    import os
    import sys

    import django

    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")
    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)
    clients = int(sys.argv[1]) if len(sys.argv) > 1 else 8
    overlapping, last_unit = scenario(clients)
    result = {
        "overlapping": book_concurrently(overlapping),
        "last_unit": book_concurrently(last_unit),
        "overlaps": overlapping_holdings(),
        "vendor": connection.vendor,
    }
    print(json.dumps(result))


if __name__ == "__main__":
    main()
