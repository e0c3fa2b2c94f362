"""A finished request's record as its JSON line, built straight from the Draft.

The record writer shares a CPU with the event loop, so the line is built with less work than
building the record (:meth:`Draft.request_record`), applying the privacy rules
(:meth:`Privacy.apply`) and encoding it, to the same bytes. What repeats from request to
request (a client's declared capabilities and their redacted form, the ``_meta`` of its calls,
the fields one client program sends the same every time) is judged and encoded once and
remembered by its encoding (:class:`LineMemo`, bounded); client-chosen strings are clipped as
the record clips them. A draft this way does not cover gets no line here and takes the general
way. :class:`LineWriter`, one per :class:`Privacy`, is what the writer calls
(docs/decisions.md#record-lines).
"""

from __future__ import annotations

import time
from typing import Any

import orjson

from server.memo import BoundedMemo
from server.protocol import CALL_METHODS
from server.records.draft import INTERNAL_ERROR, Draft
from server.records.privacy import Privacy
from server.records.schema import (
    HEX_PAIRS,
    ID_HEAD,
    LAST_SECOND,
    MAX_CLIENT_STRING,
    MAX_ERROR_MESSAGE,
    MILLIS,
    SCHEMA_VERSION,
    clip,
    id_head,
    iso_time,
)

# Memory stays bounded: what takes more than this many bytes is not remembered (it is judged
# and encoded every time), and a memo holding this many entries starts over.
MEMO_MAX_BYTES = 4096
MEMO_MAX_ENTRIES = 256
# Capabilities are remembered up to what a legacy session may declare (server.jsonrpc): a
# session's are on every one of its records, and judging 16 KiB of them again for each record
# costs the writer ~0.7 ms (256 of them: 4 MiB at most).
DECLARED_MEMO_MAX_BYTES = 16 * 1024


class Declared:
    """One capabilities object (by its encoding) under one set of privacy rules."""

    __slots__ = ("cleaned", "encoded", "fits", "sensitive")

    def __init__(self, encoded: bytes, fits: bool) -> None:
        self.encoded = orjson.Fragment(encoded)
        # Within the rules' size cap as written (a legacy session's are not part of the body
        # that the cap was checked against).
        self.fits = fits
        # Whether a key in them is sensitive, judged when a record first needs to know: one
        # whose body or capabilities are over the cap never does (they are cleaned anyway),
        # and judging a large object is a walk over all of it.
        self.sensitive: bool | None = None
        # Their redacted and capped form, encoded when a record first needs it.
        self.cleaned: orjson.Fragment | None = None


class MetaSeen:
    """One ``_meta`` object (by its encoding) under one set of privacy rules: whether a key in
    it is sensitive, and the capabilities it declares (a modern request's are in it)."""

    __slots__ = ("capabilities_key", "declared", "sensitive")

    def __init__(self) -> None:
        # Judged when a record first needs to know, as Declared.sensitive.
        self.sensitive: bool | None = None
        self.capabilities_key: str | None = None
        self.declared: Declared | None = None


class LineMemo:
    """What :meth:`LineWriter.line` remembers between records, for one :class:`Privacy`.

    :meth:`LineWriter.line` looks entries up itself (one dict lookup each, no call); the methods
    here judge, encode and remember what it did not find. Only the record writer uses it; a race
    (``close`` draining while a stuck writer still runs) can only compute an entry twice."""

    __slots__ = ("declared", "metas", "templates")

    def __init__(self) -> None:
        self.declared: BoundedMemo[bytes, Declared] = BoundedMemo(
            MEMO_MAX_ENTRIES, DECLARED_MEMO_MAX_BYTES
        )
        self.metas: BoundedMemo[bytes, MetaSeen] = BoundedMemo(MEMO_MAX_ENTRIES, MEMO_MAX_BYTES)
        self.templates: BoundedMemo[tuple[Any, ...], dict[str, Any]] = BoundedMemo(
            MEMO_MAX_ENTRIES, MEMO_MAX_BYTES
        )

    def meta_seen(self, encoded: bytes, meta: Any, capabilities: Any, privacy: Privacy) -> MetaSeen:
        """``meta`` (``encoded``) remembered with the capabilities it holds; its ``sensitive``
        (whether the key ``_meta`` or a key at any depth of its value is, judged where params
        hold it, one level down) is judged by the first record that needs it."""
        seen = MetaSeen()
        if type(meta) is dict and capabilities is not None:
            for key, value in meta.items():
                if value is capabilities:
                    seen.capabilities_key = key
                    seen.declared = self.declared_of(capabilities, privacy)
                    break
        self.metas.remember(encoded, seen, len(encoded))
        return seen

    def declared_of(self, capabilities: dict[str, Any], privacy: Privacy) -> Declared:
        encoded = orjson.dumps(capabilities)
        known = self.declared.get(encoded)
        if known is None:
            known = Declared(encoded, len(encoded) <= privacy.max_params_bytes)
            self.declared.remember(encoded, known, len(encoded))
        return known

    def template_of(
        self, key: tuple[Any, ...], draft: Draft, capabilities: orjson.Fragment | None
    ) -> dict[str, Any]:
        """A request record holding what one client program repeats on every request (``key``:
        see :meth:`LineWriter.line`; the capabilities as written: a Declared's fragment, or None);
        the rest is None."""
        template = _template(draft, capabilities)
        size = sum(len(part) for part in key if isinstance(part, str))
        self.templates.remember(key, template, size)
        return template


