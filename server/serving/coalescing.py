"""Write coalescing: every connection's writes, once per loop turn.

uvicorn writes a response's head and body in two system calls, each at once, and each write
wakes the reading client through the kernel (docs/decisions.md#write-coalescing). Here the
writes of every connection are held until the loop finishes its current turn and then written
together, a connection's pieces joined into one write: one system call per response, and the
responses finished in one turn wake their clients together. The flush runs as the loop's next
callback, before it polls for input, and a connection's pending bytes are written before it
closes; order per connection is kept, and reading, flow control and addresses pass straight
through. :mod:`server.serving.uvicorn_protocol` wraps every transport in a
:class:`CoalescingTransport`.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from server.aio import PerLoop

log = logging.getLogger(__name__)


class WriteBatch:
    """The connections of one loop with writes pending, flushed together once per loop turn."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._dirty: list[CoalescingTransport] = []
        self.flushes = 0  # how many turns wrote something (tests and curiosity)

    def mark(self, transport: CoalescingTransport) -> None:
        """``transport`` has its first piece pending this turn."""
        if not self._dirty:
            self._loop.call_soon(self.flush)
        self._dirty.append(transport)

    def flush(self) -> None:
        dirty, self._dirty = self._dirty, []
        if dirty:
            self.flushes += 1
        for transport in dirty:
            transport.flush()


# The loop's batch, made when its first connection opens.
write_batch: PerLoop[WriteBatch] = PerLoop(WriteBatch)


class CoalescingTransport(asyncio.Transport):
    """A connection's transport whose writes wait for the loop's :class:`WriteBatch`."""

    # Slots, and no list or extra-info dict while nothing is pending: a connection lives as
    # long as its stream, and thousands of idle listen streams each hold one of these.
    __slots__ = ("_batch", "_pieces", "_transport")

    def __init__(self, transport: asyncio.Transport, batch: WriteBatch) -> None:
        # Not asyncio.Transport's __init__: its only work is an ``extra`` dict, and
        # get_extra_info here asks the real transport.
        self._transport = transport
        self._batch = batch
        # This turn's pieces, in the order they were written; written as one.
        self._pieces: list[bytes] | None = None

    # -- writing: held until the loop's turn ends ----------------------------------------

    def write(self, data: bytes | bytearray | memoryview) -> None:
        if data:
            if self._pieces is None:
                self._batch.mark(self)
                self._pieces = [bytes(data)]
            else:
                self._pieces.append(bytes(data))

    def writelines(self, list_of_data: Any) -> None:
        for data in list_of_data:
            self.write(data)

    def flush(self) -> None:
        """Write what is pending as one (gathering) write; a connection that is gone (or
        fails) loses only its own bytes."""
        pieces = self._pieces
        if pieces is None:
            return
        self._pieces = None
        transport = self._transport
        if transport.is_closing():
            return
        try:
            if len(pieces) == 1:
                transport.write(pieces[0])
            else:
                transport.writelines(pieces)  # a large body is not copied to be joined
        except Exception:
            log.exception("writing a response failed")

    def close(self) -> None:
        self.flush()
        self._transport.close()

    def write_eof(self) -> None:
        self.flush()
        self._transport.write_eof()

    def abort(self) -> None:
        self._pieces = None  # abort drops unwritten data by definition
        self._transport.abort()

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
