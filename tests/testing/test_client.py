"""server.testing: the in-memory client drives the probe catalog through every primitive."""

import asyncio
import contextlib
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from typing import Any

import pytest

from server import Catalog, Context
from server.builtin.probe import catalog as probe
from server.testing import MAX_ROUNDS, Client, ClientError, ErrorAnswer, TooManyQuestions

pytestmark = pytest.mark.anyio
ERAS = ["modern", "legacy"]


def name_answer(params: dict[str, Any]) -> dict[str, Any]:
    assert params["message"] == "What is your name?"
    return {"action": "accept", "content": {"name": "Ada"}}


async def model_answer(params: dict[str, Any]) -> dict[str, Any]:
    asked = params["messages"][0]["content"]["text"]
    return {
        "role": "assistant",
        "content": {"type": "text", "text": f"echo: {asked}"},
        "model": "m",
    }


def texts(result: dict[str, Any]) -> str:
    return "".join(item.get("text", "") for item in result["content"])


async def wait_for_change(client: Client) -> dict[str, Any]:
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        for note in client.notifications:
            if note["method"].endswith("/list_changed"):
                return note
        await asyncio.sleep(0.005)  # the change travels through the app's hub in a task
    raise AssertionError(f"no list change among {client.notifications}")


@pytest.mark.parametrize("era", ERAS)
async def test_every_primitive_of_the_probe_catalog(era: Any) -> None:
    started = time.perf_counter()
    async with Client(
        probe,
        era=era,
        elicit=name_answer,
        sample=model_answer,
        roots=[{"uri": "file:///work", "name": "work"}],
        log_level="debug",
    ) as client:
        tools = {tool["name"] for tool in await client.list_tools()}
        assert {"echo", "add", "count_slowly", "ask_name", "ask_model", "show_roots"} <= tools
        assert texts(await client.call_tool("echo", {"text": "hi"})) == "hi"
        assert (await client.call_tool("add", {"a": 1, "b": 2}))["structuredContent"]["sum"] == 3
        failed = await client.call_tool("fail")
        assert failed["isError"] is True
        # Questions, answered by the callbacks in either era's way.
        assert texts(await client.call_tool("ask_name")) == "Hello, Ada!"
        assert "echo: " in texts(await client.call_tool("ask_model", {"question": "why?"}))
        assert texts(await client.call_tool("show_roots")) == "file:///work"
        # Progress and logs of a call.
        await client.call_tool("count_slowly", {"steps": 2, "delay_ms": 0}, progress=True)
        methods = [note["method"] for note in client.notifications]
        assert "notifications/progress" in methods
        assert "notifications/message" in methods
        # Resources, templates, prompts, completions.
        assert "probe://readme" in {r["uri"] for r in await client.list_resources()}
        read = await client.read_resource("probe://echo/abc")
        assert read["contents"][0]["text"] == "abc"
        assert await client.list_resource_templates()
        assert {p["name"] for p in await client.list_prompts()} >= {"greet", "summarize"}
        prompt = await client.get_prompt("greet", {"name": "Ada"})
        assert "Ada" in prompt["messages"][0]["content"]["text"]
        ref = {"type": "ref/prompt", "name": "summarize"}
        assert await client.complete(ref, "style", "b")
        # List changes reach an open listen stream (modern) or the session's stream (legacy).
        await client.listen()
        await client.call_tool("toggle_extra_tool")
        await client.call_tool("toggle_extra_tool")  # and back: the probe is shared
        changed = await wait_for_change(client)
        assert changed["method"] == "notifications/tools/list_changed"
        with pytest.raises(ErrorAnswer) as refused:
            await client.call_tool("no-such-tool")
        assert refused.value.code == -32602
    # A speed target measured here only as a ceiling far above the goal (2 s for both eras).
    assert time.perf_counter() - started < 30


async def test_a_question_without_an_answer_is_the_missing_capability_error() -> None:
    async with Client(probe) as client:
        with pytest.raises(ErrorAnswer) as refused:
            await client.call_tool("ask_name")
    assert refused.value.error["data"]["requiredCapabilities"] == {"elicitation": {}}


async def test_the_lifespan_runs_around_the_client() -> None:
    seen: list[str] = []

    @contextlib.asynccontextmanager
    async def lifespan(_catalog: Catalog) -> AsyncIterator[None]:
        seen.append("up")
        yield
        seen.append("down")

    catalog = Catalog("lifespan-test", "1", lifespan=lifespan)

    @catalog.tool
    async def alive() -> str:
        """Says what the lifespan did so far."""
        return ",".join(seen)

    async with Client(catalog) as client:
        assert texts(await client.call_tool("alive")) == "up"
    assert seen == ["up", "down"]


def test_import_server_does_not_load_the_test_client() -> None:
    code = "import sys, server; assert 'server.testing' not in sys.modules, 'loaded'"
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


def asking_forever() -> tuple[Catalog, list[int]]:
    catalog = Catalog("asks-forever", "1")
    asked: list[int] = []

    @catalog.tool
    async def forever(ctx: Context) -> str:
        """Asks again whatever the answer, and even when asking fails."""
        while True:
            asked.append(len(asked))
            with contextlib.suppress(Exception):  # a careless handler: errors are asked again
                await ctx.elicit(f"Again ({len(asked)})?", {"type": "object", "properties": {}})

    return catalog, asked


@pytest.mark.parametrize("era", ERAS)
async def test_a_handler_that_asks_forever_fails_the_call_instead_of_hanging(era: Any) -> None:
    catalog, asked = asking_forever()

    async def calling() -> None:
        accept = {"action": "accept", "content": {}}
        async with Client(catalog, era=era, elicit=lambda _params: accept) as client:
            with pytest.raises(TooManyQuestions, match="after 16 rounds"):
                await client.call_tool("forever")

    await asyncio.wait_for(calling(), 20)
    # Legacy: the 17th question is answered with an error and the call cancelled. Modern: each
    # round replays the handler, so it asked 1 + 2 + ... + 16 times.
    assert len(asked) == (MAX_ROUNDS + 1 if era == "legacy" else sum(range(1, MAX_ROUNDS + 1)))


@pytest.mark.parametrize("era", ERAS)
async def test_a_401_raises_the_clients_error_with_status_and_challenge(era: Any) -> None:
    from server.security.auth import new_token
    from server.settings import Settings

    _, digest = new_token()
    settings = Settings(_env_file=None, records=["none"], auth="tokens", auth_tokens=[digest])

    async def calling() -> None:
        async with Client(probe, era=era, settings=settings, token="not-the-token") as client:
            await client.call_tool("echo", {"text": "hi"})

    with pytest.raises(ErrorAnswer) as refused:
        await asyncio.wait_for(calling(), 20)
    assert refused.value.status == 401
    assert refused.value.code == -32001
    assert refused.value.headers["www-authenticate"].startswith("Bearer ")
    assert isinstance(refused.value, ClientError)


async def test_the_in_memory_client_logs_no_production_warning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Issue 34: every test of an author's catalog logged the MCP_STATE_SECRET WARNING, which
    is about several replicas; the in-memory client is one process by construction."""
    catalog = Catalog("quiet", "1")

    @catalog.tool
    def ping() -> str:
        return "pong"

    with caplog.at_level("WARNING"):
        async with Client(catalog) as client:
            assert (await client.call_tool("ping"))["content"][0]["text"] == "pong"
    assert [record.getMessage() for record in caplog.records] == []
