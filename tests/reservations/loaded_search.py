"""The availability search as it was before the database read free gaps: each look-ahead loads
every holding into Python and runs the pure `find_slots` over every GPU's intervals. Kept as
the oracle of the search that replaced it (tests) and as its "before" (bench/reservations.py)."""

from collections import defaultdict

from apps.reservations import availability, selectors
from apps.reservations.selectors.free import INITIAL_LOOKAHEAD


def loaded_search(
    *, gpu_model, count, duration, after, horizon, slot, same_node=False, limit=5, blocked=()
):
    """The search as it was: each look-ahead loads the holdings into Python, then runs the
    pure `find_slots` over every GPU's intervals."""
    gpus = selectors.schedulable_gpus(gpu_model=gpu_model, ready_by=horizon)
    step, first = availability.seconds(slot), availability.to_epoch_ceil(after)
    last = availability.floor_to_grid(availability.to_epoch(horizon), step)
    lookahead = max(INITIAL_LOOKAHEAD, 4 * duration)
    busy = defaultdict(list, selectors.powered_down_busy(gpus))
    loaded_until = None
    search_from = first
    while True:
        until = min(last, availability.floor_to_grid(first + availability.seconds(lookahead), step))
        load_end = availability.from_epoch(until) + duration
        more = selectors.busy_intervals(
            gpu_model=gpu_model, start=after, end=load_end, starting_from=loaded_until
        )
        for gpu_id, spans in more.items():
            busy[gpu_id].extend(spans)
        loaded_until = load_end
        with_blocked = (
            {gpu.id: [*busy.get(gpu.id, ()), *blocked] for gpu in gpus} if blocked else busy
        )
        slots = availability.find_slots(
            gpus,
            with_blocked,
            count=count,
            duration=availability.seconds(duration),
            after=search_from,
            horizon=until,
            slot=step,
            same_node=same_node,
            limit=limit,
        )
        runs_to_end = bool(slots) and slots[-1].latest_start >= until
        if until >= last or len(slots) >= limit or runs_to_end:
            break
        if not slots:
            search_from = until + step
        lookahead *= 2
    return [
        (
            availability.from_epoch(s.start),
            availability.from_epoch(s.latest_start),
            sorted(g.id for g in s.gpus),
        )
        for s in slots
    ]
