"""Billing benchmarks, each beside one raw SQL aggregate of the same data in the same run.

(a) metering: November 2026 for 1,000 GPUs (125 nodes x 8, two models) and 20 teams, bookings
    covering about 60 % of the GPU-time and an hour rollup for every GPU-hour (720,000 GPU-hours,
    ~720,000 rollup rows): meter_interval over the month, then a re-run (inserts nothing).
    Baseline: one SQL aggregate of the same holdings and rollups per team. Target: < 60 s.
(b) FOCUS export of that month (every ledger line, streamed as CSV to a null sink), with the
    peak Python memory it took (tracemalloc), vs one SQL GROUP BY of the ledger into the same
    lines. Target: < 10 s and bounded memory. Both FOCUS versions (1.3 splits bookings' lines into
    busy and held-idle rows with their allocation ratios). The export as the API streams it
    (on PostgreSQL rendered by the database), beside `focus_rows` written by the csv module.
(c) every team's monthly statement as one ZIP, vs one SQL GROUP BY team, model and source.
(d) the XLSX export, vs one SQL GROUP BY team, day and model.
(e) the hourly metering run on day 2 and on day 28 of the month (the ledger charged up to the
    hour before; alone, and with one late-telemetry range of an old hour to correct), beside
    the raw SQL aggregate of the same hours, and beside what the run cost when it re-checked
    the month so far. Target: the same cost on any day of the month.

(f) the team totals of the month (cost page, chargeback page, API: `exports.team_totals`,
    rounded and summed in SQL) and the cost page itself, vs one SQL GROUP BY team of the
    ledger, beside the earlier path (every detail line rounded and summed in Python).

Run: .venv/bin/python bench/billing.py [--gpus 1000] [--no-rollups] [--only b,d]
        [--reuse] [--digest] [--profile focus-1.3]
Uses its own PostgreSQL database (portal_bench_billing, dropped and rebuilt; another with
BENCH_BILLING_DATABASE_URL). --reuse keeps a month built by an earlier run of the same --gpus
(no seeding, no metering); --digest prints a SHA-256 of each export's bytes (from a further
pass), so two versions of the code can be compared on the same month; --profile runs one export
once more under cProfile and prints where its time went.
"""

import argparse
import cProfile
import hashlib
import os
import pstats
import random
import sys
import time
import tracemalloc
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ["DATABASE_URL"] = os.environ.get(
    "BENCH_BILLING_DATABASE_URL", "postgres://postgres@127.0.0.1:5432/portal_bench_billing"
)
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "bench.settings")

import django  # noqa: E402

django.setup()

from django.db import connection  # noqa: E402

from bench.common import recreate_database  # noqa: E402

NOV = datetime(2026, 11, 1, tzinfo=UTC)
DEC = datetime(2026, 12, 1, tzinfo=UTC)
NOW = datetime(2026, 12, 2, tzinfo=UTC)
TEAMS = 20
MODELS = (("H100-SXM-80GB", Decimal("2.50")), ("A100-SXM4-80GB", Decimal("1.60")))


