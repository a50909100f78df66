"""What the chargeback page shows against what every export format and level adds up to, and
a random month to check it on. Shared by the PostgreSQL tests and the SQLite scenario
(`tests.billing.sqlite_chargeback`), so both databases are held to the same rule."""

import csv
import io
import json
import random
import tempfile
from collections import defaultdict
from datetime import UTC, datetime, timedelta
from decimal import Decimal

# A month of its own, so the random months never mix with the demo's or a fixture's.
MONTH = datetime(2026, 9, 1, tzinfo=UTC)
AFTER_MONTH = datetime(2026, 10, 2, 12, tzinfo=UTC)


def _by_team(pairs) -> dict[str, Decimal]:
    totals: dict[str, Decimal] = defaultdict(Decimal)
    for team, amount in pairs:
        totals[team] += Decimal(str(amount))
    return dict(totals)


def format_totals(period) -> dict[str, dict[str, Decimal]]:
    """Per team (sub-account) sums of the cost column of every format and level, read back
    from the files the exports write."""
    from openpyxl import load_workbook

    from apps.billing import exports, focus, statements

    result = {}
    for level in (exports.SUMMARY, exports.DETAIL):
        scope = exports.ExportScope(period, None, level)
        header = exports.table_columns(level, showback=False)
        text = "".join(exports.csv_chunks(header, exports.table_rows(scope)))
        rows = csv.DictReader(io.StringIO(text))
        result[f"csv-{level}"] = _by_team((r["team"], r["cost"]) for r in rows)
        document = json.loads("".join(exports.json_chunks(scope, exports.table_rows(scope))))
        result[f"json-{level}"] = _by_team((r["team"], r["cost"]) for r in document["rows"])
    scope = exports.ExportScope(period)
    for version in focus.FOCUS_VERSIONS:
        text = "".join(focus.focus_csv_chunks(scope, version))
        rows = csv.DictReader(io.StringIO(text))
        result[f"focus-{version}"] = _by_team((r["SubAccountId"], r["BilledCost"]) for r in rows)
    with tempfile.NamedTemporaryFile(suffix=".xlsx") as handle:
        exports.write_xlsx(scope, handle.name)
        detail = list(load_workbook(handle.name)["Detail"].iter_rows(values_only=True))
    team, cost = detail[0].index("team"), detail[0].index("cost")
    assert detail[-1][0] == exports.TOTAL_LABEL  # the totals row: formulas, not a line
    result["xlsx"] = _by_team((row[team], row[cost]) for row in detail[1:-1])
    result["statement"] = {s.team.slug: s.total for s in statements.team_statements(period)}
    result["charged"] = _charged_by_slug(period)
    return result


def _charged_by_slug(period) -> dict[str, Decimal]:
    """What the home page, budgets and forecasts show as each team's spend
    (`charged_by_team`), by sub-account."""
    from apps.billing.choices import PLATFORM_COST_CENTER
    from apps.billing.selectors import charged_by_team
    from apps.teams.models import Team

    slugs = dict(Team.objects.values_list("pk", "slug"))
    charged = charged_by_team(period).items()
    return {slugs[team] if team else PLATFORM_COST_CENTER: cost for team, cost in charged}


def page_totals(period) -> dict[str, Decimal]:
    """The per-team figures of the chargeback page (the same rows it renders)."""
    from apps.billing import exports

    return {row["sub_account"]: row["cost"] for row in exports.team_totals(period)}


def drift(period) -> dict[str, dict[str, str]]:
    """{format: {team: export sum - page}} for every team where they differ (empty: none)."""
    page = page_totals(period)
    found = {}
    for name, totals in format_totals(period).items():
        # Statements are the teams'; the platform's unallocated capacity has none.
        teams = set(page) - {"platform"} if name == "statement" else set(page)
        off = {
            team: str(totals.get(team, Decimal(0)) - page.get(team, Decimal(0)))
            for team in teams | set(totals)
            if totals.get(team, Decimal(0)) != page.get(team, Decimal(0))
        }
        if off:
            found[name] = off
    return found


