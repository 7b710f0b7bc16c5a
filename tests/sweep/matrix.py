"""What every operation of the OpenAPI document must answer to whom: the role matrix of the README.

README: viewer reads (but logs); developer creates, edits, scales, stops, starts, rolls back and
deletes endpoints (and makes inference keys) and reads logs; admin manages members, keys, secrets
and clusters and reads the audit log; only owners make owners. Objects of another organization
answer 404. An inference key is refused on the management API. The routes about a person
(``/me/...``) take that person's session only.

One entry per documented operation, keyed ``(METHOD, path)`` exactly as the document spells it.
The sweep fails on a documented operation missing here, so a new route must be classified
before it ships. An entry is one or more variants: the least role that succeeds, how another
organization's caller is judged (``Scope``), and a request that would succeed for that role
(so a refusal is the role check or the organization scope, never a 422 on a sloppy body).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from controlplane.models import Role
from tests.sweep.world import SPEC, SPEC_V2, World


class Scope(Enum):
    # The path names an Acme object: other organizations get 404 (403 below the role).
    OBJECT = "object"
    # About the caller's own organization: others get their own data, never a trace of Acme.
    COLLECTION = "collection"
    # Creates something that points at an Acme object named in the body: others are refused.
    REFERENCE = "reference"
    # The same for everyone signed in (catalogues, the dry-run check).
    PUBLIC = "public"


PERSON = None  # min_role of the routes about a person: only the addressee succeeds
# min_role of the instance admins' routes (a staff account's session): no caller of the sweep
# is staff, so every one is refused (tests/api/test_quotas.py covers staff succeeding).
STAFF = "staff"


@dataclass(frozen=True)
class Variant:
    min_role: str | None
    scope: Scope
    path: Callable[[World], dict[str, str]] = field(default=lambda w: {})
    body: Callable[[World], Any] | None = None
    query: str = ""
    label: str = ""


def _endpoint(w: World) -> dict[str, str]:
    return {"deployment_id": str(w.endpoint.pk)}


def _by_slug(w: World) -> dict[str, str]:
    return {"deployment_id": w.endpoint.slug}


def _canaried(w: World) -> dict[str, str]:
    assert w.canary_endpoint is not None
    return {"deployment_id": str(w.canary_endpoint.pk)}


def _benchmarks(w: World) -> dict[str, str]:
    """The endpoint, and its two finished benchmarks (for the query, not the path)."""
    return {**_endpoint(w), "a": w.benchmark_ids[0], "b": w.benchmark_ids[1]}


def _quantization_run(w: World) -> dict[str, str]:
    return {"run_id": w.quantization_run}


def _invitation(w: World) -> dict[str, str]:
    return {"invitation_id": str(w.invitation.pk)}


def _acme(w: World) -> dict[str, str]:
    return {"organization_id": str(w.cast.acme.pk)}


def _member(w: World) -> dict[str, str]:
    return {"member_id": str(w.target_member.pk)}


V, R = Variant, Role
# Settings of neither revision of Acme's endpoint: a canary of them is a change.
SPEC_V3 = {**SPEC_V2, "autoscaling": {"min_replicas": 1, "max_replicas": 2}}
EP = "/api/v1/deployments/{deployment_id}"
QZ = "/api/v1/quantization"

EXPECTED: dict[tuple[str, str], tuple[Variant, ...]] = {
    # --- endpoints ---
    ("GET", "/api/v1/deployments"): (V(R.VIEWER, Scope.COLLECTION),),
    ("POST", "/api/v1/deployments"): (
        V(
            R.DEVELOPER,
            Scope.REFERENCE,
            body=lambda w: {"slug": "sweep-new", "spec": SPEC, "cluster_id": str(w.cluster.pk)},
            label="on Acme's cluster",
        ),
    ),
    ("GET", EP): (
        V(R.VIEWER, Scope.OBJECT, _endpoint),
        V(R.VIEWER, Scope.OBJECT, _by_slug, label="by slug"),
    ),
    ("PATCH", EP): (
        V(
            R.DEVELOPER,
            Scope.OBJECT,
            _endpoint,
            body=lambda w: {"spec": SPEC, "base_revision": 2, "message": "sweep"},
        ),
    ),
    ("DELETE", EP): (V(R.DEVELOPER, Scope.OBJECT, _by_slug),),
    ("POST", EP + "/scale"): (
        V(R.DEVELOPER, Scope.OBJECT, _endpoint, body=lambda w: {"replicas": 2}),
    ),
    ("POST", EP + "/stop"): (V(R.DEVELOPER, Scope.OBJECT, _endpoint, body=lambda w: {}),),
    ("POST", EP + "/start"): (V(R.DEVELOPER, Scope.OBJECT, _by_slug, body=lambda w: {}),),
    ("POST", EP + "/rollback"): (
        V(R.DEVELOPER, Scope.OBJECT, _endpoint, body=lambda w: {"to_revision": 1}),
    ),
    ("GET", EP + "/placement"): (V(R.VIEWER, Scope.OBJECT, _endpoint),),
    ("PUT", EP + "/placement"): (
        V(
            R.DEVELOPER,
            Scope.OBJECT,
            _endpoint,
            body=lambda w: {
                "policy": "spread",
                "clusters": [{"cluster": str(w.endpoint.cluster_id), "min_replicas": 1}],
            },
        ),
    ),
    # --- canaries: started on the serving endpoint, read and ended on the canaried one ---
    ("POST", EP + "/canary"): (
        V(
            R.DEVELOPER,
            Scope.OBJECT,
            _endpoint,
            body=lambda w: {"spec": SPEC_V3, "weight": 10, "sticky": True},
        ),
    ),
    ("GET", EP + "/canary"): (V(R.VIEWER, Scope.OBJECT, _canaried),),
    ("POST", EP + "/canary/promote"): (V(R.DEVELOPER, Scope.OBJECT, _canaried, body=lambda w: {}),),
    ("POST", EP + "/canary/abort"): (
        V(R.DEVELOPER, Scope.OBJECT, _canaried, body=lambda w: {"reason": "sweep"}),
    ),
    # --- quality gates: run on the canary's revision; read and overridden where one failed ---
    ("POST", EP + "/revisions/{number}/gate"): (
        V(R.DEVELOPER, Scope.OBJECT, lambda w: {**_canaried(w), "number": "2"}, body=lambda w: {}),
    ),
    ("GET", EP + "/revisions/{number}/gate"): (
        V(R.VIEWER, Scope.OBJECT, lambda w: {**_endpoint(w), "number": "2"}),
    ),
    ("GET", EP + "/gates"): (V(R.VIEWER, Scope.OBJECT, _endpoint),),
    ("POST", EP + "/revisions/{number}/gate/override"): (
        V(
            R.ADMIN,
            Scope.OBJECT,
            lambda w: {**_endpoint(w), "number": "2"},
            body=lambda w: {"reason": "sweep"},
        ),
    ),
    # --- benchmarks: queued on the serving endpoint; two finished ones read and compared ---
    ("POST", EP + "/benchmarks"): (
        V(
            R.DEVELOPER,
            Scope.OBJECT,
            _endpoint,
            body=lambda w: {"profile": {"concurrency": [1, 2], "duration_s": 5}, "name": "sweep"},
        ),
    ),
    ("GET", EP + "/benchmarks"): (V(R.VIEWER, Scope.OBJECT, _endpoint),),
    ("GET", EP + "/benchmarks/{benchmark_id}"): (
        V(R.VIEWER, Scope.OBJECT, lambda w: {**_endpoint(w), "benchmark_id": w.benchmark_ids[0]}),
    ),
    ("GET", EP + "/benchmarks/compare"): (
        V(R.VIEWER, Scope.OBJECT, _benchmarks, query="a={a}&b={b}"),
    ),
    # --- LoRA adapters: each change a revision of the serving endpoint ---
    ("GET", EP + "/adapters"): (V(R.VIEWER, Scope.OBJECT, _endpoint),),
    ("POST", EP + "/adapters"): (
        V(
            R.DEVELOPER,
            Scope.OBJECT,
            _endpoint,
            body=lambda w: {"name": "sweep", "source": "acme/sweep-lora", "rank": 8},
        ),
    ),
    ("DELETE", EP + "/adapters/{name}"): (
        V(R.DEVELOPER, Scope.OBJECT, lambda w: {**_endpoint(w), "name": "sweep-adapter"}),
    ),
    # --- revisions and observations ---
    ("GET", EP + "/revisions"): (V(R.VIEWER, Scope.OBJECT, _endpoint),),
    ("GET", EP + "/revisions/diff"): (V(R.VIEWER, Scope.OBJECT, _endpoint, query="from=1&to=2"),),
    ("GET", EP + "/revisions/{number}"): (
        V(R.VIEWER, Scope.OBJECT, lambda w: {**_endpoint(w), "number": "1"}),
    ),
    ("GET", EP + "/events"): (V(R.VIEWER, Scope.OBJECT, _endpoint),),
    ("GET", EP + "/starts"): (V(R.VIEWER, Scope.OBJECT, _endpoint),),
    ("GET", EP + "/metrics"): (V(R.VIEWER, Scope.OBJECT, _endpoint),),
    ("GET", EP + "/model-accuracy"): (V(R.VIEWER, Scope.OBJECT, _endpoint),),
    ("GET", EP + "/usage"): (V(R.VIEWER, Scope.OBJECT, _endpoint),),
    ("GET", "/api/v1/usage"): (V(R.VIEWER, Scope.COLLECTION),),
    ("GET", "/api/v1/costs"): (V(R.VIEWER, Scope.COLLECTION),),
    # --- quantization: runs of the organization; one of Acme's with a candidate "all" ---
    ("POST", QZ + "/runs"): (
        V(
            R.DEVELOPER,
            Scope.COLLECTION,
            body=lambda w: {
                "format": "fp8",
                "source_model": "/root/.cache/huggingface/sweep-model",
                "propose": True,
            },
        ),
    ),
    ("GET", QZ + "/runs"): (V(R.VIEWER, Scope.COLLECTION),),
    ("GET", QZ + "/runs/{run_id}"): (V(R.VIEWER, Scope.OBJECT, _quantization_run),),
    ("GET", QZ + "/runs/{run_id}/compare"): (V(R.VIEWER, Scope.OBJECT, _quantization_run),),
    ("POST", QZ + "/runs/{run_id}/cancel"): (
        V(R.DEVELOPER, Scope.OBJECT, _quantization_run, body=lambda w: {}),
    ),
    # Deploying makes a revision of the endpoint: a developer's, as an edit is.
    ("POST", QZ + "/runs/{run_id}/deploy"): (
        V(
            R.DEVELOPER,
            Scope.OBJECT,
            _quantization_run,
            body=lambda w: {"deployment": w.endpoint.slug, "candidate": "all", "mode": "revision"},
        ),
    ),
    ("GET", QZ + "/artifacts"): (V(R.VIEWER, Scope.COLLECTION),),
    ("GET", QZ + "/calibration-sets"): (V(R.VIEWER, Scope.COLLECTION),),
    ("POST", QZ + "/calibration-sets"): (
        V(
            R.DEVELOPER,
            Scope.COLLECTION,
            body=lambda w: {"name": "sweep", "samples": '{"text": "hello"}\n'},
        ),
    ),
    # A log can hold what users sent (prompts in errors, --log-requests): developers and up.
    ("GET", EP + "/logs"): (
        V(R.DEVELOPER, Scope.OBJECT, _endpoint),
        V(R.DEVELOPER, Scope.OBJECT, _by_slug, query="role=engine&tail=50", label="by slug"),
    ),
    # The audit log shows every member's changes: admins.
    ("GET", "/api/v1/audit"): (V(R.ADMIN, Scope.COLLECTION),),
    # --- catalogues ---
    ("GET", "/api/v1/gpus"): (V(R.VIEWER, Scope.PUBLIC),),
    ("GET", "/api/v1/models"): (V(R.VIEWER, Scope.PUBLIC),),
    ("POST", "/api/v1/validate"): (V(R.VIEWER, Scope.PUBLIC, body=lambda w: {"spec": SPEC}),),
    # The optimizer changes nothing (a dry run, like /validate): any member may ask it.
    ("POST", "/api/v1/optimize"): (
        V(R.VIEWER, Scope.PUBLIC, body=lambda w: {"model": "llama-3.1-8b", "gpus": ["H100-SXM"]}),
    ),
    # --- keys ---
    ("GET", "/api/v1/api-keys"): (V(R.VIEWER, Scope.COLLECTION),),
    ("POST", "/api/v1/api-keys"): (
        V(
            R.DEVELOPER,
            Scope.REFERENCE,
            body=lambda w: {
                "name": "sweep inference",
                "kind": "inference",
                "allowed_deployment_ids": [str(w.endpoint.pk)],
            },
            label="inference key for Acme's endpoint",
        ),
        V(
            R.ADMIN,
            Scope.COLLECTION,
            body=lambda w: {"name": "sweep admin", "kind": "management", "role": "admin"},
            label="management key",
        ),
    ),
    # Changing an inference key's limits is a developer's, as making one is.
    ("PATCH", "/api/v1/api-keys/{key_id}"): (
        V(
            R.DEVELOPER,
            Scope.OBJECT,
            lambda w: {"key_id": str(w.inference_key.pk)},
            body=lambda w: {"requests_per_minute": 600},
            label="an inference key",
        ),
    ),
    ("DELETE", "/api/v1/api-keys/{key_id}"): (
        V(
            R.DEVELOPER,
            Scope.OBJECT,
            lambda w: {"key_id": str(w.inference_key.pk)},
            label="an inference key",
        ),
        V(
            R.ADMIN,
            Scope.OBJECT,
            lambda w: {"key_id": str(w.spare_management_key.pk)},
            label="a management key",
        ),
    ),
    # --- secrets ---
    ("GET", "/api/v1/secrets"): (V(R.DEVELOPER, Scope.COLLECTION),),
    ("POST", "/api/v1/secrets"): (
        V(
            R.ADMIN,
            Scope.COLLECTION,
            body=lambda w: {"name": "sweep-new-secret", "value": "sweep value"},
        ),
    ),
    ("DELETE", "/api/v1/secrets/{secret_id}"): (
        V(R.ADMIN, Scope.OBJECT, lambda w: {"secret_id": str(w.spare_secret.pk)}),
    ),
    # --- clusters ---
    ("GET", "/api/v1/clusters"): (V(R.VIEWER, Scope.COLLECTION),),
    ("POST", "/api/v1/clusters"): (
        V(
            R.ADMIN,
            Scope.REFERENCE,
            body=lambda w: {
                "name": "sweep-new-cluster",
                "kubeconfig_secret_id": str(w.kubeconfig_secret.pk),
            },
            label="with Acme's kubeconfig",
        ),
    ),
    ("GET", "/api/v1/clusters/{cluster_id}"): (
        V(R.VIEWER, Scope.OBJECT, lambda w: {"cluster_id": str(w.cluster.pk)}),
    ),
    ("PATCH", "/api/v1/clusters/{cluster_id}"): (
        V(
            R.ADMIN,
            Scope.OBJECT,
            lambda w: {"cluster_id": str(w.cluster.pk)},
            body=lambda w: {"settings": {"labels": {"sweep": "yes"}}},
        ),
    ),
    ("DELETE", "/api/v1/clusters/{cluster_id}"): (
        V(R.ADMIN, Scope.OBJECT, lambda w: {"cluster_id": str(w.cluster.pk)}),
    ),
    ("POST", "/api/v1/clusters/{cluster_id}/drain"): (
        V(R.ADMIN, Scope.OBJECT, lambda w: {"cluster_id": str(w.cluster.pk)}, body=lambda w: {}),
    ),
    ("POST", "/api/v1/clusters/{cluster_id}/undrain"): (
        V(R.ADMIN, Scope.OBJECT, lambda w: {"cluster_id": str(w.cluster.pk)}, body=lambda w: {}),
    ),
    # --- members and invitations ---
    ("GET", "/api/v1/members"): (V(R.VIEWER, Scope.COLLECTION),),
    ("POST", "/api/v1/members"): (
        V(
            R.ADMIN,
            Scope.COLLECTION,
            body=lambda w: {"username": "sweep_newcomer", "role": "developer"},
        ),
        V(
            R.OWNER,
            Scope.COLLECTION,
            body=lambda w: {"username": "sweep_newcomer", "role": "owner"},
            label="as an owner",
        ),
    ),
    ("PATCH", "/api/v1/members/{member_id}"): (
        V(R.ADMIN, Scope.OBJECT, _member, body=lambda w: {"role": "viewer"}),
    ),
    ("DELETE", "/api/v1/members/{member_id}"): (V(R.ADMIN, Scope.OBJECT, _member),),
    ("GET", "/api/v1/invitations"): (V(R.ADMIN, Scope.COLLECTION),),
    ("DELETE", "/api/v1/invitations/{invitation_id}"): (V(R.ADMIN, Scope.OBJECT, _invitation),),
    # --- quotas: members read their own; instance admins read and set anyone's ---
    ("GET", "/api/v1/quota"): (V(R.VIEWER, Scope.COLLECTION),),
    ("GET", "/api/v1/organizations/{organization_id}/quota"): (V(STAFF, Scope.OBJECT, _acme),),
    ("PUT", "/api/v1/organizations/{organization_id}/quota"): (
        V(STAFF, Scope.OBJECT, _acme, body=lambda w: {"gpus": 1}),
    ),
    ("GET", "/api/v1/me/invitations"): (V(PERSON, Scope.COLLECTION),),
    ("POST", "/api/v1/me/invitations/{invitation_id}/accept"): (
        V(PERSON, Scope.OBJECT, _invitation, body=lambda w: {}),
    ),
    ("POST", "/api/v1/me/invitations/{invitation_id}/decline"): (
        V(PERSON, Scope.OBJECT, _invitation, body=lambda w: {}),
    ),
}
