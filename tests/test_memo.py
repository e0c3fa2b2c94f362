"""BoundedMemo: small keys only, a bounded number of them, whatever is written."""

from __future__ import annotations

import pytest

from server.memo import SMALL_KEY_BYTES, BoundedMemo, key_bytes, memoized


def test_small_keys_are_kept_and_big_ones_never() -> None:
    memo: BoundedMemo[object, int] = BoundedMemo(10, max_key_bytes=8)
    assert memo.remember("12345678", 1) == 1
    assert memo.remember("123456789", 2) == 2  # computed, handed back, not kept
    memo[b"x" * 9] = 3
    memo.setdefault(("a" * 5, "b" * 5), 4)
    memo.update({"y" * 20: 5})
    assert dict(memo) == {"12345678": 1}


def test_the_count_is_bounded_by_starting_over() -> None:
    memo: BoundedMemo[str, int] = BoundedMemo(4)
    for number in range(100):
        memo.remember(str(number), number)
        assert len(memo) <= 4
    memo.remember("99", 0)  # a key already held replaces its value without starting over
    assert len(memo) == 4
    assert memo["99"] == 0


def test_a_size_given_by_the_caller_wins() -> None:
    memo: BoundedMemo[tuple[str, tuple[str, ...]], bool] = BoundedMemo(4, max_key_bytes=8)
    shared = tuple("host" * 10 for _ in range(5))
    memo.remember(("a", shared), True, size=1)
    memo.remember(("b" * 9, shared), True, size=9)
    assert list(memo) == [("a", shared)]


def test_key_bytes_counts_what_a_key_holds() -> None:
    assert key_bytes("abc") == 3
    assert key_bytes(b"abcd") == 4
    assert key_bytes(("ab", (b"cd", "e"))) == 5
    assert key_bytes(None) == key_bytes(7) == 8
    assert key_bytes(frozenset({"x" * 1000})) > 0


def test_memoized_keeps_small_results_and_never_exceptions() -> None:
    calls: list[str] = []

    @memoized(max_entries=8)
    def judge(value: str) -> bool:
        calls.append(value)
        if value == "bad":
            raise ValueError(value)
        return value == "ok"

    assert judge("ok")
    assert judge("ok")
    assert calls == ["ok"]
    for _ in range(2):
        with pytest.raises(ValueError, match="bad"):
            judge("bad")
    assert calls == ["ok", "bad", "bad"]
    big = "x" * (SMALL_KEY_BYTES + 1)
    assert not judge(big)
    assert not judge(big)
    assert calls.count(big) == 2
    assert len(judge.memo) == 1  # type: ignore[attr-defined]


def test_bad_bounds_are_refused() -> None:
    with pytest.raises(ValueError, match="max_entries"):
        BoundedMemo(0)
