"""The chaos run's raw HTTP+SSE client names what it saw: a POST answered 404 as its stream
closes is the close (the session ended with it), a 404 under a stream that stays open is not
(no servers: ``tests/chaos/run.py`` runs the client for real)."""

from __future__ import annotations

import asyncio
from typing import Any, ClassVar

import pytest

from tests.chaos import http_sse
from tests.chaos.clients import Failure
from tests.chaos.http_sse import HttpSseClient
from tests.chaos.ledger import Ledger

pytestmark = pytest.mark.anyio


class Refused:
    """An HTTP client whose every POST is answered 404."""

    status_code = 404
    headers: ClassVar[dict[str, str]] = {}

    async def post(self, url: str, **options: Any) -> Refused:
        return self


async def kind_seen(stream_closes: bool) -> tuple[str, list[str | None]]:
    ledger = Ledger()
    client = HttpSseClient("sse-1", "http://x/api", ledger, asyncio.Event())
    reader: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    if stream_closes:
        asyncio.get_running_loop().call_later(0.05, reader.set_result, None)
    with pytest.raises(Failure) as failed:
        await client.call(Refused(), "/messages", {"id": 11}, {}, reader, "call")
    return str(failed.value), [op.error for op in ledger.ops]


async def test_a_404_as_the_stream_closes_is_the_close(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(http_sse, "CLOSE_S", 1.0)
    assert await kind_seen(stream_closes=True) == ("closed", ["closed"])


async def test_a_404_under_a_stream_that_stays_open_is_a_404(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(http_sse, "CLOSE_S", 0.2)
    assert await kind_seen(stream_closes=False) == ("http 404", ["http 404"])
