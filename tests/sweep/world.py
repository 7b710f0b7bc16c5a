"""The world the sweeps attack: Acme with one of every object, Globex next door, and who calls.

Acme (alice owns it) holds an endpoint at revision 2 whose model token is a Secret, a Kubernetes
cluster reached with a kubeconfig Secret, an unused Secret, management keys of every key role,
an inference key, members of every role, a pending invitation, a usage row, a metric sample and
an engine log file. Globex (bob owns it) holds one endpoint of its own. Every secret value is a
fresh sentinel, so a sweep can search every answer for it; every Acme name and id is a marker,
so a sweep can search another organization's answers for it.

Built through the services (the only writers), as a caller of the platform would build it.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

from django.contrib.auth import get_user_model
from django.db.models import Model
from django.test import Client
from django.utils import timezone

from controlplane import invitations
from controlplane import services as platform
from controlplane.models import (
    ApiKey,
    ApiKeyKind,
    AuditEvent,
    Invitation,
    Membership,
    Role,
    Secret,
)
from deployments.clusters import services as cluster_services
from deployments.clusters.models import Cluster
from deployments.costs.models import ReplicaSpan
from deployments.drivers.base import QUANTIZE_RUNNING, QuantizationProgress
from deployments.endpoints import services
from deployments.endpoints.models import Deployment, DeploymentEvent, Revision
from deployments.experiments.benchmark import services as benchmarks
from deployments.experiments.canary import services as canary_services
from deployments.experiments.models import (
    Benchmark,
    BenchmarkStatus,
    QualityGate,
    QualityGateStatus,
)
from deployments.quantization import services as quantization
from deployments.traffic.models import MetricSample, UsageRecord
from runtime.spec import MODEL_CACHE_PATH
from tests.conftest import PASSWORD, Cast

SLUG = "acme-private-chat"
GLOBEX_SLUG = "globex-chat"
CANARY_SLUG = "acme-canary-chat"
HF_SECRET = "acme-hf-token"
KUBECONFIG_SECRET = "acme-kubeconfig"
SPARE_SECRET = "acme-spare-secret"
CLUSTER = "acme-gpu-east"
REPLICA = "r1-engine-0"  # an engine's log file name under the local run directory
# People besides the cast: names no page would contain by chance (markers are substrings).
ADMIN_USER = "erin_acme_admin"
TARGET_USER = "gina_acme_dev"
INVITEE = "frank_invitee"

SPEC: dict[str, Any] = {
    "model": {"source": "meta-llama/Llama-3.1-8B-Instruct", "hf_token_secret": HF_SECRET},
    "hardware": {"gpu": "H100-SXM"},
    "autoscaling": {"min_replicas": 1, "max_replicas": 4},
}
# Revision 2 serves a LoRA adapter, which the adapter routes' sweep removes.
SPEC_V2: dict[str, Any] = {
    **SPEC,
    "autoscaling": {"min_replicas": 1, "max_replicas": 3},
    "lora": {"adapters": [{"name": "sweep-adapter", "source": "acme/sweep-lora", "rank": 8}]},
}


def kubeconfig(token: str) -> str:
    # A public address literal passes the egress policy without DNS; nothing in the sweeps
    # ever connects to it (no reconcile runs: on_commit hooks do not fire inside a test).
    return (
        "apiVersion: v1\nkind: Config\n"
        "clusters: [{name: c, cluster: {server: 'https://93.184.216.34:6443'}}]\n"
        f"users: [{{name: u, user: {{token: '{token}'}}}}]\n"
        "contexts: [{name: x, context: {cluster: c, user: u}}]\ncurrent-context: x\n"
    )


@dataclass
class Api:
    """A JSON client of /api/v1 for one caller. Not ``tests.api.conftest.Api``: that one records
    the routes it hits for the API tests' own coverage check, which the sweep must not satisfy.
    """

    key: str | None
    client: Client = field(default_factory=Client)

    def request(self, method: str, path: str, body: Any = None) -> Any:
        url = path if path.startswith("/") else f"/api/v1/{path}"
        extra = {"HTTP_AUTHORIZATION": f"Bearer {self.key}"} if self.key is not None else {}
        if body is not None:
            extra["data"] = json.dumps(body)
        return getattr(self.client, method.lower())(url, content_type="application/json", **extra)

    def get(self, path: str) -> Any:
        return self.request("GET", path)

    def post(self, path: str, body: Any) -> Any:
        return self.request("POST", path, body)


@dataclass
class World:
    cast: Cast
    run_dir: Path
    endpoint: Deployment  # serving revision 2 (as reconcile would have recorded)
    globex_endpoint: Deployment
    cluster: Cluster
    hf_secret: Secret
    kubeconfig_secret: Secret
    spare_secret: Secret
    inference_key: ApiKey
    spare_management_key: ApiKey
    target_member: Membership  # TARGET_USER, a developer: the one member routes change or remove
    invitation: Invitation  # to INVITEE, who belongs to no organization yet
    # Secret values: never in any answer, log or argv.
    hf_token: str
    kube_token: str
    spare_value: str
    plaintext_keys: dict[str, str]  # caller name -> whole key
    log_line: str  # what Acme's engine wrote to its log
    sessions: dict[str, Client] = field(default_factory=dict)
    # Serving revision 1 with a canary of revision 2 running beside it.
    canary_endpoint: Deployment | None = None
    # Two finished benchmarks of ``endpoint`` (ids), for the read and compare routes.
    benchmark_ids: tuple[str, str] = ("", "")
    # A quantization run of Acme's with one candidate (checkpoint) named "all".
    quantization_run: str = ""

    @property
    def secret_values(self) -> list[str]:
        hashes = ApiKey.objects.filter(organization=self.cast.acme).values_list("key_hash")
        return [
            self.hf_token,
            self.kube_token,
            self.spare_value,
            *self.plaintext_keys.values(),
            *(h for (h,) in hashes),
            *Secret.objects.filter(organization=self.cast.acme).values_list(
                "ciphertext", flat=True
            ),
        ]

    def markers(self) -> list[str]:
        """Strings only Acme's members may see: names and ids of its objects."""
        acme = self.cast.acme
        keys = ApiKey.objects.filter(organization=acme)
        found = [
            str(acme.pk),
            acme.name,
            acme.slug,
            str(self.endpoint.pk),
            self.endpoint.slug,
            self.endpoint.name,
            *(
                (str(self.canary_endpoint.pk), self.canary_endpoint.slug)
                if self.canary_endpoint is not None
                else ()
            ),
            str(self.cluster.pk),
            self.cluster.name,
            *((self.quantization_run,) if self.quantization_run else ()),
            self.log_line,
            *(str(s.pk) for s in Secret.objects.filter(organization=acme)),
            *Secret.objects.filter(organization=acme).values_list("name", flat=True),
            *(str(k.pk) for k in keys),
            *keys.values_list("name", flat=True),
            *keys.values_list("prefix", flat=True),
            *Revision.objects.filter(deployment=self.endpoint).values_list("spec_hash", flat=True),
            str(self.invitation.pk),
            self.invitation.username,
            "carol",
            "dave",
            ADMIN_USER,
            TARGET_USER,
        ]
        return [m for m in found if m]

    def api(self, caller: str) -> Api:
        """A JSON client of /api/v1 for one caller (see CALLERS)."""
        if caller in self.plaintext_keys:
            return Api(self.plaintext_keys[caller])
        if caller == "anonymous":
            return Api(None)
        return Api(None, client=self.sessions[caller])


