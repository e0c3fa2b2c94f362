"""Write coalescing for uvicorn's HTTP protocols: every connection's writes, once per loop turn.

uvicorn writes a response as it is sent: the status line and headers in one system call, the
body in another, each at once. Measured on this project's machines (docs/benchmarks.md), the
cost that grows fastest with load is not the writes themselves but what each one sets off in
the kernel: the loopback delivery that wakes the reading client, one wake-up per write. Here
the writes of every connection are held until the event loop finishes its current turn and
then written together, each connection's pieces joined into one write: a response costs one
system call instead of two, and the responses finished in the same turn wake their clients
together.

Nothing waits for long: the flush runs as the next callback of the loop (``call_soon``), before
the loop polls for more input, and a connection's pending bytes are written before it closes.
Ordering per connection is kept; reading, flow control and addresses pass straight through to
the real transport.

:func:`coalescing_protocol` gives the protocol class to hand uvicorn (``Config(http=...)``):
its httptools protocol (or h11's, where httptools is missing) with the transport wrapped.

May import: uvicorn, the standard library.
"""

from __future__ import annotations

import asyncio
import logging
import weakref
from typing import Any

log = logging.getLogger("server.coalescing")


class WriteBatch:
    """The writes of one loop's connections, flushed together once per loop turn."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._pending: list[tuple[asyncio.WriteTransport, bytes]] = []
        self._scheduled = False
        self.flushes = 0  # how many turns wrote something (tests and curiosity)

    def add(self, transport: asyncio.WriteTransport, data: bytes) -> None:
        self._pending.append((transport, data))
        if not self._scheduled:
            self._scheduled = True
            self._loop.call_soon(self.flush)

    def flush(self) -> None:
        self._scheduled = False
        pending, self._pending = self._pending, []
        if not pending:
            return
        self.flushes += 1
        # One write per connection, its pieces in the order they were sent.
        joined: dict[asyncio.WriteTransport, list[bytes]] = {}
        for transport, data in pending:
            joined.setdefault(transport, []).append(data)
        for transport, pieces in joined.items():
            _write(transport, pieces)

    def flush_one(self, transport: asyncio.WriteTransport) -> None:
        """Write what ``transport`` has pending now (it is about to close)."""
        mine = [data for owner, data in self._pending if owner is transport]
        if not mine:
            return
        self._pending = [item for item in self._pending if item[0] is not transport]
        _write(transport, mine)


def _write(transport: asyncio.WriteTransport, pieces: list[bytes]) -> None:
    """One connection's write (a gathering one for several pieces, so a large body is not
    copied to be joined); a connection that is gone (or fails) loses only its own bytes."""
    if transport.is_closing():
        return
    try:
        if len(pieces) == 1:
            transport.write(pieces[0])
        else:
            transport.writelines(pieces)
    except Exception:
        log.exception("writing a response failed")


_batches: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, WriteBatch] = (
    weakref.WeakKeyDictionary()
)


def write_batch(loop: asyncio.AbstractEventLoop) -> WriteBatch:
    batch = _batches.get(loop)
    if batch is None:
        batch = _batches[loop] = WriteBatch(loop)
    return batch


class CoalescingTransport(asyncio.Transport):
    """A connection's transport whose writes go through the loop's :class:`WriteBatch`."""

    def __init__(self, transport: asyncio.Transport, batch: WriteBatch) -> None:
        super().__init__()
        self._transport = transport
        self._batch = batch

    # -- writing: held until the loop's turn ends ----------------------------------------

    def write(self, data: bytes | bytearray | memoryview) -> None:
        if data:
            self._batch.add(self._transport, bytes(data))

    def writelines(self, list_of_data: Any) -> None:
        self.write(b"".join(list_of_data))

    def close(self) -> None:
        self._batch.flush_one(self._transport)
        self._transport.close()

    def write_eof(self) -> None:
        self._batch.flush_one(self._transport)
        self._transport.write_eof()

    def abort(self) -> None:
        self._transport.abort()  # abort drops unwritten data by definition

    # -- everything else: the real transport's --------------------------------------------

    def is_closing(self) -> bool:
        return self._transport.is_closing()

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return self._transport.get_extra_info(name, default)

    def pause_reading(self) -> None:
        self._transport.pause_reading()

    def resume_reading(self) -> None:
        self._transport.resume_reading()

    def is_reading(self) -> bool:
        return self._transport.is_reading()

    def can_write_eof(self) -> bool:
        return self._transport.can_write_eof()

    def get_write_buffer_size(self) -> int:
        return self._transport.get_write_buffer_size()

    def get_write_buffer_limits(self) -> tuple[int, int]:
        return self._transport.get_write_buffer_limits()

    def set_write_buffer_limits(self, high: int | None = None, low: int | None = None) -> None:
        self._transport.set_write_buffer_limits(high, low)

    def set_protocol(self, protocol: asyncio.BaseProtocol) -> None:
        self._transport.set_protocol(protocol)

    def get_protocol(self) -> asyncio.BaseProtocol:
        return self._transport.get_protocol()


def coalescing_protocol() -> type[asyncio.Protocol]:
    """uvicorn's HTTP protocol class (httptools if installed, else h11) with coalesced writes."""
    base: type[Any]
    try:
        from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

        base = HttpToolsProtocol
    except ImportError:  # httptools missing: uvicorn's pure-Python parser
        from uvicorn.protocols.http.h11_impl import H11Protocol

        base = H11Protocol

    class CoalescingProtocol(base):  # type: ignore[misc]
        def connection_made(self, transport: asyncio.Transport) -> None:
            batch = write_batch(asyncio.get_running_loop())
            super().connection_made(CoalescingTransport(transport, batch))

    CoalescingProtocol.__name__ = f"Coalescing{base.__name__}"
    CoalescingProtocol.__qualname__ = CoalescingProtocol.__name__
    return CoalescingProtocol
