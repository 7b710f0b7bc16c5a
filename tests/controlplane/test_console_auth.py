"""Console sign-in and organization switching."""

from __future__ import annotations

from django.test import Client

from tests.conftest import PASSWORD, Cast


def test_the_sign_in_page_renders_with_csrf(cast: Cast) -> None:
    response = Client(enforce_csrf_checks=True).get("/login/")
    assert response.status_code == 200
    assert b"csrfmiddlewaretoken" in response.content


def test_signing_in_and_out(cast: Cast) -> None:
    client = Client()
    response = client.post("/login/", {"username": "alice", "password": PASSWORD})
    assert response.status_code == 302
    home = client.get("/", follow=True)
    assert home.status_code == 200
    assert b"Acme" in home.content
    client.post("/logout/")
    assert client.get("/").status_code == 302


def test_a_wrong_password_is_refused_without_detail(cast: Cast) -> None:
    response = Client().post("/login/", {"username": "alice", "password": "nope"})
    assert response.status_code == 200
    assert b"didn't match" in response.content


def test_a_malformed_organization_id_is_ignored(cast: Cast) -> None:
    client = Client()
    client.force_login(cast.alice)
    assert client.post("/org/switch/", {"organization": "not-a-uuid"}).status_code == 302


def test_switching_to_an_org_one_does_not_belong_to_is_ignored(cast: Cast) -> None:
    client = Client()
    client.force_login(cast.alice)
    client.post("/org/switch/", {"organization": str(cast.globex.pk)})
    home = client.get("/", follow=True)
    assert b"Globex" not in home.content.split(b"<main")[1]
