"""Plinth's Django project package and platform-wide concerns.

Named ``controlplane`` rather than ``platform`` because a package called ``platform`` would
shadow the standard library module that ``uuid`` (and so Django) imports.
"""

from __future__ import annotations

from controlplane.celery import app as celery_app

__all__ = ["celery_app"]
