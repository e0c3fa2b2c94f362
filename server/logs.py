"""The server's own log lines: one format for ours and uvicorn's, on stderr, with the request
each line belongs to.

``MCP_LOG_FORMAT=text`` writes ``time LEVEL logger: message``; ``json`` one object per line.
Both go to stderr: stdout is left to the records (``MCP_RECORDS=stdout``). A line logged while a
request is served carries its ``request_id``, ``era``, ``method``, ``session_id`` and
``client_name`` (:func:`bind_request`, read by :class:`RequestFields`). Whatever a client chose
may reach a line, so every field, message and traceback is bounded (:data:`MAX_FIELD_CHARS`,
:data:`MAX_MESSAGE_CHARS`, :data:`MAX_EXCEPTION_CHARS`) and every line breaker, control
character and bidirectional override escaped: no line can pass for another. Standard library
only; :func:`dict_config` is what serving hands to uvicorn.
"""

from __future__ import annotations

import json
import logging
import re
import sys
import time
from contextvars import Token
from typing import Any, Literal

from server.call_note import CALL_NOTE, CallNote

LogFormat = Literal["text", "json"]
REQUEST_FIELDS = ("request_id", "era", "method", "session_id", "client_name")
# uvicorn's loggers: handed to the root logger, so uvicorn's lines look like ours.
UVICORN_LOGGERS = ("uvicorn", "uvicorn.error", "uvicorn.access", "uvicorn.asgi")
# What one line keeps of each part: a request field (a client's name may be megabytes long),
# the message (it may quote a client's value), a traceback (its message may too).
MAX_FIELD_CHARS = 200
MAX_MESSAGE_CHARS = 4096
MAX_EXCEPTION_CHARS = 32_768
# What could end or forge a line, or rewrite it on a terminal: C0 and C1 controls and DEL,
# the Unicode line and paragraph separators, and the bidirectional overrides and isolates.
_UNSAFE = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]")
# Escaped as JSON does, for the ones json.dumps leaves raw (it escapes only below 0x20).
_UNSAFE_IN_JSON = re.compile("[\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]")
_SHORT_ESCAPES = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}
# A text field's value is quoted when it could read as another field or end the brackets.
_NEEDS_QUOTES = re.compile(r'[\s"=\[\]]')


# What a log line tells of its request (a record draft has it all).
RequestFacts = CallNote


def bind_request(facts: RequestFacts) -> Token[CallNote | None]:
    """The request the current task's log lines (and call notes) belong to, read when a line
    is written; reset with ``CALL_NOTE.reset(token)`` when the request ends."""
    return CALL_NOTE.set(facts)


def request_fields() -> dict[str, str]:
    """The current request's fields, those known so far, each cut at
    :data:`MAX_FIELD_CHARS`; {} outside a request."""
    facts = CALL_NOTE.get()
    if facts is None:
        return {}
    fields = {"request_id": bounded(facts.request_id, MAX_FIELD_CHARS)}
    for name in REQUEST_FIELDS[1:]:
        value = getattr(facts, name)
        if value is not None:
            fields[name] = bounded(str(value), MAX_FIELD_CHARS)
    return fields


def bounded(text: str, limit: int) -> str:
    """``text`` cut at ``limit`` characters, saying how long it was."""
    if len(text) <= limit:
        return text
    return f"{text[:limit]}…[truncated, {len(text)} chars]"


def _escape(match: re.Match[str]) -> str:
    char = match.group()
    short = _SHORT_ESCAPES.get(char)
    if short is not None:
        return short
    code = ord(char)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def escaped(text: str) -> str:
    """``text`` with every character that could end, forge or rewrite a line written as an
    escape (``\\n``, ``\\x1b``, ``\\u2028``)."""
    return _UNSAFE.sub(_escape, text)


def _json_escape(match: re.Match[str]) -> str:
    return f"\\u{ord(match.group()):04x}"


def _text_field(value: str) -> str:
    """A field's value in the text format: escaped, and quoted (as a JSON string) when it
    has a space, a quote, ``=`` or a bracket."""
    if value and not _NEEDS_QUOTES.search(value):
        return escaped(value)
    return _UNSAFE_IN_JSON.sub(_json_escape, json.dumps(value, ensure_ascii=False))


