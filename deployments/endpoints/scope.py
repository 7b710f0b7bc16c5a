"""The domain's answer to ``controlplane.key_scope``: which ids are the organization's endpoints.

Registered in ``DeploymentsConfig.ready``; an endpoint being deleted still counts, as it does
everywhere an endpoint is looked up by id.
"""

from __future__ import annotations

import uuid

from controlplane.access import Actor
from deployments.endpoints.models import Deployment


def endpoints_among(actor: Actor, wanted: set[uuid.UUID]) -> set[uuid.UUID]:
    rows = Deployment.objects.filter(organization=actor.organization, pk__in=wanted)
    return set(rows.values_list("pk", flat=True))
