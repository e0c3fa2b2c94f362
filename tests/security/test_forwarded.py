"""Reading a trusted proxy's forwarding headers: RFC 7239 and X-Forwarded-* agree, the hop
read is the client's side of the trusted chain, malformed values are refused, and the scope
is rewritten as the client made the request."""

from __future__ import annotations

from typing import Any

import pytest

from server.security.forwarded import (
    Forwarded,
    MalformedForwarding,
    apply,
    forwarding,
    parse_forwarded,
    read,
)
from server.security.networks import parse_networks

TRUSTED = parse_networks(["127.0.0.1", "10.0.0.0/8"])


def headers(**values: str) -> dict[bytes, bytes]:
    return {n.replace("_", "-").lower().encode(): v.encode() for n, v in values.items()}


def test_both_styles_say_the_same() -> None:
    legacy = read(
        headers(
            X_Forwarded_Proto="https",
            X_Forwarded_Host="mcp.example.com",
            X_Forwarded_Port="8443",
            X_Forwarded_Prefix="/api/",
        ),
        TRUSTED,
    )
    rfc = read(
        headers(
            Forwarded='for=203.0.113.9;proto=https;host="mcp.example.com:8443"',
            X_Forwarded_Prefix="/api",
        ),
        TRUSTED,
    )
    assert (legacy.scheme, legacy.host, legacy.prefix) == ("https", "mcp.example.com:8443", "/api")
    assert (rfc.scheme, rfc.host, rfc.prefix) == (legacy.scheme, legacy.host, legacy.prefix)
    assert rfc.clients == ("203.0.113.9",)


def test_the_hop_read_is_where_the_client_met_the_trusted_chain() -> None:
    # client -> edge (10.1.2.3, trusted) -> nginx (trusted) -> app: the edge's element is the
    # client's; an element the client wrote itself (leftmost) is not believed.
    value = (
        "for=198.51.100.1;host=evil.example;proto=http, "
        "for=203.0.113.9;host=mcp.example.com;proto=https, "
        "for=10.1.2.3;host=internal:8080;proto=http"
    )
    found = read(headers(Forwarded=value), TRUSTED)
    assert (found.host, found.scheme) == ("mcp.example.com", "https")
    assert found.clients == ("198.51.100.1", "203.0.113.9", "10.1.2.3")


def test_a_list_in_an_x_forwarded_header_takes_the_nearest_proxys_value() -> None:
    found = read(headers(X_Forwarded_Host="evil.example, mcp.example.com"), TRUSTED)
    assert found.host == "mcp.example.com"


def test_rfc_7239_syntax() -> None:
    assert parse_forwarded('for="[2001:db8::1]:4711";proto=https, for=unknown') == [
        {"for": "[2001:db8::1]:4711", "proto": "https"},
        {"for": "unknown"},
    ]
    found = read(headers(Forwarded='For="[2001:db8::1]:4711";Proto=HTTPS'), TRUSTED)
    assert found.clients == ("2001:db8::1",)
    assert found.scheme == "https"


@pytest.mark.parametrize(
    ("values", "named"),
    [
        ({"Forwarded": "for=1.2.3.4;;"}, "Forwarded"),
        ({"Forwarded": "for 1.2.3.4"}, "Forwarded"),
        ({"Forwarded": "for=a;for=b"}, "twice"),
        ({"Forwarded": "proto=ftp"}, "Forwarded proto"),
        ({"X_Forwarded_Proto": "gopher"}, "X-Forwarded-Proto"),
        ({"X_Forwarded_Host": "a b"}, "X-Forwarded-Host"),
        ({"X_Forwarded_Host": "a.example:99999"}, "X-Forwarded-Host"),
        ({"X_Forwarded_Host": "a.example/path"}, "X-Forwarded-Host"),
        ({"X_Forwarded_Port": "http"}, "X-Forwarded-Port"),
        ({"X_Forwarded_Port": "0"}, "X-Forwarded-Port"),
        ({"X_Forwarded_Prefix": "api"}, "X-Forwarded-Prefix"),
        ({"X_Forwarded_Prefix": "/api/../admin"}, "X-Forwarded-Prefix"),
        ({"X_Forwarded_Prefix": "/api?x=1"}, "X-Forwarded-Prefix"),
        ({"X_Forwarded_Prefix": "//evil.example"}, "X-Forwarded-Prefix"),
    ],
)
def test_a_malformed_value_is_refused_naming_the_header(values: dict[str, str], named: str) -> None:
    with pytest.raises(MalformedForwarding, match=named):
        read(headers(**values), TRUSTED)


def scope(**extra: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "type": "http",
        "scheme": "http",
        "path": "/mcp",
        "raw_path": b"/mcp",
        "root_path": "",
        "headers": [(b"host", b"127.0.0.1:8000"), (b"accept", b"*/*")],
    }
    base.update(extra)
    return base


def test_apply_rewrites_the_scope_as_the_client_made_the_request() -> None:
    found = Forwarded("https", "mcp.example.com", "/api", ("203.0.113.9",))
    target = scope()
    assert apply(target, found, "") is None
    assert target["scheme"] == "https"
    assert (target["root_path"], target["path"], target["raw_path"]) == (
        "/api",
        "/api/mcp",
        b"/api/mcp",
    )
    assert dict(target["headers"])[b"host"] == b"mcp.example.com"
    assert dict(target["headers"])[b"x-forwarded-for"] == b"203.0.113.9"
    assert dict(target["headers"])[b"accept"] == b"*/*"


def test_a_port_alone_keeps_the_host_name() -> None:
    target = scope()
    apply(target, read(dict(target["headers"]) | headers(X_Forwarded_Port="8443"), TRUSTED), "")
    assert dict(target["headers"])[b"host"] == b"127.0.0.1:8443"


def test_a_pinned_root_path_wins_and_a_different_prefix_is_reported() -> None:
    target = scope(root_path="/pinned", path="/pinned/mcp")
    assert apply(target, Forwarded(prefix="/api"), "/pinned") == "/api"
    assert (target["root_path"], target["path"]) == ("/pinned", "/pinned/mcp")
    assert apply(scope(), Forwarded(prefix="/pinned"), "/pinned/") is None


def test_forwarding_is_one_set_test() -> None:
    assert not forwarding(headers(Host="x", X_Forwarded_For="1.2.3.4", X_Request_Id="r"))
    assert forwarding(headers(Forwarded="for=1.2.3.4"))
