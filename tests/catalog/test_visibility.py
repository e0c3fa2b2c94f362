"""MCP_SCOPED_ITEMS, an item's ``visibility`` and the catalog's rule: what each caller is
listed and how a hidden item answers, in both eras, over the ASGI app (two named tokens with
different scopes), and a property over random catalogs with the cached pages shared."""

from __future__ import annotations

import hashlib
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from server import Catalog, create_app
from server.catalog.visibility import LIST_KEYS, Views, Visibility
from server.dispatch import LIST_METHODS, Dispatcher
from server.pagination import EncodedResults, Pager
from server.sealing import Sealer
from server.security.auth import Principal
from server.settings import Settings
from tests.support.app import serve
from tests.support.live_server import ServerThread
from tests.support.mcp_client import SSE, LegacySession, legacy, modern, modern_headers

pytestmark = pytest.mark.anyio

ALICE, BOB = "alice-token-0123456789", "bob-token-0123456789"


def digest(token: str) -> str:
    return "sha256:" + hashlib.sha256(token.encode()).hexdigest()


TOKENS = [
    f"{digest(ALICE)};name=alice;tenant=acme;scopes=mcp:read mcp:write",
    f"{digest(BOB)};name=bob;tenant=globex;scopes=mcp:read",
]


def catalog_of(*, without: str = "", rule: bool = True) -> Catalog:
    """Tools in an order that puts hidden ones between visible ones, across pages of 2."""
    catalog = Catalog("views", "1.0.0")
    declared: list[tuple[str, tuple[str, ...], Visibility | None]] = [
        ("open_a", (), None),
        ("write_a", ("mcp:write",), None),
        ("read_a", ("mcp:read",), None),
        ("write_b", ("mcp:write",), None),
        ("admin", ("admin",), "listed"),  # listed to everyone whatever the setting
        ("open_b", (), None),
    ]
    for name, scopes, visibility in declared:
        if name != without:

            def tool(count: int) -> str:
                return "ok"

            catalog.tool(tool, name=name, scopes=scopes, visibility=visibility)

    @catalog.prompt(name="open_prompt")  # so prompts and completions stay served
    def open_prompt(style: str) -> str:
        return style

    catalog.completion(prompt="open_prompt", argument="style")(lambda v, a: ["warm"])

    @catalog.resource("open://readme")  # so resources stay served
    def readme() -> str:
        return "read me"

    if without != "acme_prompt":

        @catalog.prompt(name="acme_prompt")
        def acme_prompt(style: str) -> str:
            return style

        catalog.completion(prompt="acme_prompt", argument="style")(lambda v, a: ["warm"])
    if without != "acme://{x}":

        @catalog.resource_template("acme://{x}", visibility="hidden")
        def acme(x: str) -> str:
            return x

        catalog.completion(template="acme://{x}", argument="x")(lambda v, a: ["one"])
    if rule:
        # acme's items are acme's: prompts and templates named so are hidden from others.
        catalog.set_visibility_rule(
            lambda caller, item: (
                caller.tenant == "acme"
                or "acme" not in getattr(item, "name", str(getattr(item, "template", "")))
            )
        )
    return catalog


@asynccontextmanager
async def client_of(catalog: Catalog, **options: Any) -> AsyncIterator[httpx.AsyncClient]:
    # cache_scope public: under auth it would be private anyway, and the view's own private
    # is what these tests look at.
    fields: dict[str, Any] = {
        "auth": "tokens",
        "auth_tokens": TOKENS,
        "page_size": 2,
        "cache_scope": "public",
    }
    async with serve(catalog, **{**fields, **options}) as (client, _):
        yield client


async def modern_post(
    client: httpx.AsyncClient, token: str, method: str, params: dict[str, Any]
) -> httpx.Response:
    message = modern(method, params)
    headers = {**modern_headers(message), "Authorization": f"Bearer {token}"}
    return await client.post("/mcp", content=orjson.dumps(message), headers=headers)


async def legacy_of(client: httpx.AsyncClient, token: str) -> Any:
    """A legacy session of one token, as ``pages`` posts: ``post(method, params)``."""
    session = await LegacySession(client, headers={"Authorization": f"Bearer {token}"}).initialize()
    return lambda method, params: session.post(legacy(method, params, session.next_id()))