PARTS = ("busy_cost", "held_idle_cost", "over_quota_cost", "energy_cost", "adjustment_cost")
FOCUS_PARTS = {
    "busy_cost": "x_BusyCost",
    "held_idle_cost": "x_HeldIdleCost",
    "over_quota_cost": "x_OverQuotaCost",
    "energy_cost": "x_EnergyCost",
}
STATEMENT_PARTS = {
    "busy_cost": "busy-share",
    "held_idle_cost": "idle-share",
    "over_quota_cost": "over-quota-share",
    "energy_cost": "energy-share",
    "adjustment_cost": "adjustments-total",
}
AMOUNT = r"(-?[\d,]+\.\d{2})"


def _add_parts(found: dict, team: str, values: dict) -> None:
    team_parts = found.setdefault(team, {})
    for name, value in values.items():
        team_parts[name] = team_parts.get(name, Decimal(0)) + Decimal(str(value or 0))


def _table_parts(rows) -> dict:
    found: dict = {}
    for row in rows:
        _add_parts(found, row["team"], {name: row[name] for name in PARTS})
        _add_parts(found, row["team"], {"energy_kwh": row["energy_kwh"]})
    return found


def _focus_parts(rows) -> dict:
    found: dict = {}
    for row in rows:
        values = {name: row[column] for name, column in FOCUS_PARTS.items()}
        adjustment = row["ChargeCategory"] == "Adjustment"
        values["adjustment_cost"] = row["BilledCost"] if adjustment else 0
        values["energy_kwh"] = row["x_EnergyKwh"]
        _add_parts(found, row["SubAccountId"], values)
    return found


def _amount(text: str) -> Decimal:
    return Decimal(text.replace(",", ""))


def _statement_html_parts(html: str) -> dict:
    """The parts a statement shows (page or file), read from the HTML a person sees."""
    import re

    values = {}
    for name, testid in STATEMENT_PARTS.items():
        match = re.search(rf'data-testid="{testid}">{AMOUNT}', html)
        assert match, f"{testid} missing from the statement"
        values[name] = _amount(match.group(1))
    return values


def page_html_parts(html: str) -> dict:
    """{team: {part: amount}} read from the chargeback page's HTML."""
    import re

    found = {}
    for row in re.finditer(r'<tr data-team="([^"]+)">(.*?)</tr>', html, re.S):
        cells = dict(re.findall(rf'data-part="(\w+)">{AMOUNT}', row.group(2)))
        found[row.group(1)] = {name: _amount(cells[name]) for name in PARTS}
    return found


