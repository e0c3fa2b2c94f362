"""server.security.networks: the client's address behind trusted proxies, the networks a
setting names, and membership (what the rate-limit exemption asks).
"""

import ipaddress

import pytest

from server.security.networks import client_address, in_networks, parse_networks

# -- client_address ----------------------------------------------------------------------------

PROXIES = parse_networks(["10.0.0.0/8", "192.168.1.1", "fd00::/8"])


def test_without_trusted_proxies_the_peer_is_the_client() -> None:
    forwarded = "1.2.3.4"
    assert client_address("10.0.0.5", forwarded, ()) == "10.0.0.5"
    assert client_address("203.0.113.9", forwarded, ()) == "203.0.113.9"


def test_an_untrusted_peer_cannot_forge_its_address() -> None:
    forwarded = "1.2.3.4, 10.0.0.1"
    assert client_address("203.0.113.9", forwarded, PROXIES) == "203.0.113.9"


def test_a_trusted_proxy_gives_the_rightmost_untrusted_hop() -> None:
    assert client_address("10.0.0.5", "1.2.3.4", PROXIES) == "1.2.3.4"
    # The client forged "6.6.6.6" in front; the proxies appended what they saw.
    forwarded = "6.6.6.6, 1.2.3.4, 192.168.1.1,10.9.9.9"
    assert client_address("10.0.0.5", forwarded, PROXIES) == "1.2.3.4"


def test_ipv6_peers_and_hops() -> None:
    forwarded = "2001:db8::1, fd00::7"
    assert client_address("fd00::1", forwarded, PROXIES) == "2001:db8::1"
    assert client_address("2001:db8::9", forwarded, PROXIES) == "2001:db8::9"


def test_when_every_hop_is_trusted_the_peer_is_kept() -> None:
    forwarded = "10.1.1.1, 192.168.1.1"
    assert client_address("10.0.0.5", forwarded, PROXIES) == "10.0.0.5"


@pytest.mark.parametrize("forwarded", ["", " ", ",", " , ,, "])
def test_a_trusted_peer_with_an_empty_header_is_kept(forwarded: str) -> None:
    assert client_address("10.0.0.5", forwarded, PROXIES) == "10.0.0.5"
    assert client_address("10.0.0.5", None, PROXIES) == "10.0.0.5"


@pytest.mark.parametrize("peer", ["testclient", "", "not an ip", "10.0.0.5:8080", "/run/sock"])
def test_a_peer_that_is_not_an_address_never_unlocks_the_header(peer: str) -> None:
    assert client_address(peer, "1.2.3.4", PROXIES) == peer


def test_garbage_left_of_the_real_hop_is_never_reached() -> None:
    forwarded = "<script>, 999.1.1.1, unknown, 1.2.3.4"
    assert client_address("10.0.0.5", forwarded, PROXIES) == "1.2.3.4"


def test_no_peer_is_no_address() -> None:
    assert client_address(None, "1.2.3.4", PROXIES) is None
    assert client_address(None, None, ()) is None


def test_parse_networks_accepts_addresses_and_cidrs_and_skips_blanks() -> None:
    networks = parse_networks([" 10.0.0.1 ", "", "172.16.0.5/12", "::1", "  "])
    assert networks == (
        ipaddress.ip_network("10.0.0.1/32"),
        ipaddress.ip_network("172.16.0.0/12"),
        ipaddress.ip_network("::1/128"),
    )
    with pytest.raises(ValueError, match="does not appear"):
        parse_networks(["not-a-network"])


def test_in_networks_takes_addresses_only() -> None:
    assert in_networks("10.200.0.1", PROXIES)
    assert in_networks("fd00::9", PROXIES)
    assert not in_networks("192.168.1.2", PROXIES)
    assert not in_networks("10.0.0.1:80", PROXIES)
    assert not in_networks("anything", ())