class LineWriter:
    """Finished requests' lines under one set of privacy rules, remembering what repeats."""

    __slots__ = ("memo", "privacy")

    def __init__(self, privacy: Privacy) -> None:
        self.privacy = privacy
        self.memo = LineMemo()

    def line(self, draft: Any) -> bytes | None:  # noqa: PLR0915 - written out: calls cost more
        """A finished request's record as its JSON line, the rules applied: the same bytes as
        :meth:`Draft.build`, :meth:`Privacy.apply` and encoding, for less work (the record
        writer asks this first). None for a record that needs the general way (see the module
        docstring), or that is not a Draft.

        The writer runs this for every request: the memo lookups are written out, their
        methods called only on a miss (a call costs as much as a few fields)."""
        if not isinstance(draft, Draft):
            return None
        params = draft.params
        capabilities = draft.client_capabilities
        if (params is not None and type(params) is not dict) or (
            capabilities is not None and type(capabilities) is not dict
        ):
            return None
        memo = self.memo
        try:
            written, written_capabilities = _apply_privacy(
                draft, self.privacy, memo, params, capabilities
            )
            # What one client program repeats on every request: a template of the record.
            key = (
                draft.verb,
                draft.path,
                draft.era,
                draft.header_version,
                draft.body_version,
                draft.client_name,
                draft.client_version,
                written_capabilities,
                draft.user_agent,
            )
            template = memo.templates.get(key)
            if template is None:
                template = memo.template_of(key, draft, written_capabilities)
            # Copying it and setting what changes costs less than a dict display of every field.
            record = template.copy()
            started = draft.started
            method, jsonrpc_id, session_id = draft.method, draft.jsonrpc_id, draft.session_id
            subject, address, error_code = draft.subject, draft.client_address, draft.error_code
            # iso_time's and request_id_of's usual ways written out: two calls fewer a line.
            start, text = LAST_SECOND[0]
            fraction = started - start
            record["time"] = (
                text + MILLIS[int(fraction * 1000)] if 0.0 <= fraction < 1.0 else iso_time(started)
            )
            # request_id_of's format once per 256 serials (the draft's are consecutive).
            inbound = draft.inbound_id
            if inbound is None:
                serial = draft.serial
                high, head, _ = ID_HEAD[0]
                if serial >> 8 != high:
                    _, head, _ = id_head(serial)
                inbound = head + HEX_PAIRS[serial & 0xFF]
            record["request_id"] = inbound
            record["status"] = draft.status
            # Client-chosen: clipped when long (a length check each, clip() only then).
            written_method = method
            if type(method) is str and len(method) > MAX_CLIENT_STRING:
                written_method = clip(method)
            if type(jsonrpc_id) is str and len(jsonrpc_id) > MAX_CLIENT_STRING:
                jsonrpc_id = clip(jsonrpc_id)
            if type(session_id) is str and len(session_id) > MAX_CLIENT_STRING:
                session_id = clip(session_id)
            if type(subject) is str and len(subject) > MAX_CLIENT_STRING:
                subject = clip(subject)
            if type(address) is str and len(address) > MAX_CLIENT_STRING:
                address = clip(address)
            record["method"] = written_method
            record["jsonrpc_id"] = jsonrpc_id
            record["notification"] = draft.notification
            record["session_id"] = session_id
            record["subject"] = subject
            record["client_address"] = address
            if error_code is not None:
                message = clip(draft.error_message, MAX_ERROR_MESSAGE)
                record["error"] = {"code": error_code, "message": message}
            # rounded_ms written out (a call fewer a line; the same float, see there).
            milliseconds = ((draft.ended_clock or time.perf_counter()) - draft.clock) * 1000
            micros = milliseconds * 1000.0
            whole = micros + _TO_INTEGER - _TO_INTEGER
            record["duration_ms"] = (
                whole / 1000.0
                if 0.0 < micros < 2147483648.0 and -0.4999 < micros - whole < 0.4999
                else round(milliseconds, 3)
            )
            record["bytes_in"] = draft.bytes_in
            record["bytes_out"] = draft.bytes_out
            record["streaming"] = draft.streaming
            record["params"] = written
            if (
                draft.batch_size is None
                and draft.advertised is None
                and draft.task is None
                and draft.traceparent is None
                and draft.retiring is None
            ):
                # Draft.optional_fields for a request without its rare fields, written out.
                if method in CALL_METHODS:
                    record["target"] = draft.target
                    outcome = draft.outcome
                    record["outcome"] = (
                        outcome
                        if outcome is not None or error_code is None
                        else "crash"
                        if error_code == INTERNAL_ERROR
                        else "error"
                    )
                if draft.transport is not None:
                    record["transport"] = draft.transport
                if draft.tenant is not None:
                    record["tenant"] = draft.tenant
            else:
                draft.optional_fields(record)
            return orjson.dumps(record, option=orjson.OPT_APPEND_NEWLINE)
        except orjson.JSONEncodeError:
            return None