# Who calls, and as whom. Key roles are admin at most; the owner is a person.
ACME_ROLES: dict[str, str] = {
    "viewer-key": Role.VIEWER,
    "developer-key": Role.DEVELOPER,
    "admin-key": Role.ADMIN,
    "viewer-session": Role.VIEWER,  # carol
    "developer-session": Role.DEVELOPER,  # dave
    "admin-session": Role.ADMIN,  # ADMIN_USER
    "owner-session": Role.OWNER,  # alice
}
OTHER_ORG = {"other-org-key": Role.ADMIN, "other-org-session": Role.OWNER}  # bob, Globex
CALLERS = (
    *ACME_ROLES,
    *OTHER_ORG,
    "anonymous",
    "inference-key",  # Acme's inference key: for endpoints, never the management API
    "invitee-session",  # INVITEE: signed in, in no organization, invited to Acme
    "owner-session-no-csrf",  # alice, from a page that does not send the CSRF token
    "invitee-session-no-csrf",
)
KEY_CALLERS = frozenset(c for c in CALLERS if c.endswith("-key"))
SESSIONS = {
    "viewer-session": "carol",
    "developer-session": "dave",
    "admin-session": ADMIN_USER,
    "owner-session": "alice",
    "other-org-session": "bob",
    "invitee-session": INVITEE,
    "owner-session-no-csrf": "alice",
    "invitee-session-no-csrf": INVITEE,
}