async def pages(post: Any, method: str = "tools/list") -> list[dict[str, Any]]:
    """Every page of a list, following its cursors."""
    found, cursor = [], None
    while True:
        answer = await post(method, {"cursor": cursor} if cursor else {})
        assert answer.status_code == 200, answer.text
        result = answer.json()["result"]
        found.append(result)
        cursor = result.get("nextCursor")
        if cursor is None:
            return found


def names(listed: list[dict[str, Any]], key: str = "tools", field: str = "name") -> list[str]:
    return [item[field] for page in listed for item in page[key]]


ALICE_SEES = ["open_a", "write_a", "read_a", "write_b", "admin", "open_b"]
BOB_SEES = ["open_a", "read_a", "admin", "open_b"]


async def test_two_tokens_are_listed_what_they_may_use_in_both_eras_across_pages() -> None:
    catalog = catalog_of()
    async with client_of(catalog, scoped_items="hidden") as client:

        def modern_of(token: str) -> Any:
            return lambda method, params: modern_post(client, token, method, params)

        alice_legacy = await legacy_of(client, ALICE)
        bob_legacy = await legacy_of(client, BOB)
        for _ in range(2):  # the second time from the cached bytes, warmed by both
            for who, sees in ((ALICE, ALICE_SEES), (BOB, BOB_SEES)):
                listed = await pages(modern_of(who))
                assert names(listed) == sees
                assert all(page["cacheScope"] == "private" for page in listed)
            assert names(await pages(alice_legacy)) == ALICE_SEES
            assert names(await pages(bob_legacy)) == BOB_SEES
        # acme's template is acme's alone; every template page is private.
        alice_templates = await pages(modern_of(ALICE), "resources/templates/list")
        bob_templates = await pages(modern_of(BOB), "resources/templates/list")
        assert names(alice_templates, "resourceTemplates", "uriTemplate") == ["acme://{x}"]
        assert names(bob_templates, "resourceTemplates", "uriTemplate") == []
        bob_prompts = await pages(bob_legacy, "prompts/list")
        assert names(bob_prompts, "prompts") == ["open_prompt"]
        alice_prompts = await pages(alice_legacy, "prompts/list")
        assert names(alice_prompts, "prompts") == ["open_prompt", "acme_prompt"]

        # A cursor is the caller's: another view cannot follow it.
        first = (await modern_post(client, ALICE, "tools/list", {})).json()["result"]
        refused = await modern_post(client, BOB, "tools/list", {"cursor": first["nextCursor"]})
        assert refused.json()["error"]["message"] == "Invalid cursor"

        # A list change: each sees it only as its view says, from freshly cached pages.
        catalog.tool(lambda: "x", name="write_c", scopes=["mcp:write"])
        catalog.tool(lambda: "x", name="open_c")
        assert names(await pages(modern_of(ALICE))) == [*ALICE_SEES, "write_c", "open_c"]
        assert names(await pages(modern_of(BOB))) == [*BOB_SEES, "open_c"]
        assert names(await pages(bob_legacy)) == [*BOB_SEES, "open_c"]
        assert names(await pages(alice_legacy)) == [*ALICE_SEES, "write_c", "open_c"]


async def test_the_default_lists_everything_to_everyone() -> None:
    async with client_of(catalog_of(rule=False)) as client:
        for who in (ALICE, BOB):
            listed = await pages(lambda m, p, who=who: modern_post(client, who, m, p))
            assert names(listed) == ALICE_SEES
            assert all(page["cacheScope"] == "public" for page in listed)


# Each: the method, its params, and what a server without the item would be missing.
HIDDEN_ASKS = [
    ("tools/call", {"name": "write_a", "arguments": {"count": 1}}, "write_a"),
    ("tools/call", {"name": "write_a", "arguments": {"count": "no"}}, "write_a"),  # schema
    ("prompts/get", {"name": "acme_prompt", "arguments": {"style": "x"}}, "acme_prompt"),
    (
        "completion/complete",
        {
            "ref": {"type": "ref/prompt", "name": "acme_prompt"},
            "argument": {"name": "style", "value": "w"},
        },
        "acme_prompt",
    ),
    (
        "completion/complete",
        {
            "ref": {"type": "ref/resource", "uri": "acme://{x}"},
            "argument": {"name": "x", "value": ""},
        },
        "acme://{x}",
    ),
    ("resources/read", {"uri": "acme://one"}, "acme://{x}"),
]


