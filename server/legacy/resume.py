"""Where a legacy ``GET`` resumes: the pure decision behind ``Last-Event-ID``.

A ``GET`` with ``Last-Event-ID`` names an event of one stream. That stream may be here (a call
of this process, or the session's standalone stream), or kept by another replica: the HTTP
shell asks the mirror for that replica's copy (:func:`elsewhere` says which stream to ask for)
and hands it to :func:`locate`, which decides without any I/O what the connection follows from
which event, and what another replica's standalone stream missed. A standalone (GET) stream
resumes on any replica, whether the one that held it is alive, drained or crashed: what its copy
kept after the id is replayed, then this replica's standalone stream carries on (with nothing
missed, or no copy at all, just that). Nothing left to resume of a call's stream is a 410,
which ends a client's reconnect loop where a 200 that closes at once would invite another; an
id this server cannot have made is a 400, decided before any shared state is asked.
"""

from __future__ import annotations

from dataclasses import dataclass

from server.errors import InvalidRequest
from server.legacy.eventstream import MAX_SEQ, Copy, EventStream, parse_event_id
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


def named(last_event_id: str | None) -> tuple[str, int] | None:
    """The (stream, event) a ``Last-Event-ID`` names; None without one (absent or blank).

    An id this server cannot have made (not ``<stream>_<seq>``, a stream id of another
    shape, a sequence past what a Redis stream id holds) is a 400: it can never resume
    anything, and it must not reach the mirror's Redis commands."""
    if last_event_id is None or not last_event_id.strip():
        return None
    found = parse_event_id(last_event_id)
    if found is None:
        shown = last_event_id.strip()
        shown = shown if len(shown) <= 80 else shown[:80] + "..."
        raise InvalidRequest(
            f"Bad Request: Last-Event-ID {shown!r} is not an event id of this server "
            f"(<stream>_<sequence>, a sequence of at most {MAX_SEQ}); "
            "send the id of an event this session received, or GET without it"
        )
    return found


def elsewhere(runtime: SessionRuntime, last_event_id: str | None) -> tuple[str, int] | None:
    """The (stream, event) to ask the mirror for: named by the id, and not held here."""
    resume = named(last_event_id)
    if resume is None or resume[0] in runtime.streams:
        return None
    return resume


def locate(
    runtime: SessionRuntime, last_event_id: str | None, copy: Copy | None, capacity: int
) -> Resume:
    """Where a GET with this ``Last-Event-ID`` (None: a fresh GET) resumes, given the copy
    another replica kept of the stream it names (None if none, or not asked)."""
    resume = named(last_event_id)
    stream = runtime.streams.get(resume[0]) if resume else None
    after = resume[1] if resume and stream is not None else 0
    follow = False
    if resume and stream is None and is_standalone_id(resume[0]):
        # The GET stream was on another replica, alive, drained or crashed: replay what its
        # copy kept after the id (if any), then carry on with this replica's own (it hears
        # every change too). Never a 410: a client told that stops listening for good.
        stream_id = resume[0]
        events = copy.events if copy is not None else ()
        return Resume(None, 0, tuple((f"{stream_id}_{number}", data) for number, data in events))
    if resume and stream is None and copy is not None:
        # A call running (or done) on another replica: follow its copy from here.
        stream_id, seq = resume
        stream = copy.stream(stream_id, seq, capacity)
        after, follow = seq, not copy.finished
    if resume and (stream is None or (stream.finished and not stream.events_after(after))):
        raise InvalidRequest(
            f"Nothing to resume after event '{resume[0]}_{resume[1]}': the stream is complete "
            "or no longer kept",
            http_status=410,
        )
    return Resume(stream, after, follow=follow)
