"""Running the app under uvicorn, with a shutdown that tells the app first.

On SIGTERM uvicorn waits for open connections before the lifespan shutdown, and listen
streams never close by themselves: :class:`Server` calls ``Application.begin_shutdown``
first (the streams get their graceful result, the drain deadline is armed), then two
deadlines follow (:func:`shutdown_deadlines`). Process-wide choices live here, where this
server owns the process: the collector (:func:`tune_collector`), the C heap, the log
configuration, uvicorn's access log (off when the records go to stdout; never a query string,
:class:`NoQueryString`) and the HTTP protocol (:func:`http_protocol`: the verified copy of
uvicorn's, else uvicorn's own with a warning). :func:`serve` is the whole of it from Python.
The details: docs/decisions.md#serving-process-choices.
"""

from __future__ import annotations

import contextlib
import gc
import logging
import os
import signal
import socket
import sys
from pathlib import Path
from types import FrameType
from typing import Any

import uvicorn
from pydantic import SecretStr

from server.app import Application, create_app
from server.catalog import Catalog
from server.catalog.loading import load_catalog
from server.logs import configure as configure_logs
from server.logs import dict_config as logs_config
from server.serving.heap import keep_freed_heap
from server.serving.idle_sweep import reading_first
from server.serving.stalled_clients import drop_stalled_clients
from server.settings import Settings, load_settings, unknown_variables

log = logging.getLogger(__name__)

# The uvicorn releases server/serving/uvicorn_protocol.py was checked against (its copies of
# uvicorn's code, and the wire bytes: tests/serving/test_uvicorn_protocol.py). Add a release
# only after that test, tests/serving and tests/transport pass on it, and its httptools_impl
# has been compared with the last verified one (0.55.0: the copied methods unchanged; an
# upgrade's hand-over and on_header's trimmed values changed in code inherited as it is).
VERIFIED_UVICORN = frozenset({"0.54.0", "0.55.0"})


