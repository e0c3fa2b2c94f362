"""``python -m server call``: one modern-era request from a shell, against a real uvicorn."""

import asyncio
import json
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import uvicorn

from server.app import create_app
from server.cli.call import response_of
from server.cli.main import main
from server.modern.headers import header_value, modern_request
from server.settings import Settings
from tests.support.live_server import ServerThread
from tests.support.mcp_client import META_CAPABILITIES, META_VERSION


@pytest.fixture(scope="module")
def url() -> Iterator[str]:
    thread = ServerThread(create_app(Settings(_env_file=None, records=["none"]))).start()
    try:
        yield f"{thread.url}/mcp"
    finally:
        thread.stop()


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    status = main(["call", *argv])
    printed = capsys.readouterr()
    return status, printed.out, printed.err


def test_a_list_prints_the_result_as_json(url: str, capsys: pytest.CaptureFixture[str]) -> None:
    status, out, _ = run(capsys, "tools/list", "--url", url)
    assert status == 0
    assert "echo" in [tool["name"] for tool in json.loads(out)["tools"]]


def test_a_tool_call_fills_the_name_header(url: str, capsys: pytest.CaptureFixture[str]) -> None:
    params = json.dumps({"name": "echo", "arguments": {"text": "héllo"}})
    status, out, _ = run(capsys, "tools/call", params, "--url", url)
    assert status == 0
    assert json.loads(out)["content"][0]["text"] == "héllo"


def test_a_failing_tool_exits_1(url: str, capsys: pytest.CaptureFixture[str]) -> None:
    status, out, _ = run(capsys, "tools/call", '{"name": "fail"}', "--url", url)
    assert status == 1
    assert json.loads(out)["isError"] is True


def test_an_error_exits_1_with_the_error(url: str, capsys: pytest.CaptureFixture[str]) -> None:
    status, out, _ = run(capsys, "tools/call", '{"name": "no-such-tool"}', "--url", url)
    assert status == 1
    assert json.loads(out)["code"] == -32602


def test_an_undeclared_capability_is_an_error(url: str, capsys: pytest.CaptureFixture[str]) -> None:
    status, out, _ = run(capsys, "tools/call", '{"name": "ask_name"}', "--url", url)
    assert status == 1
    assert json.loads(out)["data"]["requiredCapabilities"] == {"elicitation": {}}


def test_an_input_required_round_and_the_next(url: str, capsys: pytest.CaptureFixture[str]) -> None:
    asking = ("--url", url, "--capabilities", '{"elicitation": {}}')
    status, out, _ = run(capsys, "tools/call", '{"name": "ask_name"}', *asking)
    first = json.loads(out)
    assert status == 0
    assert first["resultType"] == "input_required"
    assert list(first["inputRequests"]) == ["name"]
    answer = {
        "name": "ask_name",
        "requestState": first["requestState"],
        "inputResponses": {"name": {"action": "accept", "content": {"name": "Ada"}}},
    }
    status, out, _ = run(capsys, "tools/call", json.dumps(answer), *asking)
    assert status == 0
    assert json.loads(out)["content"][0]["text"] == "Hello, Ada!"


def test_bad_params_or_no_server_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert run(capsys, "tools/list", "[1]", "--url", "http://127.0.0.1:9/mcp")[0] == 2
    status, _, err = run(capsys, "tools/list", "--url", "http://127.0.0.1:9/mcp", "--timeout", "2")
    assert status == 2
    assert "no answer" in err


def test_the_request_and_its_headers() -> None:
    message, headers = modern_request("resources/read", {"uri": "probe://ü"}, request_id=7)
    meta = message["params"]["_meta"]
    assert meta[META_VERSION] == "2026-07-28"
    assert meta[META_CAPABILITIES] == {}
    assert headers["Mcp-Method"] == "resources/read"
    assert headers["Mcp-Name"] == header_value("probe://ü")
    assert headers["Mcp-Name"].startswith("=?base64?")
    assert header_value(True) == "true"
    sse = b'event: message\ndata: {"jsonrpc":"2.0","method":"x"}\n\ndata: {"id":7,"result":{}}\n\n'
    assert response_of("text/event-stream", sse, 7) == {"id": 7, "result": {}}


# -- what a hostile or stuck server cannot do to the shell -----------------------------------

ESCAPES = "\x1b]0;owned\x07\x1b[2J\r\x9b31m\x9d0;x\x9c\u202egnp.exe"


@contextmanager
def raw_server(app: Any) -> Iterator[str]:
    """A bare ASGI ``app`` under uvicorn on 127.0.0.1; its URL."""
    server = uvicorn.Server(
        uvicorn.Config(app, host="127.0.0.1", port=0, log_config=None, log_level="warning")
    )
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started:
        assert time.monotonic() < deadline, "uvicorn did not start"
        time.sleep(0.01)
    try:
        yield f"http://127.0.0.1:{server.servers[0].sockets[0].getsockname()[1]}/mcp"
    finally:
        server.should_exit = True
        thread.join(30)


def assert_no_controls(text: str) -> None:
    acting = [c for c in text if (ord(c) < 32 and c not in "\n\t") or 0x7F <= ord(c) <= 0x9F]
    acting += [c for c in text if c in "\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069"]
    assert acting == [], text


def test_a_results_terminal_escapes_are_printed_escaped(
    url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    params = json.dumps({"name": "echo", "arguments": {"text": ESCAPES}})
    status, out, _ = run(capsys, "tools/call", params, "--url", url)
    assert status == 0
    assert_no_controls(out)
    assert json.loads(out)["content"][0]["text"] == ESCAPES  # escaped, still the same JSON


def test_a_non_json_answers_escapes_are_printed_escaped(
    capsys: pytest.CaptureFixture[str],
) -> None:
    async def app(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        await send({"type": "http.response.start", "status": 502, "headers": []})
        await send({"type": "http.response.body", "body": ("bad " + ESCAPES).encode()})

    with raw_server(app) as raw:
        status, _, err = run(capsys, "tools/list", "--url", raw)
    assert status == 2
    assert_no_controls(err)
    assert "\\x1b]0;owned" in err


def test_the_timeout_is_a_deadline_for_the_whole_command(
    capsys: pytest.CaptureFixture[str],
) -> None:
    async def trickle(scope: Any, receive: Any, send: Any) -> None:
        """An SSE answer that sends a keep-alive every 0.2 s and never a result (for 20 s)."""
        if scope["type"] != "http":
            return
        headers = [(b"content-type", b"text/event-stream")]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        for _ in range(100):
            await send(
                {"type": "http.response.body", "body": b": keep-alive\n\n", "more_body": True}
            )
            await asyncio.sleep(0.2)
        await send({"type": "http.response.body", "body": b""})

    finished: list[int] = []
    with raw_server(trickle) as raw:
        started = time.monotonic()
        caller = threading.Thread(
            target=lambda: finished.append(
                main(["call", "tools/list", "--url", raw, "--timeout", "1"])
            ),
            daemon=True,
        )
        caller.start()
        caller.join(10)
        took = time.monotonic() - started
        assert finished == [2], "the command was still waiting 10 s after a 1 s timeout"
    assert took < 5
    assert "within 1 s" in capsys.readouterr().err


def test_the_default_url_is_the_server_configured_here(
    url: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.chdir(tmp_path)  # no .env
    for name in ("MCP_HOST", "MCP_PATH"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("MCP_PORT", url.rsplit(":", 1)[1].split("/", 1)[0])
    status, out, err = run(capsys, "tools/list")
    assert status == 0, err
    assert "echo" in [tool["name"] for tool in json.loads(out)["tools"]]
