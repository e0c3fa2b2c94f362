"""server.tasks.running: the bookkeeping writes beside the handlers are held until they end,
and a failure is logged unless Redis is away."""

import asyncio
import logging

import pytest

from server.errors import ServiceUnavailable
from server.tasks.running import Background

pytestmark = pytest.mark.anyio


async def test_writes_are_held_until_they_end_and_failures_logged(
    caplog: pytest.LogCaptureFixture,
) -> None:
    background = Background()

    async def write(failure: Exception | None) -> None:
        await asyncio.sleep(0)
        if failure is not None:
            raise failure

    with caplog.at_level(logging.ERROR, logger="server.tasks.running"):
        background.spawn(write(None))
        background.spawn(write(ServiceUnavailable("Redis is away")))
        background.spawn(write(ValueError("broken")))
        assert len(background) == 3
        await background.finish(1.0)
        await asyncio.sleep(0)
    assert len(background) == 0
    assert [record.getMessage() for record in caplog.records] == [
        "task bookkeeping failed: ValueError('broken')"
    ]
