"""Plotly figures of the dashboards, built on the server from apps.dashboards.selectors and sent
to the browser as JSON (the page draws them with the bundled plotly.js)."""

from collections import Counter
from datetime import datetime
from decimal import Decimal

import plotly.graph_objects as go

from apps.billing.selectors import price_per_gpu_hour
from apps.dashboards import selectors
from apps.dashboards.selectors import POWERED_DOWN, UNALLOCATED, Filters
from apps.telemetry.activity import activity_of
from apps.telemetry.choices import ActivitySignal
from portal.plotting import GREY, LAYOUT, PALETTE, TIME_AXIS, figure_json  # noqa: F401

# Above this many points a line is drawn with WebGL (scattergl). SVG draws a few thousand points
# quickly and works where WebGL does not (virtual desktops, browsers without GPU acceleration),
# so WebGL is kept for the long per-GPU series only.
GL_POINTS = 5000
STATE_ORDER = ["busy", "held_idle", UNALLOCATED, "held_other", POWERED_DOWN, "unhealthy"]
STATE_LABELS = {
    "busy": "Busy",
    "held_idle": "Held, idle",
    UNALLOCATED: "Unallocated (free)",
    "held_other": "Held by another team",
    POWERED_DOWN: "Powered down (saving energy)",
    "unhealthy": "Unhealthy or drained",
}
SIGNAL_LABELS = {
    ActivitySignal.SM_ACTIVE: "SM activity (GPM)",
    ActivitySignal.UTIL: "utilization %",
}
STATE_COLOURS = {
    "busy": "#009E73",
    "held_idle": "#E69F00",
    UNALLOCATED: "#56B4E9",
    "held_other": "#CC79A7",
    POWERED_DOWN: "#000000",
    "unhealthy": "#D55E00",
}


def _colour(names: list[str]) -> dict[str, str]:
    colours, i = {}, 0
    for name in names:
        if name == UNALLOCATED:
            colours[name] = GREY
        else:
            colours[name] = PALETTE[i % len(PALETTE)]
            i += 1
    return colours


def _iso(times: list[datetime]) -> list[str]:
    return [t.isoformat() for t in times]


def utilization(filters: Filters) -> dict:
    """Allocated GPUs stacked by team with the GPUs actually busy, and utilization % per team
    and GPU model."""
    series = selectors.utilization_series(filters)
    x = _iso(series["times"])
    colours = _colour(list(series["allocated"]))
    over_time = go.Figure(
        layout={
            **LAYOUT,
            "yaxis": {"title": "GPUs (average over each step)", "rangemode": "tozero"},
            "xaxis": {"type": "date", "title": TIME_AXIS},
            "hovermode": "x unified",
        }
    )
    for name, values in series["allocated"].items():
        over_time.add_trace(
            go.Scatter(
                x=x,
                y=values,
                name=f"{name} allocated" if name != UNALLOCATED else "unallocated",
                stackgroup="allocated",
                mode="lines",
                line={"width": 0.5, "color": colours[name]},
            )
        )
    line = go.Scattergl if len(x) > GL_POINTS else go.Scatter
    for name, values in series["busy"].items():
        if name == UNALLOCATED:
            continue
        over_time.add_trace(
            line(
                x=x,
                y=values,
                name=f"{name} busy",
                mode="lines",
                line={"color": colours[name], "dash": "dot", "width": 2},
            )
        )
    cells = series["by_team_model"]
    teams = sorted({c["team_slug"] for c in cells})
    models = sorted({c["model_name"] for c in cells})
    # SM activity where the GPUs report it (GPM): utilization % counts a GPU running one tiny
    # kernel as fully used.
    z = [[None for _ in models] for _ in teams]
    text = [["" for _ in models] for _ in teams]
    hover = [["" for _ in models] for _ in teams]
    for c in cells:
        row, col = teams.index(c["team_slug"]), models.index(c["model_name"])
        activity, signal = activity_of(sm_active_avg=c["sm_active"], util_avg=c["util"])
        gpm = signal == ActivitySignal.SM_ACTIVE
        z[row][col] = round(activity, 1)
        text[row][col] = f"{z[row][col]:.0f}%" + (" SM" if gpm else "")
        hover[row][col] = f"{c['team_slug']} on {c['model_name']}: " + (
            f"SM activity {c['sm_active']:.1f}% (utilization {c['util']:.1f}%)"
            if gpm and c["util"] is not None
            else f"SM activity {c['sm_active']:.1f}%"
            if gpm
            else f"utilization {c['util']:.1f}% (no GPM metrics on this model)"
        )
    per_team = go.Figure(
        go.Heatmap(
            x=models,
            y=teams,
            z=z,
            zmin=0,
            zmax=100,
            colorscale="Cividis",
            colorbar={"title": "SM activity (GPM)<br>or utilization (%)"},
            text=text,
            texttemplate="%{text}",
            customdata=hover,
            hovertemplate="%{customdata}<extra></extra>",
        ),
        layout={
            **LAYOUT,
            "xaxis": {"type": "category", "title": "GPU model"},
            "yaxis": {"type": "category", "title": "Team"},
        },
    )
    teams_allocated = (v for n, v in series["allocated"].items() if n != UNALLOCATED)
    return {
        "has_data": series["has_telemetry"] or any(any(v) for v in teams_allocated),
        "step_seconds": int(series["step"].total_seconds()),
        "figures": {
            "allocated-busy": figure_json(over_time),
            "util-team-model": figure_json(per_team),
        },
    }


