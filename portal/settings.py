"""Portal settings: one file, every deployment knob read from the environment.

All variables are listed in `.env.example` and the README. Defaults give the embedded demo
(SQLite and a broker in files, both under var/); production sets DATABASE_URL, REDIS_URL and a
secret.
"""

import secrets
import sys
from datetime import timedelta
from pathlib import Path

import environ
import plotly
from celery.schedules import crontab
from django.core.exceptions import ImproperlyConfigured

from portal.secret_key import development_secret_key, offline_command, secret_key_problem
from workers.broker import SCHEME as EMBEDDED_BROKER
from workers.broker import is_embedded as is_embedded_broker
from workers.broker import transport_options as embedded_broker_options
from workers.protocol import DEFAULT_TELEMETRY_QUEUE

BASE_DIR = Path(__file__).resolve().parent.parent
VAR_DIR = BASE_DIR / "var"
VAR_DIR.mkdir(exist_ok=True)

env = environ.Env()
environ.Env.read_env(BASE_DIR / ".env", overwrite=False)

DEV_SECRET_KEY = "dev-only-insecure-secret-key-change-me"  # noqa: S105 - refused when DEBUG is off

# Production is the default: development (the demo, the test suite) opts in with DJANGO_DEBUG=1.
DEBUG = env.bool("DJANGO_DEBUG", default=False)
SECRET_KEY = env.str("DJANGO_SECRET_KEY", default=DEV_SECRET_KEY)
if DEBUG and SECRET_KEY == DEV_SECRET_KEY:
    # Development (the demo): a key of this install's own, kept under var/, so a restart keeps
    # everyone signed in and no published key signs its cookies.
    SECRET_KEY = development_secret_key(VAR_DIR)
ALLOWED_HOSTS = env.list(
    "DJANGO_ALLOWED_HOSTS", default=["localhost", "127.0.0.1", "[::1]"] if DEBUG else []
)
CSRF_TRUSTED_ORIGINS = env.list("DJANGO_CSRF_TRUSTED_ORIGINS", default=[])
# `manage.py replay_trace` and the like serve no web traffic: they need no production secrets.
OFFLINE_COMMAND = offline_command(sys.argv)
if OFFLINE_COMMAND and not DEBUG and secret_key_problem(SECRET_KEY, dev_key=DEV_SECRET_KEY):
    SECRET_KEY = secrets.token_urlsafe(50)  # signs nothing that outlives the command

if not DEBUG and not OFFLINE_COMMAND:
    secret_problem = secret_key_problem(SECRET_KEY, dev_key=DEV_SECRET_KEY)
    if secret_problem:
        raise ImproperlyConfigured(
            f"DJANGO_SECRET_KEY must be set to a random value when DJANGO_DEBUG=0: {secret_problem}"
            ' Generate one with: python3 -c "import secrets; print(secrets.token_urlsafe(50))"'
            " (for local development set DJANGO_DEBUG=1)."
        )
    if not ALLOWED_HOSTS:
        raise ImproperlyConfigured("DJANGO_ALLOWED_HOSTS must be set when DJANGO_DEBUG=0.")
    SESSION_COOKIE_SECURE = True
    CSRF_COOKIE_SECURE = True
    # Behind a TLS-terminating proxy the proxy's X-Forwarded-Proto tells Django the request came
    # over HTTPS; set DJANGO_SECURE_PROXY_SSL_HEADER= (empty) when no proxy sets that header.
    proxy_ssl_header = env.str("DJANGO_SECURE_PROXY_SSL_HEADER", default="HTTP_X_FORWARDED_PROTO")
    if proxy_ssl_header:
        SECURE_PROXY_SSL_HEADER = (proxy_ssl_header, "https")
    # Plain HTTP is redirected to HTTPS, except the probes that orchestrators and Prometheus
    # send on the internal network. Turn off (0) where the proxy already redirects.
    SECURE_SSL_REDIRECT = env.bool("DJANGO_SECURE_SSL_REDIRECT", default=True)
    SECURE_REDIRECT_EXEMPT = [r"^healthz$", r"^metrics$"]
    SECURE_CONTENT_TYPE_NOSNIFF = True
    SECURE_HSTS_SECONDS = env.int("DJANGO_HSTS_SECONDS", default=365 * 24 * 3600)
    SECURE_HSTS_INCLUDE_SUBDOMAINS = env.bool("DJANGO_HSTS_INCLUDE_SUBDOMAINS", default=False)
    SECURE_HSTS_PRELOAD = env.bool("DJANGO_HSTS_PRELOAD", default=False)

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
    "django_tables2",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    "axes",
    "csp",
    "portal.apps.PortalConfig",
    "apps.outbox",
    "apps.teams",
    "apps.fleet",
    "apps.audit",
    "apps.reservations",
    "apps.telemetry",
    "apps.jobs",
    "apps.power",
    "apps.billing",
    "apps.efficiency",
    "apps.dashboards",
    "apps.sso",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    # Before anything reads the request: NUL bytes and oversized bodies get a clear 400/413.
    "portal.request_limits.RequestLimitsMiddleware",
    "csp.middleware.CSPMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    # After authentication: pages, messages and forms use the reader's zone.
    "apps.teams.middleware.UserTimeZoneMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    # Last, so it sees the lockout a failed login raises in the view.
    "axes.middleware.AxesMiddleware",
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
                "apps.sso.context_processors.login_options",
                "portal.timezones.reader_zone",
            ],
            # One rule for times, durations, counts and money on every page (no {% load %}).
            "builtins": ["portal.formatting"],
        },
    },
]


