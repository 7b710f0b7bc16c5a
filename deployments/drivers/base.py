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

from dataclasses import dataclass, field
from typing import Protocol

from runtime.launch import LaunchPlan

PENDING = "pending"
STARTING = "starting"
LOADING = "loading"
RUNNING = "running"
READY = "ready"
FAILED = "failed"
TERMINATING = "terminating"
PHASES = (PENDING, STARTING, LOADING, RUNNING, READY, FAILED, TERMINATING)


@dataclass(frozen=True)
class DeploymentRef:
    """Which endpoint: its id (labels, directories) and slug (object names, log lines)."""

    id: str
    slug: str
    namespace: str = "plinth"


@dataclass(frozen=True)
class RevisionPlan:
    """What one revision runs. ``replicas`` is the desired number of engine replicas."""

    number: int
    plan: LaunchPlan
    replicas: int
    spec_hash: str = ""
    # Name of the Secret holding the model hub token, when the model is gated.
    hf_token: str | None = None


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
    replica: str
    lines: list[str] = field(default_factory=list)


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
        """The last ``tail`` lines of one replica's log (the first engine's when not named)."""

    def close(self) -> None:
        """Release connections (the kube client's pool); running endpoints are unaffected."""
