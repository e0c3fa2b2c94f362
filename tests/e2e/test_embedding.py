"""The app mounted in a host app (Starlette, FastAPI) under a real uvicorn on 127.0.0.1.

The host passes the MCP app's lifespan on (``lifespan=mcp.lifespan``: the one line
docs/deployment.md asks for) and mounts it at ``/ai``; then everything the lifespan provides
works as when the app is served alone: a ``tools/call`` writes its request record, a catalog change
reaches an open listen stream, ``/healthz`` is 200, an idle legacy session expires. A host
that forgets the line gets a 503 on every request, whose message names the fix, and one
WARNING in the log: never a request served without its record.

uvicorn runs in a thread here (plain ``uvicorn.Server``, as a host runs it); SIGTERM to such
a host is tests/e2e/test_any_server.py's part.
"""

from __future__ import annotations

import asyncio
import json
import logging
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
import uvicorn

from server.settings import Settings
from tests.e2e.embedding_apps import (
    MOUNT,
    build_fastapi_host,
    build_forgetful_host,
    build_starlette_host,
)
from tests.support.deploy_helpers import (
    legacy_headers,
    listen,
    modern_call,
    modern_headers,
    open_session,
    read_records,
    sse_messages,
)
from tests.support.mcp_client import legacy

MCP = f"{MOUNT}/mcp"
HOSTS: dict[str, Callable[[Settings], tuple[Any, Any]]] = {
    "starlette": build_starlette_host,
    "fastapi": build_fastapi_host,
}


@contextmanager
def hosting(host: Any) -> Iterator[str]:
    """``host`` under a real uvicorn (its own lifespan handling) on 127.0.0.1; its URL."""
    config = uvicorn.Config(
        host, host="127.0.0.1", port=0, lifespan="on", log_config=None, log_level="warning",
        timeout_graceful_shutdown=5,
    )  # fmt: skip
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started:
        assert thread.is_alive(), "uvicorn exited during startup"
        assert time.monotonic() < deadline, "uvicorn did not start"
        time.sleep(0.01)
    try:
        yield f"http://127.0.0.1:{server.servers[0].sockets[0].getsockname()[1]}"
    finally:
        server.should_exit = True
        thread.join(15)
        assert not thread.is_alive(), "uvicorn did not stop"


def settings(tmp_path: Path, **overrides: Any) -> Settings:
    chosen: dict[str, Any] = {"records": ["file"], "records_file": str(tmp_path / "records.jsonl")}
    return Settings(_env_file=None, **{**chosen, **overrides})


@pytest.fixture(params=list(HOSTS))
def build(request: pytest.FixtureRequest) -> Callable[[Settings], tuple[Any, Any]]:
    return HOSTS[request.param]


def test_health_and_the_hosts_own_routes_answer(
    build: Callable[[Settings], tuple[Any, Any]], tmp_path: Path
) -> None:
    host, _ = build(settings(tmp_path))
    with hosting(host) as url:
        assert httpx.get(f"{url}{MOUNT}/healthz").json() == {"status": "ok", "draining": False}
        assert httpx.get(f"{url}{MOUNT}/readyz").status_code == 200
        assert "own route" in httpx.get(f"{url}/hello").text


def test_a_tools_call_writes_its_record(
    build: Callable[[Settings], tuple[Any, Any]], tmp_path: Path
) -> None:
    host, _ = build(settings(tmp_path))
    with hosting(host) as url:
        message = modern_call("echo", {"text": "mounted"}, "call-1")
        answer = httpx.post(f"{url}{MCP}", json=message, headers=modern_headers(message))
        assert answer.status_code == 200, answer.text
        assert answer.json()["result"]["content"][0]["text"] == "mounted"
    # Stopped: the lifespan closed the recorder, which writes everything queued.
    (record,) = read_records(tmp_path / "records.jsonl")
    assert record["kind"] == "request"
    assert record["method"] == "tools/call"
    assert record["jsonrpc_id"] == "call-1"
    assert record["status"] == 200
    assert record["params"] == {"name": "echo", "arguments": {"text": "mounted"}}


def test_a_catalog_change_reaches_an_open_listen_stream(
    build: Callable[[Settings], tuple[Any, Any]], tmp_path: Path
) -> None:
    host, _ = build(settings(tmp_path, records=["none"]))

    async def scenario(url: str) -> list[dict[str, Any]]:
        received: list[dict[str, Any]] = []
        async with httpx.AsyncClient(base_url=url, timeout=10) as client:
            message = listen("listen-1")
            headers = modern_headers(message, "text/event-stream")
            async with client.stream("POST", MCP, json=message, headers=headers) as stream:
                assert stream.status_code == 200
                async for frame in sse_messages(stream):
                    received.append(frame)
                    if frame["method"] == "notifications/subscriptions/acknowledged":
                        call = modern_call("toggle", {}, "toggle-1")
                        answer = await client.post(MCP, json=call, headers=modern_headers(call))
                        assert answer.json()["result"]["content"][0]["text"] == "added"
                    else:
                        return received  # closes the stream, so the server can stop
        return received

    with hosting(host) as url:
        received = asyncio.run(asyncio.wait_for(scenario(url), 10))
    _ack, change = received
    assert change["method"] == "notifications/tools/list_changed"
    assert change["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"] == "listen-1"


