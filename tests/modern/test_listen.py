"""server.modern.listen: what a ``subscriptions/listen`` filter grants, and which changes and
task news match it."""

from typing import Any

import orjson
import pytest

from server.catalog import Change
from server.catalog.extensions import TASKS_EXTENSION
from server.errors import InvalidParams, MissingClientCapability
from server.hub import MAX_RESOURCE_SUBSCRIPTIONS, MAX_URI_LENGTH, Hub, TaskNews
from server.modern.listen import ListenFilter, ListenFrames, WatchedFrames
from server.protocol import META_SUBSCRIPTION_ID
from server.tasks.model import TaskRecord

EVERYTHING = {
    "tools": {"listChanged": True},
    "prompts": {"listChanged": True},
    "resources": {"subscribe": True, "listChanged": True},
}
TASKS: dict[str, Any] = {"extensions": {TASKS_EXTENSION: {}}}


# -- ListenFilter.grant --------------------------------------------------------------------


def test_grant_everything_when_everything_is_served():
    requested = {
        "toolsListChanged": True,
        "promptsListChanged": True,
        "resourcesListChanged": True,
        "resourceSubscriptions": ["x://a", "x://b", "x://a"],
    }
    granted = ListenFilter.grant(requested, EVERYTHING)
    assert granted.to_wire() == {
        "toolsListChanged": True,
        "promptsListChanged": True,
        "resourcesListChanged": True,
        "resourceSubscriptions": ["x://a", "x://b"],
    }


def test_grant_only_what_capabilities_serve():
    requested = {
        "toolsListChanged": True,
        "promptsListChanged": True,
        "resourcesListChanged": True,
        "resourceSubscriptions": ["x://a"],
    }
    assert ListenFilter.grant(requested, {"tools": {}}).to_wire() == {"toolsListChanged": True}
    assert ListenFilter.grant(requested, {}).to_wire() == {}


def test_resource_subscriptions_need_the_subscribe_capability():
    requested = {"resourcesListChanged": True, "resourceSubscriptions": ["x://a"]}
    no_subscribe = {"resources": {"listChanged": True}}
    assert ListenFilter.grant(requested, no_subscribe).to_wire() == {"resourcesListChanged": True}


def test_false_or_absent_flags_are_not_subscriptions():
    granted = ListenFilter.grant({"toolsListChanged": False}, EVERYTHING)
    assert granted.to_wire() == {}
    assert granted.notification(Change("tools")) is None


@pytest.mark.parametrize(
    "requested",
    [
        None,
        [],
        "all",
        {"toolsListChanged": "yes"},
        {"promptsListChanged": 1},
        {"resourceSubscriptions": "x://a"},
        {"resourceSubscriptions": [1]},
        {"resourceSubscriptions": [""]},
        {"resourceSubscriptions": ["no-scheme"]},
        {"resourceSubscriptions": ["x://" + "a" * MAX_URI_LENGTH]},
        {"resourceSubscriptions": [f"x://{i}" for i in range(MAX_RESOURCE_SUBSCRIPTIONS + 1)]},
    ],
)
def test_bad_filters_are_invalid_params(requested):
    with pytest.raises(InvalidParams):
        ListenFilter.grant(requested, EVERYTHING)


def test_limits_are_inclusive():
    uris = [f"x://{i}" for i in range(MAX_RESOURCE_SUBSCRIPTIONS)]
    assert len(ListenFilter.grant({"resourceSubscriptions": uris}, EVERYTHING).resource_uris) == (
        MAX_RESOURCE_SUBSCRIPTIONS
    )
    longest = "x://" + "a" * (MAX_URI_LENGTH - 4)
    assert ListenFilter.grant({"resourceSubscriptions": [longest]}, EVERYTHING).resource_uris == (
        longest,
    )


# -- ListenFilter.notification -------------------------------------------------------------


def test_list_changes_map_to_their_notifications():
    granted = ListenFilter.grant(
        {"toolsListChanged": True, "promptsListChanged": True, "resourcesListChanged": True},
        EVERYTHING,
    )
    assert granted.notification(Change("tools")) == ("notifications/tools/list_changed", {})
    assert granted.notification(Change("prompts")) == ("notifications/prompts/list_changed", {})
    assert granted.notification(Change("resources")) == (
        "notifications/resources/list_changed",
        {},
    )
    assert granted.notification(Change("resource_updated", "x://a")) is None


