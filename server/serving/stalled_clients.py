"""Dropping a client that stops reading, in the kernel: ``TCP_USER_TIMEOUT`` on the listeners.

A stream's sends are bounded by ``MCP_SEND_TIMEOUT_S``
(:func:`server.transport.send.send_within`), but a send waits only once the HTTP protocol's own
buffer is full, and that fills only after the kernel's: with default socket buffers the kernel
takes megabytes for a client that reads nothing (its send buffer grows to ``tcp_wmem``'s
maximum, 4 MiB on Linux). A stream that then has little more to send (an idle listen stream, a
keep-alive comment every 15 s) never waits on a send, so no send times out, and the connection
stays established with those megabytes unsent for as long as the client keeps it open.

``TCP_USER_TIMEOUT`` is the kernel's own bound on exactly that: a connection whose sent bytes
stay unacknowledged, or whose peer keeps its receive window shut (zero-window probes answered,
nothing taken), for longer than the timeout is dropped (Linux 5.11 and later are exact for the
shut window). Set on a listening socket it is inherited by every connection accepted from it,
so it costs nothing per connection and holds on any HTTP protocol: this server's, and
uvicorn's own on a release this server's protocol was not verified against. It is set to the
send timeout, the one bound a stalled client gets: the kernel drops the connection, the
protocol sees it lost, and the stream ends and frees what it held as on any disconnect.
Idle connections hold nothing unacknowledged and are not affected.

Where the platform has no ``TCP_USER_TIMEOUT`` (macOS, Windows) a warning says so once at
start-up: streams then still end on a send that times out, but not on bytes held in the kernel.
"""

from __future__ import annotations

import logging
import socket
from collections.abc import Iterable
from typing import Any

log = logging.getLogger(__name__)

_OPTION: int | None = getattr(socket, "TCP_USER_TIMEOUT", None)
_TCP = (socket.AF_INET, socket.AF_INET6)


def drop_stalled_clients(listeners: Iterable[Any], timeout_s: float) -> int:
    """Set ``TCP_USER_TIMEOUT`` (``timeout_s``, in milliseconds) on every TCP socket of
    ``listeners`` (asyncio's servers' sockets, or sockets); returns on how many. Logs a
    warning when it cannot (no such option here, or the kernel refuses it)."""
    if _OPTION is None:
        log.warning(
            "this platform has no TCP_USER_TIMEOUT: a client that stops reading a stream "
            "keeps what the kernel holds for it (up to its send buffer) until the next send "
            "times out (MCP_SEND_TIMEOUT_S), or for as long as the stream sends nothing more"
        )
        return 0
    milliseconds = max(1, round(timeout_s * 1000))
    done = 0
    for sock in listeners:
        if sock.family not in _TCP:
            continue  # a Unix socket: no TCP, and a local peer
        try:
            sock.setsockopt(socket.IPPROTO_TCP, _OPTION, milliseconds)
        except OSError as error:
            log.warning("TCP_USER_TIMEOUT could not be set on %s: %s", sock.getsockname(), error)
            continue
        done += 1
    return done
