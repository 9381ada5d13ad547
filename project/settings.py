"""Reportline settings, all from the environment; bad values fail loudly at start-up."""

import os
from pathlib import Path

from django.core.exceptions import ImproperlyConfigured
from django.utils.csp import CSP

BASE_DIR = Path(__file__).resolve().parent.parent


def env_str(name: str, default: str = "") -> str:
    return os.environ.get(name, default)


def env_bool(name: str, default: bool) -> bool:
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return default
    value = raw.strip().lower()
    if value in {"1", "true", "yes", "on"}:
        return True
    if value in {"0", "false", "no", "off"}:
        return False
    raise ImproperlyConfigured(f"{name} must be a boolean (1/0, true/false), not {raw!r}")


def env_number(name: str, default: float, *, minimum: float = 0, kind: type = float):
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = kind(raw)
    except ValueError:
        raise ImproperlyConfigured(f"{name} must be a {kind.__name__}, not {raw!r}") from None
    if value < minimum:
        raise ImproperlyConfigured(f"{name} must be at least {minimum}, not {raw!r}")
    return value


def env_int(name: str, default: int, *, minimum: int = 0) -> int:
    return env_number(name, default, minimum=minimum, kind=int)


def env_lane_limits(name: str, default: str) -> dict[str, int]:
    raw = env_str(name, default)
    limits = {}
    for part in raw.split(","):
        lane, _, count = part.strip().partition("=")
        if lane not in {"short", "long"} or not count.isdigit():
            raise ImproperlyConfigured(f"{name} must look like 'short=6,long=2', not {raw!r}")
        limits[lane] = int(count)
    return limits


DEBUG = env_bool("DJANGO_DEBUG", False)
SECRET_KEY = env_str("DJANGO_SECRET_KEY")
if not SECRET_KEY:
    if not DEBUG:
        raise ImproperlyConfigured("DJANGO_SECRET_KEY is required when DJANGO_DEBUG is off.")
    SECRET_KEY = "insecure-debug-only-key"
# Earlier keys, still accepted while a new SECRET_KEY takes over: sessions and sealed
# webhook secrets made under one of them still read (docs/webhooks.md#the-secret).
# Comma-separated; Django's generated keys hold no comma.
SECRET_KEY_FALLBACKS = [k for k in env_str("DJANGO_SECRET_KEY_FALLBACKS").split(",") if k]
ALLOWED_HOSTS = [h for h in env_str("DJANGO_ALLOWED_HOSTS", "127.0.0.1,localhost").split(",") if h]
# A form refused by its CSRF check gets the product's 403 page, saying why (reports.serving.errors).
CSRF_FAILURE_VIEW = "reports.serving.errors.csrf_failure"
CSRF_TRUSTED_ORIGINS = [o for o in env_str("DJANGO_CSRF_TRUSTED_ORIGINS", "").split(",") if o]

# --- HTTPS (docs/security.md) ------------------------------------------------------------
# Served over HTTPS (by nginx in front, or directly): on unless DEBUG is. Cookies are then
# sent over TLS only, plain HTTP is redirected, and browsers are told (HSTS) never to come
# back over plain HTTP. Turn it off only for a server that is never reached over a network.
HTTPS = env_bool("DJANGO_HTTPS", not DEBUG)
SESSION_COOKIE_SECURE = CSRF_COOKIE_SECURE = SECURE_SSL_REDIRECT = HTTPS
# Except what probes and scrapers ask of a web process directly, over plain HTTP, not
# through the proxy (docs/production.md): a balancer or an orchestrator counts a redirect
# as a pass, so a process whose database is down would still look ready, and Prometheus
# would follow it to an HTTPS port nobody serves.
SECURE_REDIRECT_EXEMPT = [r"^healthz$", r"^readyz$", r"^metrics$"]
SECURE_HSTS_SECONDS = env_int("DJANGO_HSTS_SECONDS", 31_536_000) if HTTPS else 0
SECURE_HSTS_INCLUDE_SUBDOMAINS = env_bool("DJANGO_HSTS_INCLUDE_SUBDOMAINS", HTTPS)
SECURE_HSTS_PRELOAD = env_bool("DJANGO_HSTS_PRELOAD", HTTPS)
# Behind a proxy that ends TLS (deploy/nginx.conf), requests arrive over plain HTTP: trust
# its X-Forwarded-Proto, which that proxy always overwrites. Never turn this on without
# such a proxy: a client could then claim HTTPS for itself.
if env_bool("DJANGO_TLS_PROXY", False):
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")

