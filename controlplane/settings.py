"""Plinth's one settings file, driven by the environment.

Every value comes from an environment variable (or, for secrets, from a file named by
``NAME_FILE``, as Kubernetes mounts them). In production mode (``PLINTH_ENV=production``) a
missing or malformed required value stops start-up with a message naming the variable; in
development the same variables fall back to local defaults so ``make run`` needs no set-up.
"""

from __future__ import annotations

import json
import os
from datetime import timedelta
from pathlib import Path
from urllib.parse import urlsplit

from csp.constants import NONE, SELF
from django.core.exceptions import ImproperlyConfigured

from controlplane import redis_clients
from controlplane.env import (
    env_bool,
    env_database,
    env_fernet_key,
    env_int,
    env_list,
    env_redis_url,
    env_str,
)
from controlplane.sso_mapping import GroupMapError, parse_group_map

BASE_DIR = Path(__file__).resolve().parent.parent
DATA_DIR = Path(env_str("PLINTH_DATA_DIR", str(BASE_DIR / "data")))

PLINTH_ENV = env_str("PLINTH_ENV", "development")
if PLINTH_ENV not in {"development", "production", "test"}:
    from django.core.exceptions import ImproperlyConfigured

    raise ImproperlyConfigured("PLINTH_ENV must be one of development, production, test")
PRODUCTION = PLINTH_ENV == "production"

# Off unless asked for: Django's debug pages show settings and every URL, and `make run` is
# often on a shared machine. Plinth's own error pages (controlplane/error_pages.py) answer instead.
DEBUG = env_bool("PLINTH_DEBUG", default=False)
SECRET_KEY = env_str("SECRET_KEY", "dev-insecure-secret-key-change-me", required=PRODUCTION)
if PRODUCTION and len(SECRET_KEY) < 32:
    from django.core.exceptions import ImproperlyConfigured

    raise ImproperlyConfigured("SECRET_KEY must be at least 32 characters in production")

# Fernet key that encrypts Secret values at rest. The development default is public on purpose:
# anything encrypted with it is only as safe as a dev database.
PLINTH_ENCRYPTION_KEY = env_fernet_key(
    "PLINTH_ENCRYPTION_KEY",
    "ZGV2LWluc2VjdXJlLWVuY3J5cHRpb24ta2V5LTMyYiE=",
    required=PRODUCTION,
)

ALLOWED_HOSTS = env_list("ALLOWED_HOSTS", ["127.0.0.1", "localhost", "testserver"], PRODUCTION)
CSRF_TRUSTED_ORIGINS = env_list("CSRF_TRUSTED_ORIGINS", [], required=False)

# Public addresses users call: the gateway base URL (path addressing) and, optionally, a
# wildcard domain for <slug>.<INFERENCE_DOMAIN> addressing.
GATEWAY_PUBLIC_URL = env_str("GATEWAY_PUBLIC_URL", "http://127.0.0.1:8080")
INFERENCE_DOMAIN = env_str("INFERENCE_DOMAIN", "")
CONSOLE_URL = env_str("CONSOLE_URL", "http://127.0.0.1:8000")

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "django_htmx",
    "template_partials",
    "ninja",  # serves the API docs' Swagger UI from its own static files (no CDN)
    "axes",  # sign-in throttling: failed attempts per username and address
    "controlplane",
    "deployments",
]

MIDDLEWARE = [
    # First: times everything below it, and answers /metrics before anything checks the Host
    # header (Prometheus scrapes pods by address). Who may read it: PLINTH_METRICS_TOKEN below.
    "controlplane.metrics.MetricsMiddleware",
    "django.middleware.security.SecurityMiddleware",
    "csp.middleware.CSPMiddleware",  # Content-Security-Policy on every answer, errors too
    "whitenoise.middleware.WhiteNoiseMiddleware",
    # Before anything reads a value: NUL and lone surrogates are refused with a 4xx.
    "controlplane.middleware.InputHygieneMiddleware",
    "controlplane.middleware.LivenessMiddleware",  # /healthz before the Host check (kubelet probes)
    # A view that finds PostgreSQL down answers 503 + Retry-After (controlplane/error_pages.py).
    "controlplane.middleware.DatabaseUnavailableMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "controlplane.middleware.SlashRedirectMiddleware",  # CommonMiddleware; 308 for a POST
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "django_htmx.middleware.HtmxMiddleware",
    "controlplane.middleware.CurrentOrganizationMiddleware",
    "axes.middleware.AxesMiddleware",  # last, as django-axes requires: answers lock-outs
]

