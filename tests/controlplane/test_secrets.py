"""Secrets: encrypted at rest and never shown back through any interface."""

from __future__ import annotations

import logging

import pytest
from django.db import connection
from django.http import HttpRequest
from django.test import Client

from controlplane import services
from controlplane.access import AccessDenied, NotFound
from controlplane.models import AuditEvent, Secret
from tests.conftest import PASSWORD, Cast

VALUE = "hf_SuperSecretTokenValue1234567890"


def test_the_value_is_encrypted_at_rest_and_decrypts(cast: Cast) -> None:
    secret = services.set_secret(cast.actor(cast.alice, cast.acme), name="hf-token", value=VALUE)
    with connection.cursor() as cursor:
        cursor.execute("SELECT * FROM controlplane_secret")
        assert VALUE not in repr(cursor.fetchall())
    assert services.reveal_secret(Secret.objects.get(pk=secret.pk)) == VALUE


def test_the_value_never_reaches_audit_logs_or_repr(
    cast: Cast, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    actor = cast.actor(cast.alice, cast.acme)
    secret = services.set_secret(actor, name="hf-token", value=VALUE)
    services.set_secret(actor, name="hf-token", value=VALUE + "-rotated")
    events = list(AuditEvent.objects.filter(target_type="controlplane.secret"))
    assert [e.action for e in events] == ["secret.update", "secret.create"]
    for event in events:
        assert VALUE not in f"{event.before} {event.after} {event.target_repr}"
    assert VALUE not in repr(secret) and VALUE not in str(secret)
    assert VALUE not in caplog.text


def test_the_admin_never_shows_the_value(cast: Cast) -> None:
    from django.contrib.auth import get_user_model

    get_user_model().objects.create_superuser("root", password=PASSWORD)
    secret = services.set_secret(cast.actor(cast.alice, cast.acme), name="hf-token", value=VALUE)
    client = Client()
    # django-axes counts attempts per address, so authentication needs the request.
    assert client.login(request=HttpRequest(), username="root", password=PASSWORD)
    for url in (
        "/admin/controlplane/secret/",
        f"/admin/controlplane/secret/{secret.pk}/change/",
        "/admin/controlplane/auditevent/",
    ):
        response = client.get(url)
        assert response.status_code == 200
        assert VALUE not in response.content.decode()
        assert secret.ciphertext not in response.content.decode()


def test_only_admins_write_secrets(cast: Cast) -> None:
    with pytest.raises(AccessDenied):
        services.set_secret(cast.actor(cast.dave, cast.acme), name="x", value="y")
    with pytest.raises(AccessDenied):
        services.set_secret(cast.actor(cast.carol, cast.acme), name="x", value="y")


def test_secrets_of_another_organization_look_missing(cast: Cast) -> None:
    secret = services.set_secret(cast.actor(cast.alice, cast.acme), name="hf", value=VALUE)
    with pytest.raises(NotFound):
        services.delete_secret(cast.actor(cast.bob, cast.globex), secret_id=secret.pk)
    assert Secret.objects.filter(pk=secret.pk).exists()


def test_bad_names_and_empty_values_are_refused_by_field(cast: Cast) -> None:
    actor = cast.actor(cast.alice, cast.acme)
    with pytest.raises(services.ServiceError) as err:
        services.set_secret(actor, name="Bad Name", value="v")
    assert err.value.field == "name"
    with pytest.raises(services.ServiceError) as err:
        services.set_secret(actor, name="ok", value="")
    assert err.value.field == "value"
