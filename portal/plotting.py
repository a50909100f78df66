"""The house style of every Plotly figure in the portal (dashboards, cost, what-if): one palette,
one layout, one JSON form. In core so that every app draws alike without importing another
app's figures."""

import json

import plotly.graph_objects as go

# Okabe-Ito: distinguishable with the common colour-vision deficiencies.
PALETTE = ["#0072B2", "#E69F00", "#009E73", "#CC79A7", "#56B4E9", "#D55E00", "#F0E442", "#000000"]
GREY = "#999999"
# Times are sent in UTC; static/js/dashboards.js redraws them in the reader's zone and renames
# the axis (the one time rule of portal/formatting.py).
TIME_AXIS = "Time (UTC)"
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
    # Long tick labels (GPU model names, rotated dates) grow the margin instead of being cut.
    for name, axis in data["layout"].items():
        if name.startswith(("xaxis", "yaxis")) and isinstance(axis, dict):
            axis.setdefault("automargin", True)
    return data