@pytest.mark.parametrize(("method", "params", "missing"), HIDDEN_ASKS)
async def test_a_hidden_item_answers_byte_for_byte_as_one_never_declared(
    method: str, params: dict[str, Any], missing: str
) -> None:
    answers: list[tuple[int, bytes, bytes, int, bytes]] = []
    for first, catalog in ((True, catalog_of()), (False, catalog_of(without=missing))):
        async with client_of(catalog, scoped_items="hidden") as client:
            modern_answer = await modern_post(client, BOB, method, params)
            legacy_answer = await (await legacy_of(client, BOB))(method, params)
            answers.append(
                (
                    modern_answer.status_code,
                    modern_answer.content,
                    modern_answer.headers.get("www-authenticate", "").encode(),
                    legacy_answer.status_code,
                    legacy_answer.content,
                )
            )
            if first:  # Alice may use it: she gets no such answer (the item is there for her)
                assert (await modern_post(client, ALICE, method, params)).content != answers[-1][1]
    hidden, unknown = answers
    assert hidden == unknown
    assert b"error" in hidden[1]


async def test_with_the_default_a_call_without_the_scope_is_the_step_up_403() -> None:
    async with client_of(catalog_of()) as client:
        answer = await modern_post(
            client, BOB, "tools/call", {"name": "write_a", "arguments": {"count": 1}}
        )
        assert answer.status_code == 403
        assert answer.headers["www-authenticate"] == (
            'Bearer error="insufficient_scope", scope="mcp:write"'
        )
        assert answer.json()["error"] == {
            "code": -32001,
            "message": "Insufficient scope: missing mcp:write",
            "data": {"error": "insufficient_scope", "scope": "mcp:write"},
        }
        legacy_answer = await (await legacy_of(client, BOB))(
            "tools/call", {"name": "write_a", "arguments": {"count": 1}}
        )
        assert legacy_answer.status_code == 403
        assert legacy_answer.json()["error"] == answer.json()["error"]


# -- the property -----------------------------------------------------------------------------

SCOPES = ["a", "b", "c"]
scope_sets = st.frozensets(st.sampled_from(SCOPES), max_size=3)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    tools=st.lists(
        st.tuples(scope_sets, st.sampled_from([None, "hidden", "listed"]), st.booleans()),
        min_size=0,
        max_size=12,
    ),
    default=st.sampled_from(["listed", "hidden"]),
    callers=st.lists(st.tuples(scope_sets, st.sampled_from(["t1", "t2"])), min_size=1, max_size=4),
    page_size=st.integers(1, 4),
    order=st.lists(st.integers(0, 3), min_size=1, max_size=12),
    use_rule=st.booleans(),
)
def test_no_page_ever_holds_an_item_the_callers_view_hides(
    tools: list[tuple[frozenset[str], Visibility | None, bool]],
    default: Any,
    callers: list[tuple[frozenset[str], str]],
    page_size: int,
    order: list[int],
    use_rule: bool,
) -> None:
    catalog = Catalog()
    tenant_only: dict[str, bool] = {}
    for index, (scopes, visibility, t1_only) in enumerate(tools):
        catalog.tool(lambda: "x", name=f"t{index}", scopes=sorted(scopes), visibility=visibility)
        tenant_only[f"t{index}"] = t1_only
    if use_rule:
        catalog.set_visibility_rule(
            lambda caller, item: caller.tenant == "t1" or not tenant_only[item.name]
        )
    views = Views(catalog, default)
    dispatcher = Dispatcher(catalog, Pager(Sealer(b"p" * 32), page_size), views=views)
    cache = EncodedResults(catalog)  # one cache for every caller, as each era keeps one

    def may_see(caller: Principal, name: str) -> bool:
        tool = catalog.tools[name]
        if (tool.visibility or default) == "listed":
            return True
        if not set(tool.scopes) <= caller.scopes:
            return False
        return not (use_rule and tenant_only[name] and caller.tenant != "t1")

    principals = [
        Principal(f"caller{i}", scopes, tenant=tenant) for i, (scopes, tenant) in enumerate(callers)
    ]
    for step, pick in enumerate(order):
        caller = principals[pick % len(principals)]
        if step == len(order) // 2 and tools:
            catalog.remove_tool("t0")  # a list change midway
        view = views.view(caller)
        seen, cursor = [], None
        while True:
            page = orjson.loads(
                orjson.dumps(dispatcher.cached_page("tools/list", cursor, cache, view=view))
            )
            for tool in page["tools"]:
                assert may_see(caller, tool["name"]), (caller, tool["name"])
            seen += [tool["name"] for tool in page["tools"]]
            cursor = page.get("nextCursor")
            if cursor is None:
                break
        assert seen == [name for name in catalog.tools if may_see(caller, name)]


