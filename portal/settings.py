"""Portal settings: one file, every deployment knob read from the environment.

All variables are listed in `.env.example` and the README. Defaults give the embedded demo
(SQLite under var/, filesystem broker); production sets DATABASE_URL, REDIS_URL and a secret.
"""

from pathlib import Path

import environ
import plotly
from celery.schedules import crontab
from django.core.exceptions import ImproperlyConfigured

BASE_DIR = Path(__file__).resolve().parent.parent
VAR_DIR = BASE_DIR / "var"
VAR_DIR.mkdir(exist_ok=True)

env = environ.Env()
environ.Env.read_env(BASE_DIR / ".env", overwrite=False)

DEV_SECRET_KEY = "dev-only-insecure-secret-key-change-me"  # noqa: S105 - refused when DEBUG is off

DEBUG = env.bool("DJANGO_DEBUG", default=True)
SECRET_KEY = env.str("DJANGO_SECRET_KEY", default=DEV_SECRET_KEY)
ALLOWED_HOSTS = env.list(
    "DJANGO_ALLOWED_HOSTS", default=["localhost", "127.0.0.1", "[::1]"] if DEBUG else []
)
CSRF_TRUSTED_ORIGINS = env.list("DJANGO_CSRF_TRUSTED_ORIGINS", default=[])

if not DEBUG:
    if SECRET_KEY == DEV_SECRET_KEY or len(SECRET_KEY) < 32:
        raise ImproperlyConfigured(
            "DJANGO_SECRET_KEY must be set to a random value of 32+ characters when DJANGO_DEBUG=0."
        )
    if not ALLOWED_HOSTS:
        raise ImproperlyConfigured("DJANGO_ALLOWED_HOSTS must be set when DJANGO_DEBUG=0.")
    SESSION_COOKIE_SECURE = True
    CSRF_COOKIE_SECURE = True
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
    SECURE_CONTENT_TYPE_NOSNIFF = True
    SECURE_HSTS_SECONDS = env.int("DJANGO_HSTS_SECONDS", default=0)

SESSION_COOKIE_HTTPONLY = True
X_FRAME_OPTIONS = "DENY"

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "whitenoise.runserver_nostatic",
    "django.contrib.staticfiles",
    "rest_framework",
    "rest_framework.authtoken",
    "django_filters",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    "apps.teams",
    "apps.fleet",
    "apps.audit",
    "apps.reservations",
    "apps.telemetry",
    "apps.jobs",
    "apps.billing",
    "apps.dashboards",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
]

ROOT_URLCONF = "portal.urls"
WSGI_APPLICATION = "portal.wsgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
                "apps.teams.context_processors.roles",
            ],
        },
    },
]

DATABASES = {
    "default": env.db("DATABASE_URL", default=f"sqlite:///{VAR_DIR / 'portal.sqlite3'}"),
}
DATABASES["default"].setdefault("CONN_MAX_AGE", env.int("DATABASE_CONN_MAX_AGE", default=0))
if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    # WAL lets the demo's web and worker processes read while one writes.
    DATABASES["default"].setdefault("OPTIONS", {})
    DATABASES["default"]["OPTIONS"].update(
        {"timeout": 20, "transaction_mode": "IMMEDIATE", "init_command": "PRAGMA journal_mode=WAL;"}
    )

DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
AUTH_USER_MODEL = "teams.User"
AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
]
LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "home"
LOGOUT_REDIRECT_URL = "login"

LANGUAGE_CODE = "en-us"
TIME_ZONE = env.str("PORTAL_TIME_ZONE", default="UTC")
USE_I18N = False
USE_TZ = True

STATIC_URL = "static/"
STATIC_ROOT = VAR_DIR / "static"
STATICFILES_DIRS = [BASE_DIR / "static"]
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {
        "BACKEND": "whitenoise.storage.CompressedManifestStaticFilesStorage"
        if not DEBUG
        else "django.contrib.staticfiles.storage.StaticFilesStorage"
    },
}

EMAIL_BACKEND = env.str(
    "DJANGO_EMAIL_BACKEND", default="django.core.mail.backends.console.EmailBackend"
)
DEFAULT_FROM_EMAIL = env.str("DEFAULT_FROM_EMAIL", default="gpu-portal@localhost")

