"""Dropping a client that stops reading, in the kernel: ``TCP_USER_TIMEOUT`` on the listeners.

A stream's sends are bounded by ``MCP_SEND_TIMEOUT_S``, but a send waits only once the kernel's
buffer (megabytes) and the protocol's are full, so a stream with little more to send never
times out. ``TCP_USER_TIMEOUT``, set to the send timeout on the listening sockets and inherited
by every connection, makes the kernel drop a connection whose bytes stay unacknowledged or
whose window stays shut that long, on any HTTP protocol, at no cost per connection; the stream
then ends as on any disconnect. Where the platform lacks it, one warning at start-up.
Why: docs/decisions.md#stalled-clients.
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
