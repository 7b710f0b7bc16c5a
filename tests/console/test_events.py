"""Events that read right (Issue 18): the timeline grouped by rollout, each group headed by a
link to its revision, and the events that name no revision kept in the rollout they fell in."""

from __future__ import annotations

import re
from datetime import timedelta

from django.test import Client
from django.utils import timezone

from deployments.endpoints.models import Deployment, DeploymentEvent
from deployments.endpoints.timeline import by_rollout, record_event


def _timeline(endpoint: Deployment) -> None:
    """Revision 1 deploys, the autoscaler acts, revision 2 rolls out and fails (oldest first)."""
    lines = [
        ("info", "Deploying", "revision 1: starting 1 replica(s); deadline 600 s", 1),
        ("info", "Ready", "revision 1 is serving", 1),
        ("info", "ScaledUp", "2 replicas for 40 in flight", None),
        ("info", "RolloutStarted", "revision 2: starting 2 replica(s); deadline 600 s", 2),
        ("warning", "RolloutFailed", "revision 2 was not ready; rolled back", 2),
    ]
    start = timezone.now() - timedelta(minutes=10)
    for n, (level, reason, message, revision) in enumerate(lines):
        event = record_event(endpoint, level, reason, message, revision)
        # Distinct times, in order: the timeline sorts by time.
        DeploymentEvent.objects.filter(pk=event.pk).update(created_at=start + timedelta(seconds=n))


def test_events_are_grouped_by_rollout_newest_first(endpoint: Deployment) -> None:
    DeploymentEvent.objects.filter(deployment=endpoint).delete()
    _timeline(endpoint)
    groups = by_rollout(DeploymentEvent.objects.filter(deployment=endpoint))
    assert [(g.revision_number, [e.reason for e in g.events]) for g in groups] == [
        (2, ["RolloutFailed", "RolloutStarted"]),
        (1, ["ScaledUp", "Ready", "Deploying"]),
    ]
    assert [g.level for g in groups] == ["warning", "info"]


def test_the_events_page_heads_each_rollout_with_a_link_to_its_revision(
    alice: Client, endpoint: Deployment
) -> None:
    DeploymentEvent.objects.filter(deployment=endpoint).delete()
    _timeline(endpoint)
    page = alice.get("/endpoints/chat/events/").content.decode()
    heads = re.findall(r'<h3 class="rollout-head"[^>]*>(.*?)</h3>', page, re.S)
    assert len(heads) == 2
    assert 'href="/endpoints/chat/revisions/#revision-2">Revision 2</a>' in heads[0]
    assert "2 events" in heads[0]
    assert 'href="/endpoints/chat/revisions/#revision-1">Revision 1</a>' in heads[1]
    assert "3 events" in heads[1]
    assert "rollout-warning" in page
    # The revisions page has the anchors the headings link to.
    revisions = alice.get("/endpoints/chat/revisions/").content.decode()
    assert 'id="revision-1"' in revisions


def test_the_overview_groups_its_latest_events_too(alice: Client, endpoint: Deployment) -> None:
    DeploymentEvent.objects.filter(deployment=endpoint).delete()
    _timeline(endpoint)
    page = alice.get("/endpoints/chat/").content.decode()
    assert 'href="/endpoints/chat/revisions/#revision-2">Revision 2</a>' in page
