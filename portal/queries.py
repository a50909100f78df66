"""Questions a lower app asks the apps above it, each declared once with its arguments and answer.

The apps form layers (`.importlinter`): a lower app never imports a higher one. Most of what
crosses upward is a notification (`portal.hooks`: "a node was lost"), whose subscribers' return
values nobody reads. A few pages and rules of a lower app need an *answer* only a higher app
has: the jobs page shows efficiency figures, booking admission asks billing about the budget.
Those questions are declared here and nowhere else, so every dependency that runs against the
layers is listed in one place with its types; `tests/portal/test_queries.py` asks each one of
its real answerers.

An app answers in its `AppConfig.ready()` (`answer(name, func)`); an integration answers through
settings `PORTAL_HOOKS`, as for events. Every asker passes exactly the declared arguments.
"""

from collections.abc import Callable
from dataclasses import dataclass

from portal import hooks


@dataclass(frozen=True)
class Query:
    name: str
    arguments: tuple[str, ...]
    answer: str  # what one answerer returns
    asked_by: str
    answered_by: str


QUERIES: dict[str, Query] = {
    query.name: query
    for query in (
        Query(
            "gpus.busy_intervals",
            ("start", "end", "gpu_ids", "gpu_model", "team"),
            "list of (gpu_id, start_s, end_s): GPUs held outside bookings over [start, end)",
            asked_by="reservations (availability)",
            answered_by="jobs (running jobs until their maximum runtime)",
        ),
        Query(
            "teams.busy_intervals",
            ("start", "end", "teams"),
            "list of (team_id, gpu_model_name, start_s, end_s): GPUs the teams' running jobs "
            "hold outside bookings over [start, end)",
            asked_by="reservations (quota usage of many teams at once)",
            answered_by="jobs (running jobs until their maximum runtime)",
        ),
        Query(
            "booking.busy_intervals",
            ("start", "end", "team", "gpu_model"),
            "list of (gpu_id, team_id, gpu_model_name, start_s, end_s): GPUs held outside bookings "
            "over [start, end) by the team (any model) or on the model (any team)",
            asked_by="reservations (booking admission: the team's quota count and the pick)",
            answered_by="jobs (running jobs until their maximum runtime)",
        ),
        Query(
            "gpus.bookings",
            ("start", "end", "gpu_ids"),
            "{gpu_id: {reservation_id, ...}}: the bookings holding each GPU over [start, end) "
            "(end None: from start on)",
            asked_by="fleet (open bookings on the fleet page, power-off conflicts)",
            answered_by="reservations (holdings)",
        ),
        Query(
            "gpus.leaving_service",
            ("gpu_ids", "actor", "during"),
            "{'moved': [...], 'unresolved': [...]}: what became of the bookings on those GPUs",
            asked_by="fleet (drain, maintenance)",
            answered_by="reservations (relocation)",
        ),
        Query(
            "quota.usage",
            ("quotas", "now"),
            "{quota_id: {'in_use': int, 'peak_7d': int}}",
            asked_by="teams (quota tables)",
            answered_by="reservations (bookings and running jobs, as the quota rule counts)",
        ),
        Query(
            "reservations.budget_check",
            ("team", "gpu_model", "count", "start", "end", "over_quota_gpus"),
            "None; raises PolicyRefusal(code='budget_exhausted') to refuse the booking",
            asked_by="reservations (booking and extension admission)",
            answered_by="billing (block-mode budgets)",
        ),
        Query(
            "jobs.figures",
            ("jobs",),
            "{job_id: {figure: value}}, merged over answerers",
            asked_by="jobs (lists and job page)",
            answered_by="efficiency (busy share, cost so far, estimate)",
        ),
        Query(
            "reservations.figures",
            ("reservations",),
            "{reservation_id: {figure: value}}, merged over answerers",
            asked_by="reservations (lists and booking page)",
            answered_by="efficiency (busy share, cost so far)",
        ),
        Query(
            "teams.member_figures",
            ("team",),
            "{user_id: {figure: value}}, merged over answerers",
            asked_by="teams (team page)",
            answered_by="efficiency (use of GPUs over the last weeks)",
        ),
        Query(
            "teams.member_costs",
            ("team", "month_text"),
            "the month's cost table by member (dict), or None",
            asked_by="teams (team page)",
            answered_by="billing (ledger by member)",
        ),
        Query(
            "gpu_hours.price",
            ("hours_by_model", "at"),
            "price (Decimal) of hours_by_model {model: (hours, of them over quota)}; None when a "
            "model has no rate card",
            asked_by="jobs (what-if)",
            answered_by="billing (rate cards)",
        ),
        Query(
            "energy.price",
            ("kwh_by_model", "at"),
            "price (Decimal) of kwh_by_model {model: kWh} at each model's energy tariff; None "
            "when a model has no energy price",
            asked_by="jobs (what-if: energy power saving saves)",
            answered_by="billing (rate cards' energy price per kWh)",
        ),
        Query(
            "fleet.node_notes",
            ("nodes",),
            "{hostname: note} of what an external scheduler says of each node",
            asked_by="fleet (fleet page)",
            answered_by="integrations.slurm (through settings PORTAL_HOOKS)",
        ),
    )
}


def _declared(name: str) -> Query:
    query = QUERIES.get(name)
    if query is None:
        raise LookupError(f"{name!r} is not a declared query (portal.queries.QUERIES)")
    return query


def answer(name: str, func: Callable) -> None:
    """Answer the query `name` with `func(**arguments)` (idempotent per function)."""
    _declared(name)
    hooks.subscribe(name, func)


def ask(name: str, **arguments) -> list:
    """Every answerer's answer to the query, in order (empty when nothing answers)."""
    query = _declared(name)
    if set(arguments) != set(query.arguments):
        raise TypeError(
            f"{name} takes exactly {', '.join(query.arguments)}; got {', '.join(sorted(arguments))}"
        )
    return [func(**arguments) for func in hooks.subscribers(name)]


def ask_merged(name: str, **arguments) -> dict:
    """`ask` for queries answered {key: {field: value}} for many objects at once: the answers
    merged into one dict per key (an empty answer counts as none)."""
    merged: dict = {}
    for reply in ask(name, **arguments):
        for key, fields in (reply or {}).items():
            merged.setdefault(key, {}).update(fields)
    return merged
