"""The faults of the chaos run (``tests/chaos/run.py``), one at a time, and what each promises.

Each fault acts on the running :class:`~tests.support.replicas.Replicas` by PID only: Redis
stalled (SIGSTOP, then SIGCONT), Redis restarted empty, a replica stalled (SIGSTOP), a replica
SIGKILLed (then started again on its port), a SIGTERM drain, and a rolling restart of every
replica (SIGTERM, wait for the exit, start, wait until ready: what ``kubectl rollout restart``
does). ``allowed`` names the errors the docs promise for that fault (docs/operations.md, "Faults
and what clients see"); any other error, or a quick request slower than ``slow_s``, breaks it.
"""

from __future__ import annotations

import fnmatch
import os
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from tests.support.replicas import Replicas

REDIS_TIMEOUT_S = 2.0  # MCP_REDIS_TIMEOUT_S of the run's replicas (the shipped default)
MARGIN_S = 2.0  # the "small margin" an answer may take past a deadline on this shared machine
# What a Redis outage may cost (docs/deployment.md, "When Redis is away"): a 503 with
# Retry-After for what needs shared state; an HTTP+SSE stream closed cleanly.
# The official SDK surfaces the 503's JSON-RPC error (-32000); its sse_client drops a POST's 503
# and leaves the call waiting (an SDK limitation, docs/operations.md).
REDIS_AWAY = (
    "initialize:http 503 retry-after",
    "initialize:rpc -32000",
    "http+sse:http 503 retry-after",
    "http+sse:rpc -32000",
    "http+sse:closed",
    "http+sse:hang after http 503 (SDK)",
    "2026-07-28:task:http 503 retry-after",
)


@dataclass
class Fault:
    name: str
    act: Callable[[Replicas, Fault], None]
    allowed: tuple[str, ...] = ()  # "era:kind" or "era:what:kind" patterns (fnmatch)
    slow_s: float = 8.0
    killed_at: list[float] = field(default_factory=list)  # monotonic times of SIGKILLs
    drains: int = 0  # replicas SIGTERMed (each listen stream there must get its result)
    readyz_within: float | None = None  # every replica's /readyz must turn 503 this soon
    steps: list[tuple[float, str]] = field(default_factory=list)  # (monotonic, what was done)

    def step(self, what: str) -> None:
        self.steps.append((time.monotonic(), what))

    def allows(self, era: str, what: str, kind: str) -> bool:
        return any(
            fnmatch.fnmatch(f"{era}:{kind}", pattern)
            or fnmatch.fnmatch(f"{era}:{what}:{kind}", pattern)
            for pattern in self.allowed
        )


def redis_pid(replicas: Replicas) -> int:
    assert replicas.redis is not None
    assert replicas.redis.process is not None
    return replicas.redis.process.pid


def stall_redis(seconds: float) -> Callable[[Replicas, Fault], None]:
    def act(replicas: Replicas, fault: Fault) -> None:
        pid = redis_pid(replicas)
        os.kill(pid, signal.SIGSTOP)
        try:
            time.sleep(seconds)
        finally:
            os.kill(pid, signal.SIGCONT)

    return act


def restart_redis(replicas: Replicas, fault: Fault) -> None:
    assert replicas.redis is not None
    replicas.redis.stop()  # no persistence: it comes back empty, on the same port
    time.sleep(1.0)
    replicas.redis.start()


def stall_replica(index: int, seconds: float) -> Callable[[Replicas, Fault], None]:
    def act(replicas: Replicas, fault: Fault) -> None:
        pid = replicas.servers[index].pid
        os.kill(pid, signal.SIGSTOP)
        try:
            time.sleep(seconds)
        finally:
            os.kill(pid, signal.SIGCONT)

    return act


def kill_replica(index: int) -> Callable[[Replicas, Fault], None]:
    def act(replicas: Replicas, fault: Fault) -> None:
        server = replicas.servers[index]
        assert server.process is not None
        fault.killed_at.append(time.monotonic())
        fault.step(f"replica {index} SIGKILL")
        server.process.kill()
        server.process.wait(10)
        time.sleep(1.0)
        server.start(timeout=30)
        fault.step(f"replica {index} listening")
        replicas.wait_ready(server.url, limit=30)
        fault.step(f"replica {index} ready")

    return act


def restart(replicas: Replicas, fault: Fault, index: int, exit_s: float) -> None:
    """SIGTERM, wait for the exit (the drain), start again on the same port, wait until ready."""
    server = replicas.servers[index]
    assert server.process is not None
    fault.drains += 1
    fault.step(f"replica {index} SIGTERM")
    server.terminate()
    server.process.wait(exit_s)
    fault.step(f"replica {index} exited")
    server.start(timeout=30)
    fault.step(f"replica {index} listening")
    replicas.wait_ready(server.url, limit=30)
    fault.step(f"replica {index} ready")


def drain_replica(index: int, exit_s: float) -> Callable[[Replicas, Fault], None]:
    return lambda replicas, fault: restart(replicas, fault, index, exit_s)


def rolling_restart(exit_s: float) -> Callable[[Replicas, Fault], None]:
    def act(replicas: Replicas, fault: Fault) -> None:
        for index in range(replicas.n):
            restart(replicas, fault, index, exit_s)

    return act


def the_faults(replicas: int, drain_s: float) -> list[Fault]:
    """The six faults in the order the run applies them."""
    exit_s = drain_s + 15  # the drain deadline, the grace, and the records flushed
    # Only a call longer than the drain deadline may end with -32000 "Server shutting down":
    # an error event on a response that already streams, or a 503 (no Retry-After: not Redis)
    # for one whose answer had not started (lifecycle.end_calls).
    # A task asked of the stopping replica (on a connection nginx kept alive to it) is refused
    # with 503 and Retry-After: it would be failed at the drain deadline (docs/operations.md).
    drained = (
        "2026-07-28:silent call:rpc -32000",
        "2026-07-28:silent call:http 503",
        "2026-07-28:task:http 503 retry-after",
        "http+sse:closed",
    )
    return [
        Fault(
            "redis stalled 10 s",
            stall_redis(10),
            REDIS_AWAY,
            REDIS_TIMEOUT_S + MARGIN_S,
            readyz_within=REDIS_TIMEOUT_S + MARGIN_S,
        ),
        Fault(
            "redis restarted empty",
            restart_redis,
            # Redis's data is gone: sessions with it (a 404, then a new session), tasks too.
            (*REDIS_AWAY, "initialize:http 404", "http+sse:http 404", "2026-07-28:task:*"),
            REDIS_TIMEOUT_S + MARGIN_S,
        ),
        # An HTTP+SSE stream may be closed cleanly (its holder lost its bus for a while).
        Fault("replica stalled 5 s", stall_replica(0, 5), ("http+sse:closed",), 5 + MARGIN_S + 1),
        Fault(
            "replica SIGKILLed",
            kill_replica(1 % replicas),
            # A crash loses what was in flight there: nginx answers 502, a stream ends early.
            (
                "*:http 502",
                "*:stream ended without an answer",
                "*:conn RemoteProtocolError",
                "2026-07-28:listen cut*",
                "2026-07-28:task:task failed",
                "http+sse:closed",
                "http+sse:http 404",  # a message for the dead holder's session: reconnect
            ),
        ),
        Fault("SIGTERM drain", drain_replica(2 % replicas, exit_s), drained),
        Fault("rolling restart", rolling_restart(exit_s), drained),
    ]
