"""What the other replicas tell this one about the legacy sessions it holds a part of, applied.

Another replica may take a client's answer to a question a call here is waiting on, a
cancellation of a call running here, a subscription change a GET stream here follows, a message
for the one stream of an HTTP+SSE session held here, or the end of a session.
:class:`RemoteSessions` applies each to the session's live part in this process
(:class:`~server.legacy.runtime.SessionRuntime`), if it has one, and does nothing otherwise.
Sans-IO: it is the :class:`~server.state.relay.SessionEvents` the relay delivers to, with no
HTTP in it; the HTTP shell's :class:`~server.transport.legacy_sessions.LegacySessions` extends
it with finding a session from its header and with what the shell itself holds for a session.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any

from server.jsonrpc import Response
from server.legacy.era import LegacyEra
from server.legacy.runtime import Runtimes


class RemoteSessions:
    """The legacy sessions' live parts here, as the other replicas' events reach them."""

    def __init__(self, era: LegacyEra, runtimes: Runtimes) -> None:
        self.era = era
        self.runtimes = runtimes
        # What the HTTP+SSE transport does when the bus is lost, or a message for a stream
        # held elsewhere did not go out (the transport is above this layer: it registers).
        self.on_bus_away: list[Callable[[], None]] = []
        self.on_stream_unreachable: list[Callable[[str], None]] = []

    def session_ended(self, session_id: str) -> None:
        """Release what a session held here: its runtime."""
        self.runtimes.end(session_id)

    def remote_answer(self, session_id: str, response: Response) -> None:
        runtime = self.runtimes.peek(session_id)
        if runtime is not None:
            self.era.accept_response(runtime, response)

    def remote_cancel(self, session_id: str, params: dict[str, Any]) -> None:
        runtime = self.runtimes.peek(session_id)
        if runtime is not None:
            self.era.cancel(runtime, params)

    def remote_subscription(self, session_id: str, uri: str, subscribed: bool) -> None:
        runtime = self.runtimes.peek(session_id)
        if runtime is not None:
            runtime.subscriptions.apply(uri, subscribed)

    def remote_message(self, session_id: str, payload: bytes) -> None:
        self.to_stream(session_id, payload)

    def to_stream(self, session_id: str, payload: bytes) -> bool:
        """Put a message on the session's one stream (HTTP+SSE) if this process holds it
        open; False if not (it is held elsewhere, or gone)."""
        runtime = self.runtimes.peek(session_id)
        if runtime is None or not runtime.standalone_followers:
            return False
        stream = runtime.standalone
        if stream is None or stream.finished:
            return False
        stream.publish(payload)
        return True

    def subscriptions_missed(self, updates_unknown: bool = False) -> None:
        """Subscription changes may have been missed (the bus was away): read them again; with
        ``updates_unknown``, every resource a GET stream here follows is told updated first
        (a client re-reads one for nothing rather than miss an update)."""
        for session_id in self.runtimes.ids():
            if (runtime := self.runtimes.peek(session_id)) is not None:
                if updates_unknown:
                    runtime.updates_unknown()
                # Read again now where a GET stream follows them, else when one opens.
                read = partial(self.era.store.subscriptions, session_id)
                runtime.subscriptions.stale(read if runtime.standalone is not None else None)

    def bus_away(self) -> None:
        for hook in list(self.on_bus_away):
            hook()

    def stream_unreachable(self, session_id: str) -> None:
        for hook in list(self.on_stream_unreachable):
            hook(session_id)