ROOT_URLCONF = "controlplane.urls"
ASGI_APPLICATION = "controlplane.asgi.application"
WSGI_APPLICATION = "controlplane.wsgi.application"

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
                "controlplane.context_processors.console",
            ],
        },
    }
]

DATABASES = {
    "default": env_database(
        "DATABASE_URL",
        "postgres://postgres@127.0.0.1:5432/plinth",
        required=PRODUCTION,
    )
}
# Concurrent test runs on one server (CI, several developers) each name their own test database.
DATABASES["default"]["TEST"] = {"NAME": env_str("PLINTH_TEST_DB_NAME", "test_plinth")}
DATABASES["default"]["CONN_HEALTH_CHECKS"] = True
# Under ASGI (the console/API process, uvicorn) every request runs in a thread of its own, so a
# connection kept for reuse (CONN_MAX_AGE) stays behind with a finished thread until PostgreSQL
# refuses clients; Django's docs say to disable persistent connections there. That process
# (controlplane/asgi.py turns PLINTH_DB_POOL on) borrows from a bounded psycopg pool instead and
# gives the connection back when the request ends; a request that finds all DB_POOL_MAX_SIZE in
# use waits up to DB_POOL_TIMEOUT_S, then gets 503 + Retry-After (controlplane.middleware).
# Workers and beat run one task at a time per process and keep theirs for DB_CONN_MAX_AGE.
DB_POOL = env_bool("PLINTH_DB_POOL", default=False)
DB_POOL_MAX_SIZE = env_int("DB_POOL_MAX_SIZE", 10)
if DB_POOL:
    DATABASES["default"]["CONN_MAX_AGE"] = 0  # the pool keeps them; Django must not
    DATABASES["default"].setdefault("OPTIONS", {})["pool"] = {
        "min_size": 1,
        "max_size": DB_POOL_MAX_SIZE,
        "timeout": env_int("DB_POOL_TIMEOUT_S", 10),
    }
else:
    DATABASES["default"]["CONN_MAX_AGE"] = env_int("DB_CONN_MAX_AGE", 60)
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

REDIS_URL = env_redis_url("REDIS_URL", "redis://127.0.0.1:6379/0", required=PRODUCTION)

CELERY_BROKER_URL = REDIS_URL
CELERY_RESULT_BACKEND = None
CELERY_TASK_ACKS_LATE = True
CELERY_TASK_REJECT_ON_WORKER_LOST = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_TASK_DEFAULT_QUEUE = env_str("CELERY_QUEUE", "plinth")
CELERY_BROKER_TRANSPORT_OPTIONS = {"visibility_timeout": 3600}
# One queue, two priorities (kombu keeps a Redis list per priority step and a worker takes from
# the lowest number first): what a person or the autoscaler asked for, and wake-ups, never wait
# behind the sweep's routine passes or the probes, however many of those are queued. Every
# worker consumes both by consuming the one queue.
PLINTH_URGENT_PRIORITY = 0
PLINTH_ROUTINE_PRIORITY = 9
CELERY_TASK_ROUTES = {
    # Sent by services after a change; the sweep queues its own passes at routine priority.
    "deployments.reconcile_deployment": {"priority": PLINTH_URGENT_PRIORITY},
    "deployments.autoscale": {"priority": PLINTH_URGENT_PRIORITY},
    "deployments.wake_deployment": {"priority": PLINTH_URGENT_PRIORITY},
    "deployments.sweep": {"priority": PLINTH_ROUTINE_PRIORITY},
    "deployments.probe_due": {"priority": PLINTH_ROUTINE_PRIORITY},
    "deployments.probe_deployment": {"priority": PLINTH_ROUTINE_PRIORITY},
    "deployments.purge_samples": {"priority": PLINTH_ROUTINE_PRIORITY},
}
# kombu's Redis transport with a fix that keeps the worker alive across a Redis restart
# (controlplane/broker.py). Naming the transport skips kombu's rediss:// default of not checking
# the server's certificate: say what TLS wants instead (check it).
CELERY_BROKER_TRANSPORT = "controlplane.broker:Transport"
if REDIS_URL.startswith("rediss://"):
    CELERY_BROKER_USE_SSL = {"ssl_cert_reqs": "required"}