class Server(uvicorn.Server):
    def __init__(
        self, config: uvicorn.Config, app: Application, drain_timeout_s: float | None = None
    ) -> None:
        super().__init__(config)
        self.application = app
        # This server calls begin_shutdown itself (shutdown below), in any thread: the app's
        # lifespan need not wrap the exit signals.
        app.lifecycle.server_tells_shutdown = True
        # The app's drain deadline (None: its MCP_DRAIN_TIMEOUT_S), before uvicorn's own.
        self.drain_timeout_s = drain_timeout_s

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        keep_freed_heap()
        lifespan = self.lifespan
        app_startup = lifespan.startup

        async def then_tune_collector() -> None:
            await app_startup()
            # Between the app's start-up and the listening socket: the full collection
            # (tens of ms of CPU) delays no request (issue 35: a replica's first requests).
            if not lifespan.should_exit:
                tune_collector()

        lifespan.startup = then_tune_collector
        await super().startup(sockets)
        if self.started:
            # Every connection accepted from here on inherits it: a client that stops
            # reading is dropped by the kernel after the send timeout, on any protocol.
            listeners = [sock for server in self.servers for sock in server.sockets]
            drop_stalled_clients(listeners, self.application.settings.send_timeout_s)

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
    few hundred), and full ones less often than a frozen heap would trigger them by default:
    no full collection pauses a fan-out to many open streams
    (docs/decisions.md#collector-tuning)."""
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
    graceful = overrides.get("timeout_graceful_shutdown")
    drain_s, graceful_s = shutdown_deadlines(
        app.settings, float(graceful) if isinstance(graceful, (int, float)) else None
    )
    options = uvicorn_options(app.settings, graceful_s)
    options.update(overrides)
    # The app's entry itself (an ASGI 3 callable that is not a coroutine function, so uvicorn
    # is told the interface rather than left to guess it).
    config = uvicorn.Config(app.entry, interface="asgi3", **options)
    # After the Config, which configures logging: a filter on the logger itself is kept by
    # logging.config (it replaces handlers, not filters), and applies to every handler.
    logging.getLogger("uvicorn.access").addFilter(NO_QUERY_STRING)
    return Server(config, app, drain_s)


def uvicorn_options(settings: Settings, graceful_s: float | None = None) -> dict[str, Any]:
    """uvicorn's configuration from the settings; ``graceful_s``: its graceful timeout (None:
    ``MCP_DRAIN_TIMEOUT_S`` + ``MCP_SHUTDOWN_GRACE_S``)."""
    if graceful_s is None:
        graceful_s = shutdown_deadlines(settings)[1]
    return {
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
        "log_config": logs_config(settings.log_format, settings.log_level),
        # No websockets here: an Upgrade request is answered as plain HTTP.
        "ws": "none",
        # No "server: uvicorn" on every response: it names the software to anyone asking, and
        # uvicorn checks each response header it adds against two patterns.
        "server_header": False,
        # Forwarded headers are the app's to believe, from MCP_TRUSTED_PROXIES only
        # (security.networks): uvicorn rewriting the scope's client would hide the proxy,
        # and with it which X-Request-Id is the proxy's and which a client's.
        "proxy_headers": False,
        # After the app's drain deadline (see shutdown_deadlines). uvicorn declares an int but
        # only ever waits for it, so a fraction of a second is kept.
        "timeout_graceful_shutdown": graceful_s,
        "http": http_protocol(settings),
        # uvicorn's cap on a request head under h11; this server's httptools protocol reads it
        # too (uvicorn's own httptools protocol has none). The request line gets 16 KiB more.
        "h11_max_incomplete_event_size": settings.max_header_bytes + 16 * 1024,
    }


# What a server on uvicorn's own protocol does without, said when it falls back to it.
FALLBACK_COST = (
    "coalesced writes (one system call per response instead of two: about a fifth fewer "
    "requests/s under load, docs/decisions.md#write-coalescing), header lines checked once, "
    "no timer per keep-alive response, and the immediate reset of a stream whose client "
    "stopped reading "
    "(the kernel still drops it after MCP_SEND_TIMEOUT_S: server/serving/stalled_clients.py)"
)


def http_protocol(settings: Settings) -> Any:
    """This server's HTTP protocol class on a verified uvicorn (and unless
    ``MCP_COALESCE_WRITES=false``), else uvicorn's own: on a verified uvicorn with its
    keep-alive timer never resetting a connection whose request waits unread
    (:func:`~server.serving.idle_sweep.reading_first`), on any other ``"auto"``, as it is.
    Logs which, and why: a fall back that was not asked for is a warning naming the release
    and what is lost."""
    version = uvicorn.__version__
    if not settings.coalesce_writes:
        log.info("HTTP protocol: uvicorn's own (MCP_COALESCE_WRITES=false)")
        return reading_first() if version in VERIFIED_UVICORN else "auto"
    if version not in VERIFIED_UVICORN:
        log.warning(
            "HTTP protocol: uvicorn's own, as uvicorn %s is not a release this server's "
            "protocol was verified against (%s); without it: %s. Install a verified release "
            "to have them, or set MCP_COALESCE_WRITES=false to run on uvicorn's on purpose",
            version,
            ", ".join(sorted(VERIFIED_UVICORN)),
            FALLBACK_COST,
        )
        return "auto"
    try:
        from server.serving.uvicorn_protocol import HttpProtocol
    except ImportError as error:  # httptools missing: uvicorn without its [standard] extra
        log.warning("HTTP protocol: uvicorn's own (%s); without it: %s", error, FALLBACK_COST)
        return reading_first()
    log.info("HTTP protocol: this server's, on uvicorn %s (verified)", version)
    return HttpProtocol


def serve(catalog: Catalog | str | None = None, *, reload: bool = False, **settings: Any) -> None:
    """Serve ``catalog`` until SIGTERM or SIGINT, as ``python -m server`` does.

    ``catalog``: a :class:`~server.Catalog`, or its name (``probe``, ``conformance`` or
    ``package.module:attribute``); None: ``MCP_CATALOG``. ``settings``: any setting by its
    field name (``host="0.0.0.0"``, ``port=9000``, ``drain_timeout_s=10``), winning over the
    ``MCP_*`` variables. ``reload``: restart when a file of the current folder changes (for
    development; the catalog must then be given by name, since the process that serves it
    imports it afresh). Settings or a catalog it cannot start with raise
    :class:`~server.errors.ConfigurationError`, one line that names the variable."""
    if isinstance(catalog, str):
        settings["catalog"] = catalog
    chosen = load_settings(**settings)
    configure_logs(chosen.log_format, chosen.log_level)
    for warning in unknown_variables():
        log.warning(warning)
    if reload:
        if isinstance(catalog, Catalog):
            raise ValueError(
                "reload needs the catalog by name ('module:attribute'): the restarted process "
                "imports it afresh"
            )
        _serve_reloading(chosen, settings)
        return
    app = _app(chosen, catalog if isinstance(catalog, Catalog) else None)
    server_for(app).run()


def _app(settings: Settings, catalog: Catalog | None) -> Application:
    """The app; when the records go to stdout, whatever else would be printed there (a
    catalog's ``print``) goes to stderr, so stdout carries records only."""
    if "stdout" not in settings.records:
        return create_app(settings, catalog)
    with contextlib.redirect_stdout(sys.stderr):
        catalog = catalog if catalog is not None else load_catalog(settings.catalog)
    app = create_app(settings, catalog)  # its stdout sink keeps the real stdout
    sys.stdout = sys.stderr
    return app


def _serve_reloading(chosen: Settings, overrides: dict[str, Any]) -> None:
    """uvicorn's reloader: a process that watches the current folder and restarts another
    that builds the app with :func:`server.app.create_app`. That process reads its settings
    from the environment it inherits, so the overrides are handed down through it."""
    for name, given in overrides.items():
        value = given.get_secret_value() if isinstance(given, SecretStr) else given
        os.environ[f"MCP_{name.upper()}"] = (
            ",".join(map(str, value)) if isinstance(value, (list, tuple)) else str(value)
        )
    options = uvicorn_options(chosen)
    # The restarted process configures its own logging, without the filter that keeps query
    # strings out of the access log: no access log there (the request records are one).
    options["access_log"] = False
    folder = Path.cwd()
    uvicorn.run(
        "server.app:create_app",
        factory=True,
        reload=True,
        reload_dirs=[str(folder)],
        reload_excludes=records_folders(chosen, folder),
        **options,
    )


def records_folders(chosen: Settings, folder: Path) -> list[str]:
    """The records' folder when it is under ``folder``: what the reloader must not restart for
    (a record is written per request; a rotated file may be named anything)."""
    if "file" not in chosen.records:
        return []
    folder = folder.resolve()
    records = (folder / chosen.records_file).resolve().parent
    if records == folder or folder not in records.parents:
        return []
    # uvicorn takes relative patterns, and a folder only when it exists (the sink would make
    # it at start anyway).
    records.mkdir(parents=True, exist_ok=True)
    return [str(records.relative_to(folder))]


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
