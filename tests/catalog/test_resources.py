"""server.catalog.resources: fixed resources, templates, and resources/read contents."""

import base64

import pytest

from server.catalog import Catalog
from server.catalog.content import BlobContents, TextContents
from server.catalog.resources import Resource, ResourceTemplate, to_contents
from server.catalog.uritemplate import MAX_TEMPLATED_URI_CHARS
from server.context import Context
from server.dispatch import Dispatcher
from server.errors import ResourceNotFound
from server.pagination import Pager
from server.sealing import Sealer
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


def _file_catalog() -> Catalog:
    catalog = Catalog()

    @catalog.resource_template("file:///docs/{name}")
    def doc(name: str) -> str:
        return f"doc {name}"

    @catalog.resource_template("file:///tree/{+path}")
    def tree(path: str) -> str:
        return f"tree {path}"

    @catalog.resource_template("x://spot/{lat}")
    def spot(lat: float) -> str:
        return f"spot {lat}"

    return catalog


@pytest.mark.parametrize(
    "uri",
    [
        "file:///docs/..%2Fsecret",
        "file:///docs/%2e%2e",
        "file:///docs/..",
        "file:///docs/a%00b",
        "file:///docs/a/b",
        "file:///tree/../secret",
        "file:///tree/a/%2E%2E/%2E%2E/secret",
        "file:///tree/a%00",
    ],
)
async def test_a_variable_that_would_leave_its_place_names_no_resource(uri):
    # Answered exactly as an unknown resource: -32602 with data.uri (-32002 on the legacy
    # wire), and the handler never runs.
    catalog = _file_catalog()
    assert catalog.find_resource(uri) is None
    dispatcher = Dispatcher(catalog, Pager(Sealer(b"d" * 32), 10))
    params = {"uri": uri}
    target = dispatcher.resolve("resources/read", params)
    with pytest.raises(ResourceNotFound) as caught:
        await dispatcher.call(
            "resources/read", params, make_context(method="resources/read"), target
        )
    assert caught.value.to_wire("modern") == {
        "code": -32602,
        "message": f"Resource not found: {uri}",
        "data": {"uri": uri},
    }
    assert caught.value.to_wire("legacy")["code"] == -32002


@pytest.mark.parametrize(
    ("uri", "text"),
    [
        ("file:///docs/read%20me", "doc read me"),
        ("file:///docs/..hidden", "doc ..hidden"),
        ("file:///tree/a/b/c.txt", "tree a/b/c.txt"),
        ("file:///tree/a%2Fb", "tree a%2Fb"),
        ("x://spot/59.9", "spot 59.9"),
    ],
)
async def test_variables_below_the_prefix_are_served(uri, text):
    dispatcher = Dispatcher(_file_catalog(), Pager(Sealer(b"d" * 32), 10))
    params = {"uri": uri}
    target = dispatcher.resolve("resources/read", params)
    result = await dispatcher.call("resources/read", params, make_context(), target)
    assert result["contents"][0]["text"] == text


async def test_a_refused_value_falls_through_to_the_next_template():
    catalog = Catalog()
    catalog.resource_template("x://a/{name}")(lambda name: f"one {name}")
    catalog.resource_template("x://a/{+rest}")(lambda rest: f"many {rest}")
    found = catalog.find_resource("x://a/b%2Fc")
    assert found is not None
    assert isinstance(found[0], ResourceTemplate)
    assert found[0].template.template == "x://a/{+rest}"
    assert found[1] == {"rest": "b%2Fc"}


def test_a_uri_past_the_cap_names_no_template_but_may_name_a_resource():
    catalog = Catalog()
    catalog.resource_template("x://{+rest}")(lambda rest: rest)
    longest = "x://" + "a" * (MAX_TEMPLATED_URI_CHARS - len("x://"))
    catalog.resource(longest + "b")(lambda: "fixed")
    assert catalog.find_resource(longest) is not None
    assert catalog.find_resource(longest + "a") is None
    found = catalog.find_resource(longest + "b")
    assert found is not None
    assert found[0].definition["uri"] == longest + "b"


@pytest.mark.parametrize("lat", ["nan", "NaN", "inf", "-Infinity", "1e400"])
async def test_a_number_variable_is_finite(lat):
    def spot(lat: float) -> str:
        raise AssertionError("must not run")

    template = ResourceTemplate("x://spot/{lat}", spot)
    with pytest.raises(ResourceNotFound):
        await template.read(f"x://spot/{lat}", {"lat": lat}, make_context())


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
