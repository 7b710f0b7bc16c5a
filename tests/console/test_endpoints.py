"""The endpoints list and the endpoint page: live polling that stops when settled, filters,
bounded queries, and the lifecycle actions."""

from __future__ import annotations

from typing import Any

from django.db import connection
from django.db.models import F
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from deployments.endpoints import reconcile, services
from deployments.endpoints.models import Deployment
from deployments.traffic.models import MetricSample
from tests.conftest import Cast
from tests.console.conftest import SPEC

HTMX = {"HTTP_HX_REQUEST": "true"}


def _mark_active(endpoint: Deployment) -> None:
    """Stand in for reconcile: the facts of one ready replica of the target revision."""
    Deployment.objects.filter(pk=endpoint.pk).update(
        applied_revision=endpoint.target_revision,
        current_revision=endpoint.target_revision,
        ready_replicas=1,
        total_replicas=1,
        first_ready_at=timezone.now(),
        observed_generation=F("generation"),  # the pass acted on every change so far
    )


def test_the_list_polls_while_an_endpoint_is_pending(alice: Client, endpoint: Deployment) -> None:
    page = alice.get("/endpoints/").content.decode()
    assert 'hx-trigger="every 2s"' in page
    assert "Pending" in page and "H100-SXM \N{MULTIPLICATION SIGN} 1" in page
    rows = alice.get("/endpoints/", **HTMX)
    assert rows.status_code == 200
    assert b"<html" not in rows.content


def test_the_list_stops_polling_once_everything_is_settled(
    alice: Client, endpoint: Deployment
) -> None:
    _mark_active(endpoint)
    assert 'hx-trigger="every 2s"' not in alice.get("/endpoints/").content.decode()
    rows = alice.get("/endpoints/", **HTMX)
    assert rows.status_code == 286
    assert b"Active" in rows.content


def test_the_list_filters_by_search_and_status(
    cast: Cast, alice: Client, endpoint: Deployment
) -> None:
    actor = cast.actor(cast.alice, cast.acme)
    services.create_deployment(actor, slug="coder", name="Coder", spec=SPEC)
    _mark_active(endpoint)
    assert b"coder" not in alice.get("/endpoints/?q=cha").content
    found = alice.get("/endpoints/?status=pending").content
    assert b"coder" in found and b'data-slug="chat"' not in found


def test_the_list_shows_requests_per_second(alice: Client, endpoint: Deployment) -> None:
    MetricSample.objects.create(deployment=endpoint, ts=timezone.now(), requests_per_s=12.5)
    assert b"12.50" in alice.get("/endpoints/").content


def test_the_list_takes_a_fixed_number_of_queries(cast: Cast, alice: Client) -> None:
    actor = cast.actor(cast.alice, cast.acme)

    def count() -> int:
        with CaptureQueriesContext(connection) as ctx:
            assert alice.get("/endpoints/").status_code == 200
        return len(ctx.captured_queries)

    services.create_deployment(actor, slug="one", name="One", spec=SPEC)
    few = count()
    for n in range(5):
        services.create_deployment(actor, slug=f"more-{n}", name="More", spec=SPEC)
    assert count() == few
    assert few <= 10


def test_the_status_card_polls_until_settled(alice: Client, endpoint: Deployment) -> None:
    page = alice.get("/endpoints/chat/").content.decode()
    assert 'hx-get="/endpoints/chat/status/"' in page
    assert alice.get("/endpoints/chat/status/", **HTMX).status_code == 200
    _mark_active(endpoint)
    card = alice.get("/endpoints/chat/status/", **HTMX)
    assert card.status_code == 286
    assert b"Active" in card.content and b"hx-trigger" not in card.content


def test_the_endpoint_page_shows_the_url_and_snippets(alice: Client, endpoint: Deployment) -> None:
    page = alice.get("/endpoints/chat/").content.decode()
    assert "/endpoints/chat/v1" in page
    assert "curl " in page and "from openai import OpenAI" in page
    assert "meta-llama/Llama-3.1-8B-Instruct" in page


def test_scale_stop_start(alice: Client, endpoint: Deployment) -> None:
    assert alice.post("/endpoints/chat/scale/", {"replicas": "1"}).status_code == 302
    alice.post("/endpoints/chat/stop/")
    endpoint.refresh_from_db()
    assert endpoint.desired_state == "stopped"
    alice.post("/endpoints/chat/start/")
    endpoint.refresh_from_db()
    assert endpoint.desired_state == "running"


def test_a_bad_replica_count_is_a_message_not_an_error(alice: Client, endpoint: Deployment) -> None:
    response = alice.post("/endpoints/chat/scale/", {"replicas": "many"}, follow=True)
    assert response.status_code == 200
    assert b"replicas: enter a whole number" in response.content


