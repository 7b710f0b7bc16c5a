"""App configuration for the deployments domain."""

from __future__ import annotations

from django.apps import AppConfig


class DeploymentsConfig(AppConfig):
    name = "deployments"
    verbose_name = "Endpoints"
