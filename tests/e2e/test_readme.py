"""The examples of README.md and docs/*.md work as printed.

Every ```bash block that runs curl is taken from the pages verbatim (a block printed on two
pages runs once); only the port is rewritten (``127.0.0.1:8000`` to a free port) and
``--max-time`` added so nothing can hang. Each example gets its own freshly started server
process (probe catalog), stopped by its PID afterwards. Every example must answer with
JSON-RPC results, never an error; what the prose around an example promises is checked too.

Every ```python block runs too: a block whose first line names a file (``# my_server.py``) is
written under that name, so later blocks import it (``my_app.py`` imports ``my_server``), and
each block is run as a script in a folder of its own with the probe's skills beside it; the
"Test your catalog" block is run by pytest.
"""

import asyncio
import contextlib
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Literal

import httpx
import pytest

from server.testing import Client
from tests.support.deploy_helpers import free_port, stop_process
from tests.support.mcp_client import (
    initialize,
    legacy,
    legacy_headers,
    messages_of,
    modern,
    modern_headers,
    sse_messages_of_lines,
)

ROOT = Path(__file__).resolve().parents[2]
# getting-started first: its my_server.py is what later pages import.
PAGES = [ROOT / "README.md", ROOT / "docs" / "getting-started.md"] + [
    page for page in sorted((ROOT / "docs").glob("*.md")) if page.name != "getting-started.md"
]
TEXTS = {page.relative_to(ROOT).as_posix(): page.read_text(encoding="utf-8") for page in PAGES}


def blocks(language: str) -> list[tuple[str, str]]:
    """(page, block) for every fenced block of ``language``, in page order."""
    pattern = re.compile(rf"^```{language}\n(.*?)^```", flags=re.DOTALL | re.MULTILINE)
    return [(page, block) for page, text in TEXTS.items() for block in pattern.findall(text)]


# A block printed on two pages (the README's call of add) is one example.
EXAMPLES = list(dict.fromkeys(block for _, block in blocks("bash") if "curl " in block))
SUB_ID = "io.modelcontextprotocol/subscriptionId"
PAYLOAD = re.compile(r"-d '(.*?)'(?=\s*$)", flags=re.DOTALL | re.MULTILINE)


# A shell variable spliced into a single-quoted payload ('"$TASK"'), as the payload sees it.
SPLICE = re.compile(r"""'"\$(\w+)"'""")


def payloads(block: str) -> list[dict[str, Any]]:
    return [json.loads(SPLICE.sub(r"$\1", found)) for found in PAYLOAD.findall(block)]


def label(block: str) -> str:
    """``method`` (plus the tool or resource name) of each request in the block."""
    parts = []
    for payload in payloads(block):
        params = payload.get("params", {})
        target = params.get("name") or params.get("uri")
        as_task = " as a task" if "task" in params else ""
        parts.append(payload["method"] + (f" {target}" if target else "") + as_task)
    if "-X DELETE" in block:
        parts.append("DELETE")
    # The scripting example builds its requests in a shell function.
    return " + ".join(parts) or ("mcp shell function" if "mcp() {" in block else "")


LABELS = [label(block) for block in EXAMPLES]


def test_the_readme_curl_examples_are_all_found() -> None:
    assert set(LABELS) >= {
        "server/discover",
        "tools/list",
        "tools/call add",
        "tools/call count_slowly",
        "resources/read probe://readme",
        "subscriptions/listen",
        "tools/call ask_name",
        "initialize",
        "tools/call echo + DELETE",
        "tools/call long_job",
        "tasks/get + tasks/cancel",
        "tools/call long_job as a task",
        "tasks/get + tasks/result",
        "skills/list",
        "resources/read skill://try-the-probe/SKILL.md",
        "mcp shell function",
    }
    assert len(set(LABELS)) == len(LABELS)
    assert set(CHECKS) <= set(LABELS)


# -- a fresh server per example -----------------------------------------------------------


@pytest.fixture
def server_url(tmp_path: Path) -> Iterator[str]:
    port = free_port()
    env = {key: value for key, value in os.environ.items() if not key.startswith("MCP_")}
    env.update(
        MCP_PORT=str(port), MCP_CATALOG="probe", MCP_LOG_LEVEL="warning", PYTHONPATH=str(ROOT)
    )
    log_path = tmp_path / "server.log"
    url = f"http://127.0.0.1:{port}"
    with log_path.open("wb") as log:
        # cwd is an empty directory, so no developer's .env is picked up.
        process = subprocess.Popen(
            [sys.executable, "-m", "server"], cwd=tmp_path, env=env, stdout=log, stderr=log
        )
        try:
            deadline = time.monotonic() + 10
            while True:
                assert process.poll() is None, log_path.read_text()
                with contextlib.suppress(httpx.HTTPError):
                    if httpx.get(f"{url}/healthz", timeout=1).status_code == 200:
                        break
                assert time.monotonic() < deadline, "python -m server did not become ready"
                time.sleep(0.05)
            yield url
        finally:
            stop_process(process, grace_s=5)


