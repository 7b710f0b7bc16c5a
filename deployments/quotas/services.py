"""Per-organization quotas: what an organization may ask for, and the one check every writer
of replicas calls before asking for more.

Quotas (``models.Quota``, set by instance admins only: Django staff, through ``set_quota`` from
the API, the console or the Django admin) limit GPUs by type and in total, endpoints, and
replicas per endpoint. A null limit is no limit.

What counts: each endpoint that is asked to run (``desired_state`` running) counts its
*desired* replicas of its target revision x the GPUs per replica, by the spec's GPU type; a
prefill/decode split counts each pool (its settings' size, or the autoscaler's where it scaled
the pool) while it is asked to run any replica.
A quantization run (``deployments.quantization``) counts its GPUs by type while it is queued or
running, and is refused at start where they do not fit or where the organization's runs have
used this month's ``quantization_gpu_hours`` (``check_gpus``); a run that is going is never
stopped by it.
Stopped endpoints count no GPUs but still count as endpoints; endpoints being deleted count
nothing. The quota is enforced at the moment replicas are asked for: create (the initial
replicas), edit and rollback (the new settings, with the replicas they clamp to), scale,
start, the gateway's wake from zero, and the autoscaler, which stops at the quota and records
why (``headroom``). Canaries (not built yet) are to call ``check_canary`` for their extra
replicas. Autoscaling bounds (``max_replicas``) are not charged up front: a spec may
allow more than the quota, it just cannot get there.

A change is refused only when it *adds* to a quota that it would leave exceeded: lowering a
quota below what runs stops nothing, and scaling down or stopping an endpoint is always
allowed, so an organization over its quota can always get back under it.

Every check locks the organization's quota row first (``SELECT ... FOR UPDATE`` in the
writer's transaction), so two writers racing count one after the other. An organization
without a row has no limits and takes no lock.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass
from typing import Any

from django.db import transaction
from django.utils import timezone

from controlplane import audit
from controlplane.access import AccessDenied, Actor
from controlplane.models import Organization, Role
from controlplane.services import Conflict, ServiceError
from deployments.endpoints.models import Deployment, DesiredState
from deployments.quantization.queries import gpu_hours_this_month, running_gpus
from deployments.quotas.models import Quota
from runtime.catalog import UnknownGpuError, get_gpu, gpu_ids

__all__ = [
    "Demand",
    "QuotaExceeded",
    "check",
    "check_canary",
    "check_gpus",
    "demand_of",
    "headroom",
    "limits_of",
    "require_instance_admin",
    "set_quota",
    "usage",
]

FIX = (
    "scale down or stop other endpoints of your organization, or ask an instance admin to "
    "raise the quota"
)


class QuotaExceeded(Conflict):
    """A change that would take the organization past one of its quotas (409).

    ``quota`` names it as the API does (``gpus``, ``gpus.H100-SXM``, ``endpoints``,
    ``replicas_per_endpoint``); ``limit``, ``in_use`` (by the rest of the organization) and
    ``requested`` (by this change) say by how much.
    """

    code = "quota_exceeded"
    fix = FIX

    def __init__(self, quota: str, *, limit: int, in_use: int, requested: int, field: str):
        self.quota, self.limit, self.in_use, self.requested = quota, limit, in_use, requested
        over = in_use + requested - limit
        super().__init__(
            f"quota {quota} exceeded: limit {limit}, in use {in_use}, requested {requested} "
            f"({over} over)",
            field=field,
            code=self.code,
        )

    @property
    def detail(self) -> str:
        return self.message


@dataclass(frozen=True)
class Demand:
    """What one endpoint asks for: GPUs by type and its replica count (all pools)."""

    gpu: str
    gpus: int
    replicas: int


def demand_of(
    spec: dict[str, Any],
    replicas: int,
    desired_state: str = "running",
    pools: dict[str, int] | None = None,
) -> Demand:
    """What an endpoint with these stored settings asks for at ``replicas`` desired replicas;
    ``pools``: a split endpoint's pool sizes where the autoscaler changed them."""
    gpu = str((spec.get("hardware") or {}).get("gpu", "?"))
    if desired_state != DesiredState.RUNNING or replicas <= 0:
        return Demand(gpu, 0, 0)
    parallel = spec.get("parallelism") or {}
    tp, pp = int(parallel.get("tp", 1)), int(parallel.get("pp", 1))
    split = spec.get("disaggregation") or {}
    if split.get("enabled"):
        groups = [split.get(role) or {} for role in ("prefill", "decode")]
        scaled = pools or {}
        sizes = [
            int(scaled.get(role, pool.get("replicas", 1)))
            for role, pool in zip(("prefill", "decode"), groups, strict=True)
        ]
        gpus = sum(
            size * int(pool.get("tp") or tp) * pp for size, pool in zip(sizes, groups, strict=True)
        )
        return Demand(gpu, gpus, sum(sizes))
    per_replica = int((spec.get("hardware") or {}).get("gpus_per_replica") or tp * pp)
    return Demand(gpu, per_replica * replicas, replicas)


