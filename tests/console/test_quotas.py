"""Quotas in the console: members see their usage against them on the Usage page; the staff
page lists organizations and sets their quotas through the service; nobody else may."""

from __future__ import annotations

from django.contrib.auth import get_user_model
from django.test import Client

from controlplane.models import AuditEvent
from deployments.endpoints.models import Deployment
from deployments.quotas.models import Quota
from tests.conftest import Cast
from tests.console.conftest import signed_in


def test_members_see_usage_against_their_quotas(
    cast: Cast, carol: Client, endpoint: Deployment
) -> None:
    Quota.objects.create(organization=cast.acme, gpus_by_type={"H100-SXM": 3})
    page = carol.get("/usage/").content.decode()
    assert 'id="quota"' in page
    assert '<td class="mono">gpus.H100-SXM</td><td class="num">1</td><td class="num">3</td>' in page


def test_staff_set_quotas_on_their_page_and_others_are_refused(
    cast: Cast, alice: Client, endpoint: Deployment
) -> None:
    root = signed_in(get_user_model().objects.create_user("root", is_staff=True))
    listing = root.get("/quotas/").content.decode()
    assert "Acme" in listing and "Globex" in listing
    form = {
        "organization": str(cast.acme.pk), "gpus": "8", "gpus_by_type": "H100-SXM=4, a100=2",
        "endpoints": "", "replicas_per_endpoint": "3",
    }  # fmt: skip
    assert root.post("/quotas/?q=Ac", form).status_code == 302
    quota = Quota.objects.get(organization=cast.acme)
    assert quota.gpus == 8 and quota.endpoints is None and quota.replicas_per_endpoint == 3
    assert quota.gpus_by_type["H100-SXM"] == 4 and len(quota.gpus_by_type) == 2  # alias resolved
    assert AuditEvent.objects.filter(action="quota.set", actor_label="user:root").count() == 1
    shown = root.get("/quotas/?q=Acme").content.decode()
    assert 'value="H100-SXM=4' in shown and "Globex" not in shown

    bad = root.post("/quotas/", {**form, "gpus_by_type": "H100-SXM"}, follow=True)
    assert "write TYPE=COUNT pairs" in bad.content.decode()
    assert Quota.objects.get(organization=cast.acme).gpus_by_type == quota.gpus_by_type

    # Acme's owner is no instance admin: no page, no change, no link.
    assert alice.get("/quotas/").status_code == 403
    assert alice.post("/quotas/", {**form, "gpus": "99"}).status_code == 403
    assert Quota.objects.get(organization=cast.acme).gpus == 8
    assert 'href="/quotas/"' not in alice.get("/usage/").content.decode()