def localize(block: str, url: str) -> str:
    assert "127.0.0.1:8000" in block
    command = block.replace("http://127.0.0.1:8000", url)
    return re.sub(r"(?m)^curl ", "curl --max-time 5 ", command)


def run(command: str, env: dict[str, str] | None = None) -> str:
    done = subprocess.run(
        ["bash", "-c", command],
        capture_output=True,
        text=True,
        timeout=15,
        check=False,
        env={**os.environ, **(env or {})},
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


# -- reading what curl printed --------------------------------------------------------------


def split_head(output: str) -> tuple[dict[str, str], str]:
    """(response headers, body) of ``curl -i`` output; no headers for plain output."""
    output = output.replace("\r\n", "\n")
    if not output.startswith("HTTP/"):
        return {}, output
    head, _, body = output.partition("\n\n")
    status, *lines = head.split("\n")
    assert " 200" in status, output
    headers = {}
    for line in lines:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    return headers, body


def jsonrpc_messages(body: str) -> tuple[bool, list[dict[str, Any]]]:
    """(was SSE, the messages): SSE data lines, or one or more JSON documents."""
    if body.strip() and not body.lstrip().startswith(("{", "[")):
        return True, messages_of(body)  # which also checks every line is an SSE field
    decoder = json.JSONDecoder()
    messages, position = [], 0
    while position < len(body):
        if body[position].isspace():
            position += 1
            continue
        message, position = decoder.raw_decode(body, position)
        messages.append(message)
    return False, messages


def assert_results(output: str) -> list[dict[str, Any]]:
    """Every request in the output was answered with a result; returns the messages."""
    _, body = split_head(output)
    sse, messages = jsonrpc_messages(body)
    assert messages, f"no JSON-RPC message in {output!r}"
    for message in messages:
        assert message.get("jsonrpc") == "2.0", message
        assert "error" not in message, message
    if sse:
        *notes, last = messages
        assert "result" in last
        assert "id" in last
        assert all("method" in note and "id" not in note for note in notes), notes
    else:
        assert all("result" in message and "id" in message for message in messages), messages
    return messages


# -- the examples ---------------------------------------------------------------------------


def check_discover(messages: list[dict[str, Any]], **_: Any) -> None:
    result = messages[-1]["result"]
    assert result["supportedVersions"] == ["2026-07-28"]
    assert {"tools", "resources", "prompts"} <= set(result["capabilities"])


def check_tools_list(messages: list[dict[str, Any]], **_: Any) -> None:
    names = {tool["name"] for tool in messages[-1]["result"]["tools"]}
    assert {"add", "count_slowly", "toggle_extra_tool", "ask_name", "echo"} <= names


def check_add(messages: list[dict[str, Any]], **_: Any) -> None:
    # "The answer is structured content plus a text block"
    result = messages[-1]["result"]
    assert result["structuredContent"] == {"a": 2, "b": 3, "sum": 5}
    (text,) = result["content"]
    assert text["type"] == "text"
    assert json.loads(text["text"]) == result["structuredContent"]


def check_count_slowly(messages: list[dict[str, Any]], output: str, **_: Any) -> None:
    # "the response becomes an SSE stream that carries them before the result"
    assert jsonrpc_messages(output)[0]
    *notes, last = messages
    assert last["result"]["content"] == [{"type": "text", "text": "Counted to 3."}]
    progress = [note["params"] for note in notes if note["method"] == "notifications/progress"]
    assert [(p["progressToken"], p["progress"], p["total"]) for p in progress] == [
        ("p1", 1, 3),
        ("p1", 2, 3),
        ("p1", 3, 3),
    ]
    logs = [note["params"]["data"] for note in notes if note["method"] == "notifications/message"]
    assert logs == ["counted 1", "counted 2", "counted 3"]


def check_resource(messages: list[dict[str, Any]], **_: Any) -> None:
    (contents,) = messages[-1]["result"]["contents"]
    assert contents["uri"] == "probe://readme"
    assert "probe server" in contents["text"]


def check_ask_name(messages: list[dict[str, Any]], block: str, url: str, **_: Any) -> None:
    # "send the same request again with inputResponses and the requestState it gave you"
    first = messages[-1]["result"]
    assert first["resultType"] == "input_required"
    assert first["inputRequests"]["name"]["method"] == "elicitation/create"
    (payload,) = payloads(block)
    payload["params"]["inputResponses"] = {"name": {"action": "accept", "content": {"name": "Ada"}}}
    payload["params"]["requestState"] = first["requestState"]
    (original,) = PAYLOAD.findall(block)
    again = assert_results(run(localize(block.replace(original, json.dumps(payload)), url)))
    assert again[-1]["result"]["resultType"] == "complete"
    assert again[-1]["result"]["content"] == [{"type": "text", "text": "Hello, Ada!"}]


def check_initialize(messages: list[dict[str, Any]], output: str, **_: Any) -> None:
    # "the answer carries its id in the Mcp-Session-Id header"
    headers, _body = split_head(output)
    assert headers.get("mcp-session-id")
    result = messages[-1]["result"]
    assert result["protocolVersion"] == "2025-11-25"
    assert result["serverInfo"]["name"] == "mcp-http-server-probe"


def check_session_call(messages: list[dict[str, Any]], url: str, session: str, **_: Any) -> None:
    assert messages[-1]["result"]["content"] == [{"type": "text", "text": "hi"}]
    # "... and end the session": the session is gone afterwards.
    after = httpx.post(
        f"{url}/mcp", json=legacy("ping", id=9), headers=legacy_headers(session, Accept=None)
    )
    assert after.status_code == 404


def check_modern_task(messages: list[dict[str, Any]], **_: Any) -> None:
    # "the call answers at once with a task id"
    result = messages[-1]["result"]
    assert result["resultType"] == "task"
    assert result["status"] == "working"
    assert set(result) >= {"taskId", "createdAt", "lastUpdatedAt", "ttlMs", "pollIntervalMs"}


def check_poll_and_cancel(messages: list[dict[str, Any]], task: str, **_: Any) -> None:
    got, cancelled = (message["result"] for message in messages)
    assert (got["taskId"], got["status"]) == (task, "working")
    assert cancelled["resultType"] == "complete"
    assert "taskId" not in cancelled


def check_legacy_task(messages: list[dict[str, Any]], **_: Any) -> None:
    task = messages[-1]["result"]["task"]
    assert (task["status"], task["ttl"]) == ("working", 60000)


def check_status_and_result(messages: list[dict[str, Any]], task: str, **_: Any) -> None:
    # "its status, then its result (tasks/result waits for it)"
    got, result = (message["result"] for message in messages)
    assert got["taskId"] == task
    assert result["content"][0]["text"].startswith("Worked 1 s as task ")
    assert result["_meta"]["io.modelcontextprotocol/related-task"] == {"taskId": task}


def check_skills_list(messages: list[dict[str, Any]], **_: Any) -> None:
    uris = [skill["uri"] for skill in messages[-1]["result"]["skills"]]
    assert uris == ["skill://long-running-calls/SKILL.md", "skill://try-the-probe/SKILL.md"]


def check_skill_file(messages: list[dict[str, Any]], **_: Any) -> None:
    (contents,) = messages[-1]["result"]["contents"]
    assert contents["mimeType"] == "text/markdown"
    assert contents["text"].startswith("---\nname: try-the-probe\n")


def check_shell_function(messages: list[dict[str, Any]], **_: Any) -> None:
    # "it calls a tool, then plays both rounds of a question"
    added, answered = messages
    assert added["result"]["structuredContent"]["sum"] == 5
    assert answered["result"]["content"][0]["text"] == "Hello, Ada!"


CHECKS: dict[str, Callable[..., None]] = {
    "server/discover": check_discover,
    "tools/list": check_tools_list,
    "tools/call add": check_add,
    "tools/call count_slowly": check_count_slowly,
    "resources/read probe://readme": check_resource,
    "tools/call ask_name": check_ask_name,
    "initialize": check_initialize,
    "tools/call echo + DELETE": check_session_call,
    "tools/call long_job": check_modern_task,
    "tasks/get + tasks/cancel": check_poll_and_cancel,
    "tools/call long_job as a task": check_legacy_task,
    "tasks/get + tasks/result": check_status_and_result,
    "skills/list": check_skills_list,
    "resources/read skill://try-the-probe/SKILL.md": check_skill_file,
    "mcp shell function": check_shell_function,
}

TASKS: dict[str, Any] = {"extensions": {"io.modelcontextprotocol/tasks": {}}}


def start_task(url: str, session: str | None) -> str:
    """A one-second long_job as a task, in ``session`` (2025-11-25) or without (2026-07-28)."""
    if session is not None:
        message = legacy(
            "tools/call", {"name": "long_job", "arguments": {"seconds": 1}, "task": {}}, 0
        )
        headers = legacy_headers(session, Accept=None)
        answer = httpx.post(f"{url}/mcp", json=message, headers=headers).json()
        return str(answer["result"]["task"]["taskId"])
    message = modern(
        "tools/call", {"name": "long_job", "arguments": {"seconds": 1}}, 0, capabilities=TASKS
    )
    # As the README's example sends it: no Content-Type or Accept of its own.
    headers = modern_headers(message, Accept=None, Content_Type=None)
    answer = httpx.post(f"{url}/mcp", json=message, headers=headers).json()
    return str(answer["result"]["taskId"])


def open_session(url: str) -> str:
    response = httpx.post(
        f"{url}/mcp",
        json=initialize(client_info={"name": "test", "version": "1"}),
        headers=legacy_headers(version=None),
    )
    assert response.status_code == 200
    return response.headers["mcp-session-id"]


# The listen stream never ends by itself: it has its own test below.
@pytest.mark.parametrize(
    "block", [b for b in EXAMPLES if "subscriptions/listen" not in b], ids=label
)
def test_curl_example_answers_with_results(block: str, server_url: str) -> None:
    env = {}
    if "$SESSION" in block:
        env["SESSION"] = open_session(server_url)
    if "$TASK" in block:
        env["TASK"] = start_task(server_url, env.get("SESSION"))
    output = run(localize(block, server_url), env)
    messages = assert_results(output)
    check = CHECKS.get(label(block))
    if check is not None:
        check(
            messages,
            output=output,
            block=block,
            url=server_url,
            session=env.get("SESSION"),
            task=env.get("TASK"),
        )


def test_listen_example_acks_and_then_sees_toggle_extra_tool(server_url: str) -> None:
    (block,) = [b for b in EXAMPLES if label(b) == "subscriptions/listen"]
    listener = subprocess.Popen(
        ["bash", "-c", f"exec {localize(block, server_url)}"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        assert listener.stdout is not None
        data = sse_messages_of_lines(line.decode() for line in listener.stdout)
        ack = next(data)
        assert ack == {
            "jsonrpc": "2.0",
            "method": "notifications/subscriptions/acknowledged",
            "params": {"_meta": {SUB_ID: "listen-1"}, "notifications": {"toolsListChanged": True}},
        }
        # "in another terminal call the tool toggle_extra_tool": the add example, retargeted.
        (add,) = [b for b in EXAMPLES if label(b) == "tools/call add"]
        toggle = localize(add, server_url).replace('"add"', '"toggle_extra_tool"')
        toggle = toggle.replace("Mcp-Name: add", "Mcp-Name: toggle_extra_tool")
        toggle = toggle.replace('{"a":2,"b":3}', "{}")
        (answer,) = assert_results(run(toggle))
        assert answer["result"]["content"][0]["text"] == "Added the tool 'extra'."
        changed = next(data)
        assert changed == {
            "jsonrpc": "2.0",
            "method": "notifications/tools/list_changed",
            "params": {"_meta": {SUB_ID: "listen-1"}},
        }
    finally:
        listener.kill()  # the curl started above, by its PID
        listener.wait(5)
        for stream in (listener.stdout, listener.stderr):
            if stream is not None:
                stream.close()


def test_the_test_your_catalog_example_passes(tmp_path: Path) -> None:
    section = TEXTS["docs/getting-started.md"].split("## Test your catalog", 1)[1]
    example = re.search(r"^```python\n(.*?)^```", section, flags=re.DOTALL | re.MULTILINE)
    assert example is not None
    (tmp_path / "test_my_server.py").write_text(example.group(1))
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_my_server.py"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "2 passed" in done.stdout


# -- the python examples ----------------------------------------------------------------------

FILE_NAME = re.compile(r"^# (\w+\.py)\b")


def python_examples() -> list[tuple[str, str, str]]:
    """(page, file name, source) of every python block; unnamed blocks get a name of their own."""
    examples = []
    for number, (page, block) in enumerate(blocks("python")):
        named = FILE_NAME.match(block)
        stem = Path(page).stem.replace("-", "_").lower()
        name = named.group(1) if named else f"example_{stem}_{number}.py"
        examples.append((page, name, block))
    return examples


PYTHON_EXAMPLES = python_examples()


def test_every_python_example_has_a_file_name_of_its_own() -> None:
    names = [name for _, name, _ in PYTHON_EXAMPLES]
    assert len(names) == len(set(names)), names
    # The pages that teach the API show it in code: each of them has at least one example.
    pages = {page for page, _, _ in PYTHON_EXAMPLES}
    assert {"README.md", "docs/getting-started.md", "docs/reference.md"} <= pages
    assert {"docs/extensions.md", "docs/deployment.md"} <= pages


@pytest.fixture(scope="module")
def examples_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Every python example as a file, and the probe's skills as ``skills/``."""
    folder = tmp_path_factory.mktemp("examples")
    shutil.copytree(ROOT / "server" / "builtin" / "skills" / "probe", folder / "skills")
    for _, name, source in PYTHON_EXAMPLES:
        (folder / name).write_text(source, encoding="utf-8")
    return folder


# Clients of a running server: run against one by their own tests.
CLIENT_EXAMPLES = {"sdk_client.py"}


@pytest.mark.parametrize(
    ("page", "name"),
    [
        (page, name)
        for page, name, _ in PYTHON_EXAMPLES
        if not name.startswith("test_") and name not in CLIENT_EXAMPLES
    ],
    ids=lambda value: value,
)
def test_python_example_runs(page: str, name: str, examples_folder: Path) -> None:
    env = {key: value for key, value in os.environ.items() if not key.startswith("MCP_")}
    env.update(PYTHONPATH=os.pathsep.join([str(ROOT), str(examples_folder)]), MCP_RECORDS="none")
    done = subprocess.run(
        [sys.executable, name],
        cwd=examples_folder,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env=env,
    )
    assert done.returncode == 0, f"{page}: {name}\n{done.stdout}{done.stderr}"


def test_the_readme_tool_answers_as_the_readme_says(examples_folder: Path) -> None:
    # "the answer is structuredContent plus the same JSON as text, in both eras"
    spec = importlib.util.spec_from_file_location("weather", examples_folder / "weather.py")
    assert spec is not None
    assert spec.loader is not None
    weather = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(weather)

    async def call(
        era: Literal["modern", "legacy"],
    ) -> tuple[dict[str, Any], list[dict[str, Any]]]:
        async with Client(weather.catalog, era=era, log_level="info") as client:
            result = await client.call_tool("forecast", {"city": "Oslo"})
            return result, client.notifications

    eras: tuple[Literal["modern", "legacy"], ...] = ("modern", "legacy")
    for era in eras:
        result, notes = asyncio.run(call(era))
        assert result["structuredContent"] == {"celsius": 21.5}
        (text,) = result["content"]
        assert json.loads(text["text"]) == {"celsius": 21.5}
        assert [note["params"]["data"] for note in notes] == ["looking up Oslo"]


def test_the_sdk_client_example_connects_with_a_token(examples_folder: Path) -> None:
    """getting-started's "Connect an agent": the official SDK client, with the page's token
    and the my_server catalog served as the page serves it, prints what the page shows."""
    section = TEXTS["docs/getting-started.md"].split("## Connect an agent", 1)[1]
    token = re.search(r"^export TOKEN=(\S+)$", section.replace("$ ", ""), re.MULTILINE)
    digest = re.search(r"^(sha256:[0-9a-f]{64})$", section, re.MULTILINE)
    shown = re.search(r"TOKEN=\.\.\. python sdk_client\.py\n(.*?)^```", section, re.DOTALL | re.M)
    assert token is not None
    assert digest is not None
    assert shown is not None
    port = free_port()
    env = {key: value for key, value in os.environ.items() if not key.startswith("MCP_")}
    env.update(PYTHONPATH=os.pathsep.join([str(ROOT), str(examples_folder)]), MCP_RECORDS="none")
    served = {**env, "MCP_PORT": str(port), "MCP_AUTH": "tokens", "MCP_AUTH_TOKENS": digest[1]}
    command = [sys.executable, "-m", "server", "serve", "--catalog", "my_server:catalog"]
    process = subprocess.Popen(
        command, cwd=examples_folder, env=served, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    try:
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 15
        while True:
            assert process.poll() is None, "the server did not start"
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"{url}/healthz", timeout=1).status_code == 200:
                    break
            assert time.monotonic() < deadline, "the server did not become ready"
            time.sleep(0.05)
        done = subprocess.run(
            [sys.executable, "sdk_client.py"],
            cwd=examples_folder,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
            env={**env, "MCP_URL": f"{url}/mcp", "TOKEN": token[1]},
        )
        refused = httpx.post(f"{url}/mcp", json={}, timeout=5)
    finally:
        stop_process(process, grace_s=5)
        if process.stderr is not None:
            process.stderr.close()
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout == shown[1]
    # Without the header: 401, and the answer says what to send.
    assert refused.status_code == 401
    assert "Authorization: Bearer <token>" in refused.json()["error"]["message"]