def with_engine_options(database: dict) -> dict:
    """A database's settings with the options its engine needs here (the test settings use it
    for their own database too)."""
    options = database.setdefault("OPTIONS", {})
    if database["ENGINE"] == "django.db.backends.sqlite3":
        # WAL lets the demo's web and worker processes read while one writes.
        options.update(
            {
                "timeout": 20,
                "transaction_mode": "IMMEDIATE",
                "init_command": "PRAGMA journal_mode=WAL;",
            }
        )
    elif database["ENGINE"] == "django.db.backends.postgresql":
        # The month-wide reads (team totals, statements, exports) are planned costly enough for
        # PostgreSQL's JIT, which then spends longer compiling them than it saves: 3.8-4.3 s of
        # compiling for about 2 s saved on a 2,000-GPU month's team totals. The short queries
        # never reach its threshold, so nothing gains from it.
        options.setdefault("options", "-c jit=off")
    return database


DATABASES = {
    "default": with_engine_options(
        env.db("DATABASE_URL", default=f"sqlite:///{VAR_DIR / 'portal.sqlite3'}")
    ),
}
DATABASES["default"].setdefault("CONN_MAX_AGE", env.int("DATABASE_CONN_MAX_AGE", default=0))

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

# --- Login throttling (django-axes) ---------------------------------------------------------
# A username that fails LOGIN_FAILURE_LIMIT times from one address is locked out there for
# LOGIN_LOCKOUT_MINUTES (the right password is refused too, with a message); the same user
# elsewhere and other users at that address are not, until the address itself reaches
# LOGIN_ADDRESS_FAILURE_LIMIT. Each lockout is an audit event.
AUTHENTICATION_BACKENDS = [
    "axes.backends.AxesStandaloneBackend",
    "django.contrib.auth.backends.ModelBackend",
]
AXES_FAILURE_LIMIT = env.int("LOGIN_FAILURE_LIMIT", default=10)
AXES_COOLOFF_TIME = timedelta(minutes=env.int("LOGIN_LOCKOUT_MINUTES", default=15))
AXES_LOCKOUT_PARAMETERS = [["username", "ip_address"]]
AXES_RESET_ON_SUCCESS = True
AXES_LOCKOUT_CALLABLE = "portal.login_lockout.lockout_response"
# Password spraying: an address with this many failures (any usernames) in the window is locked
# for everyone; 0 turns it off.
AXES_HANDLER = "portal.login_lockout.PortalAxesHandler"
LOGIN_ADDRESS_FAILURE_LIMIT = env.int("LOGIN_ADDRESS_FAILURE_LIMIT", default=50)
# Keep the attempts table small: successful logins are not logged (the session table has them).
AXES_DISABLE_ACCESS_LOG = True
AXES_VERBOSE = False
# Client addresses (lockouts, throttles): REMOTE_ADDR, unless DJANGO_TRUSTED_PROXIES says how many
# proxies in front append to X-Forwarded-For; then the address the outermost one saw counts.
TRUSTED_PROXIES = env.int("DJANGO_TRUSTED_PROXIES", default=0)
if TRUSTED_PROXIES:
    AXES_IPWARE_PROXY_COUNT = TRUSTED_PROXIES
    AXES_IPWARE_META_PRECEDENCE_ORDER = ("HTTP_X_FORWARDED_FOR", "REMOTE_ADDR")
else:
    AXES_IPWARE_META_PRECEDENCE_ORDER = ("REMOTE_ADDR",)
# Failed API token attempts per client address (e.g. 20/min); over it every token is refused
# with 429 until the window passes.
API_TOKEN_FAILURE_THROTTLE = env.str("API_TOKEN_FAILURE_THROTTLE", default="20/min")
# Longest lifetime a user may give an API token, in days.
API_TOKEN_MAX_DAYS = env.int("API_TOKEN_MAX_DAYS", default=365)
# Transition: keys still in rest_framework.authtoken's table (the old single token, created by
# `manage.py drf_create_token`) are accepted as read-write; 0 refuses them. Migration
# teams.0005 moves existing ones to hashed named tokens, keeping their keys.
API_LEGACY_TOKENS = env.bool("API_LEGACY_TOKENS", default=True)