# What ``params.get("_meta", _ABSENT)`` gives for params without the key (never a parsed value).
_ABSENT = object()


def _apply_privacy(
    draft: Draft,
    privacy: Privacy,
    memo: LineMemo,
    params: dict[str, Any] | None,
    capabilities: dict[str, Any] | None,
) -> tuple[Any, orjson.Fragment | None]:
    """The params and the capabilities as Privacy.apply leaves them, from the draft's values."""
    small = draft.bytes_in <= privacy.max_params_bytes
    meta: Any = _ABSENT if params is None else params.get("_meta", _ABSENT)
    seen = None
    if meta is not _ABSENT:
        encoded = orjson.dumps(meta)
        seen = memo.metas.get(encoded)
        if seen is None:
            seen = memo.meta_seen(encoded, meta, capabilities, privacy)
    if capabilities is None:
        declared = None
    elif (
        # Where ``_meta`` holds these very capabilities, they were judged with it: no
        # second encoding.
        seen is not None
        and seen.declared is not None
        and meta[seen.capabilities_key] is capabilities
    ):
        declared = seen.declared
    else:
        declared = memo.declared_of(capabilities, privacy)
    # Harmless: the body is within the cap, the capabilities too, and no key in them or in
    # the params (``_meta`` included) is sensitive. Then the params are written without
    # ``_meta``.
    harmless = small and (declared is None or declared.fits)
    if harmless and declared is not None:
        if declared.sensitive is None:
            declared.sensitive = privacy.has_sensitive_key(capabilities)
        harmless = not declared.sensitive
    written: Any = params
    if harmless and params is not None:
        if seen is not None:
            # A shallow copy without the key writes the same as Privacy.apply's own copy.
            written = params.copy()
            del written["_meta"]
            if seen.sensitive is None:
                seen.sensitive = privacy.has_sensitive_key({"_meta": meta})
            harmless = not seen.sensitive
        harmless = harmless and (
            privacy.known_harmless(written) or not privacy.has_sensitive_key(written)
        )
    if not (harmless and privacy.keep_params):
        written = privacy.clean(params, measured=small)
    if declared is None:
        return written, None
    if harmless:
        return written, declared.encoded
    if declared.cleaned is None:
        cleaned = privacy.clean_capabilities(capabilities)
        declared.cleaned = orjson.Fragment(orjson.dumps(cleaned))
    return written, declared.cleaned


def _template(draft: Draft, capabilities: orjson.Fragment | None) -> dict[str, Any]:
    # Draft.request_record's keys in its order; LineWriter.line sets the values that change.
    client = {
        "name": clip(draft.client_name),
        "version": clip(draft.client_version),
        "capabilities": capabilities,
    }
    return {
        "v": SCHEMA_VERSION,
        "kind": "request",
        "time": None,
        "request_id": None,
        "verb": clip(draft.verb),
        "path": clip(draft.path),
        "status": None,
        "era": draft.era,
        "protocol_version": orjson.Fragment(
            orjson.dumps({"header": clip(draft.header_version), "body": clip(draft.body_version)})
        ),
        "method": None,
        "jsonrpc_id": None,
        "notification": None,
        "client": orjson.Fragment(orjson.dumps(client)),
        "session_id": None,
        "subject": None,
        "user_agent": clip(draft.user_agent),
        "client_address": None,
        "error": None,
        "duration_ms": None,
        "bytes_in": None,
        "bytes_out": None,
        "streaming": None,
        "params": None,
    }


# Added to a float in [0, 2**51) and taken away again, 1.5 * 2**52 leaves it rounded to the
# nearest integer: the sum's last bit is worth 1. Float arithmetic only, no call.
_TO_INTEGER = 6755399441055744.0


def rounded_ms(seconds: float) -> float:
    """``round(seconds * 1000, 3)``, the same float, mostly without round()'s decimal string."""
    milliseconds = seconds * 1000
    # Below 2**31 microseconds, the product below is off by less than 2**-22: rounding it to an
    # integer gives round()'s answer unless it lies that close to a half. There, at zero (round()
    # keeps the sign of -0.0) and out of that range, round() decides. ``whole`` is a whole
    # number below 2**31: divided as a float, it gives what dividing round()'s int gives.
    micros = milliseconds * 1000.0
    if 0.0 < micros < 2147483648.0:
        whole = micros + _TO_INTEGER - _TO_INTEGER
        if -0.4999 < micros - whole < 0.4999:
            return whole / 1000.0
    return round(milliseconds, 3)
