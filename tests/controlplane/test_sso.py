"""Single sign-on against a real OpenID Connect provider (node-oidc-provider, started by
tests/fixtures/oidc.py): the console's side runs in-process, the person's trip to the provider
is plain HTTP. The browser journey is tests/browser/test_sso_sign_in.py."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from urllib.parse import parse_qs, urlsplit

import pytest
from django.contrib.auth import get_user_model
from django.test import Client

from controlplane import services
from controlplane.models import ApiKey, AuditEvent, Membership, Organization, SsoIdentity
from controlplane.sso_mapping import parse_group_map
from tests.conftest import PASSWORD, Cast
from tests.fixtures.oidc import OidcProvider, sign_in_at_provider

GROUP_ROLES = {
    "acme-admins": "acme:admin",
    "acme-viewers": "acme:viewer",
    "globex-devs": "globex:developer",
}


@pytest.fixture
def sso(settings: object, oidc_provider: OidcProvider, cast: Cast) -> Iterator[OidcProvider]:
    """The console with single sign-on at the test's provider, passwords off."""
    env = oidc_provider.plinth_env(GROUP_ROLES)
    settings.SSO_ENABLED = True  # type: ignore[attr-defined]
    settings.PLINTH_OIDC_ISSUER = env["PLINTH_OIDC_ISSUER"]  # type: ignore[attr-defined]
    settings.PLINTH_OIDC_CLIENT_ID = env["PLINTH_OIDC_CLIENT_ID"]  # type: ignore[attr-defined]
    settings.PLINTH_OIDC_CLIENT_SECRET = env["PLINTH_OIDC_CLIENT_SECRET"]  # type: ignore[attr-defined]
    settings.PLINTH_OIDC_SCOPES = env["PLINTH_OIDC_SCOPES"]  # type: ignore[attr-defined]
    settings.PLINTH_OIDC_PROVIDER_NAME = env["PLINTH_OIDC_PROVIDER_NAME"]  # type: ignore[attr-defined]
    settings.PLINTH_OIDC_GROUP_ROLES = parse_group_map(json.dumps(GROUP_ROLES))  # type: ignore[attr-defined]
    settings.PLINTH_PASSWORD_SIGN_IN = False  # type: ignore[attr-defined]
    oidc_provider.reset()
    yield oidc_provider
    oidc_provider.reset()


def sign_in(console: Client, login: str, password: str = "idp-pass") -> object:
    """The whole trip; the console's answer at its callback."""
    trip = sign_in_at_provider(console, login, password)
    assert trip.callback is not None, trip.refusal
    return console.get(trip.callback)


def roles_of(username: str) -> dict[str, str]:
    rows = Membership.objects.filter(user__username=username).select_related("organization")
    return {m.organization.slug: m.role for m in rows}


def signed_in_as(console: Client) -> str | None:
    user_id = console.session.get("_auth_user_id")
    if user_id is None:
        return None
    return str(get_user_model().objects.get(pk=user_id).get_username())


def test_a_person_signs_in_and_gets_the_roles_their_groups_map_to(sso: OidcProvider) -> None:
    sso.set_account("erin", "idp-pass", ["acme-admins", "globex-devs", "unmapped"])
    console = Client()
    answer = sign_in(console, "erin")
    assert answer.status_code == 302 and answer["Location"] == "/"  # type: ignore[attr-defined]
    assert signed_in_as(console) == "erin"
    erin = get_user_model().objects.get(username="erin")  # made just in time
    assert not erin.has_usable_password()
    assert erin.email == "erin@example.test"
    identity = SsoIdentity.objects.get(user=erin)
    assert (identity.issuer, identity.subject) == (sso.issuer, "erin")
    assert roles_of("erin") == {"acme": "admin", "globex": "developer"}
    added = AuditEvent.objects.filter(action="member.add", target_repr__startswith="erin")
    assert {e.after["via"] for e in added} == {"sso"}  # type: ignore[index]
    home = console.get("/", follow=True)
    assert home.status_code == 200 and b"erin" in home.content


def test_a_group_change_takes_effect_at_the_next_sign_in(sso: OidcProvider) -> None:
    sso.set_account("erin", "idp-pass", ["acme-admins", "globex-devs"])
    sign_in(Client(), "erin")
    erin = get_user_model().objects.get(username="erin")
    acme = Organization.objects.get(slug="acme")
    actor = services.actor_for_user(erin, acme.pk)
    key = services.create_api_key(actor, name="ops", kind="management", role="admin").api_key

    sso.set_account("erin", "idp-pass", ["acme-viewers"])
    assert roles_of("erin") == {"acme": "admin", "globex": "developer"}  # until she signs in
    assert sign_in(Client(), "erin").status_code == 302  # type: ignore[attr-defined]
    assert roles_of("erin") == {"acme": "viewer"}
    # A demoted admin's management key goes, as when an admin demotes them by hand.
    key.refresh_from_db()
    assert key.revoked_at is not None
    assert SsoIdentity.objects.get(user=erin).groups == ["acme-viewers"]


