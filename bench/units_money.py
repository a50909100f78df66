"""Money and quotas by organisation unit at 200 teams in 20 units, each beside one raw SQL
GROUP BY of the same data in the same run.

Seeds organisation > 4 departments > 5 groups each (20 units below the departments), 10 teams
in each group (200 teams), a quota per team and per unit, and November 2026's ledger: every
team 4 GPU-hour lines a day for 30 days (24,000 lines) at a price that leaves fractions of a
cent; and what the teams hold this week: every team a booking of one GPU now and one on
Thursday, and a job running outside bookings on another GPU (400 more GPUs). Times, through
Django's test client as a platform admin (median of 5 runs, after one warm-up):
  (a) the chargeback by unit page (/billing/units/) and its API (/api/v1/chargeback/units/),
      vs one SQL GROUP BY unit of the ledger;
  (b) the cost dashboard grouped by unit (/billing/cost/?group=unit: each department's cost
      summed from its teams' rounded totals) and by team, vs the same SQL GROUP BY unit (both
      read the teams' totals from every export line of the month: the over-quota part is
      rounded line by line, so no GROUP BY gives it);
  (c) the quota page (/quotas/), vs one SQL join of the teams' and units' quotas, and vs a
      bare Django view (bench/urls.py) that lists the quota rows with each team's GPUs held
      now in one SQL statement; and how many queries the page makes.
Target: each under 300 ms.

Run: .venv/bin/python bench/units_money.py
Uses its own PostgreSQL database (portal_bench_units, dropped and rebuilt).
"""

import os
import statistics
import sys
import time
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ["DATABASE_URL"] = os.environ.get(
    "BENCH_UNITS_DATABASE_URL", "postgres://postgres@127.0.0.1:5432/portal_bench_units"
)
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "bench.settings")

import django  # noqa: E402

django.setup()

from django.db import connection  # noqa: E402

from bench.common import recreate_database  # noqa: E402

NOV = datetime(2026, 11, 1, tzinfo=UTC)
DEPARTMENTS, GROUPS, TEAMS_PER_GROUP = 4, 5, 10
LINES_PER_DAY, DAYS, GPUS = 4, 30, 64
HOLDING_GPUS = 400
PRICE = Decimal("2.3333")
TARGET_MS = 300
RUNS = 5

UNIT_SQL = """
SELECT t.unit_id, SUM(l.cost) FROM billing_ledgerentry l
JOIN teams_team t ON t.id = l.team_id
JOIN billing_billingperiod p ON p.id = l.period_id
WHERE p.month = %s GROUP BY t.unit_id"""
QUOTA_SQL = """
SELECT t.unit_id, q.team_id, q.gpu_model_id, q.guaranteed, q."limit", u.guaranteed, u."limit"
FROM teams_quota q JOIN teams_team t ON t.id = q.team_id
LEFT JOIN teams_unitquota u ON u.unit_id = t.unit_id AND u.gpu_model_id = q.gpu_model_id
ORDER BY t.unit_id, q.team_id"""