# --- Single sign-on: OpenID Connect (apps/sso, mozilla-django-oidc) -------------------------
# Off unless OIDC_ISSUER is set; the endpoints come from the issuer's discovery document.
# Users are created or updated from the ID token's claims at each sign-in; their teams and
# roles follow their IdP groups through the group mappings on the admin site.
OIDC_ISSUER = env.str("OIDC_ISSUER", default="").rstrip("/")
SSO_ENABLED = bool(OIDC_ISSUER)
OIDC_RP_CLIENT_ID = env.str("OIDC_CLIENT_ID", default="")
OIDC_RP_CLIENT_SECRET = env.str("OIDC_CLIENT_SECRET", default="")
OIDC_RP_SCOPES = env.str("OIDC_SCOPES", default="openid email profile")
OIDC_RP_SIGN_ALGO = env.str("OIDC_SIGN_ALGORITHM", default="RS256")
OIDC_CLAIM_USERNAME = env.str("OIDC_CLAIM_USERNAME", default="preferred_username")
OIDC_CLAIM_EMAIL = env.str("OIDC_CLAIM_EMAIL", default="email")
OIDC_CLAIM_GROUPS = env.str("OIDC_CLAIM_GROUPS", default="groups")
# IdP groups whose members administer an organisation unit: "research-leads=research,ops=ops"
# (group=unit slug). A unit named here has its admins managed by the IdP, like mapped teams.
SSO_UNIT_ADMIN_GROUPS = env.dict("SSO_UNIT_ADMIN_GROUPS", default={})
OIDC_CLAIM_FIRST_NAME = env.str("OIDC_CLAIM_FIRST_NAME", default="given_name")
OIDC_CLAIM_LAST_NAME = env.str("OIDC_CLAIM_LAST_NAME", default="family_name")
OIDC_TIMEOUT = env.float("OIDC_TIMEOUT_SECONDS", default=10.0)
# Clock difference tolerated between the portal and the IdP when checking exp/iat.
OIDC_CLOCK_SKEW_SECONDS = env.int("OIDC_CLOCK_SKEW_SECONDS", default=60)
OIDC_USE_PKCE = True
OIDC_USE_NONCE = True
# Kept in the session for the IdP's logout (id_token_hint).
OIDC_STORE_ID_TOKEN = True
OIDC_AUTHENTICATION_CALLBACK_URL = "sso:callback"
# PASSWORD_LOGIN=0 leaves sign-in to the IdP only (the demo and local admins need it on).
PASSWORD_LOGIN_ENABLED = env.bool("PASSWORD_LOGIN", default=True)
if SSO_ENABLED:
    if not OIDC_RP_CLIENT_ID:
        raise ImproperlyConfigured("OIDC_CLIENT_ID must be set when OIDC_ISSUER is.")
    AUTHENTICATION_BACKENDS.append("apps.sso.backends.PortalOIDCBackend")
if not PASSWORD_LOGIN_ENABLED:
    if not SSO_ENABLED:
        raise ImproperlyConfigured("PASSWORD_LOGIN=0 needs OIDC_ISSUER: nobody could sign in.")
    AUTHENTICATION_BACKENDS.remove("django.contrib.auth.backends.ModelBackend")

# --- Cache ----------------------------------------------------------------------------------
# Throttles and login lockouts count in the cache, so every web process must share it: Redis
# when REDIS_URL is set (production), a per-process memory cache for the embedded demo.
# A cache that does not answer within half a second counts as down (API reads go on, writes
# get 503 with Retry-After, /healthz names it) instead of holding the request (redis-py waits
# forever by default, e.g. on a paused server).
REDIS_URL = env.str("REDIS_URL", default="")
REDIS_CACHE_OPTIONS = {"socket_connect_timeout": 0.5, "socket_timeout": 0.5}
CACHES = {
    "default": {
        "BACKEND": "django.core.cache.backends.redis.RedisCache",
        "LOCATION": REDIS_URL,
        "KEY_PREFIX": "portal",
        "OPTIONS": REDIS_CACHE_OPTIONS,
    }
    if REDIS_URL
    else {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}
}

# --- Content Security Policy (django-csp) ---------------------------------------------------
# Every script and stylesheet is a static file of the portal (plotly.js included); figures and
# settings reach pages as JSON data blocks, never inline code, and nothing needs 'unsafe-eval'.
# plotly.js inserts <style> elements while drawing (with style-src 'self' alone chromium blocks
# them and the charts lose their styling), hence 'unsafe-inline' for styles, not for scripts.
CONTENT_SECURITY_POLICY = {
    "DIRECTIVES": {
        "default-src": ["'self'"],
        "script-src": ["'self'"],
        "style-src": ["'self'", "'unsafe-inline'"],
        "img-src": ["'self'", "data:", "blob:"],
        "font-src": ["'self'", "data:"],
        "connect-src": ["'self'"],
        "object-src": ["'none'"],
        "base-uri": ["'self'"],
        "form-action": ["'self'"],
        "frame-ancestors": ["'none'"],
    }
}