def format_parts(period, client=None) -> dict[str, dict[str, dict[str, Decimal]]]:
    """{output: {team: {part: amount}}} of the ten outputs: the page, CSV and JSON at both
    levels, XLSX, FOCUS 1.2 and 1.3, and the statements (page and ZIP, read from their HTML;
    teams only). With a `client` (a finance user's), the page and statements are fetched over
    HTTP as a person gets them; otherwise built from the same code without the web layer."""
    import zipfile

    from django.template.loader import render_to_string
    from openpyxl import load_workbook

    from apps.billing import exports, focus, statements

    month = f"{period.month:%Y-%m}"
    result = {}
    for level in (exports.SUMMARY, exports.DETAIL):
        scope = exports.ExportScope(period, None, level)
        header = exports.table_columns(level, showback=False)
        text = "".join(exports.csv_chunks(header, exports.table_rows(scope)))
        result[f"csv-{level}"] = _table_parts(csv.DictReader(io.StringIO(text)))
        document = json.loads("".join(exports.json_chunks(scope, exports.table_rows(scope))))
        result[f"json-{level}"] = _table_parts(document["rows"])
    scope = exports.ExportScope(period)
    for version in focus.FOCUS_VERSIONS:
        text = "".join(focus.focus_csv_chunks(scope, version))
        result[f"focus-{version}"] = _focus_parts(csv.DictReader(io.StringIO(text)))
    with tempfile.NamedTemporaryFile(suffix=".xlsx") as handle:
        exports.write_xlsx(scope, handle.name)
        detail = list(load_workbook(handle.name)["Detail"].iter_rows(values_only=True))
    header = detail[0]
    result["xlsx"] = _table_parts(dict(zip(header, row, strict=True)) for row in detail[1:-1])
    teams = [s.team for s in statements.team_statements(period)]
    if client is not None:
        result["page"] = page_html_parts(client.get(f"/billing/?period={month}").content.decode())
        pages = {
            team.slug: client.get(f"/billing/statements/{month}/{team.slug}/").content.decode()
            for team in teams
        }
        zipped = b"".join(client.get(f"/billing/statements/{month}.zip").streaming_content)
        archive = zipfile.ZipFile(io.BytesIO(zipped))
    else:
        result["page"] = {
            row["sub_account"]: {name: row[name] for name in PARTS}
            for row in exports.team_totals(period)
        }
        pages = {
            team.slug: render_to_string("billing/_statement_body.html", {"statement": s})
            for team, s in ((s.team, s) for s in statements.team_statements(period))
        }

        def render(statement):
            return render_to_string("billing/statement_file.html", {"statement": statement})

        with statements.statements_zip_file(period, render) as handle:
            archive = zipfile.ZipFile(io.BytesIO(handle.read()))
    result["statement"] = {slug: _statement_html_parts(html) for slug, html in pages.items()}
    result["statement-zip"] = {
        name.split(f"statement-{month}-")[1].removesuffix("-draft.html").removesuffix(".html"): (
            _statement_html_parts(archive.read(name).decode())
        )
        for name in archive.namelist()
    }
    return result


def part_drift(period, client=None) -> dict[str, list[str]]:
    """{output: [team part: value vs the page's]} wherever an output's part differs from the
    chargeback page's (empty: every part agrees in all ten outputs). Energy in kWh is compared
    across the files that carry it."""
    outputs = format_parts(period, client)
    page = outputs.pop("page")
    reference_kwh = outputs["csv-detail"]
    found = {}
    for name, by_team in outputs.items():
        teams = set(page) - {"platform"} if name.startswith("statement") else set(page)
        off = []
        for team in sorted(teams | set(by_team)):
            seen, expected = by_team.get(team, {}), page.get(team, {})
            for part in PARTS:
                if seen.get(part, Decimal(0)) != expected.get(part, Decimal(0)):
                    off.append(f"{team} {part}: {seen.get(part)} vs {expected.get(part)}")
            if "energy_kwh" in seen:
                kwh = reference_kwh.get(team, {}).get("energy_kwh", Decimal(0))
                if seen["energy_kwh"] != kwh:
                    off.append(f"{team} energy_kwh: {seen['energy_kwh']} vs {kwh}")
        if off:
            found[name] = off
    return found


def member_drift(period) -> dict[str, str]:
    """{team: members + adjustments - page} for every team where the cost by member does not
    add up to the team's total on the chargeback page (empty: all do)."""
    from apps.billing.member_costs import team_member_costs
    from apps.teams.models import Team

    page = page_totals(period)
    found = {}
    for team in Team.objects.filter(slug__in=set(page) - {"platform"}):
        total = team_member_costs(period, team).total
        if total != page[team.slug]:
            found[team.slug] = str(total - page[team.slug])
    return found


def component_violations(period) -> list[str]:
    """Lines (page rows and export lines of both levels) where rounding put a component below
    zero or above the line's cost. (A team's row on the page can have a held-idle cost above
    its total when a credit lowers the total; rounding must not add to that.)"""
    from apps.billing import exports

    lines = [("page", row) for row in exports.team_totals(period)]
    for level in (exports.SUMMARY, exports.DETAIL):
        lines += [
            (level, row) for row in exports.export_lines(exports.ExportScope(period, level=level))
        ]
    bad = []
    for where, row in lines:
        for name in exports.COMPONENTS:
            exact = row[f"exact_{name}"]
            fits = exact <= row["exact_cost"]
            if row[name] < 0 or (fits and row[name] > max(row["cost"], Decimal(0))):
                bad.append(f"{where} {row['sub_account']} {name} {row[name]} > {row['cost']}")
    return bad


