"""The Celery app of the scale-from-zero test's worker: Plinth's own, with reconcile routed away.

The worker runs the real ``deployments.wake_deployment`` task. The reconcile that waking queues
goes to a queue nobody consumes, because in this test the test itself records what reconcile
would observe (``mark_serving``) and a real reconcile must not race it.
"""

from __future__ import annotations

from controlplane.celery import app

app.conf.task_routes = {"deployments.reconcile_deployment": {"queue": "gateway-test-unconsumed"}}

__all__ = ["app"]
