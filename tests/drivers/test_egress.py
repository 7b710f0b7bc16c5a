"""Which addresses a tenant's kubeconfig may make the worker call
(deployments/drivers/kube/egress.py).

Pure checks, no database: every way of writing a refused address is refused, both by the check
run when a cluster is saved and by the one run when a socket is opened, and public addresses
are not. No DNS is needed: every form here is an address literal or refused before resolving.
"""

from __future__ import annotations

from ipaddress import IPv4Address, IPv4Network, IPv6Address, ip_network

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from deployments.drivers.kube.egress import (
    METADATA_ADDRESSES,
    EgressPolicy,
    EgressRefused,
    checked_addresses,
    host_problem,
)
from deployments.drivers.kube.kubeconfig import KubeconfigPolicy, kubeconfig_problems

# No deadline: the machine is shared, and a test must never depend on timing.
examples = settings(max_examples=100, deadline=None)
DENY = EgressPolicy()
PRIVATE_OK = EgressPolicy.build(allow_private=True)

ALWAYS_REFUSED_V4 = [ip_network(n) for n in ("127.0.0.0/8", "169.254.0.0/16", "0.0.0.0/8")]
PRIVATE_V4 = [
    ip_network(n) for n in ("10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "100.64.0.0/10")
]
# Full-width forms of ASCII letters and digits: IDNA folds them back to ASCII on the way out.
FULLWIDTH = {c: c + 0xFEE0 for c in range(ord("0"), ord("z") + 1) if chr(c).isalnum()}
METADATA_V4 = sorted(a for a in METADATA_ADDRESSES if isinstance(a, IPv4Address))
ALWAYS_REFUSED_V6 = [ip_network(n) for n in ("::1/128", "fe80::/10", "fec0::/10", "ff00::/8")]


def kubeconfig(server: str, **cluster: object) -> str:
    fields = "".join(f", {k}: {v}" for k, v in cluster.items())
    return (
        "apiVersion: v1\nkind: Config\n"
        f"clusters: [{{name: c, cluster: {{server: '{server}'{fields}}}}}]\n"
        "users: [{name: u, user: {token: t}}]\n"
        "contexts: [{name: c, context: {cluster: c, user: u}}]\ncurrent-context: c\n"
    )


def server_refused(host: str, policy: EgressPolicy = DENY) -> bool:
    problems = kubeconfig_problems(
        kubeconfig(f"https://{host}:6443"), KubeconfigPolicy(egress=policy)
    )
    return any(p.startswith("clusters[].cluster.server") for p in problems)


def connect_refused(host: str, policy: EgressPolicy = DENY) -> bool:
    try:
        checked_addresses(host.strip("[]"), 6443, policy)
    except EgressRefused:
        return True
    return False


def addresses_in(networks: list[IPv4Network]) -> st.SearchStrategy[IPv4Address]:
    def pick(network: IPv4Network) -> st.SearchStrategy[IPv4Address]:
        first, last = int(network.network_address), int(network.broadcast_address)
        return st.integers(first, last).map(IPv4Address)

    return st.sampled_from(networks).flatmap(pick)


def v4_forms(address: IPv4Address) -> list[str]:
    """Ways of writing ``address`` that some parser on the way to a socket understands."""
    a, b, c, d = address.packed
    value = int(address)
    fullwidth = str(address).translate(FULLWIDTH)
    return [
        str(address),
        f"{address}.",
        str(value),
        f"0{a:o}.0{b:o}.0{c:o}.0{d:o}",
        f"0x{a:x}.0x{b:x}.0x{c:x}.0x{d:x}",
        f"0x{value:08x}",
        f"{a}.{b}.{c * 256 + d}",
        f"{a}.{value & 0xFFFFFF}",
        fullwidth,
        f"[::ffff:{address}]",
        f"[::ffff:{value >> 16:x}:{value & 0xFFFF:x}]",
        f"[::{address}]",
        f"[2002:{value >> 16:x}:{value & 0xFFFF:x}::1]",
        f"[64:ff9b::{address}]",
    ]


@examples
@given(addresses_in(ALWAYS_REFUSED_V4) | st.sampled_from(METADATA_V4))
def test_loopback_link_local_and_metadata_are_refused_however_written(
    address: IPv4Address,
) -> None:
    for form in v4_forms(address):
        assert server_refused(form, PRIVATE_OK), form
        assert connect_refused(form, PRIVATE_OK), form


@examples
@given(addresses_in(PRIVATE_V4))
def test_private_ranges_are_refused_however_written_unless_allowed(address: IPv4Address) -> None:
    for form in v4_forms(address):
        assert server_refused(form), form
        assert connect_refused(form), form
    assert not server_refused(str(address), PRIVATE_OK)
    assert not connect_refused(str(address), PRIVATE_OK)


@examples
@given(
    st.sampled_from(ALWAYS_REFUSED_V6).flatmap(
        lambda n: st.integers(int(n.network_address), int(n.broadcast_address)).map(IPv6Address)
    )
)
def test_ipv6_loopback_link_local_and_multicast_are_refused(address: IPv6Address) -> None:
    for form in (address.compressed, address.exploded, address.exploded.upper()):
        assert server_refused(f"[{form}]", PRIVATE_OK), form
        assert connect_refused(form, PRIVATE_OK), form


@examples
@given(
    st.ip_addresses(v=4).filter(
        lambda a: a.is_global and not a.is_multicast and a not in METADATA_ADDRESSES
    )
)
def test_public_addresses_are_accepted(address: IPv4Address) -> None:
    assert not server_refused(str(address))
    assert checked_addresses(str(address), 443, DENY) == [str(address)]


@pytest.mark.parametrize(
    "host",
    ["localhost", "LocalHost.", "api.localhost", "metadata.google.internal", "metadata",
     "[fd00:ec2::254]", "[::1]", "0.0.0.0", "[::]", "localhost".translate(FULLWIDTH)],
)  # fmt: skip
def test_loopback_and_metadata_names_are_refused_when_saved(host: str) -> None:
    assert server_refused(host, PRIVATE_OK)


def test_names_are_judged_by_what_they_resolve_to_when_connecting() -> None:
    with pytest.raises(EgressRefused, match="resolves to an address that is a loopback"):
        checked_addresses("localhost", 443, DENY)


def test_the_operator_may_allow_hosts_addresses_and_networks() -> None:
    allowed = EgressPolicy.build(allow=["127.0.0.1", "kube.internal", "10.20.0.0/16", "[::1]"])
    assert not server_refused("127.0.0.1", allowed) and not connect_refused("127.0.0.1", allowed)
    assert not server_refused("kube.internal", allowed)
    assert not server_refused("10.20.3.4", allowed) and server_refused("10.21.3.4", allowed)
    assert not connect_refused("[::1]", allowed)
    assert server_refused("127.0.0.2", allowed)  # only what is listed
    # ... and whatever a listed network is written as, it is the same address.
    assert server_refused("2130706433", allowed)


def test_messages_never_echo_the_host() -> None:
    problems = kubeconfig_problems(kubeconfig("https://10.99.88.77"))
    assert problems and not any("10.99.88.77" in p for p in problems)
    assert host_problem("", DENY) == "is missing or not a valid host name"


def test_insecure_tls_and_proxies_are_refused_unless_the_operator_allows_them() -> None:
    insecure = kubeconfig("https://8.8.8.8", **{"insecure-skip-tls-verify": "true"})
    proxied = kubeconfig("https://8.8.8.8", **{"proxy-url": "'http://8.8.4.4:3128'"})
    [problem] = kubeconfig_problems(insecure)
    assert problem.startswith("clusters[].cluster.insecure-skip-tls-verify is not allowed")
    [problem] = kubeconfig_problems(proxied)
    assert problem.startswith("clusters[].cluster.proxy-url is not allowed")
    assert not kubeconfig_problems(insecure, KubeconfigPolicy(allow_insecure_tls=True))
    assert not kubeconfig_problems(proxied, KubeconfigPolicy(allow_proxy=True))


@pytest.mark.parametrize(
    "proxy", ["http://127.0.0.1:3128", "http://169.254.169.254", "socks5://8.8.4.4:1080", "[1, 2]"]
)
def test_an_allowed_proxy_passes_the_same_checks(proxy: str) -> None:
    text = kubeconfig("https://8.8.8.8", **{"proxy-url": f"'{proxy}'" if "/" in proxy else proxy})
    [problem] = kubeconfig_problems(text, KubeconfigPolicy(allow_proxy=True))
    assert problem.startswith("clusters[].cluster.proxy-url")


def test_networks_not_in_the_lists_above_are_still_covered() -> None:
    # Unique local IPv6 (fc00::/7) is private; documentation ranges are not public either.
    assert server_refused("[fd12:3456::1]") and not server_refused("[fd12:3456::1]", PRIVATE_OK)
    assert server_refused("192.0.2.10")
