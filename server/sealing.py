"""Integrity protection for values the client must hand back unchanged: cursors, request state.

One HMAC-SHA256 key (from settings) signs every token the server issues, so a forged or
altered token is refused instead of being trusted. Tokens are compact: base64url payload, a
dot, a truncated (128-bit) base64url tag. Payloads are signed, not encrypted: the client can
read them, so nothing secret goes in.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import time
from typing import Any

import orjson

from server.errors import InvalidParams

_TAG_BYTES = 16
# Why a token a client got from "this server" fails, most often: another worker or replica
# (with a key of its own) issued it. Said to the client, who tells the operator.
NOT_OURS = (
    "not signed by this server (changed, or issued by another process: every worker and "
    "replica must have the same MCP_STATE_SECRET)"
)


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


class Sealer:
    """Signs and verifies tokens under one key; ``purpose`` separates token families."""

    def __init__(self, key: bytes) -> None:
        if len(key) < 16:
            raise ValueError("the sealing key must be at least 16 bytes")
        self._key = key

    def _tag(self, purpose: str, payload: bytes) -> bytes:
        return hmac.new(self._key, purpose.encode() + b"\x00" + payload, hashlib.sha256).digest()[
            :_TAG_BYTES
        ]

    def seal(self, purpose: str, payload: bytes) -> str:
        return f"{_b64(payload)}.{_b64(self._tag(purpose, payload))}"

    def open(self, purpose: str, token: str) -> bytes | None:
        """The payload of a genuine token, or None for anything forged or malformed."""
        if not isinstance(token, str) or token.count(".") != 1 or len(token) > 1_000_000:
            return None
        body, tag = token.split(".")
        try:
            payload, given = _unb64(body), _unb64(tag)
        except ValueError:
            return None
        # Only the canonical spelling is genuine: lenient base64 would let one token be
        # written many ways (and, say, mint unbounded cache keys).
        if _b64(payload) != body or _b64(given) != tag:
            return None
        return payload if hmac.compare_digest(given, self._tag(purpose, payload)) else None

    def seal_json(self, purpose: str, value: Any, ttl_s: float | None = None) -> str:
        document = {"v": value}
        if ttl_s is not None:
            document["exp"] = int(time.time() + ttl_s)
        return self.seal(purpose, orjson.dumps(document))

    def open_json(self, purpose: str, token: Any, what: str) -> Any:
        """The sealed value, or InvalidParams naming ``what`` was forged, malformed or expired."""
        payload = self.open(purpose, token) if isinstance(token, str) else None
        if payload is None:
            raise InvalidParams(f"Invalid {what}: {NOT_OURS}")
        try:
            document = orjson.loads(payload)
        except orjson.JSONDecodeError:
            raise InvalidParams(f"Invalid {what}") from None
        expiry = document.get("exp")
        if expiry is not None and time.time() > expiry:
            raise InvalidParams(f"Expired {what}")
        return document.get("v")
