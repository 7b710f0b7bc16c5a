"""Plinth's one settings file, driven by the environment.

Every value comes from an environment variable (or, for secrets, from a file named by
``NAME_FILE``, as Kubernetes mounts them). In production mode (``PLINTH_ENV=production``) a
missing or malformed required value stops start-up with a message naming the variable; in
development the same variables fall back to local defaults so ``make run`` needs no set-up.
"""

from __future__ import annotations

import os
from pathlib import Path

from controlplane.env import (
    env_bool,
    env_database,
    env_fernet_key,
    env_int,
    env_list,
    env_redis_url,
    env_str,
)

BASE_DIR = Path(__file__).resolve().parent.parent
DATA_DIR = Path(env_str("PLINTH_DATA_DIR", str(BASE_DIR / "data")))

PLINTH_ENV = env_str("PLINTH_ENV", "development")
if PLINTH_ENV not in {"development", "production", "test"}:
    from django.core.exceptions import ImproperlyConfigured

    raise ImproperlyConfigured("PLINTH_ENV must be one of development, production, test")
PRODUCTION = PLINTH_ENV == "production"

DEBUG = env_bool("DEBUG", default=not PRODUCTION)
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
    "controlplane",
    "deployments",
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
    "django_htmx.middleware.HtmxMiddleware",
    "controlplane.middleware.CurrentOrganizationMiddleware",
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
DATABASES["default"]["CONN_MAX_AGE"] = env_int("DB_CONN_MAX_AGE", 60)
DATABASES["default"]["CONN_HEALTH_CHECKS"] = True
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

REDIS_URL = env_redis_url("REDIS_URL", "redis://127.0.0.1:6379/0", required=PRODUCTION)

CELERY_BROKER_URL = REDIS_URL
CELERY_RESULT_BACKEND = None
CELERY_TASK_ACKS_LATE = True
CELERY_TASK_REJECT_ON_WORKER_LOST = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_TASK_DEFAULT_QUEUE = env_str("CELERY_QUEUE", "plinth")
CELERY_BROKER_TRANSPORT_OPTIONS = {"visibility_timeout": 3600}
CELERY_BEAT_SCHEDULE_FILENAME = str(DATA_DIR / "celerybeat-schedule")

CACHES = {
    "default": {
        "BACKEND": "django.core.cache.backends.redis.RedisCache",
        "LOCATION": REDIS_URL,
        "KEY_PREFIX": "plinth",
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

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = False
USE_TZ = True

STATIC_URL = "/static/"
STATICFILES_DIRS = [BASE_DIR / "static"]
STATIC_ROOT = DATA_DIR / "staticfiles"
WHITENOISE_USE_FINDERS = True
WHITENOISE_AUTOREFRESH = DEBUG

DATA_UPLOAD_MAX_MEMORY_SIZE = env_int("DATA_UPLOAD_MAX_MEMORY_SIZE", 1024 * 1024)
# Requests per minute each management key (or console user) may make to /api/v1 (issue 5).
PLINTH_API_RATE_LIMIT = env_int("PLINTH_API_RATE_LIMIT", 1200)

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s %(message)s"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain"}},
    "root": {"handlers": ["console"], "level": env_str("LOG_LEVEL", "INFO")},
    "loggers": {"django.db.backends": {"level": "WARNING"}, "httpx": {"level": "WARNING"}},
}

# Where local-cluster endpoints keep pid files and logs.
PLINTH_LOCAL_RUN_DIR = Path(env_str("PLINTH_LOCAL_RUN_DIR", str(DATA_DIR / "local")))
# The deployment engine (deployments/reconcile.py, tasks/engine.py). The local cluster's engine
# is the simulator ("sim") or the plan's own SGLang command ("sglang"); simulator options such as
# PLINTH_SIM_TIME_SCALE pass to engines through the environment.
PLINTH_LOCAL_ENGINE = env_str("PLINTH_LOCAL_ENGINE", "sim")
PLINTH_LOCAL_STOP_GRACE_S = env_int("PLINTH_LOCAL_STOP_GRACE_S", 10)
PLINTH_LOCAL_ROUTER_HEALTH_CHECK_S = env_int("PLINTH_LOCAL_ROUTER_HEALTH_CHECK_S", 2)
# Kubeconfigs may name plain-http API servers (an emulator, kubectl proxy). Off: https only.
PLINTH_KUBE_ALLOW_HTTP = env_bool("PLINTH_KUBE_ALLOW_HTTP", default=False)
PLINTH_STARTUP_WINDOW_S = env_int("PLINTH_STARTUP_WINDOW_S", 0)  # 0: from the startup probe
PLINTH_RECONCILE_INTERVAL_S = env_int("PLINTH_RECONCILE_INTERVAL_S", 2)  # while not settled
PLINTH_SETTLED_RECONCILE_S = env_int("PLINTH_SETTLED_RECONCILE_S", 10)
PLINTH_RECONCILE_LOCK_S = env_int("PLINTH_RECONCILE_LOCK_S", 60)
PLINTH_SWEEP_INTERVAL_S = env_int("PLINTH_SWEEP_INTERVAL_S", 2)
PLINTH_SWEEP_LEASE_S = env_int("PLINTH_SWEEP_LEASE_S", 30)
PLINTH_PROBE_INTERVAL_S = env_int("PLINTH_PROBE_INTERVAL_S", 15)
PLINTH_METRICS_RETENTION_HOURS = env_int("PLINTH_METRICS_RETENTION_HOURS", 24 * 7)
# The autoscaler (deployments/autoscale.py): how often beat runs a pass over running endpoints.
PLINTH_AUTOSCALE_INTERVAL_S = env_int("PLINTH_AUTOSCALE_INTERVAL_S", 15)
if PLINTH_AUTOSCALE_INTERVAL_S < 1:
    from django.core.exceptions import ImproperlyConfigured

    raise ImproperlyConfigured("PLINTH_AUTOSCALE_INTERVAL_S must be at least 1 (seconds)")
# Task modules merge their own entries into this (deployments/tasks/engine.py, traffic.py).
CELERY_BEAT_SCHEDULE = {
    "deployments.autoscale": {
        "task": "deployments.autoscale",
        "schedule": float(PLINTH_AUTOSCALE_INTERVAL_S),
        # A pass still queued when the next is due has nothing to add: drop it.
        "options": {"expires": float(PLINTH_AUTOSCALE_INTERVAL_S)},
    },
}

# Where the console playground sends chat calls: "gateway" (metered like any call) or
# "router" (the endpoint's router directly, for installations without a gateway process).
PLINTH_PLAYGROUND_UPSTREAM = env_str("PLINTH_PLAYGROUND_UPSTREAM", "gateway")

os.environ.setdefault("HF_HUB_OFFLINE", "1")

if PLINTH_ENV == "test":
    # Test users are created by the hundred; a deliberately slow hasher only slows the suite.
    PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