KINDS = ("tool", "prompt", "resource", "template")


def declare(catalog: Catalog, kind: str, index: int, scopes: list[str], visibility: Any) -> Any:
    """One item of ``kind`` with these scopes; returns it and the name its list shows."""
    if kind == "tool":
        catalog.tool(lambda: "x", name=f"t{index}", scopes=scopes, visibility=visibility)
        return catalog.tools[f"t{index}"], f"t{index}"
    if kind == "prompt":
        catalog.prompt(lambda: "x", name=f"p{index}", scopes=scopes, visibility=visibility)
        return catalog.prompts[f"p{index}"], f"p{index}"
    if kind == "resource":
        uri = f"res://r{index}"
        catalog.resource(uri, scopes=scopes, visibility=visibility)(lambda: "x")
        return catalog.resources[uri], uri
    uri = f"tpl{index}://{{x}}"

    def read(x: str) -> str:
        return x

    catalog.resource_template(uri, scopes=scopes, visibility=visibility)(read)
    return catalog.templates[uri], uri


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    items=st.lists(
        st.tuples(
            st.sampled_from(KINDS),
            scope_sets,
            st.sampled_from([None, "hidden", "listed"]),
            st.booleans(),
        ),
        min_size=0,
        max_size=12,
    ),
    default=st.sampled_from(["listed", "hidden"]),
    callers=st.lists(st.tuples(scope_sets, st.sampled_from(["t1", "t2"])), min_size=1, max_size=4),
    page_size=st.integers(1, 4),
    order=st.lists(st.integers(0, 3), min_size=1, max_size=8),
    use_rule=st.booleans(),
)
def test_no_page_of_any_list_holds_an_item_the_callers_scopes_or_rule_hide(
    items: list[tuple[str, frozenset[str], Visibility | None, bool]],
    default: Any,
    callers: list[tuple[frozenset[str], str]],
    page_size: int,
    order: list[int],
    use_rule: bool,
) -> None:
    """Prompts, resources and templates with scopes as tools: every list of every caller,
    from one shared page cache, with a list change midway."""
    catalog = Catalog()
    declared: dict[str, tuple[Any, bool]] = {}  # listed name -> (item, tenant t1's only)
    for index, (kind, scopes, visibility, t1_only) in enumerate(items):
        item, name = declare(catalog, kind, index, sorted(scopes), visibility)
        declared[name] = (item, t1_only)
    by_id = {id(item): t1_only for item, t1_only in declared.values()}
    if use_rule:
        catalog.set_visibility_rule(
            lambda caller, item: caller.tenant == "t1" or not by_id[id(item)]
        )
    views = Views(catalog, default)
    dispatcher = Dispatcher(catalog, Pager(Sealer(b"p" * 32), page_size), views=views)
    cache = EncodedResults(catalog)

    def may_see(caller: Principal, name: str) -> bool:
        item, t1_only = declared[name]
        if (item.visibility or default) == "listed":
            return True
        if not set(item.scopes) <= caller.scopes:
            return False
        return not (use_rule and t1_only and caller.tenant != "t1")

    principals = [
        Principal(f"caller{i}", scopes, tenant=tenant) for i, (scopes, tenant) in enumerate(callers)
    ]
    for step, pick in enumerate(order):
        caller = principals[pick % len(principals)]
        if step == len(order) // 2 and "p0" in catalog.prompts:
            catalog.remove_prompt("p0")  # a list change midway
            del declared["p0"]
        view = views.view(caller)
        for method, (field, key) in LIST_METHODS.items():
            if not dispatcher.serves(method):
                continue
            seen, cursor = [], None
            while True:
                page = orjson.loads(
                    orjson.dumps(dispatcher.cached_page(method, cursor, cache, view=view))
                )
                seen += [entry[LIST_KEYS[field]] for entry in page[key]]
                cursor = page.get("nextCursor")
                if cursor is None:
                    break
            assert all(may_see(caller, name) for name in seen), (caller, method, seen)
            everything = [d[LIST_KEYS[field]] for d in getattr(catalog.snapshot, field)]
            assert seen == [name for name in everything if may_see(caller, name)]


