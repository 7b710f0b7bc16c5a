"""Which network addresses the control plane may call on a tenant's behalf.

A tenant names a host (a kubeconfig's API server) and a worker that serves every organization
calls it: without a check that is server-side request forgery into loopback services, the
cloud's metadata endpoint or the operator's private network. Every such host passes here twice:
when it is saved (``host_problem``, ``resolved_problem``) and when a socket is opened
(``guard_pool_manager``), where the name is resolved once, every address it resolves to is
checked, and the connection goes to a checked address, so DNS that changes in between (DNS
rebinding) gains nothing.

Loopback, link-local, unspecified, multicast, reserved and cloud metadata addresses are always
refused; private ranges unless the operator allows them. Addresses that embed an IPv4 address
(IPv4-mapped, IPv4-compatible, 6to4, Teredo, NAT64) are judged by the embedded one too, and IPv4
written in any form other than four decimal numbers (``2130706433``, ``0177.0.0.1``, ``0x7f.1``)
is refused outright. An operator may list hosts, addresses or networks that are allowed anyway.
Messages never echo the host or what it resolved to.
"""

from __future__ import annotations

import socket
from collections.abc import Iterable
from dataclasses import dataclass, field
from ipaddress import (
    IPv4Address,
    IPv4Network,
    IPv6Address,
    IPv6Network,
    ip_address,
    ip_network,
)
from typing import Any

from urllib3 import HTTPConnectionPool, HTTPSConnectionPool, PoolManager, ProxyManager
from urllib3.connection import HTTPConnection, HTTPSConnection
from urllib3.exceptions import ConnectTimeoutError, NameResolutionError, NewConnectionError
from urllib3.util import connection as urllib3_connection

IPAddress = IPv4Address | IPv6Address
IPNetwork = IPv4Network | IPv6Network

# Instance metadata and host-agent services: AWS (v4 and v6), ECS, GCP, Azure, Alibaba, Oracle.
# Some are link-local and refused anyway; the others are private or even global addresses.
METADATA_ADDRESSES = frozenset(
    ip_address(a)
    for a in (
        "169.254.169.254",
        "169.254.170.2",
        "fd00:ec2::254",
        "168.63.129.16",
        "100.100.100.200",
        "192.0.0.192",
    )
)
METADATA_NAMES = frozenset(
    {
        "metadata",
        "metadata.google.internal",
        "metadata.goog",
        "instance-data",
        "instance-data.ec2.internal",
        "metadata.tencentyun.com",
    }
)
_THIS_NETWORK = ip_network("0.0.0.0/8")  # "this host on this network": reaches the host itself
_NAT64 = ip_network("64:ff9b::/96")
_IPV4_COMPATIBLE = ip_network("::/96")


class EgressRefused(Exception):
    """A tenant-named host resolves to an address the control plane must not call.

    Deliberately not an ``OSError``: urllib3 catches those and retries or wraps them, and a
    refusal must surface as itself. ``message`` never names the host or its addresses.
    """

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


@dataclass(frozen=True)
class EgressPolicy:
    """What the operator allows beyond public addresses (settings ``PLINTH_KUBE_ALLOW_*``)."""

    allow_private: bool = False
    allowed_hosts: frozenset[str] = field(default_factory=frozenset)
    allowed_networks: tuple[IPNetwork, ...] = ()

    @classmethod
    def build(cls, *, allow_private: bool = False, allow: Iterable[str] = ()) -> EgressPolicy:
        """``allow`` holds host names, addresses and networks (``10.0.0.0/8``), as operators
        write them in ``PLINTH_KUBE_ALLOW_HOSTS``."""
        hosts: set[str] = set()
        networks: list[IPNetwork] = []
        for entry in (e.strip() for e in allow):
            try:
                networks.append(ip_network(entry.strip("[]"), strict=False))
            except ValueError:
                if entry:
                    hosts.add(normalize_host(entry) or entry.lower())
        return cls(allow_private, frozenset(hosts), tuple(networks))

    def allows_host(self, host: str) -> bool:
        return normalize_host(host) in self.allowed_hosts

    def allows_address(self, address: IPAddress) -> bool:
        return any(address in network for network in self.allowed_networks)


def normalize_host(host: str) -> str | None:
    """The host as the connection will use it: IDNA-encoded (so full-width or other look-alike
    characters fold to what they resolve as), lower case, without a trailing dot. None when it
    is not a usable host name at all."""
    bare = host.strip().removeprefix("[").removesuffix("]").rstrip(".")
    if not bare:
        return None
    try:
        return bare.encode("idna").decode("ascii").lower()
    except UnicodeError:
        return bare.lower() if _is_ip(bare) else None


def host_problem(host: str | None, policy: EgressPolicy) -> str | None:
    """Why ``host`` is refused without resolving it (a literal address or a known name)."""
    normalized = normalize_host(host or "")
    if normalized is None:
        return "is missing or not a valid host name"
    if policy.allows_host(normalized):
        return None
    if normalized == "localhost" or normalized.endswith(".localhost"):
        return "is a loopback name"
    if normalized in METADATA_NAMES:
        return "is a cloud metadata service"
    return _literal_problem(normalized, policy)


def address_problem(address: IPAddress, policy: EgressPolicy) -> str | None:
    """Why the control plane must not connect to ``address`` (None when it may)."""
    # The embedded address first: it names where the packets go (and the better message).
    candidates = [*_embedded_ipv4(address), address]
    if any(policy.allows_address(a) for a in candidates):
        return None
    for candidate in candidates:
        problem = _single_address_problem(candidate, policy)
        if problem:
            return problem
    return None