INSTALLED_APPS = [
    "daphne",
    "reports.apps.AdminConfig",  # Django's admin, its login throttled
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "django_htmx",
    "channels",
    "reports",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "django.middleware.csp.ContentSecurityPolicyMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "django_htmx.middleware.HtmxMiddleware",
]
# request id, version; then no cache keeps an answer, and no NUL reaches a view
MIDDLEWARE[0:0] = [
    "reports.observability.middleware.RequestContextMiddleware",
    "reports.serving.middleware.NoStoreMiddleware",
    "reports.serving.middleware.RefuseNulMiddleware",
]

ROOT_URLCONF = "project.urls"
ASGI_APPLICATION = "project.asgi.application"

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
                "django.template.context_processors.csp",
            ],
        },
    },
]

DATA_DIR = Path(env_str("REPORTS_DATA_DIR", str(BASE_DIR / "var")))
DATA_DIR.mkdir(parents=True, exist_ok=True)


# PostgreSQL connections a process keeps (below); task creations it runs at once, so that
# uploads waiting for the admission lock leave its pages connections (reports/serving/
# admissions.py).
REPORTS_DB_POOL_SIZE = env_int("REPORTS_DB_POOL_SIZE", 8, minimum=2)
REPORTS_ADMISSIONS_AT_ONCE = env_int(
    "REPORTS_ADMISSIONS_AT_ONCE", max(1, REPORTS_DB_POOL_SIZE // 2), minimum=1
)


def _database() -> dict:
    import dj_database_url

    url = env_str("DATABASE_URL") or f"sqlite:///{DATA_DIR / 'db.sqlite3'}"
    # No persistent connections to a server: under ASGI a request may run in a thread of
    # its own, and a connection kept by a thread that is gone stays open until the server
    # drops it (PostgreSQL gets a pool instead, below).
    # The URL may hold a password: a message names its scheme, never the URL.
    scheme = url.partition("://")[0] if "://" in url else ""
    try:
        config = dj_database_url.parse(url, conn_max_age=0, conn_health_checks=True)
    except Exception:  # its errors name no variable, and some quote the whole URL
        raise ImproperlyConfigured(
            "DATABASE_URL must look like postgres://user:password@host:5432/name "
            f"(or sqlite:///path); this {scheme or 'one, with no scheme,'} URL cannot be read."
        ) from None
    if not config["ENGINE"].endswith(("postgresql", "sqlite3")):
        raise ImproperlyConfigured(
            f"DATABASE_URL must name PostgreSQL (postgres://…) or SQLite (sqlite:///…), "
            f"not {scheme}://…: the queue needs one of the two."
        )
    if config["ENGINE"].endswith("postgresql"):
        # A pool per process instead: a fixed number of connections, whatever the number of
        # requests and streams (streams read through one shared feed per task, not a
        # connection each). A request that waits longer than the timeout for one answers
        # 503 with Retry-After (reports.observability.middleware), never a 500.
        config.setdefault("OPTIONS", {})["pool"] = {
            "min_size": 1,
            "max_size": REPORTS_DB_POOL_SIZE,
            "timeout": env_number("REPORTS_DB_POOL_TIMEOUT_S", 5, minimum=0.1),
        }
    if config["ENGINE"].endswith("sqlite3"):
        # Django's SQLite backend, with one writer at a time per process (project/sqlite).
        config["ENGINE"] = "project.sqlite"
        # Kept open: a request's thread is kept for the next one (reports/serving/
        # handler.py), and setting a connection up costs about 3 ms. A thread that ends
        # takes its connection with it: SQLite has no server to hold it open.
        config["CONN_MAX_AGE"] = None
        config["OPTIONS"] = {
            # The worker writes beside the web process: readers never wait for the
            # writer (WAL), writers queue for the lock up front instead of failing
            # half-way (IMMEDIATE), and wait up to 20 s for it (timeout).
            "transaction_mode": "IMMEDIATE",
            "timeout": 20,
            "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
        }
    if env_str("REPORTS_DATABASE_POOLING", "session") == "transaction":
        _behind_a_transaction_pooler(config)
    return config


def _behind_a_transaction_pooler(config: dict) -> None:
    """Fit the connection to PgBouncer's transaction pooling: each transaction may run on a
    different server session, so nothing may outlive one (docs/production.md)."""
    if not config["ENGINE"].endswith("postgresql"):
        raise ImproperlyConfigured("REPORTS_DATABASE_POOLING=transaction needs PostgreSQL.")
    if not REPORTS_LISTEN_DATABASE_URL:
        raise ImproperlyConfigured(
            "REPORTS_DATABASE_POOLING=transaction needs REPORTS_LISTEN_DATABASE_URL: workers "
            "LISTEN for new tasks on a session of their own, which a transaction pooler "
            "cannot keep. Set it to a URL that reaches PostgreSQL directly, not the pooler."
        )
    # Named cursors (QuerySet.iterator) and prepared statements live in a session.
    config["DISABLE_SERVER_SIDE_CURSORS"] = True
    config.setdefault("OPTIONS", {})["prepare_threshold"] = None


# The direct session connection that LISTENs for new tasks (reports/wakeups.py); unset:
# DATABASE_URL's. Required behind a transaction pooler.
REPORTS_LISTEN_DATABASE_URL = env_str("REPORTS_LISTEN_DATABASE_URL")
if env_str("REPORTS_DATABASE_POOLING", "session") not in {"session", "transaction"}:
    raise ImproperlyConfigured("REPORTS_DATABASE_POOLING must be session or transaction.")
DATABASES = {"default": _database()}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

REDIS_URL = env_str("REDIS_URL")
if REDIS_URL and not REDIS_URL.startswith(("redis://", "rediss://", "unix://")):
    # Else the layer fails only when first used, and then every readiness check says
    # "down" with nothing naming the setting.
    raise ImproperlyConfigured(
        "REDIS_URL must start with redis://, rediss:// or unix:// (e.g. redis://127.0.0.1:6379/0)."
    )
if REDIS_URL:
    CHANNEL_LAYERS = {
        "default": {
            # Redis publish/subscribe: a fan-out is one PUBLISH, and a web process takes the
            # messages as Redis pushes them, not one round trip each. A message nobody
            # listens to is dropped, as any may be: followers fill gaps from the event table.
            "BACKEND": "channels_redis.pubsub.RedisPubSubChannelLayer",
            "CONFIG": {"hosts": [REDIS_URL]},
        }
    }
else:
    CHANNEL_LAYERS = {"default": {"BACKEND": "channels.layers.InMemoryChannelLayer"}}

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
]
# Django's sessions and users, each read by a statement compiled once. Django's own backend
# stays listed for the sessions it logged in before: their users stay logged in.
SESSION_ENGINE = "reports.serving.logged_in"
AUTHENTICATION_BACKENDS = [
    "reports.serving.logged_in.UserBackend",
    "django.contrib.auth.backends.ModelBackend",
]
LOGIN_URL = "/accounts/login/"
LOGIN_REDIRECT_URL = "/"
LOGOUT_REDIRECT_URL = "/accounts/login/"