# -- notifications ----------------------------------------------------------------------------


def test_a_stream_is_told_only_of_changes_to_what_its_caller_sees() -> None:
    from server.catalog import Change

    catalog = catalog_of()
    views = Views(catalog, "hidden")
    alice = Principal("alice", frozenset({"mcp:read", "mcp:write"}), tenant="acme")
    bob = Principal("bob", frozenset({"mcp:read"}), tenant="globex")
    watches = {"alice": views.watch(alice), "bob": views.watch(bob)}

    def told(change: Change) -> dict[str, bool]:
        return {who: watch(change) for who, watch in watches.items()}

    catalog.tool(lambda: "x", name="write_c", scopes=["mcp:write"])
    assert told(Change("tools")) == {"alice": True, "bob": False}
    catalog.tool(lambda: "x", name="open_c")
    assert told(Change("tools")) == {"alice": True, "bob": True}
    assert told(Change("tools")) == {"alice": False, "bob": False}  # nothing new since
    catalog.remove_tool("write_c")
    assert told(Change("tools")) == {"alice": True, "bob": False}
    # A resource update: not for those it is hidden from; an unknown URI goes to all.
    assert told(Change("resource_updated", "acme://one")) == {"alice": True, "bob": False}
    assert told(Change("resource_updated", "open://readme")) == {"alice": True, "bob": True}
    assert told(Change("resource_updated", "else://x")) == {"alice": True, "bob": True}


async def test_a_listen_stream_over_uvicorn_hears_only_of_its_own_view_changing() -> None:
    catalog = catalog_of()

    @catalog.tool
    def grow(kind: str) -> str:
        scopes = ["mcp:write"] if kind == "write" else []
        catalog.tool(lambda: "x", name=f"{kind}_c", scopes=scopes)
        return "grown"

    @catalog.tool
    def touch() -> str:  # a marker every listener hears, in order with what came before
        catalog.notify_resource_updated("open://readme")
        return "touched"

    settings = Settings(
        _env_file=None, auth="tokens", auth_tokens=TOKENS, scoped_items="hidden", keepalive_s=0.2
    )
    running = ServerThread(create_app(settings, catalog), graceful_timeout=2, check_health=True)
    running.start()
    wanted = {"toolsListChanged": True, "resourceSubscriptions": ["open://readme"]}
    try:
        async with httpx.AsyncClient(base_url=running.url, timeout=5) as client:

            async def call(name: str, **arguments: str) -> None:
                params = {"name": name, "arguments": arguments}
                answer = await modern_post(client, ALICE, "tools/call", params)
                assert answer.status_code == 200, answer.text

            @asynccontextmanager
            async def listening(token: str) -> AsyncIterator[SSE]:
                message = modern("subscriptions/listen", {"notifications": wanted})
                headers = {**modern_headers(message), "Authorization": f"Bearer {token}"}
                body = orjson.dumps(message)
                async with client.stream("POST", "/mcp", content=body, headers=headers) as answer:
                    assert answer.status_code == 200
                    events = SSE(answer)
                    assert await events.next() is not None  # the acknowledgement
                    yield events

            async def heard(events: SSE) -> str:
                told = await events.next()
                assert told is not None
                return str(told["method"])

            async with listening(ALICE) as alice, listening(BOB) as bob:
                await call("grow", kind="write")  # only alice's view changes
                await call("touch")
                assert await heard(alice) == "notifications/tools/list_changed"
                assert await heard(alice) == "notifications/resources/updated"
                assert await heard(bob) == "notifications/resources/updated"  # nothing before
                await call("grow", kind="open")  # both views change
                assert await heard(bob) == "notifications/tools/list_changed"
                assert await heard(alice) == "notifications/tools/list_changed"
    finally:
        running.stop()