def resolved_problem(host: str, port: int, policy: EgressPolicy) -> str | None:
    """Why ``host`` is refused once resolved: every address it resolves to must be allowed."""
    try:
        checked_addresses(host, port, policy)
    except EgressRefused as refused:
        return refused.message
    except OSError:
        return "does not resolve (check the name; it must resolve from the control plane)"
    return None


def checked_addresses(host: str, port: int, policy: EgressPolicy) -> list[str]:
    """Resolve ``host`` once and return its addresses, all of them allowed; raises
    ``EgressRefused`` when one is not, and ``socket.gaierror`` when the name does not resolve.

    Names are judged by what they resolve to here (``localhost`` by 127.0.0.1); the list of
    known names in ``host_problem`` is for saving, when a name may not resolve yet.
    """
    normalized = normalize_host(host)
    if normalized is None:
        raise EgressRefused("the host is missing or not a valid host name")
    problem = None if policy.allows_host(normalized) else _literal_problem(normalized, policy)
    if problem:
        raise EgressRefused(f"the host {problem}")
    infos = socket.getaddrinfo(normalized, port, type=socket.SOCK_STREAM)
    addresses = [str(info[4][0]) for info in infos]
    if policy.allows_host(normalized):
        return addresses
    for text in addresses:
        problem = address_problem(ip_address(text), policy)
        if problem:
            raise EgressRefused(f"the host resolves to an address that {problem}")
    return addresses


def _single_address_problem(address: IPAddress, policy: EgressPolicy) -> str | None:
    if address in METADATA_ADDRESSES:
        return "is a cloud metadata service"
    if address.is_loopback:
        return "is a loopback address"
    if address.is_link_local:
        return "is a link-local address"
    if address.is_unspecified or address.is_multicast or address.is_reserved:
        return "is not a unicast host address"
    if isinstance(address, IPv4Address) and address in _THIS_NETWORK:
        return "is not a unicast host address"
    if isinstance(address, IPv6Address) and address.is_site_local:
        return "is a site-local address"
    if not address.is_global and not policy.allow_private:
        return "is a private address (the operator may allow private ranges)"
    return None


def _embedded_ipv4(address: IPAddress) -> list[IPv4Address]:
    """IPv4 addresses an IPv6 address carries, which the network may deliver to."""
    if not isinstance(address, IPv6Address):
        return []
    found = [a for a in (address.ipv4_mapped, address.sixtofour) if a is not None]
    if address.teredo:
        found.extend(address.teredo)
    if address in _NAT64 or (address in _IPV4_COMPATIBLE and int(address) > 1):
        found.append(IPv4Address(int(address) & 0xFFFFFFFF))
    return found


def _literal_problem(host: str, policy: EgressPolicy) -> str | None:
    """Why a host written as an address is refused; None for a name (and allowed addresses)."""
    try:
        address = ip_address(host)
    except ValueError:
        return _numeric_form_problem(host)
    return address_problem(address, policy)


def _numeric_form_problem(host: str) -> str | None:
    # The C resolver reads "2130706433", "0177.0.0.1" and "0x7f.1" as IPv4 addresses; refuse
    # them all rather than hope every check parses them the way the resolver does.
    try:
        socket.inet_aton(host)
    except OSError:
        return None
    return "is an IPv4 address not written as four decimal numbers"


def _is_ip(text: str) -> bool:
    try:
        ip_address(text)
    except ValueError:
        return False
    return True


# --- connect time: urllib3 connections that only reach checked addresses ----------------------


class _GuardedConnectionMixin:
    """Replaces urllib3's ``_new_conn``: resolve once, check every address, connect to one."""

    egress_policy: EgressPolicy
    _dns_host: str
    host: str
    port: int
    timeout: Any
    source_address: Any
    socket_options: Any

    def _new_conn(self) -> socket.socket:
        try:
            addresses = checked_addresses(self._dns_host, self.port, self.egress_policy)
        except socket.gaierror as exc:
            # arg-type here and below: a mixin, so not an HTTPConnection until it is mixed in.
            raise NameResolutionError(self.host, self, exc) from exc  # type: ignore[arg-type]
        last: OSError | None = None
        for address in addresses:
            try:
                # An address literal: create_connection resolves nothing more.
                return urllib3_connection.create_connection(
                    (address, self.port),
                    self.timeout,
                    source_address=self.source_address,
                    socket_options=self.socket_options,
                )
            except TimeoutError as exc:
                raise ConnectTimeoutError(self, "connection timed out") from exc
            except OSError as exc:
                last = exc
        raise NewConnectionError(self, f"could not connect: {last}")  # type: ignore[arg-type]


def guard_pool_manager(manager: PoolManager, policy: EgressPolicy) -> None:
    """Make every connection ``manager`` opens pass ``policy`` (the proxy's, when it has one).

    Raises ``EgressRefused`` for a manager whose connections it cannot guard (SOCKS proxies).
    """
    if type(manager) not in (PoolManager, ProxyManager):
        raise EgressRefused("only http and https proxies are supported")
    http = type(
        "GuardedHTTPConnection",
        (_GuardedConnectionMixin, HTTPConnection),
        {"egress_policy": policy},
    )
    https = type(
        "GuardedHTTPSConnection",
        (_GuardedConnectionMixin, HTTPSConnection),
        {"egress_policy": policy},
    )
    manager.pool_classes_by_scheme = {
        "http": type("GuardedHTTPConnectionPool", (HTTPConnectionPool,), {"ConnectionCls": http}),
        "https": type(
            "GuardedHTTPSConnectionPool", (HTTPSConnectionPool,), {"ConnectionCls": https}
        ),
    }
    manager.clear()  # pools made before this point would keep the unguarded connections
