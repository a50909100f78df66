"""Reads behind the dashboards: filters, rollup series (downsampled), idle time, occupancy,
fleet health and quota pressure. Every function takes the teams the user may see; rows of
other teams never leave here.

Windows up to 24 hours read minute rollups, longer ones hour rollups. Rollups are summed over
GPUs in SQL (one row per bucket and team); buckets are then merged so that no trace has more
than `MAX_POINTS` points.
"""

from apps.dashboards.selectors.capacity import (  # noqa: F401
    capacity,
)
from apps.dashboards.selectors.filters import (  # noqa: F401
    MAX_POINTS,
    MAX_SPAN,
    RANGES,
    UNALLOCATED,
    FilterError,
    Filters,
    parse_filters,
    step_for,
)
from apps.dashboards.selectors.fleet import (  # noqa: F401
    fleet_health,
    quota_pressure,
)
from apps.dashboards.selectors.home import (  # noqa: F401
    home_summary,
)
from apps.dashboards.selectors.idle import (  # noqa: F401
    POWERED_DOWN,
    gpu_state_counts,
    gpu_states_now,
    idle_hours,
    reclaimed,
)
from apps.dashboards.selectors.occupancy import (  # noqa: F401
    occupancy,
)
from apps.dashboards.selectors.utilization import (  # noqa: F401
    allocated_series,
    utilization_series,
)
from apps.teams.selectors import TeamNotVisible  # noqa: F401
