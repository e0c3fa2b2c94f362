"""server.app.doctor_tools: the doctor's tools are bounded: at most AT_ONCE run at once (the next
call fails at once as busy), and with authentication on they need the admin scope."""

from __future__ import annotations

import asyncio
import hashlib
from typing import Any

import pytest

from server.app.doctor_tools import AT_ONCE
from server.catalog import Catalog
from tests.support.app import serve
from tests.support.mcp_client import ModernClient

pytestmark = pytest.mark.anyio

ADMIN, READER = "admin-token-0123456789", "reader-token-0123456789"
WAIT_S = 2.0  # long enough for every call to have started on a busy machine


def digest(token: str) -> str:
    return "sha256:" + hashlib.sha256(token.encode()).hexdigest()


def text_of(answer: dict[str, Any]) -> str:
    return str(answer["result"]["content"][0]["text"])


async def test_a_call_past_the_limit_fails_at_once_as_busy_and_a_freed_slot_serves_again() -> None:
    catalog = Catalog("doctor-test", "1.0.0")
    async with serve(catalog, doctor=True, doctor_max_wait_s=5) as (http, _):
        client = ModernClient(http)
        wait = {"name": "doctor.wait", "arguments": {"seconds": WAIT_S}}
        answers = await asyncio.gather(
            *(client.call("tools/call", wait) for _ in range(AT_ONCE + 1))
        )
        texts = sorted(text_of(answer) for answer in answers)
        assert texts == [
            f"the doctor's tools are busy ({AT_ONCE} running): try again",
            *[f"waited {WAIT_S:g} s"] * AT_ONCE,
        ]
        again = await client.call(
            "tools/call", {"name": "doctor.events", "arguments": {"count": 1, "gap_ms": 0}}
        )
        assert text_of(again) == "sent 1 events"


async def test_with_authentication_the_tools_need_the_admin_scope() -> None:
    tokens = [f"{digest(ADMIN)};scopes=mcp:admin", f"{digest(READER)};scopes=mcp:read"]
    async with serve(Catalog("doctor-test", "1.0.0"), doctor=True, auth="tokens",
                     auth_tokens=tokens) as (http, app):  # fmt: skip
        assert {tool.name: tuple(tool.scopes) for tool in app.catalog.tools.values()} == {
            name: ("mcp:admin",) for name in ("doctor.wait", "doctor.events", "doctor.replica")
        }
        client = ModernClient(http)
        message = client.message("tools/call", {"name": "doctor.replica"})
        refused = await client.post(message, Authorization=f"Bearer {READER}")
        assert refused.status_code == 403
        assert 'scope="mcp:admin"' in refused.headers["www-authenticate"]
        answered = await client.post(message, Authorization=f"Bearer {ADMIN}")
        assert answered.status_code == 200
        assert "replica" in answered.json()["result"]["structuredContent"]


async def test_without_authentication_the_tools_need_no_scope() -> None:
    async with serve(Catalog("doctor-test", "1.0.0"), doctor=True) as (_, app):
        assert all(not tool.scopes for tool in app.catalog.tools.values())