LANGUAGE_CODE = "en"
TIME_ZONE = "UTC"
USE_I18N = False
USE_TZ = True
# Moments to the second, one way everywhere Django writes one by default (the admin).
FORMAT_MODULE_PATH = "project.formats"

STATIC_URL = "/static/"
STATICFILES_DIRS = [BASE_DIR / "static"]
STATIC_ROOT = DATA_DIR / "static"

SECURE_CONTENT_TYPE_NOSNIFF = True
X_FRAME_OPTIONS = "DENY"
SECURE_CSP = {
    "default-src": [CSP.SELF],
    "script-src": [CSP.SELF],
    "style-src": [CSP.SELF],
    "img-src": [CSP.SELF],
    "connect-src": [CSP.SELF],
    "object-src": [CSP.NONE],
    "base-uri": [CSP.NONE],
    "form-action": [CSP.SELF],
    "frame-ancestors": [CSP.NONE],
}

# One JSON object a line (reports/observability/logs.py; fields in docs/observability.md).
REPORTS_LOG_LEVEL = env_str("REPORTS_LOG_LEVEL", "INFO").strip().upper()
if REPORTS_LOG_LEVEL not in {"DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"}:
    raise ImproperlyConfigured(
        "REPORTS_LOG_LEVEL must be DEBUG, INFO, WARNING, ERROR or CRITICAL, "
        f"not {env_str('REPORTS_LOG_LEVEL')!r}"
    )
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"json": {"()": "reports.observability.logs.JsonFormatter"}},
    "filters": {"refused": {"()": "reports.observability.logs.RefusedRequest"}},
    "handlers": {
        "console": {"class": "logging.StreamHandler", "formatter": "json", "filters": ["refused"]}
    },
    "loggers": {
        "reports": {"handlers": ["console"], "level": REPORTS_LOG_LEVEL},
        "django": {"handlers": ["console"], "level": "WARNING", "propagate": False},
        # Python's warnings (reports/apps.py sends them here) and the connection pool's
        # complaints of a database out of reach: JSON too, not bare lines of text.
        "py.warnings": {"handlers": ["console"], "level": "WARNING", "propagate": False},
        "psycopg": {"handlers": ["console"], "level": "WARNING", "propagate": False},
    },
}

