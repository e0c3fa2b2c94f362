"""server.transport.sse_records: an HTTP+SSE GET's record is written at its stream's first
message, naming the client the store says initialized the session (no sockets)."""

from typing import Any

import pytest

from server.asgi import ASGIMessage
from server.records.draft import Draft
from server.state.memory import MemorySessionStore
from server.transport.sse_records import StreamRecords

pytestmark = pytest.mark.anyio


def get_draft() -> Draft:
    draft = Draft("GET", "/sse", "test-agent/1.0", "127.0.0.1", None)
    draft.hold_request = True
    return draft


async def test_the_first_message_writes_the_record_with_the_name_the_store_has() -> None:
    store = MemorySessionStore(max_sessions=10, idle_timeout_s=60)
    session = await store.create("2024-11-05", {"name": "named-elsewhere"}, {})
    written: list[Any] = []
    records = StreamRecords(store, written.append)
    sent: list[ASGIMessage] = []

    async def send(message: ASGIMessage) -> None:
        sent.append(message)

    draft = get_draft()
    naming_send = records.naming_send(send, session.id, draft)
    await naming_send(
        {"type": "http.response.body", "body": b": keep-alive\n\n", "more_body": True}
    )
    assert written == []  # a comment is not a message: the record still waits
    for _ in range(2):
        body = b'event: message\ndata: {"jsonrpc":"2.0"}\n\n'
        await naming_send({"type": "http.response.body", "body": body, "more_body": True})
    while records.naming:
        await next(iter(records.naming))
    assert len(sent) == 3  # every message goes on, whatever the record does
    assert [record["client"]["name"] for record in written] == ["named-elsewhere"]


async def test_a_session_gone_from_the_store_leaves_the_name_unknown_not_the_record() -> None:
    store = MemorySessionStore(max_sessions=10, idle_timeout_s=60)
    draft = get_draft()
    await StreamRecords(store, lambda record: None).name_client("gone", draft)
    assert draft.client_name is None
    assert not draft.request_written