# Kept off (Celery 6 turns it on): a running task finishes and acks after the reconnect instead
# of being killed and its message left for the visibility timeout (an hour) to run again.
CELERY_WORKER_CANCEL_LONG_RUNNING_TASKS_ON_CONNECTION_LOSS = False
CELERY_BEAT_SCHEDULE_FILENAME = str(DATA_DIR / "celerybeat-schedule")

CACHES = {
    "default": {
        "BACKEND": "django.core.cache.backends.redis.RedisCache",
        "LOCATION": REDIS_URL,
        "KEY_PREFIX": "plinth",
        # The timeouts every Redis client of Plinth's has (controlplane/redis_clients.py).
        "OPTIONS": redis_clients.command_options(),
    }
}

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
]
LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "home"
LOGOUT_REDIRECT_URL = "login"

SESSION_COOKIE_HTTPONLY = True
SESSION_COOKIE_SECURE = env_bool("SESSION_COOKIE_SECURE", default=PRODUCTION)
CSRF_COOKIE_SECURE = SESSION_COOKIE_SECURE
SECURE_CONTENT_TYPE_NOSNIFF = True
X_FRAME_OPTIONS = "DENY"
# Production is served over HTTPS: browsers are told to use nothing else for a year. Django sends
# the header only on requests it sees as secure; behind a TLS-terminating proxy set
# PLINTH_TRUST_X_FORWARDED_PROTO=true (only if that proxy sets X-Forwarded-Proto itself).
SECURE_HSTS_SECONDS = env_int("SECURE_HSTS_SECONDS", 31_536_000 if PRODUCTION else 0)
SECURE_HSTS_INCLUDE_SUBDOMAINS = env_bool("SECURE_HSTS_INCLUDE_SUBDOMAINS", default=False)
if env_bool("PLINTH_TRUST_X_FORWARDED_PROTO", default=False):
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")

# Content-Security-Policy (django-csp): scripts, styles and everything else from this origin
# only; no inline script, inline style or eval. Console behaviour lives in static/js/console.js.
CONTENT_SECURITY_POLICY = {
    "DIRECTIVES": {
        "default-src": [SELF],
        "script-src": [SELF],
        "style-src": [SELF],
        "img-src": [SELF, "data:"],  # the API docs' icons are data: URIs
        "font-src": [SELF],
        "connect-src": [SELF],
        "object-src": [NONE],
        "base-uri": [NONE],
        "form-action": [SELF],
        "frame-ancestors": [NONE],
    }
}

# Sign-in throttling (django-axes): after PLINTH_LOGIN_FAILURE_LIMIT wrong passwords for one
# username from one address, that pair is locked out for PLINTH_LOGIN_LOCKOUT_MINUTES (429),
# even with the right password. Keyed by both, so nobody can lock a user out from elsewhere.
AUTHENTICATION_BACKENDS = [
    "axes.backends.AxesStandaloneBackend",
    "django.contrib.auth.backends.ModelBackend",
]
AXES_FAILURE_LIMIT = env_int("PLINTH_LOGIN_FAILURE_LIMIT", 5)
AXES_COOLOFF_TIME = timedelta(minutes=env_int("PLINTH_LOGIN_LOCKOUT_MINUTES", 15))
AXES_LOCKOUT_PARAMETERS = [["username", "ip_address"]]
AXES_RESET_ON_SUCCESS = True
AXES_LOCKOUT_CALLABLE = "controlplane.signin.locked_out"  # 429, Retry-After, plain words