# --- REST API -------------------------------------------------------------------------------
REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        # Token first: its WWW-Authenticate header makes anonymous API calls 401, not 403.
        "rest_framework.authentication.TokenAuthentication",
        "rest_framework.authentication.SessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    "DEFAULT_FILTER_BACKENDS": [
        "django_filters.rest_framework.DjangoFilterBackend",
        "rest_framework.filters.OrderingFilter",
    ],
    "DEFAULT_PAGINATION_CLASS": "portal.pagination.PagePagination",
    "PAGE_SIZE": 50,
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "EXCEPTION_HANDLER": "portal.exceptions.api_exception_handler",
    "DEFAULT_THROTTLE_CLASSES": ["portal.throttling.WriteRateThrottle"],
    "DEFAULT_THROTTLE_RATES": {"writes": env.str("API_WRITE_THROTTLE", default="600/min")},
    "UNAUTHENTICATED_USER": "django.contrib.auth.models.AnonymousUser",
}
SPECTACULAR_SETTINGS = {
    "TITLE": "GPU Portal API",
    "DESCRIPTION": "Teams, quotas, GPU fleet, reservations, jobs, usage and chargeback.",
    "VERSION": "1.0.0",
    "SERVE_INCLUDE_SCHEMA": False,
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
    "COMPONENT_SPLIT_REQUEST": True,
}

# --- Celery ---------------------------------------------------------------------------------
REDIS_URL = env.str("REDIS_URL", default="")
CELERY_BROKER_URL = env.str("CELERY_BROKER_URL", default=REDIS_URL or "filesystem://")
FILESYSTEM_BROKER_DIR = VAR_DIR / "broker"
CELERY_BROKER_TRANSPORT_OPTIONS = (
    {
        "data_folder_in": str(FILESYSTEM_BROKER_DIR / "queue"),
        "data_folder_out": str(FILESYSTEM_BROKER_DIR / "queue"),
        "processed_folder": str(FILESYSTEM_BROKER_DIR / "processed"),
        # exchange bindings (node queues, broadcasts); kombu's default is ./control
        "control_folder": str(FILESYSTEM_BROKER_DIR / "control"),
        "store_processed": False,
    }
    if CELERY_BROKER_URL.startswith("filesystem://")
    else {"visibility_timeout": 3600}
)
CELERY_BROKER_CONNECTION_TIMEOUT = env.float("CELERY_BROKER_CONNECTION_TIMEOUT", default=3.0)
CELERY_RESULT_BACKEND = None
CELERY_TASK_IGNORE_RESULT = True
CELERY_TASK_SERIALIZER = "json"
CELERY_ACCEPT_CONTENT = ["json"]
CELERY_RESULT_SERIALIZER = "json"
CELERY_TASK_DEFAULT_QUEUE = "portal"
CELERY_TASK_ACKS_LATE = True
CELERY_TASK_REJECT_ON_WORKER_LOST = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_TASK_TIME_LIMIT = 300
CELERY_TASK_SOFT_TIME_LIMIT = 240
CELERY_TIMEZONE = "UTC"
CELERY_BEAT_SCHEDULE: dict = {}

# --- Portal policy --------------------------------------------------------------------------
NVML_BACKEND = env.str("NVML_BACKEND", default="simulated")
TELEMETRY_POLL_SECONDS = env.int("TELEMETRY_POLL_SECONDS", default=15)
DEMO_PASSWORD = env.str("DEMO_PASSWORD", default="demo")

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"console": {"class": "logging.StreamHandler"}},
    "root": {"handlers": ["console"], "level": env.str("LOG_LEVEL", default="INFO")},
}

# --- Reservations policy --------------------------------------------------------------------
RESERVATION_SLOT_MINUTES = env.int("RESERVATION_SLOT_MINUTES", default=15)
RESERVATION_MAX_DURATION_HOURS = env.int("RESERVATION_MAX_DURATION_HOURS", default=7 * 24)
RESERVATION_MAX_ADVANCE_DAYS = env.int("RESERVATION_MAX_ADVANCE_DAYS", default=30)
RESERVATION_MAX_GPUS = env.int("RESERVATION_MAX_GPUS", default=64)
RESERVATION_REMINDER_MINUTES = env.int("RESERVATION_REMINDER_MINUTES", default=30)
RESERVATION_BUDGET_CHECK = env.str(
    "RESERVATION_BUDGET_CHECK", default="apps.billing.services.check_booking_budget"
)
CELERY_BEAT_SCHEDULE["reservations-lifecycle"] = {
    "task": "reservations.lifecycle_tick",
    "schedule": 60.0,
    "options": {"expires": 55},
}

