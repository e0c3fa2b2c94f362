"""Running the app under uvicorn, with a shutdown that tells the app first.

uvicorn, on SIGTERM (or ``should_exit``), stops accepting connections and then waits for the
open ones to close before it runs the lifespan shutdown. Open ``subscriptions/listen`` streams
never close by themselves, so the app has to hear about the shutdown *before* that wait: this
:class:`Server` calls ``Application.begin_shutdown`` first, which ends every listen stream with
its graceful result and arms the app's drain deadline. Two deadlines follow, the app's first
(:func:`shutdown_deadlines`): at ``MCP_DRAIN_TIMEOUT_S`` the app ends the calls still running,
each with a JSON-RPC error and a record that says so; ``MCP_SHUTDOWN_GRACE_S`` later uvicorn's
graceful timeout cancels whatever is left, which uvicorn answers with a bare 500.

It also tunes the collector once the app has started (:func:`tune_collector`), and keeps the C
heap's freed memory (:func:`server.serving.heap.keep_freed_heap`): process-wide choices, so
they are made here, where this server owns the process, never by a component that may be
embedded in someone else's. The same goes for the log configuration (:mod:`server.logs`: one
format for uvicorn's lines and ours, all on stderr) and for uvicorn's access log: off below the
info level, where it would print nothing but still cost every response its formatting, and off
when the records go to stdout (the request records are this server's access log), and at info
or debug never printing a query string
(:class:`NoQueryString`): a token a client put in the URL (``?access_token=``, refused with a
400) would be written down for anyone reading the log. The records never hold a query string.
Connections run on :mod:`server.serving.uvicorn_protocol` (uvicorn's, with one write per
connection per loop turn and no timer per response) unless ``MCP_COALESCE_WRITES=false``.
"""

from __future__ import annotations

import gc
import logging
import signal
import socket
from types import FrameType

import uvicorn

from server import logs
from server.app import Application
from server.serving.heap import keep_freed_heap
from server.serving.uvicorn_protocol import HttpProtocol
from server.settings import Settings


class Server(uvicorn.Server):
    def __init__(
        self, config: uvicorn.Config, app: Application, drain_timeout_s: float | None = None
    ) -> None:
        super().__init__(config)
        self.application = app
        # The app's drain deadline (None: its MCP_DRAIN_TIMEOUT_S), before uvicorn's own.
        self.drain_timeout_s = drain_timeout_s

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        keep_freed_heap()
        await super().startup(sockets)
        if self.started:
            tune_collector()

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        self.application.begin_shutdown(self.drain_timeout_s)
        await super().shutdown(sockets)

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        super().handle_exit(sig, frame)
        # uvicorn re-raises a caught SIGTERM after shutting down, so the process dies "by
        # signal" (exit 143) even when every call finished: a completed drain exits 0 instead.
        if sig == signal.SIGTERM and sig in self._captured_signals:
            self._captured_signals.remove(sig)


def tune_collector() -> None:
    """Everything built at start-up (modules, the catalog, schemas) lives as long as the process:
    frozen, it is out of the collector's sight, so a full collection scans only what requests
    create. Young collections run every 10,000 allocations instead of 700 (a request makes a
    few hundred), and full ones less often than a frozen heap would trigger them by default.
    Measured (docs/benchmarks.md): the 40 ms pause that was the p99 of a fan-out to 1,000
    streams is gone, and a fan-out to 10,000 streams is as fast as before."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(10_000, 10, 10)


def shutdown_deadlines(settings: Settings, graceful_s: float | None = None) -> tuple[float, float]:
    """(the app's drain deadline, uvicorn's graceful timeout), both in seconds from the start
    of the shutdown: the app's comes ``MCP_SHUTDOWN_GRACE_S`` (more than 0) before uvicorn's,
    so the calls it ends have that long to send their error. An explicit uvicorn timeout
    (``graceful_s``: a test's, an embedder's) stays as given, and the app's deadline moves
    before it when it must (to 0, ending calls at once, if the timeout is shorter than the
    grace)."""
    drain_s, grace_s = settings.drain_timeout_s, settings.shutdown_grace_s
    if graceful_s is None:
        return drain_s, drain_s + grace_s
    return max(0.0, min(drain_s, graceful_s - grace_s)), graceful_s


def server_for(app: Application, **overrides: object) -> Server:
    """A uvicorn server for ``app``, configured from its settings (``overrides`` win)."""
    settings = app.settings
    graceful = overrides.get("timeout_graceful_shutdown")
    drain_s, graceful_s = shutdown_deadlines(
        settings, float(graceful) if isinstance(graceful, (int, float)) else None
    )
    options: dict[str, object] = {
        "host": settings.host,
        "port": settings.port,
        "log_level": settings.log_level,
        "lifespan": "on",
        "root_path": settings.root_path,
        # Below info, uvicorn's access log prints nothing but still formats its arguments for
        # every response (the client address, the quoted path); the request records are the
        # access log here. At info or debug it stays, for whoever wants both, unless the
        # records go to stdout: then they are the access log there, and nothing else is.
        "access_log": settings.log_level in ("debug", "info") and "stdout" not in settings.records,
        # Our format (MCP_LOG_FORMAT) for uvicorn's lines too, all of them on stderr.
        "log_config": logs.dict_config(settings.log_format, settings.log_level),
        # No websockets here: an Upgrade request is answered as plain HTTP.
        "ws": "none",
        # No "server: uvicorn" on every response: it names the software to anyone asking, and
        # uvicorn checks each response header it adds against two patterns.
        "server_header": False,
        # Forwarded headers are believed only from the configured proxies; uvicorn applies
        # them to the scope (client address, scheme), which is all the app then reads.
        "proxy_headers": bool(settings.trusted_proxies),
        "forwarded_allow_ips": ",".join(settings.trusted_proxies) or None,
        # After the app's drain deadline (see shutdown_deadlines). uvicorn declares an int but
        # only ever waits for it, so a fraction of a second is kept.
        "timeout_graceful_shutdown": graceful_s,
    }
    if settings.coalesce_writes:
        options["http"] = HttpProtocol
    options.update(overrides)
    # The app's entry itself (an ASGI 3 callable that is not a coroutine function, so uvicorn
    # is told the interface rather than left to guess it).
    config = uvicorn.Config(app.entry, interface="asgi3", **options)  # type: ignore[arg-type]
    # After the Config, which configures logging: a filter on the logger itself is kept by
    # logging.config (it replaces handlers, not filters), and applies to every handler.
    logging.getLogger("uvicorn.access").addFilter(NO_QUERY_STRING)
    return Server(config, app, drain_s)


class NoQueryString(logging.Filter):
    """Cuts the query string off the paths uvicorn's access log prints.

    uvicorn logs ``'%s - "%s %s HTTP/%s" %d'`` with the path and its query (``?...``) as one
    argument; a path is percent-quoted there, so its first ``?`` starts the query. Every
    string argument is cut at its first ``?``: none of the others (address, method, version)
    can hold one, and a future uvicorn that moves the path still prints no query. Query
    strings are never wanted in a log: a token in one (``?access_token=``, which the
    authentication refuses) would be written down for anyone reading the log."""

    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.args, tuple):
            record.args = tuple(
                arg.partition("?")[0] if isinstance(arg, str) else arg for arg in record.args
            )
        return True


NO_QUERY_STRING = NoQueryString()