# Single sign-on with OpenID Connect (controlplane/sso.py): on when PLINTH_OIDC_ISSUER is set.
# The console signs people in at the identity provider (authorization code with PKCE), makes
# their account on first sign-in, and at every sign-in sets their memberships in the
# organizations PLINTH_OIDC_GROUP_ROLES names from their groups (a JSON object, group ->
# "org-slug:role" or a list of them; controlplane/sso_mapping.py). The client secret comes from
# the environment or a mounted file (PLINTH_OIDC_CLIENT_SECRET_FILE), never a command line.
# Password sign-in is off while single sign-on is on unless PLINTH_PASSWORD_SIGN_IN=true.
PLINTH_OIDC_ISSUER = env_str("PLINTH_OIDC_ISSUER", "")
SSO_ENABLED = bool(PLINTH_OIDC_ISSUER)
PLINTH_OIDC_CLIENT_ID = env_str("PLINTH_OIDC_CLIENT_ID", "", required=SSO_ENABLED)
PLINTH_OIDC_CLIENT_SECRET = env_str("PLINTH_OIDC_CLIENT_SECRET", "", required=SSO_ENABLED)
PLINTH_OIDC_SCOPES = env_str("PLINTH_OIDC_SCOPES", "openid email profile")
PLINTH_OIDC_GROUPS_CLAIM = env_str("PLINTH_OIDC_GROUPS_CLAIM", "groups")
PLINTH_OIDC_USERNAME_CLAIM = env_str("PLINTH_OIDC_USERNAME_CLAIM", "preferred_username")
PLINTH_OIDC_PROVIDER_NAME = env_str("PLINTH_OIDC_PROVIDER_NAME", "your identity provider")
# How long a console session begun by single sign-on lasts: a person removed at the identity
# provider keeps the console no longer than this (the next sign-in asks the provider again).
PLINTH_OIDC_SESSION_HOURS = env_int("PLINTH_OIDC_SESSION_HOURS", 12)
try:
    PLINTH_OIDC_GROUP_ROLES = parse_group_map(env_str("PLINTH_OIDC_GROUP_ROLES", ""))
except GroupMapError as exc:
    raise ImproperlyConfigured(f"PLINTH_OIDC_GROUP_ROLES {exc}") from exc
if SSO_ENABLED and "openid" not in PLINTH_OIDC_SCOPES.split():
    raise ImproperlyConfigured("PLINTH_OIDC_SCOPES must include openid")
if PRODUCTION and SSO_ENABLED and not PLINTH_OIDC_ISSUER.startswith("https://"):
    raise ImproperlyConfigured("PLINTH_OIDC_ISSUER must be an https:// URL in production")
PLINTH_PASSWORD_SIGN_IN = env_bool("PLINTH_PASSWORD_SIGN_IN", default=not SSO_ENABLED)
if SSO_ENABLED:
    # Signing out sends the sign-out form's answer on to the provider's end-session endpoint,
    # and browsers hold a form's redirects to the form-action policy too.
    _issuer = urlsplit(PLINTH_OIDC_ISSUER)
    CONTENT_SECURITY_POLICY["DIRECTIVES"]["form-action"].append(
        f"{_issuer.scheme}://{_issuer.netloc}"
    )

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = False
USE_TZ = True

STATIC_URL = "/static/"
STATICFILES_DIRS = [BASE_DIR / "static"]
STATIC_ROOT = DATA_DIR / "staticfiles"
WHITENOISE_USE_FINDERS = True
# Development serves static files straight from the source folders, DEBUG or not (`make run`
# has no collectstatic step); production serves the collected, unchanging set.
WHITENOISE_AUTOREFRESH = not PRODUCTION

DATA_UPLOAD_MAX_MEMORY_SIZE = env_int("DATA_UPLOAD_MAX_MEMORY_SIZE", 1024 * 1024)
# /metrics (controlplane/metrics.py) counts endpoints and queues of every organization: with a
# token set, only requests bearing it may read it; without, only clients on this machine.
PLINTH_METRICS_TOKEN = env_str("PLINTH_METRICS_TOKEN", "")
# Requests per minute each management key (or console user) may make to /api/v1 (issue 5).
PLINTH_API_RATE_LIMIT = env_int("PLINTH_API_RATE_LIMIT", 1200)

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s %(message)s"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain"}},
    "root": {"handlers": ["console"], "level": env_str("LOG_LEVEL", "INFO")},
    "loggers": {
        "django.db.backends": {"level": "WARNING"},
        "httpx": {"level": "WARNING"},
        # Single sign-on's client logs the PKCE code verifier at DEBUG: never, whatever LOG_LEVEL.
        "authlib": {"level": "INFO"},
    },
}