def test_resource_updates_cover_the_uri_and_below_it():
    granted = ListenFilter.grant(
        {"resourceSubscriptions": ["file:///project", "x://exact"]}, EVERYTHING
    )
    assert granted.notification(Change("resource_updated", "file:///project/a/b.txt")) == (
        "notifications/resources/updated",
        {"uri": "file:///project/a/b.txt"},
    )
    assert granted.notification(Change("resource_updated", "x://exact")) == (
        "notifications/resources/updated",
        {"uri": "x://exact"},
    )
    assert granted.notification(Change("resource_updated", "file:///projectX")) is None
    assert granted.notification(Change("resource_updated", "file:///")) is None
    assert granted.notification(Change("tools")) is None


def test_task_news_reaches_only_streams_of_its_owner() -> None:
    capabilities: dict[str, Any] = {"extensions": {TASKS_EXTENSION: {}}}
    record = TaskRecord("t1", "alice", "c", None, "modern", "job", 1, 60_000, 500)
    mine = ListenFilter.grant(
        {"taskIds": ["t1"]}, capabilities, client_capabilities=TASKS, owner="alice"
    )
    theirs = ListenFilter.grant(
        {"taskIds": ["t1"]}, capabilities, client_capabilities=TASKS, owner="eve"
    )
    method, params = mine.notification(TaskNews(record)) or ("", {})
    assert (method, params["taskId"], params["status"]) == ("notifications/tasks", "t1", "working")
    assert theirs.notification(TaskNews(record)) is None
    other = TaskRecord("t2", "alice", "c", None, "modern", "job", 1, 60_000, 500)
    assert mine.notification(TaskNews(other)) is None
    # A server without the tasks extension grants no task ids, however asked.
    assert ListenFilter.grant({"taskIds": ["t1"]}, {}, client_capabilities=TASKS).task_ids == set()
    with pytest.raises(InvalidParams):
        ListenFilter.grant({"taskIds": "t1"}, capabilities, client_capabilities=TASKS)
    with pytest.raises(MissingClientCapability):
        ListenFilter.grant({"taskIds": ["t1"]}, capabilities, client_capabilities={})


def test_filters_share_their_sets() -> None:
    """A filter lives as long as its stream, and a frozenset is 216 bytes even empty: streams
    that asked for the same flags, and none for tasks, hold the same sets."""
    first = ListenFilter.grant({"toolsListChanged": True}, EVERYTHING)
    second = ListenFilter.grant({"toolsListChanged": True, "promptsListChanged": False}, EVERYTHING)
    assert first.flags is second.flags
    assert first.task_ids is second.task_ids
    assert first.task_ids == frozenset()


def test_a_streams_frames_are_a_small_object_with_its_subscription_id() -> None:
    """It lives as long as its stream: two slots, not a closure and its cells."""
    granted = ListenFilter.grant({"toolsListChanged": True}, EVERYTHING)
    frames = ListenFrames(granted, "L1")
    assert orjson.loads(frames(Change("tools")) or b"") == {
        "jsonrpc": "2.0",
        "method": "notifications/tools/list_changed",
        "params": {"_meta": {META_SUBSCRIPTION_ID: "L1"}},
    }
    assert frames(Change("prompts")) is None
    assert not hasattr(frames, "__dict__")


def test_a_stream_that_cannot_know_what_it_missed_is_told_every_resource_it_follows() -> None:
    # A resync without a change log (Redis restarted empty while the bus was away): the hub
    # tells each listen stream every resource it follows, once, and nothing to the others.
    granted = ListenFilter.grant(
        {"toolsListChanged": True, "resourceSubscriptions": ["x://a", "x://b"]}, EVERYTHING
    )
    hub = Hub()
    following = hub.attach(ListenFrames(granted, "L1"))
    lists_only = hub.attach(
        ListenFrames(ListenFilter.grant({"toolsListChanged": True}, EVERYTHING), "L2")
    )
    hub.tell_followed()
    frames = [following.queue.get_nowait() for _ in range(following.queue.qsize())]
    told = [orjson.loads(frame) for frame in frames if isinstance(frame, bytes)]
    assert [message["params"]["uri"] for message in told] == ["x://a", "x://b"]
    assert lists_only.queue.empty()
    watch: Any = lambda change: True  # noqa: E731 - a ListWatch that lets everything through
    assert WatchedFrames(ListenFrames(granted, "L3"), watch).followed == (
        "x://a",
        "x://b",
    )
