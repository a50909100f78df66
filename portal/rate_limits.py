"""Atomic request counters in the shared cache, for throttles that hold across web processes.

DRF's SimpleRateThrottle reads a history list, appends and writes it back: two processes
racing on one key both pass. Here each window is one counter that the cache increments
atomically (Redis INCR), so N concurrent requests across any number of workers let exactly
`limit` through.

When the cache does not answer (Redis down or paused; the cache's socket timeouts bound the
wait), `hit` and `exceeded` raise CacheUnavailable and the caller decides: the API fails open
for reads and closed for writes (portal.authentication, portal.throttling).
"""

import time
from dataclasses import dataclass

from django.core.cache import cache, caches
from django.core.cache.backends.redis import RedisCache
from redis.exceptions import RedisError

# What the cache raises when its server is unreachable or too slow.
CACHE_ERRORS = (RedisError, OSError)


class CacheUnavailable(Exception):
    """The shared cache did not answer; the counter could not be read or counted."""


PERIODS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


@dataclass(frozen=True)
class Rate:
    limit: int
    seconds: int

    @classmethod
    def parse(cls, rate: str) -> "Rate":
        """'600/min', '20/m', '5/hour', '1000/day' (DRF's notation)."""
        count, period = rate.split("/")
        return cls(limit=int(count), seconds=PERIODS[period.strip()[0]])


def window(key: str, rate: Rate, *, now: float | None = None) -> tuple[str, float]:
    """The counter's key for the current fixed window and the seconds until it ends."""
    now = time.time() if now is None else now
    index = int(now // rate.seconds)
    return f"{key}:{index}", (index + 1) * rate.seconds - now


def hit(key: str, rate: Rate) -> tuple[bool, float]:
    """Count one request against `key`; (allowed, seconds until the window ends)."""
    counter, remaining = window(key, rate)
    try:
        count = _count(counter, timeout=rate.seconds + 5)
    except CACHE_ERRORS as error:
        raise CacheUnavailable(str(error)) from error
    return count <= rate.limit, remaining


def _count(counter: str, *, timeout: int) -> int:
    """Create the counter at 0 unless it exists, then increment it; its new value. The timeout
    outlives the window, so a slow request cannot find its counter gone in between. On Redis
    both go in one MULTI/EXEC round trip (the cache's add and incr take three: SET NX, then
    EXISTS and INCR), as Django's own set_many pipelines; other caches use add and incr."""
    backend = caches["default"]
    if isinstance(backend, RedisCache):
        key = backend.make_and_validate_key(counter)
        pipeline = backend._cache.get_client(key, write=True).pipeline()
        pipeline.set(key, 0, ex=timeout, nx=True)
        pipeline.incr(key)
        return pipeline.execute()[1]
    cache.add(counter, 0, timeout=timeout)
    try:
        return cache.incr(counter)
    except ValueError:  # evicted between add and incr
        cache.add(counter, 1, timeout=timeout)
        return 1


def exceeded(key: str, rate: Rate) -> tuple[bool, float]:
    """Whether `key` has used up the current window, without counting."""
    counter, remaining = window(key, rate)
    try:
        return (cache.get(counter) or 0) >= rate.limit, remaining
    except CACHE_ERRORS as error:
        raise CacheUnavailable(str(error)) from error