# Where local-cluster endpoints keep pid files and logs.
PLINTH_LOCAL_RUN_DIR = Path(env_str("PLINTH_LOCAL_RUN_DIR", str(DATA_DIR / "local")))
# The deployment engine (deployments/endpoints/reconcile.py and tasks.py). The local cluster's
# engine is the simulator ("sim") or the plan's own SGLang command ("sglang"); simulator options
# such as PLINTH_SIM_TIME_SCALE pass to engines through the environment.
PLINTH_LOCAL_ENGINE = env_str("PLINTH_LOCAL_ENGINE", "sim")
# The tools environment (deployments/drivers/local/tools_env.py): NVIDIA AIPerf in a virtualenv of
# its own, created on first use, for benchmarks on the local cluster.
PLINTH_TOOLS_DIR = Path(env_str("PLINTH_TOOLS_DIR", str(DATA_DIR / "tools")))
# The image Kubernetes benchmark Jobs run AIPerf from (``aiperf`` on its PATH, nothing installed)
# where a cluster's settings name none: a mirror of Plinth's in an air-gapped cluster's registry.
# Empty: Plinth's own (deployments/aiperf.py AIPERF_IMAGE, built from
# docker/aiperf).
PLINTH_BENCHMARK_IMAGE = env_str("PLINTH_BENCHMARK_IMAGE", "")
# Quantization (deployments/quantization): where the local cluster's model cache is (what
# engines load a runtime.spec.MODEL_CACHE_PATH path from, and where the tool writes its
# checkpoints); the tool environment's Python ("": scripts/quantize_env.sh builds and names it);
# the image Kubernetes quantization Jobs run ("": Plinth's, deployments/drivers/kube/render/
# quantize.py QUANTIZE_IMAGE).
PLINTH_MODEL_CACHE_DIR = Path(env_str("PLINTH_MODEL_CACHE_DIR", str(DATA_DIR / "model-cache")))
PLINTH_QUANTIZE_PYTHON = env_str("PLINTH_QUANTIZE_PYTHON", "")
PLINTH_QUANTIZE_IMAGE = env_str("PLINTH_QUANTIZE_IMAGE", "")
PLINTH_LOCAL_STOP_GRACE_S = env_int("PLINTH_LOCAL_STOP_GRACE_S", 10)
PLINTH_LOCAL_ROUTER_HEALTH_CHECK_S = env_int("PLINTH_LOCAL_ROUTER_HEALTH_CHECK_S", 2)
# Kubeconfigs may name plain-http API servers (an emulator, kubectl proxy). Off: https only.
PLINTH_KUBE_ALLOW_HTTP = env_bool("PLINTH_KUBE_ALLOW_HTTP", default=False)
# A kubeconfig's servers are addresses the worker calls for a tenant
# (deployments/drivers/kube/egress.py): loopback, link-local and metadata addresses are refused,
# private ranges unless allowed here, and hosts, addresses or networks (CIDR) listed in
# PLINTH_KUBE_ALLOW_HOSTS are allowed anyway.
PLINTH_KUBE_ALLOW_PRIVATE = env_bool("PLINTH_KUBE_ALLOW_PRIVATE", default=False)
PLINTH_KUBE_ALLOW_HOSTS = env_list("PLINTH_KUBE_ALLOW_HOSTS", [], required=False)
# insecure-skip-tls-verify and proxy-url in a tenant's kubeconfig: refused unless allowed.
PLINTH_KUBE_ALLOW_INSECURE_TLS = env_bool("PLINTH_KUBE_ALLOW_INSECURE_TLS", default=False)
PLINTH_KUBE_ALLOW_PROXY = env_bool("PLINTH_KUBE_ALLOW_PROXY", default=False)
PLINTH_STARTUP_WINDOW_S = env_int("PLINTH_STARTUP_WINDOW_S", 0)  # 0: from the startup probe
PLINTH_RECONCILE_INTERVAL_S = env_int("PLINTH_RECONCILE_INTERVAL_S", 2)  # while not settled
# The operator's price list for the cost report (``deployments.costs.report``): JSON, GPU
# catalogue id -> USD per GPU-hour, e.g. {"H100-SXM": 2.1}; a GPU it leaves out is priced at the
# catalogue's figure. Each cluster's ``gpu_price_factor`` multiplies it.


