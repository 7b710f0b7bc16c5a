"""Which endpoints an inference key may be limited to: a question the platform asks the domain.

A key's scope names endpoints, and endpoints belong to the deployments domain, which sits above
this layer: the platform may not import it (import-linter). So the domain registers its answer
when Django starts (``deployments.apps``), and ``controlplane.services.create_api_key`` asks it.
A key is scoped in the one call that creates it, whichever front-end makes that call, and none
has to remember a check of its own.

Until an answer is registered no id is anyone's endpoint, so a scope is refused, never taken
unchecked.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable

from controlplane.access import Actor

# (actor, wanted ids) -> those of the wanted ids that are endpoints of the actor's organization.
EndpointsAmong = Callable[[Actor, set[uuid.UUID]], set[uuid.UUID]]


def _none_known(actor: Actor, wanted: set[uuid.UUID]) -> set[uuid.UUID]:
    return set()


_endpoints_among: EndpointsAmong = _none_known


def register(endpoints_among: EndpointsAmong) -> None:
    """Install the domain's answer (called once, from ``DeploymentsConfig.ready``)."""
    global _endpoints_among
    _endpoints_among = endpoints_among


def unknown_endpoints(actor: Actor, ids: list[uuid.UUID]) -> set[uuid.UUID]:
    """The ids that are not endpoints of the actor's organization (none asked: none unknown)."""
    wanted = set(ids)
    if not wanted:
        return set()
    return wanted - _endpoints_among(actor, wanted)
