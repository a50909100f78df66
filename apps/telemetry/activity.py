"""When a GPU counts as busy, and which signal says so: the one place the portal decides.

Two signals describe how much a GPU works. NVML's utilization % says "some kernel ran during
the poll" (one tiny kernel reads as 100 %); SM activity, a GPM metric of Hopper and newer,
says how much of the GPU actually worked. Where a GPU reports SM activity it is the signal.

**A sample** is busy when its SM activity is at or above TELEMETRY_SM_ACTIVE_BUSY_PERCENT, or,
for a sample without SM activity, when its utilization is at or above
TELEMETRY_BUSY_UTIL_PERCENT. The rule exists three ways built from the same constants, so
that they cannot drift apart: `busy_sample_sql` (the PostgreSQL rollup), `busy_sample_q`
(the ORM) and `sample_is_busy` (the portable rollup, Python). A test holds the three to the
same answers.

**A minute** (a minute rollup) is busy when any of its samples was: `busy_seconds` > 0, which
the rollup writes with the sample rule. `busy_minute_q` / `idle_minute_q` select on it. The
idle page's GPU states, its held-idle intervals, idle reclaim and the busy GPU-hours of
dashboards, efficiency and billing all read that one column, so they agree about the same
GPU. (Before, reclaim and held-idle judged a minute by its *average* SM activity and *peak*
utilization against IDLE_SM_ACTIVE_PERCENT / IDLE_UTIL_PERCENT, while the GPU states and busy
hours used the per-sample rule: a GPU whose SMs worked 12 % for a quarter of a minute was busy
on the idle page and idle to reclaim. Reclaim releases a booking; it now never calls a GPU
idle that did measurable work. Those two settings are read as fallbacks for the busy
thresholds, see settings.)

**A held GPU** stayed idle over an allocation when it was busy less than
EFFICIENCY_IDLE_GPU_BUSY_PERCENT of the time held (`held_gpu_is_idle`), provided telemetry
covers COVERAGE of that time (`covers`): missing telemetry is never taken for idleness.

**The signal of a window** (a GPU over some minutes, or a group of GPUs): SM activity when
*any* minute of it reports SM activity, utilization otherwise (`window_signal`,
`signal_of_average`). Each sample is judged on SM activity where it has it, so a window with
some GPM minutes was judged, at least in part, on SM activity, and the idle page's label and
reclaim's reason must say so; "every minute" would call such a GPU "judged on utilization"
while reclaim judged it on its SMs. Averages follow the same policy: a window's SM activity
is the average over the minutes that report it (efficiency once required every minute).
"""

from django.conf import settings
from django.db.models import Q

from apps.telemetry.choices import ActivitySignal

COVERAGE = 0.8  # share of the time judged that must have telemetry to call a GPU idle


def busy_util_percent() -> float:
    """Utilization % at or above which a sample without SM activity is busy."""
    return settings.TELEMETRY_BUSY_UTIL_PERCENT


def busy_sm_active_percent() -> float:
    """SM activity % at or above which a sample is busy."""
    return settings.TELEMETRY_SM_ACTIVE_BUSY_PERCENT


# --- a sample ------------------------------------------------------------------------------


def sample_is_busy(util: float | None, sm_active: float | None) -> bool:
    """Busy by SM activity where the sample has it (GPM), by utilization % otherwise."""
    if sm_active is not None:
        return sm_active >= busy_sm_active_percent()
    return util is not None and util >= busy_util_percent()


def busy_sample_q(*, util: str = "util_gpu", sm_active: str = "sm_active") -> Q:
    """`sample_is_busy` as an ORM filter on the named fields (GpuSample's by default)."""
    return Q(**{f"{sm_active}__gte": busy_sm_active_percent()}) | Q(
        **{f"{sm_active}__isnull": True, f"{util}__gte": busy_util_percent()}
    )


def busy_sample_sql(*, util: str = "util_gpu", sm_active: str = "sm_active") -> tuple[str, dict]:
    """`sample_is_busy` as a SQL condition on the named columns, with its parameters
    (pyformat placeholders, to merge into the query's own)."""
    condition = (
        f"({sm_active} >= %(busy_sm_active_percent)s"
        f" OR ({sm_active} IS NULL AND {util} >= %(busy_util_percent)s))"
    )
    return condition, {
        "busy_sm_active_percent": busy_sm_active_percent(),
        "busy_util_percent": busy_util_percent(),
    }


# --- a minute rollup -----------------------------------------------------------------------


def busy_minute_q() -> Q:
    """Minute rollups in which the GPU was busy: at least one busy sample."""
    return Q(busy_seconds__gt=0)


def idle_minute_q() -> Q:
    """Minute rollups in which the GPU sat idle: no busy sample."""
    return ~busy_minute_q()


# --- a GPU held over a time ------------------------------------------------------------------


def covers(telemetry_seconds: float, held_seconds: float) -> bool:
    """Telemetry covers enough of the time to call a GPU idle."""
    return telemetry_seconds >= COVERAGE * held_seconds


def held_gpu_is_idle(*, busy_seconds: float, held_seconds: float) -> bool:
    """A GPU held `held_seconds` stayed idle: busy less than EFFICIENCY_IDLE_GPU_BUSY_PERCENT
    of that time (the caller checks coverage)."""
    share = settings.EFFICIENCY_IDLE_GPU_BUSY_PERCENT / 100
    return held_seconds > 0 and busy_seconds < share * held_seconds


# --- which signal ----------------------------------------------------------------------------


def window_signal(gpm_minutes: int | None) -> str:
    """The signal a window is judged on, from how many of its minutes report SM activity."""
    return ActivitySignal.SM_ACTIVE if gpm_minutes else ActivitySignal.UTIL


def signal_of_average(sm_active_avg: float | None) -> str:
    """The signal of a window from its average SM activity (None when no minute had it)."""
    return ActivitySignal.UTIL if sm_active_avg is None else ActivitySignal.SM_ACTIVE


def activity_of(
    *, sm_active_avg: float | None, util_avg: float | None
) -> tuple[float | None, str | None]:
    """(average activity %, signal) of a window: SM activity where any minute reported it,
    else utilization; (None, None) without telemetry."""
    if sm_active_avg is not None:
        return sm_active_avg, ActivitySignal.SM_ACTIVE
    if util_avg is not None:
        return util_avg, ActivitySignal.UTIL
    return None, None


def idle_threshold_text(signals: set[str]) -> str:
    """ "SM activity below 5%", "utilization below 5%", or both, for the signals judged on."""
    parts = []
    if ActivitySignal.SM_ACTIVE in signals:
        parts.append(f"SM activity below {busy_sm_active_percent():g}%")
    if ActivitySignal.UTIL in signals or not parts:
        parts.append(f"utilization below {busy_util_percent():g}%")
    return " / ".join(parts)
