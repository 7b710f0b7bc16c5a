"""The console's cross-organization sweep, generated from the URL resolver.

Every console URL pattern (all but the admin site and /api/v1, which has its own sweep) is
requested by bob (Globex's owner) against Acme's objects, with GET, GET as htmx and POST with a
form that would succeed for Acme's owner: the answer is 403, 404 or 405, never a page with
Acme's data, and nothing changes in Acme. Pages without parameters answer bob about Globex,
with no trace of Acme; forms that name an Acme object (a cluster, a kubeconfig, an endpoint to
limit a key to, an organization to switch to) are refused. The same routes without signing in
redirect to the login page or refuse. A new pattern fails until it is classified here.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from django.db import transaction
from django.test import Client
from django.urls import URLPattern, URLResolver, get_resolver, reverse

from controlplane.middleware import SESSION_ORG_KEY
from tests.sweep.world import SPEC_V2, World, cross_references, foreign, leaked, state_of

SKIPPED_PREFIXES = ("admin/", "api/v1/")  # Django's admin (staff only); the API's own sweep
HTMX = {"HTTP_HX_REQUEST": "true"}
FORM = {
    "model.source": "meta-llama/Llama-3.1-8B-Instruct",
    "hardware.gpu": "H100-SXM",
    "parallelism.tp": "1",
    "autoscaling.min_replicas": "1",
    "autoscaling.max_replicas": "3",
}
Form = Callable[[World], dict[str, Any]]


@dataclass(frozen=True)
class Page:
    """How bob's requests to one pattern are judged. ``post``: a form that would succeed for
    Acme's owner (None: the page takes no form worth sweeping). ``refused``: the statuses the
    POST may get; None: any, judged by leaks, state and cross-references."""

    post: Form | None = None
    refused: frozenset[int] | None = None
    public: bool = False  # served to anyone, signed in or not
    # A missing object's answer, where it is not a refusal (the status card's "gone" card
    # stops the poll with htmx's 286); another organization's object must get the same.
    missing: int | None = None


REFUSED = frozenset({403, 404, 405})
EMPTY: Form = lambda w: {}  # noqa: E731

# Patterns with parameters name Acme's objects: every request must be refused.
OBJECT_PAGES: dict[str, Page] = {
    "endpoint-detail": Page(EMPTY),
    "endpoint-status": Page(EMPTY, missing=286),
    "endpoint-first-call": Page(EMPTY),
    "endpoint-scale": Page(lambda w: {"replicas": "2"}),
    "endpoint-placement": Page(
        lambda w: {
            "policy": "spread",
            "cluster": [str(w.endpoint.cluster_id)],
            "home": str(w.endpoint.cluster_id),
        }
    ),
    "endpoint-adapter-add": Page(lambda w: {"name": "sweep", "source": "acme/x", "rank": "8"}),
    "endpoint-adapter-remove": Page(EMPTY),
    "endpoint-stop": Page(EMPTY),
    "endpoint-start": Page(EMPTY),
    "endpoint-delete": Page(lambda w: {"confirm_slug": w.endpoint.slug}),
    "endpoint-edit": Page(lambda w: {**FORM, "base_revision": "2"}),
    "endpoint-revisions": Page(EMPTY),
    "endpoint-diff": Page(EMPTY),
    "endpoint-rollback": Page(EMPTY),
    "canary-start": Page(lambda w: {"spec": json.dumps(SPEC_V2), "weight": "10"}),
    "canary-promote": Page(EMPTY),
    "canary-abort": Page(EMPTY),
    "benchmark-list": Page(lambda w: {"concurrency": "1,2", "duration_s": "5"}),
    "benchmark-detail": Page(EMPTY),
    "benchmark-compare": Page(EMPTY),
    "endpoint-experiments": Page(EMPTY),
    "gate-start": Page(EMPTY),
    "gate-override": Page(lambda w: {"reason": "sweep"}),
    "endpoint-metrics": Page(EMPTY),
    "endpoint-events": Page(EMPTY),
    "endpoint-logs": Page(EMPTY),
    "endpoint-logs-download": Page(EMPTY),
    "playground-key": Page(EMPTY),
    "playground-chat": Page(
        lambda w: {"key": w.plaintext_keys["inference-key"], "prompt": "hi", "max_tokens": "4"}
    ),
    "cluster-delete": Page(EMPTY),
    "cluster-drain": Page(EMPTY),
    "cluster-undrain": Page(EMPTY),
    "cluster-settings": Page(lambda w: {"namespace": "globex", "settings": "labels: {a: b}"}),
    "key-revoke": Page(EMPTY),
    "key-limits": Page(lambda w: {"rpm": "60", "tpm": "6000"}),
    "member-change": Page(lambda w: {"role": "viewer"}),
    "invitation-revoke": Page(EMPTY),
    "invitation-respond": Page(lambda w: {"action": "accept"}),
    "secret-delete": Page(EMPTY),
    "quantization-run": Page(EMPTY),
    "quantization-cancel": Page(EMPTY),
    "quantization-deploy": Page(lambda w: {"candidate": "all", "deployment": w.endpoint.slug}),
}
# Patterns without parameters: bob's own organization, and forms that reference Acme's objects.
PAGES: dict[str, Page] = {
    "home": Page(),
    "healthz": Page(public=True),
    "favicon": Page(public=True),
    "login": Page(public=True),
    "logout": Page(public=True),  # POST would sign bob out: not swept
    # Single sign-on's start and callback (404 while it is off, as here; the callback refuses any
    # answer it did not ask for: tests/controlplane/test_sso.py).
    "sso-start": Page(public=True),
    "sso-callback": Page(public=True),
    "switch-organization": Page(lambda w: {"organization": str(w.cast.acme.pk)}),
    "endpoint-list": Page(),
    "endpoint-create": Page(
        lambda w: {**FORM, "slug": "globex-new", "cluster": str(w.cluster.pk)},
        refused=frozenset({403, 404, 422}),
    ),
    "endpoint-validate": Page(lambda w: {**FORM, "endpoint": w.endpoint.slug}, REFUSED),
    "cluster-list": Page(
        lambda w: {"name": "globex-k8s", "kubeconfig": str(w.kubeconfig_secret.pk)},
        refused=frozenset({403, 404, 422}),
    ),
    "usage": Page(),
    "costs": Page(),
    # Bob's own runs and checkpoints; a run of an Acme endpoint's model must be refused.
    "quantization": Page(
        lambda w: {"format": "fp8", "deployment": w.endpoint.slug, "propose": "on"}, REFUSED
    ),
    "quantized-models": Page(),
    "calibration-upload": Page(lambda w: {"name": "globex", "samples": '{"text": "hi"}'}),
    "fleet": Page(),  # bob's clusters and the shared ones, with only Globex's endpoints
    # The optimizer answers anyone signed in about the catalogue (or their own clusters); its
    # apply form names an Acme endpoint and must be refused; the wizard's Recommend names none.
    "optimize": Page(),
    "optimize-apply": Page(
        lambda w: {"spec": json.dumps(SPEC_V2), "label": "x", "endpoint": w.endpoint.slug},
        REFUSED,
    ),
    "endpoint-recommend": Page(lambda w: {**FORM, "rec-rate_rps": "2"}),
    "key-list": Page(
        lambda w: {"name": "globex key", "kind": "inference", "endpoints": str(w.endpoint.pk)},
        refused=frozenset({403, 404, 422}),
    ),
    "key-endpoint-choices": Page(),
    "member-list": Page(lambda w: {"username": "carol", "role": "developer"}),
    "invitation-list": Page(),
    "secret-list": Page(lambda w: {"name": "acme-hf-token", "value": "globex value"}),
    "audit-log": Page(),
    # Instance admins' page (staff only): bob, an organization's owner, may not set quotas.
    "quota-admin": Page(lambda w: {"organization": str(w.cast.acme.pk), "gpus": "99"}, REFUSED),
}
# What each URL parameter names in Acme, and an object that exists nowhere.
MISSING: dict[str, Any] = {
    "slug": "sweep-no-such-endpoint",
    "number": 1,
    "cluster_id": uuid.UUID(int=1),
    "key_id": uuid.UUID(int=2),
    "membership_id": 2**31 - 1,
    "invitation_id": uuid.UUID(int=3),
    "secret_id": uuid.UUID(int=4),
    "benchmark_id": uuid.UUID(int=5),
    "name": "sweep-adapter",
    "run_id": uuid.UUID(int=6),
}
PARAMETERS: dict[str, Callable[[World], Any]] = {
    "slug": lambda w: w.endpoint.slug,
    "number": lambda w: 1,
    "cluster_id": lambda w: w.cluster.pk,
    "key_id": lambda w: w.inference_key.pk,
    "membership_id": lambda w: w.target_member.pk,
    "invitation_id": lambda w: w.invitation.pk,
    "secret_id": lambda w: w.spare_secret.pk,
    "benchmark_id": lambda w: w.benchmark_ids[0],
    "name": lambda w: "sweep-adapter",  # an adapter of the endpoint's revision 2
    "run_id": lambda w: w.quantization_run,
}


@dataclass(frozen=True)
class Route:
    name: str
    route: str
    parameters: tuple[str, ...] = field(default=())


def _walk(patterns: list[Any], prefix: str) -> Iterator[Route]:
    for pattern in patterns:
        route = prefix + str(pattern.pattern)
        if route.startswith(SKIPPED_PREFIXES):
            continue
        if isinstance(pattern, URLResolver):
            yield from _walk(pattern.url_patterns, route)
        elif isinstance(pattern, URLPattern):
            converters = getattr(pattern.pattern, "converters", {})
            yield Route(str(pattern.name), route, tuple(converters))


def console_routes() -> list[Route]:
    return sorted(_walk(get_resolver().url_patterns, ""), key=lambda r: r.route)


ROUTES = console_routes()


def test_every_console_pattern_is_classified() -> None:
    names = [r.name for r in ROUTES]
    assert len(names) == len(set(names)), "two console patterns share a name"
    unclassified = sorted(set(names) - set(OBJECT_PAGES) - set(PAGES))
    assert not unclassified, f"classify in tests/sweep/test_console_cross_org.py: {unclassified}"
    stale = sorted((set(OBJECT_PAGES) | set(PAGES)) - set(names))
    assert not stale, f"classified but gone: {stale}"
    for route in ROUTES:
        assert (route.name in OBJECT_PAGES) == bool(route.parameters), route
        unknown = set(route.parameters) - set(PARAMETERS)
        assert not unknown, f"{route.route}: say which Acme object {unknown} names"


def _url(world: World, route: Route, *, missing: bool = False) -> str:
    values = {p: MISSING[p] if missing else PARAMETERS[p](world) for p in route.parameters}
    url = reverse(route.name, kwargs=values)
    return f"{url}?a=1&b=2" if route.name == "endpoint-diff" else url


@dataclass
class Sweep:
    world: World
    client: Client
    before: dict[str, Any]
    secrets: list[str]
    problems: list[str] = field(default_factory=list)

    def request(
        self, route: Route, method: str, wanted: frozenset[int] | None, **extra: Any
    ) -> int:
        url = _url(self.world, route)
        form = extra.pop("data", None)
        sent = url + repr(form)
        where = f"{method} {url} {form or ''} {'(htmx)' if extra else ''}".strip()
        with transaction.atomic():
            response = getattr(self.client, method.lower())(url, data=form, **extra)
            chosen = self.client.session.get(SESSION_ORG_KEY) if route.parameters == () else None
            after, references = state_of(self.world), cross_references(self.world)
            transaction.set_rollback(True)
        text = _text(response)
        status = response.status_code
        if status >= 500 or (wanted is not None and status not in wanted):
            self.problems.append(f"{where}: answered {status}, expected {sorted(wanted or [])}")
        if seen := foreign(text, self.world.markers(), sent):
            self.problems.append(f"{where}: shows Acme's {seen} ({status})")
        if secret := leaked(text, self.secrets):
            self.problems.append(f"{where}: a secret value is in the page: {secret}")
        if after != self.before:
            changed = sorted(k for k in after if after[k] != self.before[k])
            self.problems.append(f"{where}: changed Acme's {changed} ({status})")
        if chosen == str(self.world.cast.acme.pk):
            self.problems.append(f"{where}: switched the session into Acme")
        self.problems += [f"{where}: {ref}" for ref in references]
        return status

    def like_missing(self, route: Route, method: str, status: int, **extra: Any) -> None:
        """Another organization's object must answer exactly as an object that does not exist."""
        url = _url(self.world, route, missing=True)
        with transaction.atomic():
            missing = getattr(self.client, method.lower())(url, **extra).status_code
            transaction.set_rollback(True)
        if missing != status:
            where = f"{method} {_url(self.world, route)} {'(htmx)' if extra else ''}".strip()
            self.problems.append(f"{where}: answered {status}, but a missing one {missing}")