# --- Reportline -------------------------------------------------------------------------
REPORTS_STORAGE_DIR = DATA_DIR / "files"
# Uploads and results (reports/storage.py): local files, or an S3-compatible object store
# configured by django-storages' own variables, so web and workers share no disk.


def reports_storage() -> dict:
    """Return the `STORAGES` entry for uploads and results that the environment asks for."""
    kind = env_str("REPORTS_STORAGE", "local")
    if kind == "local":
        return {
            "BACKEND": "reports.storage.AtomicFileSystemStorage",
            "OPTIONS": {"location": REPORTS_STORAGE_DIR},
        }
    if kind != "s3":
        raise ImproperlyConfigured(f"REPORTS_STORAGE must be local or s3, not {kind!r}")
    if not env_str("AWS_STORAGE_BUCKET_NAME"):
        raise ImproperlyConfigured("REPORTS_STORAGE=s3 needs AWS_STORAGE_BUCKET_NAME.")
    try:
        import storages  # noqa: F401 (django-storages: reports/object_store.py's base)
        from botocore.config import Config
    except ImportError as exc:
        raise ImproperlyConfigured(
            "REPORTS_STORAGE=s3 needs the object store's libraries: install the 's3' extra "
            "(pip install 'reportline[s3]')."
        ) from exc

    # Bounded waits: a store that does not answer fails a save in seconds, not minutes.
    timeout = env_number("REPORTS_STORAGE_TIMEOUT_S", 10, minimum=0.1)
    return {
        "BACKEND": "reports.object_store.ObjectStorage",
        "OPTIONS": {
            "bucket_name": env_str("AWS_STORAGE_BUCKET_NAME"),
            "endpoint_url": env_str("AWS_S3_ENDPOINT_URL") or None,
            "region_name": env_str("AWS_S3_REGION_NAME") or None,
            # Credentials: AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY, read by boto3 itself.
            "default_acl": None,
            "file_overwrite": True,  # names are random: nothing is ever overwritten
            "client_config": Config(
                connect_timeout=timeout,
                read_timeout=timeout,
                retries={"mode": "standard", "max_attempts": 3},
            ),
        },
    }


STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {"BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"},
    "reports": reports_storage(),
}
REPORTS_PROVIDER = env_str("REPORTS_PROVIDER", "simulated")
REPORTS_PROVIDERS = {
    "simulated": {
        "BACKEND": "reports.providers.simulated.SimulatedProvider",
        "OPTIONS": {
            "ttft_s": env_number("REPORTS_SIMULATED_TTFT_S", 0.45),
            "tokens_per_s": env_number("REPORTS_SIMULATED_TOKENS_PER_S", 60, minimum=0.1),
            # Pacing modelled on a real provider (openai, claude, bursty, stress), seeded.
            "profile": env_str("REPORTS_SIMULATED_PROFILE"),
            "seed": env_int("REPORTS_SIMULATED_SEED", 0),
        },
    },
    # Any OpenAI-compatible server: OpenAI, vLLM, Ollama (http://127.0.0.1:11434/v1), llama.cpp.
    "openai": {
        "BACKEND": "reports.providers.openai.OpenAIProvider",
        "OPTIONS": {
            "base_url": env_str("OPENAI_BASE_URL", "https://api.openai.com/v1"),
            "api_key": env_str("OPENAI_API_KEY"),
            "connect_timeout_s": env_number("REPORTS_PROVIDER_CONNECT_TIMEOUT_S", 10, minimum=0.01),
            # openai | llama-server: what the server understands beyond OpenAI's API.
            "dialect": env_str("REPORTS_PROVIDER_DIALECT", "openai"),
        },
    },
    # A model on this machine: llama.cpp's llama-server, started and watched by the worker
    # (docs/providers.md, "local"); REPORTS_LOCAL_MODEL unset: SmolLM2 from the `local` extra.
    "local": {
        "BACKEND": "reports.providers.local.LocalProvider",
        "OPTIONS": {
            "model_path": env_str("REPORTS_LOCAL_MODEL"),
            "context_tokens": env_int("REPORTS_LOCAL_CONTEXT_TOKENS", 4096, minimum=512),
            "slots": env_int("REPORTS_LOCAL_SLOTS", 2, minimum=1),
            "threads": env_int("REPORTS_LOCAL_THREADS", min(os.cpu_count() or 1, 4), minimum=1),
            "start_timeout_s": env_number("REPORTS_LOCAL_START_TIMEOUT_S", 120, minimum=1),
            "health_every_s": env_number("REPORTS_LOCAL_HEALTH_S", 5, minimum=0.1),
            # skeleton, grammar or free (docs/providers-tested.md, "A small model's reports")
            "report_shape": env_str("REPORTS_LOCAL_REPORT_SHAPE", "skeleton"),
        },
    },
}
_LOCAL = REPORTS_PROVIDERS["local"]["OPTIONS"]
if REPORTS_PROVIDER == "local":
    from reports.providers.prompts import REPORT_SHAPES as _SHAPES  # no models: safe here

    if _LOCAL["report_shape"] not in _SHAPES:
        raise ImproperlyConfigured(
            f"REPORTS_LOCAL_REPORT_SHAPE must be one of {', '.join(_SHAPES)}, "
            f"not {_LOCAL['report_shape']!r}"
        )
if REPORTS_PROVIDERS["simulated"]["OPTIONS"]["profile"]:
    from reports.providers.pacing import PROFILES as _PROFILES  # no models: safe here

    if REPORTS_PROVIDERS["simulated"]["OPTIONS"]["profile"] not in _PROFILES:
        raise ImproperlyConfigured(
            f"REPORTS_SIMULATED_PROFILE must be one of {', '.join(_PROFILES)}, "
            f"not {env_str('REPORTS_SIMULATED_PROFILE')!r}"
        )