def _gpu_prices(raw: str) -> dict[str, float]:
    wrong = ImproperlyConfigured(
        "PLINTH_GPU_PRICES must be a JSON object of GPU id -> USD per GPU-hour (a number, 0 or "
        'more), e.g. {"H100-SXM": 2.1}'
    )
    try:
        prices = json.loads(raw)
    except ValueError as exc:
        raise wrong from exc
    if not isinstance(prices, dict) or not all(
        isinstance(p, int | float) and not isinstance(p, bool) and p >= 0 for p in prices.values()
    ):
        raise wrong
    return {str(gpu): float(price) for gpu, price in prices.items()}


PLINTH_GPU_PRICES = _gpu_prices(env_str("PLINTH_GPU_PRICES", "{}"))
PLINTH_SETTLED_RECONCILE_S = env_int("PLINTH_SETTLED_RECONCILE_S", 10)
PLINTH_RECONCILE_LOCK_S = env_int("PLINTH_RECONCILE_LOCK_S", 60)
# A reconcile task still running after this many seconds is interrupted (its lock released, the
# endpoint retried); it must end before its lock can expire and another worker take over.
PLINTH_RECONCILE_TIME_LIMIT_S = env_int(
    "PLINTH_RECONCILE_TIME_LIMIT_S", PLINTH_RECONCILE_LOCK_S * 3 // 4
)
if not 1 <= PLINTH_RECONCILE_TIME_LIMIT_S < PLINTH_RECONCILE_LOCK_S:
    from django.core.exceptions import ImproperlyConfigured

    raise ImproperlyConfigured(
        "PLINTH_RECONCILE_TIME_LIMIT_S must be at least 1 and below PLINTH_RECONCILE_LOCK_S"
    )
PLINTH_SWEEP_INTERVAL_S = env_int("PLINTH_SWEEP_INTERVAL_S", 2)
PLINTH_SWEEP_LEASE_S = env_int("PLINTH_SWEEP_LEASE_S", 30)
PLINTH_PROBE_INTERVAL_S = env_int("PLINTH_PROBE_INTERVAL_S", 15)
PLINTH_METRICS_RETENTION_HOURS = env_int("PLINTH_METRICS_RETENTION_HOURS", 24 * 7)
# The autoscaler (deployments/autoscaling/): how often beat runs a pass over running endpoints.
PLINTH_AUTOSCALE_INTERVAL_S = env_int("PLINTH_AUTOSCALE_INTERVAL_S", 15)
if PLINTH_AUTOSCALE_INTERVAL_S < 1:
    from django.core.exceptions import ImproperlyConfigured

    raise ImproperlyConfigured("PLINTH_AUTOSCALE_INTERVAL_S must be at least 1 (seconds)")
# Seconds between the canary watcher's passes (automatic abort of regressing canaries).
PLINTH_CANARY_WATCH_INTERVAL_S = env_int("PLINTH_CANARY_WATCH_INTERVAL_S", 15)
if PLINTH_CANARY_WATCH_INTERVAL_S < 1:
    from django.core.exceptions import ImproperlyConfigured

    raise ImproperlyConfigured("PLINTH_CANARY_WATCH_INTERVAL_S must be at least 1 (seconds)")
# Seconds between looks at each Kubernetes cluster's GPU nodes (two LISTs per cluster).
PLINTH_INVENTORY_INTERVAL_S = env_int("PLINTH_INVENTORY_INTERVAL_S", 60)
if PLINTH_INVENTORY_INTERVAL_S < 1:
    raise ImproperlyConfigured("PLINTH_INVENTORY_INTERVAL_S must be at least 1 (seconds)")
