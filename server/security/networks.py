"""Addresses and networks: who the client is behind trusted proxies, which networks a setting
names, and whether a host is this machine.

The endpoint reads the client's address with :func:`client_address` (``MCP_TRUSTED_PROXIES``),
the gate exempts networks from the rate limit (``MCP_RATE_LIMIT_EXEMPT``), and the start-up
checks refuse to serve without authentication beyond loopback (:func:`is_loopback`).
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable

Network = ipaddress.IPv4Network | ipaddress.IPv6Network


def parse_networks(entries: Iterable[str]) -> tuple[Network, ...]:
    return tuple(
        ipaddress.ip_network(entry.strip(), strict=False) for entry in entries if entry.strip()
    )


def client_address(
    peer: str | None, forwarded: str | None, trusted: tuple[Network, ...]
) -> str | None:
    """The client's address: the peer, or the forwarded one when the peer is a trusted proxy.

    X-Forwarded-For is read right to left, skipping trusted proxies, so a client cannot forge
    its address by sending the header itself.
    """
    if peer is None or not trusted or not in_networks(peer, trusted):
        return peer
    if not forwarded:
        return peer
    for hop in reversed([part.strip() for part in forwarded.split(",") if part.strip()]):
        if not in_networks(hop, trusted):
            return hop
    return peer


def in_networks(address: str, networks: tuple[Network, ...]) -> bool:
    """Whether ``address`` is in one of ``networks`` (False for what is not an address)."""
    if not networks:
        return False  # asked on every request: no parsing when nothing is configured
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        return False
    return any(ip in network for network in networks)


def is_loopback(host: str) -> bool:
    """Whether a bind address (or host name) reaches only this machine."""
    host = host.strip().lower().removeprefix("[").removesuffix("]")
    if host == "localhost" or host.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