def signed_in(user: Any, *, csrf: bool = True) -> Client:
    # The test client skips CSRF unless asked to enforce it: the no-csrf callers ask.
    client = Client(enforce_csrf_checks=not csrf)
    client.force_login(user)
    return client


def build_world(cast: Cast, run_dir: Path) -> World:
    users = get_user_model()
    for name in (ADMIN_USER, TARGET_USER, INVITEE):
        users.objects.create_user(name, password=PASSWORD)
    owner = cast.actor(cast.alice, cast.acme)
    platform.add_member(owner, username=ADMIN_USER, role=Role.ADMIN)
    gina = platform.add_member(owner, username=TARGET_USER, role=Role.DEVELOPER)
    tag = uuid.uuid4().hex
    hf_token, kube_token, spare = f"hf_sweep{tag}", f"kube-sweep-{tag}", f"spare-sweep-{tag}"
    hf_secret = platform.set_secret(owner, name=HF_SECRET, value=hf_token)
    kube_secret = platform.set_secret(owner, name=KUBECONFIG_SECRET, value=kubeconfig(kube_token))
    spare_secret = platform.set_secret(owner, name=SPARE_SECRET, value=spare)
    cluster = cluster_services.create_cluster(
        owner, name=CLUSTER, namespace="plinth", kubeconfig_secret_id=str(kube_secret.pk)
    )
    endpoint = services.create_deployment(owner, slug=SLUG, name="Acme Private Chat", spec=SPEC)
    services.update_settings(owner, endpoint.pk, spec=SPEC_V2, base_revision=1, message="v2")
    _serving(endpoint)
    canary_endpoint = _serving(
        services.create_deployment(owner, slug=CANARY_SLUG, name="Acme Canary Chat", spec=SPEC)
    )
    canary_services.start_canary(owner, canary_endpoint.pk, spec=SPEC_V2, weight=10)
    plaintext = {
        caller: _management_key(cast, role, f"acme {caller}")
        for caller, role in ACME_ROLES.items()
        if caller.endswith("-key")
    }
    inference = platform.create_api_key(owner, name="acme inference key", kind=ApiKeyKind.INFERENCE)
    plaintext["inference-key"] = inference.plaintext
    spare_key = platform.create_api_key(
        owner, name="acme spare management key", kind=ApiKeyKind.MANAGEMENT, role=Role.VIEWER
    )
    bob = cast.actor(cast.bob, cast.globex)
    plaintext["other-org-key"] = platform.create_api_key(
        bob, name="globex admin key", kind=ApiKeyKind.MANAGEMENT, role=Role.ADMIN
    ).plaintext
    globex_endpoint = services.create_deployment(
        bob,
        slug=GLOBEX_SLUG,
        name="Globex Chat",
        spec={**SPEC, "model": {"source": SPEC["model"]["source"]}},
    )
    invitation = invitations.invite(owner, username=INVITEE, role=Role.DEVELOPER)
    _observations(cast, endpoint, inference.api_key)
    log_line = f"acme engine log line {tag}"
    _engine_log(run_dir, endpoint, log_line)
    _engine_log(run_dir, globex_endpoint, "globex engine log line")
    finished = _finished_benchmarks(owner, endpoint)
    _failed_gate(endpoint)
    world = World(
        cast=cast,
        run_dir=run_dir,
        endpoint=Deployment.objects.get(pk=endpoint.pk),
        globex_endpoint=globex_endpoint,
        cluster=cluster,
        hf_secret=hf_secret,
        kubeconfig_secret=kube_secret,
        spare_secret=spare_secret,
        inference_key=inference.api_key,
        spare_management_key=spare_key.api_key,
        target_member=gina,
        invitation=invitation,
        hf_token=hf_token,
        kube_token=kube_token,
        spare_value=spare,
        plaintext_keys=plaintext,
        log_line=log_line,
        canary_endpoint=Deployment.objects.get(pk=canary_endpoint.pk),
        benchmark_ids=finished,
        quantization_run=_quantization_run(owner),
    )
    by_name = {u.get_username(): u for u in users.objects.all()}
    world.sessions = {
        caller: signed_in(by_name[name], csrf=not caller.endswith("-no-csrf"))
        for caller, name in SESSIONS.items()
    }
    return world


