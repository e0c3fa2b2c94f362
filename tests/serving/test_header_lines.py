"""server.serving.header_lines: each response header line checked, encoded and classified
once, and what is remembered bounded."""

import pytest

from server.serving.header_lines import HeaderLines


def test_header_lines_are_checked_and_classified_once() -> None:
    lines = HeaderLines()
    assert lines.line((b"Content-Type", b"text/plain")) == (b"content-type: text/plain\r\n", 0, 0)
    assert lines.line((b"content-length", b"42"))[1:] == (1, 42)
    assert lines.line((b"transfer-encoding", b"Chunked"))[1] == 2
    assert lines.line((b"transfer-encoding", b"gzip"))[1] == 0
    assert lines.line((b"connection", b"keep-alive, close"))[1] == 3
    assert lines.line((b"connection", b"keep-alive"))[1] == 0
    with pytest.raises(RuntimeError, match="header name"):
        lines.line((b"bad name", b"x"))
    with pytest.raises(RuntimeError, match="header value"):
        lines.line((b"x-split", b"a\r\nb"))
    with pytest.raises(RuntimeError, match="header value"):
        lines.line((b"x-split", b"a\r\nb"))  # never remembered as fine


def test_remembered_header_lines_stay_bounded() -> None:
    lines = HeaderLines()
    for length in range(5000):
        lines.line((b"content-length", str(length).encode()))
    assert len(lines.known) <= 1024


def test_big_header_lines_are_checked_but_never_kept() -> None:
    lines = HeaderLines()
    for number in range(20):
        value = b"v" * 8192 + str(number).encode()
        assert lines.line((b"x-echo", value))[0] == b"x-echo: " + value + b"\r\n"
    assert len(lines.known) == 0


def test_a_request_id_line_is_checked_each_time_and_never_pushes_out_the_lines_that_repeat():
    lines = HeaderLines()
    common = (b"content-type", b"application/json")
    lines.line(common)
    for serial in range(3000):  # a new X-Request-Id on every response
        request_id = b"%016x" % serial
        assert (
            lines.line((b"x-request-id", request_id))[0] == b"x-request-id: " + request_id + b"\r\n"
        )
    assert list(lines.known) == [common]
    with pytest.raises(RuntimeError, match="header value"):
        lines.line((b"x-request-id", b"a\r\nb"))
