"""The probes beside the MCP endpoint: ``/healthz`` (alive), ``/readyz`` (send traffic here) and
the OAuth protected-resource metadata (RFC 9728), which is served outside authentication.

Alive means the process serves, draining included (a liveness probe must not restart a pod
that is finishing its calls); ready means started, not draining, the record sinks writing and
Redis answering when state is shared through it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from starlette.requests import Request
from starlette.responses import JSONResponse

from server.records.recorder import Recorder
from server.security.gate import Gate
from server.state import SharedState


class Serving(Protocol):
    """Where the app is in its life: started (its lifespan runs), ready (not draining)."""

    started: bool
    ready: bool


class Probes:
    def __init__(
        self, serving: Serving, recorder: Recorder, shared: SharedState, gate: Gate
    ) -> None:
        self.serving = serving
        self.recorder = recorder
        self.shared = shared
        self.gate = gate
        # What MCP_RETIRE names, shown for the operator (server.transport.retiring).
        self.retirements: Callable[[], list[dict[str, Any]]] | None = None

    async def healthz(self, request: Request) -> JSONResponse:
        if not self.serving.started:
            return JSONResponse({"status": "starting"}, status_code=503)
        return JSONResponse({"status": "ok", "draining": not self.serving.ready})

    async def readyz(self, request: Request) -> JSONResponse:
        records = self.recorder.status()
        ready = self.serving.ready and records["healthy"] and self.shared.healthy
        body: dict[str, Any] = {
            "status": "ready" if ready else "not ready",
            "serving": self.serving.ready,
            "records": records,
        }
        shared = self.shared.status()
        if shared is not None:
            body["redis"] = shared
        if self.retirements is not None:
            body["retirements"] = self.retirements()
        return JSONResponse(body, status_code=200 if ready else 503)

    async def resource_metadata(self, request: Request) -> JSONResponse:
        document = self.gate.metadata_document()
        if document is None:
            return JSONResponse({"error": "no authorization is configured"}, status_code=404)
        return JSONResponse(document)
