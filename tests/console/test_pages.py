"""Every console page renders for a member, hides mutating controls from viewers, and shows
other organizations' objects as missing."""

from __future__ import annotations

import pytest
from django.test import Client

from deployments.endpoints.models import Deployment

ENDPOINT_PAGES = [
    "/endpoints/chat/",
    "/endpoints/chat/metrics/",
    "/endpoints/chat/events/",
    "/endpoints/chat/logs/",
    "/endpoints/chat/revisions/",
    "/endpoints/chat/revisions/diff/?a=1&b=1",
    "/endpoints/chat/settings/",
    "/endpoints/chat/delete/",
]
PLATFORM_PAGES = [
    "/endpoints/",
    "/endpoints/new/",
    "/keys/",
    "/usage/",
    "/costs/",
    "/members/",
    "/clusters/",
    "/fleet/",
    "/secrets/",
    "/audit/",
]


@pytest.mark.parametrize("url", ENDPOINT_PAGES + PLATFORM_PAGES)
def test_every_page_renders_for_the_owner(alice: Client, endpoint: Deployment, url: str) -> None:
    response = alice.get(url)
    assert response.status_code == 200, response.content[:500]
    assert b"plinth.css" in response.content
    assert b"csrfmiddlewaretoken" in response.content or b"X-CSRFToken" in response.content


@pytest.mark.parametrize("url", ENDPOINT_PAGES)
def test_another_organizations_endpoint_is_missing(
    bob: Client, endpoint: Deployment, url: str
) -> None:
    assert bob.get(url).status_code == 404


def test_pages_need_a_sign_in(endpoint: Deployment) -> None:
    response = Client().get("/endpoints/chat/")
    assert response.status_code == 302
    assert response["Location"].startswith("/login/")


def test_viewers_see_no_mutating_controls(carol: Client, endpoint: Deployment) -> None:
    detail = carol.get("/endpoints/chat/").content.decode()
    assert "Scale" not in detail and "Playground" not in detail and "Delete" not in detail
    assert "New endpoint" not in carol.get("/endpoints/").content.decode()
    revisions = carol.get("/endpoints/chat/revisions/").content.decode()
    assert "Roll back" not in revisions
    settings_page = carol.get("/endpoints/chat/settings/").content.decode()
    assert "Save as a new revision" not in settings_page
    assert "Create key" not in carol.get("/keys/").content.decode()


def test_viewers_cannot_open_the_create_wizard(carol: Client, endpoint: Deployment) -> None:
    response = carol.get("/endpoints/new/")
    assert response.status_code == 403
    assert b"developer role" in response.content


def test_viewers_are_refused_mutations(carol: Client, endpoint: Deployment) -> None:
    assert carol.post("/endpoints/chat/stop/").status_code == 403
    assert carol.post("/endpoints/chat/revisions/1/rollback/").status_code == 403
    endpoint.refresh_from_db()
    assert endpoint.desired_state == "running"