@dataclass(frozen=True)
class _InUse:
    gpus_by_type: Counter[str]
    endpoints: int
    largest: int = 0  # the most replicas one endpoint asks for

    @property
    def gpus(self) -> int:
        return sum(self.gpus_by_type.values())


# The parts of a stored spec that decide its demand, read by key in SQL: a whole spec is kilobytes
# of JSON, and decoding a thousand of them made every page that shows quotas slow.
_DEMAND_KEYS = ("hardware", "parallelism", "disaggregation")


def _in_use(organization: Organization, excluding: Deployment | None = None) -> _InUse:
    """What the organization's endpoints ask for, ``excluding`` one (the one being changed).

    Only endpoints asked to run replicas ask for GPUs (``demand_of``), so only theirs are read;
    the rest are counted in SQL. Two queries, whatever the number of endpoints.
    """
    live = Deployment.objects.filter(organization=organization).exclude(
        desired_state=DesiredState.DELETED
    )
    if excluding is not None:
        live = live.exclude(pk=excluding.pk)
    rows = live.filter(desired_state=DesiredState.RUNNING, desired_replicas__gt=0).values_list(
        "desired_state", "desired_replicas", "target_revision__number", "pool_replicas",
        *(f"target_revision__spec__{key}" for key in _DEMAND_KEYS),
    )  # fmt: skip
    by_type: Counter[str] = Counter()
    largest = 0
    for state, replicas, number, scaled, *parts in rows:
        spec = {key: part for key, part in zip(_DEMAND_KEYS, parts, strict=True) if part}
        demand = demand_of(spec, replicas, state, _scaled_pools(scaled, number))
        by_type[demand.gpu] += demand.gpus
        largest = max(largest, demand.replicas)
    for gpu, gpus in running_gpus(organization.pk):  # quantization runs hold GPUs too
        by_type[gpu] += gpus
    return _InUse(by_type, live.count(), largest)


def _scaled_pools(scaled: dict[str, Any] | None, revision: int | None) -> dict[str, int]:
    """The autoscaler's pool sizes (``Deployment.pool_replicas``) where they are the target
    revision's (``Deployment.pool_sizes`` is the same rule on a loaded row)."""
    if not scaled or scaled.get("revision") != revision:
        return {}
    return {role: int(scaled[role]) for role in ("prefill", "decode") if role in scaled}


def _locked_quota(organization: Organization) -> Quota | None:
    # Must run inside the writer's transaction: the lock is held until it commits.
    return Quota.objects.select_for_update().filter(organization=organization).first()


def check(
    organization: Organization,
    *,
    deployment: Deployment | None,
    spec: dict[str, Any],
    replicas: int,
    field: str = "replicas",
    desired_state: str = DesiredState.RUNNING,
    new_endpoint: bool = True,
) -> None:
    """Raise :class:`QuotaExceeded` when asking ``spec`` at ``replicas`` breaks a quota.

    ``deployment`` is the endpoint being changed (None for a new one, which also counts
    against ``endpoints`` unless ``new_endpoint`` is False: a canary's extra replicas, see
    ``check_canary``); what it asks for now is replaced by the new ask, and a quota is only
    enforced where the new ask adds to it. ``field`` names the input at fault.
    """
    quota = _locked_quota(organization)
    if quota is None:
        return
    new = demand_of(spec, replicas, desired_state)
    old = (
        Demand(new.gpu, 0, 0)
        if deployment is None or deployment.target_revision is None
        else demand_of(
            deployment.target_revision.spec,
            deployment.desired_replicas,
            deployment.desired_state,
            _scaled_pools(deployment.pool_replicas, deployment.target_revision.number),
        )
    )
    others = _in_use(organization, excluding=deployment)
    if deployment is None and new_endpoint and quota.endpoints is not None:
        _enforce("endpoints", quota.endpoints, others.endpoints, 1, 0, field="slug")
    if quota.replicas_per_endpoint is not None:
        _enforce(
            "replicas_per_endpoint", quota.replicas_per_endpoint, 0, new.replicas, old.replicas,
            field=field,
        )  # fmt: skip
    by_type = quota.gpus_by_type or {}
    if new.gpu in by_type:
        added_before = old.gpus if old.gpu == new.gpu else 0
        _enforce(
            f"gpus.{new.gpu}", int(by_type[new.gpu]), others.gpus_by_type[new.gpu], new.gpus,
            added_before, field=field,
        )  # fmt: skip
    if quota.gpus is not None:
        _enforce("gpus", quota.gpus, others.gpus, new.gpus, old.gpus, field=field)


