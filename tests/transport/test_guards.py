"""server.transport.guards: Host/Origin allow-lists, Accept negotiation and Content-Type checks."""

from typing import Any
from urllib.parse import urlsplit

import pytest

from server.errors import InvalidRequest, http_status
from server.transport.guards import (
    HostGuard,
    check_content_type,
    check_host,
    check_origin,
    host_allowed,
    negotiate,
    split_host,
)

DEFAULT_HOSTS = ("127.0.0.1", "localhost", "[::1]")


def refused(call, status):
    with pytest.raises(InvalidRequest) as caught:
        call()
    assert http_status(caught.value, "modern") == status
    assert http_status(caught.value, "legacy") == status
    assert caught.value.to_wire()["code"] == -32600
    return caught.value


# -- Host ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("localhost", ("localhost", None)),
        ("LocalHost:8000", ("localhost", "8000")),
        ("127.0.0.1:80", ("127.0.0.1", "80")),
        ("[::1]", ("[::1]", None)),
        ("[::1]:8000", ("[::1]", "8000")),
        ("[2001:db8::1]:443", ("[2001:db8::1]", "443")),
        (" example.com ", ("example.com", None)),
        ("example.com:abc", None),
        ("[::1", None),
        ("[::1]x", None),
        ("localhost:", None),
    ],
)
def test_split_host(value, expected):
    assert split_host(value) == expected


@pytest.mark.parametrize(
    "host",
    [
        "localhost",
        "localhost:8000",
        "LOCALHOST:1",
        "127.0.0.1",
        "127.0.0.1:9",
        "[::1]",
        "[::1]:8000",
    ],
)
def test_default_hosts_on_any_port(host):
    assert host_allowed(host, DEFAULT_HOSTS)
    check_host(host, DEFAULT_HOSTS)


@pytest.mark.parametrize(
    "host",
    [
        "evil.com",
        "localhost.evil.com",
        "evil.com:8000",
        "127.0.0.2",
        "[::2]",
        "::1",
        "localhost:",
        "",
    ],
)
def test_other_hosts_are_refused_with_403(host):
    assert not host_allowed(host, DEFAULT_HOSTS)
    error = refused(lambda: check_host(host, DEFAULT_HOSTS), 403)
    assert repr(host) in error.message


@pytest.mark.parametrize("host", ["[::1]x", "[::1]:abc", "[::1]:"])
def test_malformed_ipv6_hosts_are_refused(host):
    assert not host_allowed(host, DEFAULT_HOSTS)


def test_missing_host_is_refused():
    refused(lambda: check_host(None, DEFAULT_HOSTS), 403)


def test_the_host_guard_remembers_only_what_it_allowed_and_stays_bounded():
    guard = HostGuard(DEFAULT_HOSTS)
    for _ in range(2):
        guard.check(b"localhost:3000")
        refused(lambda: guard.check(b"localhost.evil:3000"), 403)
        refused(lambda: guard.check(None), 403)
    for port in range(1000):
        guard.check(f"127.0.0.1:{port}".encode())
    assert 0 < len(guard.allowed_raw) <= HostGuard.KEPT
    refused(lambda: guard.check(b"evil.example"), 403)


def test_the_host_guard_keeps_no_big_host_even_when_any_host_is_allowed():
    guard = HostGuard(("*",))
    for number in range(50):
        guard.check(b"h" * 4096 + str(number).encode())
    assert len(guard.allowed_raw) == 0


@pytest.mark.skipif(not hasattr(urlsplit, "cache_info"), reason="urlsplit has no cache here")
def test_an_origin_never_reaches_the_unbounded_cache_of_urlsplit():
    # Python 3.11+ keeps urlsplit's last 128 answers whatever their size.
    cached: Any = urlsplit  # functools.lru_cache'd, which its stub does not say
    cached.cache_clear()
    for number in range(5):
        big = "http://" + "h" * 4096 + str(number)
        refused(lambda big=big: check_origin(big, DEFAULT_HOSTS, ()), 403)
    check_origin("http://localhost:3000", DEFAULT_HOSTS, ())
    assert cached.cache_info().currsize == 0


def test_host_and_origin_verdicts_keep_no_big_value():
    from server.transport import guards

    guards._HOST_VERDICTS.clear()
    for number in range(50):
        big = "h" * 4096 + str(number)
        assert not host_allowed(big, DEFAULT_HOSTS)
        refused(lambda big=big: check_origin("http://" + big, DEFAULT_HOSTS, ()), 403)
    assert len(guards._HOST_VERDICTS) == 0
    assert host_allowed("localhost:1", DEFAULT_HOSTS)
    assert len(guards._HOST_VERDICTS) == 1


def test_accept_and_content_type_memos_keep_no_big_value():
    negotiate.memo.clear()  # type: ignore[attr-defined]
    check_content_type.memo.clear()  # type: ignore[attr-defined]
    for number in range(50):
        assert negotiate("application/json, " + "x" * 4096 + str(number)) == (True, False)
        check_content_type("application/json; " + "x" * 4096 + str(number))
    assert len(negotiate.memo) == 0  # type: ignore[attr-defined]
    assert len(check_content_type.memo) == 0  # type: ignore[attr-defined]