# The model a report is written by; with the prompt version it decides whether an earlier
# report of the same documents can be offered again.
_DEFAULT_MODELS = {
    "simulated": "extractive",
    "local": Path(_LOCAL["model_path"] or "SmolLM2-135M-Instruct.Q4_1.gguf").stem,
}
REPORTS_MODEL = env_str("REPORTS_MODEL", _DEFAULT_MODELS.get(REPORTS_PROVIDER, ""))
REPORTS_ALLOW_SCENARIOS = env_bool("REPORTS_ALLOW_SCENARIOS", DEBUG)
REPORTS_MAX_FILE_MB = env_number("REPORTS_MAX_FILE_MB", 10, minimum=0.001)
REPORTS_MAX_REQUEST_MB = env_number("REPORTS_MAX_REQUEST_MB", 25, minimum=0.001)
REPORTS_MAX_FILES = env_int("REPORTS_MAX_FILES", 10, minimum=1)
REPORTS_MAX_INSTRUCTIONS_CHARS = env_int("REPORTS_MAX_INSTRUCTIONS_CHARS", 4000, minimum=1)
REPORTS_QUEUE_LIMIT = env_int("REPORTS_QUEUE_LIMIT", 100, minimum=1)
# Queued tasks one user may have waiting at once, so that one user's backlog cannot fill
# the queue that every user shares (429 rate_limited beyond it).
REPORTS_USER_QUEUE_LIMIT = env_int("REPORTS_USER_QUEUE_LIMIT", 10, minimum=1)
REPORTS_MAX_ATTEMPTS = env_int("REPORTS_MAX_ATTEMPTS", 3, minimum=1)
# A local model on a CPU reads a prompt for tens of seconds, more on a busy machine, before
# llama-server answers at all: its defaults wait longer (docs/providers.md, "local").
_ON_CPU = REPORTS_PROVIDER == "local"
REPORTS_STALL_TIMEOUT_S = env_number(
    "REPORTS_STALL_TIMEOUT_S", 180 if _ON_CPU else 30, minimum=0.01
)
REPORTS_TASK_DEADLINE_S = env_number("REPORTS_TASK_DEADLINE_S", 1800 if _ON_CPU else 900, minimum=1)
REPORTS_LEASE_S = env_number("REPORTS_LEASE_S", 30, minimum=1)
REPORTS_MAX_RUNNING = env_int("REPORTS_MAX_RUNNING", 8, minimum=1)
# Attempts one user may have running while another user's task waits for the slot; when
# nobody else waits, one user may have every slot (docs/architecture.md, "Decisions").
# 1: a user with none running goes ahead of every backlog, whatever the slots of the layout
# (the demo's 2, the embedded worker's 4, the workers' REPORTS_MAX_RUNNING).
REPORTS_USER_MAX_RUNNING = env_int("REPORTS_USER_MAX_RUNNING", 1, minimum=1)
# Calls the provider runs at once (0: as many as it takes, unless it says, as llama-server's
# slots do); tasks beyond it wait in Reportline's queue (docs/providers.md, "Concurrency").
REPORTS_PROVIDER_CONCURRENCY = env_int("REPORTS_PROVIDER_CONCURRENCY", 0, minimum=0)
REPORTS_LANE_LIMITS = env_lane_limits("REPORTS_LANE_LIMITS", "short=6,long=2")
REPORTS_LONG_LANE_BYTES = env_int("REPORTS_LONG_LANE_BYTES", 200_000, minimum=1)
REPORTS_RERUN_LOST_ATTEMPTS = env_bool("REPORTS_RERUN_LOST_ATTEMPTS", True)
REPORTS_EMBEDDED_WORKER = env_bool("REPORTS_EMBEDDED_WORKER", True)
REPORTS_EMBEDDED_SLOTS = env_int("REPORTS_EMBEDDED_SLOTS", 4, minimum=1)
REPORTS_PROVIDER_RESPONSE_TIMEOUT_S = env_number(
    "REPORTS_PROVIDER_RESPONSE_TIMEOUT_S", 300 if _ON_CPU else 60, minimum=0.01
)
REPORTS_MAX_REPORT_KB = env_int("REPORTS_MAX_REPORT_KB", 200, minimum=1)
# A local model's window is small: its report gets a cap that leaves room to read.
REPORTS_MAX_OUTPUT_TOKENS = env_int(
    "REPORTS_MAX_OUTPUT_TOKENS", 1024 if REPORTS_PROVIDER == "local" else 8192, minimum=1
)
# A stream that keeps repeating itself is stopped: failed / degenerate_output.
REPORTS_STOP_LOOPS = env_bool("REPORTS_STOP_LOOPS", True)
# A sentence of the report that copies a passage word for word, and cites nothing, gets
# that passage's citation at finalization (reports/worker/quotes.py). Off: it changes the
# saved report; the demo turns it on for a local model, which never cites.
REPORTS_CITE_QUOTES = env_bool("REPORTS_CITE_QUOTES", False)
REPORTS_RETRY_MAX_WAIT_S = env_number("REPORTS_RETRY_MAX_WAIT_S", 60, minimum=0)
# The provider's circuit (docs/providers.md): calls in a row failed for the provider's own
# reasons that open it, and the seconds before its first probe (doubling, at most 10 min).
REPORTS_BREAKER_FAILURES = env_int("REPORTS_BREAKER_FAILURES", 5, minimum=1)
REPORTS_BREAKER_COOLDOWN_S = env_number("REPORTS_BREAKER_COOLDOWN_S", 30, minimum=0)
REPORTS_POLL_S = env_number("REPORTS_POLL_S", 0.5, minimum=0.01)
# SIGTERM on a web process: how long open streams get to close before it stops
# (reports/serving/stopping.py).
REPORTS_DRAIN_S = env_number("REPORTS_DRAIN_S", 10, minimum=0)
# Open streams (SSE and WebSocket together) one user may hold in one process.
REPORTS_MAX_STREAMS_PER_USER = env_int("REPORTS_MAX_STREAMS_PER_USER", 20, minimum=1)

