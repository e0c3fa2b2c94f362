"""The modern era's mirrored headers: MCP-Protocol-Version, Mcp-Method, Mcp-Name, Mcp-Param-*.

A 2026-07-28 request repeats parts of its body in headers so proxies can route without parsing
JSON; a header that disagrees with the body is -32020. A value is compared as the body holds
it (trimmed, visible ASCII, a ``=?base64?...?=`` sentinel decoded, booleans and integers by
their JSON text), and a matching pair is remembered (bounded), so a client repeating the same
headers pays once (:attr:`HeaderMirror.matched`, :meth:`HeaderMirror.check`). The client's side
sits here too, so encoding and decoding cannot drift: :func:`header_value` and
:func:`modern_request` (used by the ``call`` command and :mod:`server.testing`).
"""

from __future__ import annotations

import base64
import binascii
import itertools
import re
from collections.abc import Mapping
from typing import Any

from server.catalog.tools import Tool
from server.errors import HeaderMismatch, UnsupportedProtocolVersion
from server.memo import BoundedMemo
from server.protocol import (
    META_CLIENT_CAPABILITIES,
    META_CLIENT_INFO,
    META_PROTOCOL_VERSION,
    MODERN_VERSION,
    NAME_FIELD_BY_METHOD,
    JSONObject,
)

_BASE64_PREFIX, _BASE64_SUFFIX = "=?base64?", "?="
_INTEGER = re.compile(r"-?[0-9]+")
_MATCHES_KEPT = 4096
_ids = itertools.count(1)


def _is_sentinel(value: str) -> bool:
    """Whether :func:`decode_header_value` reads ``value`` (trimmed) as base64."""
    return value.startswith(_BASE64_PREFIX) and value.endswith(_BASE64_SUFFIX)


def decode_header_value(name: str, raw: str) -> str:
    """A header value as the body would hold it: trimmed, base64 sentinel decoded."""
    value = raw.strip(" \t")
    if not (value.isascii() and (value.isprintable() or value.replace("\t", " ").isprintable())):
        raise HeaderMismatch(f"Header {name} contains characters outside visible ASCII")
    if _is_sentinel(value):
        encoded = value[len(_BASE64_PREFIX) : -len(_BASE64_SUFFIX)]
        try:
            return base64.b64decode(encoded, validate=True).decode("utf-8")
        except (binascii.Error, UnicodeDecodeError):
            raise HeaderMismatch(f"Header {name} has an invalid base64 value") from None
    return value


def header_matches(header: str, body: Any) -> bool:
    if isinstance(body, bool):
        return header == ("true" if body else "false")
    if isinstance(body, int):
        return _INTEGER.fullmatch(header) is not None and int(header) == body
    return isinstance(body, str) and header == body


class HeaderMirror:
    """Checks the headers that mirror a request's body, remembering the pairs that matched."""

    def __init__(self) -> None:
        # (raw header, body value) pairs already found to match; any header name may share
        # them, since the match does not depend on the name.
        self.matched: BoundedMemo[tuple[bytes, str], bool] = BoundedMemo(_MATCHES_KEPT)
        # Whole sets that matched (ModernEra.validate's): the version, method and name headers
        # with their body values, the name's pair None for a method that names nothing.
        self.agreed: BoundedMemo[tuple[Any, ...], bool] = BoundedMemo(_MATCHES_KEPT)

    def check(self, headers: Mapping[bytes, bytes], key: bytes, name: str, body: Any) -> None:
        raw = headers.get(key)
        if raw is None:
            if body is None:
                return  # nothing to mirror; the method's own validation reports the gap
            raise HeaderMismatch(f"Header {name} is required")
        matched = self.matched
        if type(body) is str and (raw, body) in matched:
            return
        if not header_matches(decode_header_value(name, raw.decode("latin-1")), body):
            raise HeaderMismatch(f"Header {name} does not match the request body")
        if type(body) is str:
            matched.remember((raw, body), True, len(raw) + len(body))

    def check_all(
        self,
        headers: Mapping[bytes, bytes],
        mirrored: tuple[Any, ...],
        name_field: str | None,
        supported: list[str],
    ) -> None:
        """A request's mirrored headers against its body, and its version, in the spec's order
        (-32020 for the version header, -32022 unless ``supported``, -32020 for Mcp-Method and
        Mcp-Name); ``mirrored`` is ModernEra.validate's (header, body value) set, remembered in
        :attr:`agreed` when it passes."""
        _, version, _, method, _, name = mirrored
        matched = self.matched
        if (mirrored[0], version) not in matched:
            self.check(headers, b"mcp-protocol-version", "MCP-Protocol-Version", version)
        if version not in supported:
            raise UnsupportedProtocolVersion(version, supported)
        if (mirrored[2], method) not in matched:
            self.check(headers, b"mcp-method", "Mcp-Method", method)
        if name_field is not None and (type(name) is not str or (mirrored[4], name) not in matched):
            self.check(headers, b"mcp-name", "Mcp-Name", name)
        if name is None or type(name) is str:
            self.agreed.remember(mirrored, True)

    def check_params(
        self, tool: Tool, params: Mapping[str, Any], headers: Mapping[bytes, bytes]
    ) -> None:
        arguments = params.get("arguments")
        arguments = arguments if isinstance(arguments, dict) else {}
        for suffix, prop in tool.header_params.items():
            self.check(
                headers,
                f"mcp-param-{suffix}".encode("latin-1"),
                f"Mcp-Param-{suffix}",
                arguments.get(prop),
            )


# -- the client's side ----------------------------------------------------------------------


def header_value(value: Any) -> str:
    """A body value as a header carries it: visible ASCII as is, anything else base64-encoded
    between the sentinels :func:`decode_header_value` reads. A text that itself looks like the
    sentinel form is encoded too, or the server would decode it into something else."""
    if isinstance(value, bool):
        return "true" if value else "false"
    text = str(value)
    if (
        text.isascii()
        and text.isprintable()
        and text == text.strip(" \t")
        and not _is_sentinel(text)
    ):
        return text
    return _BASE64_PREFIX + base64.b64encode(text.encode()).decode("ascii") + _BASE64_SUFFIX


def modern_request(
    method: str,
    params: Mapping[str, Any] | None = None,
    *,
    request_id: int | str | None = None,
    capabilities: Mapping[str, Any] | None = None,
    client_info: Mapping[str, Any] | None = None,
) -> tuple[JSONObject, dict[str, str]]:
    """A modern-era request and its headers; ``_meta`` keys already in ``params`` win."""
    body_params = dict(params or {})
    meta = {
        META_PROTOCOL_VERSION: MODERN_VERSION,
        META_CLIENT_CAPABILITIES: dict(capabilities or {}),
        META_CLIENT_INFO: dict(client_info or {"name": "mcp-http-server-call", "version": "1"}),
    }
    meta.update(body_params.get("_meta") or {})
    body_params["_meta"] = meta
    message = {
        "jsonrpc": "2.0",
        "id": next(_ids) if request_id is None else request_id,
        "method": method,
        "params": body_params,
    }
    headers = {
        "Content-Type": "application/json",
        "Accept": "application/json, text/event-stream",
        "MCP-Protocol-Version": str(meta[META_PROTOCOL_VERSION]),
        "Mcp-Method": method,
    }
    name_field = NAME_FIELD_BY_METHOD.get(method)
    if name_field is not None and body_params.get(name_field) is not None:
        headers["Mcp-Name"] = header_value(body_params[name_field])
    return message, headers