def _price(model_name: str, at: datetime) -> Decimal | None:
    return price_per_gpu_hour(gpu_model_name=model_name, at=at)


def idle(filters: Filters) -> dict:
    """The fleet now (node x GPU), idle GPU-hours over time by kind and team, idle hours and
    their list-price cost by kind and model, and what idle reclaim released."""
    states = selectors.gpu_states_now(filters)
    for s in states:
        s["state_label"] = STATE_LABELS[s["state"]]
    nodes = sorted({s["node"] for s in states})
    rows = {node: row for row, node in enumerate(nodes)}
    width = max((s["index"] for s in states), default=-1) + 1
    codes = {state: i for i, state in enumerate(STATE_ORDER)}
    z = [[None] * width for _ in nodes]
    text = [[""] * width for _ in nodes]
    for s in states:
        row, col = rows[s["node"]], s["index"]
        z[row][col] = codes[s["state"]]
        text[row][col] = (
            f"{s['node']}/gpu{s['index']} {s['model']}: {STATE_LABELS[s['state']]}"
            + (f", node {s['power']}" if s["power"] else "")
            + (f" ({s['team']})" if s["team"] else "")
            + (f", judged on {SIGNAL_LABELS[s['signal']]}" if s["signal"] else "")
        )
    n = len(STATE_ORDER)
    colourscale = []
    for i, state in enumerate(STATE_ORDER):
        colourscale += [[i / n, STATE_COLOURS[state]], [(i + 1) / n, STATE_COLOURS[state]]]
    # The cells (z, text: a value and a sentence per GPU) join the figure after plotly has
    # built it: plotly validates and copies every element of a 2-D array, 0.1-0.2 s of CPU for
    # 10,000 GPUs, and these plain numbers and strings need none of it.
    heatmap = go.Figure(
        go.Heatmap(
            x=[f"gpu{i}" for i in range(width)],
            y=nodes,
            zmin=-0.5,
            zmax=n - 0.5,
            hovertemplate="%{text}<extra></extra>",
            colorscale=colourscale,
            xgap=2,
            ygap=2,
            colorbar={
                "tickvals": list(range(n)),
                "ticktext": [STATE_LABELS[s] for s in STATE_ORDER],
            },
        ),
        layout={
            **LAYOUT,
            "margin": {**LAYOUT["margin"], "l": 110},
            "yaxis": {"type": "category", "autorange": "reversed"},
        },
    )
    heatmap = figure_json(heatmap)
    heatmap["data"][0] |= {"z": z, "text": text}
    hours = selectors.idle_hours(filters)
    x = _iso(hours["times"])
    over_time = go.Figure(
        layout={
            **LAYOUT,
            "barmode": "stack",
            "xaxis": {"type": "date", "title": TIME_AXIS},
            "yaxis": {"title": "Idle time (GPU-hours)"},
        }
    )
    names = sorted({slug for _, slug in hours["series"]}, key=lambda n: (n == UNALLOCATED, n))
    colours = _colour(names)
    for (kind, slug), values in hours["series"].items():
        over_time.add_trace(
            go.Bar(
                x=x,
                y=values,
                name=f"{slug} ({'held, idle' if kind == 'held_idle' else 'unallocated'})"
                if slug != UNALLOCATED
                else "unallocated",
                marker={
                    "color": colours[slug],
                    "pattern": {"shape": "/" if kind == "held_idle" else ""},
                },
            )
        )
    by_kind = []
    for row in hours["by_model"]:
        price = _price(row["model_name"], filters.end)
        cost = (Decimal(str(row["gpu_hours"])) * price).quantize(Decimal("0.01")) if price else None
        by_kind.append({**row, "cost": cost})
    state_counts = Counter(s["state"] for s in states)
    signal_counts = Counter(s["signal"] for s in states)
    return {
        "states": states,
        "state_counts": {s: state_counts[s] for s in STATE_ORDER},
        "state_legend": [(s, STATE_LABELS[s], state_counts[s]) for s in STATE_ORDER],
        "signal_counts": {signal: signal_counts[signal] for signal in SIGNAL_LABELS},
        "signal_legend": [
            (label, signal_counts[signal]) for signal, label in SIGNAL_LABELS.items()
        ],
        "has_idle": bool(hours["series"]),
        "by_kind": by_kind,
        "reclaimed": selectors.reclaimed(filters),
        "figures": {"gpu-states": heatmap, "idle-hours": figure_json(over_time)},
    }