def test_a_person_whose_groups_no_longer_grant_anything_is_refused(sso: OidcProvider) -> None:
    sso.set_account("erin", "idp-pass", ["acme-admins"])
    sign_in(Client(), "erin")
    sso.set_account("erin", "idp-pass", ["sales"])
    console = Client()
    answer = sign_in(console, "erin")
    assert answer.status_code == 403  # type: ignore[attr-defined]
    assert b"none of your groups (sales) gives access" in answer.content  # type: ignore[attr-defined]
    assert signed_in_as(console) is None
    assert roles_of("erin") == {}  # what the groups granted is gone, not left behind


def test_a_person_removed_from_the_directory_cannot_sign_in(sso: OidcProvider) -> None:
    sso.set_account("erin", "idp-pass", ["acme-admins"])
    sign_in(Client(), "erin")
    sso.remove_account("erin")
    console = Client()
    trip = sign_in_at_provider(console, "erin", "idp-pass")
    assert trip.callback is None and trip.refusal == "Unknown user or wrong password."
    assert signed_in_as(console) is None


def test_a_person_with_no_mapped_group_gets_no_account(sso: OidcProvider) -> None:
    sso.set_account("frank", "idp-pass", ["sales"])
    answer = sign_in(Client(), "frank")
    assert answer.status_code == 403  # type: ignore[attr-defined]
    assert not get_user_model().objects.filter(username="frank").exists()


def test_a_disabled_account_is_refused_whatever_its_groups(sso: OidcProvider) -> None:
    sso.set_account("erin", "idp-pass", ["acme-admins"])
    sign_in(Client(), "erin")
    get_user_model().objects.filter(username="erin").update(is_active=False)
    console = Client()
    answer = sign_in(console, "erin")
    assert answer.status_code == 403 and b"turned off" in answer.content  # type: ignore[attr-defined]
    assert signed_in_as(console) is None


def test_a_local_account_of_the_same_name_is_not_taken_over(sso: OidcProvider, cast: Cast) -> None:
    sso.set_account("alice", "idp-pass", ["acme-viewers"])
    console = Client()
    answer = sign_in(console, "alice")
    assert answer.status_code == 403  # type: ignore[attr-defined]
    assert b"does not sign in through Test IdP" in answer.content  # type: ignore[attr-defined]
    assert signed_in_as(console) is None
    assert roles_of("alice") == {"acme": "owner"}  # untouched


@pytest.mark.parametrize(
    ("tamper", "reason"),
    [
        ("audience", b"aud"),
        ("issuer", b"iss"),
        ("nonce", b"nonce"),
        ("signature", b"signature"),
    ],
)
def test_an_id_token_that_does_not_verify_is_refused(
    sso: OidcProvider, tamper: str, reason: bytes
) -> None:
    sso.set_account("erin", "idp-pass", ["acme-admins"])
    sso.tamper(tamper)
    console = Client()
    answer = sign_in(console, "erin")
    assert answer.status_code == 403  # type: ignore[attr-defined]
    assert b"did not verify" in answer.content and reason in answer.content  # type: ignore[attr-defined]
    assert signed_in_as(console) is None
    assert not get_user_model().objects.filter(username="erin").exists()
    sso.tamper(None)  # the same person, an honest token: in
    assert sign_in(console, "erin").status_code == 302  # type: ignore[attr-defined]


def test_a_callback_from_another_browser_is_refused(sso: OidcProvider) -> None:
    sso.set_account("erin", "idp-pass", ["acme-admins"])
    trip = sign_in_at_provider(Client(), "erin", "idp-pass")
    stranger = Client()  # never started this sign-in: no state, no verifier, no nonce
    answer = stranger.get(trip.callback)
    assert answer.status_code == 403
    assert signed_in_as(stranger) is None


def test_the_console_asks_for_the_code_with_pkce(sso: OidcProvider) -> None:
    start = Client().get("/login/sso/?next=/endpoints/")
    query = parse_qs(urlsplit(start["Location"]).query)
    assert query["code_challenge_method"] == ["S256"] and query["code_challenge"]
    assert query["response_type"] == ["code"] and query["nonce"] and query["state"]