async def test_the_mcp_paths_fallback_to_http_sse_streams_for_its_caller() -> None:
    """A GET on the MCP path that falls back to the 2024-11-05 transport follows the stream
    with its caller, so what is hidden from the caller is not told on it."""
    callers: list[Any] = []

    async def stream(scope: Any, receive: Any, send: Any, draft: Any, principal: Any) -> None:
        callers.append(principal)
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b""})

    async with serve(
        catalog_of(), auth="tokens", auth_tokens=TOKENS, scoped_items="hidden", cache_scope="public"
    ) as (client, app):
        assert app.sse is not None
        app.sse.stream = stream  # type: ignore[method-assign]
        headers = {"Accept": "text/event-stream", "Authorization": f"Bearer {BOB}"}
        assert (await client.get("/mcp", headers=headers)).status_code == 200
    assert [caller.subject for caller in callers] == ["bob"]


# -- scopes on prompts, resources and templates --------------------------------------------

WRITE_CHALLENGE = 'Bearer error="insufficient_scope", scope="mcp:write"'


def items_catalog(without: str = "") -> Catalog:
    """A prompt, a resource and a template that need ``mcp:write`` (Bob lacks it), each with
    an open twin so the methods stay served."""
    catalog = Catalog("items", "1.0.0")

    @catalog.prompt(name="open_prompt")
    def open_prompt(style: str) -> str:
        return style

    @catalog.resource("open://readme")
    def readme() -> str:
        return "read me"

    if without != "write_prompt":

        @catalog.prompt(name="write_prompt", scopes=["mcp:write"])
        def write_prompt(style: str) -> str:
            return style

        catalog.completion(prompt="write_prompt", argument="style")(lambda v, a: ["warm"])
    if without != "secret://fixed":

        @catalog.resource("secret://fixed", scopes=["mcp:write"])
        def secret() -> str:
            return "secret"

    if without != "notes://{x}":

        @catalog.resource_template("notes://{x}", scopes=["mcp:write"])
        def notes(x: str) -> str:
            return x

        catalog.completion(template="notes://{x}", argument="x")(lambda v, a: ["one"])
    return catalog


# Each: the method, its params, and the item a catalog without it would be missing.
SCOPED_ASKS = [
    ("prompts/get", {"name": "write_prompt", "arguments": {"style": "x"}}, "write_prompt"),
    (
        "completion/complete",
        {
            "ref": {"type": "ref/prompt", "name": "write_prompt"},
            "argument": {"name": "style", "value": "w"},
        },
        "write_prompt",
    ),
    (
        "completion/complete",
        {
            "ref": {"type": "ref/resource", "uri": "notes://{x}"},
            "argument": {"name": "x", "value": ""},
        },
        "notes://{x}",
    ),
    ("resources/read", {"uri": "secret://fixed"}, "secret://fixed"),
    ("resources/read", {"uri": "notes://one"}, "notes://{x}"),  # a URI the template matches
    ("resources/subscribe", {"uri": "secret://fixed"}, "secret://fixed"),  # legacy only
]


@pytest.mark.parametrize(("method", "params", "missing"), SCOPED_ASKS)
async def test_listed_items_need_their_scopes_the_step_up_403_in_both_eras(
    method: str, params: dict[str, Any], missing: str
) -> None:
    async with client_of(items_catalog()) as client:
        answers = []
        if method != "resources/subscribe":
            answers.append(await modern_post(client, BOB, method, params))
            assert (await modern_post(client, ALICE, method, params)).status_code == 200
        answers.append(await (await legacy_of(client, BOB))(method, params))
        alice = await (await legacy_of(client, ALICE))(method, params)
        assert alice.status_code == 200, alice.text
        assert "error" not in alice.json()
        for answer in answers:
            assert answer.status_code == 403, answer.text
            assert answer.headers["www-authenticate"] == WRITE_CHALLENGE
            assert answer.json()["error"]["data"] == {
                "error": "insufficient_scope",
                "scope": "mcp:write",
            }
        # Listed to everyone all the same: the client may ask for the scope.
        listed = await pages(lambda m, p: modern_post(client, BOB, m, p), "prompts/list")
        assert names(listed, "prompts") == ["open_prompt", "write_prompt"]


