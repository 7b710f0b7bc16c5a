"""/healthz answers whatever the Host header says: the kubelet probes pods by address."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import Client


@pytest.mark.django_db
def test_healthz_answers_a_host_outside_allowed_hosts(settings: Any) -> None:
    settings.ALLOWED_HOSTS = ["plinth.example.com"]
    client = Client()
    probe = client.get("/healthz", HTTP_HOST="10.1.2.3:8000")
    assert probe.status_code == 200
    assert probe.json() == {"status": "ok"}
    # Everything else still goes through the Host check.
    assert client.get("/login/", HTTP_HOST="10.1.2.3:8000").status_code == 400
    assert client.get("/login/", HTTP_HOST="plinth.example.com").status_code == 200
