"""server.security.limits: token buckets with an injected clock, Retry-After, bounded memory, and
the per-client stream and session counters (never negative, released on exceptions)."""

import pytest

from server.errors import http_status
from server.security.limits import (
    ClientCounter,
    RateLimited,
    RateLimiter,
    SessionCounter,
    StreamCounter,
    TooManySessions,
    TooManyStreams,
    client_key,
)


class Clock:
    def __init__(self):
        self.now = 500.0

    def __call__(self):
        return self.now


def limiter(rate=10.0, burst=5, **kwargs):
    clock = Clock()
    return RateLimiter(rate, burst, clock=clock, **kwargs), clock


# -- the token bucket ----------------------------------------------------------------------


def test_burst_then_refused_with_retry_after():
    limits, _ = limiter(rate=10, burst=5)
    assert [limits.allow("a") for _ in range(5)] == [None] * 5
    assert limits.allow("a") == pytest.approx(0.1)  # one token at 10/s


def test_refill_math():
    limits, clock = limiter(rate=2, burst=4)
    for _ in range(4):
        assert limits.allow("a") is None
    clock.now += 0.25  # half a token
    assert limits.allow("a") == pytest.approx(0.25)
    clock.now += 0.25  # one token
    assert limits.allow("a") is None
    assert limits.allow("a") == pytest.approx(0.5)
    clock.now += 100  # refills only up to the burst
    assert [limits.allow("a") for _ in range(5)][-1] == pytest.approx(0.5)


def test_refused_requests_take_nothing():
    limits, clock = limiter(rate=1, burst=1)
    assert limits.allow("a") is None
    for _ in range(50):
        assert limits.allow("a") == pytest.approx(1.0)
    clock.now += 1
    assert limits.allow("a") is None


def test_cost():
    limits, _ = limiter(rate=4, burst=4)
    assert limits.allow("a", cost=3) is None
    assert limits.allow("a", cost=3) == pytest.approx(0.5)
    assert limits.allow("a", cost=1) is None


def test_clients_are_independent():
    limits, _ = limiter(rate=1, burst=2)
    assert limits.allow("greedy") is None
    assert limits.allow("greedy") is None
    assert limits.allow("greedy") is not None
    assert limits.allow("polite") is None


def test_clock_going_backwards_refills_nothing():
    limits, clock = limiter(rate=1, burst=1)
    assert limits.allow("a") is None
    clock.now -= 10
    assert limits.allow("a") is not None


def test_rate_zero_is_off():
    limits, _ = limiter(rate=0, burst=1)
    assert all(limits.allow("a") is None for _ in range(1000))
    assert len(limits) == 0


def test_check_raises_rate_limited():
    limits, _ = limiter(rate=0.5, burst=1)
    limits.check("a")
    with pytest.raises(RateLimited) as caught:
        limits.check("a")
    error = caught.value
    assert error.retry_after == pytest.approx(2.0)
    assert (http_status(error, "modern"), http_status(error, "legacy")) == (429, 429)
    assert error.to_wire() == {
        "code": -32000,
        "message": "Too many requests; retry after 2 s",
        "data": {"limit": "rate", "retryAfter": 2},
    }


def test_lru_bound():
    limits, _ = limiter(rate=1, burst=10, max_keys=3)
    for key in "abcd":
        limits.allow(key)
    assert len(limits) == 3
    limits.allow("b")  # b is now the most recently used
    limits.allow("e")
    assert len(limits) == 3
    assert set(limits._buckets) == {"d", "b", "e"}


def test_idle_full_buckets_are_dropped():
    limits, clock = limiter(rate=10, burst=5)
    for key in range(1000):
        limits.allow(f"client-{key}")
    assert len(limits) == 1000
    clock.now += 0.05  # half a token back each: not full yet
    limits.allow("another")
    assert len(limits) == 1001
    clock.now += 0.05  # the first thousand have refilled
    limits.allow("late")
    assert set(limits._buckets) == {"another", "late"}


def test_dropping_a_full_bucket_changes_nothing():
    limits, clock = limiter(rate=1, burst=3)
    for _ in range(3):
        limits.allow("a")
    clock.now += 3
    limits.allow("b")  # drops a's refilled bucket
    assert "a" not in limits._buckets
    assert [limits.allow("a") for _ in range(4)][-1] == pytest.approx(1.0)


def test_invalid_limiter_arguments():
    for rate, burst, keys in [(-1, 1, 1), (1, 0, 1), (1, 1, 0)]:
        with pytest.raises(ValueError, match="required"):
            RateLimiter(rate, burst, max_keys=keys)


@pytest.mark.parametrize(
    ("subject", "address", "key"),
    [
        ("alice", "10.0.0.1", "sub:alice"),
        (None, "10.0.0.1", "addr:10.0.0.1"),
        ("", "10.0.0.1", "addr:10.0.0.1"),
        (None, None, "addr:unknown"),
    ],
)
def test_client_key(subject, address, key):
    assert client_key(subject, address) == key


# -- counters ------------------------------------------------------------------------------


def test_stream_counter_limit():
    streams = StreamCounter(2)
    first, second = streams.acquire("a"), streams.acquire("a")
    with pytest.raises(TooManyStreams) as caught:
        streams.acquire("a")
    assert http_status(caught.value, "modern") == 429
    assert http_status(caught.value, "legacy") == 429
    assert caught.value.to_wire() == {
        "code": -32000,
        "message": "Too many open streams for this client (limit 2)",
        "data": {"limit": "streams", "max": 2},
    }
    assert streams.acquire("b")  # other clients are not affected
    first.release()
    assert streams.acquire("a")
    assert streams.count("a") == 2
    second.release()
    assert streams.count("a") == 1


def test_release_is_idempotent_and_never_negative():
    sessions = SessionCounter(3)
    slot = sessions.acquire("a")
    other = sessions.acquire("a")
    slot.release()
    slot.release()
    slot.release()
    assert sessions.count("a") == 1
    other.release()
    assert sessions.count("a") == 0
    assert len(sessions) == 0  # no key is kept with nothing open
    other.release()
    assert sessions.count("a") == 0


def test_context_manager_releases_on_exceptions():
    streams = StreamCounter(1)
    counts = []

    def handler():
        with streams.acquire("a"):
            counts.append(streams.count("a"))
            raise RuntimeError("handler failed")

    with pytest.raises(RuntimeError):
        handler()
    assert counts == [1]
    assert streams.count("a") == 0
    with streams.acquire("a") as slot:
        slot.release()  # released early inside the block: exiting does not release again
        held = streams.acquire("a")
    assert streams.count("a") == 1
    held.release()
    assert len(streams) == 0


def test_refused_acquire_holds_nothing():
    sessions = SessionCounter(1)
    kept = sessions.acquire("a")
    for _ in range(5):
        with pytest.raises(TooManySessions):
            sessions.acquire("a")
    assert sessions.count("a") == 1
    kept.release()
    assert sessions.count("a") == 0


def test_zero_limit_counts_without_limit():
    counter = ClientCounter(0)
    slots = [counter.acquire("a") for _ in range(1000)]
    assert counter.count("a") == 1000
    for slot in slots:
        slot.release()
    assert len(counter) == 0
    with pytest.raises(ValueError, match="limit"):
        ClientCounter(-1)
