"""server.logs: the JSON and text formats, and the request a line belongs to."""

from __future__ import annotations

import asyncio
import contextvars
import json
import logging
import sys

import pytest

from server import logs
from server.records.draft import Draft


def record(message: str = "hello %s", *args: object, **extra: object) -> logging.LogRecord:
    made = logging.LogRecord("server.test", logging.WARNING, __file__, 1, message, args, None)
    made.__dict__.update(extra)
    return made


def draft() -> Draft:
    return Draft("POST", "/mcp", "agent/1", "127.0.0.1", "2026-07-28")


def in_fresh_context(function):
    """Run ``function`` in a copy of the context, as uvicorn runs each request in its task."""
    return contextvars.copy_context().run(function)


def test_a_json_line_has_time_level_logger_and_message() -> None:
    line = json.loads(logs.JsonFormatter().format(record("hello %s", "world", request={})))
    assert line["level"] == "warning"
    assert line["logger"] == "server.test"
    assert line["message"] == "hello world"
    assert line["time"].endswith("Z")
    assert line["time"][10] == "T"
    assert set(line) == {"time", "level", "logger", "message"}


def test_a_traceback_stays_on_the_one_json_line() -> None:
    try:
        raise RuntimeError("first\nsecond")
    except RuntimeError:
        failed = record("it broke", exc_info=sys.exc_info())
    text = logs.JsonFormatter().format(failed)
    assert "\n" not in text
    line = json.loads(text)
    assert line["exception"].startswith("Traceback (most recent call last)")
    assert "RuntimeError: first\nsecond" in line["exception"]


def test_outside_a_request_a_line_names_none() -> None:
    def outside() -> dict[str, str]:
        line = record()
        assert logs.RequestFields().filter(line) is True
        request: dict[str, str] = line.request  # type: ignore[attr-defined]  # set by the filter
        return request

    assert in_fresh_context(outside) == {}


def test_a_line_names_its_request_as_far_as_it_is_known_when_logged() -> None:
    request = draft()

    def inside() -> tuple[dict[str, str], dict[str, str]]:
        logs.bind_request(request)
        early = logs.request_fields()
        request.era, request.method = "legacy", "tools/call"
        request.session_id, request.client_name = "s-1", "claude-code"
        return early, logs.request_fields()

    early, later = in_fresh_context(inside)
    assert early == {"request_id": request.request_id}
    assert later == {
        "request_id": request.request_id,
        "era": "legacy",
        "method": "tools/call",
        "session_id": "s-1",
        "client_name": "claude-code",
    }
    line = record()
    in_fresh_context(lambda: (logs.bind_request(request), logs.RequestFields().filter(line)))
    assert json.loads(logs.JsonFormatter().format(line))["session_id"] == "s-1"


def test_tasks_a_request_starts_inherit_it_and_other_requests_do_not_see_it() -> None:
    async def main() -> tuple[dict[str, str], dict[str, str]]:
        request = draft()

        async def serve() -> dict[str, str]:
            logs.bind_request(request)
            # A handler task, as the dispatcher starts one per call.
            return await asyncio.create_task(asyncio.sleep(0, logs.request_fields()))

        async def other() -> dict[str, str]:
            await asyncio.sleep(0)
            return logs.request_fields()

        return await asyncio.gather(asyncio.create_task(serve()), asyncio.create_task(other()))

    inherited, unrelated = in_fresh_context(lambda: asyncio.run(main()))
    assert set(inherited) == {"request_id"}
    assert unrelated == {}


def test_the_text_format_adds_the_request_in_brackets() -> None:
    formatter = logs.TextFormatter()
    plain = formatter.format(record(request={}))
    assert plain.endswith(" WARNING server.test: hello %s")
    named = formatter.format(record(request={"request_id": "ab", "method": "ping"}))
    assert named.endswith(" WARNING server.test: hello %s [request_id=ab method=ping]")


def test_the_config_sends_uvicorns_lines_to_the_one_stderr_handler(
    capsys: pytest.CaptureFixture[str],
) -> None:
    root = logging.getLogger()
    saved = (root.handlers[:], root.level)
    uvicorn = logging.getLogger("uvicorn.error")
    saved_uvicorn = (uvicorn.handlers[:], uvicorn.propagate, uvicorn.level)
    uvicorn.handlers = [logging.StreamHandler(sys.stdout)]  # as uvicorn's default config has it
    uvicorn.setLevel(logging.INFO)  # (an earlier uvicorn in this process may have set another)
    try:
        logs.configure("json", "info")
        uvicorn.info("Started server process [1]")
        logging.getLogger("server.x").debug("below the level")
        captured = capsys.readouterr()
    finally:
        root.handlers, root.level = saved
        uvicorn.handlers, uvicorn.propagate = saved_uvicorn[:2]
        uvicorn.setLevel(saved_uvicorn[2])
        logging.captureWarnings(False)
    assert captured.out == ""
    (line,) = captured.err.splitlines()
    assert json.loads(line)["logger"] == "uvicorn.error"


