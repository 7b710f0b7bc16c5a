"""The gateway's /metrics listener names every organization's endpoints, so it listens on
loopback unless an operator opens it on purpose, whatever address the public port uses."""

from __future__ import annotations

import ipaddress
from pathlib import Path

import pytest

from tests.gateway.conftest import start_gateway, stop_process

LISTEN = "0A"  # the TCP state of a listening socket in /proc/net/tcp


def _ipv4(hex_address: str) -> str:
    # /proc/net/tcp writes the address in host (little-endian) byte order.
    return str(ipaddress.IPv4Address(bytes.fromhex(hex_address)[::-1]))


def listening_addresses(port: int) -> set[str]:
    """The local addresses with a socket listening on ``port`` (read from the kernel)."""
    found = set()
    for table, decode in (("/proc/net/tcp", _ipv4), ("/proc/net/tcp6", lambda h: f"v6:{h}")):
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            address, port_hex = fields[1].rsplit(":", 1)
            if fields[3] == LISTEN and int(port_hex, 16) == port:
                found.add(decode(address))
    return found


def _port(url: str) -> int:
    return int(url.rsplit(":", 1)[1])


def test_a_public_gateway_keeps_metrics_on_loopback(transactional_db: None, tmp_path: Path) -> None:
    gateway = start_gateway(tmp_path, "--host", "0.0.0.0")
    try:
        assert listening_addresses(_port(gateway.url)) == {"0.0.0.0"}
        assert listening_addresses(_port(gateway.metrics_url)) == {"127.0.0.1"}
    finally:
        stop_process(gateway.popen)


@pytest.mark.parametrize("how", ["flag", "environment"])
def test_an_operator_may_open_metrics_on_purpose(
    transactional_db: None, tmp_path: Path, how: str
) -> None:
    if how == "flag":
        gateway = start_gateway(tmp_path, "--metrics-host", "0.0.0.0")
    else:
        gateway = start_gateway(tmp_path, PLINTH_GATEWAY_METRICS_HOST="0.0.0.0")
    try:
        assert listening_addresses(_port(gateway.metrics_url)) == {"0.0.0.0"}
    finally:
        stop_process(gateway.popen)