if SSO_ENABLED:
    # Logging out posts to the portal, which redirects to the IdP's logout page; browsers apply
    # form-action to that redirect too.
    CONTENT_SECURITY_POLICY["DIRECTIVES"]["form-action"].append(OIDC_ISSUER)

# --- Who may read /metrics and the API schema and docs --------------------------------------
# Both need a login (or an API token) unless opened here. Prometheus scrapes /metrics with
# `Authorization: Bearer <METRICS_TOKEN>`.
METRICS_PUBLIC = env.bool("METRICS_PUBLIC", default=False)
METRICS_TOKEN = env.str("METRICS_TOKEN", default="")
# Each app serves its own metrics; the portal only lists them (it imports no app).
METRICS_COLLECTORS = [
    "apps.fleet.metrics.FleetCollector",
    "apps.telemetry.metrics.TelemetryCollector",
]
API_DOCS_PUBLIC = env.bool("API_DOCS_PUBLIC", default=False)

# --- Request limits -------------------------------------------------------------------------
# Bodies over this answer 413 (API: in the error envelope); JSON nested deeper is refused (400).
DATA_UPLOAD_MAX_MEMORY_SIZE = env.int("DATA_UPLOAD_MAX_MEMORY_SIZE", default=2_621_440)
API_JSON_MAX_DEPTH = env.int("API_JSON_MAX_DEPTH", default=32)

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
        "apps.teams.authentication.ApiTokenAuthentication",
        "rest_framework.authentication.SessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    "DEFAULT_FILTER_BACKENDS": [
        "django_filters.rest_framework.DjangoFilterBackend",
        "rest_framework.filters.OrderingFilter",
    ],
    "DEFAULT_PAGINATION_CLASS": "portal.pagination.PagePagination",
    "PAGE_SIZE": 50,
    "DEFAULT_SCHEMA_CLASS": "portal.schema.PortalAutoSchema",
    "EXCEPTION_HANDLER": "portal.exceptions.api_exception_handler",
    "DEFAULT_PARSER_CLASSES": [
        "portal.parsers.BoundedJSONParser",
        "portal.parsers.NulFreeFormParser",
        "portal.parsers.NulFreeMultiPartParser",
    ],
    "DEFAULT_THROTTLE_CLASSES": ["portal.throttling.WriteRateThrottle"],
    "DEFAULT_THROTTLE_RATES": {"writes": env.str("API_WRITE_THROTTLE", default="600/min")},
    "NUM_PROXIES": TRUSTED_PROXIES,
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
    "SERVE_PERMISSIONS": ["portal.permissions.ApiDocsAccess"],
}