# Webhooks (docs/webhooks.md): endpoints on loopback, private or link-local addresses are
# refused unless this is on (a receiver on the same machine, in development); the seconds
# one delivery may take.
REPORTS_WEBHOOK_ALLOW_PRIVATE = env_bool("REPORTS_WEBHOOK_ALLOW_PRIVATE", False)
REPORTS_WEBHOOK_TIMEOUT_S = env_number("REPORTS_WEBHOOK_TIMEOUT_S", 10, minimum=0.1)
# Registrations a user may try in a window (429 rate_limited beyond that): each looks its
# host up, and a lookup that outlives its wait keeps a thread until the resolver gives up.
REPORTS_WEBHOOK_RATE_LIMIT = env_int("REPORTS_WEBHOOK_RATE_LIMIT", 10, minimum=1)
REPORTS_WEBHOOK_RATE_WINDOW_S = env_int("REPORTS_WEBHOOK_RATE_WINDOW_S", 60, minimum=1)

# --- Observability (docs/observability.md) -----------------------------------------------
APP_VERSION = env_str("APP_VERSION")  # unset: the package version + the git commit
REPORTS_OTEL = env_bool("REPORTS_OTEL", False)  # OpenTelemetry tracing; needs the otel extra
REPORTS_METRICS_TOKEN = env_str("REPORTS_METRICS_TOKEN")  # bearer token for /metrics
# Log a warning naming who held the event loop when it answers later than this.
REPORTS_LOOP_LAG_WARN_MS = env_number("REPORTS_LOOP_LAG_WARN_MS", 100, minimum=1)
REPORTS_LATENCY_SMALL_SAMPLE = env_int("REPORTS_LATENCY_SMALL_SAMPLE", 20, minimum=1)
# --- The context budget ------------------------------------------------------------------
# The model's context window in tokens: input (cut to fit, see reports/providers/prompts.py) plus
# the output cap must fit in it.
REPORTS_CONTEXT_TOKENS = env_int(
    "REPORTS_CONTEXT_TOKENS",
    _LOCAL["context_tokens"] if REPORTS_PROVIDER == "local" else 128_000,
    minimum=1,
)
if REPORTS_CONTEXT_TOKENS < REPORTS_MAX_OUTPUT_TOKENS + 2_000:
    raise ImproperlyConfigured(
        f"REPORTS_CONTEXT_TOKENS ({REPORTS_CONTEXT_TOKENS}) must leave at least 2000 tokens "
        f"of input after REPORTS_MAX_OUTPUT_TOKENS ({REPORTS_MAX_OUTPUT_TOKENS})."
    )
