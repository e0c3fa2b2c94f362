"""server.catalog.resources: fixed resources, templates, and resources/read contents."""

import base64

import pytest

from server.catalog.content import BlobContents, TextContents
from server.catalog.resources import Resource, ResourceTemplate, to_contents
from server.context import Context
from server.errors import ResourceNotFound
from tests.support.core_helpers import make_context

pytestmark = pytest.mark.anyio


def test_resource_definition():
    def readme() -> str:
        """The readme."""
        return "# hi"

    resource = Resource(
        "file:///readme.md",
        readme,
        title="Readme",
        mime_type="text/markdown",
        size=4,
        annotations={"audience": ["user"]},
        meta={"m": 1},
    )
    assert resource.definition == {
        "uri": "file:///readme.md",
        "name": "readme",
        "title": "Readme",
        "description": "The readme.",
        "mimeType": "text/markdown",
        "size": 4,
        "annotations": {"audience": ["user"]},
        "_meta": {"m": 1},
    }


def test_fixed_resource_takes_no_parameters_but_context():
    def needs(x: str) -> str:
        return x

    def fine(ctx: Context) -> str:
        return "ok"

    with pytest.raises(TypeError, match="no parameters"):
        Resource("x://a", needs)
    assert Resource("x://a", fine).context_param == "ctx"


async def test_read_text_gets_declared_or_default_mime_type():
    typed = Resource("x://a", lambda: "hello", mime_type="text/markdown")
    plain = Resource("x://b", lambda: "hello")
    assert await typed.read(make_context()) == [
        {"uri": "x://a", "text": "hello", "mimeType": "text/markdown"}
    ]
    assert (await plain.read(make_context()))[0]["mimeType"] == "text/plain"


async def test_read_bytes_is_base64_blob():
    async def logo() -> bytes:
        return b"\x89PNG"

    contents = await Resource("x://logo", logo).read(make_context())
    assert contents == [
        {
            "uri": "x://logo",
            "blob": base64.b64encode(b"\x89PNG").decode(),
            "mimeType": "application/octet-stream",
        }
    ]


def test_template_parameters_must_be_exactly_its_variables():
    def one(a: str) -> str:
        return a

    def two(a: str, b: str) -> str:
        return a + b

    with pytest.raises(TypeError, match="exactly the template variables"):
        ResourceTemplate("x://{a}/{b}", one)
    with pytest.raises(TypeError, match="exactly the template variables"):
        ResourceTemplate("x://{a}", two)
    template = ResourceTemplate("x://{a}/{b}", two, mime_type="text/plain")
    assert template.definition == {
        "uriTemplate": "x://{a}/{b}",
        "name": "two",
        "mimeType": "text/plain",
    }


async def test_template_read_converts_variables_by_type():
    def item(item_id: int) -> str:
        return f"item {item_id + 1}"

    template = ResourceTemplate("x://items/{item_id}", item)
    variables = template.match("x://items/41")
    assert variables == {"item_id": "41"}
    contents = await template.read("x://items/41", variables, make_context())
    assert contents == [{"uri": "x://items/41", "text": "item 42", "mimeType": "text/plain"}]


async def test_template_read_with_unconvertible_variable_is_not_found():
    def item(item_id: int) -> str:
        raise AssertionError("must not run")

    template = ResourceTemplate("x://items/{item_id}", item)
    with pytest.raises(ResourceNotFound) as caught:
        await template.read("x://items/abc", {"item_id": "abc"}, make_context())
    assert caught.value.data == {"uri": "x://items/abc"}


async def test_template_handler_gets_context():
    async def file(ctx: Context, path: str) -> str:
        return f"{ctx.method}:{path}"

    template = ResourceTemplate("file:///{+path}", file)
    contents = await template.read(
        "file:///a/b", {"path": "a/b"}, make_context(method="resources/read")
    )
    assert contents[0]["text"] == "resources/read:a/b"


def test_to_contents_shapes():
    assert to_contents("x://a", TextContents("x://other", "t"), None) == [
        TextContents("x://other", "t")
    ]
    assert to_contents("x://a", ["one", b"2"], "text/csv") == [
        TextContents("x://a", "one", "text/csv"),
        BlobContents("x://a", b"2", "text/csv"),
    ]
    assert to_contents("x://a", bytearray(b"z"), None) == [
        BlobContents("x://a", b"z", "application/octet-stream")
    ]
    assert to_contents("x://a", [], None) == []
    with pytest.raises(TypeError, match="x://a returned dict"):
        to_contents("x://a", {"a": 1}, None)