def _serving(endpoint: Deployment) -> Deployment:
    """What reconcile records once the target revision serves (no reconcile runs here)."""
    target = Deployment.objects.get(pk=endpoint.pk).target_revision_id
    Deployment.objects.filter(pk=endpoint.pk).update(
        current_revision_id=target, applied_revision_id=target
    )
    return Deployment.objects.get(pk=endpoint.pk)


def _failed_gate(endpoint: Deployment) -> None:
    """A failed quality gate of revision 2 (as its run would leave it), for the read and the
    admin's override; revision 1, which rollback restores, carries none."""
    QualityGate.objects.create(
        deployment=endpoint,
        revision=endpoint.revisions.get(number=2),
        baseline_revision=endpoint.revisions.get(number=1),
        max_mean_kl=0.05,
        min_top1_agreement=0.95,
        status=QualityGateStatus.FAILED,
        results={"passed": False, "reasons": ["mean KL 0.0900 nats exceeds 0.05"]},
    )


def _finished_benchmarks(owner: Any, endpoint: Deployment) -> tuple[str, str]:
    """Two benchmarks as their runs would leave them (no AIPerf runs here)."""
    ids = []
    for name in ("sweep a", "sweep b"):
        created = benchmarks.create_benchmark(owner, endpoint.pk, profile={}, name=name)
        Benchmark.objects.filter(pk=created.pk).update(status=BenchmarkStatus.SUCCEEDED)
        ids.append(str(created.pk))
    return ids[0], ids[1]


def _quantization_run(owner: Any) -> str:
    """A run with one candidate, as the tool's events would leave it (no tool runs here)."""
    run = quantization.start_run(
        owner, format="fp8", source_model=f"{MODEL_CACHE_PATH}/acme-sweep-model",
        recipes=[{"name": "all"}],
    )  # fmt: skip
    quantization.begin_attempt(run)
    event = {
        "event": "candidate", "name": "all", "recipe": {"name": "all"}, "mean_kl": 0.01,
        "top1": 0.99, "quantized_fraction": 1.0, "bits_per_weight": 8.0,
        "checkpoint": "/out/all", "quantization": "compressed-tensors",
        "tool": {"name": "llmcompressor", "version": "0.14.0.1"}, "calibration_sha256": "0" * 64,
    }  # fmt: skip
    progress = QuantizationProgress(QUANTIZE_RUNNING, (json.dumps(event),), "", "/out")
    quantization.record_progress(run, progress)
    return str(run.pk)


def _management_key(cast: Cast, role: str, name: str) -> str:
    owner = cast.actor(cast.alice, cast.acme)
    created = platform.create_api_key(owner, name=name, kind=ApiKeyKind.MANAGEMENT, role=role)
    return created.plaintext


