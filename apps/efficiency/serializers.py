"""How advice items and totals are written out: the API, the CSV and the page share these."""

from decimal import Decimal

from apps.efficiency.advice import Item

ITEM_COLUMNS = [
    "kind",
    "id",
    "team",
    "user",
    "gpu_model",
    "gpus",
    "start",
    "gpu_hours",
    "busy_gpu_hours",
    "activity_percent",
    "activity_signal",
    "memory_peak_mib",
    "memory_total_mib",
    "idle_gpus",
    "finding",
    "detail",
    "suggestion",
    "saving",
]


# The efficiency figures a CSV line carries, as `Efficiency.as_dict` rounds them.
_ROW_FIGURES = (
    "gpu_hours",
    "busy_gpu_hours",
    "activity_percent",
    "activity_signal",
    "memory_peak_mib",
    "memory_total_mib",
    "idle_gpus",
)


def _item_identity(item: Item) -> dict:
    return {
        "kind": item.kind,
        "id": item.pk,
        "team": item.team,
        "user": item.user,
        "gpu_model": item.gpu_model,
        "gpus": item.gpus,
        "start": item.start.isoformat(),
    }


def item_rows(items: list[Item]) -> list[dict]:
    """One row per finding of each item (an item with two findings gives two rows)."""
    rows = []
    for item in items:
        figures = item.efficiency.as_dict()
        head = {**_item_identity(item), **{key: figures[key] for key in _ROW_FIGURES}}
        for finding in item.findings:
            rows.append(
                {
                    **head,
                    "finding": finding.kind,
                    "detail": finding.detail,
                    "suggestion": finding.suggestion,
                    "saving": None if finding.saving is None else str(finding.saving),
                }
            )
    return rows


def item_payload(item: Item) -> dict:
    return {
        **_item_identity(item),
        "efficiency": item.efficiency.as_dict(),
        "saving": str(item.saving),
        "findings": [
            {
                "kind": f.kind,
                "label": f.label,
                "detail": f.detail,
                "suggestion": f.suggestion,
                "saving": None if f.saving is None else str(f.saving),
            }
            for f in item.findings
        ],
    }


def total_payload(row: dict) -> dict:
    return {
        **row,
        "gpu_hours": round(row["gpu_hours"], 2),
        "busy_gpu_hours": round(row["busy_gpu_hours"], 2),
        "idle_gpu_hours": round(row["idle_gpu_hours"], 2),
        "saving": str(row["saving"].quantize(Decimal("0.01"))),
    }
