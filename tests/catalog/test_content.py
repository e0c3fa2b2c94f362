"""server.catalog.content: the wire shape of each content helper."""

import base64
import subprocess
import sys

import pytest

from server.catalog.content import (
    Audio,
    BlobContents,
    Completion,
    EmbeddedResource,
    Icon,
    Image,
    PromptMessage,
    ResourceLink,
    Text,
    TextContents,
    ToolResult,
    assistant,
    user,
)


def test_text_with_annotations_and_meta():
    assert Text("hi").to_wire() == {"type": "text", "text": "hi"}
    assert Text("hi", {"priority": 1}, {"k": "v"}).to_wire() == {
        "type": "text",
        "text": "hi",
        "annotations": {"priority": 1},
        "_meta": {"k": "v"},
    }


@pytest.mark.parametrize(("cls", "kind"), [(Image, "image"), (Audio, "audio")])
def test_binary_blocks_base64_bytes_and_keep_strings(cls, kind):
    raw = b"\x00\x01\xff"
    encoded = base64.b64encode(raw).decode()
    assert cls(raw, "x/y").to_wire() == {"type": kind, "data": encoded, "mimeType": "x/y"}
    assert cls(encoded, "x/y").to_wire()["data"] == encoded


def test_resource_contents():
    assert TextContents("x://a", "t").to_wire() == {"uri": "x://a", "text": "t"}
    assert TextContents("x://a", "t", "text/plain", {"m": 1}).to_wire() == {
        "uri": "x://a",
        "text": "t",
        "mimeType": "text/plain",
        "_meta": {"m": 1},
    }
    assert BlobContents("x://b", b"\x01", "a/b").to_wire() == {
        "uri": "x://b",
        "blob": "AQ==",
        "mimeType": "a/b",
    }


def test_embedded_resource_and_link():
    embedded = EmbeddedResource(TextContents("x://a", "t"), {"audience": ["user"]})
    assert embedded.to_wire() == {
        "type": "resource",
        "resource": {"uri": "x://a", "text": "t"},
        "annotations": {"audience": ["user"]},
    }
    assert ResourceLink("x://a", "a").to_wire() == {
        "type": "resource_link",
        "uri": "x://a",
        "name": "a",
    }
    assert ResourceLink("x://a", "a", "A", "desc", "text/plain", 0).to_wire() == {
        "type": "resource_link",
        "uri": "x://a",
        "name": "a",
        "title": "A",
        "description": "desc",
        "mimeType": "text/plain",
        "size": 0,
    }


def test_icon():
    assert Icon("https://i").to_wire() == {"src": "https://i"}
    assert Icon("https://i", "image/png", ["48x48"], "dark").to_wire() == {
        "src": "https://i",
        "mimeType": "image/png",
        "sizes": ["48x48"],
        "theme": "dark",
    }


def test_tool_result():
    assert ToolResult().to_wire() == {"content": []}
    assert ToolResult([Text("a")], structured=0).to_wire() == {
        "content": [{"type": "text", "text": "a"}],
        "structuredContent": 0,
    }
    assert ToolResult(is_error=True).to_wire() == {"content": [], "isError": True}


def test_prompt_messages():
    assert user("hi") == PromptMessage("user", Text("hi"))
    assert assistant(Image(b"1", "image/png")).role == "assistant"
    assert user("x").to_wire() == {"role": "user", "content": {"type": "text", "text": "x"}}


def test_completion_caps_values_at_100_and_says_so():
    many = [str(i) for i in range(150)]
    assert Completion(many).to_wire() == {"values": many[:100], "total": 150, "hasMore": True}
    assert Completion(["a"]).to_wire() == {"values": ["a"]}
    assert Completion(["a"], total=5, has_more=True).to_wire() == {
        "values": ["a"],
        "total": 5,
        "hasMore": True,
    }
    assert Completion(many, has_more=False).to_wire()["hasMore"] is False


def test_importing_the_content_helpers_loads_no_web_stack() -> None:
    # An author's helpers (and the catalog they come with) are plain Python: no starlette.
    script = (
        "import sys\n"
        "import server.catalog.content\n"
        "loaded = sorted(name for name in sys.modules"
        " if name.split('.')[0] in ('starlette', 'uvicorn', 'httpx'))\n"
        "assert not loaded, loaded\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], check=False, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
