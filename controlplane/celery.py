"""The Celery application: tasks are discovered in each app's ``tasks`` module."""

from __future__ import annotations

import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "controlplane.settings")

app = Celery("plinth")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()