def test_signing_in_returns_to_the_page_asked_for_on_this_site(sso: OidcProvider) -> None:
    sso.set_account("erin", "idp-pass", ["acme-admins"])
    console = Client()
    trip = sign_in_at_provider(console, "erin", "idp-pass", start="/login/sso/?next=/members/")
    assert console.get(trip.callback)["Location"] == "/members/"
    console = Client()
    trip = sign_in_at_provider(
        console, "erin", "idp-pass", start="/login/sso/?next=https://x.example/"
    )
    assert console.get(trip.callback)["Location"] == "/"  # off-site: never followed


def test_password_sign_in_is_refused_while_single_sign_on_is_on(sso: OidcProvider) -> None:
    page = Client().get("/login/")
    assert b"Sign in with Test IdP" in page.content and b'name="password"' not in page.content
    console = Client()
    answer = console.post("/login/", {"username": "alice", "password": PASSWORD})
    assert answer.status_code == 403
    assert b"does not accept Plinth passwords" in answer.content
    assert signed_in_as(console) is None
    # The admin site's own form is no way round it.
    assert console.get("/admin/login/?next=/admin/")["Location"] == "/login/?next=%2Fadmin%2F"
    refused = console.post("/admin/login/", {"username": "alice", "password": PASSWORD})
    assert refused.status_code == 403 and signed_in_as(console) is None


def test_passwords_can_stay_on_beside_single_sign_on(sso: OidcProvider, settings: object) -> None:
    settings.PLINTH_PASSWORD_SIGN_IN = True  # type: ignore[attr-defined]
    page = Client().get("/login/")
    assert b"Sign in with Test IdP" in page.content and b'name="password"' in page.content
    console = Client()
    assert console.post("/login/", {"username": "alice", "password": PASSWORD}).status_code == 302
    assert signed_in_as(console) == "alice"


def test_signing_out_ends_the_providers_session_too(sso: OidcProvider) -> None:
    sso.set_account("erin", "idp-pass", ["acme-admins"])
    console = Client()
    sign_in(console, "erin")
    answer = console.post("/logout/")
    assert signed_in_as(console) is None
    end = urlsplit(answer["Location"])
    assert f"{end.scheme}://{end.netloc}{end.path}" == f"{sso.issuer}/session/end"
    query = parse_qs(end.query)
    assert query["post_logout_redirect_uri"] == ["http://testserver/login/"]
    assert query["id_token_hint"] and query["client_id"] == [sso.client_id]


def test_a_password_session_signs_out_here_only(sso: OidcProvider, cast: Cast) -> None:
    console = Client()
    console.force_login(cast.alice)
    assert console.post("/logout/")["Location"] == "/login/"
    assert signed_in_as(console) is None


def test_management_api_keys_still_work_beside_single_sign_on(
    sso: OidcProvider, cast: Cast
) -> None:
    actor = services.actor_for_user(cast.alice, cast.acme.pk)
    created = services.create_api_key(actor, name="ci", kind="management", role="developer")
    answer = Client().get("/api/v1/deployments", HTTP_AUTHORIZATION=f"Bearer {created.plaintext}")
    assert answer.status_code == 200
    assert ApiKey.objects.filter(revoked_at=None, pk=created.api_key.pk).exists()


def test_no_secret_of_the_sign_in_reaches_the_logs(
    sso: OidcProvider, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)  # the most an operator can ask for (LOG_LEVEL=DEBUG)
    sso.set_account("erin", "idp-pass", ["acme-admins"])
    console = Client()
    sign_in(console, "erin")
    id_token = console.session["plinth_sso_id_token"]
    sso.tamper("signature")
    sign_in(Client(), "erin")  # a refusal logs its reason
    logged = caplog.text
    assert "refused" in logged and "bad_signature" in logged
    for secret in (sso.client_secret, id_token, "code_verifier", "idp-pass"):
        assert secret not in logged


def test_the_members_page_says_the_groups_decide_roles(
    sso: OidcProvider, cast: Cast, settings: object
) -> None:
    console = Client()
    console.force_login(cast.alice)
    page = console.get("/members/")
    assert b"Roles here come from Test IdP groups" in page.content
    settings.SSO_ENABLED = False  # type: ignore[attr-defined]
    assert b"Roles here come from" not in console.get("/members/").content


def test_a_sign_in_the_provider_did_not_complete_says_so(sso: OidcProvider) -> None:
    console = Client()
    console.get("/login/sso/")
    answer = console.get("/login/sso/callback/?error=access_denied&error_description=cancelled")
    assert answer.status_code == 403
    assert b"Test IdP did not sign you in (access_denied cancelled)" in answer.content
    assert signed_in_as(console) is None
