"""The server's side of ``python -m server doctor``: three tools, added only with ``MCP_DOCTOR``.

``doctor.wait`` stays silent for a chosen number of seconds (does the proxy's idle timeout let
the keep-alive through?), ``doctor.events`` sends progress notifications at a chosen pace (does
the proxy pass each on as it comes?), ``doctor.replica`` names the replica that answered and
the limits the doctor compares the proxy's with. None of them may become a public way to hold
the server's resources: they exist only when ``MCP_DOCTOR=true``; with authentication on they
need the admin scope (``MCP_REPORT_SCOPE``, as the live report); a wait is at most
``MCP_DOCTOR_MAX_WAIT_S`` and a stream of events at most 20 of them 5 s apart; at most
:data:`AT_ONCE` of them run at once in a process (a call past that fails at once instead of
waiting); and every call counts against the caller's rate limit like any other.
"""

from __future__ import annotations

import asyncio
import os
import socket
from typing import Annotated, Any

from pydantic import Field

from server.catalog.catalog import Catalog
from server.context import Context
from server.errors import ToolError
from server.settings import Settings

AT_ONCE = 8
MAX_EVENTS = 20
MAX_GAP_MS = 5000
REPLICA = f"{socket.gethostname()}:{os.getpid()}"


def add_doctor_tools(catalog: Catalog, settings: Settings) -> None:
    """Declare the three tools on ``catalog`` (called once, when ``MCP_DOCTOR`` is on)."""
    scopes = [settings.report_scope] if settings.auth != "none" else []
    max_wait_s = settings.doctor_max_wait_s
    running = asyncio.Semaphore(AT_ONCE)

    def slot() -> asyncio.Semaphore:
        if running.locked():
            raise ToolError(f"the doctor's tools are busy ({AT_ONCE} running): try again")
        return running

    @catalog.tool(name="doctor.wait", scopes=scopes)
    async def wait(seconds: Annotated[float, Field(ge=0, le=3600)]) -> str:
        """Stay silent for `seconds`, then answer (python -m server doctor: idle timeouts)."""
        if seconds > max_wait_s:
            raise ToolError(f"seconds must be at most {max_wait_s:g} (MCP_DOCTOR_MAX_WAIT_S)")
        async with slot():
            await asyncio.sleep(seconds)
        return f"waited {seconds:g} s"

    @catalog.tool(name="doctor.events", scopes=scopes)
    async def events(
        ctx: Context,
        count: Annotated[int, Field(ge=1, le=MAX_EVENTS)] = 4,
        gap_ms: Annotated[int, Field(ge=0, le=MAX_GAP_MS)] = 500,
    ) -> str:
        """Send `count` progress notifications `gap_ms` apart (python -m server doctor:
        buffering)."""
        async with slot():
            for step in range(1, count + 1):
                await asyncio.sleep(gap_ms / 1000)
                await ctx.report_progress(step, count, f"event {step} of {count}")
        return f"sent {count} events"

    @catalog.tool(name="doctor.replica", scopes=scopes)
    async def replica() -> dict[str, Any]:
        """Which replica answered, and the limits a proxy in front must not undercut."""
        return {
            "replica": REPLICA,
            "max_body_bytes": settings.max_body_bytes,
            "keepalive_s": settings.keepalive_s,
        }
