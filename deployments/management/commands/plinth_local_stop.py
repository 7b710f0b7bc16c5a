"""Stop every process of the local cluster (engines and routers), leaving desired state alone.

``make run`` calls it on Ctrl-C after stopping the worker, so nothing it started keeps running;
the next ``make run`` reconciles the endpoints back up. The endpoints' observed facts are updated
to say so (nothing ready, no router), so their status follows what runs until then instead of
staying active while the gateway has nothing to send requests to.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand
from django.db import DatabaseError

from deployments.clusters.models import ClusterKind
from deployments.drivers.local.processes import stop_all
from deployments.endpoints.stopped import record_cluster_stopped


class Command(BaseCommand):
    help = "Stop the local cluster's engine and router processes (they restart on the next run)."

    def handle(self, *args: Any, **options: Any) -> None:
        stopped = stop_all(settings.PLINTH_LOCAL_RUN_DIR, settings.PLINTH_LOCAL_STOP_GRACE_S)
        if stopped:
            self.stdout.write(f"stopped {stopped} local-cluster process(es)")
        try:
            record_cluster_stopped(ClusterKind.LOCAL)
        except DatabaseError as exc:
            # The processes are stopped, which is what matters at shutdown; the next worker
            # start re-observes every local endpoint anyway.
            self.stderr.write(f"could not record the stop in the database: {exc}")
