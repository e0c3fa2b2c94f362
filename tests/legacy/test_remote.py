"""server.legacy.remote: the other replicas' events reach a session's live part here, if any.

Sans-IO: a real era and runtimes, no HTTP. (Over the bus, through the app's relay, in
tests/state/test_state.py.)
"""

import asyncio

import pytest

from server.jsonrpc import Response
from server.legacy.remote import RemoteSessions
from server.legacy.runtime import Runtimes
from tests.legacy.test_era import make_era, new_session

pytestmark = pytest.mark.anyio


async def test_an_answer_reaches_the_question_waiting_here() -> None:
    era = make_era()
    runtimes = Runtimes(64)
    remote = RemoteSessions(era, runtimes)
    waiting: asyncio.Future[dict[str, object]] = asyncio.get_running_loop().create_future()
    runtimes.get("s1").pending["srv-1"] = waiting
    remote.remote_answer("elsewhere", Response("srv-1", {"action": "accept"}))
    assert not waiting.done()  # no live part here: nothing to do
    remote.remote_answer("s1", Response("srv-1", {"action": "accept"}))
    assert waiting.result() == {"result": {"action": "accept"}}


async def test_a_cancel_stops_the_call_running_here() -> None:
    era = make_era()
    runtimes = Runtimes(64)
    remote = RemoteSessions(era, runtimes)
    call = asyncio.create_task(asyncio.sleep(10))
    runtimes.get("s1").inflight["req-1"] = call
    remote.remote_cancel("elsewhere", {"requestId": "req-1"})
    remote.remote_cancel("s1", {"requestId": "req-1"})
    with pytest.raises(asyncio.CancelledError):
        await call


async def test_subscription_changes_apply_and_a_resync_rereads_them() -> None:
    era = make_era()
    session = await new_session(era)
    await era.store.subscribe(session.id, "x://stored")
    runtimes = Runtimes(64)
    remote = RemoteSessions(era, runtimes)
    following = runtimes.get(session.id)
    following.standalone = following.open_stream(standalone=True)  # a GET stream here
    idle = runtimes.get("s-no-get")
    remote.remote_subscription(session.id, "x://a", True)
    remote.remote_subscription("s-no-get", "x://b", True)
    remote.remote_subscription("elsewhere", "x://c", True)
    assert set(following.subscriptions) == {"x://a"}
    assert set(idle.subscriptions) == {"x://b"}
    remote.subscriptions_missed()
    assert not following.subscriptions.loaded
    assert not idle.subscriptions.loaded
    await asyncio.sleep(0)  # the re-read of the session with a GET stream runs now
    assert following.subscriptions.loaded
    assert set(following.subscriptions) == {"x://stored"}
    assert not idle.subscriptions.loaded  # read when its GET stream opens


def test_an_ended_session_leaves_nothing_here() -> None:
    runtimes = Runtimes(64)
    remote = RemoteSessions(make_era(), runtimes)
    runtimes.get("s1")
    remote.session_ended("s1")
    assert runtimes.peek("s1") is None


def test_a_message_goes_on_the_http_sse_stream_held_here() -> None:
    runtimes = Runtimes(64)
    remote = RemoteSessions(make_era(), runtimes)
    held = runtimes.get("s1")
    held.standalone = held.open_stream(standalone=True)
    assert remote.to_stream("s1", b"{}") is False  # nobody follows it here yet
    held.standalone_followers = 1
    remote.remote_message("s1", b'{"a":1}')
    assert remote.to_stream("s1", b'{"b":2}') is True
    sent = [event.payload for _, event in held.standalone.events_after(0)]
    assert sent == [b'{"a":1}', b'{"b":2}']
    assert remote.to_stream("elsewhere", b"{}") is False
