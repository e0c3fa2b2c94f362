"""The gauges of ``/metrics``: read at scrape time from the numbers the server already keeps.

Open streams (listen and legacy GET), legacy sessions, the records' queue, Redis: the hub, the
legacy runtimes, the recorder and the Redis link count these for their own work, so a scrape
reads them (:class:`server.observe.exposition.StateCollector`) and the request path pays
nothing for them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from server.hub import Hub
from server.legacy.runtime import Runtimes
from server.records.recorder import Recorder
from server.state import SharedState


@dataclass(frozen=True, slots=True)
class StateReaders:
    """Where the gauges' numbers are, read at scrape time."""

    listen_streams: Callable[[], int]
    legacy_get_streams: Callable[[], int]
    legacy_sessions: Callable[[], int]
    records: Callable[[], dict[str, int]]  # queued, written, dropped, backlogged: totals
    redis_up: Callable[[], bool | None]  # None: no Redis configured
    bus_lag_s: Callable[[], float | None]  # None: not measured
    # Each retirement (MCP_RETIRE): its item, and whether it is retired now (else deprecated).
    retirements: Callable[[], list[tuple[str, bool]]] = list


def state_readers(
    hub: Hub,
    runtimes: Runtimes,
    recorder: Recorder,
    shared: SharedState,
    retirements: Callable[[], list[tuple[str, bool]]] = list,
) -> StateReaders:
    """The gauges' readers over the app's hub, legacy runtimes, records and shared state."""

    def legacy_get_streams() -> int:
        total = 0
        for session_id in runtimes.ids():
            runtime = runtimes.peek(session_id)
            if runtime is not None:
                total += runtime.standalone_followers
        return total

    def redis_up() -> bool | None:
        link = shared.link
        return None if link is None else bool(link.connected)

    return StateReaders(
        listen_streams=lambda: hub.open_streams,
        legacy_get_streams=legacy_get_streams,
        legacy_sessions=lambda: len(runtimes),
        records=lambda: {
            "queued": recorder.accepted,
            "written": recorder.written,
            "dropped": recorder.dropped,
            "backlogged": recorder.backlogged,
        },
        redis_up=redis_up,
        bus_lag_s=lambda: getattr(shared.bus, "lag_s", None),
        retirements=retirements,
    )
