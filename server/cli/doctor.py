"""``python -m server doctor URL [--token T] [--json]``: is the proxy path in front of the server
right? Run from where a client runs, against the public URL, through the real proxy chain.

One line per check, PASS or FAIL (SKIP when there is nothing to check, e.g. no authentication),
and for each FAIL the proxy setting to change, in nginx's and ingress-nginx's names. The checks
that need the server's help call its doctor tools (``MCP_DOCTOR=true``, see
:mod:`server.app.doctor_tools`). Exit 0 only if nothing failed.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass
from typing import Any

import httpx

from server.cli import doctor_wire as wire
from server.protocol import TOOLS_CALL

FIXES = {
    "tools": "server: MCP_DOCTOR=true, and a --token holding MCP_REPORT_SCOPE (mcp:admin)",
    "slash": "nginx: location /api/ { proxy_pass http://app/; } (no location of its own that "
    "301s /api/mcp to /api/mcp/); ingress-nginx: pathType: Prefix on the prefix",
    "request-id": "nginx: proxy_set_header X-Request-Id $request_id; and do not hide it "
    '(proxy_hide_header); ingress-nginx: generate-request-id: "true" (ConfigMap)',
    "metadata": "nginx: proxy_set_header X-Forwarded-Host $http_host; X-Forwarded-Proto $scheme; "
    "X-Forwarded-Prefix /api; server: MCP_TRUSTED_PROXIES=<proxy address>; ingress-nginx: "
    "nginx.ingress.kubernetes.io/x-forwarded-prefix: /api",
    "buffering": "nginx: proxy_buffering off; gzip off; (or text/event-stream out of "
    "gzip_types) and no proxy_ignore_headers X-Accel-Buffering; ingress-nginx: "
    'nginx.ingress.kubernetes.io/proxy-buffering: "off", and no gzip of text/event-stream',
    "idle": "nginx: proxy_read_timeout 3600s; proxy_send_timeout 3600s; server: MCP_KEEPALIVE_S "
    'below them; ingress-nginx: nginx.ingress.kubernetes.io/proxy-read-timeout: "3600", '
    'proxy-send-timeout: "3600"',
    "resume": "nginx: pass Last-Event-ID and Mcp-Session-Id through (no proxy_set_header "
    "clearing them); replicas: MCP_REDIS_URL, or upstream hash $remote_addr consistent; "
    "ingress-nginx: nginx.ingress.kubernetes.io/affinity: cookie",
    "sse": "nginx: proxy_set_header X-Forwarded-Prefix /api; (the endpoint event's path) and "
    "route /sse and /messages below the prefix; ingress-nginx: "
    "nginx.ingress.kubernetes.io/x-forwarded-prefix: /api",
    "replicas": "server: MCP_REDIS_URL on every replica; else nginx: hash $remote_addr "
    "consistent; in the upstream; ingress-nginx: nginx.ingress.kubernetes.io/affinity: cookie",
    "body": "nginx: client_max_body_size 4m; (= MCP_MAX_BODY_BYTES); ingress-nginx: "
    "nginx.ingress.kubernetes.io/proxy-body-size: 4m",
}


@dataclass
class Check:
    name: str
    status: str  # PASS, FAIL or SKIP
    detail: str
    fix: str = ""


class Doctor:
    def __init__(self, url: str, token: str | None, idle_s: float, timeout_s: float) -> None:
        self.url = url.rstrip("/")
        self.auth = {"Authorization": f"Bearer {token}"} if token else {}
        self.idle_s = idle_s
        self.timeout = httpx.Timeout(timeout_s + idle_s, connect=timeout_s)
        self.limits: dict[str, Any] = {}

    def client(self, fresh: bool = False) -> httpx.AsyncClient:
        """A client; ``fresh``: every request on a new connection (another replica may answer)."""
        limits = httpx.Limits(max_keepalive_connections=0) if fresh else httpx.Limits()
        return httpx.AsyncClient(headers=self.auth, timeout=self.timeout, limits=limits)

    async def call(self, name: str, arguments: dict[str, Any]) -> dict[str, Any] | None:
        message, headers = wire.modern_call(name, arguments)
        async with self.client() as client:
            response = await client.post(self.url, json=message, headers=headers)
            return await wire.answer_of(response, message["id"])

    # -- the checks ----------------------------------------------------------------------------

    async def tools(self) -> Check:
        answer = await self.call("doctor.replica", {})
        if wire.result_text(answer) != "ok":
            return Check("tools", "FAIL", f"doctor.replica: {wire.result_text(answer)}")
        self.limits = wire.structured(answer)
        return Check("tools", "PASS", f"the doctor's tools answer ({self.limits.get('replica')})")

    async def slash(self) -> Check:
        async with self.client() as client:
            for url in (self.url, self.url + "/"):
                message, headers = wire.modern_request_discover()
                response = await client.post(url, json=message, headers=headers)
                if (
                    response.is_redirect
                    or response.status_code in (404, 405)
                    or response.status_code >= 500
                ):
                    return Check("slash", "FAIL", f"{url} answered {response.status_code}")
        return Check("slash", "PASS", "the URL with and without a trailing slash, no redirect")

    async def request_id(self) -> Check:
        message, headers = wire.modern_request_discover()
        async with self.client() as client:
            response = await client.post(self.url, json=message, headers=headers)
        value = response.headers.get("x-request-id")
        if not value:
            return Check("request-id", "FAIL", "no X-Request-Id on the answer")
        return Check("request-id", "PASS", f"X-Request-Id {value[:40]}")

    async def metadata(self) -> Check:
        message, headers = wire.modern_request_discover()
        async with httpx.AsyncClient(timeout=self.timeout) as client:
            refused = await client.post(self.url, json=message, headers=headers)
            if refused.status_code != 401:
                return Check("metadata", "SKIP", f"no 401 without a token ({refused.status_code})")
            challenge = refused.headers.get("www-authenticate", "")
            if 'resource_metadata="' not in challenge:
                return Check("metadata", "FAIL", "the 401 names no resource_metadata")
            meta = challenge.split('resource_metadata="', 1)[1].split('"', 1)[0]
            document = await client.get(meta)
        if document.status_code != 200:
            return Check("metadata", "FAIL", f"{meta} answered {document.status_code}")
        resource = str(document.json().get("resource", ""))
        if resource.rstrip("/") != self.url:
            return Check("metadata", "FAIL", f"its resource is {resource}, not {self.url}")
        return Check("metadata", "PASS", f"{meta} resolves; its resource is the URL used")

    async def buffering(self) -> Check:
        gap_ms, count = 700, 4
        message, headers = wire.modern_call(
            "doctor.events", {"count": count, "gap_ms": gap_ms}, progressToken="doctor"
        )
        headers["Accept"] = "text/event-stream, application/json"
        arrivals: list[float] = []
        async with (
            self.client() as client,
            client.stream("POST", self.url, json=message, headers=headers) as response,
        ):
            started = time.monotonic()
            async for event in wire.events(response):
                found = event.message() or {}
                if found.get("method") == "notifications/progress":
                    arrivals.append(time.monotonic() - started)
                elif found.get("id") == message["id"]:
                    break
        if len(arrivals) < count:
            return Check("buffering", "FAIL", f"{len(arrivals)} of {count} progress events came")
        spread = arrivals[-1] - arrivals[0]
        if spread < gap_ms / 1000:
            return Check("buffering", "FAIL", f"{count} events sent over {(count - 1) * gap_ms} ms "
                         f"arrived within {spread * 1000:.0f} ms: buffered")  # fmt: skip
        return Check("buffering", "PASS", f"events arrived as sent ({spread:.1f} s apart overall)")

    async def idle_modern(self) -> Check:
        answer = await self.call("doctor.wait", {"seconds": self.idle_s})
        return self._idle("idle-modern", wire.result_text(answer))

    async def idle_legacy(self) -> Check:
        async with self.client() as client:
            session = await wire.open_legacy_session(client, self.url)
            message = wire.legacy_message(
                TOOLS_CALL, {"name": "doctor.wait", "arguments": {"seconds": self.idle_s}}, 5
            )
            response = await client.post(
                self.url, json=message, headers=wire.legacy_headers(session)
            )
            answer = await wire.answer_of(response, 5)
        return self._idle("idle-legacy", wire.result_text(answer))

    async def idle_sse(self) -> Check:
        text = await self.sse_call("doctor.wait", {"seconds": self.idle_s})
        return self._idle("idle-sse", text)

    def _idle(self, name: str, text: str) -> Check:
        if text != "ok":
            return Check(name, "FAIL", f"a call silent for {self.idle_s:g} s: {text}")
        return Check(name, "PASS", f"a call silent for {self.idle_s:g} s completed")

    async def sse(self) -> Check:
        text = await self.sse_call("doctor.replica", {})
        if text != "ok":
            return Check("sse", "FAIL", text)
        return Check("sse", "PASS", "the HTTP+SSE endpoint event names a path that works")

    async def sse_url(self) -> str:
        async with self.client() as client:
            card = await client.get(self.url + "/server-card")
        if card.status_code == 200:
            for remote in card.json().get("remotes", []):
                if remote.get("type") == "sse":
                    return str(remote["url"])
        return self.url  # a GET on the MCP URL without a session opens HTTP+SSE too

    async def sse_call(self, name: str, arguments: dict[str, Any]) -> str:
        url = await self.sse_url()
        origin = "/".join(url.split("/", 3)[:3])
        async with (
            self.client() as client,
            client.stream("GET", url, headers={"Accept": "text/event-stream"}) as stream,
        ):
            if stream.status_code != 200:
                return f"GET {url} answered {stream.status_code}"
            received = wire.events(stream)
            endpoint = (await anext(received)).data
            post_to = endpoint if "://" in endpoint else origin + endpoint
            for message in (
                wire.initialize(wire.SSE_VERSION),
                wire.legacy_message("notifications/initialized", id=None),
                wire.legacy_message(TOOLS_CALL, {"name": name, "arguments": arguments}, 7),
            ):
                posted = await client.post(post_to, json=message)
                if posted.status_code != 202:
                    return f"POST {post_to} (the endpoint event's) answered {posted.status_code}"
            async for event in received:
                found = event.message()
                if found is not None and found.get("id") == 7:
                    return wire.result_text(found)
        return "the stream ended before the answer"

    async def resume(self) -> Check:
        message = wire.legacy_message(
            TOOLS_CALL,
            {"name": "doctor.events", "arguments": {"count": 3, "gap_ms": 700},
             "_meta": {"progressToken": "resume"}},
            9,
        )  # fmt: skip
        async with self.client() as client:
            session = await wire.open_legacy_session(client, self.url)
            headers = wire.legacy_headers(session)
            headers["Accept"] = "text/event-stream, application/json"
            async with client.stream("POST", self.url, json=message, headers=headers) as first:
                last_id = None
                async for event in wire.events(first):
                    last_id = event.id
                    if last_id:
                        break
            if not last_id:
                return Check("resume", "FAIL", "the call's stream carried no event id")
        async with self.client(fresh=True) as client:
            headers = {**wire.legacy_headers(session), "Accept": "text/event-stream",
                       "Last-Event-ID": last_id}  # fmt: skip
            async with client.stream("GET", self.url, headers=headers) as again:
                if again.status_code != 200:
                    return Check("resume", "FAIL", f"GET with Last-Event-ID: {again.status_code}")
                async for event in wire.events(again):
                    if (event.message() or {}).get("id") == 9:
                        return Check("resume", "PASS", "a second connection resumed the stream")
        return Check("resume", "FAIL", "the resumed stream ended before the answer")

    async def replicas(self) -> Check:
        replicas: set[str] = set()
        async with self.client(fresh=True) as client:
            for _ in range(6):
                message, headers = wire.modern_call("doctor.replica", {})
                response = await client.post(self.url, json=message, headers=headers)
                replicas.add(
                    str(
                        wire.structured(await wire.answer_of(response, message["id"])).get(
                            "replica"
                        )
                    )
                )
            session = await wire.open_legacy_session(client, self.url)
            in_session: set[str] = set()
            for number in range(4):
                message = wire.legacy_message(TOOLS_CALL, {"name": "doctor.replica"}, 20 + number)
                response = await client.post(
                    self.url, json=message, headers=wire.legacy_headers(session)
                )
                answer = await wire.answer_of(response, 20 + number)
                text = wire.result_text(answer)
                if text != "ok":
                    why = f"a session failed on its call {number + 1}: {text}"
                    return Check("replicas", "FAIL", f"{len(replicas)} replica(s) answered; {why}")
                in_session.add(str(wire.structured(answer).get("replica")))
        return Check("replicas", "PASS", f"{len(replicas)} replica(s) answered; a session worked "
                     f"across {len(in_session)} of them")  # fmt: skip

    async def body(self) -> Check:
        limit = int(self.limits.get("max_body_bytes") or 4 * 1024 * 1024)
        message, headers = wire.modern_request_discover()
        text = json.dumps(message)
        padded = text + " " * max(0, limit - len(text) - 1024)
        async with self.client() as client:
            response = await client.post(self.url, content=padded.encode(), headers=headers)
        if response.status_code == 413:
            return Check("body", "FAIL", f"a {len(padded)}-byte body (the server takes {limit}) "
                         "was refused with 413 on the way")  # fmt: skip
        if response.status_code != 200:
            return Check("body", "FAIL", f"a {len(padded)}-byte body: HTTP {response.status_code}")
        return Check(
            "body", "PASS", f"a {len(padded)}-byte body got through (the server's limit {limit})"
        )


async def examine(doctor: Doctor) -> list[Check]:
    """Every check, each bounded and kept apart: one that breaks is a FAIL, not a crash."""

    async def guarded(name: str, check: Callable[[], Awaitable[Check]]) -> Check:
        try:
            return await asyncio.wait_for(check(), doctor.idle_s + 60)
        except Exception as failed:  # a broken path: the check failed, the others go on
            return Check(name, "FAIL", f"{type(failed).__name__}: {str(failed)[:200]}")

    checks = [await guarded("slash", doctor.slash), await guarded("request-id", doctor.request_id),
              await guarded("metadata", doctor.metadata)]  # fmt: skip
    tools = await guarded("tools", doctor.tools)
    checks.append(tools)
    if tools.status != "PASS":
        for name in ("buffering", "idle-modern", "idle-legacy", "idle-sse", "sse", "resume",
                     "replicas"):  # fmt: skip
            checks.append(Check(name, "FAIL", "needs the doctor's tools"))
    else:
        checks.append(await guarded("sse", doctor.sse))
        checks += await asyncio.gather(
            guarded("buffering", doctor.buffering),
            guarded("idle-modern", doctor.idle_modern),
            guarded("idle-legacy", doctor.idle_legacy),
            guarded("idle-sse", doctor.idle_sse),
            guarded("resume", doctor.resume),
            guarded("replicas", doctor.replicas),
        )
    checks.append(await guarded("body", doctor.body))
    for check in checks:
        if check.status == "FAIL":
            key = "idle" if check.name.startswith("idle") else check.name
            if check.name == "idle-sse" and "answered" in check.detail:
                key = "sse"  # the HTTP+SSE path itself is broken, not the idle timeout
            check.fix = FIXES[key]
    return checks


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("url", help="the public MCP URL, as clients use it (through the proxy)")
    parser.add_argument("--token", help="a bearer token (with MCP_REPORT_SCOPE for the tools)")
    parser.add_argument("--json", action="store_true", help="one JSON document instead of lines")
    parser.add_argument("--idle", type=float, default=65.0,
                        help="seconds a silent call lasts: above the proxy's idle timeout "
                        "(nginx's default proxy_read_timeout is 60)")  # fmt: skip
    parser.add_argument("--timeout", type=float, default=10.0, help="seconds per request")


def run(args: argparse.Namespace) -> int:
    """The ``doctor`` command: 0 if every check passed (or had nothing to check), else 1."""
    if not args.url.startswith(("http://", "https://")):
        print("doctor: URL must be http:// or https://", file=sys.stderr)
        return 2
    doctor = Doctor(args.url, args.token, args.idle, args.timeout)
    checks = asyncio.run(examine(doctor))
    if args.json:
        print(json.dumps([asdict(check) for check in checks], indent=2))
    else:
        for check in checks:
            fix = f" -- fix: {check.fix}" if check.fix else ""
            print(f"{check.status} {check.name}: {check.detail}{fix}")
    return 1 if any(check.status == "FAIL" for check in checks) else 0