def check_canary(deployment: Deployment, spec: dict[str, Any], replicas: int) -> None:
    """Raise :class:`QuotaExceeded` when running ``replicas`` canary replicas of ``spec``
    *alongside* ``deployment``'s own breaks a quota (for the canary service to call, in its
    transaction). The canary is extra demand of an existing endpoint: it counts GPUs and
    replicas on top of what the endpoint asks for, never as another endpoint."""
    check(
        deployment.organization, deployment=None, spec=spec, replicas=replicas,
        field="canary.replicas", new_endpoint=False,
    )  # fmt: skip


def check_gpus(organization: Organization, *, gpu: str, gpus: int, field: str) -> None:
    """Raise :class:`QuotaExceeded` when ``gpus`` more GPUs of type ``gpu`` (a quantization
    run's, for its writer to call in its transaction) break a GPU quota, or when the
    organization's runs have used up this month's quantization GPU-hours."""
    quota = _locked_quota(organization)
    if quota is None:
        return
    if quota.quantization_gpu_hours is not None:
        used = gpu_hours_this_month(organization.pk, timezone.now())
        if used >= quota.quantization_gpu_hours:
            raise QuotaExceeded(
                "quantization_gpu_hours", limit=quota.quantization_gpu_hours,
                in_use=math.ceil(used), requested=0, field=field,
            )  # fmt: skip
    others = _in_use(organization)
    by_type = quota.gpus_by_type or {}
    if gpu in by_type:
        _enforce(f"gpus.{gpu}", int(by_type[gpu]), others.gpus_by_type[gpu], gpus, 0, field=field)
    if quota.gpus is not None:
        _enforce("gpus", quota.gpus, others.gpus, gpus, 0, field=field)


def _enforce(
    name: str, limit: int, in_use: int, requested: int, before: int, *, field: str
) -> None:
    if in_use + requested > limit and requested > before:
        raise QuotaExceeded(name, limit=limit, in_use=in_use, requested=requested, field=field)


def headroom(deployment: Deployment, wanted: int) -> tuple[int, QuotaExceeded | None]:
    """The most replicas up to ``wanted`` that ``deployment`` may run, and the quota that
    stopped it short (None when ``wanted`` fits). For the autoscaler, in its transaction.

    Never answers below the endpoint's current desired count (the autoscaler only scales up
    here: scaling down is never refused). Demand grows with replicas, so what fits is a prefix
    of ``current..wanted``: a binary search asks ``check`` a few times, not once per replica.
    """
    assert deployment.target_revision is not None
    spec = deployment.target_revision.spec
    refusal: QuotaExceeded | None = None

    def fits(replicas: int) -> bool:
        nonlocal refusal
        try:
            check(deployment.organization, deployment=deployment, spec=spec, replicas=replicas)
        except QuotaExceeded as exc:
            refusal = refusal or exc  # the first asked is ``wanted``: the reason on record
            return False
        return True

    if fits(wanted):
        return wanted, None
    low, high = deployment.desired_replicas, wanted - 1  # ``low`` is allowed (it runs)
    while low < high:
        middle = (low + high + 1) // 2
        if fits(middle):
            low = middle
        else:
            high = middle - 1
    return low, refusal


# --- reading and setting quotas ---------------------------------------------------------------


def _row(organization: Organization) -> Quota | None:
    return Quota.objects.filter(organization=organization).first()