# --- Telemetry ------------------------------------------------------------------------------
TELEMETRY_MISSED_POLLS_UNREACHABLE = env.int("TELEMETRY_MISSED_POLLS_UNREACHABLE", default=3)
TELEMETRY_RAW_RETENTION_DAYS = env.int("TELEMETRY_RAW_RETENTION_DAYS", default=7)
TELEMETRY_MINUTE_RETENTION_DAYS = env.int("TELEMETRY_MINUTE_RETENTION_DAYS", default=90)
TELEMETRY_BUSY_UTIL_PERCENT = env.int("TELEMETRY_BUSY_UTIL_PERCENT", default=5)
TELEMETRY_MAX_CLOCK_SKEW_SECONDS = env.int("TELEMETRY_MAX_CLOCK_SKEW_SECONDS", default=300)
IDLE_UTIL_PERCENT = env.int("IDLE_UTIL_PERCENT", default=5)
IDLE_WINDOW_MINUTES = env.int("IDLE_WINDOW_MINUTES", default=30)
IDLE_GRACE_MINUTES = env.int("IDLE_GRACE_MINUTES", default=15)
IDLE_NO_SHOW_MINUTES = env.int("IDLE_NO_SHOW_MINUTES", default=30)
TELEMETRY_QUEUE = env.str("TELEMETRY_QUEUE", default="telemetry")
TELEMETRY_DRAIN_SECONDS = env.float("TELEMETRY_DRAIN_SECONDS", default=2.0)
TELEMETRY_DRAIN_MAX_BATCHES = env.int("TELEMETRY_DRAIN_MAX_BATCHES", default=2000)
CELERY_BEAT_SCHEDULE.update(
    {
        "telemetry-drain": {
            "task": "telemetry.drain",
            "schedule": TELEMETRY_DRAIN_SECONDS,
            "options": {"expires": TELEMETRY_DRAIN_SECONDS},
        },
        "telemetry-poll-fleet": {
            "task": "telemetry.poll_fleet",
            "schedule": float(TELEMETRY_POLL_SECONDS),
            "options": {"expires": TELEMETRY_POLL_SECONDS},
        },
        "telemetry-minutely": {
            "task": "telemetry.minutely",
            "schedule": 60.0,
            "options": {"expires": 55},
        },
        "telemetry-retention": {
            "task": "telemetry.retention",
            "schedule": 3600.0,
            "options": {"expires": 3000},
        },
    }
)

# --- Jobs -----------------------------------------------------------------------------------
# Longest runtime a job may ask for; the agent kills it after that (SIGTERM, grace, SIGKILL).
JOBS_MAX_RUNTIME_SECONDS = 7 * 24 * 3600
# A job whose node is lost is requeued at most this many times, then fails.
JOBS_MAX_REQUEUES = 5
# Seconds between SIGTERM and SIGKILL when a job is cancelled, preempted or over its runtime.
JOBS_KILL_GRACE_SECONDS = 30
# A dispatched job whose node has not reported it started after this is requeued.
JOBS_START_TIMEOUT_SECONDS = 300
JOBS_SCHEDULER_POLICY = "fairshare"
# Fair share weighs past GPU use with this half-life.
JOBS_USAGE_HALF_LIFE_SECONDS = 7 * 24 * 3600
JOBS_SCHEDULE_SECONDS = 5
CELERY_BEAT_SCHEDULE["jobs-schedule"] = {
    "task": "jobs.schedule",
    "schedule": JOBS_SCHEDULE_SECONDS,
    "options": {"expires": JOBS_SCHEDULE_SECONDS},
}

# --- Billing --------------------------------------------------------------------------------
# chargeback: money in exports, budgets enforced; showback: GPU-hours only, no money.
BILLING_MODE = env.str("BILLING_MODE", default="chargeback")
if BILLING_MODE not in ("chargeback", "showback"):
    raise ImproperlyConfigured("BILLING_MODE must be chargeback or showback.")
BILLING_CURRENCY = env.str("BILLING_CURRENCY", default="USD")
BILLING_PROVIDER_NAME = env.str("BILLING_PROVIDER_NAME", default="On-premises GPU cluster")
# Each hourly metering run re-charges this many past hours (idempotent), catching late changes.
BILLING_METER_LOOKBACK_HOURS = env.int("BILLING_METER_LOOKBACK_HOURS", default=3)
CELERY_BEAT_SCHEDULE["billing-meter"] = {
    "task": "billing.meter",
    "schedule": crontab(minute=5),
    "options": {"expires": 3000},
}

# --- Dashboards -----------------------------------------------------------------------------
# plotly.js is served from the plotly package's own bundled copy (static/vendor/plotly/), never a
# CDN, so the dashboards work offline and always match the plotly version building the figures.
STATICFILES_DIRS.append(("vendor/plotly", Path(plotly.__file__).resolve().parent / "package_data"))