def build_random_month(seed: int) -> "object":
    """Two days of September on a small fleet with prices in cents (half-cent totals are
    common then), over-quota bookings, partial hours, telemetry for some hours only, a
    credit; metered. Returns the period."""
    from apps.billing.metering import meter_interval
    from apps.billing.models import BillingPeriod, RateCard
    from apps.billing.services import adjustment_create
    from apps.fleet.models import Gpu, GpuModel, Node
    from apps.reservations.choices import ReservationStatus
    from apps.reservations.models import Reservation, ReservationGpu
    from apps.teams.choices import GlobalRole
    from apps.teams.models import Team, User
    from apps.telemetry.models import GpuHourRollup

    rng = random.Random(seed)
    finance = User.objects.create(username=f"fin-{seed}", global_role=GlobalRole.FINANCE)
    teams = [Team.objects.create(slug=f"team-{seed}-{i}", name=f"Team {i}") for i in range(3)]
    gpus = []
    for m in range(2):
        model = GpuModel.objects.create(name=f"M{seed}-{m}", memory_mib=1024)
        RateCard.objects.create(
            gpu_model=model,
            price_per_gpu_hour=Decimal(rng.randint(50, 499)) / 100,
            effective_from=MONTH - timedelta(days=30),
            over_quota_multiplier=Decimal(rng.choice(["1", "1.25", "1.5"])),
            energy_price_per_kwh=Decimal(rng.randint(0, 30)) / 100 or None,
        )
        node = Node.objects.create(hostname=f"n{seed}-{m}")
        for index in range(rng.randint(1, 3)):
            gpus.append(
                Gpu.objects.create(
                    node=node, index=index, model=model, uuid=f"GPU-{seed}-{m}-{index}",
                    in_fleet_since=MONTH + timedelta(minutes=rng.choice([0, 0, 30, 95])),
                )
            )  # fmt: skip
    first_day = rng.randint(0, 25)
    start, end = MONTH + timedelta(days=first_day), MONTH + timedelta(days=first_day + 2)
    for gpu in gpus:
        cursor = start + timedelta(minutes=rng.randrange(0, 600, 5))
        while cursor < end:
            length = timedelta(minutes=rng.randrange(15, 900, 5))
            team = rng.choice(teams)
            reservation = Reservation.objects.create(
                team=team, created_by=finance, gpu_model=gpu.model, count=1, start=cursor,
                end=cursor + length, status=ReservationStatus.COMPLETED,
                over_quota=rng.random() < 0.3,
            )  # fmt: skip
            ReservationGpu.objects.create(
                reservation=reservation, gpu=gpu, start=cursor, end=cursor + length,
                over_quota=reservation.over_quota,
            )  # fmt: skip
            cursor += length + timedelta(minutes=rng.randrange(0, 300, 5))
        hour = start
        while hour < end:
            if rng.random() < 0.7:
                GpuHourRollup.objects.create(
                    gpu=gpu, bucket=hour, samples=240, busy_seconds=rng.uniform(0, 3600),
                    energy_j=rng.uniform(0, 2.5e6),
                )  # fmt: skip
            hour += timedelta(hours=1)
    meter_interval(start=start, end=end, now=AFTER_MONTH)
    period = BillingPeriod.objects.get(month=MONTH.date())
    adjustment_create(
        actor=finance, team=rng.choice(teams), amount=Decimal(-rng.randint(1, 999)) / 100,
        reason="credit", period=period, now=AFTER_MONTH,
    )  # fmt: skip
    return period
