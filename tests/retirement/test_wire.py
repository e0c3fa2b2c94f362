"""What a retirement says on the wire: RFC 9745/8594 headers, RFC 9457 problem details."""

from __future__ import annotations

import json
from datetime import UTC, datetime

from server.retirement.plan import parse_plan
from server.retirement.wire import Retired, deprecation_headers, problem

NOW = datetime(2026, 12, 8, 9, 0, tzinfo=UTC)
PLAN = parse_plan(
    json.dumps(
        [
            {
                "item": "sse",
                "sunset": "2027-03-01",
                "deprecated": "2026-12-01",
                "link": "https://example.com/migrate",
                "successor": "https://mcp.example.com/mcp",
            },
            {"item": "version:2024-11-05", "sunset": "2026-12-01"},
        ]
    ),
    NOW,
)


def test_the_deprecation_headers_say_when_and_where_to() -> None:
    headers = dict(deprecation_headers(PLAN.by_name["sse"]))
    assert headers[b"deprecation"] == b"@%d" % datetime(2026, 12, 1, tzinfo=UTC).timestamp()
    assert headers[b"sunset"] == b"Mon, 01 Mar 2027 00:00:00 GMT"
    assert headers[b"link"] == (
        b'<https://example.com/migrate>; rel="deprecation"; type="text/html", '
        b'<https://mcp.example.com/mcp>; rel="successor-version"'
    )


def test_a_brownout_problem_names_the_replacement_the_sunset_and_the_successor() -> None:
    headers, body = problem(PLAN.by_name["sse"], NOW, PLAN.supported_versions(NOW))
    head = dict(headers)
    assert head[b"content-type"] == b"application/problem+json"
    assert head[b"content-length"] == str(len(body)).encode()
    assert b'rel="successor-version"' in head[b"link"]
    details = json.loads(body)
    assert details["status"] == 410
    assert details["type"] == "https://example.com/migrate"
    assert details["brownout"] is True
    assert details["sunset"] == "2027-03-01T00:00:00Z"
    assert details["successor"] == "https://mcp.example.com/mcp"
    assert "Streamable HTTP" in details["detail"]
    assert "brownout" in details["detail"]


def test_a_retired_version_lists_the_versions_still_supported() -> None:
    retired = Retired(PLAN.by_name["version:2024-11-05"], NOW, PLAN.supported_versions(NOW))
    details = json.loads(retired.body)
    assert details["brownout"] is False
    assert details["type"] == "about:blank"
    assert "2024-11-05" not in details["supported_versions"]
    assert "2025-11-25" in details["supported_versions"]
    assert "2025-11-25" in details["detail"]
    assert retired.http_status is None
    assert retired.status == 410