async def test_a_listen_naming_a_resource_without_its_scope_is_the_step_up_403() -> None:
    wanted = {"resourceSubscriptions": ["open://readme", "secret://fixed"]}
    async with client_of(items_catalog()) as client:
        answer = await modern_post(client, BOB, "subscriptions/listen", {"notifications": wanted})
        assert answer.status_code == 403, answer.text
        assert answer.headers["www-authenticate"] == WRITE_CHALLENGE
    # Hidden, the resource is an unknown URI: the stream opens, as for any URI.
    settings = Settings(_env_file=None, auth="tokens", auth_tokens=TOKENS, scoped_items="hidden")
    running = ServerThread(create_app(settings, items_catalog()), check_health=True)
    running.start()
    try:
        async with httpx.AsyncClient(base_url=running.url, timeout=5) as client:
            message = modern("subscriptions/listen", {"notifications": wanted})
            headers = {**modern_headers(message), "Authorization": f"Bearer {BOB}"}
            body = orjson.dumps(message)
            async with client.stream("POST", "/mcp", content=body, headers=headers) as opened:
                assert opened.status_code == 200
                assert await SSE(opened).next() is not None  # the acknowledgement
    finally:
        running.stop()


@pytest.mark.parametrize(("method", "params", "missing"), SCOPED_ASKS)
async def test_hidden_scoped_items_answer_byte_for_byte_as_ones_never_declared(
    method: str, params: dict[str, Any], missing: str
) -> None:
    answers: list[tuple[Any, ...]] = []
    for catalog in (items_catalog(), items_catalog(without=missing)):
        async with client_of(catalog, scoped_items="hidden") as client:
            seen: list[Any] = []
            if method != "resources/subscribe":
                modern_answer = await modern_post(client, BOB, method, params)
                seen += [modern_answer.status_code, modern_answer.content]
            legacy_answer = await (await legacy_of(client, BOB))(method, params)
            seen += [legacy_answer.status_code, legacy_answer.content]
            answers.append(tuple(seen))
    hidden, unknown = answers
    assert hidden == unknown
    assert 403 not in hidden


async def test_hidden_scoped_items_are_listed_only_to_callers_holding_their_scopes() -> None:
    async with client_of(items_catalog(), scoped_items="hidden") as client:
        for who, extra in ((ALICE, True), (BOB, False)):
            legacy_post = await legacy_of(client, who)
            for post in (lambda m, p, who=who: modern_post(client, who, m, p), legacy_post):
                prompts = names(await pages(post, "prompts/list"), "prompts")
                resources = names(await pages(post, "resources/list"), "resources", "uri")
                templates = await pages(post, "resources/templates/list")
                assert prompts == ["open_prompt", *(["write_prompt"] if extra else [])]
                assert resources == ["open://readme", *(["secret://fixed"] if extra else [])]
                uris = names(templates, "resourceTemplates", "uriTemplate")
                assert uris == (["notes://{x}"] if extra else [])


async def test_scopes_supported_lists_every_items_scopes_and_the_named_tokens() -> None:
    catalog = items_catalog()
    catalog.tool(lambda: "x", name="admin_tool", scopes=["admin"])
    async with client_of(catalog, auth_servers=["https://as.example"]) as client:
        answer = await client.get("/.well-known/oauth-protected-resource/mcp")
        assert answer.status_code == 200, answer.text
        # admin: a tool's; mcp:write: the prompt's, resource's and template's; mcp:read: the
        # named tokens' own (no item needs it).
        assert answer.json()["scopes_supported"] == ["admin", "mcp:read", "mcp:write"]
