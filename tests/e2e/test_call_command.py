"""``python -m server call``: one modern-era request from a shell, against a real uvicorn."""

import json
from collections.abc import Iterator

import pytest

from server.__main__ import main
from server.app import create_app
from server.client_cli import header_value, modern_request, response_of
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
