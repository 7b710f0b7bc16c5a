"""Stop every process of the local cluster (engines and routers), leaving desired state alone.

``make run`` calls it on Ctrl-C after stopping the worker, so nothing it started keeps running;
the next ``make run`` reconciles the endpoints back up.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand

from deployments.drivers.local.processes import stop_all


class Command(BaseCommand):
    help = "Stop the local cluster's engine and router processes (they restart on the next run)."

    def handle(self, *args: Any, **options: Any) -> None:
        stopped = stop_all(settings.PLINTH_LOCAL_RUN_DIR, settings.PLINTH_LOCAL_STOP_GRACE_S)
        if stopped:
            self.stdout.write(f"stopped {stopped} local-cluster process(es)")