# A plan of calls (docs/api.md, "Passages, parts and citations"): at most this many
# provider calls for one task (its parts, rounds and final call); longer input is refused.
REPORTS_MAX_PARTS = env_int("REPORTS_MAX_PARTS", 64, minimum=2)
# How many of one task's notes calls run side by side (docs/lifecycle.md, "A plan of calls").
REPORTS_PLAN_PARALLEL_CALLS = env_int("REPORTS_PLAN_PARALLEL_CALLS", 2, minimum=1)
# --- Hardening: parse sandbox, rate limits, login throttling (docs/security.md) ----------
REPORTS_PARSE_CPU_S = env_int("REPORTS_PARSE_CPU_S", 60, minimum=1)
REPORTS_PARSE_MEMORY_MB = env_int("REPORTS_PARSE_MEMORY_MB", 1024, minimum=64)
REPORTS_PARSE_TIMEOUT_S = env_number("REPORTS_PARSE_TIMEOUT_S", 90, minimum=1)
# Task creation per user: at most REPORTS_USER_RATE_LIMIT tasks in any
# REPORTS_USER_RATE_WINDOW_S seconds (429 rate_limited with Retry-After beyond that).
REPORTS_USER_RATE_LIMIT = env_int("REPORTS_USER_RATE_LIMIT", 30, minimum=1)
REPORTS_USER_RATE_WINDOW_S = env_int("REPORTS_USER_RATE_WINDOW_S", 60, minimum=1)
# Bytes of documents a user may upload in any 24 hours (429 rate_limited beyond it): every
# upload is kept with its task, so this bounds how fast one user fills the file store.
REPORTS_USER_UPLOAD_MB_PER_DAY = env_number("REPORTS_USER_UPLOAD_MB_PER_DAY", 1024, minimum=0.001)
# Failed logins per username and address before logins are refused for the lockout.
REPORTS_LOGIN_MAX_FAILURES = env_int("REPORTS_LOGIN_MAX_FAILURES", 5, minimum=1)
REPORTS_LOGIN_LOCKOUT_S = env_int("REPORTS_LOGIN_LOCKOUT_S", 900, minimum=1)
# Requests to the shared pages per client address in a window; live share links a report may have.
REPORTS_SHARE_RATE_LIMIT = env_int("REPORTS_SHARE_RATE_LIMIT", 60, minimum=1)
REPORTS_SHARE_RATE_WINDOW_S = env_int("REPORTS_SHARE_RATE_WINDOW_S", 60, minimum=1)
REPORTS_SHARE_MAX_LINKS = env_int("REPORTS_SHARE_MAX_LINKS", 20, minimum=1)
if REDIS_URL:
    # One count of failed logins for every web process.
    CACHES = {
        "default": {"BACKEND": "django.core.cache.backends.redis.RedisCache", "LOCATION": REDIS_URL}
    }
# --- Budgets and cost -------------------------------------------------------------------
# Money is counted in integer micro-dollars (millionths of a US dollar), never floats.
# Prices: micro-dollars per million tokens, so 150_000 is $0.15 a million tokens.
# "extractive" is the simulated model: a nominal price, so that budgets move in the demo.
REPORTS_PRICES = {
    "extractive": {"input": 1_000_000, "output": 4_000_000, "cached_input": 500_000},
    "gpt-4o-mini": {"input": 150_000, "output": 600_000, "cached_input": 75_000},
    "gpt-4.1-mini": {"input": 400_000, "output": 1_600_000, "cached_input": 100_000},
    "gpt-4o": {"input": 2_500_000, "output": 10_000_000, "cached_input": 1_250_000},
}


def usd_micros(name: str, raw: str) -> int:
    """Return a non-negative amount of US dollars, given like '5' or '0.15', in micro-dollars."""
    from decimal import Decimal, InvalidOperation

    try:
        value = Decimal(raw.strip()) * 1_000_000
    except InvalidOperation:
        raise ImproperlyConfigured(f"{name} must be an amount of dollars, not {raw!r}") from None
    if not value.is_finite() or value < 0 or value != value.to_integral_value():
        raise ImproperlyConfigured(f"{name} must be dollars to the micro-dollar, not {raw!r}")
    return int(value)


if REPORTS_PROVIDER == "local":  # the machine's own model: free unless priced below
    REPORTS_PRICES[REPORTS_MODEL] = {"input": 0, "output": 0, "cached_input": 0}
if os.environ.get("REPORTS_MODEL_PRICE"):
    # The configured model's price in dollars per million tokens: "input,output,cached_input".
    _price = os.environ["REPORTS_MODEL_PRICE"].split(",")
    if len(_price) != 3:
        raise ImproperlyConfigured("REPORTS_MODEL_PRICE must look like '0.15,0.60,0.075'.")
    REPORTS_PRICES[REPORTS_MODEL] = {
        kind: usd_micros("REPORTS_MODEL_PRICE", raw)
        for kind, raw in zip(("input", "output", "cached_input"), _price, strict=True)
    }
REPORTS_DEFAULT_BUDGET_MICROS = usd_micros(
    "REPORTS_DEFAULT_BUDGET_USD", env_str("REPORTS_DEFAULT_BUDGET_USD", "5")
)
