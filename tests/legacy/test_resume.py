"""server.legacy.resume: where a GET with Last-Event-ID resumes, decided without HTTP or I/O."""

import pytest

from server.errors import InvalidRequest, http_status
from server.legacy.eventstream import MAX_SEQ, Copy
from server.legacy.resume import Resume, elsewhere, locate
from server.legacy.runtime import SessionRuntime


def runtime_with_a_call() -> tuple[SessionRuntime, str]:
    runtime = SessionRuntime("session", events_per_stream=8)
    stream = runtime.open_stream()
    stream.publish(b'{"n":1}')
    stream.publish(b'{"n":2}')
    return runtime, stream.id


def test_a_fresh_get_follows_the_standalone_stream() -> None:
    runtime, _ = runtime_with_a_call()
    assert elsewhere(runtime, None) is None
    assert locate(runtime, None, None, 8) == Resume(None, 0)


def test_a_stream_held_here_resumes_after_the_named_event() -> None:
    runtime, stream_id = runtime_with_a_call()
    assert elsewhere(runtime, f"{stream_id}_1") is None  # nothing to ask another replica
    found = locate(runtime, f"{stream_id}_1", None, 8)
    assert found.stream is runtime.streams[stream_id]
    assert found.after == 1
    assert not found.follow


def test_a_finished_stream_with_nothing_left_is_410() -> None:
    runtime, stream_id = runtime_with_a_call()
    runtime.streams[stream_id].finish(b'{"n":3}')
    assert locate(runtime, f"{stream_id}_2", None, 8).after == 2  # the result is still due
    with pytest.raises(InvalidRequest) as refused:
        locate(runtime, f"{stream_id}_3", None, 8)
    assert refused.value.http_status == 410


@pytest.mark.parametrize("last_event_id", ["abcdef99_4", f"abc7_{MAX_SEQ}"])
def test_an_unknown_event_id_is_410(last_event_id: str) -> None:
    runtime, _ = runtime_with_a_call()
    with pytest.raises(InvalidRequest) as refused:
        locate(runtime, last_event_id, None, 8)
    assert refused.value.http_status == 410


@pytest.mark.parametrize(
    "last_event_id",
    ["nonsense", "gone_4", "_3", f"abc7_{MAX_SEQ + 1}", "abc7_" + "1" * 400, "a:b_1", "é_1"],
)
def test_an_id_this_server_cannot_have_made_is_400_before_the_mirror_is_asked(
    last_event_id: str,
) -> None:
    runtime, _ = runtime_with_a_call()
    with pytest.raises(InvalidRequest) as refused:
        elsewhere(runtime, last_event_id)  # what the shell asks before the mirror (Redis)
    assert http_status(refused.value, "legacy") == 400
    assert "is not an event id of this server" in str(refused.value)
    assert len(str(refused.value)) < 300  # a long id is shown cut short
    with pytest.raises(InvalidRequest) as again:
        locate(runtime, last_event_id, None, 8)
    assert http_status(again.value, "legacy") == 400


@pytest.mark.parametrize("blank", ["", "  "])
def test_a_blank_id_is_a_fresh_get(blank: str) -> None:
    runtime, _ = runtime_with_a_call()
    assert elsewhere(runtime, blank) is None
    assert locate(runtime, blank, None, 8) == Resume(None, 0)


def test_another_replicas_running_call_is_followed_from_its_copy() -> None:
    runtime, _ = runtime_with_a_call()
    assert elsewhere(runtime, "abc7_2") == ("abc7", 2)
    found = locate(runtime, "abc7_2", Copy([(3, b'{"n":3}')], finished=False), 8)
    assert found.stream is not None
    assert found.stream.id == "abc7"
    assert found.after == 2
    assert found.follow
    assert [seq for seq, _ in found.stream.events_after(2)] == [3]


def test_another_replicas_finished_call_is_replayed_not_followed() -> None:
    runtime, _ = runtime_with_a_call()
    found = locate(runtime, "abc7_2", Copy([(3, b'{"n":3}')], finished=True), 8)
    assert not found.follow
    assert found.stream is not None
    assert found.stream.finished


def test_another_replicas_standalone_stream_is_replayed_then_this_one_follows() -> None:
    runtime, _ = runtime_with_a_call()
    found = locate(runtime, "abc1g_5", Copy([(6, b"six"), (7, b"seven")], finished=False), 8)
    assert found.stream is None  # this replica's own standalone stream carries on
    assert found.missed == (("abc1g_6", b"six"), ("abc1g_7", b"seven"))


@pytest.mark.parametrize(
    "copy",
    [Copy([], finished=False), Copy([], finished=True), None],
    ids=["nothing-missed", "drained", "crashed-before-any-event"],
)
def test_another_replicas_standalone_stream_with_nothing_missed_carries_on_here(
    copy: Copy | None,
) -> None:
    # Issue 35: its replica drained (the copy ends with its end marker) or crashed (no end
    # marker, or no copy at all if it had sent nothing yet): this replica's stream carries
    # on, where a 410 made the official SDK stop listening for good.
    runtime, _ = runtime_with_a_call()
    assert elsewhere(runtime, "abc1g_5") == ("abc1g", 5)
    assert locate(runtime, "abc1g_5", copy, 8) == Resume(None, 0)
    assert locate(runtime, "abcdef1g_0", copy, 8) == Resume(None, 0)
