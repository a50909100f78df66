"""Settings for the test suite: the real services, never a silent fallback.

Tests run on PostgreSQL (TEST_DATABASE_URL) and Redis (REDIS_URL), as production does.
`tests/conftest.py` checks both answer before any test runs and says how to start them.
"""

import os

# Production is the settings' default; the suite (and the processes it starts) develop.
os.environ.setdefault("DJANGO_DEBUG", "1")

from portal.settings import *  # noqa: E402,F403
from portal.settings import env, with_engine_options  # noqa: E402

TEST_DATABASE_URL = env.str("TEST_DATABASE_URL", default="postgres://postgres@127.0.0.1:5432/test")
DATABASES = {"default": with_engine_options(env.db_url_config(TEST_DATABASE_URL))}
DATABASES["default"]["TEST"] = {"NAME": env.str("TEST_DATABASE_NAME", default="portal_test")}

REDIS_URL = env.str("REDIS_URL", default="redis://127.0.0.1:6379/0")
CELERY_BROKER_URL = env.str("TEST_CELERY_BROKER_URL", default=REDIS_URL)
CELERY_BROKER_TRANSPORT_OPTIONS = {"visibility_timeout": 3600}

PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
EMAIL_BACKEND = "django.core.mail.backends.locmem.EmailBackend"
# Fast and per process; tests/portal/test_shared_throttle.py runs web workers on Redis.
CACHES = {"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}}
STORAGES["staticfiles"] = {  # noqa: F405
    "BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"
}
REST_FRAMEWORK = {**REST_FRAMEWORK, "DEFAULT_THROTTLE_RATES": {"writes": "100000/min"}}  # noqa: F405
API_TOKEN_FAILURE_THROTTLE = "100000/min"  # noqa: S105 - a rate, not a secret
# The optional Slurm integration's tables exist in the test database so its tests (against a
# real Slurm the tests start) can run; its hooks stay off unless a test switches them on.
if "apps.integrations.slurm" not in INSTALLED_APPS:  # noqa: F405
    INSTALLED_APPS = [*INSTALLED_APPS, "apps.integrations.slurm"]  # noqa: F405