def seed(gpu_count: int, with_rollups: bool) -> None:
    from apps.billing.models import RateCard
    from apps.fleet.models import Gpu, GpuModel, Node
    from apps.reservations.models import Reservation, ReservationGpu
    from apps.teams.models import Team, User

    rng = random.Random(7)
    models = []
    for name, price in MODELS:
        model = GpuModel.objects.create(name=name, memory_mib=81920)
        RateCard.objects.create(
            gpu_model=model,
            price_per_gpu_hour=price,
            effective_from=NOV - timedelta(days=60),
            over_quota_multiplier=Decimal("1.25"),
            energy_price_per_kwh=Decimal("0.21"),
        )
        models.append(model)
    nodes = Node.objects.bulk_create(Node(hostname=f"gpu-{i:04d}") for i in range(gpu_count // 8))
    gpus = Gpu.objects.bulk_create(
        Gpu(node=node, index=i, uuid=f"GPU-{node.hostname}-{i}", model=models[n % 2],
            nvlink_domain=node.hostname, in_fleet_since=NOV - timedelta(days=30))
        for n, node in enumerate(nodes) for i in range(8)
    )  # fmt: skip
    teams = Team.objects.bulk_create(
        Team(slug=f"team-{t:02d}", name=f"Team {t}") for t in range(TEAMS)
    )
    user = User.objects.create(username="bench")
    reservations, spans = [], []
    for gpu in gpus:
        cursor = NOV + timedelta(minutes=15 * rng.randrange(0, 40))
        while cursor < DEC:
            length = timedelta(minutes=15 * rng.randrange(8, 192))  # 2 h to 48 h
            team = teams[rng.randrange(TEAMS)]
            reservations.append(
                Reservation(team=team, created_by=user, gpu_model_id=gpu.model_id, count=1,
                            start=cursor, end=cursor + length, status="completed",
                            over_quota=rng.random() < 0.15)
            )  # fmt: skip
            spans.append((gpu.id, cursor, cursor + length))
            cursor += length + timedelta(minutes=15 * rng.randrange(4, 120))
    created = Reservation.objects.bulk_create(reservations, batch_size=5000)
    ReservationGpu.objects.bulk_create(
        (ReservationGpu(reservation=r, gpu_id=g, start=s, end=e)
         for r, (g, s, e) in zip(created, spans, strict=True)),
        batch_size=5000,
    )  # fmt: skip
    if with_rollups:
        columns = "gpu_id, bucket, samples, util_avg, busy_seconds, energy_j, power_avg_w"
        with (
            connection.cursor() as cursor,
            cursor.cursor.copy(f"COPY telemetry_gpuhourrollup ({columns}) FROM STDIN") as copy,
        ):
            for gpu in gpus:
                hour = NOV
                while hour < DEC:
                    busy = rng.random() * 3600
                    copy.write_row((gpu.id, hour, 240, busy / 36, busy, 1_800_000.0, 500.0))
                    hour += timedelta(hours=1)
    connection.cursor().execute("ANALYZE")
    print(f"seeded {len(gpus)} GPUs, {TEAMS} teams, {len(reservations)} bookings in November")


RAW_METER_BASELINE = """
SELECT r.team_id,
       sum(extract(epoch FROM least(h."end", %(end)s) - greatest(h.start, %(start)s))) AS seconds,
       sum(extract(epoch FROM least(h."end", %(end)s) - greatest(h.start, %(start)s))
           * rc.price_per_gpu_hour / 3600) AS cost
FROM reservations_reservationgpu h
JOIN reservations_reservation r ON r.id = h.reservation_id
JOIN fleet_gpu g ON g.id = h.gpu_id
JOIN billing_ratecard rc ON rc.gpu_model_id = g.model_id
WHERE h.active AND h.start < %(end)s AND h."end" > %(start)s
GROUP BY r.team_id
"""
RAW_ROLLUP_BASELINE = """
SELECT gpu_id, sum(busy_seconds), sum(energy_j) FROM telemetry_gpuhourrollup
WHERE bucket >= %(start)s AND bucket < %(end)s GROUP BY gpu_id
"""
RAW_FOCUS_BASELINE = """
SELECT l.team_id, l.source, l.source_id, l.gpu_id, l.over_quota, l.unit_price,
       date_trunc('day', l.slice_start AT TIME ZONE 'UTC') AS day,
       sum(l.gpu_seconds), sum(l.busy_seconds), sum(l.energy_kwh), sum(l.cost)
FROM billing_ledgerentry l WHERE l.period_id = %(period)s
GROUP BY 1, 2, 3, 4, 5, 6, 7 ORDER BY 1, 7, 2, 3, 4
"""


def timed(fn):
    t0 = time.perf_counter()
    result = fn()
    return result, time.perf_counter() - t0


def timed_cpu(fn):
    """As `timed`, with this process's CPU seconds too: the export's own Python work, which a
    busy machine's other processes stretch less than its wall time."""
    cpu = time.process_time()
    result, seconds = timed(fn)
    return result, seconds, time.process_time() - cpu


def baseline_of(sql, params):
    """The raw query's best of three runs (the first also warms the cache for the export)."""
    return min(timed(lambda: raw(sql, params))[1] for _ in range(3))


def raw(sql, params):
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return cursor.fetchall()


def bench_metering():
    from apps.billing.metering import meter_interval
    from apps.billing.models import LedgerEntry

    window = {"start": NOV, "end": DEC}
    _, baseline = timed(lambda: (raw(RAW_METER_BASELINE, window), raw(RAW_ROLLUP_BASELINE, window)))
    result, first = timed(lambda: meter_interval(start=NOV, end=DEC, now=NOW))
    again, rerun = timed(lambda: meter_interval(start=NOV, end=DEC, now=NOW))
    rows = LedgerEntry.objects.count()
    print("\n(a) metering November (720 hours)")
    print(f"{'path':44} {'seconds':>9} {'ratio':>7}")
    print(f"{'raw SQL aggregate (holdings + rollups)':44} {baseline:9.2f} {1:7.1f}")
    print(f"{'meter_interval, first run':44} {first:9.2f} {first / baseline:7.1f}")
    print(f"{'meter_interval, re-run (idempotent)':44} {rerun:9.2f} {rerun / baseline:7.1f}")
    print(f"ledger rows: {rows:,} inserted first: {result.inserted:,}, re-run: {again.inserted}")
    print(f"target < 60 s: {'met' if first < 60 else 'MISSED'}")


class NullSink:
    def write(self, chunk):
        return len(chunk)


class DigestSink:
    """The SHA-256 of what is written (only in the --digest pass, not a timed one)."""

    def __init__(self):
        self.hash = hashlib.sha256()

    def write(self, chunk):
        self.hash.update(chunk.encode() if isinstance(chunk, str) else chunk)
        return len(chunk)


OPTIONS = argparse.Namespace(digest=False, profile=None)


def profiled(name, fn):
    """`fn` once more under cProfile when --profile names this export: the top of the profile."""
    if OPTIONS.profile != name:
        return
    profile = cProfile.Profile()
    profile.runcall(fn)
    stats = pstats.Stats(profile).sort_stats("tottime")
    stats.print_stats(25)


def bench_focus(version):
    from apps.billing import exports, focus
    from apps.billing.models import BillingPeriod

    period = BillingPeriod.objects.get(month=NOV.date())
    baseline = baseline_of(RAW_FOCUS_BASELINE, {"period": period.pk})
    scope = exports.ExportScope(period=period)

    def export(sink=None):
        sink, lines = sink or NullSink(), 0
        for chunk in focus.focus_csv_chunks(scope, version):  # as the API streams it
            sink.write(chunk)
            lines += chunk.count("\r\n")  # rows and the header (no field here holds a CRLF)
        return lines

    def written_by_python():  # SQLite's path: `focus_rows` written by the csv module
        rows = focus.focus_rows(scope, version)
        for chunk in exports.csv_chunks(focus.focus_columns(version), rows):
            NullSink().write(chunk)

    lines, seconds, cpu = timed_cpu(export)
    _, python_seconds, python_cpu = timed_cpu(written_by_python)
    tracemalloc.start()  # a second, slower pass only to see the peak memory
    export()
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    print(f"\n(b) FOCUS {version} export of November")
    print(f"{'path':44} {'seconds':>9} {'ratio':>7} {'Python CPU':>11}")
    print(f"{'raw SQL GROUP BY into the same lines':44} {baseline:9.2f} {1:7.1f}")
    print(f"{'FOCUS CSV, streamed':44} {seconds:9.2f} {seconds / baseline:7.1f} {cpu:11.2f}")
    print(
        f"{'  the rows written by the csv module (SQLite)':44} {python_seconds:9.2f} "
        f"{python_seconds / baseline:7.1f} {python_cpu:11.2f}"
    )
    print(f"lines: {lines - 1:,}; peak Python memory while streaming: {peak / 2**20:.1f} MiB")
    print(f"target < 10 s: {'met' if seconds < 10 else 'MISSED'}")
    if OPTIONS.digest:
        sink = DigestSink()
        export(sink)
        print(f"FOCUS {version} CSV sha256: {sink.hash.hexdigest()}")
    profiled(f"focus-{version}", export)


RAW_STATEMENT_BASELINE = """
SELECT l.team_id, m.name, l.source, sum(l.gpu_seconds), sum(l.idle_cost), sum(l.cost)
FROM billing_ledgerentry l LEFT JOIN fleet_gpumodel m ON m.id = l.gpu_model_id
WHERE l.period_id = %(period)s AND l.team_id IS NOT NULL
GROUP BY 1, 2, 3 ORDER BY 1, 2, 3
"""
RAW_XLSX_BASELINE = """
SELECT l.team_id, date_trunc('day', l.slice_start AT TIME ZONE 'UTC') AS day, l.gpu_model_id,
       sum(l.gpu_seconds), sum(l.busy_seconds), sum(l.energy_kwh), sum(l.cost)
FROM billing_ledgerentry l WHERE l.period_id = %(period)s GROUP BY 1, 2, 3 ORDER BY 1, 2, 3
"""


def archive_digest(path_or_file, skip=()):
    """SHA-256 over a ZIP's members (names and contents), not the archive's own bytes, which
    carry the time it was written."""
    import zipfile

    digest = hashlib.sha256()
    with zipfile.ZipFile(path_or_file) as archive:
        for name in sorted(archive.namelist()):
            if name not in skip:
                digest.update(name.encode() + b"\0" + archive.read(name))
    return digest.hexdigest()


def bench_statements():
    from django.template.loader import render_to_string

    from apps.billing import statements
    from apps.billing.models import BillingPeriod

    period = BillingPeriod.objects.get(month=NOV.date())
    baseline = baseline_of(RAW_STATEMENT_BASELINE, {"period": period.pk})

    def render(statement):
        return render_to_string("billing/statement_file.html", {"statement": statement})

    def write_zip():
        with statements.statements_zip_file(period, render) as archive:
            return archive.seek(0, os.SEEK_END)

    size, seconds, cpu = timed_cpu(write_zip)
    print("\n(c) every team's statement of November as one ZIP of HTML files")
    print(f"{'path':44} {'seconds':>9} {'ratio':>7}")
    print(f"{'raw SQL GROUP BY team, model, source':44} {baseline:9.2f} {1:7.1f}")
    print(f"{'statements ZIP (rounded, rendered)':44} {seconds:9.2f} {seconds / baseline:7.1f}")
    print(f"ZIP: {size:,} bytes for {TEAMS} teams; Python CPU of the export: {cpu:.2f} s")
    if OPTIONS.digest:
        with statements.statements_zip_file(period, render) as archive:
            print(f"statements sha256 (members): {archive_digest(archive)}")
    profiled("statements", write_zip)


def bench_xlsx():
    import tempfile

    from apps.billing import exports
    from apps.billing.models import BillingPeriod

    period = BillingPeriod.objects.get(month=NOV.date())
    baseline = baseline_of(RAW_XLSX_BASELINE, {"period": period.pk})
    with tempfile.NamedTemporaryFile(suffix=".xlsx") as handle:

        def write():
            exports.write_xlsx(exports.ExportScope(period), handle.name)

        _, seconds, cpu = timed_cpu(write)
        size = os.path.getsize(handle.name)
        digest = archive_digest(handle.name, skip={"docProps/core.xml"})  # core: the time
        profiled("xlsx", write)
    print("\n(d) XLSX export of November (Summary + Detail, formats, SUM totals)")
    print(f"{'path':44} {'seconds':>9} {'ratio':>7}")
    print(f"{'raw SQL GROUP BY team, day, model':44} {baseline:9.2f} {1:7.1f}")
    print(f"{'write_xlsx (write-only workbook)':44} {seconds:9.2f} {seconds / baseline:7.1f}")
    print(f"file: {size:,} bytes; Python CPU of the export: {cpu:.2f} s")
    if OPTIONS.digest:
        print(f"XLSX sha256 (members but docProps/core.xml): {digest}")


RAW_HOURLY_BASELINE = """
SELECT h.gpu_id, r.team_id,
       sum(extract(epoch FROM least(h."end", %(end)s) - greatest(h.start, %(start)s))) AS seconds
FROM reservations_reservationgpu h JOIN reservations_reservation r ON r.id = h.reservation_id
WHERE h.active AND h.start < %(end)s AND h."end" > %(start)s GROUP BY 1, 2
"""


def bench_hourly():
    from django.conf import settings
    from django.db.models import F

    from apps.billing.metering import meter_hourly, meter_interval, note_hours_rolled_up_again
    from apps.billing.models import BillingPeriod, LedgerEntry, RemeterRange
    from apps.telemetry.models import GpuHourRollup

    hour = timedelta(hours=1)
    lookback = settings.BILLING_METER_LOOKBACK_HOURS
    print("\n(e) the hourly metering run (the ledger charged up to the hour before)")
    print(f"{'path':52} {'seconds':>9} {'ratio':>7}")
    figures = {}
    warm_up = NOV + timedelta(days=27, hours=10)  # untimed: the first run loads what all reuse
    LedgerEntry.objects.filter(slice_start__gte=warm_up - hour).delete()
    meter_hourly(now=warm_up, lookback_hours=lookback)
    for day in (28, 2):  # day 28 first: rewinding to day 2 drops the month's later charges
        run_at = NOV + timedelta(days=day - 1, hours=10)

        def rewind(run_at=run_at):
            LedgerEntry.objects.filter(slice_start__gte=run_at - hour).delete()
            BillingPeriod.objects.update(metered_until=run_at - hour)

        window = {"start": run_at - lookback * hour, "end": run_at}
        _, floor = timed(lambda window=window: (raw(RAW_HOURLY_BASELINE, window),
                                                raw(RAW_ROLLUP_BASELINE, window)))  # fmt: skip
        rewind()
        result, seconds = timed(
            lambda run_at=run_at: meter_hourly(now=run_at, lookback_hours=lookback)
        )
        rewind()
        late_hour = NOV + timedelta(hours=5)  # its rollups changed: every GPU gets a correction
        GpuHourRollup.objects.filter(bucket=late_hour).update(busy_seconds=F("busy_seconds") / 2)
        note_hours_rolled_up_again(start=late_hour, end=late_hour + hour)
        late, with_late = timed(
            lambda run_at=run_at: meter_hourly(now=run_at, lookback_hours=lookback)
        )
        assert not RemeterRange.objects.exists()
        rewind()
        _, month = timed(lambda run_at=run_at: meter_interval(start=NOV, end=run_at, now=run_at))
        figures[day] = seconds
        for label, value in (
            (f"raw SQL aggregate of the {lookback} hours", floor),
            ("meter_hourly", seconds),
            ("meter_hourly + one late hour", with_late),
            ("the old run (re-check the month so far)", month),
        ):
            print(f"{f'day {day}: {label}':52} {value:9.2f} {value / floor:7.1f}")
        print(
            f"day {day}: rows charged {result.inserted:,}, "
            f"with the late hour corrected {late.corrected:,}"
        )
    print(f"hourly run day 28 / day 2: {figures[28] / figures[2]:.2f}")


RAW_TEAMS_BASELINE = """
SELECT l.team_id, sum(l.gpu_seconds), sum(l.busy_seconds), sum(l.idle_cost), sum(l.energy_cost),
       sum(l.cost)
FROM billing_ledgerentry l WHERE l.period_id = %(period)s GROUP BY 1
"""


def bench_team_totals():
    from django.test import Client

    from apps.billing import exports
    from apps.billing.exports.lines import DETAIL, _merged
    from apps.billing.models import BillingPeriod
    from apps.teams.models import User

    period = BillingPeriod.objects.get(month=NOV.date())
    with connection.cursor() as cursor:  # the statistics autovacuum keeps after a month's metering
        cursor.execute("ANALYZE billing_ledgerentry")
    _, baseline = timed(lambda: raw(RAW_TEAMS_BASELINE, {"period": period.pk}))
    totals, seconds = timed(lambda: exports.team_totals(period))

    def summed_in_python():  # how the totals were made before: every detail line, rounded here
        fields = ("team_id", "team__slug", "team__name", "team__cost_center", "sub_account")
        lines = exports.export_lines(exports.ExportScope(period, None, DETAIL))
        return list(_merged(lines, lambda line: line["team_id"], fields))

    before, python_seconds = timed(summed_in_python)
    assert [(t["sub_account"], t["cost"], t["busy_cost"], t["held_idle_cost"]) for t in totals] == [
        (t["sub_account"], t["cost"], t["busy_cost"], t["held_idle_cost"]) for t in before
    ]
    admin, _ = User.objects.get_or_create(username="bench-finance", global_role="finance")
    client = Client(HTTP_HOST="localhost")
    client.force_login(admin)
    url = "/billing/cost/?period=2026-11"
    client.get(url)  # warm: templates, plotly
    response, page_seconds = timed(lambda: client.get(url))
    assert response.status_code == 200, response.status_code
    print("\n(f) team totals of November (the cost page's and chargeback page's rows)")
    print(f"{'path':52} {'seconds':>9} {'ratio':>7}")
    print(f"{'raw SQL GROUP BY team of the ledger':52} {baseline:9.2f} {1:7.1f}")
    print(
        f"{'exports.team_totals (rounded and summed in SQL)':52} {seconds:9.2f} "
        f"{seconds / baseline:7.1f}"
    )
    print(
        f"{'before: every detail line rounded and summed in Python':52} {python_seconds:9.2f} "
        f"{python_seconds / baseline:7.1f}"
    )
    print(f"{'cost page ' + url:52} {page_seconds:9.2f} {page_seconds / baseline:7.1f}")
    print(f"teams: {len(totals)}; the same cents both ways")


PARTS = ("b", "c", "d", "e", "f")  # after metering, as named above
PROFILED = ("focus-1.2", "focus-1.3", "statements", "xlsx")


def month_built(gpu_count: int) -> bool:
    """Whether the database already holds November metered for `gpu_count` GPUs (--reuse)."""
    from apps.billing.models import BillingPeriod
    from apps.fleet.models import Gpu

    try:
        metered = BillingPeriod.objects.filter(month=NOV.date(), metered_until=DEC).exists()
        return metered and Gpu.objects.count() == gpu_count
    except Exception:  # not migrated yet
        connection.close()
        return False


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gpus", type=int, default=1000)
    parser.add_argument("--no-rollups", action="store_true")
    parser.add_argument("--only", default=",".join(PARTS), help="parts after metering, e.g. b,f")
    parser.add_argument("--reuse", action="store_true")
    parser.add_argument("--digest", action="store_true")
    parser.add_argument("--profile", choices=PROFILED)
    args = parser.parse_args()
    OPTIONS.digest, OPTIONS.profile = args.digest, args.profile
    parts = args.only.split(",")
    if unknown := set(parts) - set(PARTS):
        parser.error(f"unknown parts: {', '.join(sorted(unknown))}")
    reused = args.reuse and month_built(args.gpus)
    if not reused:
        recreate_database()
        seed(args.gpus, with_rollups=not args.no_rollups)
    else:
        print(f"reusing the month built for {args.gpus} GPUs")
    if not reused:
        bench_metering()
    with connection.cursor() as cursor:  # the statistics autovacuum keeps after a month's metering
        cursor.execute("ANALYZE billing_ledgerentry")
    runs = {
        "b": lambda: (bench_focus("1.2"), bench_focus("1.3")),
        "c": bench_statements,
        "d": bench_xlsx,
        "e": bench_hourly,
        "f": bench_team_totals,
    }
    for part in PARTS:
        if part in parts:
            runs[part]()


if __name__ == "__main__":
    main()