class RequestFields(logging.Filter):
    """Puts the current request's fields on each record (``record.request``), for the
    formatters; lines outside a request get none."""

    def filter(self, record: logging.LogRecord) -> bool:
        record.request = request_fields()
        return True


def _utc(created: float) -> str:
    seconds = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(created))
    return f"{seconds}.{int(created % 1 * 1000):03d}Z"


class JsonFormatter(logging.Formatter):
    """One JSON object per line: time (UTC), level, logger, message, the request's fields,
    and the traceback (``exception``) as one string, so a line never breaks."""

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {
            "time": _utc(record.created),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": bounded(record.getMessage(), MAX_MESSAGE_CHARS),
        }
        line.update(getattr(record, "request", None) or {})
        if record.exc_info:
            line["exception"] = bounded(self.formatException(record.exc_info), MAX_EXCEPTION_CHARS)
        elif record.exc_text:
            line["exception"] = bounded(record.exc_text, MAX_EXCEPTION_CHARS)
        if record.stack_info:
            line["stack"] = bounded(self.formatStack(record.stack_info), MAX_EXCEPTION_CHARS)
        text = json.dumps(line, ensure_ascii=False, default=str)
        # json.dumps escapes the C0 controls; the other line breakers are escaped here.
        return _UNSAFE_IN_JSON.sub(_json_escape, text)


class TextFormatter(logging.Formatter):
    """``2026-12-01 16:24:32,819 WARNING server.app: message [request_id=... method=...]``;
    a traceback follows on lines of its own, each indented."""

    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)s %(name)s: %(message)s")

    def format(self, record: logging.LogRecord) -> str:
        record.message = escaped(bounded(record.getMessage(), MAX_MESSAGE_CHARS))
        record.asctime = self.formatTime(record, self.datefmt)
        text = self.formatMessage(record)
        if record.exc_info and not record.exc_text:
            record.exc_text = self.formatException(record.exc_info)
        if record.exc_text:
            text += _indented(bounded(record.exc_text, MAX_EXCEPTION_CHARS))
        if record.stack_info:
            text += _indented(bounded(self.formatStack(record.stack_info), MAX_EXCEPTION_CHARS))
        return text

    def formatMessage(self, record: logging.LogRecord) -> str:
        text = super().formatMessage(record)
        fields = getattr(record, "request", None)
        if fields:
            text += (
                " ["
                + " ".join(f"{key}={_text_field(str(value))}" for key, value in fields.items())
                + "]"
            )
        return text


def _indented(block: str) -> str:
    """A traceback's lines below the line they belong to, each indented and escaped: none can
    pass for a line of its own."""
    return "".join("\n    " + escaped(line) for line in block.split("\n"))


class StderrHandler(logging.StreamHandler):  # type: ignore[type-arg]
    """Writes to whatever ``sys.stderr`` is when a line is written, not when it was made (a
    stream replaced since, a test's capture, is never written to after it closed)."""

    def __init__(self) -> None:
        super().__init__(sys.stderr)

    def emit(self, record: logging.LogRecord) -> None:
        self.stream = sys.stderr
        super().emit(record)


def dict_config(log_format: LogFormat, level: str) -> dict[str, Any]:
    """A ``logging.config.dictConfig`` for the process: one stderr handler on the root logger
    in the chosen format, uvicorn's loggers passing their lines to it (uvicorn applies this
    in place of its own configuration, whose access lines went to stdout)."""
    formatter = JsonFormatter if log_format == "json" else TextFormatter
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "filters": {"request": {"()": RequestFields}},
        "formatters": {"line": {"()": formatter}},
        "handlers": {"stderr": {"()": StderrHandler, "formatter": "line", "filters": ["request"]}},
        "loggers": {name: {"handlers": [], "propagate": True} for name in UVICORN_LOGGERS},
        "root": {"handlers": ["stderr"], "level": level.upper()},
    }


def configure(log_format: LogFormat, level: str) -> None:
    """Apply :func:`dict_config`, and send Python's warnings through it too (so a JSON log
    stays JSON)."""
    import logging.config

    logging.config.dictConfig(dict_config(log_format, level))
    logging.captureWarnings(True)
