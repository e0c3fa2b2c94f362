"""Where a legacy ``GET`` resumes: the pure decision behind ``Last-Event-ID``.

A ``GET`` with ``Last-Event-ID`` names an event of one stream. That stream may be here (a call
of this process, or the session's standalone stream), or kept by another replica: the HTTP
shell asks the mirror for that replica's copy (:func:`elsewhere` says which stream to ask for)
and hands it to :func:`locate`, which decides without any I/O what the connection follows from
which event, and what another replica's standalone stream missed. Nothing left to resume is a
410, which ends a client's reconnect loop where a 200 that closes at once would invite another.
"""

from __future__ import annotations

from dataclasses import dataclass

from server.errors import InvalidRequest
from server.legacy.eventstream import Copy, EventStream, parse_event_id
from server.legacy.runtime import SessionRuntime, is_standalone_id


@dataclass(frozen=True, slots=True)
class Resume:
    """What a GET connection follows.

    ``stream`` None: the session's standalone stream, from its newest event on. ``missed``:
    events (id, payload) of another replica's standalone stream, replayed first. ``follow``:
    ``stream`` is another replica's running call, to be fed from the mirror as it goes on.
    """

    stream: EventStream | None
    after: int
    missed: tuple[tuple[str, bytes], ...] = ()
    follow: bool = False


def elsewhere(runtime: SessionRuntime, last_event_id: str | None) -> tuple[str, int] | None:
    """The (stream, event) to ask the mirror for: named by the id, and not held here."""
    resume = parse_event_id(last_event_id) if last_event_id else None
    if resume is None or resume[0] in runtime.streams:
        return None
    return resume


def locate(
    runtime: SessionRuntime, last_event_id: str | None, copy: Copy | None, capacity: int
) -> Resume:
    """Where a GET with this ``Last-Event-ID`` (None: a fresh GET) resumes, given the copy
    another replica kept of the stream it names (None if none, or not asked)."""
    resume = parse_event_id(last_event_id) if last_event_id else None
    stream = runtime.streams.get(resume[0]) if resume else None
    after = resume[1] if resume and stream is not None else 0
    missed: tuple[tuple[str, bytes], ...] = ()
    follow = False
    if resume and stream is None and copy is not None:
        stream_id, seq = resume
        if is_standalone_id(stream_id):
            # The GET stream was on another replica: replay what it kept, then carry on with
            # this replica's own (it hears every change too).
            missed = tuple((f"{stream_id}_{number}", data) for number, data in copy.events)
        else:
            # A call running (or done) on another replica: follow its copy from here.
            stream = copy.stream(stream_id, seq, capacity)
            after, follow = seq, not copy.finished
    if (
        last_event_id
        and not missed
        and (stream is None or (stream.finished and not stream.events_after(after)))
    ):
        raise InvalidRequest(
            f"Nothing to resume after event {last_event_id.strip()!r}: the stream is complete "
            "or no longer kept",
            http_status=410,
        )
    return Resume(stream, after, missed, follow)
