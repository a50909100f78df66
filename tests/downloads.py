"""Every download of the portal fetched over HTTP and read back as its user would, shared by
the PostgreSQL test and the SQLite scenario (`tests.billing.sqlite_chargeback`), so both
databases are held to the same rule: each download is whole, and a team's jobs CSV lists the
team's jobs of the window."""

import csv
import io
import json
import tempfile
import zipfile

CHARGEBACK = [
    ("csv-summary", {"format": "csv", "level": "summary"}),
    ("csv-detail", {"format": "csv", "level": "detail"}),
    ("json-summary", {"format": "json", "level": "summary"}),
    ("json-detail", {"format": "json", "level": "detail"}),
    ("xlsx", {"format": "xlsx"}),
    ("focus-1.2", {"format": "focus", "focus_version": "1.2"}),
    ("focus-1.3", {"format": "focus", "focus_version": "1.3"}),
]


def every_download(client, *, month: str, teams: list[str]) -> dict[str, dict]:
    """Per download: its status, how many rows (files for the ZIP) it holds, whether it ended
    whole, and for a team's jobs CSV how many jobs it should list."""
    from apps.efficiency.forms import AdviceFilterForm

    report = {}
    for name, params in CHARGEBACK:
        response = client.get("/api/v1/chargeback/", {"period": month, **params})
        report[f"chargeback-{name}"] = _read(response, params["format"])
    report["statements-zip"] = _read(client.get(f"/billing/statements/{month}.zip"), "zip")
    report["advice-csv"] = _read(client.get("/efficiency/advice.csv"), "csv")
    window = AdviceFilterForm({})
    window.is_valid()
    for slug in teams:
        outcome = _read(client.get(f"/efficiency/teams/{slug}/jobs.csv"), "csv")
        outcome["expected"] = _team_jobs(
            slug, window.cleaned_data["start"], window.cleaned_data["end"]
        )
        report[f"jobs-{slug}-csv"] = outcome
    return report


def problems(report: dict[str, dict]) -> list[str]:
    """What is wrong with the downloads of `every_download`: [] when all are whole."""
    found = []
    for name, outcome in report.items():
        if outcome["status"] != 200 or not outcome.get("whole"):
            found.append(f"{name}: {outcome}")
        elif "expected" in outcome and outcome["rows"] != outcome["expected"]:
            found.append(f"{name}: {outcome['rows']} rows, {outcome['expected']} jobs expected")
    if not any(o.get("rows") for n, o in report.items() if n.startswith("jobs-")):
        found.append("no team's jobs CSV lists a job")
    return found


def _team_jobs(slug: str, start, end) -> int:
    """The team's jobs that held GPUs in [start, end) or were submitted then, counted straight
    from the tables."""
    from django.db.models import Q

    from apps.jobs.models import Job

    held = Q(allocations__start__lt=end) & (
        Q(allocations__end__isnull=True) | Q(allocations__end__gt=start)
    )
    submitted = Q(submitted_at__gte=start, submitted_at__lt=end)
    return Job.objects.filter(team__slug=slug).filter(held | submitted).distinct().count()


def _read(response, kind: str) -> dict:
    outcome = {"status": response.status_code}
    if response.status_code != 200:
        return outcome
    try:
        body = b"".join(response.streaming_content) if response.streaming else response.content
        outcome["rows"] = READERS[kind](body)
    except Exception as error:  # noqa: BLE001 - reported, the test says which download
        outcome.update(whole=False, error=f"{type(error).__name__}: {error}")
        return outcome
    outcome["whole"] = True
    return outcome


def _csv_rows(body: bytes) -> int:
    rows = list(csv.reader(io.StringIO(body.decode())))
    if any(row and row[0].startswith("ERROR") for row in rows):
        raise ValueError("ends with an ERROR line")
    return len([row for row in rows[1:] if row])


def _json_rows(body: bytes) -> int:
    return len(json.loads(body)["rows"])


def _xlsx_rows(body: bytes) -> int:
    from openpyxl import load_workbook

    with tempfile.NamedTemporaryFile(suffix=".xlsx") as handle:
        handle.write(body)
        handle.flush()
        sheet = load_workbook(handle.name, read_only=True)["Detail"]
        return sum(1 for _ in sheet.iter_rows(values_only=True)) - 2  # header, totals


def _zip_files(body: bytes) -> int:
    archive = zipfile.ZipFile(io.BytesIO(body))
    if archive.testzip() is not None:
        raise ValueError("a damaged member")
    return len(archive.namelist())


READERS = {
    "csv": _csv_rows,
    "focus": _csv_rows,
    "json": _json_rows,
    "xlsx": _xlsx_rows,
    "zip": _zip_files,
}
