"""The house style of every Plotly figure in the portal (dashboards, cost, what-if): one palette,
one layout, one JSON form. In core so that every app draws alike without importing another
app's figures."""

import json
import re
from datetime import datetime

import plotly.graph_objects as go
from django.utils import timezone

# Okabe-Ito: distinguishable with the common colour-vision deficiencies.
PALETTE = ["#0072B2", "#E69F00", "#009E73", "#CC79A7", "#56B4E9", "#D55E00", "#F0E442", "#000000"]
GREY = "#999999"
# Figures are built with aware times and this axis title; figure_json writes the times as wall
# clock in the reader's zone and names the zone in the title (the one time rule of
# portal/formatting.py): plotly.js itself draws every time as UTC.
TIME_AXIS = "Time (UTC)"
ZONED = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d(:\d\d(\.\d+)?)?(Z|[+-]\d\d:\d\d)$")
LAYOUT = {
    "margin": {"l": 60, "r": 20, "t": 30, "b": 50},
    "colorway": PALETTE,
    # Above the plot: below it, a horizontal legend runs into the x-axis title and tick labels.
    "legend": {"orientation": "h", "yanchor": "bottom", "y": 1.02, "xanchor": "left", "x": 0},
    "font": {"family": "system-ui, sans-serif", "size": 13},
}


def figure_json(figure: go.Figure) -> dict:
    """The figure as plain JSON without plotly's default template (~10 kB each)."""
    data = json.loads(figure.to_json())
    data["layout"].pop("template", None)
    _in_readers_zone(data)
    # Long tick labels (GPU model names, rotated dates) grow the margin instead of being cut.
    for name, axis in data["layout"].items():
        if name.startswith(("xaxis", "yaxis")) and isinstance(axis, dict):
            axis.setdefault("automargin", True)
    return data


def _in_readers_zone(data: dict) -> None:
    """Zoned time strings on x (bars' base, axis ranges) become wall-clock times in the
    current zone, and "(UTC)" in a time axis title names that zone ("Time (EST)"; "EST/EDT"
    when the times cross a DST change)."""
    names: list[str] = []

    def local(value):
        if not isinstance(value, str) or not ZONED.match(value):
            return value
        moment = timezone.localtime(datetime.fromisoformat(value.replace("Z", "+00:00")))
        name = moment.tzname() or "UTC"
        if name not in names:
            names.append(name)
        return moment.strftime("%Y-%m-%d %H:%M:%S")

    for trace in data.get("data", []):
        for key in ("x", "base"):
            if isinstance(trace.get(key), list):
                trace[key] = [local(value) for value in trace[key]]
    axes = [axis for name, axis in data["layout"].items() if name.startswith("xaxis")]
    for axis in axes:
        if isinstance(axis, dict) and isinstance(axis.get("range"), list):
            axis["range"] = [local(value) for value in axis["range"]]
    zone = "/".join(names) or timezone.localtime().tzname() or "UTC"
    for axis in axes:
        title = axis.get("title") if isinstance(axis, dict) else None
        if isinstance(title, dict) and "(UTC)" in str(title.get("text", "")):
            title["text"] = title["text"].replace("(UTC)", f"({zone})")
