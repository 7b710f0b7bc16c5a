"""The fleet page in a real browser: each cluster's health, GPUs and the endpoints on it with
their replicas there; a cluster that becomes unavailable shows it without a reload (htmx's
poll); axe-core finds nothing at desktop and phone widths. The placements and the cluster's
availability are written as the fleet's reconcile and health check record them (this page only
reads them)."""

from __future__ import annotations

import pytest
from django.utils import timezone
from playwright.sync_api import Page, expect

from deployments.clusters.models import Cluster
from deployments.endpoints import services
from deployments.fleet.models import Placement
from tests.browser.conftest import LiveConsole
from tests.browser.test_console_journey import sign_in
from tests.browser.test_onboarding import axe_at_every_width
from tests.conftest import Cast

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]
SPEC = {"model": {"source": "meta-llama/Llama-3.1-8B-Instruct"}, "hardware": {"gpu": "H100-SXM"}}
INVENTORY = {"nodes": [], "gpus": {"H100-SXM": {"nodes": 2, "gpus": 16, "free": 6}}, "error": ""}


def test_the_fleet_page_shows_where_replicas_run_and_a_cluster_going_down(
    page: Page, live_console: LiveConsole, cast: Cast
) -> None:
    actor = cast.actor(cast.alice, cast.acme)
    endpoint = services.create_deployment(actor, slug="support-bot", name="Support", spec=SPEC)
    for name, ready in (("gpu-east", 2), ("gpu-west", 1)):
        where = Cluster.objects.create(
            organization=cast.acme, name=name, kind="kubernetes", gpu_inventory=INVENTORY
        )
        Placement.objects.create(
            deployment=endpoint, cluster=where, desired_replicas=2, ready_replicas=ready
        )
    sign_in(page, live_console)
    page.get_by_role("link", name="Fleet").click()

    west = page.locator('[data-cluster="gpu-west"]')
    expect(west.locator(".badge")).to_have_text("Healthy")
    expect(west.locator('tr[data-gpu="H100-SXM"]')).to_contain_text("16")
    expect(west.locator('tr[data-slug="support-bot"] .replicas')).to_have_text("1 / 2")
    axe_at_every_width(page, "fleet")

    Cluster.objects.filter(name="gpu-west").update(
        available=False,
        unavailable_since=timezone.now(),
        unavailable_reason="the API server did not answer",
    )
    expect(west.locator(".badge")).to_have_text("Unavailable", timeout=20_000)
    expect(west).to_contain_text("the API server did not answer")
