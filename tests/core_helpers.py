"""Helpers shared by the core unit tests: a recording exchange and a Context factory."""

from typing import Any

from server.context import Context, InputRequest


class RecordingExchange:
    """An Exchange that records what a Context sends and answers from a fixed dict."""

    def __init__(self, answers: dict[str, Any] | None = None) -> None:
        self.sent: list[tuple[str, dict[str, Any]]] = []
        self.asked: list[dict[str, InputRequest]] = []
        self.answers = answers or {}

    async def notify(self, method: str, params: dict[str, Any]) -> None:
        self.sent.append((method, params))

    async def ask(self, requests: dict[str, InputRequest]) -> dict[str, Any]:
        self.asked.append(requests)
        return {key: request.parse(self.answers[key]) for key, request in requests.items()}

    def close_stream(self) -> None:
        self.sent.append(("<close-stream>", {}))


def make_context(exchange: Any = None, **overrides: Any) -> Context:
    fields: dict[str, Any] = {
        "exchange": exchange if exchange is not None else RecordingExchange(),
        "method": "tools/call",
        "request_id": 1,
        "era": "modern",
        "protocol_version": "2026-07-28",
        "client_capabilities": {},
    }
    fields.update(overrides)
    return Context(**fields)
