"""server.transport.sse.sse_frame: the one function that frames every SSE event of every stream.

Two references check it: sse-starlette's ``ServerSentEvent.encode()`` (the bytes must be the
same for the same fields, so the hand-written framing is that library's format, not a
variant of it), and the SSE parser of the official SDK's HTTP client (httpx2's
``EventSource``, derived from httpx-sse), which must read every field back.
"""

from __future__ import annotations

import re
import subprocess
import sys
import textwrap

import httpx2
import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sse_starlette import ServerSentEvent

from server.transport.sse import KEEP_ALIVE, sse_frame

MESSAGE = orjson.dumps({"jsonrpc": "2.0", "method": "notifications/progress", "params": {}})


def parse(stream: bytes) -> list[httpx2.ServerSentEvent]:
    """Events as the SDK's client reads them (comments and keep-alives yield nothing)."""
    response = httpx2.Response(
        200,
        headers={"content-type": "text/event-stream"},
        content=stream,
        request=httpx2.Request("POST", "http://127.0.0.1/mcp"),
    )
    return list(httpx2.EventSource(response))


def reference(
    text: str | None, event_id: str | None, retry_ms: int | None, comment: str | None = None
) -> bytes:
    """sse-starlette's bytes for the fields sse_frame writes (a message event when non-empty)."""
    return ServerSentEvent(
        text, event="message" if text else None, id=event_id, retry=retry_ms, comment=comment
    ).encode()


@pytest.mark.parametrize(
    ("frame", "expected"),
    [
        (sse_frame(MESSAGE), b"event: message\r\ndata: " + MESSAGE + b"\r\n\r\n"),
        (
            sse_frame(MESSAGE, event_id="s1_7"),
            b"id: s1_7\r\nevent: message\r\ndata: " + MESSAGE + b"\r\n\r\n",
        ),
        (
            sse_frame(b"", event_id="s1_0", retry_ms=1000),
            b"id: s1_0\r\ndata: \r\nretry: 1000\r\n\r\n",
        ),
        (KEEP_ALIVE, b": \r\n\r\n"),
    ],
    ids=["message", "resumable message", "priming", "keep-alive"],
)
def test_each_kind_of_frame_on_the_wire(frame: bytes, expected: bytes) -> None:
    assert frame == expected


def test_each_kind_of_frame_is_what_sse_starlette_writes() -> None:
    text = MESSAGE.decode()
    assert sse_frame(MESSAGE) == reference(text, None, None)
    assert sse_frame(MESSAGE, event_id="s1_7") == reference(text, "s1_7", None)
    assert sse_frame(b"", event_id="s1_0", retry_ms=1000) == reference("", "s1_0", 1000)
    assert KEEP_ALIVE == sse_frame(comment="") == ServerSentEvent(comment="").encode()


def test_the_sdk_client_reads_a_stream_of_every_kind() -> None:
    stream = (
        sse_frame(b"", event_id="s1_0", retry_ms=1500)
        + KEEP_ALIVE
        + sse_frame(MESSAGE, event_id="s1_1")
        + sse_frame(MESSAGE)
    )
    priming, resumable, plain = parse(stream)
    assert (priming.id, priming.data, priming.retry) == ("s1_0", "", 1500)
    assert (resumable.event, resumable.id, resumable.json()) == (
        "message",
        "s1_1",
        orjson.loads(MESSAGE),
    )
    assert (plain.event, plain.data) == ("message", MESSAGE.decode())
    assert plain.id == "s1_1"  # an event without an id keeps the last one, as SSE says


event_ids = st.text(
    # Ids are text the server makes; a lone surrogate is not text UTF-8 can carry.
    st.characters(exclude_characters="\r\n\0", exclude_categories=["Cs"]),
    max_size=40,
)


@settings(max_examples=300, deadline=None)
@given(
    text=st.text(max_size=300),
    event_id=st.none() | event_ids,
    retry_ms=st.none() | st.integers(0, 10**9),
)
def test_any_fields_frame_as_sse_starlette_and_read_back(
    text: str, event_id: str | None, retry_ms: int | None
) -> None:
    frame = sse_frame(text.encode(), event_id=event_id, retry_ms=retry_ms)
    assert frame == reference(text, event_id, retry_ms)
    (event,) = parse(frame)
    # SSE has one line break on the client side: CR and CRLF in data come back as LF.
    assert event.data == re.sub(r"\r\n|\r", "\n", text)
    assert event.event == "message"
    assert event.id == (event_id or "")
    assert event.retry == retry_ms


@given(comment=st.text(max_size=100))
def test_any_comment_frames_as_sse_starlette_and_reads_as_nothing(comment: str) -> None:
    frame = sse_frame(comment=comment)
    assert frame == reference(None, None, None, comment)
    assert parse(frame + sse_frame(MESSAGE))[0].data == MESSAGE.decode()


@pytest.mark.parametrize("event_id", ["a\nb", "a\rb", "a\r\nb", "a\0b"])
def test_an_id_that_would_break_the_frame_is_refused(event_id: str) -> None:
    with pytest.raises(ValueError, match="event id"):
        sse_frame(MESSAGE, event_id=event_id)


def test_the_server_leaves_uvicorn_unpatched() -> None:
    """sse-starlette, once imported, replaces uvicorn's ``Server.handle_exit`` for the whole
    process (its ``AppStatus``); the server frames SSE itself and never imports it."""
    check = textwrap.dedent(
        """
        import sys
        import uvicorn.server
        original = uvicorn.server.Server.handle_exit
        import server.__main__, server.app, server.serving, server.transport.endpoint
        assert "sse_starlette" not in sys.modules, "sse_starlette imported"
        assert uvicorn.server.Server.handle_exit is original, "uvicorn patched"
        """
    )
    run = subprocess.run(
        [sys.executable, "-c", check], check=False, capture_output=True, text=True, timeout=60
    )
    assert run.returncode == 0, run.stderr
