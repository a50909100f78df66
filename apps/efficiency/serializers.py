"""How advice items and totals are written out: the API, the CSV and the page share these."""

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


def item_rows(items: list[Item]) -> list[dict]:
    """One row per finding of each item (an item with two findings gives two rows)."""
    rows = []
    for item in items:
        eff = item.efficiency
        for finding in item.findings:
            rows.append(
                {
                    "kind": item.kind,
                    "id": item.pk,
                    "team": item.team,
                    "user": item.user,
                    "gpu_model": item.gpu_model,
                    "gpus": item.gpus,
                    "start": item.start.isoformat(),
                    "gpu_hours": round(eff.gpu_hours, 4),
                    "busy_gpu_hours": round(eff.busy_gpu_hours, 4),
                    "activity_percent": None
                    if eff.activity_percent is None
                    else round(eff.activity_percent, 1),
                    "activity_signal": eff.activity_signal,
                    "memory_peak_mib": eff.memory_peak_mib,
                    "memory_total_mib": eff.memory_total_mib,
                    "idle_gpus": eff.idle_gpus,
                    "finding": finding.kind,
                    "detail": finding.detail,
                    "suggestion": finding.suggestion,
                    "saving": None if finding.saving is None else str(finding.saving),
                }
            )
    return rows


def item_payload(item: Item) -> dict:
    return {
        "kind": item.kind,
        "id": item.pk,
        "team": item.team,
        "user": item.user,
        "gpu_model": item.gpu_model,
        "gpus": item.gpus,
        "start": item.start.isoformat(),
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
        "saving": str(row["saving"].quantize(row["saving"].__class__("0.01"))),
    }
