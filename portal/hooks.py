"""In-process events: how a lower app triggers a higher one without importing it.

The apps form layers (README, Architecture; enforced by import-linter): a lower app never
imports a higher one. When something in a lower app must make a higher one act (telemetry
declares a node lost -> jobs requeues its jobs; a booking is created -> an optional Slurm
integration mirrors it), the lower app calls `emit("node.lost", node=node, now=now)` and the
higher app subscribes to the event.

Subscribers come from two places, called in this order:
- settings `PORTAL_HOOKS`: {"event": ["dotted.path.to.callable", ...]} - the defaults and what
  a deployment switches on;
- `subscribe(event, func)`, called from an app's `AppConfig.ready()`.

A lower app that needs an *answer* from a higher one asks a declared query instead
(`portal.queries`); events only notify.

Subscribers run synchronously, in the emitter's transaction, in order: an exception rolls the
emitter's change back (an integration can refuse a booking), so subscribers must be quick and
must raise only to refuse.
"""

from collections import defaultdict
from collections.abc import Callable
from functools import cache

from django.conf import settings
from django.utils.module_loading import import_string

_subscribed: dict[str, list[Callable]] = defaultdict(list)


def subscribe(event: str, func: Callable) -> None:
    """Call `func(**kwargs)` on every `emit(event, **kwargs)` (idempotent per function)."""
    if func not in _subscribed[event]:
        _subscribed[event].append(func)


@cache
def _from_settings(event: str) -> tuple[Callable, ...]:
    return tuple(
        import_string(path) for path in getattr(settings, "PORTAL_HOOKS", {}).get(event, ())
    )


def subscribers(event: str) -> list[Callable]:
    return [*_from_settings(event), *_subscribed.get(event, ())]


def emit(event: str, **kwargs) -> None:
    """Call every subscriber of `event` with the keyword arguments. Events notify: what a
    subscriber returns is not read (a question for the apps above is a `portal.queries`)."""
    from portal.queries import QUERIES  # noqa: PLC0415 - queries builds on this module

    if event in QUERIES:
        raise LookupError(f"{event!r} is a query: ask it through portal.queries")
    for func in subscribers(event):
        func(**kwargs)


def reset_cache() -> None:
    """Forget the settings subscribers looked up (tests that change PORTAL_HOOKS)."""
    _from_settings.cache_clear()
