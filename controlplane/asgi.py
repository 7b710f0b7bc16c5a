"""ASGI entry point of the console and management API (served by uvicorn)."""

from __future__ import annotations

import os

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "controlplane.settings")
# Each request runs in a thread of its own here: database connections come from a bounded
# pool and go back after every request, never kept with a finished thread (settings.py).
os.environ.setdefault("PLINTH_DB_POOL", "true")

application = get_asgi_application()