def _observations(cast: Cast, endpoint: Deployment, key: ApiKey) -> None:
    """What the probe, the gateway and reconcile would have recorded: one metric sample, one
    usage row, one replica span (the cost report's)."""
    now = timezone.now().replace(second=0, microsecond=0)
    MetricSample.objects.create(deployment=endpoint, ts=now - timedelta(minutes=5), interval_s=15)
    UsageRecord.objects.create(
        organization=cast.acme,
        api_key=key,
        deployment_id=endpoint.pk,
        deployment_slug=endpoint.slug,
        minute=now - timedelta(minutes=5),
        requests=3,
        prompt_tokens=30,
        completion_tokens=12,
    )
    ReplicaSpan.objects.create(
        organization=cast.acme,
        deployment_id=endpoint.pk,
        deployment_slug=endpoint.slug,
        revision=1,
        replica=REPLICA,
        cluster_name=endpoint.cluster.name,
        gpu="H100-SXM",
        gpus=1,
        started_at=now - timedelta(hours=1),
        last_seen_at=now,
    )


def _engine_log(run_dir: Path, endpoint: Deployment, line: str) -> None:
    # The local driver writes <run dir>/<deployment id>/<replica>.log; the console reads them.
    root = run_dir / str(endpoint.pk)
    root.mkdir(parents=True, exist_ok=True)
    (root / f"{REPLICA}.log").write_text(f"starting\n{line}\n")


def _rows(model: type[Model], fields: Iterable[str], **where: Any) -> list[dict[str, Any]]:
    return list(model.objects.filter(**where).order_by("pk").values("pk", *fields))  # type: ignore[attr-defined]


def state_of(world: World) -> dict[str, Any]:
    """Everything a request could change in Acme (a key's last use aside: reading touches it)."""
    acme = world.cast.acme
    deployment_fields = [f.name for f in Deployment._meta.concrete_fields]
    return {
        "deployments": _rows(Deployment, deployment_fields, organization=acme),
        "revisions": _rows(Revision, ["number", "spec_hash"], deployment__organization=acme),
        "secrets": _rows(Secret, ["name", "ciphertext", "updated_at"], organization=acme),
        "keys": _rows(
            ApiKey,
            ["name", "role", "revoked_at", "expires_at", "allowed_deployment_ids"],
            organization=acme,
        ),
        "members": _rows(Membership, ["user_id", "role"], organization=acme),
        "invitations": _rows(Invitation, ["status", "role", "username"], organization=acme),
        "clusters": _rows(Cluster, ["name", "namespace", "kubeconfig_id"], organization=acme),
        "audit": AuditEvent.objects.filter(organization=acme).count(),
        "events": DeploymentEvent.objects.filter(deployment__organization=acme).count(),
    }


def cross_references(world: World) -> list[str]:
    """Objects of other organizations that point at Acme's: each one is a hole."""
    acme = world.cast.acme
    others = Deployment.objects.exclude(organization=acme)
    found = [
        f"deployment {d.slug} runs on Acme's cluster"
        for d in others.filter(cluster__organization=acme)
    ]
    clusters = Cluster.objects.exclude(organization=acme).exclude(organization=None)
    found += [
        f"cluster {c.name} uses Acme's kubeconfig"
        for c in clusters.filter(kubeconfig__organization=acme)
    ]
    acme_ids = set(Deployment.objects.filter(organization=acme).values_list("pk", flat=True))
    for key in ApiKey.objects.exclude(organization=acme):
        if acme_ids & set(key.allowed_deployment_ids):
            found.append(f"key {key.name} is allowed Acme's endpoint")
    return found


def leaked(text: str, secrets: Iterable[str]) -> list[str]:
    return [s for s in secrets if s and s in text]


def foreign(text: str, markers: Iterable[str], sent: str) -> list[str]:
    """Markers in ``text`` that the caller did not send themselves (an echo is not a leak)."""
    return [m for m in markers if m in text and m not in sent]