def seed() -> None:
    from apps.billing.models import BillingPeriod, LedgerEntry, RateCard
    from apps.fleet.models import Gpu, GpuModel, Node
    from apps.teams.models import OrgUnit, Quota, Team, UnitQuota, User, root_unit_pk

    model = GpuModel.objects.create(name="H100-SXM-80GB", memory_mib=81920)
    card = RateCard.objects.create(
        gpu_model=model, price_per_gpu_hour=PRICE, effective_from=NOV - timedelta(days=60)
    )
    nodes = Node.objects.bulk_create(Node(hostname=f"gpu-{i:03d}") for i in range(GPUS // 8))
    gpus = Gpu.objects.bulk_create(
        Gpu(node=node, index=i, uuid=f"GPU-{node.hostname}-{i}", model=model)
        for node in nodes
        for i in range(8)
    )
    root = OrgUnit.objects.get(pk=root_unit_pk())
    teams = []
    for d in range(DEPARTMENTS):
        department = OrgUnit.objects.create(slug=f"dept-{d}", name=f"Dept {d}", parent=root)
        UnitQuota.objects.create(unit=department, gpu_model=model, guaranteed=10, limit=40)
        for g in range(GROUPS):
            group = OrgUnit.objects.create(
                slug=f"group-{d}-{g}", name=f"Group {d}.{g}", parent=department,
                cost_center=f"CC-{d}{g}",
            )  # fmt: skip
            UnitQuota.objects.create(unit=group, gpu_model=model, guaranteed=2, limit=10)
            teams += Team.objects.bulk_create(
                Team(slug=f"team-{d}-{g}-{t}", name=f"Team {d}.{g}.{t}", unit=group)
                for t in range(TEAMS_PER_GROUP)
            )
    Quota.objects.bulk_create(Quota(team=t, gpu_model=model, guaranteed=0, limit=4) for t in teams)
    Quota.objects.bulk_create(Quota(team=t, gpu_model=None, guaranteed=0, limit=6) for t in teams)
    admin = User.objects.create_superuser("bench-admin", "admin@example.org", "x")
    seed_holdings(model, teams, admin)
    period = BillingPeriod.objects.create(month=date(2026, 11, 1))
    lines = []
    for n, team in enumerate(teams):
        for day in range(DAYS):
            for k in range(LINES_PER_DAY):
                start = NOV + timedelta(days=day, hours=(n * LINES_PER_DAY + k) % 24)
                cost = PRICE * (k + 1) / 3
                lines.append(
                    LedgerEntry(
                        period=period, team=team, source="reservation", source_id=n + 1,
                        gpu=gpus[(n * LINES_PER_DAY + k) % GPUS], gpu_model=model,
                        slice_start=start, slice_end=start + timedelta(hours=1),
                        gpu_seconds=3600, busy_seconds=3000, unit_price=PRICE,
                        rate_card=card, gpu_cost=cost, cost=cost,
                    )
                )  # fmt: skip
    LedgerEntry.objects.bulk_create(lines, batch_size=5000)


def seed_holdings(model, teams, user) -> None:
    """Every team: a booking of one GPU now, one on Thursday, and a job running outside
    bookings on a GPU of its own (the quota page counts all three)."""
    from django.utils import timezone

    from apps.fleet.models import Gpu, Node
    from apps.jobs.choices import JobStatus
    from apps.jobs.models import Job, JobAllocation
    from apps.reservations.models import Reservation, ReservationGpu

    now = timezone.now().replace(microsecond=0)
    nodes = Node.objects.bulk_create(
        Node(hostname=f"hold-{i:03d}") for i in range(HOLDING_GPUS // 8)
    )
    gpus = Gpu.objects.bulk_create(
        Gpu(node=node, index=i, uuid=f"GPU-{node.hostname}-{i}", model=model)
        for node in nodes
        for i in range(8)
    )
    spans = [
        (now - timedelta(hours=1), now + timedelta(hours=2)),
        (now + timedelta(days=2), now + timedelta(days=2, hours=4)),
    ]
    bookings = Reservation.objects.bulk_create(
        Reservation(
            team=team, created_by=user, gpu_model=model, count=1, start=s, end=e, status="active"
        )
        for team in teams
        for s, e in spans
    )
    ReservationGpu.objects.bulk_create(
        ReservationGpu(reservation=b, gpu=gpus[n // len(spans)], start=b.start, end=b.end)
        for n, b in enumerate(bookings)
    )
    jobs = Job.objects.bulk_create(
        Job(
            team=team, submitted_by=user, argv=["train"], gpu_model=model, gpu_count=1,
            max_runtime_seconds=8 * 3600, status=JobStatus.RUNNING,
            started_at=now - timedelta(hours=1),
        )
        for team in teams
    )  # fmt: skip
    JobAllocation.objects.bulk_create(
        JobAllocation(job=job, gpu=gpus[len(teams) + n], start=job.started_at)
        for n, job in enumerate(jobs)
    )


def timed(fn) -> float:
    fn()  # warm-up
    runs = []
    for _ in range(RUNS):
        started = time.perf_counter()
        fn()
        runs.append((time.perf_counter() - started) * 1000)
    return statistics.median(runs)


def raw(sql, params=()):
    def run():
        with connection.cursor() as cursor:
            cursor.execute(sql, params)
            return cursor.fetchall()

    return run


def main() -> int:
    from django.test import Client
    from django.test.utils import CaptureQueriesContext

    from apps.billing.models import LedgerEntry
    from apps.teams.models import OrgUnit, Team, User

    recreate_database()
    started = time.perf_counter()
    seed()
    print(
        f"bench/units_money.py: {Team.objects.count()} teams in "
        f"{OrgUnit.objects.count() - 1 - DEPARTMENTS} groups under {DEPARTMENTS} departments, "
        f"{LedgerEntry.objects.count():,} ledger lines (seeded in "
        f"{time.perf_counter() - started:.1f} s)"
    )
    client = Client(HTTP_HOST="localhost")
    client.force_login(User.objects.get(username="bench-admin"))

    def page(url):
        def get():
            response = client.get(url)
            assert response.status_code == 200, response.content[:300]
            return response

        return get

    month = [date(2026, 11, 1)]
    checks = [
        ("chargeback by unit, page", "/billing/units/?period=2026-11", UNIT_SQL, month),
        ("chargeback by unit, API", "/api/v1/chargeback/units/?period=2026-11", UNIT_SQL, month),
        ("cost dashboard by unit", "/billing/cost/?period=2026-11&group=unit", UNIT_SQL, month),
        ("cost dashboard by team", "/billing/cost/?period=2026-11", UNIT_SQL, month),
        ("quota page", "/quotas/", QUOTA_SQL, []),
    ]
    bare_ms = timed(page("/bench/bare-quotas/"))
    failed = False
    for name, url, sql, params in checks:
        baseline_ms = timed(raw(sql, params))
        ms = timed(page(url))
        ok = ms < TARGET_MS
        failed |= not ok
        print(
            f"{name:28} {ms:8.1f} ms   raw SQL GROUP BY {baseline_ms:6.1f} ms   "
            f"ratio {ms / baseline_ms:6.1f}x   target < {TARGET_MS} ms: {'ok' if ok else 'MISSED'}"
        )
        if url == "/quotas/":
            with CaptureQueriesContext(connection) as queries:
                page(url)()
            print(
                f"{'':28} bare Django view {bare_ms:6.1f} ms   ratio {ms / bare_ms:6.1f}x   "
                f"{len(queries)} queries"
            )
    body = client.get("/api/v1/chargeback/units/?period=2026-11").json()
    rows = dict(raw(UNIT_SQL, [date(2026, 11, 1)])())
    groups = {row["unit"]: Decimal(row["cost"]) for row in body["units"]}
    exact = sum(rows.values())
    print(
        f"organisation total {groups['organisation']} (rounded per team) vs exact ledger sum "
        f"{exact:.4f}"
    )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