def test_entry_with_port_pins_the_port():
    allowed = ("api.example.com:8443", "[::1]:9000")
    assert host_allowed("api.example.com:8443", allowed)
    assert not host_allowed("api.example.com", allowed)
    assert not host_allowed("api.example.com:443", allowed)
    assert host_allowed("[::1]:9000", allowed)
    assert not host_allowed("[::1]:9001", allowed)
    assert not host_allowed("[::1]", allowed)


def test_star_allows_any_host():
    assert host_allowed("anything.example:1", ("*",))
    check_host("x", ("*",))


def test_empty_allow_list_refuses_everything():
    assert not host_allowed("localhost", ())


# -- Origin --------------------------------------------------------------------------------


def test_absent_origin_is_fine():
    check_origin(None, DEFAULT_HOSTS, ())


@pytest.mark.parametrize(
    "origin",
    [
        "http://localhost",
        "http://localhost:3000",
        "https://127.0.0.1:8443",
        "http://[::1]:5173",
        "HTTP://LOCALHOST:3000",
    ],
)
def test_origins_on_allowed_hosts_pass(origin):
    check_origin(origin, DEFAULT_HOSTS, ())


@pytest.mark.parametrize(
    "origin",
    [
        "https://evil.com",
        "http://localhost.evil.com",
        "http://evil.com:80",
        "null",
        "file://localhost",
        "ftp://localhost",
        "localhost",
        "http://",
        "http://user@localhost",
        "",
    ],
)
def test_other_origins_are_refused_with_403(origin):
    refused(lambda: check_origin(origin, DEFAULT_HOSTS, ()), 403)


@pytest.mark.parametrize("origin", ["http://[::1", "http://[zz]"])
def test_malformed_ipv6_origins_are_refused_with_403(origin):
    refused(lambda: check_origin(origin, DEFAULT_HOSTS, ()), 403)


def test_explicit_allowed_origins():
    check_origin("https://app.example.com", DEFAULT_HOSTS, ("https://app.example.com",))
    refused(
        lambda: check_origin(
            "https://other.example.com", DEFAULT_HOSTS, ("https://app.example.com",)
        ),
        403,
    )
    check_origin("https://anything.example", (), ("*",))


def test_origin_port_is_checked_against_pinned_hosts():
    check_origin("http://localhost:8000", ("localhost:8000",), ())
    refused(lambda: check_origin("http://localhost:9000", ("localhost:8000",), ()), 403)


# -- Accept --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("accept", "expected"),
    [
        (None, (True, True)),
        ("", (True, True)),
        ("  ", (True, True)),
        ("application/json, text/event-stream", (True, True)),
        ("application/json", (True, False)),
        ("text/event-stream", (False, True)),
        ("*/*", (True, True)),
        ("application/*", (True, False)),
        ("text/*", (False, True)),
        ("Application/JSON; charset=utf-8", (True, False)),
        ("text/html, application/json;q=0.5", (True, False)),
        ("application/json;q=0, text/event-stream", (False, True)),
        ("application/json, text/event-stream;q=0", (True, False)),
        ("application/json; q = 0.0, text/event-stream", (False, True)),
        ("application/json;q=0.000, text/event-stream;q=1", (False, True)),
        ("application/json;q=0.1", (True, False)),
    ],
)
def test_negotiate(accept, expected):
    assert negotiate(accept) == expected


@pytest.mark.parametrize(
    "accept",
    ["text/html", "image/png, text/plain", "application/json;q=0", "*/*;q=0", "application/xml"],
)
def test_nothing_acceptable_is_406(accept):
    refused(lambda: negotiate(accept), 406)


@pytest.mark.parametrize(
    ("accept", "expected"),
    [
        ("application/json;q=0, */*", (False, True)),
        ("text/event-stream;q=0, text/*, application/json", (True, False)),
        ("application/json;Q=0, text/event-stream", (False, True)),
    ],
)
def test_specific_q0_beats_wildcards(accept, expected):
    assert negotiate(accept) == expected


# -- Content-Type --------------------------------------------------------------------------


@pytest.mark.parametrize(
    "content_type",
    [
        "application/json",
        "Application/JSON",
        "application/json; charset=utf-8",
        "application/json;charset=UTF-8",
        'application/json; charset="utf-8"',
    ],
)
def test_json_content_types_pass(content_type):
    check_content_type(content_type)


@pytest.mark.parametrize(
    "content_type",
    [
        None,
        "",
        "text/plain",
        "application/x-www-form-urlencoded",
        "application/json-seq",
        "application/json; charset=latin-1",
        "text/json",
    ],
)
def test_other_content_types_are_415(content_type):
    refused(lambda: check_content_type(content_type), 415)