def occupancy(filters: Filters) -> dict:
    """A Gantt chart: one row per GPU, a bar per booking or job, coloured by team."""
    items = selectors.occupancy(filters)
    teams = sorted({i["team"] for i in items})
    colours = _colour(teams)
    figure = go.Figure(
        layout={
            **LAYOUT,
            "barmode": "overlay",
            "showlegend": True,
            "xaxis": {
                "type": "date",
                "range": [filters.start.isoformat(), filters.end.isoformat()],
                "title": TIME_AXIS,
            },
            "margin": {**LAYOUT["margin"], "l": 150},
            "yaxis": {
                "type": "category",
                "categoryorder": "category ascending",
                "autorange": "reversed",
            },
            "height": max(300, 40 + 22 * len({i["gpu"] for i in items})),
        }
    )
    for team in teams:
        for kind in ("booking", "job"):
            rows = [i for i in items if i["team"] == team and i["kind"] == kind]
            if not rows:
                continue
            figure.add_trace(
                go.Bar(
                    orientation="h",
                    y=[r["gpu"] for r in rows],
                    base=[r["start"].isoformat() for r in rows],
                    x=[(r["end"] - r["start"]).total_seconds() * 1000 for r in rows],
                    text=[r["label"] for r in rows],
                    name=f"{team} {kind}s",
                    marker={
                        "color": colours[team],
                        "pattern": {"shape": "x" if kind == "job" else ""},
                    },
                    hovertemplate="%{y}: %{text}<extra></extra>",
                    textposition="none",
                )
            )
    return {
        "has_data": bool(items),
        "count": len(items),
        "figures": {"gantt": figure_json(figure), "capacity": _capacity(filters)},
    }


def _capacity(filters: Filters) -> dict:
    """Demand (GPUs running plus GPUs queued jobs wait for, stacked) against the GPUs powered
    on: where demand stays below the line, capacity could follow it down."""
    data = selectors.capacity(filters)
    x = _iso(data["times"])
    figure = go.Figure(
        layout={
            **LAYOUT,
            "xaxis": {"type": "date", "title": TIME_AXIS},
            "yaxis": {"title": "GPUs (count)", "rangemode": "tozero"},
        }
    )
    figure.add_scatter(x=x, y=data["running"], name="running", stackgroup="demand",
                       line={"shape": "hv"})  # fmt: skip
    figure.add_scatter(x=x, y=data["queued"], name="queued", stackgroup="demand",
                       line={"shape": "hv"})  # fmt: skip
    figure.add_scatter(x=x, y=data["powered_on"], name="powered on", mode="lines",
                       line={"shape": "hv", "color": GREY, "width": 2})  # fmt: skip
    return figure_json(figure)


