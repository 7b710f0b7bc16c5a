"""Which endpoints (and LoRA adapters) an inference key may be limited to: endpoints are a
question the platform asks the domain; adapter names are checked for their shape only.

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
from controlplane.models import MAX_ADAPTER_NAME

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


def clean_adapters(names: list[str]) -> list[str]:
    """An adapter allow-list: names as an endpoint's spec gives them (they need not be served
    yet: a key may be made before its adapter is added), unique, in the given order; a
    ValueError saying what is wrong otherwise."""
    cleaned: list[str] = []
    for name in names:
        name = name.strip() if isinstance(name, str) else ""
        if not name or len(name) > MAX_ADAPTER_NAME or ":" in name or not name.isprintable():
            raise ValueError(
                f"adapter names are 1 to {MAX_ADAPTER_NAME} printable characters without ':'"
            )
        if name not in cleaned:
            cleaned.append(name)
    return cleaned
