"""server.serving.cycle: the response head built from remembered header lines, the same for
a header given as a tuple or as a two-item list (ASGI allows any iterable pair), and the request
id's line, new in every response, written as HeaderLines writes it."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
import uvicorn

from server.serving import VERIFIED_UVICORN

if uvicorn.__version__ not in VERIFIED_UVICORN:
    pytest.skip("the server runs on uvicorn's own protocol", allow_module_level=True)

from server.serving.cycle import Cycle
from server.serving.flow import Signal


class Transport:
    def __init__(self) -> None:
        self.written: list[bytes] = []

    def write(self, data: bytes) -> None:
        self.written.append(data)

    def is_closing(self) -> bool:
        return False


def cycle(transport: Transport) -> Cycle:
    protocol: Any = SimpleNamespace(
        transport=transport,
        flow=SimpleNamespace(write_paused=False),
        logger=None,
        access_logger=None,
        access_log=False,
        server_state=SimpleNamespace(default_headers=[(b"server", b"test")]),
        on_response_complete=lambda: None,
        expect_100_continue=False,
        tasks=set(),
    )
    return Cycle(protocol, {"method": "POST", "http_version": "1.1"}, True)


@pytest.mark.parametrize("as_list", [False, True])
def test_a_head_is_the_same_for_tuple_and_list_pairs(as_list: bool) -> None:
    transport = Transport()
    headers: list[Any] = [(b"content-type", b"application/json"), (b"content-length", b"2")]
    if as_list:
        headers = [list(pair) for pair in headers]
    cycle(transport)._start(200, headers)
    assert transport.written == [
        b"HTTP/1.1 200 OK\r\nserver: test\r\ncontent-type: application/json\r\n"
        b"content-length: 2\r\n\r\n"
    ]


@pytest.mark.parametrize(
    ("value", "line"),
    [
        (b"1a2b3c4d00000001", b"x-request-id: 1a2b3c4d00000001\r\n"),  # the server's own
        (b"lb-7f3a/0001", b"x-request-id: lb-7f3a/0001\r\n"),  # a proxy's: checked, as before
    ],
)
def test_the_request_id_line_is_written_as_header_lines_would(value: bytes, line: bytes) -> None:
    transport = Transport()
    head = cycle(transport)
    head._start(200, [(b"content-length", b"0"), (b"x-request-id", value)])
    assert transport.written == [
        b"HTTP/1.1 200 OK\r\nserver: test\r\ncontent-length: 0\r\n" + line + b"\r\n"
    ]
    assert head.expected_content_length == 0
    assert head.chunked_encoding is False


def test_a_request_id_that_could_break_the_head_is_refused() -> None:
    with pytest.raises(RuntimeError, match="Invalid HTTP header value"):
        cycle(Transport())._start(200, [(b"x-request-id", b"a\r\nb")])


def test_a_cycles_signal_is_a_new_unset_one() -> None:
    """Cycle makes its Signal without calling Signal(): it must stay what Signal() makes."""
    made: list[object] = [cycle(Transport()).message_event for _ in range(2)]
    assert made[0] is not made[1]
    for event in made:
        assert type(event) is Signal
        fresh = Signal()
        assert {slot: getattr(event, slot) for slot in Signal.__slots__} == {
            slot: getattr(fresh, slot) for slot in Signal.__slots__
        }