def test_an_idle_legacy_session_expires(
    build: Callable[[Settings], tuple[Any, Any]], tmp_path: Path
) -> None:
    host, _ = build(settings(tmp_path, records=["none"], session_idle_timeout_s=0.5))

    async def scenario(url: str) -> tuple[int, float]:
        async with httpx.AsyncClient(base_url=url, timeout=5) as client:
            session_id = await open_session(client, MCP)
            opened = time.monotonic()
            ping = legacy("ping", id="ping-1")
            headers = legacy_headers(session_id)
            # Idle: the lifespan's sweep (every half second here) ends it; then it is unknown.
            while True:
                await asyncio.sleep(0.6)
                answer = await client.post(MCP, json=ping, headers=headers)
                if answer.status_code != 200 or time.monotonic() - opened > 8:
                    return answer.status_code, time.monotonic() - opened

    with hosting(host) as url:
        status, after = asyncio.run(scenario(url))
    assert status == 404, after


# -- the host that forgot the lifespan line -------------------------------------------------------


def test_a_host_without_the_lifespan_gets_503_naming_the_fix_and_a_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    host, _ = build_forgetful_host(settings(tmp_path))
    caplog.set_level(logging.WARNING, logger="server.app.routing")
    with hosting(host) as url:
        message = modern_call("echo", {"text": "lost?"}, "call-1")
        first = httpx.post(f"{url}{MCP}", json=message, headers=modern_headers(message))
        second = httpx.post(f"{url}{MCP}", json=message, headers=modern_headers(message))
        health = httpx.get(f"{url}{MOUNT}/healthz")
        own = httpx.get(f"{url}/hello")
    for answer in (first, second):
        assert answer.status_code == 503
        error = answer.json()["error"]
        assert error["code"] == -32000
        assert "lifespan=mcp.lifespan" in error["message"]
    assert health.status_code == 503
    assert "lifespan=mcp.lifespan" in health.json()["error"]
    assert own.status_code == 200  # the host's own routes are the host's business
    warnings = [
        record
        for record in caplog.records
        if record.name == "server.app.routing"
        and record.levelno == logging.WARNING
        and "lifespan" in record.getMessage()  # not the per-process secret's warning
    ]
    assert len(warnings) == 1, warnings
    assert "lifespan=mcp.lifespan" in warnings[0].getMessage()
    # Nothing was served, so nothing went unrecorded.
    assert not (tmp_path / "records.jsonl").exists()


def test_an_mcp_answer_is_json_rpc_and_other_paths_plain_json(tmp_path: Path) -> None:
    host, _ = build_forgetful_host(settings(tmp_path, records=["none"]))
    with hosting(host) as url:
        answer = httpx.post(f"{url}{MCP}", json={}, headers={"Accept": "application/json"})
        other = httpx.get(f"{url}{MOUNT}/readyz")
    assert json.loads(answer.text)["jsonrpc"] == "2.0"
    assert answer.headers["content-type"] == "application/json"
    assert other.json()["status"] == "not started"


def test_the_401_names_a_metadata_url_that_resolves_through_the_host(
    build: Callable[[Settings], tuple[Any, Any]], tmp_path: Path
) -> None:
    from cryptography.hazmat.primitives.asymmetric import rsa
    from jwt.algorithms import RSAAlgorithm

    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    jwk = RSAAlgorithm.to_jwk(key.public_key(), as_dict=True)
    jwks = tmp_path / "jwks.json"
    jwks.write_text(json.dumps({"keys": [{**jwk, "kid": "k1", "use": "sig"}]}))
    chosen = settings(
        tmp_path,
        auth="jwt",
        auth_issuer="https://id.example.com",
        auth_audience="https://api.example.com/ai/mcp",
        auth_jwks_file=str(jwks),
        auth_required_scopes=["mcp"],
    )
    host, _ = build(chosen)
    with hosting(host) as url:
        message = modern_call("echo", {"text": "hi"}, 1)
        refused = httpx.post(f"{url}{MCP}", json=message, headers=modern_headers(message))
        assert refused.status_code == 401
        challenge = refused.headers["www-authenticate"]
        advertised = challenge.split('resource_metadata="', 1)[1].split('"', 1)[0]
        document = httpx.get(advertised)  # through the host app, as a client follows it
    assert document.status_code == 200, advertised
    assert advertised == f"{url}{MOUNT}/.well-known/oauth-protected-resource/mcp"
    assert document.json()["resource"] == "https://api.example.com/ai/mcp"
    assert document.json()["authorization_servers"] == ["https://id.example.com"]
