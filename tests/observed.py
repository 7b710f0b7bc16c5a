"""A stand-in for a reconcile pass in tests that need an endpoint in a given observed state
without running engines: it writes the facts a pass records (replicas per revision, the
serving and applied revisions, the generation acted on), and nothing else."""

from __future__ import annotations

from django.db.models import F
from django.utils import timezone

from deployments.endpoints.models import Deployment


def observe(
    deployment: Deployment,
    *,
    serving: int | None,
    applied: int | None = None,
    ready: dict[int, int] | None = None,
    starting: dict[int, int] | None = None,
) -> Deployment:
    """Record a pass that saw ``ready``/``starting`` engine replicas per revision number, with
    ``serving`` the current revision and ``applied`` (default: the target) the one it placed."""
    revisions = {r.number: r for r in deployment.revisions.all()}
    target = Deployment.objects.get(pk=deployment.pk).target_revision
    assert target is not None
    placed = revisions[applied] if applied is not None else target
    replicas = [
        _replica(number, index, ready=True) for number, n in (ready or {}).items()
        for index in range(n)
    ] + [
        _replica(number, 100 + index, ready=False) for number, n in (starting or {}).items()
        for index in range(n)
    ]  # fmt: skip
    now = timezone.now()
    Deployment.objects.filter(pk=deployment.pk).update(
        applied_revision=placed,
        current_revision=revisions[serving] if serving is not None else None,
        ready_replicas=sum(1 for r in replicas if r["ready"]),
        total_replicas=len(replicas),
        replica_facts=replicas,
        first_ready_at=now if serving is not None else None,
        observed_at=now,
        observed_generation=F("generation"),
    )
    return Deployment.objects.get(pk=deployment.pk)


def _replica(revision: int, index: int, *, ready: bool) -> dict[str, object]:
    return {
        "name": f"r{revision}-engine-{index}",
        "revision": revision,
        "role": "engine",
        "phase": "ready" if ready else "loading",
        "ready": ready,
        "restarts": 0,
        "reason": "",
        "message": "",
        "url": f"http://127.0.0.1:{20000 + revision * 100 + index}",
    }
