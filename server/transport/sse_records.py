"""The record of an HTTP+SSE ``GET``, which names the client that initialized its session.

The stream opens before its ``initialize``, which may reach another replica: this one is told
only the answer. So the record waits for the name, and at the stream's first message reads it
from the store and is written then; held to the stream's end, a crash of this replica would
lose it (issue 35). :class:`StreamRecords` does that for the transport
(:mod:`server.transport.legacy_sse`).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from typing import Any

from server.asgi import ASGIMessage, Send
from server.errors import ServiceUnavailable
from server.legacy.sessions import SessionStore
from server.records.draft import Draft


class StreamRecords:
    def __init__(self, store: SessionStore, record: Callable[[Any], None]) -> None:
        self.store = store
        self.record = record
        self.naming: set[asyncio.Task[None]] = set()  # records waiting for their client

    def naming_send(self, send: Send, session_id: str, draft: Draft) -> Send:
        """``send``, which at the stream's first message writes the GET's record, if it still
        waits for the client's name, once the store has told it."""
        asked = False

        def sending(message: ASGIMessage) -> Awaitable[None]:
            nonlocal asked
            if not (asked or draft.request_written) and b"data: {" in message.get("body", b""):
                asked = True
                naming = asyncio.ensure_future(self.write_named(session_id, draft))
                self.naming.add(naming)
                naming.add_done_callback(self.naming.discard)
            return send(message)

        return sending

    async def write_named(self, session_id: str, draft: Draft) -> None:
        await self.name_client(session_id, draft)
        draft.write_request(self.record)

    async def name_client(self, session_id: str, draft: Draft) -> None:
        """The GET's record names the client that initialized its session: when that was on
        another replica (or never), the store says who, before the session is deleted."""
        if draft.request_written or draft.client_name is not None:
            return
        with contextlib.suppress(ServiceUnavailable):
            if (session := await self.store.get(session_id)) is not None:
                draft.set_client(session.client_info, None)
