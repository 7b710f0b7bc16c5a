"""The API keys page in a real browser (keys.js and console.js under the CSP): the role field only
for management keys, the endpoint picker searched on the server as one types with the ticked
endpoints kept, a new key's snippets following the chosen endpoint, limits changed from the
list, and a playground key revoked; axe-core finds nothing at desktop and phone widths with the
picker in use and with the new key on screen."""

from __future__ import annotations

import pytest
from playwright.sync_api import Page, expect

from controlplane import services as platform
from controlplane.models import ApiKey
from deployments.endpoints import services
from tests.browser.conftest import LiveConsole
from tests.browser.test_console_journey import answer_dialog, sign_in
from tests.browser.test_onboarding import axe_at_every_width
from tests.conftest import Cast

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]
SPEC = {"model": {"source": "meta-llama/Llama-3.1-8B-Instruct"}, "hardware": {"gpu": "H100-SXM"}}


def _endpoints(cast: Cast, *slugs: str) -> None:
    actor = cast.actor(cast.alice, cast.acme)
    for slug in slugs:
        endpoint = services.create_deployment(actor, slug=slug, name=slug.title(), spec=SPEC)
        services.stop(actor, endpoint.pk)  # nothing needs to run for this page


def test_keys_fit_the_kind_scope_snippets_and_limits(
    page: Page, live_console: LiveConsole, cast: Cast
) -> None:
    _endpoints(cast, "support-bot", "search", "summarise")
    actor = cast.actor(cast.alice, cast.acme)
    playground = platform.create_api_key(
        actor, name="playground search", kind="inference", temporary=True
    )
    sign_in(page, live_console)
    page.goto(f"{live_console.url}/keys/")

    role = page.get_by_label("Role")
    expect(role).to_be_hidden()  # an inference key has no role
    page.select_option("#key-kind", "management")
    expect(role).to_be_visible()
    expect(page.locator("#endpoint-search")).to_be_hidden()
    page.select_option("#key-kind", "inference")
    expect(role).to_be_hidden()

    # The picker searches on the server as one types; a ticked endpoint moves to the kept list
    # and stays in the form whatever the next search shows.
    results = page.locator("#endpoint-choices li")
    kept = page.locator("#endpoint-chosen")
    page.fill("#endpoint-search", "search")
    expect(results.filter(has_text="support-bot")).to_have_count(0)
    page.get_by_role("checkbox", name="Search search").check()
    expect(kept).to_contain_text("search")
    page.fill("#endpoint-search", "summ")
    expect(results.filter(has_text="summarise")).to_be_visible()
    page.get_by_role("checkbox", name="Summarise summarise").check()
    page.fill("#endpoint-search", "nothing like it")
    expect(page.locator("#endpoint-none")).to_be_visible()
    expect(kept.get_by_role("checkbox")).to_have_count(2)  # the ticked two are still there
    axe_at_every_width(page, "keys-picker")
    page.fill("#key-name", "app")
    page.fill("#key-rpm", "60")
    page.click("#create-key")

    key = ApiKey.objects.get(name="app")
    assert key.requests_per_minute == 60 and len(key.allowed_deployment_ids) == 2
    plaintext = page.locator("#created-key").input_value()
    search = page.locator('[data-snippets-for="search"]')
    summarise = page.locator('[data-snippets-for="summarise"]')
    expect(search).to_be_visible()
    expect(summarise).to_be_hidden()
    page.select_option("#snippet-endpoint", "summarise")
    expect(summarise).to_be_visible()
    expect(search).to_be_hidden()
    summarise.get_by_text("openai-node").click()
    expect(summarise).to_contain_text(f'apiKey: "{plaintext}"')
    expect(summarise).to_contain_text("/endpoints/summarise/v1")
    axe_at_every_width(page, "keys-created")

    # Limits change from the key's row.
    row = page.locator(f'tr[data-key="{key.prefix}"]')
    row.get_by_text("Change").click()
    row.get_by_label("Tokens/min").fill("5000")
    row.get_by_role("button", name="Save limits").click()
    expect(page.locator(".flash")).to_contain_text("Limits of app")
    expect(page.locator(f'tr[data-key="{key.prefix}"]')).to_contain_text("5000 tok/min")

    # The playground's key is listed apart, and revocable.
    listed = page.locator(f'tr[data-key="{playground.api_key.prefix}"]')
    expect(listed).to_contain_text("playground search")
    listed.get_by_role("button", name="Revoke").click()
    answer_dialog(page, "Revoke")
    expect(page.locator(f'tr[data-key="{playground.api_key.prefix}"]')).to_have_count(0)
