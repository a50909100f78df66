"""The idle dashboard's heatmap of GPUs gets its cells (z, text) after plotly built the figure;
the figure is the one plotly builds with them."""

import plotly.graph_objects as go
import pytest

from apps.dashboards import figures
from apps.dashboards.selectors.filters import parse_filters
from apps.fleet.choices import PowerState
from apps.fleet.models import Node
from portal.plotting import figure_json

pytestmark = pytest.mark.django_db


def test_the_heatmap_equals_plotlys_own_with_its_cells(history, platform_admin):
    # a missing cell (a node of fewer GPUs) and a powered-down node's cells too
    Node.objects.filter(hostname="l40s-a").update(power_state=PowerState.OFF)
    built = figures.idle(parse_filters({"range": "24h"}, platform_admin))["figures"]["gpu-states"]
    (trace,) = built["data"]
    assert None in trace["z"][-1] and any(text for row in trace["text"] for text in row)
    by_plotly = figure_json(
        go.Figure(
            go.Heatmap({key: value for key, value in trace.items() if key != "type"}),
            layout=built["layout"],
        )
    )
    assert built == by_plotly
