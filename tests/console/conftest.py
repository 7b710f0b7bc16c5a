"""Fixtures of the console view tests: signed-in clients of the cast, one endpoint in Acme."""

from __future__ import annotations

from typing import Any

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


@pytest.fixture(autouse=True)
def _fast_password_hashing(settings: Any) -> None:
    # The cast's four users are hashed per test; the real hasher is slow by design and these
    # tests sign in with force_login, so a fast hasher changes nothing they check.
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
