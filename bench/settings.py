"""Settings for benchmarks: the portal's own settings on a dedicated PostgreSQL database, plus
one bare view used as the baseline of the HTTP benchmark."""

import os

os.environ.setdefault("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/portal_bench")
os.environ.setdefault("API_WRITE_THROTTLE", "1000000/min")
os.environ.setdefault("DJANGO_DEBUG", "1")  # development settings; DEBUG is switched off below

from portal.settings import *  # noqa: E402,F403

ROOT_URLCONF = "bench.urls"
DEBUG = False
ALLOWED_HOSTS = ["127.0.0.1", "localhost"]
PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
DATABASES["default"]["CONN_MAX_AGE"] = 60  # noqa: F405 - as a production deployment would
LOGGING = {"version": 1, "disable_existing_loggers": False, "root": {"level": "WARNING"}}