def _text(response: Any) -> str:
    if getattr(response, "streaming", False):
        return b"".join(response.streaming_content).decode(errors="replace")
    return response.content.decode(errors="replace")  # type: ignore[no-any-return]


@pytest.mark.parametrize("route", ROUTES, ids=lambda r: r.name)
def test_another_organization_gets_nothing_of_acme(world: World, route: Route) -> None:
    bob = world.sessions["other-org-session"]
    sweep = Sweep(world, bob, state_of(world), world.secret_values)
    page = OBJECT_PAGES.get(route.name) or PAGES[route.name]
    if route.name not in OBJECT_PAGES:
        sweep.request(route, "GET", None)
        sweep.request(route, "GET", None, **HTMX)
        if page.post is not None:
            sweep.request(route, "POST", page.refused, data=page.post(world))
        assert not sweep.problems, "\n".join(sweep.problems)
        return
    wanted = REFUSED | ({page.missing} if page.missing else set())
    for method, extra in (("GET", {}), ("GET", HTMX), ("POST", {"data": page.post(world)})):
        status = sweep.request(route, method, wanted, **extra)
        sweep.like_missing(route, method, status, **extra)
    assert not sweep.problems, "\n".join(sweep.problems)


@pytest.mark.parametrize("route", ROUTES, ids=lambda r: r.name)
def test_nobody_signed_in_gets_nothing(world: World, route: Route) -> None:
    sweep = Sweep(world, Client(), state_of(world), world.secret_values)
    page = OBJECT_PAGES.get(route.name) or PAGES[route.name]
    wanted = None if page.public else frozenset({302, 401, 403, 404, 405})
    sweep.request(route, "GET", wanted)
    if page.post is not None:
        sweep.request(route, "POST", wanted, data=page.post(world))
    assert not sweep.problems, "\n".join(sweep.problems)


@pytest.mark.parametrize(
    "replica",
    ["../{acme}/r1-engine-0", "{root}/{acme}/r1-engine-0", "..", "../{acme}", "r1-engine-0/../.."],
)
def test_a_log_replica_name_cannot_reach_another_endpoints_logs(world: World, replica: str) -> None:
    bob = world.sessions["other-org-session"]
    name = replica.format(acme=world.endpoint.pk, root=world.run_dir)
    for extra in ({}, HTMX):
        url = reverse("endpoint-logs", kwargs={"slug": world.globex_endpoint.slug})
        response = bob.get(url, {"replica": name}, **extra)
        assert response.status_code == 200
        page = response.content.decode()
        assert world.log_line not in page
        assert "globex engine log line" in page  # the unknown name fell back to bob's own
