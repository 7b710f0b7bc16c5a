"""App configuration for the platform-wide models."""

from __future__ import annotations

from django.apps import AppConfig


class ControlplaneConfig(AppConfig):
    name = "controlplane"
    verbose_name = "Plinth platform"