def usage(organization: Organization) -> dict[str, Any]:
    """The organization's quotas against what its endpoints ask for, as the API shows them.

    ``{"quotas": [{"quota", "limit", "in_use"}], "updated_at", "updated_by"}``: one line per
    quota that is set, and in-use lines for every GPU type the organization asks for.
    """
    quota = _row(organization)
    in_use = _in_use(organization)
    by_type = dict(quota.gpus_by_type) if quota is not None else {}
    lines = [
        {"quota": "gpus", "limit": quota.gpus if quota else None, "in_use": in_use.gpus},
        *(
            {"quota": f"gpus.{gpu}", "limit": by_type.get(gpu), "in_use": in_use.gpus_by_type[gpu]}
            for gpu in sorted({*by_type, *(g for g, n in in_use.gpus_by_type.items() if n)})
        ),
        {
            "quota": "endpoints",
            "limit": quota.endpoints if quota else None,
            "in_use": in_use.endpoints,
        },
        {
            "quota": "replicas_per_endpoint",
            "limit": quota.replicas_per_endpoint if quota else None,
            "in_use": in_use.largest,
        },
        {
            "quota": "quantization_gpu_hours",
            "limit": quota.quantization_gpu_hours if quota else None,
            "in_use": round(gpu_hours_this_month(organization.pk, timezone.now()), 3),
        },
    ]
    return {
        "quotas": lines,
        "updated_at": quota.updated_at if quota else None,
        "updated_by": quota.updated_by if quota else "",
    }


def limits_of(quota: Quota | None) -> dict[str, Any]:
    """The limits as the API takes and returns them (the audit log's before/after too)."""
    if quota is None:
        return {
            "gpus": None, "gpus_by_type": {}, "endpoints": None, "replicas_per_endpoint": None,
            "quantization_gpu_hours": None,
        }  # fmt: skip
    return {
        "gpus": quota.gpus,
        "gpus_by_type": dict(quota.gpus_by_type),
        "endpoints": quota.endpoints,
        "replicas_per_endpoint": quota.replicas_per_endpoint,
        "quantization_gpu_hours": quota.quantization_gpu_hours,
    }


def _limit(value: Any, field: str) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= 1_000_000:
        raise ServiceError(
            f"{field}: a whole number from 0 to 1000000, or null for no limit",
            field=field,
            code="out_of_range",
        )
    return value


def _gpu_limits(value: Any) -> dict[str, int]:
    if not isinstance(value, dict):
        raise ServiceError("gpus_by_type: an object of GPU type -> count", field="gpus_by_type")
    out: dict[str, int] = {}
    for name, count in value.items():
        try:
            gpu = get_gpu(str(name)).id
        except UnknownGpuError as exc:
            raise ServiceError(
                f"gpus_by_type: unknown GPU type {str(name)[:40]!r}; use one of: "
                + ", ".join(gpu_ids()),
                field=f"gpus_by_type.{str(name)[:40]}",
                code="unknown_gpu",
            ) from exc
        limit = _limit(count, f"gpus_by_type.{gpu}")
        if limit is not None:
            out[gpu] = limit
    return out


class InstanceAdminOnly(AccessDenied):
    """Quotas are the instance's to set: Django staff, whatever their organization roles."""

    def __init__(self) -> None:
        Exception.__init__(self, "quotas are set by instance admins (staff accounts) only")
        self.needed, self.role = "staff", "not staff"


def require_instance_admin(user: Any) -> None:
    if user is None or not getattr(user, "is_staff", False) or not user.is_active:
        raise InstanceAdminOnly


@transaction.atomic
def set_quota(user: Any, organization: Organization, limits: dict[str, Any]) -> Quota:
    """Replace the organization's quotas with ``limits`` (keys as ``limits_of``; a missing key
    or null is no limit). Staff only; audited in the organization's log as the staff user.

    Endpoints already over a lowered quota keep running: only new asks are refused.
    """
    require_instance_admin(user)
    unknown = sorted(set(limits) - set(limits_of(None)))
    if unknown:
        raise ServiceError(f"{unknown[0]}: not a quota", field=unknown[0], code="unknown_field")
    values = {
        "gpus": _limit(limits.get("gpus"), "gpus"),
        "gpus_by_type": _gpu_limits(limits.get("gpus_by_type") or {}),
        "endpoints": _limit(limits.get("endpoints"), "endpoints"),
        "replicas_per_endpoint": _limit(
            limits.get("replicas_per_endpoint"), "replicas_per_endpoint"
        ),
        "quantization_gpu_hours": _limit(
            limits.get("quantization_gpu_hours"), "quantization_gpu_hours"
        ),
    }
    Organization.objects.select_for_update().filter(pk=organization.pk).first()
    quota = Quota.objects.select_for_update().filter(organization=organization).first()
    before = limits_of(quota)
    actor = Actor(organization=organization, role=Role.OWNER, user=user)
    quota = quota or Quota(organization=organization)
    for name, value in values.items():
        setattr(quota, name, value)
    quota.updated_at = timezone.now()
    quota.updated_by = actor.label
    quota.save()
    audit.record(actor, "quota.set", quota, before=before, after=limits_of(quota))
    return quota
