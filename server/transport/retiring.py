"""Retirements on the MCP paths: which requests they affect, and what those are told.

Built only when ``MCP_RETIRE`` names something (the endpoint otherwise never asks). A request
is affected by the item its transport (``sse``), its era (``initialize``), its protocol version
or its method names; :meth:`Retiring.check` marks its record (``retiring``) and, when the item
is retired now (a brownout, or past the sunset), raises
:class:`~server.retirement.wire.Retired`, which the endpoint answers with 410 problem details
before authentication. A client feature (``sampling/createMessage``, ``roots/list``,
``elicitation/create``) affects the requests of clients that declare it: they get the headers,
and once it is retired the server no longer asks for it
(:meth:`Retiring.without_retired_features`: handlers see the client as not declaring it).
:meth:`Retiring.headers_on` adds the deprecation headers to the answer of an affected request.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from server.asgi import ASGIMessage as AsgiMessage
from server.asgi import Send
from server.jsonrpc import Message, Response, encode_notification
from server.legacy.runtime import SessionRuntime
from server.memo import BoundedMemo
from server.protocol import LOG_LEVEL_RANK, META_CLIENT_CAPABILITIES, META_PROTOCOL_VERSION
from server.records.draft import Draft
from server.retirement.plan import FEATURE_CAPABILITY, Item, Plan, Retirement
from server.retirement.wire import Retired, deprecation_headers, describe

log = logging.getLogger("server.retirement")


def utc_now() -> datetime:
    return datetime.now(UTC)


class Retiring:
    """The retirement checks of one app, over its :class:`~server.retirement.plan.Plan`."""

    def __init__(self, plan: Plan, now: Callable[[], datetime] = utc_now) -> None:
        self.plan = plan
        self.now = now
        self._headers = {r.item.name: deprecation_headers(r) for r in plan.retirements}
        self._features = [
            (retirement, FEATURE_CAPABILITY[retirement.item.value])
            for retirement in plan.retirements
            if retirement.item.client_feature
        ]
        # One WARNING per client, item and day: a client repeats itself all day long.
        self._warned: BoundedMemo[str, bool] = BoundedMemo(max_entries=4096, max_key_bytes=512)

    def check(
        self,
        draft: Draft,
        *,
        sse: bool = False,
        era: str | None = None,
        version: str | None = None,
        method: str | None = None,
        capabilities: Any = None,
    ) -> Retirement | None:
        """Mark the request's record with the item that affects it (and return its
        retirement); raise :class:`Retired` when that item is retired now."""
        by_name = self.plan.by_name
        found: list[Retirement] = []
        if sse and "sse" in by_name:
            found.append(by_name["sse"])
        if era == "legacy" and "initialize" in by_name:
            found.append(by_name["initialize"])
        if version is not None and (retirement := by_name.get(f"version:{version}")):
            found.append(retirement)
        retirement = by_name.get(f"method:{method}") if method is not None else None
        if retirement is not None and not retirement.item.client_feature:
            found.append(retirement)
        if isinstance(capabilities, dict):
            found.extend(r for r, name in self._features if name in capabilities)
        if not found:
            return None
        now = self.now()
        for retirement in found:
            if retirement.phase(now) == "retired" and not retirement.item.client_feature:
                draft.retiring = retirement.item.name
                draft.outcome = "retired"
                raise Retired(retirement, now, self.plan.supported_versions(now))
        retirement = found[0]
        draft.retiring = retirement.item.name
        self._warn_once(draft, retirement, now)
        return retirement

    def tell_session(self, retirement: Retirement, runtime: SessionRuntime, level: Any) -> None:
        """A retirement with ``notify`` as a log message on the session's GET stream, once per
        session (and replica), when the session takes warnings and has a GET stream open."""
        stream = runtime.standalone
        told = runtime.retirements_told
        if (
            not retirement.notify
            or retirement.item.name in told
            or stream is None
            or stream.finished
            or level not in LOG_LEVEL_RANK
            or LOG_LEVEL_RANK[level] > LOG_LEVEL_RANK["warning"]
        ):
            return
        told.add(retirement.item.name)
        what, instead = describe(retirement.item)
        sunset = retirement.sunset.isoformat().replace("+00:00", "Z")
        text = f"{what[0].upper()}{what[1:]} is deprecated and retired at {sunset}: use {instead}."
        if retirement.link is not None:
            text += f" See {retirement.link}"
        stream.publish(
            encode_notification(
                "notifications/message",
                {"level": "warning", "logger": "retirement", "data": text},
            )
        )

    def status(self) -> list[dict[str, Any]]:
        """Each retirement and where it stands now, for ``/readyz``."""
        now = self.now()
        return [
            {
                "item": retirement.item.name,
                "phase": retirement.phase(now),
                "sunset": retirement.sunset.isoformat().replace("+00:00", "Z"),
                "brownouts": [window.text for window in retirement.brownouts],
            }
            for retirement in self.plan.retirements
        ]

    def gauges(self) -> list[tuple[str, bool]]:
        """Each item, and whether it is retired now: the ``mcp_retirement_retired`` gauge."""
        now = self.now()
        return [(r.item.name, r.phase(now) == "retired") for r in self.plan.retirements]

    def check_message(
        self, draft: Draft, message: Message | list[Message], era: str, version: str | None
    ) -> None:
        """:meth:`check` for each request of a decoded POST (``version``: its header's)."""
        for one in message if isinstance(message, list) else (message,):
            if isinstance(one, Response):
                continue
            meta = one.params.get("_meta")
            capabilities = None
            if era == "modern" and isinstance(meta, dict):
                capabilities = meta.get(META_CLIENT_CAPABILITIES)
                if version is None:
                    version = meta.get(META_PROTOCOL_VERSION)
                if capabilities is not None:
                    meta[META_CLIENT_CAPABILITIES] = self._kept(draft, capabilities)
            if one.method == "initialize":
                # initialize negotiates: a retired version is never offered, not refused.
                capabilities = one.params.get("capabilities")
                if capabilities is not None:
                    one.params["capabilities"] = self._kept(draft, capabilities)
                asked = self.offered(one.params.get("protocolVersion"))
                self.check(
                    draft, era=era, version=asked, method=one.method, capabilities=capabilities
                )
            else:
                self.check(
                    draft, era=era, version=version, method=one.method, capabilities=capabilities
                )

    def offered(self, version: Any) -> Any:
        """The version an ``initialize`` asks for, when it is not retired now (a retired one
        is not refused: the negotiation offers a supported version instead), else None."""
        phase = (
            self.plan.phase(Item("version", version), self.now())
            if isinstance(version, str)
            else None
        )
        return version if phase == "deprecated" else None

    def without_retired_features(self, capabilities: Any) -> Any:
        """``capabilities`` without the client features retired now (a brownout, or past the
        sunset), so no handler asks a client for one: a copy when any goes, else the same."""
        if not self._features or not isinstance(capabilities, dict):
            return capabilities
        now = self.now()
        gone = {
            name
            for retirement, name in self._features
            if name in capabilities and retirement.phase(now) == "retired"
        }
        if not gone:
            return capabilities
        return {key: value for key, value in capabilities.items() if key not in gone}

    def _kept(self, draft: Draft, capabilities: Any) -> Any:
        """:meth:`without_retired_features`, and the record's capabilities with it: the
        record names what the handlers see, as a legacy session's later requests do."""
        kept = self.without_retired_features(capabilities)
        if draft.client_capabilities is capabilities:
            draft.client_capabilities = kept
        return kept

    def headers_on(self, send: Send, draft: Draft) -> Send:
        """``send``, adding the deprecation headers to the answer's head when the request
        turned out to be affected (the record's ``retiring``)."""
        headers = self._headers

        async def with_headers(message: AsgiMessage) -> None:
            if (
                message["type"] == "http.response.start"
                and draft.retiring in headers
                and draft.outcome != "retired"  # a 410 carries its own Link
            ):
                message = dict(message)
                message["headers"] = [*message.get("headers", ()), *headers[draft.retiring]]
            await send(message)

        return with_headers

    def _warn_once(self, draft: Draft, retirement: Retirement, now: datetime) -> None:
        who = draft.client_name or draft.user_agent or draft.client_address or "?"
        # Hashed: a long client name would pass the memo's key bound and log every request.
        key = f"{retirement.item.name}|{now.date()}|{hash(who)}"
        if key in self._warned:
            return
        self._warned.remember(key, True)
        log.warning(
            "client %s (%s) uses %s, retired at %s",
            draft.client_name or "(unidentified)",
            draft.user_agent or "no user agent",
            retirement.item.name,
            retirement.sunset.isoformat(),
        )
