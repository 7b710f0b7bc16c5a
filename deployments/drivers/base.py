"""The driver interface: place a revision's LaunchPlan on a cluster, observe it, delete it, logs.

A driver is given everything it needs as plain values (no Django models), so drivers are testable
without a database: a ``DeploymentRef`` names the endpoint, a ``RevisionPlan`` says what one
revision runs. ``apply`` is idempotent and moves a rollout one step: engines of the applied
revision are started next to the old ones (surge) and old ones are stopped only as new ones become
ready, so applying the previous revision again is the rollback.

``Observation`` holds facts, not a status: per replica its phase, readiness, restarts and last
reason; per deployment the router's address and the events worth showing. Phases are the ones
``deployments.status`` understands: pending, starting, loading, running, ready, failed,
terminating.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Protocol

from runtime.launch import LaunchPlan, RolePlan

PENDING = "pending"
STARTING = "starting"
LOADING = "loading"
RUNNING = "running"
READY = "ready"
FAILED = "failed"
TERMINATING = "terminating"
PHASES = (PENDING, STARTING, LOADING, RUNNING, READY, FAILED, TERMINATING)

# The variable engines read the model hub token from (huggingface_hub's own name for it).
HF_TOKEN_ENV = "HF_TOKEN"
# SGLang logs its whole ServerArgs at start (``api_key='...'``) and the local driver logs each
# command line (``--api-key ...``): log lines are shown with these values masked.
_SECRET_IN_LOG = re.compile(
    r"((?:api_key|admin_api_key)['\"]?\s*[=:]\s*['\"]?|--(?:admin-)?api-key[ =])[^'\"\s,)}]+"
)


_KEY_FLAGS = frozenset({"--api-key", "--admin-api-key"})


def redact_log_line(line: str) -> str:
    """``line`` with any engine or router API key in it replaced by ``***``."""
    return _SECRET_IN_LOG.sub(r"\1***", line)


def redact_argv(argv: list[str]) -> list[str]:
    """``argv`` with the value of every API key flag replaced by ``***``."""
    return [
        "***" if index and argv[index - 1] in _KEY_FLAGS else token
        for index, token in enumerate(argv)
    ]


@dataclass(frozen=True)
class DeploymentRef:
    """Which endpoint: its id (labels, directories) and slug (object names, log lines).

    ``api_key`` is the bearer token its engines and router demand (``--api-key``); empty runs
    them open. Kept out of ``repr`` so a logged ref never shows it.
    """

    id: str
    slug: str
    namespace: str = "plinth"
    api_key: str = field(default="", repr=False)


@dataclass(frozen=True)
class RevisionPlan:
    """What one revision runs. ``replicas`` is the desired number of engine replicas."""

    number: int
    plan: LaunchPlan
    replicas: int
    spec_hash: str = ""
    # The model hub token itself, when the model is gated: reconcile reveals it from the Secret
    # named by ``model.hf_token_secret``. Engines get it in their environment (HF_TOKEN), never
    # in argv, a manifest's plain fields or a log.
    hf_token: str | None = None

    def replicas_of(self, role: RolePlan) -> int:
        """How many replicas ``role`` runs: the endpoint's desired count for a plain engine (the
        user and the autoscaler set it), the pool's own size for prefill and decode, which the
        spec fixes per role, and the plan's for the router."""
        return self.replicas if role.role == "engine" else role.replicas


@dataclass(frozen=True)
class ReplicaFacts:
    """One engine replica (a process, a pod or a multi-node group) as last seen."""

    name: str
    revision: int | None
    role: str
    phase: str
    ready: bool
    restarts: int = 0
    reason: str = ""
    message: str = ""
    url: str = ""

    def as_dict(self) -> dict[str, object]:
        return {
            "name": self.name,
            "revision": self.revision,
            "role": self.role,
            "phase": self.phase,
            "ready": self.ready,
            "restarts": self.restarts,
            "reason": self.reason,
            "message": self.message,
            "url": self.url,
        }


@dataclass(frozen=True)
class ObservedEvent:
    """Something worth a line in the endpoint's timeline. ``key`` dedupes repeats."""

    reason: str
    message: str
    level: str = "info"  # info | warning | error
    key: str = ""


@dataclass(frozen=True)
class Observation:
    replicas: tuple[ReplicaFacts, ...] = ()
    router_url: str = ""
    router_ready: bool = False
    events: tuple[ObservedEvent, ...] = ()

    def engines(self, revision: int | None = None) -> list[ReplicaFacts]:
        return [
            r
            for r in self.replicas
            if r.role != "router" and (revision is None or r.revision == revision)
        ]

    def ready_count(self, revision: int | None = None) -> int:
        return sum(1 for r in self.engines(revision) if r.ready)

    @property
    def empty(self) -> bool:
        return not self.replicas and not self.router_url


@dataclass(frozen=True)
class LogLines:
    """One replica's last log lines, and the names of every replica that has a log to ask for."""

    replica: str
    lines: list[str] = field(default_factory=list)
    replicas: tuple[str, ...] = ()


class Driver(Protocol):
    """What reconcile needs from a cluster. Every method is safe to call again."""

    def apply(self, ref: DeploymentRef, revision: RevisionPlan) -> None:
        """Run ``revision`` at its replicas; step a surge rollout away from other revisions."""

    def observe(self, ref: DeploymentRef) -> Observation:
        """The facts of everything this endpoint has on the cluster."""

    def stop(self, ref: DeploymentRef) -> bool:
        """Stop every engine and the router (desired state stopped); True once all are gone."""

    def delete(self, ref: DeploymentRef) -> bool:
        """Remove everything the endpoint owns; True once nothing is left (absent counts)."""

    def logs(self, ref: DeploymentRef, replica: str | None = None, tail: int = 200) -> LogLines:
        """The last ``tail`` lines of one replica's log; the first replica's when ``replica``
        is not one of the names it has (a name is matched, never used as a path)."""

    def close(self) -> None:
        """Release connections (the kube client's pool); running endpoints are unaffected."""