# A fleet's clusters (deployments/fleet/health.py): how often each Kubernetes cluster's API
# server is asked for its GPU nodes, how long it may fail before its replicas are re-planned
# elsewhere (the grace period), and how long it must answer again before they move back
# (hysteresis: a cluster that flaps does not drag replicas back and forth).
PLINTH_CLUSTER_CHECK_INTERVAL_S = env_int("PLINTH_CLUSTER_CHECK_INTERVAL_S", 5)
PLINTH_CLUSTER_LOST_AFTER_S = env_int("PLINTH_CLUSTER_LOST_AFTER_S", 15)
PLINTH_CLUSTER_RETURN_AFTER_S = env_int("PLINTH_CLUSTER_RETURN_AFTER_S", 120)
if PLINTH_CLUSTER_CHECK_INTERVAL_S < 1:
    raise ImproperlyConfigured("PLINTH_CLUSTER_CHECK_INTERVAL_S must be at least 1 (seconds)")
# How often beat moves the gateway's usage counters and keys' last-used times from Redis to the
# database. Fixed: the README's promise (usage shows within about 80 s) rests on it.
PLINTH_USAGE_FLUSH_S = 15
# Everything beat runs, in one place (tasks are sent by name; each package's tasks.py defines them).
CELERY_BEAT_SCHEDULE = {
    "deployments.sweep": {
        "task": "deployments.sweep",
        "schedule": float(PLINTH_SWEEP_INTERVAL_S),
    },
    "deployments.probe_due": {
        "task": "deployments.probe_due",
        "schedule": float(PLINTH_PROBE_INTERVAL_S),
    },
    "deployments.purge_samples": {"task": "deployments.purge_samples", "schedule": 3600.0},
    "deployments.observe_clusters": {
        "task": "deployments.observe_clusters",
        "schedule": float(PLINTH_INVENTORY_INTERVAL_S),
        "options": {"expires": float(PLINTH_INVENTORY_INTERVAL_S)},
    },
    "deployments.check_clusters": {
        "task": "deployments.check_clusters",
        "schedule": float(PLINTH_CLUSTER_CHECK_INTERVAL_S),
        "options": {"expires": float(PLINTH_CLUSTER_CHECK_INTERVAL_S)},
    },
    "deployments.autoscale": {
        "task": "deployments.autoscale",
        "schedule": float(PLINTH_AUTOSCALE_INTERVAL_S),
        # A pass still queued when the next is due has nothing to add: drop it.
        "options": {"expires": float(PLINTH_AUTOSCALE_INTERVAL_S)},
    },
    "deployments.flush_usage": {
        "task": "deployments.flush_usage",
        "schedule": float(PLINTH_USAGE_FLUSH_S),
    },
    "deployments.watch_canaries": {
        "task": "deployments.watch_canaries",
        "schedule": float(PLINTH_CANARY_WATCH_INTERVAL_S),
        "options": {"expires": float(PLINTH_CANARY_WATCH_INTERVAL_S)},
    },
    "deployments.resume_quantizations": {
        "task": "deployments.resume_quantizations",
        "schedule": 60.0,
        "options": {"expires": 60.0},
    },
    "deployments.purge_calibration_sets": {
        "task": "deployments.purge_calibration_sets",
        "schedule": 3600.0,
    },
    "deployments.flush_key_last_used": {
        "task": "deployments.flush_key_last_used",
        "schedule": float(PLINTH_USAGE_FLUSH_S),
    },
}

# Where the console playground sends chat calls: "gateway" (metered like any call) or
# "router" (the endpoint's router directly, for installations without a gateway process).
PLINTH_PLAYGROUND_UPSTREAM = env_str("PLINTH_PLAYGROUND_UPSTREAM", "gateway")

os.environ.setdefault("HF_HUB_OFFLINE", "1")

if PLINTH_ENV == "test":
    # Test users are created by the hundred; a deliberately slow hasher only slows the suite.
    PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