# --- Celery ---------------------------------------------------------------------------------
# Without Redis the demo's broker is files under var/broker (workers.broker: atomicfs://).
CELERY_BROKER_URL = env.str("CELERY_BROKER_URL", default=REDIS_URL or f"{EMBEDDED_BROKER}://")
FILESYSTEM_BROKER_DIR = VAR_DIR / "broker"
CELERY_BROKER_TRANSPORT_OPTIONS = (
    embedded_broker_options(FILESYSTEM_BROKER_DIR)
    if is_embedded_broker(CELERY_BROKER_URL)
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

# Transactional outbox (apps/outbox): kills, launches and notices survive a broker outage.
OUTBOX_FLUSH_SECONDS = env.float("OUTBOX_FLUSH_SECONDS", default=5.0)
OUTBOX_KEEP_SENT_DAYS = env.int("OUTBOX_KEEP_SENT_DAYS", default=7)
CELERY_BEAT_SCHEDULE["outbox-flush"] = {
    "task": "outbox.flush",
    "schedule": OUTBOX_FLUSH_SECONDS,
    "options": {"expires": OUTBOX_FLUSH_SECONDS},
}
CELERY_BEAT_SCHEDULE["outbox-prune"] = {"task": "outbox.prune", "schedule": 3600.0}

# SSO users are checked with the IdP this often (by the refresh token it issued at sign-in):
# removed from every mapped group ends their access without waiting for a sign-in. 0: only at
# sign-in.
SSO_CHECK_SECONDS = env.float("SSO_CHECK_SECONDS", default=900.0)
if SSO_ENABLED and SSO_CHECK_SECONDS > 0:
    CELERY_BEAT_SCHEDULE["sso-check-identities"] = {
        "task": "sso.check_identities",
        "schedule": SSO_CHECK_SECONDS,
        "options": {"expires": SSO_CHECK_SECONDS},
    }

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
CELERY_BEAT_SCHEDULE["reservations-lifecycle"] = {
    "task": "reservations.lifecycle_tick",
    "schedule": 60.0,
    "options": {"expires": 55},
}

# --- Telemetry ------------------------------------------------------------------------------
TELEMETRY_MISSED_POLLS_UNREACHABLE = env.int("TELEMETRY_MISSED_POLLS_UNREACHABLE", default=3)
TELEMETRY_RAW_RETENTION_DAYS = env.int("TELEMETRY_RAW_RETENTION_DAYS", default=7)
TELEMETRY_MINUTE_RETENTION_DAYS = env.int("TELEMETRY_MINUTE_RETENTION_DAYS", default=90)
# PostgreSQL keeps raw samples and minute rollups in one partition per UTC day, created this
# many days ahead (hourly, by the retention task); retention drops whole days.
TELEMETRY_PARTITION_DAYS_AHEAD = env.int("TELEMETRY_PARTITION_DAYS_AHEAD", default=3)
TELEMETRY_MAX_CLOCK_SKEW_SECONDS = env.int("TELEMETRY_MAX_CLOCK_SKEW_SECONDS", default=300)
# One busy rule for busy time, the idle page and idle reclaim (apps/telemetry/activity.py). On
# GPUs with GPM metrics (Hopper and newer) it uses SM activity, a truer signal than
# utilization % (one tiny kernel reads as 100 % utilization). IDLE_UTIL_PERCENT and
# IDLE_SM_ACTIVE_PERCENT, which reclaim once used, are deprecated fallbacks.
TELEMETRY_BUSY_UTIL_PERCENT = env.int(
    "TELEMETRY_BUSY_UTIL_PERCENT", default=env.int("IDLE_UTIL_PERCENT", default=5)
)
TELEMETRY_SM_ACTIVE_BUSY_PERCENT = env.float(
    "TELEMETRY_SM_ACTIVE_BUSY_PERCENT", default=env.float("IDLE_SM_ACTIVE_PERCENT", default=5.0)
)
IDLE_WINDOW_MINUTES = env.int("IDLE_WINDOW_MINUTES", default=30)
IDLE_GRACE_MINUTES = env.int("IDLE_GRACE_MINUTES", default=15)
IDLE_NO_SHOW_MINUTES = env.int("IDLE_NO_SHOW_MINUTES", default=30)
TELEMETRY_QUEUE = env.str("TELEMETRY_QUEUE", default=DEFAULT_TELEMETRY_QUEUE)
TELEMETRY_DRAIN_SECONDS = env.float("TELEMETRY_DRAIN_SECONDS", default=2.0)
TELEMETRY_DRAIN_MAX_BATCHES = env.int("TELEMETRY_DRAIN_MAX_BATCHES", default=2000)
# Samples one drain takes at most (plus the rest of the batch that reaches it): a backlog of big
# batches drains over several runs, each well inside the drain's 60 s limit (bench/telemetry.py e).
TELEMETRY_DRAIN_MAX_SAMPLES = env.int("TELEMETRY_DRAIN_MAX_SAMPLES", default=200_000)
# No drain finished for this long: the portal was deaf (broker paused, worker down), so node
# health is not judged until the drain has run unbroken for a whole silence window again.
TELEMETRY_DRAIN_STALE_SECONDS = env.float("TELEMETRY_DRAIN_STALE_SECONDS", default=20.0)
# A drain registered longer ago than this is dead (its task's hard limit is 60 s): its messages
# go back to the queue. Must stay above that limit.
TELEMETRY_DRAIN_RECOVERY_SECONDS = env.int("TELEMETRY_DRAIN_RECOVERY_SECONDS", default=90)
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
# Order of the GPUs above the teams' guarantees: share (lowest weighted fair share first), las
# (least attained service first) or slowdown (highest response ratio first).
JOBS_SPARE_ORDER = env.str("JOBS_SPARE_ORDER", default="share")
# Fair share weighs past GPU use with this half-life.
JOBS_USAGE_HALF_LIFE_SECONDS = 7 * 24 * 3600
JOBS_SCHEDULE_SECONDS = 5
# The queue page re-reads itself this often.
JOBS_QUEUE_REFRESH_SECONDS = env.int("JOBS_QUEUE_REFRESH_SECONDS", default=10)
# Preemption a cluster can live with: a job runs this long before it may be preempted, is
# protected after this many preemptions, and a preemption may cost at most this share of the
# GPU-time the waiting job asks for.
JOBS_PREEMPT_MIN_RUNTIME_SECONDS = env.int("JOBS_PREEMPT_MIN_RUNTIME_SECONDS", default=1800)
JOBS_MAX_PREEMPTIONS_PER_JOB = env.int("JOBS_MAX_PREEMPTIONS_PER_JOB", default=2)
JOBS_PREEMPT_MAX_LOST_RATIO = env.float("JOBS_PREEMPT_MAX_LOST_RATIO", default=0.5)
JOBS_RECLAIM_PATIENCE_SECONDS = env.float("JOBS_RECLAIM_PATIENCE_SECONDS", default=600.0)
# A multi-node gang that would lose its work yields only after this long, unless nothing else
# frees the GPUs (SchedulerConfig.gang_reclaim_patience_seconds).
JOBS_GANG_RECLAIM_PATIENCE_SECONDS = env.float("JOBS_GANG_RECLAIM_PATIENCE_SECONDS", default=1800.0)
# A job a reclaim stopped that would lose its work again goes back on borrowed GPUs only when
# its runtime limit is at most this (SchedulerConfig.reborrow_max_runtime_seconds).
JOBS_REBORROW_MAX_RUNTIME_SECONDS = env.float("JOBS_REBORROW_MAX_RUNTIME_SECONDS", default=86400.0)
# Keep over-quota work on other nodes than guaranteed work (SchedulerConfig.pack_borrowed).
JOBS_PACK_BORROWED = env.bool("JOBS_PACK_BORROWED", default=False)
CELERY_BEAT_SCHEDULE["jobs-schedule"] = {
    "task": "jobs.schedule",
    "schedule": JOBS_SCHEDULE_SECONDS,
    "options": {"expires": JOBS_SCHEDULE_SECONDS},
}
# A what-if run whose worker reported no progress for this long is marked failed (the worker
# died or restarted mid-replay); beat looks for such runs every few minutes.
JOBS_WHATIF_STALL_MINUTES = env.int("JOBS_WHATIF_STALL_MINUTES", default=15)
CELERY_BEAT_SCHEDULE["jobs-what-if-sweep"] = {
    "task": "jobs.what_if_sweep",
    "schedule": 300.0,
    "options": {"expires": 240},
}

# --- Billing --------------------------------------------------------------------------------
# chargeback: money in exports, budgets enforced; showback: GPU-hours only, no money.
BILLING_MODE = env.str("BILLING_MODE", default="chargeback")
if BILLING_MODE not in ("chargeback", "showback"):
    raise ImproperlyConfigured("BILLING_MODE must be chargeback or showback.")
BILLING_CURRENCY = env.str("BILLING_CURRENCY", default="USD")
BILLING_PROVIDER_NAME = env.str("BILLING_PROVIDER_NAME", default="On-premises GPU cluster")
# Budget forecasts: the run-rate is taken from this many complete days of charges.
BILLING_FORECAST_DAYS = env.int("BILLING_FORECAST_DAYS", default=7)
# Each hourly metering run re-checks this many past hours (idempotent; an hour's rollup completes a
# few minutes after it ends); older hours are corrected only where late telemetry touched them.
BILLING_METER_LOOKBACK_HOURS = env.int("BILLING_METER_LOOKBACK_HOURS", default=3)
CELERY_BEAT_SCHEDULE["billing-meter"] = {
    "task": "billing.meter",
    "schedule": crontab(minute=5),
    "options": {"expires": 3000},
}

# --- Efficiency and right-sizing (apps/efficiency) -------------------------------------------
# A GPU of a job or booking "stayed idle" when busy under this share of the time it was held.
EFFICIENCY_IDLE_GPU_BUSY_PERCENT = env.float("EFFICIENCY_IDLE_GPU_BUSY_PERCENT", default=5.0)
# Advice flags an allocation whose idle GPUs held more than this share of its GPU-time...
EFFICIENCY_IDLE_SHARE_PERCENT = env.float("EFFICIENCY_IDLE_SHARE_PERCENT", default=30.0)
# ...and one whose GPUs never used more than this share of their memory.
EFFICIENCY_MEMORY_SHARE_PERCENT = env.float("EFFICIENCY_MEMORY_SHARE_PERCENT", default=50.0)
EFFICIENCY_WINDOW_DAYS = env.int("EFFICIENCY_WINDOW_DAYS", default=30)
# Links in emails (the weekly digest) point here.
PORTAL_BASE_URL = env.str("PORTAL_BASE_URL", default="http://localhost:8000")
# Ended jobs and bookings get their efficiency summed once; ends this recent are summed again
# (late telemetry).
EFFICIENCY_SUMMARY_LOOKBACK_HOURS = env.int("EFFICIENCY_SUMMARY_LOOKBACK_HOURS", default=6)
CELERY_BEAT_SCHEDULE["efficiency-summarize"] = {
    "task": "efficiency.summarize",
    "schedule": 600.0,
    "options": {"expires": 540},
}
CELERY_BEAT_SCHEDULE["efficiency-weekly-digest"] = {
    "task": "efficiency.weekly_digest",
    "schedule": crontab(minute=0, hour=7, day_of_week="mon"),
    "options": {"expires": 6 * 3600},
}

# --- Dashboards -----------------------------------------------------------------------------
# plotly.js is served from the plotly package's own bundled copy (static/vendor/plotly/), never a
# CDN, so the dashboards work offline and always match the plotly version building the figures.
STATICFILES_DIRS.append(("vendor/plotly", Path(plotly.__file__).resolve().parent / "package_data"))

# --- Slurm integration (optional; apps/integrations/slurm) -----------------------------------
# JOB_BACKEND=agents: the portal's scheduler places jobs on its own node agents (default).
# JOB_BACKEND=slurm: jobs are sbatch jobs on the cluster's Slurm, which places them; bookings
# become Slurm reservations and quotas GrpTRES limits. SLURM_ENABLED=1 alone (agents backend)
# mirrors bookings and quotas without sending jobs to Slurm.
JOB_BACKEND = env.str("JOB_BACKEND", default="agents")
if JOB_BACKEND not in ("agents", "slurm"):
    raise ImproperlyConfigured("JOB_BACKEND must be agents or slurm.")
SLURM_ENABLED = env.bool("SLURM_ENABLED", default=JOB_BACKEND == "slurm")
SLURM_BIN_DIR = env.str("SLURM_BIN_DIR", default="")  # empty: the commands on PATH
SLURM_CONF = env.str("SLURM_CONF", default="")  # empty: Slurm's own default (/etc/slurm)
SLURM_CLUSTER = env.str("SLURM_CLUSTER", default="")
SLURM_COMMAND_TIMEOUT = env.float("SLURM_COMMAND_TIMEOUT", default=30.0)
# Portal GPU model -> Slurm gres type and partition, e.g. "H100-SXM-80GB=h100,L40S=l40s".
SLURM_GPU_TYPES = env.dict("SLURM_GPU_TYPES", default={})
SLURM_PARTITIONS = env.dict("SLURM_PARTITIONS", default={})
# Where job output files go: a folder the compute nodes and the portal's worker both see.
SLURM_OUTPUT_DIR = env.str("SLURM_OUTPUT_DIR", default=str(VAR_DIR / "slurm-output"))
# The Unix user the portal's worker submits as; quota sync associates it with every team.
SLURM_SUBMIT_USER = env.str("SLURM_SUBMIT_USER", default="")
SLURM_RESERVATION_PREFIX = env.str("SLURM_RESERVATION_PREFIX", default="portal-")
SLURM_POLL_SECONDS = env.float("SLURM_POLL_SECONDS", default=15.0)
# Organisation units below the root are Slurm parent accounts named with this prefix (a unit
# and a team may share a slug in the portal, never an account name in Slurm).
SLURM_UNIT_ACCOUNT_PREFIX = env.str("SLURM_UNIT_ACCOUNT_PREFIX", default="unit-")
SLURM_POLL_BATCH = env.int("SLURM_POLL_BATCH", default=500)
SLURM_ACCOUNTING_LOOKBACK_HOURS = env.int("SLURM_ACCOUNTING_LOOKBACK_HOURS", default=6)
# A portal job found in neither squeue nor sacct for this long is marked failed.
SLURM_LOST_AFTER_SECONDS = env.int("SLURM_LOST_AFTER_SECONDS", default=600)
# How often beat reads Slurm's node states (sinfo) into the fleet page and drains.
SLURM_NODES_SECONDS = env.float("SLURM_NODES_SECONDS", default=60.0)
SLURM_HOOKS = {
    "job.submitted": "apps.integrations.slurm.services.on_job_submitted",
    "job.cancelled": "apps.integrations.slurm.services.on_job_cancelled",
    "reservation.created": "apps.integrations.slurm.services.on_reservation_created",
    "reservation.extended": "apps.integrations.slurm.services.on_reservation_extended",
    "reservation.ended": "apps.integrations.slurm.services.on_reservation_ended",
    "quota.changed": "apps.integrations.slurm.services.on_quota_changed",
    "unit.changed": "apps.integrations.slurm.services.on_unit_changed",
    "team.moved": "apps.integrations.slurm.services.on_team_moved",
    "node.state_changed": "apps.integrations.slurm.services.on_node_state_changed",
    "fleet.node_notes": "apps.integrations.slurm.selectors.fleet_node_notes",
}
PORTAL_HOOKS: dict[str, list[str]] = globals().get("PORTAL_HOOKS", {})
if SLURM_ENABLED:
    INSTALLED_APPS.append("apps.integrations.slurm")
    for _event, _path in SLURM_HOOKS.items():
        PORTAL_HOOKS.setdefault(_event, []).append(_path)
    CELERY_BEAT_SCHEDULE["slurm-poll"] = {
        "task": "slurm.poll",
        "schedule": SLURM_POLL_SECONDS,
        "options": {"expires": SLURM_POLL_SECONDS},
    }
    CELERY_BEAT_SCHEDULE["slurm-nodes"] = {
        "task": "slurm.nodes",
        "schedule": SLURM_NODES_SECONDS,
        "options": {"expires": SLURM_NODES_SECONDS},
    }
    CELERY_BEAT_SCHEDULE["slurm-sync"] = {
        "task": "slurm.sync",
        "schedule": 600.0,
        "options": {"expires": 550},
    }

# Power saving (capacity follows demand). Off by default; a node opts out with
# labels["power_save"] = "never" and picks its driver with labels["power_driver"].
POWER_SAVE_ENABLED = env.bool("POWER_SAVE_ENABLED", default=False)
POWER_DEFAULT_DRIVER = env.str("POWER_DEFAULT_DRIVER", default="simulated")
POWER_DRIVERS = {
    "simulated": "apps.power.drivers.simulated.SimulatedDriver",
    "command": "apps.power.drivers.command.CommandDriver",
    "redfish": "apps.power.drivers.redfish.RedfishDriver",
    "slurm": "apps.integrations.slurm.power.SlurmPowerDriver",
}
# Redfish BMCs (apps/power/drivers/redfish.py): one account for every BMC the portal powers.
POWER_REDFISH_USERNAME = env.str("POWER_REDFISH_USERNAME", default="")
POWER_REDFISH_PASSWORD = env.str("POWER_REDFISH_PASSWORD", default="")
POWER_REDFISH_VERIFY_TLS = env.bool("POWER_REDFISH_VERIFY_TLS", default=True)
POWER_REDFISH_TIMEOUT_SECONDS = env.float("POWER_REDFISH_TIMEOUT_SECONDS", default=10.0)
# auto: a Redfish session where the BMC offers one, else HTTP Basic; basic | session: only that.
POWER_REDFISH_AUTH = env.str("POWER_REDFISH_AUTH", default="auto")
# ForceOff where a BMC offers no GracefulShutdown (cuts power without the OS shutting down).
POWER_REDFISH_FORCE_OFF = env.bool("POWER_REDFISH_FORCE_OFF", default=False)
# A node whose GPUs have all been idle this long (no job, no booking, telemetry idle) may be
# powered off.
POWER_SAVE_IDLE_MINUTES = env.int("POWER_SAVE_IDLE_MINUTES", default=30)
# Idle GPUs kept powered on per model: an int for every model, or "MODEL=N,MODEL=N" (a "*" entry
# is the default for models not named).
POWER_SAVE_WARM_GPUS = env.str("POWER_SAVE_WARM_GPUS", default="0")
# How long a node takes to power on and take work (a node's labels["power_resume_seconds"]
# overrides it), and the margin added before bookings (a node is woken resume + margin ahead).
POWER_RESUME_SECONDS = env.int("POWER_RESUME_SECONDS", default=300)
POWER_BOOKING_MARGIN_SECONDS = env.int("POWER_BOOKING_MARGIN_SECONDS", default=600)
# A node still not on this long after it was asked to power on is `resume_failed`.
POWER_RESUME_TIMEOUT_SECONDS = env.int("POWER_RESUME_TIMEOUT_SECONDS", default=900)
# No thrashing: a node stays on / off at least this long, and powers off at most N times a day.
POWER_MIN_ON_MINUTES = env.int("POWER_MIN_ON_MINUTES", default=10)
POWER_MIN_OFF_MINUTES = env.int("POWER_MIN_OFF_MINUTES", default=5)
POWER_MAX_CYCLES_PER_DAY = env.int("POWER_MAX_CYCLES_PER_DAY", default=4)
# The command driver: site scripts run without a shell, "{node}" replaced by the host name.
POWER_COMMAND_OFF = env.str("POWER_COMMAND_OFF", default="")
POWER_COMMAND_ON = env.str("POWER_COMMAND_ON", default="")
POWER_COMMAND_STATE = env.str("POWER_COMMAND_STATE", default="")
POWER_COMMAND_TIMEOUT_SECONDS = env.int("POWER_COMMAND_TIMEOUT_SECONDS", default=60)
# The simulated driver's power switches (read by the simulated agents): one file per node.
POWER_SIMULATED_DIR = env.str("POWER_SIMULATED_DIR", default=str(BASE_DIR / "var" / "power"))
# How often the power policy runs (settle, wake, power down).
POWER_POLICY_SECONDS = env.float("POWER_POLICY_SECONDS", default=60.0)
CELERY_BEAT_SCHEDULE["power-policy"] = {
    "task": "power.policy_cycle",
    "schedule": POWER_POLICY_SECONDS,
    "options": {"expires": max(POWER_POLICY_SECONDS - 5, 1)},
}
