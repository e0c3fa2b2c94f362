"""A catalog whose one task tool tells who called it, for the replica test of a task's caller
(``tests/e2e/test_replica_tasks.py``).

Served as ``MCP_CATALOG=tests.support.caller_catalog:catalog`` with the repo root on
``PYTHONPATH``. ``whoami`` runs as a task when the client asks (either era) and answers with
what its Context says of the caller: the subject and scopes (``anonymous`` without one), and
the client key its limits count under.
"""

from __future__ import annotations

import json

from server.catalog import Catalog
from server.context import Context

catalog = Catalog("caller-test", "1.0.0")


@catalog.tool(task_support="optional")
async def whoami(ctx: Context) -> str:
    """Who the Context says is calling."""
    caller = ctx.caller
    return json.dumps(
        {
            "subject": None if caller is None else caller.subject,
            "scopes": [] if caller is None else sorted(caller.scopes),
            "client_key": getattr(ctx, "client_key", None),  # a Context field since issue 27
        }
    )
