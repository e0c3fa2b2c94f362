"""Addresses and networks: who the client is behind trusted proxies, which networks a setting
names, and whether a host is this machine.

The app itself, not the ASGI server, believes forwarded headers, and only from the peer that
sent them when it is a trusted proxy (``MCP_TRUSTED_PROXIES``): the endpoint reads the client's
address with :func:`client_address`, the routes that answer only some callers (``/metrics``,
the live report) with :func:`forwarded_client`; the scheme, host and prefix of the URLs the
server builds come from :mod:`server.security.forwarded`. (A server that rewrote the scope's
client itself would leave the app unable to tell its proxy's headers, ``X-Request-Id`` above
all, from a client's.) The gate exempts networks from the rate limit
(``MCP_RATE_LIMIT_EXEMPT``), and the start-up checks refuse to serve without authentication
beyond loopback (:func:`is_loopback`).
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


def forwarded_client(
    peer: str | None, forwarded_for: str | None, proxied: bool, trusted: tuple[Network, ...]
) -> str | None:
    """The caller's address as far as it is known: :func:`client_address`, or None when the
    request came through a proxy this server does not trust (``proxied``: it carries
    X-Forwarded-For or Forwarded, and the peer is not in ``trusted``). Such a proxy's clients
    all look like the proxy, loopback above all, so none of them may pass for it."""
    if peer is None or (proxied and not in_networks(peer, trusted)):
        return None
    return client_address(peer, forwarded_for, trusted)


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
