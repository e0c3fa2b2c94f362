"""The server's own log lines: one format for ours and uvicorn's, on stderr, with the request
each line belongs to.

``MCP_LOG_FORMAT=text`` writes ``time LEVEL logger: message``; ``json`` writes one JSON object
per line (``time``, ``level``, ``logger``, ``message``, ``exception`` when there is one), for a
log shipper that reads JSON Lines. Both go to stderr, whatever the records do: stdout is left
to the records (``MCP_RECORDS=stdout``), so it carries nothing else.

A line logged while a request is served carries that request's ``request_id`` (the one in its
record), ``era``, ``method``, ``session_id`` and ``client_name``: the endpoint binds the request
(:func:`bind_request`, its record draft) once, and :class:`RequestFields` reads it when a line
is written, so every line carries what was known of the request by then. The binding is the
context variable of :mod:`server.call_note` (one per request, for the call notes and the log
lines alike): the endpoint resets it when the request ends, and the tasks and worker threads
the request starts inherit it.

Standard library only: the core may use it, and :func:`dict_config` is what
:mod:`server.serving` hands to uvicorn (which applies it) and ``python -m server`` applies
before anything can log.
"""

from __future__ import annotations

import json
import logging
import sys
import time
from contextvars import Token
from typing import Any, Literal

from server.call_note import CALL_NOTE, CallNote

LogFormat = Literal["text", "json"]
REQUEST_FIELDS = ("request_id", "era", "method", "session_id", "client_name")
# uvicorn's loggers: handed to the root logger, so uvicorn's lines look like ours.
UVICORN_LOGGERS = ("uvicorn", "uvicorn.error", "uvicorn.access", "uvicorn.asgi")


# What a log line tells of its request (a record draft has it all).
RequestFacts = CallNote


def bind_request(facts: RequestFacts) -> Token[CallNote | None]:
    """The request the current task's log lines (and call notes) belong to, read when a line
    is written; reset with ``CALL_NOTE.reset(token)`` when the request ends."""
    return CALL_NOTE.set(facts)


def request_fields() -> dict[str, str]:
    """The current request's fields, those known so far; {} outside a request."""
    facts = CALL_NOTE.get()
    if facts is None:
        return {}
    fields = {"request_id": facts.request_id}
    for name in REQUEST_FIELDS[1:]:
        value = getattr(facts, name)
        if value is not None:
            fields[name] = str(value)
    return fields


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
            "message": record.getMessage(),
        }
        line.update(getattr(record, "request", None) or {})
        if record.exc_info:
            line["exception"] = self.formatException(record.exc_info)
        elif record.exc_text:
            line["exception"] = record.exc_text
        if record.stack_info:
            line["stack"] = self.formatStack(record.stack_info)
        return json.dumps(line, ensure_ascii=False, default=str)


class TextFormatter(logging.Formatter):
    """``2026-12-01 16:24:32,819 WARNING server.app: message [request_id=... method=...]``."""

    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)s %(name)s: %(message)s")

    def formatMessage(self, record: logging.LogRecord) -> str:
        text = super().formatMessage(record)
        fields = getattr(record, "request", None)
        if fields:
            text += " [" + " ".join(f"{key}={value}" for key, value in fields.items()) + "]"
        return text


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
