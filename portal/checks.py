"""Deployment checks of the portal's own settings (`manage.py check --deploy`)."""

from django.conf import settings
from django.core.checks import Warning, register

SHARED_CACHE_BACKENDS = (
    "django.core.cache.backends.redis.RedisCache",
    "django.core.cache.backends.memcached.PyMemcacheCache",
    "django.core.cache.backends.db.DatabaseCache",
)


@register(deploy=True)
def shared_cache_check(app_configs, **kwargs):
    """Throttles and token-failure limits count in the cache: a per-process cache multiplies
    every limit by the number of web workers."""
    backend = settings.CACHES["default"]["BACKEND"]
    if backend in SHARED_CACHE_BACKENDS:
        return []
    return [
        Warning(
            "The cache is not shared between processes, so API throttles are per process.",
            hint="Set REDIS_URL.",
            id="portal.W001",
        )
    ]


@register(deploy=True)
def metrics_access_check(app_configs, **kwargs):
    if settings.METRICS_PUBLIC or settings.METRICS_TOKEN:
        return []
    return [
        Warning(
            "/metrics needs a login and no METRICS_TOKEN is set: Prometheus cannot scrape it.",
            hint="Set METRICS_TOKEN (and the same bearer token in the scrape config).",
            id="portal.W002",
        )
    ]
