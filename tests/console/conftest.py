"""Fixtures of the console view tests: signed-in clients of the cast, one endpoint in Acme.

tests/console holds the console's own checks, across every noun's pages, and the fixtures they
share; fixtures that other folders use too live in tests/fixtures/.
"""

from __future__ import annotations

import pytest
from django.test import Client

from deployments.endpoints import services
from deployments.endpoints.models import Deployment
from tests.conftest import Cast

SPEC = {"model": {"source": "meta-llama/Llama-3.1-8B-Instruct"}, "hardware": {"gpu": "H100-SXM"}}


def signed_in(user: object) -> Client:
    client = Client()
    client.force_login(user)  # type: ignore[arg-type]
    return client


@pytest.fixture
def alice(cast: Cast) -> Client:
    return signed_in(cast.alice)


@pytest.fixture
def carol(cast: Cast) -> Client:
    """A viewer in Acme."""
    return signed_in(cast.carol)


@pytest.fixture
def bob(cast: Cast) -> Client:
    """Owner of Globex: Acme's objects must look missing to him."""
    return signed_in(cast.bob)


@pytest.fixture
def endpoint(cast: Cast) -> Deployment:
    actor = cast.actor(cast.alice, cast.acme)
    return services.create_deployment(actor, slug="chat", name="Chat", spec=SPEC)