def fleet(filters: Filters) -> dict:
    """Nodes by status, GPUs by health, and the latest temperature and power of each GPU."""
    data = selectors.fleet_health()
    status = go.Figure(
        go.Bar(
            x=list(data["nodes"]),
            y=list(data["nodes"].values()),
            marker={"color": ["#009E73", "#D55E00", "#E69F00", GREY]},
        ),
        layout={**LAYOUT, "yaxis": {"title": "Nodes (count)"}},
    )
    health = go.Figure(
        go.Bar(
            x=list(data["health"]),
            y=list(data["health"].values()),
            marker={"color": ["#009E73", "#E69F00", "#D55E00"]},
        ),
        layout={**LAYOUT, "yaxis": {"title": "GPUs (count)"}},
    )
    readings = data["readings"]
    line = go.Scattergl if len(readings) > GL_POINTS else go.Scatter
    # Temperature and power in two panels over the same GPUs: on one plot with two y axes a
    # GPU's two markers land on each other whenever the scales happen to agree.
    thermal = go.Figure(
        layout={
            **LAYOUT,
            "height": 460,
            "margin": {"l": 60, "r": 30, "t": 30, "b": 120},
            "legend": {"orientation": "h", "y": 1.08},
            "xaxis": {"type": "category", "showticklabels": len(readings) <= 64,
                      "anchor": "y2"},
            "yaxis": {"title": {"text": "Temperature (°C)"}, "domain": [0.55, 1],
                      "anchor": "x"},
            "yaxis2": {"title": {"text": "Power (W)"}, "domain": [0, 0.45], "anchor": "x"},
        }
    )  # fmt: skip
    gpus = [r["gpu"] for r in readings]
    thermal.add_trace(
        line(x=gpus, y=[r["temp_c"] for r in readings], name="temperature °C", mode="markers")
    )
    thermal.add_trace(
        line(
            x=gpus,
            y=[r["power_w"] for r in readings],
            name="power W",
            mode="markers",
            yaxis="y2",
            marker={"symbol": "diamond"},
        )
    )
    return {
        **data,
        "figures": {
            "node-status": figure_json(status),
            "gpu-health": figure_json(health),
            "thermal": figure_json(thermal),
        },
    }


def quota_pressure(filters: Filters) -> dict:
    """Held GPUs and queued demand against each team's guarantee and limit."""
    rows = selectors.quota_pressure(filters)
    labels = [f"{r['team']} · {r['gpu_model']}" for r in rows]
    figure = go.Figure(
        layout={**LAYOUT, "barmode": "stack", "yaxis": {"title": "GPUs (count)"}},
    )
    figure.add_trace(go.Bar(x=labels, y=[r["held"] for r in rows], name="held now"))
    figure.add_trace(go.Bar(x=labels, y=[r["waiting"] for r in rows], name="queued jobs want"))
    figure.add_trace(
        go.Scatter(
            x=labels,
            y=[r["guaranteed"] for r in rows],
            name="guaranteed",
            mode="markers",
            marker={"symbol": "line-ew-open", "size": 30, "color": "#000000"},
        )
    )
    figure.add_trace(
        go.Scatter(
            x=labels,
            y=[r["limit"] for r in rows],
            name="limit",
            mode="markers",
            marker={"symbol": "line-ew-open", "size": 30, "color": "#D55E00"},
        )
    )
    return {"rows": rows, "figures": {"quota-pressure": figure_json(figure)}}


def gpu_activity(activity: dict) -> dict:
    """One GPU's utilization and SM activity (where GPM exists) over its window, with the
    memory it used on a second axis."""
    rows = activity["rows"]
    x = _iso([r["bucket"] for r in rows])
    figure = go.Figure(
        layout={
            **LAYOUT,
            "xaxis": {
                "type": "date",
                "title": TIME_AXIS,
                "range": _iso([activity["start"], activity["end"]]),
            },
            "yaxis": {"title": "Activity (%)", "range": [0, 100]},
            "yaxis2": {
                "title": "Memory used (GiB)",
                "overlaying": "y",
                "side": "right",
                "rangemode": "tozero",
                "showgrid": False,
            },
            "hovermode": "x unified",
        }
    )
    figure.add_trace(
        go.Scatter(x=x, y=[r["util_avg"] for r in rows], name="Utilization %", mode="lines")
    )
    if any(r["sm_active_avg"] is not None for r in rows):
        figure.add_trace(
            go.Scatter(
                x=x, y=[r["sm_active_avg"] for r in rows], name="SM activity (GPM)", mode="lines"
            )
        )
    figure.add_trace(
        go.Scatter(
            x=x,
            y=[
                None if r["mem_used_avg_mib"] is None else round(r["mem_used_avg_mib"] / 1024, 2)
                for r in rows
            ],
            name="Memory used",
            mode="lines",
            yaxis="y2",
            line={"dash": "dot", "color": GREY},
        )
    )
    return figure_json(figure)