FORGED = "2026-12-01 16:24:32,819 WARNING server.app: FORGED"
BREAKERS = "\n\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029\x1b\u202e"


def hostile_line(formatter: logging.Formatter, **extra: object) -> str:
    request = draft()
    request.method = "tools/call\n" + FORGED
    request.client_name = "evil" + BREAKERS + FORGED + "x" * (3 * 1024 * 1024)
    line = record("asked for %s", "a\n" + FORGED + "y" * 100_000, **extra)
    in_fresh_context(lambda: (logs.bind_request(request), logs.RequestFields().filter(line)))
    return formatter.format(line)


@pytest.mark.parametrize("formatter", [logs.TextFormatter(), logs.JsonFormatter()])
def test_a_client_chosen_value_neither_breaks_nor_swells_a_line(
    formatter: logging.Formatter,
) -> None:
    text = hostile_line(formatter)
    assert text.splitlines() == [text]  # splitlines breaks on every Unicode line boundary
    assert "\x1b" not in text
    assert "\u202e" not in text
    assert len(text) < logs.MAX_MESSAGE_CHARS + len(logs.REQUEST_FIELDS) * 300


def test_a_json_line_keeps_the_values_bounded_but_decodable() -> None:
    line = json.loads(hostile_line(logs.JsonFormatter()))
    assert line["client_name"].startswith("evil" + BREAKERS + FORGED)
    assert line["client_name"].endswith("…[truncated, 3145794 chars]")
    assert line["method"] == "tools/call\n" + FORGED
    assert line["message"].startswith("asked for a\n" + FORGED + "yyy")
    assert line["message"].endswith("…[truncated, 100062 chars]")


def test_the_text_format_escapes_and_quotes_what_could_pass_for_fields() -> None:
    text = hostile_line(logs.TextFormatter())
    assert " asked for a\\n2026-12-01 16:24:32,819 WARNING" in text
    assert " [request_id=" in text
    assert ' method="tools/call\\n2026-12-01 16:24:32,819 WARNING server.app: FORGED"' in text
    assert ' client_name="evil\\n\\r\\u000b\\f\\u001c\\u001d\\u001e\\u0085\\u2028' in text
    named = logs.TextFormatter().format(record(request={"client_name": "a] method=x"}))
    assert named.endswith('[client_name="a] method=x"]')


def test_a_text_traceback_is_indented_and_escaped() -> None:
    try:
        raise RuntimeError("first\n" + FORGED + "\u2028" + FORGED)
    except RuntimeError:
        failed = record("it broke", exc_info=sys.exc_info())
    lines = logs.TextFormatter().format(failed).split("\n")
    assert lines[0].endswith(" WARNING server.test: it broke")
    assert lines[1] == "    Traceback (most recent call last):"
    assert all(line.startswith("    ") for line in lines[1:])
    assert lines[-2:] == [
        "    RuntimeError: first",
        f"    {FORGED}\\u2028{FORGED}",
    ]


def test_adopt_moves_uvicorns_stdout_lines_off_a_stdout_that_holds_records(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    access = logging.getLogger("uvicorn.access")
    to_stdout, elsewhere = logging.StreamHandler(sys.stdout), logging.StreamHandler(sys.stderr)
    monkeypatch.setattr(access, "handlers", [to_stdout, elsewhere])
    monkeypatch.setattr(access, "propagate", False)
    assert logging.getLogger().handlers  # pytest's: someone configured the root already
    assert logs.adopt("json", "info", records_on_stdout=False) is False
    assert access.handlers == [to_stdout, elsewhere]
    assert logs.adopt("json", "info", records_on_stdout=True) is False
    assert (access.handlers, access.propagate) == ([elsewhere], True)


def test_adopt_leaves_a_process_uvicorn_did_not_configure_alone(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(logging.getLogger(), "handlers", [])
    for name in logs.UVICORN_LOGGERS:
        monkeypatch.setattr(logging.getLogger(name), "handlers", [])
    assert logs.adopt("json", "info", records_on_stdout=True) is False
    assert logging.getLogger().handlers == []
