"""Client-chosen data through the whole app: what ``initialize`` may declare, and what the records
keep of what clients say about themselves.

The app runs in process (``httpx.ASGITransport``) with its lifespan entered, as in
``test_over_http``: leaving it closes the Recorder, which writes everything queued, and the file
is read after that. ASGITransport passes headers of any size, so an 8 MiB ``User-Agent`` reaches
the endpoint here whatever limit the HTTP server in front may set.
"""

import json
from pathlib import Path
from typing import Any

import orjson
import pytest

from server.jsonrpc import MAX_DECLARED_BYTES
from server.records.schema import MAX_CLIENT_STRING
from tests.records.test_over_http import (
    CLIENT_INFO,
    JSON_AND_SSE,
    META,
    modern,
    post_modern,
    read_records,
    requests_of,
    serve_recording,
)
from tests.support.mcp_client import META_CAPABILITIES, legacy_headers

# Megabyte requests through the whole app: outside the inner loop (pytest -m 'not slow').
pytestmark = [pytest.mark.anyio, pytest.mark.slow]

LEGACY = "2025-11-25"
EIGHT_MIB = 8 * 1024 * 1024


def nested_capabilities(size: int) -> bytes:
    """About ``size`` bytes of capabilities: many small nested objects (the abuse bench's)."""
    count = max(1, size // len(b'"k0000000":{"v":[0]},'))
    parts = [b'"k%07d":{"v":[%d]}' % (number, number % 10) for number in range(count)]
    return b'{"experimental":{"abuse":{' + b",".join(parts) + b"}}}"


def initialize_body(
    capabilities: bytes, client_info: bytes = b'{"name":"c","version":"1"}'
) -> bytes:
    return (
        b'{"jsonrpc":"2.0","id":"init-1","method":"initialize","params":{"protocolVersion":"'
        + LEGACY.encode()
        + b'","capabilities":'
        + capabilities
        + b',"clientInfo":'
        + client_info
        + b"}}"
    )


LEGACY_HEADERS = {"Content-Type": "application/json", "Accept": JSON_AND_SSE}


async def test_a_3_7_mb_initialize_gets_a_clear_error_and_no_session(tmp_path: Path) -> None:
    path = tmp_path / "records.jsonl"
    capabilities = nested_capabilities(3_700_000)
    size = len(orjson.dumps(orjson.loads(capabilities)))
    assert size > 3_600_000
    async with serve_recording(path) as (client, app):
        response = await client.post(
            "/mcp", content=initialize_body(capabilities), headers=LEGACY_HEADERS
        )
        # As every bad params error of this era: -32602 on HTTP 200, the id echoed.
        assert response.status_code == 200
        assert "mcp-session-id" not in response.headers
        assert response.json() == {
            "jsonrpc": "2.0",
            "id": "init-1",
            "error": {
                "code": -32602,
                "message": f"initialize params.capabilities too large: {size:,} bytes, "
                f"at most {MAX_DECLARED_BYTES:,}",
            },
        }
        assert app.legacy.era.store.count() == 0
        # The same client, declaring what clients declare, gets its session.
        ordinary = await client.post(
            "/mcp", content=initialize_body(b'{"roots":{}}'), headers=LEGACY_HEADERS
        )
        assert ordinary.status_code == 200
        assert ordinary.headers["mcp-session-id"]
        assert app.legacy.era.store.count() == 1
    refused, accepted = read_records(path)
    assert refused["method"] == "initialize"
    assert refused["status"] == 200
    assert refused["session_id"] is None
    assert refused["error"] == response.json()["error"]
    # What the record keeps of the 3.7 MB: the body's size (past MAX_KEPT_BODY nothing of
    # the body is kept, not even to measure).
    marker = {"_truncated": True, "bytes": refused["bytes_in"]}
    assert refused["bytes_in"] > size
    assert refused["client"]["capabilities"] == marker
    assert refused["params"] == marker
    assert accepted["session_id"] == ordinary.headers["mcp-session-id"]
    assert accepted["client"]["capabilities"] == {"roots": {}}


async def test_an_oversized_client_info_gets_a_clear_error(tmp_path: Path) -> None:
    path = tmp_path / "records.jsonl"
    info = orjson.dumps({"name": "n" * MAX_DECLARED_BYTES, "version": "1"})
    async with serve_recording(path) as (client, app):
        response = await client.post(
            "/mcp", content=initialize_body(b"{}", info), headers=LEGACY_HEADERS
        )
        assert response.status_code == 200
        assert response.json()["error"] == {
            "code": -32602,
            "message": f"initialize params.clientInfo too large: {len(info):,} bytes, "
            f"at most {MAX_DECLARED_BYTES:,}",
        }
        assert app.legacy.era.store.count() == 0
    (record,) = read_records(path)
    assert record["error"]["code"] == -32602
    # The name is clipped in the record, with the marker.
    assert record["client"]["name"] == (
        "n" * MAX_CLIENT_STRING + f"…[truncated, {MAX_DECLARED_BYTES} chars]"
    )


async def test_a_session_does_not_put_its_capabilities_whole_into_every_record(
    tmp_path: Path,
) -> None:
    # Within what initialize accepts, past what a record keeps (MCP_RECORDS_PARAMS_MAX_BYTES):
    # every record of the session carries their size, not the 15 KB again.
    path = tmp_path / "records.jsonl"
    capabilities = nested_capabilities(15_000)
    size = len(orjson.dumps(orjson.loads(capabilities)))
    assert 2048 < size <= MAX_DECLARED_BYTES
    async with serve_recording(path) as (client, _):
        opened = await client.post(
            "/mcp", content=initialize_body(capabilities), headers=LEGACY_HEADERS
        )
        assert opened.status_code == 200
        session = opened.headers["mcp-session-id"]
        headers = legacy_headers(session, LEGACY, JSON_AND_SSE)
        for number in range(5):
            ping = {"jsonrpc": "2.0", "id": number, "method": "ping"}
            assert (await client.post("/mcp", json=ping, headers=headers)).status_code == 200
    records = requests_of(read_records(path))
    assert len(records) == 6
    for record in records:
        assert record["session_id"] == session
        assert record["client"]["capabilities"] == {"_truncated": True, "bytes": size}
    assert max(len(orjson.dumps(record)) for record in records[1:]) < 1500


async def test_a_modern_request_may_declare_more_than_a_session_and_its_record_is_capped(
    tmp_path: Path,
) -> None:
    # A modern request keeps nothing past its answer, and its body is bounded already: large
    # capabilities in _meta are served. The record keeps their size only.
    path = tmp_path / "records.jsonl"
    capabilities = orjson.loads(nested_capabilities(40_000))
    size = len(orjson.dumps(capabilities))
    message = modern("tools/list")
    message["params"]["_meta"] = {
        **META,
        META_CAPABILITIES: capabilities,
    }
    async with serve_recording(path) as (client, _):
        response = await post_modern(client, message, "big-declarer")
        assert response.status_code == 200
        assert "result" in response.json()
    (record,) = read_records(path)
    assert record["client"] == {
        **CLIENT_INFO,
        "capabilities": {"_truncated": True, "bytes": size},
    }


RAISED_LIMITS = {"max_header_bytes": 16 * 1024 * 1024, "max_header_value_bytes": EIGHT_MIB}


@pytest.mark.parametrize("limits", ["raised", "default"])
@pytest.mark.parametrize("era", ["modern", "legacy"])
async def test_an_8_mib_user_agent_is_clipped_in_the_record(
    tmp_path: Path, era: str, limits: str
) -> None:
    # Served when the header limits allow it, else refused with 431: one clipped record both ways.
    path = tmp_path / "records.jsonl"
    agent = "A" * EIGHT_MIB
    overrides: dict[str, Any] = RAISED_LIMITS if limits == "raised" else {}
    async with serve_recording(path, **overrides) as (client, _):
        if era == "modern":
            response = await post_modern(client, modern("tools/list"), agent)
        else:
            response = await client.post(
                "/mcp",
                content=initialize_body(b"{}"),
                headers={**LEGACY_HEADERS, "User-Agent": agent},
            )
        assert response.status_code == (200 if limits == "raised" else 431)
    (record,) = read_records(path)
    assert record["user_agent"] == "A" * MAX_CLIENT_STRING + f"…[truncated, {EIGHT_MIB} chars]"
    assert path.stat().st_size < 4096


async def test_client_chosen_body_strings_are_clipped_in_the_record(tmp_path: Path) -> None:
    path = tmp_path / "records.jsonl"
    long_id, long_method = "i" * 100_000, "m" * 100_000
    message: dict[str, Any] = {"jsonrpc": "2.0", "id": long_id, "method": long_method}
    async with serve_recording(path) as (client, _):
        response = await client.post(
            "/mcp",
            content=json.dumps(message),
            headers=legacy_headers("x", LEGACY, JSON_AND_SSE),
        )
        assert response.json()["id"] == long_id  # the wire echoes the id as it was
    (record,) = read_records(path)
    marker = "…[truncated, 100000 chars]"
    assert record["jsonrpc_id"] == "i" * MAX_CLIENT_STRING + marker
    assert record["method"] == "m" * MAX_CLIENT_STRING + marker
    assert path.stat().st_size < 4096