def test_delete_asks_for_the_slug(alice: Client, endpoint: Deployment) -> None:
    refused = alice.post("/endpoints/chat/delete/", {"confirm_slug": "chta"})
    assert refused.status_code == 422
    assert b"type chat to confirm" in refused.content
    endpoint.refresh_from_db()
    assert endpoint.desired_state == "running"
    done = alice.post("/endpoints/chat/delete/", {"confirm_slug": "chat"})
    assert done.status_code == 302
    endpoint.refresh_from_db()
    assert endpoint.desired_state == "deleted"


def test_posting_needs_the_csrf_token(cast: Cast, endpoint: Deployment) -> None:
    client = Client(enforce_csrf_checks=True)
    client.force_login(cast.alice)
    assert client.post("/endpoints/chat/stop/").status_code == 403
    endpoint.refresh_from_db()
    assert endpoint.desired_state == "running"


def test_logs_tail_the_replica_files(
    alice: Client, endpoint: Deployment, settings: Any, tmp_path: Any
) -> None:
    settings.PLINTH_LOCAL_RUN_DIR = tmp_path
    run_dir = tmp_path / str(endpoint.pk)
    run_dir.mkdir()
    (run_dir / "r1-engine-0.log").write_text("".join(f"line {i}\n" for i in range(1000)))
    (run_dir / "router.log").write_text("router up\n")
    page = alice.get("/endpoints/chat/logs/").content.decode()
    assert "line 999" in page and "line 10\n" not in page
    assert '<option value="router"' in page
    router = alice.get("/endpoints/chat/logs/?replica=router", **HTMX).content.decode()
    assert "router up" in router
    # An unknown or path-like name falls back to the first file, never reads outside the dir.
    sneaky = alice.get("/endpoints/chat/logs/?replica=../../etc/passwd").content.decode()
    assert "root:" not in sneaky and "line 999" in sneaky


def test_logs_download_as_a_text_file_with_times_on_request(
    alice: Client, endpoint: Deployment, settings: Any, tmp_path: Any
) -> None:
    settings.PLINTH_LOCAL_RUN_DIR = tmp_path
    (tmp_path / str(endpoint.pk)).mkdir()
    log = "2025-06-01T12:00:00Z engine up --api-key sk-live-value\ncontinued\n"
    (tmp_path / str(endpoint.pk) / "r1-engine-0.log").write_text(log)
    plain = alice.get("/endpoints/chat/logs/download/?replica=r1-engine-0")
    assert plain["Content-Type"] == "text/plain; charset=utf-8"
    assert plain["Content-Disposition"] == 'attachment; filename="chat-r1-engine-0.log"'
    assert plain.content.decode() == "2025-06-01T12:00:00Z engine up --api-key ***\ncontinued\n"
    stamped = alice.get("/endpoints/chat/logs/download/?timestamps=1").content.decode()
    assert stamped.splitlines()[1] == "2025-06-01T12:00:00+00:00 continued"
    page = alice.get("/endpoints/chat/logs/").content.decode()
    assert "/endpoints/chat/logs/download/?replica=r1-engine-0&amp;tail=300" in page


def test_a_followed_log_starts_over_when_its_file_was_replaced(
    alice: Client, endpoint: Deployment, settings: Any, tmp_path: Any
) -> None:
    settings.PLINTH_LOCAL_RUN_DIR = tmp_path
    root = tmp_path / str(endpoint.pk)
    root.mkdir()
    (root / "r1-engine-0.log").write_text("old run\n")
    page = alice.get("/endpoints/chat/logs/?follow=1").content.decode()
    poll_url = page.split('id="log-follow" hx-get="', 1)[1].split('"', 1)[0].replace("&amp;", "&")
    (root / "r1-engine-0.log").unlink()
    (root / "r1-engine-0.log").write_text("new run\n")
    poll = alice.get(poll_url, **HTMX).content.decode()
    assert 'hx-swap-oob="innerHTML:#log-lines"' in poll and "new run" in poll


def test_viewers_neither_see_nor_open_logs(carol: Client, endpoint: Deployment) -> None:
    assert "/logs/" not in carol.get("/endpoints/chat/").content.decode()
    assert carol.get("/endpoints/chat/logs/").status_code == 403
    assert carol.get("/endpoints/chat/logs/download/").status_code == 403


def test_the_status_card_of_a_removed_endpoint_stops_polling(
    cast: Cast, alice: Client, endpoint: Deployment
) -> None:
    services.delete_deployment(cast.actor(cast.alice, cast.acme), endpoint.pk)
    reconcile.finalize_deletion(endpoint.pk)
    card = alice.get("/endpoints/chat/status/", **HTMX)
    assert card.status_code == 286 and b"no longer exists" in card.content


def test_another_orgs_status_card_looks_like_a_missing_one(
    bob: Client, endpoint: Deployment
) -> None:
    card = bob.get("/endpoints/chat/status/", **HTMX)
    assert card.status_code == 286 and b"no longer exists" in card.content
    assert b"Pending" not in card.content and b"meta-llama" not in card.content
