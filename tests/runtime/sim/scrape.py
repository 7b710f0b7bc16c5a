"""Reading an engine's Prometheus text and HTTP answers in tests."""

from __future__ import annotations

import json
import re
from typing import Any

from runtime.sim.launcher import http_get

_SAMPLE = re.compile(r"^(?P<name>[^\s{]+)(?:\{(?P<labels>[^}]*)\})? (?P<value>\S+)$")


def metric_sum(base_url: str, name: str, **labels: str) -> float:
    """Sum of the samples of ``name`` whose labels include ``labels``."""
    status, body = http_get(f"{base_url}/metrics")
    assert status == 200, status
    total = 0.0
    for line in body.decode().splitlines():
        match = _SAMPLE.match(line)
        if not match or match["name"] != name:
            continue
        found = dict(re.findall(r'(\w+)="([^"]*)"', match["labels"] or ""))
        if all(found.get(k) == v for k, v in labels.items()):
            total += float(match["value"])
    return total


def get_json(url: str, api_key: str | None = None) -> Any:
    status, body = http_get(url, api_key=api_key)
    assert status == 200, (status, body[:200])
    return json.loads(body)
