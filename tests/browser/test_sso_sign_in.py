"""Single sign-on in a real browser: Chromium, the live console and a real OpenID Connect
provider (node-oidc-provider, tests/fixtures/oidc.py). The authorization-code flow with PKCE
from the console's button through the provider's sign-in page and back, the role the person's
group maps to, a group change taking effect at the next sign-in, sign-out ending the provider's
session too, and a person removed from the directory refused. ID tokens that do not verify are
refused in tests/controlplane/test_sso.py, through the same callback."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Page, expect

from tests.browser.conftest import LiveConsole, free_port
from tests.browser.test_console_journey import shoot
from tests.conftest import Cast
from tests.fixtures.oidc import OidcProvider, start_provider, stop_provider

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]
GROUP_ROLES = {"acme-admins": "acme:admin", "acme-viewers": "acme:viewer"}


@pytest.fixture(scope="module")
def live_console_port() -> int:
    return free_port()


@pytest.fixture(scope="module")
def idp(
    live_console_port: int, oidc_modules: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[OidcProvider]:
    console_url = f"http://127.0.0.1:{live_console_port}"
    provider, process = start_provider(tmp_path_factory.mktemp("idp"), oidc_modules, console_url)
    try:
        yield provider
    finally:
        stop_provider(process)


@pytest.fixture(scope="module")
def live_console_env(idp: OidcProvider) -> dict[str, str]:
    return idp.plinth_env(GROUP_ROLES)


def sign_in_through_the_provider(page: Page, console: LiveConsole, password: str) -> None:
    page.goto(f"{console.url}/endpoints/")
    expect(page.locator("#id_password")).to_have_count(0)  # no password form: SSO only
    page.get_by_role("link", name="Sign in with Test IdP").click()
    expect(page.get_by_role("heading", name="Test IdP")).to_be_visible()
    page.fill("#login", "erin")
    page.fill("#password", password)
    page.get_by_role("button", name="Sign in to the IdP").click()


def sign_out(page: Page, console: LiveConsole) -> None:
    page.get_by_role("button", name="Sign out").click()
    # The provider asks whether to end its session too (its own page), then sends us back.
    page.get_by_role("button", name="Yes, sign me out").click()
    page.wait_for_url(f"{console.url}/login/**")
    expect(page.get_by_role("link", name="Sign in with Test IdP")).to_be_visible()


def test_a_person_signs_in_with_the_provider_and_gets_their_groups_role(
    page: Page, live_console: LiveConsole, idp: OidcProvider, cast: Cast
) -> None:
    idp.reset()
    idp.set_account("erin", "idp-pass", ["acme-admins"])
    sign_in_through_the_provider(page, live_console, "idp-pass")
    page.wait_for_url(f"{live_console.url}/endpoints/")  # back where they asked to go
    expect(page.get_by_role("heading", name="Endpoints")).to_be_visible()
    expect(page.locator("header")).to_contain_text("erin · admin")
    shoot(page, "sso-signed-in")

    # The directory moves erin to the viewers; her console changes at her next sign-in.
    idp.set_account("erin", "idp-pass", ["acme-viewers"])
    sign_out(page, live_console)
    sign_in_through_the_provider(page, live_console, "idp-pass")  # the provider asks again
    page.wait_for_url(f"{live_console.url}/endpoints/")
    expect(page.locator("header")).to_contain_text("erin · viewer")

    # Removed from the directory: the provider refuses her, and the console never lets her in.
    idp.remove_account("erin")
    sign_out(page, live_console)
    sign_in_through_the_provider(page, live_console, "idp-pass")
    expect(page.locator("#error")).to_have_text("Unknown user or wrong password.")
    page.goto(f"{live_console.url}/endpoints/")
    page.wait_for_url(f"{live_console.url}/login/**")

    # The console had the client secret from its environment; no log of its says it.
    for log in live_console.logs.glob("*.log"):
        assert idp.client_secret not in log.read_text(errors="replace"), log.name
